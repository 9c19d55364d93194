/* test_chat_prefix.c -- prefix caching across the turns of a chat (issue
 * 22): are the tokens of request k's prompt a prefix of request k+1's?
 *
 * In a multi-turn chat, request k+1's messages are request k's (user turns
 * 1..k) plus the assistant's answer and a new user turn; both are rendered
 * with the generation prompt and tokenized as the gateway does
 * (tokenizer_chat_apply, then tokenizer_encode_special). The KV blocks of
 * request k can serve request k+1 only as far as their tokens agree.
 *
 * - Text: for every family, the text of request k is a prefix of the text
 *   of request k+1 (chat.c renders an earlier turn the same whatever
 *   follows it).
 * - Tokens: every family on six vocabularies (kjv2m, the tiny model's;
 *   llama.cpp's llama-spm, phi-3 and gpt-2 fixtures; and two made here from
 *   GPT-2's tokens and merges with control tokens added: Llama 3's with the
 *   llama-bpe pre-tokenizer, ChatML's with Qwen2's), three conversations of
 *   four user turns (with and without a system message; answers that start
 *   or end with spaces, tabs, newlines or punctuation). Request k's tokens
 *   are a prefix of request k+1's except where `divergences` lists it, and
 *   there they part exactly at the last token of request k's prompt: the
 *   generation prompt's final newline(s) and the answer's first characters
 *   become one word of the pre-tokenizer.
 * - The answer's own tokens: kjv2m answers request 1 greedily (F32, as
 *   test_forward checks it against run.c), its text goes back as request
 *   2's assistant message, and the test asserts where the runner's tokens
 *   (prompt + generated) part from request 2's prompt: nowhere in chatml
 *   and zephyr; at the first generated token in plain ("Assistant: " +
 *   an answer that starts with a space), llama3 (strip() takes the space of
 *   the first token "▁And"), llama2 and mistral (" " before an answer that
 *   starts without one; bytes that were no UTF-8 come back as U+FFFD).
 *
 * Without ../shared only the text part runs and the test exits 77. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

#define MAX_IDS     4096
#define N_TURNS     4
#define N_FAMILIES  6
#define N_GENERATED 24

/* ---- conversations ---- */

/* A chat of N_TURNS user turns; answers[i] follows users[i] (the last
 * user turn is the one waiting for an answer). */
struct conversation {
    const char *system; /* or NULL */
    const char *users[N_TURNS];
    const char *answers[N_TURNS - 1];
};

static const struct conversation conversations[] = {
    {"You are a helpful assistant.",
     {"Hello!", "What is 2+2?", "Say it in words.\n", "And 3+3?"},
     {"Hi there. How can I help?", "4", "Four!\n"}},
    {NULL,
     {"In the beginning", "Go on.", "Why?", "Thanks"},
     {" And God said, Let there be light:", "and there was light.\n\n", "Because... "}},
    {NULL, {"List two.", "More?", "ok", " x "}, {"\n- one\n- two", " \n  three:", "\tfour?\n\n"}},
};
#define N_CONVERSATIONS (int)(sizeof(conversations) / sizeof(conversations[0]))

/* The messages of turns 1..k of c (the answers of turns 1..k-1), with
 * answer_k as the assistant message after turn k when it is not NULL (and
 * then user turn k+1). Returns the message count. */
static int messages_of(const struct conversation *c, int k, const char *answer_k,
                       struct tokenizer_chat_message *m) {
    int n = 0;
    if (c->system) m[n++] = (struct tokenizer_chat_message){.role = "system", .content = c->system};
    for (int i = 0; i < k; i++) {
        m[n++] = (struct tokenizer_chat_message){.role = "user", .content = c->users[i]};
        if (i + 1 < k)
            m[n++] = (struct tokenizer_chat_message){.role = "assistant", .content = c->answers[i]};
    }
    if (answer_k) {
        m[n++] = (struct tokenizer_chat_message){.role = "assistant", .content = answer_k};
        m[n++] = (struct tokenizer_chat_message){.role = "user", .content = c->users[k]};
    }
    return n;
}

/* ---- vocabularies ---- */

struct vocabulary {
    const char *name;
    struct tokenizer *tok;
    char bos[64], eos[64]; /* the spellings the gateway gives the templates */
};

/* The vocabulary's spelling of token id ("" for -1), as the gateway's. */
static void spelling(const struct tokenizer *tok, int id, char *out, size_t size) {
    size_t len = 0;
    const char *piece = id >= 0 ? tokenizer_piece(tok, id, &len) : NULL;
    snprintf(out, size, "%.*s", piece ? (int)len : 0, piece ? piece : "");
}

static void set_vocabulary(struct vocabulary *v, const char *name, struct tokenizer *tok) {
    v->name = name;
    v->tok = tok;
    spelling(tok, tok ? tokenizer_bos(tok) : -1, v->bos, sizeof(v->bos));
    spelling(tok, tok ? tokenizer_eos(tok) : -1, v->eos, sizeof(v->eos));
}

/* GPT-2's vocabulary (the GGUF at gpt2_path) with control tokens added
 * after its 50257 and the pre-tokenizer called pre: a stand-in for Llama 3's
 * and Qwen2's vocabularies, which differ in their merges but split text
 * and cut out control tokens the same way. bos and eos index specials
 * (-1: GPT-2's own). Written to a scratch file, loaded, removed. */
static struct tokenizer *gpt2_with_specials(const char *gpt2_path, const char *pre,
                                            const char *const *specials, int n_specials, int bos,
                                            int eos, const char *scratch) {
    char err[256], path[1024];
    struct gguf_file *file;
    if (gguf_open(&file, gpt2_path, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s", err);
        return NULL;
    }
    const struct gguf_kv *tokens = gguf_find(file, "tokenizer.ggml.tokens");
    const struct gguf_kv *types = gguf_find(file, "tokenizer.ggml.token_type");
    if (!tokens || !types || tokens->value.v.arr.n != types->value.v.arr.n) {
        CHECK_MSG(0, "%s: no tokens or token types", gpt2_path);
        gguf_close(file);
        return NULL;
    }
    struct gguf_writer *writer = gguf_writer_create();
    static const char *const replaced[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                                           "tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id",
                                           "tokenizer.ggml.eos_token_id"};
    for (uint64_t i = 0; i < file->n_kv; i++) {
        char key[128];
        snprintf(key, sizeof(key), "%.*s", (int)file->kv[i].key.len, file->kv[i].key.data);
        int keep = 1;
        for (size_t r = 0; r < sizeof(replaced) / sizeof(replaced[0]); r++)
            if (strcmp(key, replaced[r]) == 0) keep = 0;
        if (keep) gguf_writer_set_value(writer, key, &file->kv[i].value);
    }
    uint64_t n = tokens->value.v.arr.n, total = n + (uint64_t)n_specials;
    const char **texts = malloc(total * sizeof(*texts));
    uint64_t *lengths = malloc(total * sizeof(*lengths));
    int32_t *type_ids = malloc(total * sizeof(*type_ids));
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_string s = gguf_array_string(&tokens->value, i);
        texts[i] = s.data;
        lengths[i] = s.len;
        type_ids[i] = (int32_t)gguf_array_element(&types->value, i).v.i64;
    }
    for (int i = 0; i < n_specials; i++) {
        texts[n + (uint64_t)i] = specials[i];
        lengths[n + (uint64_t)i] = strlen(specials[i]);
        type_ids[n + (uint64_t)i] = 3; /* CONTROL */
    }
    gguf_writer_set_string_array(writer, "tokenizer.ggml.tokens", texts, lengths, total);
    gguf_writer_set_array(writer, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, type_ids, total);
    gguf_writer_set_string(writer, "tokenizer.ggml.pre", pre);
    gguf_writer_set_u32(writer, "tokenizer.ggml.bos_token_id",
                        (uint32_t)(bos >= 0 ? (int)n + bos : 50256));
    gguf_writer_set_u32(writer, "tokenizer.ggml.eos_token_id",
                        (uint32_t)(eos >= 0 ? (int)n + eos : 50256));
    test_tmp_path(path, sizeof(path), scratch);
    int rc = gguf_writer_write(writer, path, err, sizeof(err));
    CHECK_MSG(rc == 0, "write %s: %s", path, err);
    gguf_writer_free(writer);
    gguf_close(file);
    free(texts);
    free(lengths);
    free(type_ids);
    struct tokenizer *tok = rc == 0 ? test_load_vocabulary(path) : NULL;
    remove(path);
    return tok;
}

/* ---- rendering ---- */

/* The prompt text of messages m[0..n) with the generation prompt (*text
 * malloc'd), or NULL after a failed check. */
static char *render_text(enum tokenizer_chat_template family, const struct vocabulary *v,
                         const struct tokenizer_chat_message *m, int n) {
    char err[256], *text = NULL;
    size_t len = 0;
    int rc = tokenizer_chat_apply(family, m, n, 1, v->bos, v->eos, &text, &len, err, sizeof(err));
    CHECK_MSG(rc == 0, "%s: %s", tokenizer_chat_template_name(family), err);
    return rc == 0 ? text : NULL;
}

/* The prompt tokens of messages m[0..n), as the gateway makes them; -1
 * after a failed check. */
static int render_ids(enum tokenizer_chat_template family, const struct vocabulary *v,
                      const struct tokenizer_chat_message *m, int n, int *ids) {
    char err[256];
    char *text = render_text(family, v, m, n);
    if (!text) return -1;
    int add_bos = tokenizer_adds_bos(v->tok) && !tokenizer_chat_template_writes_bos(family);
    int n_ids = -1;
    int rc = tokenizer_encode_special(v->tok, text, strlen(text), add_bos, ids, MAX_IDS, &n_ids,
                                      err, sizeof(err));
    CHECK_MSG(rc == 0, "%s %s: %s", v->name, tokenizer_chat_template_name(family), err);
    free(text);
    return rc == 0 ? n_ids : -1;
}

/* Index of the first difference of a[0..na) and b[0..nb), or na when a is
 * a prefix of b. */
static int first_difference(const int *a, int na, const int *b, int nb) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

static void print_tokens(const struct tokenizer *tok, const char *label, const int *ids, int from,
                         int to) {
    fprintf(stderr, "  %s:", label);
    for (int i = from < 0 ? 0 : from; i < to; i++) {
        size_t len = 0;
        const char *piece = tokenizer_piece(tok, ids[i], &len);
        fprintf(stderr, " %d'", ids[i]);
        for (size_t j = 0; piece && j < len; j++) {
            if (piece[j] == '\n')
                fputs("\\n", stderr);
            else
                fputc(piece[j], stderr);
        }
        fputc('\'', stderr);
    }
    fputc('\n', stderr);
}

/* ---- text prefixes ---- */

static void check_text_prefixes(void) {
    const struct vocabulary any = {"any", NULL, "<s>", "</s>"}, *v = &any;
    struct tokenizer_chat_message m[2 * N_TURNS + 1];
    int held = 0, total = 0;
    for (int f = 0; f < N_FAMILIES; f++) {
        enum tokenizer_chat_template family = (enum tokenizer_chat_template)f;
        for (int c = 0; c < N_CONVERSATIONS; c++) {
            for (int k = 1; k < N_TURNS; k++) {
                const struct conversation *conv = &conversations[c];
                char *before = render_text(family, v, m, messages_of(conv, k, NULL, m));
                char *after = render_text(family, v, m, messages_of(conv, k + 1, NULL, m));
                int prefix = before && after && strncmp(before, after, strlen(before)) == 0;
                CHECK_MSG(prefix,
                          "%s, conversation %d: the text of turn %d is no prefix of turn "
                          "%d's\n  \"%s\"\n  \"%s\"",
                          tokenizer_chat_template_name(family), c, k, k + 1, before ? before : "",
                          after ? after : "");
                held += prefix;
                total++;
                free(before);
                free(after);
            }
        }
    }
    printf("text: %d/%d prompts are a text prefix of the next turn's\n", held, total);
}

/* ---- token prefixes ---- */

/* Where request k's tokens are not a prefix of request k+1's: the last
 * token of request k's prompt, `was`, is `becomes` in request k+1's. */
struct divergence {
    const char *vocabulary;
    enum tokenizer_chat_template family;
    int conversation, k;
    int was, becomes;
};

/* GPT-2's pre-tokenizer splits "\n\nHi" as "\n" "\n" "Hi" but a final
 * "\n\n" as one word, so Llama 3's generation prompt (ending in "\n\n")
 * loses its last token to every answer; Llama 3's own pre-tokenizer keeps
 * "\n\n" whole (\s*[\r\n]+). Llama 3's and Qwen2's pre-tokenizers join
 * the "\n" ending ChatML's and Zephyr's generation prompt with an answer
 * that starts with "\n": those two families keep the answer's whitespace,
 * Llama 3's strips it. (An answer starting " \n" makes the word "\n \n"
 * too, but GPT-2's merges leave it "\n" " " "\n"; a vocabulary with a
 * token for it would part there as well.) The SPM vocabularies have no
 * piece that spans the boundary. (198 is "\n", 628 "\n\n".) */
static const struct divergence divergences[] = {
    {"gpt-2", TOKENIZER_CHAT_LLAMA3, 0, 1, 628, 198},
    {"gpt-2", TOKENIZER_CHAT_LLAMA3, 0, 2, 628, 198},
    {"gpt-2", TOKENIZER_CHAT_LLAMA3, 0, 3, 628, 198},
    {"gpt-2", TOKENIZER_CHAT_LLAMA3, 1, 1, 628, 198},
    {"gpt-2", TOKENIZER_CHAT_LLAMA3, 1, 2, 628, 198},
    {"gpt-2", TOKENIZER_CHAT_LLAMA3, 1, 3, 628, 198},
    {"gpt-2", TOKENIZER_CHAT_LLAMA3, 2, 1, 628, 198},
    {"gpt-2", TOKENIZER_CHAT_LLAMA3, 2, 2, 628, 198},
    {"gpt-2", TOKENIZER_CHAT_LLAMA3, 2, 3, 628, 198},
    {"llama3-like", TOKENIZER_CHAT_CHATML, 2, 1, 198, 628},
    {"llama3-like", TOKENIZER_CHAT_ZEPHYR, 2, 1, 198, 628},
    {"qwen2-like", TOKENIZER_CHAT_CHATML, 2, 1, 198, 628},
    {"qwen2-like", TOKENIZER_CHAT_ZEPHYR, 2, 1, 198, 628},
};
#define N_DIVERGENCES (int)(sizeof(divergences) / sizeof(divergences[0]))

static const struct divergence *
expected_divergence(const char *vocabulary, enum tokenizer_chat_template family, int c, int k) {
    for (int i = 0; i < N_DIVERGENCES; i++) {
        const struct divergence *d = &divergences[i];
        if (!strcmp(d->vocabulary, vocabulary) && d->family == family && d->conversation == c &&
            d->k == k)
            return d;
    }
    return NULL;
}

/* Request k against request k+1 for every family and conversation;
 * returns the number of divergences found (each checked). */
static int check_token_prefixes(const struct vocabulary *v) {
    static int before[MAX_IDS], after[MAX_IDS];
    struct tokenizer_chat_message m[2 * N_TURNS + 1];
    int held[N_FAMILIES] = {0}, found = 0;
    for (int f = 0; f < N_FAMILIES; f++) {
        enum tokenizer_chat_template family = (enum tokenizer_chat_template)f;
        const char *name = tokenizer_chat_template_name(family);
        for (int c = 0; c < N_CONVERSATIONS; c++) {
            for (int k = 1; k < N_TURNS; k++) {
                const struct conversation *conv = &conversations[c];
                int nb = render_ids(family, v, m, messages_of(conv, k, NULL, m), before);
                int na = render_ids(family, v, m, messages_of(conv, k + 1, NULL, m), after);
                if (nb < 0 || na < 0) continue;
                int at = first_difference(before, nb, after, na);
                const struct divergence *d = expected_divergence(v->name, family, c, k);
                int as_expected =
                    d ? at == nb - 1 && before[at] == d->was && after[at] == d->becomes : at == nb;
                CHECK_MSG(as_expected,
                          "%s %s, conversation %d, turn %d: tokens part at %d of %d (expected "
                          "%d)",
                          v->name, name, c, k, at, nb, d ? nb - 1 : nb);
                if (!as_expected) {
                    print_tokens(v->tok, "turn k  ", before, at - 3, nb);
                    print_tokens(v->tok, "turn k+1", after, at - 3, at + 4 < na ? at + 4 : na);
                }
                held[f] += at == nb;
                found += at < nb;
            }
        }
    }
    printf("%-11s tokens: request k a prefix of request k+1 (of %d):", v->name,
           N_CONVERSATIONS * (N_TURNS - 1));
    for (int f = 0; f < N_FAMILIES; f++)
        printf(" %s %d", tokenizer_chat_template_name((enum tokenizer_chat_template)f), held[f]);
    printf("\n");
    return found;
}

/* ---- the answer's tokens: kjv2m ---- */

/* What the runner holds after answering request 1 of a conversation,
 * against request 2's prompt: they part at prompt + `generated_equal`
 * (N_GENERATED when every generated token agrees). */
struct answer_case {
    enum tokenizer_chat_template family;
    int conversation; /* in chats below */
    int n_prompt;
    int first_generated; /* the runner's first answer token */
    int generated_equal; /* generated tokens equal to request 2's */
    int request2_token;  /* request 2's token where they part */
};

static const struct conversation chats[] = {
    {NULL, {"In the beginning", "And God said"}, {NULL}},
    {"Thou art a scribe.", {"And the LORD said unto Moses,", "Go on."}, {NULL}},
};

/* kjv2m ids: 2 </s>, 13 "\n", 299 "▁I", 300 "▁And", 322 "▁for", 335 "▁e", 349
 * "el", 962 "▁", 987 "A", 12 "\t", 140 byte 0x89 (not UTF-8 alone; the
 * reply carries U+FFFD, bytes 242 194 192). */
static const struct answer_case answer_cases[] = {
    {TOKENIZER_CHAT_PLAIN, 0, 20, 299, 0, 962},
    {TOKENIZER_CHAT_LLAMA2, 0, 23, 140, 0, 962},
    {TOKENIZER_CHAT_LLAMA3, 0, 74, 300, 0, 987},
    {TOKENIZER_CHAT_CHATML, 0, 41, 300, N_GENERATED, 63},
    {TOKENIZER_CHAT_MISTRAL, 0, 24, 140, 0, 962},
    {TOKENIZER_CHAT_ZEPHYR, 0, 27, 300, N_GENERATED, 2},
    {TOKENIZER_CHAT_PLAIN, 1, 32, 322, 0, 962},
    {TOKENIZER_CHAT_LLAMA2, 1, 53, 349, 0, 335},
    {TOKENIZER_CHAT_LLAMA3, 1, 122, 300, 0, 987},
    {TOKENIZER_CHAT_CHATML, 1, 73, 300, N_GENERATED, 63},
    {TOKENIZER_CHAT_MISTRAL, 1, 34, 12, 0, 962},
    {TOKENIZER_CHAT_ZEPHYR, 1, 49, 300, N_GENERATED, 2},
};
#define N_ANSWER_CASES (int)(sizeof(answer_cases) / sizeof(answer_cases[0]))

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Greedy answer to ids[0..n_prompt): up to N_GENERATED tokens appended to
 * ids, their text (as the gateway streams it: no space dropped) in text.
 * Returns the number generated, or -1. */
static int answer(struct engine *engine, const struct tokenizer *tok, int *ids, int n_prompt,
                  char *text, size_t size) {
    char err[512];
    struct kv_sequence seq = {0};
    struct tokenizer_stream stream;
    int n = n_prompt, vocab = tokenizer_vocab_size(tok);
    size_t len = 0;
    if (kv_sequence_reserve(&engine->kv, &seq, n_prompt + N_GENERATED) != 0) return -1;
    int rc = engine_run_sequence(engine, &seq, ids, n_prompt, 0, err, sizeof(err));
    CHECK_MSG(rc == 0, "%s", err);
    tokenizer_stream_init(&stream, tok, 0);
    while (rc == 0 && n < n_prompt + N_GENERATED) {
        int next = argmax(engine->logits, vocab);
        ids[n++] = next;
        if (next == tokenizer_eos(tok)) break;
        len += tokenizer_stream_push(&stream, next, text + len, size - 1 - len);
        rc = engine_run_sequence(engine, &seq, &ids[n - 1], 1, n - 1, err, sizeof(err));
        CHECK_MSG(rc == 0, "%s", err);
    }
    len += tokenizer_stream_flush(&stream, text + len, size - 1 - len);
    text[len] = '\0';
    kv_sequence_release(&engine->kv, &seq);
    return rc == 0 ? n - n_prompt : -1;
}

/* The first bytes of text on one line (newlines and tabs escaped). */
static void print_start(const char *text) {
    size_t i = 0;
    for (; text[i] && (i < 40 || ((unsigned char)text[i] & 0xC0) == 0x80); i++) {
        if (text[i] == '\n')
            fputs("\\n", stdout);
        else if (text[i] == '\t')
            fputs("\\t", stdout);
        else
            putchar(text[i]);
    }
    if (text[i]) fputs("...", stdout);
}

static void check_answers(const char *model_path) {
    char err[512], text[2048];
    struct model *model;
    struct tokenizer *tok = NULL;
    if (model_load(&model, model_path, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s", err);
        return;
    }
    if (tokenizer_load_gguf(&tok, model->gguf, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s", err);
        model_free(model);
        return;
    }
    struct vocabulary v;
    set_vocabulary(&v, "kjv2m", tok);
    struct engine engine;
    struct engine_params params = {
        .n_threads = 2, .max_tokens = 128, .kv_block_size = 16, .kv_type = TENSOR_F32};
    if (engine_init(&engine, model, &params, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s", err);
        tokenizer_free(tok);
        model_free(model);
        return;
    }
    static int cached[MAX_IDS], next[MAX_IDS];
    struct tokenizer_chat_message m[4];
    int same = 0;
    for (int i = 0; i < N_ANSWER_CASES; i++) {
        const struct answer_case *a = &answer_cases[i];
        const char *name = tokenizer_chat_template_name(a->family);
        const struct conversation *chat = &chats[a->conversation];
        int n_prompt = render_ids(a->family, &v, m, messages_of(chat, 1, NULL, m), cached);
        int n_generated =
            n_prompt > 0 ? answer(&engine, tok, cached, n_prompt, text, sizeof(text)) : -1;
        if (n_generated < 0) continue;
        int n_next = render_ids(a->family, &v, m, messages_of(chat, 1, text, m), next);
        int n_cached = n_prompt + n_generated;
        int at = first_difference(cached, n_cached, next, n_next);
        printf("kjv2m %-7s prompt %3d + %d generated: %2d re-tokenize the same; answer \"", name,
               n_prompt, n_generated, at - n_prompt);
        print_start(text);
        printf("\"\n");
        int as_expected = n_prompt == a->n_prompt && n_generated == N_GENERATED &&
                          cached[n_prompt] == a->first_generated &&
                          at == n_prompt + a->generated_equal && at < n_next &&
                          next[at] == a->request2_token;
        CHECK_MSG(as_expected, "kjv2m %s, chat %d: prompt %d, first token %d, parted at %d", name,
                  a->conversation, n_prompt, cached[n_prompt], at);
        if (!as_expected) {
            print_tokens(tok, "runner   ", cached, n_prompt - 2, n_cached);
            print_tokens(tok, "request 2", next, n_prompt - 2, n_cached + 2);
        }
        /* plain: request 2 has one "▁" more, then the same tokens */
        if (a->family == TOKENIZER_CHAT_PLAIN)
            CHECK(n_next > n_cached && memcmp(next + n_prompt + 1, cached + n_prompt,
                                              (size_t)n_generated * sizeof(int)) == 0);
        same += at == n_cached;
    }
    printf("kjv2m: %d/%d greedy answers re-tokenize to the generated tokens\n", same,
           N_ANSWER_CASES);
    engine_free(&engine);
    tokenizer_free(tok);
    model_free(model);
}

int main(void) {
    check_text_prefixes();
    char kjv2m[1024], spm[1024], phi3[1024], gpt2[1024];
    test_shared_path(kjv2m, sizeof(kjv2m), "models/kjv2m-f32.gguf");
    test_shared_path(spm, sizeof(spm), "fixtures/tokenizer/ggml-vocab-llama-spm.gguf");
    test_shared_path(phi3, sizeof(phi3), "fixtures/tokenizer/ggml-vocab-phi-3.gguf");
    test_shared_path(gpt2, sizeof(gpt2), "fixtures/tokenizer/ggml-vocab-gpt-2.gguf");
    if (!test_require_file(kjv2m) || !test_require_file(spm) || !test_require_file(phi3) ||
        !test_require_file(gpt2))
        return test_failures ? test_status("test_chat_prefix") : TEST_SKIP_CODE;

    static const char *const llama3_specials[] = {"<|begin_of_text|>", "<|end_of_text|>",
                                                  "<|start_header_id|>", "<|end_header_id|>",
                                                  "<|eot_id|>"};
    static const char *const chatml_specials[] = {"<|im_start|>", "<|im_end|>"};
    struct vocabulary vocabularies[6];
    set_vocabulary(&vocabularies[0], "kjv2m", test_load_vocabulary(kjv2m));
    set_vocabulary(&vocabularies[1], "llama-spm", test_load_vocabulary(spm));
    set_vocabulary(&vocabularies[2], "phi-3", test_load_vocabulary(phi3));
    set_vocabulary(&vocabularies[3], "gpt-2", test_load_vocabulary(gpt2));
    set_vocabulary(
        &vocabularies[4], "llama3-like",
        gpt2_with_specials(gpt2, "llama-bpe", llama3_specials, 5, 0, 4, "chat_prefix_llama3.gguf"));
    set_vocabulary(
        &vocabularies[5], "qwen2-like",
        gpt2_with_specials(gpt2, "qwen2", chatml_specials, 2, -1, 1, "chat_prefix_qwen2.gguf"));
    int found = 0;
    for (int i = 0; i < 6; i++) {
        if (!vocabularies[i].tok) continue;
        found += check_token_prefixes(&vocabularies[i]);
        tokenizer_free(vocabularies[i].tok);
    }
    CHECK_MSG(found == N_DIVERGENCES, "%d divergences found, %d listed", found, N_DIVERGENCES);
    check_answers(kjv2m);
    return test_status("test_chat_prefix");
}
