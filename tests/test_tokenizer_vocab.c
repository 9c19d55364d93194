/* test_tokenizer_vocab.c -- the tokenizer on small vocabularies written by
 * the test itself (no ../shared needed): what bad GGUF keys and bad
 * tokenizer.bin files are told, SPM tie-breaking, the three BPE
 * pre-tokenizers, invalid UTF-8 round trips and the max_ids contract. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tokenizer/tokenizer.h"

/* A vocabulary to write: token texts with scores and types. */
struct vocab {
    const char *model; /* tokenizer.ggml.model */
    const char *texts[300];
    uint64_t lengths[300];
    float scores[300];
    int32_t types[300];
    int n;
};

static void vocab_add(struct vocab *v, const char *text, size_t len, float score, int type) {
    v->texts[v->n] = text;
    v->lengths[v->n] = len;
    v->scores[v->n] = score;
    v->types[v->n] = type;
    v->n++;
}

/* SPM: <unk> <s> </s>, the 256 byte tokens, then extra pieces. */
static void vocab_spm(struct vocab *v, const char *const *pieces, const float *scores, int n) {
    static char bytes[256][8];
    v->model = "llama";
    v->n = 0;
    vocab_add(v, "<unk>", 5, 0, 2);
    vocab_add(v, "<s>", 3, 0, 3);
    vocab_add(v, "</s>", 4, 0, 3);
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof(bytes[b]), "<0x%02X>", (unsigned)b);
        vocab_add(v, bytes[b], 6, 0, 6);
    }
    for (int i = 0; i < n; i++) vocab_add(v, pieces[i], strlen(pieces[i]), scores[i], 1);
}

/* GPT-2 byte-level: token b is byte b's mapped character, then extras. */
static void vocab_bpe(struct vocab *v, const char *const *pieces, int n) {
    static char chars[256][4];
    v->model = "gpt2";
    v->n = 0;
    for (int b = 0; b < 256; b++) {
        unsigned cp = (unsigned)b;
        if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE))
            cp = b <= 0x20   ? 0x100u + (unsigned)b
                 : b <= 0xA0 ? 0x121u + (unsigned)(b - 0x7F)
                             : 0x143u;
        size_t len = 1;
        if (cp < 0x80) {
            chars[b][0] = (char)cp;
        } else {
            chars[b][0] = (char)(0xC0 | (cp >> 6));
            chars[b][1] = (char)(0x80 | (cp & 0x3F));
            len = 2;
        }
        vocab_add(v, chars[b], len, 0, 1);
    }
    for (int i = 0; i < n; i++) vocab_add(v, pieces[i], strlen(pieces[i]), 0, 1);
}

/* A writer holding v; the caller may override keys before writing. */
static struct gguf_writer *vocab_writer(const struct vocab *v) {
    struct gguf_writer *w = gguf_writer_create();
    gguf_writer_set_string(w, "general.architecture", "llama");
    gguf_writer_set_string(w, "tokenizer.ggml.model", v->model);
    gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", v->texts, v->lengths, (uint64_t)v->n);
    gguf_writer_set_array(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->scores, (uint64_t)v->n);
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types,
                          (uint64_t)v->n);
    return w;
}

/* Writes w, loads its vocabulary; returns the tokenizer or NULL with err. */
static struct tokenizer *write_and_load(struct gguf_writer *w, const char *name, char *err,
                                        size_t errlen) {
    char path[1024];
    struct gguf_file *file;
    struct tokenizer *tok = NULL;
    test_tmp_path(path, sizeof(path), name);
    int rc = gguf_writer_write(w, path, err, errlen);
    gguf_writer_free(w);
    CHECK_MSG(rc == 0, "write %s: %s", path, err);
    if (rc != 0) return NULL;
    if (gguf_open(&file, path, err, errlen) != 0) {
        CHECK_MSG(0, "gguf_open %s: %s", path, err);
        remove(path);
        return NULL;
    }
    if (tokenizer_load_gguf(&tok, file, err, errlen) != 0) tok = NULL;
    gguf_close(file);
    remove(path);
    return tok;
}

/* Expects loading w to fail with a message containing want. */
static void expect_gguf_error(struct gguf_writer *w, const char *name, const char *want) {
    char err[512] = "";
    struct tokenizer *tok = write_and_load(w, name, err, sizeof(err));
    CHECK_MSG(tok == NULL, "%s: loaded a bad vocabulary", name);
    CHECK_MSG(strstr(err, want) != NULL, "%s: error \"%s\" lacks \"%s\"", name, err, want);
    CHECK_MSG(strstr(err, name) != NULL, "%s: error \"%s\" does not name the file", name, err);
    tokenizer_free(tok);
}

static int encode(const struct tokenizer *tok, const char *text, int *ids, int max) {
    char err[256];
    int n = -1;
    if (tokenizer_encode(tok, text, strlen(text), 0, ids, max, &n, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "encode \"%s\": %s", text, err);
        return -1;
    }
    return n;
}

static void check_gguf_errors(void) {
    static struct vocab v;
    const char *pieces[] = {"a", "b"};
    const float scores[] = {-1, -2};
    const float short_scores[3] = {0};
    const float float_types[261] = {0};
    vocab_spm(&v, pieces, scores, 2);

    struct gguf_writer *w = vocab_writer(&v);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 999);
    expect_gguf_error(w, "bad-bos.gguf", "tokenizer.ggml.bos_token_id = 999 is out of range");

    w = vocab_writer(&v);
    gguf_writer_set_array(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, short_scores, 3);
    expect_gguf_error(w, "short-scores.gguf",
                      "tokenizer.ggml.scores has 3 entries but there are 261 tokens");

    w = vocab_writer(&v);
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_FLOAT32, float_types, 261);
    expect_gguf_error(w, "float-types.gguf",
                      "tokenizer.ggml.token_type must be an array of int32, not an array of "
                      "float32");

    v.types[259] = 9;
    w = vocab_writer(&v);
    expect_gguf_error(w, "bad-type.gguf", "tokenizer.ggml.token_type[259] = 9");
    v.types[259] = 6; /* BYTE, but "a" is no <0xXX> */
    w = vocab_writer(&v);
    expect_gguf_error(w, "bad-byte.gguf", "token 259 has type BYTE but its text 'a'");
    v.types[259] = 1;

    w = vocab_writer(&v);
    gguf_writer_set_string(w, "tokenizer.ggml.model", "bert");
    expect_gguf_error(w, "bert.gguf", "tokenizer.ggml.model 'bert' is not supported");

    w = vocab_writer(&v);
    gguf_writer_set_u32(w, "tokenizer.ggml.tokens", 5);
    expect_gguf_error(w, "scalar-tokens.gguf",
                      "tokenizer.ggml.tokens must be an array of string, not uint32");

    w = gguf_writer_create();
    gguf_writer_set_string(w, "tokenizer.ggml.model", "llama");
    expect_gguf_error(w, "no-tokens.gguf", "tokenizer.ggml.tokens is missing");

    static struct vocab b;
    vocab_bpe(&b, NULL, 0);
    w = vocab_writer(&b);
    expect_gguf_error(w, "no-merges.gguf", "tokenizer.ggml.merges is missing");

    const char *bad_merge[] = {"ab"};
    w = vocab_writer(&b);
    gguf_writer_set_string_array(w, "tokenizer.ggml.merges", bad_merge, NULL, 1);
    expect_gguf_error(w, "bad-merge.gguf", "tokenizer.ggml.merges[0] 'ab' is not 'left right'");

    const char *merge[] = {"a b"};
    w = vocab_writer(&b);
    gguf_writer_set_string_array(w, "tokenizer.ggml.merges", merge, NULL, 1);
    gguf_writer_set_string(w, "tokenizer.ggml.pre", "chatglm-bpe");
    expect_gguf_error(w, "bad-pre.gguf", "tokenizer.ggml.pre 'chatglm-bpe' is not supported");
}

static void check_spm(void) {
    static struct vocab v;
    char err[512];
    /* Equal scores: the leftmost pair merges first, so "aba" is ab|a. */
    const char *pieces[] = {"a", "b", "ab", "ba", "\xe2\x96\x81", "\xe2\x96\x81\x61"};
    const float scores[] = {-1, -1, -5, -5, -2, -9};
    vocab_spm(&v, pieces, scores, 6);
    const int a = 259, b_ = 260, ab = 261, ba = 262, space = 263, space_a = 264;
    struct gguf_writer *w = vocab_writer(&v);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 0xFFFFFFFFu);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 0);
    struct tokenizer *tok = write_and_load(w, "spm.gguf", err, sizeof(err));
    CHECK_MSG(tok != NULL, "spm.gguf: %s", err);
    if (!tok) return;
    CHECK(tokenizer_bos(tok) == 1 && tokenizer_eos(tok) == -1 && tokenizer_adds_bos(tok) == 0);
    int ids[64];
    /* "▁aba": ▁a (-9) loses to ab and ba (-5); ab is leftmost. */
    int n = encode(tok, "aba", ids, 64);
    CHECK(n == 3 && ids[0] == space && ids[1] == ab && ids[2] == a);
    n = encode(tok, "bab", ids, 64);
    CHECK(n == 3 && ids[0] == space && ids[1] == ba && ids[2] == b_);
    /* Unknown characters and invalid UTF-8 fall back to byte tokens. */
    n = encode(tok, "a\xc3\xa9\xff", ids, 64);
    CHECK(n == 4 && ids[0] == space_a && ids[1] == 0xC3 + 3 && ids[2] == 0xA9 + 3 &&
          ids[3] == 0xFF + 3);
    CHECK(encode(tok, "", ids, 64) == 0);

    /* max_ids too small: -1, and the count tells how many are needed. */
    n = -1;
    CHECK(tokenizer_encode(tok, "aba", 3, 1, ids, 3, &n, err, sizeof(err)) == -1);
    CHECK(n == 4 && strstr(err, "needs 4 tokens") != NULL);
    CHECK(ids[0] == 1 && ids[1] == space && ids[2] == ab);
    CHECK(tokenizer_encode(tok, "aba", 3, 1, ids, 4, &n, err, sizeof(err)) == 0 && n == 4);
    tokenizer_free(tok);
}

/* "12345" under three pre-tokenizers, with merges 3+4, 1+2, 12+3, 4+5. */
static void check_pretokenizers(void) {
    static struct vocab v;
    const char *pieces[] = {"12", "34", "123", "45"};
    const char *merges[] = {"3 4", "1 2", "12 3", "4 5"};
    const int t12 = 256, t34 = 257, t123 = 258, t45 = 259;
    vocab_bpe(&v, pieces, 4);
    const struct {
        const char *pre;
        int n;
        int ids[5];
    } cases[] = {
        {NULL, 3, {t12, t34, '5'}}, /* GPT-2: one word "12345" */
        {"gpt-2", 3, {t12, t34, '5'}},
        {"llama-bpe", 2, {t123, t45}},           /* digits in threes: "123" "45" */
        {"qwen2", 5, {'1', '2', '3', '4', '5'}}, /* single digits */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char err[512];
        struct gguf_writer *w = vocab_writer(&v);
        gguf_writer_set_string_array(w, "tokenizer.ggml.merges", merges, NULL, 4);
        if (cases[c].pre) gguf_writer_set_string(w, "tokenizer.ggml.pre", cases[c].pre);
        struct tokenizer *tok = write_and_load(w, "bpe.gguf", err, sizeof(err));
        CHECK_MSG(tok != NULL, "bpe.gguf (%s): %s", cases[c].pre, err);
        if (!tok) continue;
        CHECK(tokenizer_kind(tok) == TOKENIZER_BPE);
        CHECK(tokenizer_bos(tok) == -1 && tokenizer_adds_bos(tok) == 0);
        int ids[64];
        int n = encode(tok, "12345", ids, 64);
        CHECK_MSG(n == cases[c].n && memcmp(ids, cases[c].ids, (size_t)n * sizeof(int)) == 0,
                  "pre %s: got %d ids, first %d", cases[c].pre ? cases[c].pre : "(none)", n,
                  n > 0 ? ids[0] : -1);
        /* Invalid UTF-8 and control bytes survive a round trip. */
        const char text[] = "\xff\xfe 12\x80\x01 \xe2\x82 x";
        n = encode(tok, text, ids, 64);
        char decoded[64];
        size_t total = 0;
        for (int i = 0; i < n; i++) {
            size_t len;
            const char *bytes = tokenizer_token_bytes(tok, ids[i], &len);
            memcpy(decoded + total, bytes, len);
            total += len;
        }
        CHECK_MSG(total == sizeof(text) - 1 && memcmp(decoded, text, total) == 0,
                  "pre %s: invalid UTF-8 does not round-trip", cases[c].pre);
        CHECK(tokenizer_encode(tok, "12345", 5, 1, ids, 64, &n, err, sizeof(err)) == -1);
        CHECK_MSG(strstr(err, "no BOS token") != NULL, "%s", err);
        tokenizer_free(tok);
    }
}

/* Writes a llama2.c tokenizer file of the given raw bytes. */
static void write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(data, 1, size, f) == size);
    fclose(f);
}

/* Appends a token record at buf + *at: score, the length the file claims
 * (len) and the text_len bytes actually there. */
static void put_token(unsigned char *buf, size_t *at, float score, uint32_t len, const void *text,
                      size_t text_len) {
    memcpy(buf + *at, &score, 4);
    memcpy(buf + *at + 4, &len, 4);
    memcpy(buf + *at + 8, text, text_len);
    *at += 8 + text_len;
}

static void check_llama2c_errors(void) {
    char path[1024], err[512];
    test_tmp_path(path, sizeof(path), "tok.bin");
    unsigned char buf[256];
    uint32_t max_len = 10;
    size_t at = 4;
    memcpy(buf, &max_len, 4);
    put_token(buf, &at, 0, 5, "<unk>", 5);
    put_token(buf, &at, 0, 5, "\n<s>\n", 5);
    put_token(buf, &at, 0, 6, "\n</s>\n", 6);
    put_token(buf, &at, -1, 2, " a", 2);
    size_t good = at;
    struct tokenizer *tok = NULL;

    write_file(path, buf, good);
    CHECK(tokenizer_load_llama2c(&tok, path, 4, err, sizeof(err)) == 0);
    if (tok) {
        size_t len;
        const char *piece = tokenizer_piece(tok, 3, &len);
        CHECK(len == 2 && memcmp(piece, " a", 2) == 0);
        CHECK(tokenizer_find(tok, "\xe2\x96\x81\x61", 4) == 3);
        int ids[4];
        CHECK(encode(tok, "a", ids, 4) == 1 && ids[0] == 3);
        tokenizer_free(tok);
        tok = NULL;
    }

    /* One token more than the file holds. */
    CHECK(tokenizer_load_llama2c(&tok, path, 5, err, sizeof(err)) == -1 && tok == NULL);
    CHECK_MSG(strstr(err, path) && strstr(err, "token 4: the file ends at byte"), "%s", err);

    /* A length over max_token_length. */
    at = good;
    put_token(buf, &at, 0, 200, "xy", 2);
    write_file(path, buf, at);
    CHECK(tokenizer_load_llama2c(&tok, path, 5, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, path) && strstr(err, "token 4: length 200 exceeds max_token_length"),
              "%s", err);

    /* A length past the end of the file. */
    max_len = 1000;
    memcpy(buf, &max_len, 4);
    write_file(path, buf, at);
    CHECK(tokenizer_load_llama2c(&tok, path, 5, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "token 4: length 200 exceeds the file (2 bytes left"), "%s", err);

    max_len = 0;
    memcpy(buf, &max_len, 4);
    write_file(path, buf, at);
    CHECK(tokenizer_load_llama2c(&tok, path, 5, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "max_token_length 0 is out of range"), "%s", err);

    write_file(path, buf, 2);
    CHECK(tokenizer_load_llama2c(&tok, path, 5, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "2 bytes is too short"), "%s", err);
    remove(path);

    CHECK(tokenizer_load_llama2c(&tok, path, 5, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, path) && strstr(err, "cannot open"), "%s", err);
}

/* 1 if s[0..len) is well-formed UTF-8 (Unicode Table 3-7). */
static int valid_utf8(const unsigned char *s, size_t len) {
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        size_t n = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        if (n == 0 || n > len - i) return 0;
        unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        unsigned char hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        for (size_t k = 1; k < n; k++) {
            if (s[i + k] < (k == 1 ? lo : 0x80) || s[i + k] > (k == 1 ? hi : 0xBF)) return 0;
        }
        i += n;
    }
    return 1;
}

/* Encodes text, decodes it plainly and through a stream, and checks the
 * round trip (with SPM's space prefix) and that the stream output is valid
 * UTF-8 that equals the text whenever the text itself is. */
static void check_round_trip(const struct tokenizer *tok, const char *text, size_t len,
                             int case_index) {
    int ids[512], n = 0;
    char err[256], plain[1024], streamed[2048], piece[256];
    if (tokenizer_encode(tok, text, len, 0, ids, 512, &n, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "case %d: %s", case_index, err);
        return;
    }
    int spm = tokenizer_kind(tok) == TOKENIZER_SPM;
    int prefix = spm && len > 0;
    size_t n_plain = 0, n_streamed = 0;
    struct tokenizer_stream stream;
    tokenizer_stream_init(&stream, tok, 1);
    for (int i = 0; i <= n; i++) {
        size_t bytes_len = 0;
        const char *bytes = i < n ? tokenizer_token_bytes(tok, ids[i], &bytes_len) : "";
        memcpy(plain + n_plain, bytes, bytes_len);
        n_plain += bytes_len;
        size_t got = i < n ? tokenizer_stream_push(&stream, ids[i], piece, sizeof(piece))
                           : tokenizer_stream_flush(&stream, piece, sizeof(piece));
        memcpy(streamed + n_streamed, piece, got);
        n_streamed += got;
    }
    /* Like llama.cpp, SPM turns spaces into "▁" before splitting characters,
     * so a space right after a truncated sequence is swallowed into it and
     * comes back as "▁" bytes: the exact round trip holds for valid text. */
    int valid = valid_utf8((const unsigned char *)text, len);
    if (valid || !spm)
        CHECK_MSG(n_plain == len + (size_t)prefix && memcmp(plain + prefix, text, len) == 0,
                  "%s case %d: decode(encode(s)) != s", spm ? "spm" : "bpe", case_index);
    CHECK_MSG(valid_utf8((const unsigned char *)streamed, n_streamed),
              "case %d: stream output is not valid UTF-8", case_index);
    if (valid)
        CHECK_MSG(n_streamed == len && memcmp(streamed, text, len) == 0,
                  "case %d: stream output differs from the text", case_index);
}

static uint32_t next_random(uint32_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    return *state;
}

/* Random texts built from valid and broken UTF-8 fragments round-trip
 * through both schemes (deterministic xorshift, 500 texts). */
static void check_random_texts(void) {
    static struct vocab spm_vocab, bpe_vocab;
    const char *spm_pieces[] = {"a", "b", "ab", "\xe2\x96\x81", "\xe2\x96\x81\x61"};
    const float spm_scores[] = {-1, -1, -2, -3, -4};
    const char *bpe_pieces[] = {"ab", "\xc4\xa0\x61"};
    const char *merges[] = {"a b", "\xc4\xa0 a"};
    char err[512];
    vocab_spm(&spm_vocab, spm_pieces, spm_scores, 5);
    vocab_bpe(&bpe_vocab, bpe_pieces, 2);
    struct tokenizer *spm =
        write_and_load(vocab_writer(&spm_vocab), "rt-spm.gguf", err, sizeof(err));
    CHECK_MSG(spm != NULL, "%s", err);
    struct gguf_writer *w = vocab_writer(&bpe_vocab);
    gguf_writer_set_string_array(w, "tokenizer.ggml.merges", merges, NULL, 2);
    struct tokenizer *bpe = write_and_load(w, "rt-bpe.gguf", err, sizeof(err));
    CHECK_MSG(bpe != NULL, "%s", err);
    static const char *const fragments[] = {"a",
                                            "b",
                                            "ab",
                                            " ",
                                            "  ",
                                            "\n",
                                            "\t",
                                            "12",
                                            "'s",
                                            "\xc3\xa9",
                                            "\xe2\x82\xac",
                                            "\xf0\x9f\xa6\x99",
                                            "\xe2\x82",
                                            "\xff",
                                            "\x80",
                                            "\xed\xa0\x80",
                                            "\xf4\x90\x80\x80"};
    const int n_fragments = (int)(sizeof(fragments) / sizeof(fragments[0]));
    uint32_t state = 12345;
    for (int c = 0; c < 500 && spm && bpe; c++) {
        char text[256];
        size_t len = 0;
        int count = (int)(next_random(&state) % 24);
        for (int f = 0; f < count; f++) {
            const char *fragment = fragments[next_random(&state) % (uint32_t)n_fragments];
            while (*fragment) text[len++] = *fragment++;
        }
        check_round_trip(spm, text, len, c);
        check_round_trip(bpe, text, len, c);
    }
    tokenizer_free(spm);
    tokenizer_free(bpe);
}

int main(void) {
    check_gguf_errors();
    check_spm();
    check_pretokenizers();
    check_llama2c_errors();
    check_random_texts();
    return test_status("test_tokenizer_vocab");
}
