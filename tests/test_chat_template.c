/* test_chat_template.c -- chat templates and special-token encoding.
 *
 * - Every template family formats the same conversation (system, user,
 *   assistant, user, generation prompt) into exactly the text written out
 *   here from the family's published Hugging Face template; stripping,
 *   role checks and their error messages.
 * - Families are detected from excerpts of real templates; names map both
 *   ways and an unknown name is refused with the list of valid ones.
 * - tokenizer_encode_special on a small vocabulary written here (which
 *   special token wins where spellings overlap) and on the llama.cpp
 *   vocabularies of ../shared/fixtures/tokenizer: specials become their ids,
 *   the rest matches tokenizer_encode of the pieces, and a text without
 *   specials (every .inp case) gives exactly tokenizer_encode's ids. Without
 *   ../shared those parts are skipped and the test exits 77 after the rest
 *   passed. Prints the time encode_special takes against encode. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "tokenizer/tokenizer.h"

#define MAX_IDS 8192

/* ---- templates ---- */

static const struct tokenizer_chat_message conversation[4] = {
    {.role = "system", .content = "You are a helpful assistant."},
    {.role = "user", .content = "Hello!"},
    {.role = "assistant", .content = "Hi there. How can I help?"},
    {.role = "user", .content = "What is 2+2?"},
};

/* One family's rendering of conversation, as its reference template gives it. */
struct template_case {
    enum tokenizer_chat_template family;
    const char *bos, *eos;
    const char *expected;          /* with the generation prompt */
    const char *generation_prompt; /* the tail that add_generation_prompt = 0 drops */
};

static const struct template_case template_cases[] = {
    {TOKENIZER_CHAT_LLAMA2, "<s>", "</s>",
     "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! [/INST] Hi there. How "
     "can I help? </s><s>[INST] What is 2+2? [/INST]",
     ""},
    {TOKENIZER_CHAT_LLAMA3, "<|begin_of_text|>", "<|eot_id|>",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
     "assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|><|start_"
     "header_id|>assistant<|end_header_id|>\n\nHi there. How can I "
     "help?<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is "
     "2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    {TOKENIZER_CHAT_CHATML, NULL, "<|im_end|>",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_"
     "end|>\n<|im_start|>assistant\nHi there. How can I help?<|im_end|>\n<|im_start|>user\nWhat "
     "is 2+2?<|im_end|>\n<|im_start|>assistant\n",
     "<|im_start|>assistant\n"},
    {TOKENIZER_CHAT_MISTRAL, "<s>", "</s>",
     "<s> [INST] You are a helpful assistant.\n\nHello! [/INST] Hi there. How can I help?</s> "
     "[INST] What is 2+2? [/INST]",
     ""},
    {TOKENIZER_CHAT_ZEPHYR, "<s>", "</s>",
     "<|system|>\nYou are a helpful assistant.</s>\n<|user|>\nHello!</s>\n<|assistant|>\nHi "
     "there. How can I help?</s>\n<|user|>\nWhat is 2+2?</s>\n<|assistant|>\n",
     "<|assistant|>\n"},
    {TOKENIZER_CHAT_PLAIN, "<s>", "</s>",
     "System: You are a helpful assistant.\nUser: Hello!\nAssistant: Hi there. How can I "
     "help?\nUser: What is 2+2?\nAssistant:",
     "Assistant:"},
};

#define N_CASES (int)(sizeof(template_cases) / sizeof(template_cases[0]))

/* Formats messages and compares with expected; returns 1 if they match. */
static int check_format(enum tokenizer_chat_template family,
                        const struct tokenizer_chat_message *messages, int n, int generation,
                        const char *bos, const char *eos, const char *expected) {
    char err[256] = "", *text = NULL;
    size_t len = 0;
    int rc = tokenizer_chat_apply(family, messages, n, generation, bos, eos, &text, &len, err,
                                  sizeof(err));
    int same = rc == 0 && text && len == strlen(expected) && strcmp(text, expected) == 0;
    CHECK_MSG(same, "%s (generation prompt %d): %s\n  expected \"%s\"\n  got      \"%s\"",
              tokenizer_chat_template_name(family), generation, rc ? err : "", expected,
              text ? text : "(null)");
    free(text);
    return same;
}

static void check_families(void) {
    int passed = 0;
    for (int i = 0; i < N_CASES; i++) {
        const struct template_case *c = &template_cases[i];
        passed += check_format(c->family, conversation, 4, 1, c->bos, c->eos, c->expected);
        /* Without the generation prompt the tail goes (Llama 2 and Mistral
         * have none: their text ends in " [/INST]" either way). */
        size_t keep = strlen(c->expected) - strlen(c->generation_prompt);
        char *without = malloc(keep + 1);
        memcpy(without, c->expected, keep);
        without[keep] = '\0';
        CHECK(strcmp(c->expected + keep, c->generation_prompt) == 0);
        passed += check_format(c->family, conversation, 4, 0, c->bos, c->eos, without);
        free(without);
        CHECK(tokenizer_chat_template_writes_bos(c->family) ==
              (c->bos && strncmp(c->expected, c->bos, strlen(c->bos)) == 0));
    }
    printf("templates: %d/%d conversations formatted as the reference templates do\n", passed,
           2 * N_CASES);
}

/* Conversations that exercise one rule each. */
static void check_rules(void) {
    /* Without a system message. */
    const struct tokenizer_chat_message user_only[1] = {{.role = "user", .content = "Hello!"}};
    check_format(TOKENIZER_CHAT_LLAMA2, user_only, 1, 1, "<s>", "</s>", "<s>[INST] Hello! [/INST]");
    check_format(TOKENIZER_CHAT_MISTRAL, user_only, 1, 1, "<s>", "</s>",
                 "<s> [INST] Hello! [/INST]");
    /* Llama 2 strips the whole first block: an empty user message takes the
     * "\n\n" after <</SYS>> with it. */
    const struct tokenizer_chat_message blank[2] = {{.role = "system", .content = " Be brief. "},
                                                    {.role = "user", .content = " \n "}};
    check_format(TOKENIZER_CHAT_LLAMA2, blank, 2, 1, "<s>", "</s>",
                 "<s>[INST] <<SYS>>\n Be brief. \n<</SYS>> [/INST]");
    /* Llama 3 trims each content like Python's str.strip(): Unicode spaces
     * (U+00A0, U+2003, U+3000) too, but not a byte that is not UTF-8. */
    const struct tokenizer_chat_message spaced[3] = {
        {.role = "user", .content = " \t\xc2\xa0Hi\xe2\x80\x83\xe3\x80\x80\n"},
        {.role = "assistant", .content = NULL},
        {.role = "user", .content = "\xff "}};
    check_format(TOKENIZER_CHAT_LLAMA3, spaced, 3, 0, "<|begin_of_text|>", NULL,
                 "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_"
                 "header_id|>assistant<|end_header_id|>\n\n<|eot_id|><|start_header_id|>user<|end_"
                 "header_id|>\n\n\xff<|eot_id|>");
    /* ChatML and Zephyr keep whitespace; roles may repeat. */
    const struct tokenizer_chat_message repeated[2] = {{.role = "user", .content = " a "},
                                                       {.role = "user", .content = "b\n"}};
    check_format(TOKENIZER_CHAT_CHATML, repeated, 2, 0, NULL, NULL,
                 "<|im_start|>user\n a <|im_end|>\n<|im_start|>user\nb\n<|im_end|>\n");
    check_format(TOKENIZER_CHAT_ZEPHYR, repeated, 2, 1, NULL, "</s>",
                 "<|user|>\n a </s>\n<|user|>\nb\n</s>\n<|assistant|>\n");
    /* A lone system message: Llama 2 renders nothing, Mistral only BOS. */
    check_format(TOKENIZER_CHAT_LLAMA2, conversation, 1, 1, "<s>", "</s>", "");
    check_format(TOKENIZER_CHAT_MISTRAL, conversation, 1, 1, "<s>", "</s>", "<s>");
}

/* tokenizer_chat_apply fails with a message containing each of parts. */
static void check_refused(enum tokenizer_chat_template family,
                          const struct tokenizer_chat_message *messages, int n,
                          const char *const *parts) {
    char err[256] = "", *text = (char *)"not touched";
    size_t len = 7;
    int rc =
        tokenizer_chat_apply(family, messages, n, 1, "<s>", "</s>", &text, &len, err, sizeof(err));
    CHECK_MSG(rc == -1 && text == NULL && len == 0, "%s accepted a bad conversation",
              tokenizer_chat_template_name(family));
    if (rc == 0) free(text);
    for (int i = 0; parts[i]; i++)
        CHECK_MSG(strstr(err, parts[i]) != NULL, "error \"%s\" lacks \"%s\"", err, parts[i]);
}

static void check_errors(void) {
    const struct tokenizer_chat_message tool[3] = {{.role = "user", .content = "2+2?"},
                                                   {.role = "assistant", .content = "calling"},
                                                   {.role = "tool", .content = "4"}};
    for (int family = TOKENIZER_CHAT_PLAIN; family <= TOKENIZER_CHAT_ZEPHYR; family++)
        check_refused(
            (enum tokenizer_chat_template)family, tool, 3,
            (const char *const[]){"message 2", "'tool'", "system, user and assistant", NULL});
    const struct tokenizer_chat_message no_role[1] = {{.role = NULL, .content = "hi"}};
    check_refused(TOKENIZER_CHAT_CHATML, no_role, 1,
                  (const char *const[]){"chatml", "message 0 has no role", NULL});
    check_refused(TOKENIZER_CHAT_LLAMA3, conversation, 0,
                  (const char *const[]){"llama3", "no messages", NULL});
    /* Llama 2 and Mistral: roles must alternate after an optional system. */
    const struct tokenizer_chat_message twice[3] = {{.role = "system", .content = "s"},
                                                    {.role = "user", .content = "a"},
                                                    {.role = "user", .content = "b"}};
    check_refused(TOKENIZER_CHAT_LLAMA2, twice, 3,
                  (const char *const[]){"llama2", "message 2 has role 'user'",
                                        "'assistant' was expected", NULL});
    const struct tokenizer_chat_message late_system[3] = {{.role = "user", .content = "a"},
                                                          {.role = "assistant", .content = "b"},
                                                          {.role = "system", .content = "c"}};
    check_refused(TOKENIZER_CHAT_MISTRAL, late_system, 3,
                  (const char *const[]){"mistral", "message 2 has role 'system'", NULL});
    const struct tokenizer_chat_message assistant_first[1] = {
        {.role = "assistant", .content = "a"}};
    check_refused(TOKENIZER_CHAT_LLAMA2, assistant_first, 1,
                  (const char *const[]){"message 0", "'user' was expected", NULL});
    check_refused((enum tokenizer_chat_template)99, conversation, 4,
                  (const char *const[]){"99 is not a template family", NULL});
}

static void check_names(void) {
    static const char *const names[] = {"plain", "llama2", "llama3", "chatml", "mistral", "zephyr"};
    char err[256];
    for (int i = 0; i < 6; i++) {
        enum tokenizer_chat_template family = TOKENIZER_CHAT_PLAIN;
        CHECK(tokenizer_chat_template_from_name(names[i], &family, err, sizeof(err)) == 0);
        CHECK(family == (enum tokenizer_chat_template)i);
        const char *name = tokenizer_chat_template_name(family);
        CHECK(name && strcmp(name, names[i]) == 0);
    }
    enum tokenizer_chat_template family = TOKENIZER_CHAT_ZEPHYR;
    CHECK(tokenizer_chat_template_from_name("vicuna", &family, err, sizeof(err)) == -1);
    CHECK(family == TOKENIZER_CHAT_ZEPHYR);
    CHECK_MSG(strcmp(err, "unknown chat template 'vicuna' (valid names: plain, llama2, llama3, "
                          "chatml, mistral, zephyr)") == 0,
              "got \"%s\"", err);
    CHECK(tokenizer_chat_template_from_name("Llama2", &family, err, sizeof(err)) == -1);
    CHECK(tokenizer_chat_template_from_name(NULL, &family, err, sizeof(err)) == -1);
    CHECK(strstr(err, "'(null)'") != NULL);
    CHECK(tokenizer_chat_template_name((enum tokenizer_chat_template)6) == NULL);
    CHECK(tokenizer_chat_template_name((enum tokenizer_chat_template) - 1) == NULL);
}

/* Excerpts of the distinctive parts of published templates. */
static void check_detection(void) {
    static const struct {
        const char *jinja;
        enum tokenizer_chat_template family;
    } cases[] = {
        /* meta-llama/Llama-2-7b-chat-hf */
        {"{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
         "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
         "{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
         "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
         "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
         "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + "
         "'[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
         "' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
         TOKENIZER_CHAT_LLAMA2},
        /* meta-llama/Meta-Llama-3-8B-Instruct */
        {"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
         "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] "
         "| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content "
         "%}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
         "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
         TOKENIZER_CHAT_LLAMA3},
        /* Llama 3.1's longer template */
        {"{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 "
         "Jul 2024\" %}\n{%- endif %}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" "
         "}}\n{{- \"Cutting Knowledge Date: December 2023\\n\" }}",
         TOKENIZER_CHAT_LLAMA3},
        /* Qwen/Qwen2-7B-Instruct */
        {"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
         "'<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_"
         "start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor "
         "%}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
         TOKENIZER_CHAT_CHATML},
        /* mistralai/Mistral-7B-Instruct-v0.2 */
        {"{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = "
         "messages[0]['content'] %}\n{{- bos_token }}\n{%- for message in loop_messages %}\n    "
         "{%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is "
         "defined %}\n            {{- ' [INST] ' + system_message + '\\n\\n' + "
         "message['content'] + ' [/INST]' }}\n    {%- elif message['role'] == 'assistant' %}\n  "
         "      {{- ' ' + message['content'] + eos_token}}",
         TOKENIZER_CHAT_MISTRAL},
        /* mistralai/Mistral-7B-Instruct-v0.1 */
        {"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ "
         "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' "
         "%}{{ message['content'] + eos_token}}{% endif %}{% endfor %}",
         TOKENIZER_CHAT_MISTRAL},
        /* HuggingFaceH4/zephyr-7b-beta */
        {"{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
         "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ "
         "'<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == "
         "'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif "
         "%}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n"
         "{% endfor %}",
         TOKENIZER_CHAT_ZEPHYR},
        /* Phi-3 looks like Zephyr but ends turns with <|end|>: not supported. */
        {"{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}",
         TOKENIZER_CHAT_PLAIN},
        /* Phi-4: <|im_start|> with <|im_sep|> is not ChatML. */
        {"{{'<|im_start|>' + message['role'] + '<|im_sep|>' + message['content'] + "
         "'<|im_end|>'}}",
         TOKENIZER_CHAT_PLAIN},
        /* Gemma */
        {"{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}",
         TOKENIZER_CHAT_PLAIN},
        {"", TOKENIZER_CHAT_PLAIN},
    };
    int n = (int)(sizeof(cases) / sizeof(cases[0]));
    for (int i = 0; i < n; i++) {
        enum tokenizer_chat_template got = tokenizer_chat_template_detect(cases[i].jinja);
        CHECK_MSG(got == cases[i].family, "template %d detected as %s, expected %s", i,
                  tokenizer_chat_template_name(got), tokenizer_chat_template_name(cases[i].family));
    }
    CHECK(tokenizer_chat_template_detect(NULL) == TOKENIZER_CHAT_PLAIN);
}

/* ---- special-token encoding ---- */

static void print_ids(const char *label, const int *ids, int n) {
    fprintf(stderr, "  %s (%d):", label, n);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* encode_special(text) must give expected[0..n_expected). */
static void check_special(const struct tokenizer *tok, const char *label, const char *text,
                          size_t len, int add_bos, const int *expected, int n_expected) {
    static int got[MAX_IDS];
    char err[256] = "";
    int n = -1;
    int rc = tokenizer_encode_special(tok, text, len, add_bos, got, MAX_IDS, &n, err, sizeof(err));
    if (rc == 0 && n == n_expected && memcmp(got, expected, (size_t)n * sizeof(int)) == 0) return;
    fprintf(stderr, "%s: encode_special(\"%.60s\") FAILED %s\n", label, text, rc ? err : "");
    print_ids("expected", expected, n_expected);
    print_ids("got     ", got, n > 0 && n < MAX_IDS ? n : 0);
    test_failures++;
}

/* Builds the expected ids of a text from its parts: a part with id >= 0
 * is that token, otherwise its text goes through tokenizer_encode. */
struct part {
    int id;
    const char *text;
};

static int expected_ids(const struct tokenizer *tok, const struct part *parts, int n_parts,
                        int *ids, int max_ids) {
    int n = 0;
    char err[256];
    for (int i = 0; i < n_parts; i++) {
        int added = 0;
        if (parts[i].id >= 0) {
            ids[n++] = parts[i].id;
        } else if (tokenizer_encode(tok, parts[i].text, strlen(parts[i].text), 0, ids + n,
                                    max_ids - n, &added, err, sizeof(err)) != 0) {
            CHECK_MSG(0, "encode \"%s\": %s", parts[i].text, err);
            return 0;
        }
        n += added;
    }
    return n;
}

/* A vocabulary of single letters and four special spellings that overlap,
 * to pin down which one wins. Written to a scratch GGUF. */
static void check_overlaps(void) {
    static const char *const texts[] = {"<unk>", "<s>", "</s>", "a",  "b",   "c",  "d",
                                        "x",     "y",   "z",    "ab", "bcd", "xy", "yz"};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 3, 4, 4};
    enum { A = 3, B, C, D, X, Y, Z, AB, BCD, XY, YZ, N_TOKENS };
    uint64_t lengths[N_TOKENS];
    for (int i = 0; i < N_TOKENS; i++) lengths[i] = strlen(texts[i]);
    char path[1024], err[256];
    test_tmp_path(path, sizeof(path), "chat_template_vocab.gguf");
    struct gguf_writer *writer = gguf_writer_create();
    gguf_writer_set_string(writer, "tokenizer.ggml.model", "llama");
    gguf_writer_set_string_array(writer, "tokenizer.ggml.tokens", texts, lengths, N_TOKENS);
    gguf_writer_set_array(writer, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, N_TOKENS);
    gguf_writer_set_bool(writer, "tokenizer.ggml.add_space_prefix", 0);
    int rc = gguf_writer_write(writer, path, err, sizeof(err));
    gguf_writer_free(writer);
    CHECK_MSG(rc == 0, "write %s: %s", path, err);
    struct tokenizer *tok = rc == 0 ? test_load_vocabulary(path) : NULL;
    remove(path);
    if (!tok) return;
    /* "bcd" is longer than "ab", so it is cut out first although "ab"
     * starts further left (llama.cpp's order, not leftmost-longest). */
    check_special(tok, "overlap", "abcd", 4, 0, (const int[]){A, BCD}, 2);
    /* Equal lengths: the lower id ("xy") goes first. */
    check_special(tok, "overlap", "xyz", 3, 0, (const int[]){XY, Z}, 2);
    check_special(tok, "overlap", "yzxy", 4, 0, (const int[]){YZ, XY}, 2);
    check_special(tok, "overlap", "ababcdab", 8, 1, (const int[]){1, AB, A, BCD, AB}, 5);
    check_special(tok, "overlap", "<s>dc</s><unk>", 14, 0, (const int[]){1, D, C, 2, 0}, 5);
    check_special(tok, "overlap", "dcba", 4, 0, (const int[]){D, C, B, A}, 4);
    tokenizer_free(tok);
}

/* Every .inp case of a fixture has no special spelling: encode_special must
 * equal encode, with and without BOS. */
static void check_plain_texts(const struct tokenizer *tok, const char *inp_path) {
    FILE *f = fopen(inp_path, "rb");
    static char inp[65536];
    static int expected[MAX_IDS];
    size_t size = f ? fread(inp, 1, sizeof(inp) - 1, f) : 0;
    if (f) fclose(f);
    CHECK_MSG(size > 0, "cannot read %s", inp_path);
    inp[size] = '\0';
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int n_cases = 0;
    char err[256];
    for (char *text = inp, *hit; (hit = strstr(text, sep)) != NULL; text = hit + strlen(sep)) {
        size_t len = (size_t)(hit - text);
        for (int add_bos = 0; add_bos <= 1; add_bos++) {
            int n = 0;
            CHECK(tokenizer_encode(tok, text, len, add_bos, expected, MAX_IDS, &n, err,
                                   sizeof(err)) == 0);
            check_special(tok, inp_path, text, len, add_bos, expected, n);
        }
        n_cases++;
    }
    CHECK_MSG(n_cases == 46, "%s: %d cases", inp_path, n_cases);
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Microseconds per call of encode (special = 0) or encode_special. */
static double time_encode(const struct tokenizer *tok, const char *text, int special, int calls) {
    static int ids[MAX_IDS];
    char err[256];
    int n;
    double start = seconds_now();
    for (int i = 0; i < calls; i++) {
        if (special)
            tokenizer_encode_special(tok, text, strlen(text), 1, ids, MAX_IDS, &n, err,
                                     sizeof(err));
        else
            tokenizer_encode(tok, text, strlen(text), 1, ids, MAX_IDS, &n, err, sizeof(err));
    }
    return (seconds_now() - start) * 1e6 / calls;
}

static void check_llama_spm(const char *path) {
    struct tokenizer *tok = test_load_vocabulary(path);
    if (!tok) return;
    static int expected[MAX_IDS];
    /* "Hello world" is 15043 3186 (fixtures README). */
    check_special(tok, "llama-spm", "<s>Hello world</s>", 18, 0, (const int[]){1, 15043, 3186, 2},
                  4);
    check_special(tok, "llama-spm", "<s>Hello world</s>", 18, 1,
                  (const int[]){1, 1, 15043, 3186, 2}, 5);
    check_special(tok, "llama-spm", "<unk>", 5, 0, (const int[]){0}, 1);
    check_special(tok, "llama-spm", "<s><s></s>", 10, 0, (const int[]){1, 1, 2}, 3);
    check_special(tok, "llama-spm", "", 0, 1, (const int[]){1}, 1);
    check_special(tok, "llama-spm", "", 0, 0, (const int[]){-1}, 0);
    /* The Llama 2 prompt: after each special the text restarts with the
     * space prefix, as llama.cpp encodes it. */
    char err[256], *prompt;
    size_t prompt_len;
    if (tokenizer_chat_apply(TOKENIZER_CHAT_LLAMA2, conversation, 4, 1, "<s>", "</s>", &prompt,
                             &prompt_len, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "llama2 prompt: %s", err);
        tokenizer_free(tok);
        return;
    }
    const struct part parts[] = {
        {1, NULL},
        {-1, "[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! [/INST] Hi there. "
             "How can I help? "},
        {2, NULL},
        {1, NULL},
        {-1, "[INST] What is 2+2? [/INST]"}};
    int n = expected_ids(tok, parts, 5, expected, MAX_IDS);
    check_special(tok, "llama-spm llama2 prompt", prompt, prompt_len, 0, expected, n);
    /* Too little room: -1, the count needed, and a message saying so. */
    int small[4], n_small = 0;
    CHECK(tokenizer_encode_special(tok, prompt, prompt_len, 0, small, 4, &n_small, err,
                                   sizeof(err)) == -1);
    CHECK(n_small == n);
    CHECK_MSG(strstr(err, "room for 4") != NULL, "got \"%s\"", err);
    /* A spelling that is not exactly a special token stays text. */
    n = expected_ids(tok, (const struct part[]){{-1, "< s>Hi</s "}}, 1, expected, MAX_IDS);
    check_special(tok, "llama-spm", "< s>Hi</s ", 10, 0, expected, n);

    /* Cost: a long prompt, and the vocabulary scan alone (a 2-byte text). */
    size_t long_len = 80 * prompt_len + 1;
    char *long_prompt = malloc(long_len);
    long_prompt[0] = '\0';
    for (int i = 0; i < 80; i++) strcat(long_prompt, prompt);
    int calls = 200;
    double plain = time_encode(tok, long_prompt, 0, calls / 10);
    double special = time_encode(tok, long_prompt, 1, calls / 10);
    double scan = time_encode(tok, "Hi", 1, calls) - time_encode(tok, "Hi", 0, calls);
    printf("llama-spm (32000 tokens): %zu-byte prompt: encode %.0f us, encode_special %.0f us; "
           "special-token scan %.1f us per call\n",
           strlen(long_prompt), plain, special, scan);
    free(long_prompt);
    free(prompt);
    tokenizer_free(tok);
}

static void check_phi3(const char *path) {
    struct tokenizer *tok = test_load_vocabulary(path);
    if (!tok) return;
    static int expected[MAX_IDS];
    /* CONTROL (<|user|> 32010 ...), USER_DEFINED (</s> 2) and UNKNOWN
     * ([PAD32011]) spellings all count. */
    const struct part parts[] = {{32010, NULL}, {-1, "Hi"},    {32007, NULL},
                                 {32001, NULL}, {-1, "Hello"}, {2, NULL},
                                 {32000, NULL}, {32011, NULL}, {-1, "x<|end"}};
    int n = expected_ids(tok, parts, 9, expected, MAX_IDS);
    const char *text = "<|user|>Hi<|end|><|assistant|>Hello</s><|endoftext|>[PAD32011]x<|end";
    check_special(tok, "phi-3", text, strlen(text), 0, expected, n);
    tokenizer_free(tok);

    /* Its GGUF carries Phi-3's own template, which no family here matches. */
    char err[256];
    struct gguf_file *file;
    struct gguf_string jinja;
    if (gguf_open(&file, path, err, sizeof(err)) != 0) return;
    if (gguf_get_string(file, "tokenizer.chat_template", &jinja, err, sizeof(err)) == 0) {
        char *copy = strndup(jinja.data, (size_t)jinja.len);
        CHECK(tokenizer_chat_template_detect(copy) == TOKENIZER_CHAT_PLAIN);
        free(copy);
    } else {
        CHECK_MSG(0, "%s", err);
    }
    gguf_close(file);
}

static void check_gpt2(const char *path) {
    struct tokenizer *tok = test_load_vocabulary(path);
    if (!tok) return;
    /* "Hello world" 15496 995 and " Hello world" 18435 995 (fixtures README). */
    const char *text = "Hello world<|endoftext|> Hello world<|endoftext|>";
    check_special(tok, "gpt-2", text, strlen(text), 0,
                  (const int[]){15496, 995, 50256, 18435, 995, 50256}, 6);
    tokenizer_free(tok);
}

int main(void) {
    check_families();
    check_rules();
    check_errors();
    check_names();
    check_detection();
    check_overlaps();
    static const char *const vocabs[] = {"llama-spm", "phi-3", "gpt-2"};
    int present = 1;
    for (int i = 0; i < 3; i++) {
        char name[128], path[1024], inp[1100];
        snprintf(name, sizeof(name), "fixtures/tokenizer/ggml-vocab-%s.gguf", vocabs[i]);
        test_shared_path(path, sizeof(path), name);
        if (!test_require_file(path)) {
            present = 0;
            continue;
        }
        if (i == 0) check_llama_spm(path);
        if (i == 1) check_phi3(path);
        if (i == 2) check_gpt2(path);
        struct tokenizer *tok = test_load_vocabulary(path);
        snprintf(inp, sizeof(inp), "%s.inp", path);
        if (tok) check_plain_texts(tok, inp);
        tokenizer_free(tok);
    }
    if (test_failures == 0 && !present) return TEST_SKIP_CODE;
    return test_status("test_chat_template");
}
