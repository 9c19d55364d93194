/* spm.c -- SentencePiece-style BPE ("llama" vocabularies and llama2.c's
 * tokenizer.bin), following llama.cpp's llm_tokenizer_spm.
 *
 * The text gets a leading space (add_space_prefix), every space becomes
 * "▁", and each UTF-8 character starts as one symbol. Adjacent symbols whose
 * concatenation is a vocabulary token merge, highest token score first
 * (leftmost on ties). A symbol left over that is not a token falls back to
 * one <0xXX> token per byte. (llama.cpp also re-splits such symbols through
 * its rev_merge table, but every merged symbol is a token by construction,
 * so only unmerged single characters ever fall back.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

/* Merge score of a pair: the score of the token the pair spells, if any. */
static int score_pair(const void *ctx, const char *text, size_t start, size_t left_len,
                      size_t right_len, float *score) {
    const struct tokenizer *tok = ctx;
    int id = tokenizer_map_get(&tok->lookup, text + start, left_len + right_len);
    if (id < 0) return 0;
    *score = tok->tokens[id].score;
    return 1;
}

/* The text with the space prefix and spaces as "▁", into buf (3 * len + 3). */
static size_t escape_text(const struct tokenizer *tok, const char *text, size_t len, char *buf) {
    size_t n = tok->add_space_prefix ? tokenizer_spm_escape(" ", 1, buf) : 0;
    return n + tokenizer_spm_escape(text, len, buf + n);
}

/* Emits the token for one final symbol, or its bytes as byte tokens. */
static int emit_symbol(const struct tokenizer *tok, const char *text, size_t len,
                       struct tokenizer_output *out, char *err, size_t errlen) {
    int id = tokenizer_map_get(&tok->lookup, text, len);
    if (id >= 0) {
        tokenizer_output_push(out, id);
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char byte = (unsigned char)text[i];
        id = tok->byte_token[byte] >= 0 ? tok->byte_token[byte] : tok->unk;
        if (id < 0) {
            snprintf(err, errlen,
                     "tokenizer: byte 0x%02X has no token (no <0x%02X> and no unknown token)", byte,
                     byte);
            return -1;
        }
        tokenizer_output_push(out, id);
    }
    return 0;
}

int tokenizer_encode_spm(const struct tokenizer *tok, const char *text, size_t len,
                         struct tokenizer_output *out, char *err, size_t errlen) {
    if (len == 0) return 0;
    if (len > ((size_t)1 << 28)) {
        snprintf(err, errlen, "tokenizer: text of %zu bytes is too long to encode", len);
        return -1;
    }
    /* Spaces become three bytes ("\xe2\x96\x81") before the text is split,
     * and a broken UTF-8 lead byte can cut such a sequence into single
     * bytes: every byte of the escaped text may start a symbol. */
    size_t max_symbols = 3 * len + 3;
    char *buf = malloc(3 * len + 3);
    struct tokenizer_symbol *symbols = malloc(max_symbols * sizeof(*symbols));
    struct tokenizer_bigram *heap = malloc(3 * max_symbols * sizeof(*heap));
    int rc = -1;
    if (!buf || !symbols || !heap) {
        snprintf(err, errlen, "tokenizer: out of memory encoding %zu bytes", len);
        goto done;
    }
    size_t n_bytes = escape_text(tok, text, len, buf);
    int n = 0;
    for (size_t i = 0; i < n_bytes; n++) {
        size_t char_len = tokenizer_utf8_len((unsigned char)buf[i]);
        if (char_len > n_bytes - i) char_len = n_bytes - i;
        symbols[n] = (struct tokenizer_symbol){n - 1, -1, i, char_len};
        if (n > 0) symbols[n - 1].next = n;
        i += char_len;
    }
    tokenizer_merge(buf, symbols, n, heap, score_pair, tok);
    rc = 0;
    for (int i = 0; i >= 0 && rc == 0; i = symbols[i].next)
        rc = emit_symbol(tok, buf + symbols[i].start, symbols[i].len, out, err, errlen);
done:
    free(buf);
    free(symbols);
    free(heap);
    return rc;
}
