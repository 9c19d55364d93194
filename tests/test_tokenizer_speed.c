/* test_tokenizer_speed.c -- encoding a 10 KB prompt must take well under
 * 50 ms with each fixture vocabulary (llama-spm, gpt-2), for mixed text
 * (the 46 conformance strings, repeated) and for one 10 KB word with no
 * space, the worst case for the pair merging. The best of 5 runs is taken
 * so a busy machine does not fail the test (about 1 ms here, 5 ms under
 * AddressSanitizer). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "tokenizer/tokenizer.h"

#define TEXT_BYTES 10240

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Best-of-5 milliseconds to encode text; -1 on failure. */
static double time_encode(const struct tokenizer *tok, const char *text, size_t len,
                          int *n_tokens) {
    static int ids[TEXT_BYTES * 2];
    char err[256];
    double best = -1;
    for (int run = 0; run < 5; run++) {
        double start = now_ms();
        if (tokenizer_encode(tok, text, len, 1, ids, TEXT_BYTES * 2, n_tokens, err, sizeof(err)) !=
            0) {
            CHECK_MSG(0, "encode: %s", err);
            return -1;
        }
        double ms = now_ms() - start;
        if (best < 0 || ms < best) best = ms;
    }
    return best;
}

/* 10 KB of text made by repeating the file's bytes, cut at a character
 * boundary. */
static size_t fill_text(char *text, const char *path) {
    FILE *f = fopen(path, "rb");
    size_t n = 0;
    if (!f) return 0;
    char chunk[4096];
    size_t got = fread(chunk, 1, sizeof(chunk), f);
    fclose(f);
    while (got > 0 && n < TEXT_BYTES) {
        size_t take = got < TEXT_BYTES - n ? got : TEXT_BYTES - n;
        memcpy(text + n, chunk, take);
        n += take;
    }
    while (n > 0 && ((unsigned char)text[n - 1] & 0xC0) == 0x80) n--;
    if (n > 0 && (unsigned char)text[n - 1] >= 0xC0) n--;
    return n;
}

static void check_vocab(const char *name, const char *mixed, size_t mixed_len, const char *word) {
    char path[1024], err[512];
    struct gguf_file *file;
    struct tokenizer *tok = NULL;
    test_shared_path(path, sizeof(path), name);
    if (gguf_open(&file, path, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s: %s", path, err);
        return;
    }
    if (tokenizer_load_gguf(&tok, file, err, sizeof(err)) != 0) CHECK_MSG(0, "%s", err);
    gguf_close(file);
    if (!tok) return;
    const double budget = 50.0;
    int n;
    double ms = time_encode(tok, mixed, mixed_len, &n);
    printf("%s: %zu bytes of mixed text -> %d tokens in %.2f ms\n", name, mixed_len, n, ms);
    CHECK_MSG(ms >= 0 && ms < budget, "%s: mixed text took %.2f ms (budget %.0f)", name, ms,
              budget);
    ms = time_encode(tok, word, TEXT_BYTES, &n);
    printf("%s: one %d-byte word -> %d tokens in %.2f ms\n", name, TEXT_BYTES, n, ms);
    CHECK_MSG(ms >= 0 && ms < budget, "%s: one long word took %.2f ms (budget %.0f)", name, ms,
              budget);
    tokenizer_free(tok);
}

int main(void) {
    char path[1024];
    test_shared_path(path, sizeof(path), "fixtures/tokenizer/ggml-vocab-gpt-2.gguf.inp");
    if (!test_require_file(path)) return TEST_SKIP_CODE;
    static char mixed[TEXT_BYTES], word[TEXT_BYTES];
    size_t mixed_len = fill_text(mixed, path);
    CHECK(mixed_len > TEXT_BYTES - 4);
    for (int i = 0; i < TEXT_BYTES; i++) word[i] = "abcdefghij"[(i * 7) % 10];
    check_vocab("fixtures/tokenizer/ggml-vocab-llama-spm.gguf", mixed, mixed_len, word);
    check_vocab("fixtures/tokenizer/ggml-vocab-gpt-2.gguf", mixed, mixed_len, word);
    return test_status("test_tokenizer_speed");
}
