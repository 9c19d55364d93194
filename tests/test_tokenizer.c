/* test_tokenizer.c -- conformance of the tokenizer against llama.cpp's test
 * vectors and the kjv2m reference ids.
 *
 * - For ggml-vocab-{llama-spm,phi-3,gpt-2}.gguf, every case of the .inp file
 *   tokenizes (no BOS) to exactly the ids of the .out line (see
 *   ../shared/fixtures/tokenizer/README.md), and decodes back to its text.
 * - kjv2m's GGUF vocabulary and tok1024.bin give the prompt_ids of
 *   reference.json for its four llama2.c prompts, and decode every token
 *   to the same bytes.
 * - The stream decoder holds a character split over byte tokens back until
 *   its last byte arrives. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tokenizer/tokenizer.h"

#define MAX_IDS 4096

static char *read_whole_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *data = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        if (end >= 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)end + 1))) {
            *size = fread(data, 1, (size_t)end, f);
            data[*size] = '\0';
        }
    }
    fclose(f);
    return data;
}
/* Concatenated token_bytes of ids: the plain decoding. */
static size_t decode_all(const struct tokenizer *tok, const int *ids, int n, char *out,
                         size_t size) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *bytes = tokenizer_token_bytes(tok, ids[i], &len);
        if (!bytes || total + len > size) return (size_t)-1;
        memcpy(out + total, bytes, len);
        total += len;
    }
    return total;
}

/* Decoding through a stream, pushing one token at a time. */
static size_t decode_stream(const struct tokenizer *tok, const int *ids, int n, int strip,
                            char *out, size_t size) {
    struct tokenizer_stream stream;
    char piece[1024];
    size_t total = 0;
    tokenizer_stream_init(&stream, tok, strip);
    for (int i = 0; i <= n; i++) {
        size_t len = i < n ? tokenizer_stream_push(&stream, ids[i], piece, sizeof(piece))
                           : tokenizer_stream_flush(&stream, piece, sizeof(piece));
        if (total + len > size) return (size_t)-1;
        memcpy(out + total, piece, len);
        total += len;
    }
    return total;
}

static void print_ids(const char *label, const int *ids, int n) {
    fprintf(stderr, "  %s (%d):", label, n);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* Parses one .out line into ids; returns the count. */
static int parse_ids(const char *line, size_t len, int *ids) {
    int n = 0;
    const char *p = line, *end = line + len;
    while (p < end && n < MAX_IDS) {
        while (p < end && *p == ' ') p++;
        if (p >= end) break;
        ids[n++] = (int)strtol(p, (char **)&p, 10);
    }
    return n;
}

/* Checks one vector file pair; spm says whether a space prefix is expected
 * in the plain decoding. */
static void check_fixture(const char *name, int spm) {
    char path[1024], inp_path[1100], out_path[1100];
    test_shared_path(path, sizeof(path), name);
    snprintf(inp_path, sizeof(inp_path), "%s.inp", path);
    snprintf(out_path, sizeof(out_path), "%s.out", path);
    size_t inp_size = 0, out_size = 0;
    char *inp = read_whole_file(inp_path, &inp_size);
    char *out = read_whole_file(out_path, &out_size);
    struct tokenizer *tok = test_load_vocabulary(path);
    CHECK_MSG(inp && out, "cannot read %s / %s", inp_path, out_path);
    if (!inp || !out || !tok) goto done;
    CHECK(tokenizer_kind(tok) == (spm ? TOKENIZER_SPM : TOKENIZER_BPE));

    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof(sep) - 1;
    static int expected[MAX_IDS], got[MAX_IDS];
    static char decoded[65536];
    char err[256];
    size_t pos = 0, line_pos = 0;
    int n_cases = 0, n_passed = 0;
    while (pos < inp_size) {
        const char *hit = strstr(inp + pos, sep);
        if (!hit) break;
        const char *text = inp + pos;
        size_t text_len = (size_t)(hit - text);
        pos = (size_t)(hit - inp) + sep_len;
        const char *nl = memchr(out + line_pos, '\n', out_size - line_pos);
        size_t line_len = nl ? (size_t)(nl - (out + line_pos)) : out_size - line_pos;
        int n_expected = parse_ids(out + line_pos, line_len, expected);
        line_pos += line_len + (nl ? 1 : 0);
        n_cases++;

        int n_got = 0;
        int rc = tokenizer_encode(tok, text, text_len, 0, got, MAX_IDS, &n_got, err, sizeof(err));
        int same = rc == 0 && n_got == n_expected &&
                   memcmp(got, expected, (size_t)n_got * sizeof(int)) == 0;
        if (!same) {
            fprintf(stderr, "%s case %d FAILED: text \"%.*s\"%s%s\n", name, n_cases,
                    (int)(text_len > 80 ? 80 : text_len), text, text_len > 80 ? "..." : "",
                    rc ? err : "");
            print_ids("expected", expected, n_expected);
            print_ids("got     ", got, n_got < MAX_IDS ? n_got : MAX_IDS);
            test_failures++;
            continue;
        }
        n_passed++;
        /* Plain decoding gives the text back, with SPM's space prefix. */
        int prefix = spm && text_len > 0;
        size_t n = decode_all(tok, got, n_got, decoded, sizeof(decoded));
        CHECK_MSG(n == text_len + (size_t)prefix && (!prefix || decoded[0] == ' ') &&
                      memcmp(decoded + prefix, text, text_len) == 0,
                  "%s case %d: decode(encode(s)) != s", name, n_cases);
        /* The stream decoder drops that prefix when asked. */
        n = decode_stream(tok, got, n_got, 1, decoded, sizeof(decoded));
        CHECK_MSG(n == text_len && memcmp(decoded, text, text_len) == 0,
                  "%s case %d: stream decoding != s", name, n_cases);
    }
    CHECK_MSG(n_cases == 46, "%s: %d cases, expected 46", name, n_cases);
    printf("%s: %d/%d cases match\n", name, n_passed, n_cases);
done:
    tokenizer_free(tok);
    free(inp);
    free(out);
}

/* ---- kjv2m: reference.json ---- */

/* Reads the JSON string at *p (just after its opening quote) into out;
 * handles the escapes JSON allows (\uXXXX within the BMP). */
static size_t parse_json_string(const char **p, char *out, size_t size) {
    size_t n = 0;
    const char *s = *p;
    while (*s && *s != '"' && n + 4 < size) {
        if (*s != '\\') {
            out[n++] = *s++;
            continue;
        }
        s++;
        char c = *s++;
        if (c == 'n')
            out[n++] = '\n';
        else if (c == 't')
            out[n++] = '\t';
        else if (c == 'r')
            out[n++] = '\r';
        else if (c == 'u') {
            unsigned cp = (unsigned)strtoul((char[]){s[0], s[1], s[2], s[3], 0}, NULL, 16);
            s += 4;
            if (cp < 0x80)
                out[n++] = (char)cp;
            else if (cp < 0x800) {
                out[n++] = (char)(0xC0 | (cp >> 6));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                out[n++] = (char)(0xE0 | (cp >> 12));
                out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            }
        } else
            out[n++] = c; /* \" \\ \/ */
    }
    *p = *s == '"' ? s + 1 : s;
    return n;
}

/* Prompt i of generate.llama2c in reference.json. Returns 0 if found. */
static int reference_prompt(const char *json, int index, char *prompt, size_t size,
                            size_t *prompt_len, int *ids, int *n_ids) {
    const char *p = strstr(json, "\"llama2c\"");
    for (int i = 0; p && i <= index; i++) {
        p = strstr(p, "\"prompt\"");
        if (p) p += strlen("\"prompt\"");
    }
    if (!p || !(p = strchr(p, '"'))) return -1;
    p++;
    *prompt_len = parse_json_string(&p, prompt, size);
    if (!(p = strstr(p, "\"prompt_ids\"")) || !(p = strchr(p, '['))) return -1;
    *n_ids = 0;
    for (p++; *p && *p != ']' && *n_ids < MAX_IDS;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        ids[(*n_ids)++] = (int)v;
        p = end;
    }
    return 0;
}

static void check_kjv2m(void) {
    char json_path[1024], gguf_path[1024], bin_path[1024], err[512];
    test_shared_path(json_path, sizeof(json_path), "models/reference.json");
    test_shared_path(gguf_path, sizeof(gguf_path), "models/kjv2m-f32.gguf");
    test_shared_path(bin_path, sizeof(bin_path), "models/tok1024.bin");
    size_t json_size;
    char *json = read_whole_file(json_path, &json_size);
    struct tokenizer *from_gguf = test_load_vocabulary(gguf_path);
    struct tokenizer *from_bin = NULL;
    if (tokenizer_load_llama2c(&from_bin, bin_path, 1024, err, sizeof(err)) != 0)
        CHECK_MSG(0, "load %s: %s", bin_path, err);
    CHECK(json != NULL);
    if (!json || !from_gguf || !from_bin) goto done;

    struct tokenizer *toks[2] = {from_gguf, from_bin};
    const char *names[2] = {"kjv2m-f32.gguf", "tok1024.bin"};
    for (int t = 0; t < 2; t++) {
        CHECK(tokenizer_vocab_size(toks[t]) == 1024);
        CHECK(tokenizer_bos(toks[t]) == 1 && tokenizer_eos(toks[t]) == 2);
        CHECK(tokenizer_adds_bos(toks[t]) == 1);
        CHECK(tokenizer_kind(toks[t]) == TOKENIZER_SPM);
    }
    for (int i = 0; i < 4; i++) {
        static char prompt[8192], decoded[8192];
        static int expected[MAX_IDS], got[MAX_IDS];
        size_t prompt_len;
        int n_expected;
        if (reference_prompt(json, i, prompt, sizeof(prompt), &prompt_len, expected, &n_expected) !=
            0) {
            CHECK_MSG(0, "reference.json: llama2c prompt %d not found", i);
            continue;
        }
        for (int t = 0; t < 2; t++) {
            int n_got = 0;
            int rc = tokenizer_encode(toks[t], prompt, prompt_len, 1, got, MAX_IDS, &n_got, err,
                                      sizeof(err));
            int same = rc == 0 && n_got == n_expected &&
                       memcmp(got, expected, (size_t)n_got * sizeof(int)) == 0;
            if (!same) {
                fprintf(stderr, "%s: prompt %d \"%.40s\" FAILED %s\n", names[t], i, prompt,
                        rc ? err : "");
                print_ids("expected", expected, n_expected);
                print_ids("got     ", got, n_got < MAX_IDS ? n_got : MAX_IDS);
                test_failures++;
                continue;
            }
            /* BOS decodes to nothing and the stream drops the space prefix. */
            size_t n = decode_stream(toks[t], got, n_got, 1, decoded, sizeof(decoded));
            CHECK_MSG(n == prompt_len && memcmp(decoded, prompt, prompt_len) == 0,
                      "%s: prompt %d does not decode back", names[t], i);
        }
    }
    /* Both files describe the same vocabulary. */
    int differing = 0;
    for (int id = 0; id < 1024; id++) {
        size_t len_a, len_b;
        const char *a = tokenizer_token_bytes(from_gguf, id, &len_a);
        const char *b = tokenizer_token_bytes(from_bin, id, &len_b);
        if (len_a != len_b || memcmp(a, b, len_a) != 0) differing++;
    }
    CHECK_MSG(differing == 0, "%d tokens decode differently in the GGUF and tok1024.bin",
              differing);
    size_t len;
    const char *piece = tokenizer_piece(from_bin, 1, &len);
    CHECK(len == 5 && memcmp(piece, "\n<s>\n", 5) == 0);
    CHECK(tokenizer_token_bytes(from_bin, 1, &len) && len == 0);
    piece = tokenizer_piece(from_gguf, 962, &len);
    CHECK(len == 3 && memcmp(piece, "\xe2\x96\x81", 3) == 0);
    piece = tokenizer_piece(from_bin, 962, &len);
    CHECK(len == 1 && piece[0] == ' ');
    CHECK(tokenizer_find(from_gguf, "\xe2\x96\x81", 3) == 962);
    CHECK(tokenizer_find(from_bin, "\xe2\x96\x81", 3) == 962);
    CHECK(tokenizer_token_bytes(from_gguf, 1024, &len) == NULL);
    CHECK(tokenizer_piece(from_gguf, -1, &len) == NULL);
    printf("kjv2m: GGUF and tok1024.bin match reference.json\n");
done:
    tokenizer_free(from_gguf);
    tokenizer_free(from_bin);
    free(json);
}

/* ---- stream decoding ---- */

static void check_stream(void) {
    char path[1024];
    struct tokenizer *tok = test_load_vocabulary(
        test_shared_path(path, sizeof(path), "fixtures/tokenizer/ggml-vocab-llama-spm.gguf"));
    if (!tok) return;
    const char llama[] = "\xf0\x9f\xa6\x99"; /* U+1F999, not in the vocabulary */
    int ids[8], n = 0;
    char err[256], out[256];
    CHECK(tokenizer_encode(tok, llama, 4, 0, ids, 8, &n, err, sizeof(err)) == 0);
    const int expected[5] = {29871, 243, 162, 169, 156}; /* ▁ <0xF0> <0x9F> <0xA6> <0x99> */
    CHECK(n == 5 && memcmp(ids, expected, sizeof(expected)) == 0);

    struct tokenizer_stream stream;
    tokenizer_stream_init(&stream, tok, 1);
    CHECK(tokenizer_stream_push(&stream, 1, out, sizeof(out)) == 0);     /* BOS: no text */
    CHECK(tokenizer_stream_push(&stream, 29871, out, sizeof(out)) == 0); /* prefix dropped */
    for (int i = 1; i < 4; i++)
        CHECK(tokenizer_stream_push(&stream, expected[i], out, sizeof(out)) == 0);
    CHECK(stream.n_pending == 3);
    size_t len = tokenizer_stream_push(&stream, expected[4], out, sizeof(out));
    CHECK(len == 4 && memcmp(out, llama, 4) == 0);
    CHECK(tokenizer_stream_flush(&stream, out, sizeof(out)) == 0);

    /* Without stripping the space stays; a dangling lead byte flushes as U+FFFD. */
    tokenizer_stream_init(&stream, tok, 0);
    len = tokenizer_stream_push(&stream, 29871, out, sizeof(out));
    CHECK(len == 1 && out[0] == ' ');
    CHECK(tokenizer_stream_push(&stream, 243, out, sizeof(out)) == 0);
    len = tokenizer_stream_flush(&stream, out, sizeof(out));
    CHECK(len == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0);
    CHECK(tokenizer_stream_flush(&stream, out, sizeof(out)) == 0);

    /* A broken sequence: <0xF0> then 'a' gives U+FFFD then "a" at once. */
    tokenizer_stream_init(&stream, tok, 0);
    CHECK(tokenizer_stream_push(&stream, 243, out, sizeof(out)) == 0);
    int a = tokenizer_find(tok, "a", 1);
    CHECK(a >= 0);
    len = tokenizer_stream_push(&stream, a, out, sizeof(out));
    CHECK(len == 4 && memcmp(out,
                             "\xef\xbf\xbd"
                             "a",
                             4) == 0);
    /* A lone continuation byte is replaced right away. */
    len = tokenizer_stream_push(&stream, 0x80 + 3, out, sizeof(out));
    CHECK(len == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0);
    tokenizer_free(tok);

    /* GPT-2: the same character in byte-level tokens comes out whole too. */
    tok = test_load_vocabulary(
        test_shared_path(path, sizeof(path), "fixtures/tokenizer/ggml-vocab-gpt-2.gguf"));
    if (!tok) return;
    CHECK(tokenizer_encode(tok, llama, 4, 0, ids, 8, &n, err, sizeof(err)) == 0);
    CHECK(n >= 2);
    tokenizer_stream_init(&stream, tok, 1);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        len = tokenizer_stream_push(&stream, ids[i], out + total, sizeof(out) - total);
        CHECK_MSG(i == n - 1 ? len == 4 : len == 0, "gpt-2 token %d of %d gave %zu bytes", i, n,
                  len);
        total += len;
    }
    CHECK(total == 4 && memcmp(out, llama, 4) == 0);
    /* strip_leading_space applies to SPM only: GPT-2's " a" keeps its space. */
    CHECK(tokenizer_encode(tok, " a", 2, 0, ids, 8, &n, err, sizeof(err)) == 0 && n == 1);
    tokenizer_stream_init(&stream, tok, 1);
    len = tokenizer_stream_push(&stream, ids[0], out, sizeof(out));
    CHECK(len == 2 && memcmp(out, " a", 2) == 0);
    tokenizer_free(tok);
}

/* Invalid UTF-8 next to spaces: a broken lead byte before a space eats part
 * of the escaped space, whose other bytes fall back to byte tokens (the
 * fuzzer found the symbol buffer too small for this). Every id must fit in
 * tokenizer_max_ids, and the ids decode to the escaped bytes. */
static void check_broken_utf8(void) {
    char path[1024], err[256], out[256];
    struct tokenizer *tok = test_load_vocabulary(
        test_shared_path(path, sizeof(path), "fixtures/tokenizer/ggml-vocab-llama-spm.gguf"));
    static const char text[] = "\xc3 \xc3 \xc3 \xc3 \xe2 x\xf0 ";
    size_t len = sizeof(text) - 1;
    int max_ids = tokenizer_max_ids(len), n = 0;
    int *ids = malloc((size_t)max_ids * sizeof(int));
    if (!tok || !ids) {
        free(ids);
        tokenizer_free(tok);
        return;
    }
    CHECK_MSG(tokenizer_encode(tok, text, len, 0, ids, max_ids, &n, err, sizeof(err)) == 0, "%s",
              err);
    CHECK_MSG(n > (int)len + 2 && n <= max_ids, "%d ids for %zu bytes (room %d)", n, len, max_ids);
    /* what byte fallback gives: the prefix space, then each space the broken
     * character swallowed as the raw bytes of its escape "\xe2\x96\x81" */
    static const char expected[] = " \xc3\xe2\x96\x81\xc3\xe2\x96\x81\xc3\xe2\x96\x81\xc3"
                                   "\xe2\x96\x81\xe2\xe2\x96\x81x\xf0\xe2\x96\x81";
    size_t decoded = decode_all(tok, ids, n, out, sizeof(out));
    CHECK(decoded == sizeof(expected) - 1 && !memcmp(out, expected, decoded));
    free(ids);
    tokenizer_free(tok);
}

int main(void) {
    char path[1024];
    if (!test_require_file(
            test_shared_path(path, sizeof(path), "fixtures/tokenizer/ggml-vocab-llama-spm.gguf")) ||
        !test_require_file(test_shared_path(path, sizeof(path), "models/tok1024.bin")))
        return TEST_SKIP_CODE;
    check_fixture("fixtures/tokenizer/ggml-vocab-llama-spm.gguf", 1);
    check_fixture("fixtures/tokenizer/ggml-vocab-phi-3.gguf", 1);
    check_fixture("fixtures/tokenizer/ggml-vocab-gpt-2.gguf", 0);
    check_kjv2m();
    check_stream();
    check_broken_utf8();
    return test_status("test_tokenizer");
}
