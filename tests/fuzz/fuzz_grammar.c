/* fuzz_grammar.c -- libFuzzer harness for the grammar engine (src/grammar).
 *
 * The input is GBNF text, then optionally "\n%%\n" and texts to feed it,
 * separated by NUL bytes. The grammar is compiled: a refusal must come with
 * a message that starts with "LINE:COLUMN: " (or says out of memory). A
 * grammar that compiles is fed each text from a new state, as one piece
 * and byte by byte, which must agree (accepted or not, and where it can
 * end); a rejected text must leave the state as it was; grammar_is_done
 * must imply grammar_can_end; and at the start and after each text the
 * mask over a small vocabulary (the 256 bytes, a few longer pieces, split
 * UTF-8 and an end token) must equal the brute-force one (every token tried
 * on a copy), with the memo on and off. Built by tests/fuzz/CMakeLists.txt
 * when LOCKSTEP_FUZZ=ON. */
#include "grammar/grammar.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_TEXTS 8 /* texts fed at most */

static const char *const fuzz_pieces[] = {
    "ab",   "abc", "\"\"",     "{\"",      "\": ",     "true", "12", "\\n", "  ",
    "\n\t", "é",   "\xe6\x97", "\xa5\xe6", "\xf0\x9f", "()",   "[]", "x*",  "::=",
};
#define FUZZ_PIECES ((int)(sizeof(fuzz_pieces) / sizeof(fuzz_pieces[0])))
#define FUZZ_VOCAB  (256 + FUZZ_PIECES + 2) /* bytes, pieces, an empty token, an end token */

static struct grammar_vocab *fuzz_vocab;
static const char *vocab_bytes[FUZZ_VOCAB];
static size_t vocab_lengths[FUZZ_VOCAB];
static char byte_text[256];

/* The vocabulary every input is masked over (made once). */
static void make_vocab(void) {
    char err[256];
    int end = FUZZ_VOCAB - 1;
    for (int b = 0; b < 256; b++) {
        byte_text[b] = (char)b;
        vocab_bytes[b] = &byte_text[b];
        vocab_lengths[b] = 1;
    }
    for (int i = 0; i < FUZZ_PIECES; i++) {
        vocab_bytes[256 + i] = fuzz_pieces[i];
        vocab_lengths[256 + i] = strlen(fuzz_pieces[i]);
    }
    vocab_bytes[FUZZ_VOCAB - 2] = vocab_bytes[FUZZ_VOCAB - 1] = "";
    if (grammar_vocab_create(&fuzz_vocab, FUZZ_VOCAB, vocab_bytes, vocab_lengths, &end, 1, err,
                             sizeof(err)))
        abort();
}

/* 1 if err looks like "L:C: message" or says out of memory. */
static int good_message(const char *err) {
    const char *p = err;
    if (strstr(err, "out of memory")) return 1;
    if (*p < '1' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    if (*p++ != ':' || *p < '1' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    return p[0] == ':' && p[1] == ' ' && p[2] != 0;
}

/* The mask of s against every token tried on a copy, memo on and off. */
static void check_mask(const struct grammar_state *s) {
    uint8_t mask[FUZZ_VOCAB], off[FUZZ_VOCAB], ref[FUZZ_VOCAB];
    int ref_count = 0;
    for (int t = 0; t < FUZZ_VOCAB; t++) {
        struct grammar_state *c = grammar_state_copy(s);
        if (!c) abort();
        if (t == FUZZ_VOCAB - 1)
            ref[t] = (uint8_t)grammar_can_end(s);
        else
            ref[t] =
                vocab_lengths[t] > 0 && grammar_accept(c, vocab_bytes[t], vocab_lengths[t]) == 0;
        ref_count += ref[t];
        grammar_state_free(c);
    }
    struct grammar_state *a = grammar_state_copy(s), *b = grammar_state_copy(s);
    if (!a || !b) abort();
    grammar_state_set_memo_limit(b, 0); /* b's own memo: a copy of s shares none yet */
    if (grammar_mask(a, fuzz_vocab, mask) != ref_count || memcmp(mask, ref, sizeof(ref))) abort();
    if (grammar_mask(a, fuzz_vocab, mask) != ref_count || memcmp(mask, ref, sizeof(ref)))
        abort(); /* from the memo */
    if (grammar_mask(b, fuzz_vocab, off) != ref_count || memcmp(off, ref, sizeof(ref))) abort();
    if (grammar_is_done(s) && (!grammar_can_end(s) || ref_count != 1)) abort();
    grammar_state_free(a);
    grammar_state_free(b);
}

/* Feeds text (n bytes) whole and byte by byte; they must agree. */
static void feed(const struct grammar *g, const char *text, size_t n) {
    struct grammar_state *whole = grammar_state_create(g), *bytes = grammar_state_create(g);
    if (!whole || !bytes) abort();
    int can_end = grammar_can_end(whole), done = grammar_is_done(whole);
    int rc = grammar_accept(whole, text, n), rc_bytes = 0;
    for (size_t i = 0; i < n && rc_bytes == 0; i++) rc_bytes = grammar_accept(bytes, text + i, 1);
    if (rc != rc_bytes) abort();
    if (rc == 0 && grammar_can_end(whole) != grammar_can_end(bytes)) abort();
    if (rc != 0 && (grammar_can_end(whole) != can_end || grammar_is_done(whole) != done)) abort();
    if (grammar_is_done(bytes) && !grammar_can_end(bytes)) abort();
    check_mask(bytes);
    grammar_state_free(whole);
    grammar_state_free(bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char separator[] = "\n%%\n";
    char err[512] = "";
    struct grammar *g = NULL;
    if (!fuzz_vocab) make_vocab();
    const char *text = (const char *)data;
    const char *split = memmem(text, size, separator, sizeof(separator) - 1);
    size_t gbnf_size = split ? (size_t)(split - text) : size;
    if (grammar_compile(&g, text, gbnf_size, err, sizeof(err)) != 0) {
        if (g || !good_message(err)) abort();
        return 0;
    }
    struct grammar_state *start = grammar_state_create(g);
    if (!start) abort();
    check_mask(start);
    grammar_state_free(start);
    const char *p = split ? split + sizeof(separator) - 1 : text + size, *end = text + size;
    for (int k = 0; k < FUZZ_TEXTS && p < end; k++) {
        const char *nul = memchr(p, 0, (size_t)(end - p));
        size_t n = nul ? (size_t)(nul - p) : (size_t)(end - p);
        feed(g, p, n);
        p += n + 1;
    }
    grammar_free(g);
    return 0;
}
