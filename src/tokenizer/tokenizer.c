/* tokenizer.c -- the public face of the module: encode (dispatching to the
 * SPM or BPE encoder), the accessors and tokenizer_free. Loading lives in
 * load_gguf.c / load_llama2c.c, the vocabulary in vocab.c, decoding of a
 * token stream in stream.c. */
#include <stdio.h>
#include <stdlib.h>

#include "tokenizer/tokenizer_internal.h"

void tokenizer_free(struct tokenizer *tok) {
    if (!tok) return;
    tokenizer_bpe_free(tok);
    tokenizer_map_free(&tok->lookup);
    free(tok->tokens);
    free(tok->arena);
    free(tok);
}

enum tokenizer_kind tokenizer_kind(const struct tokenizer *tok) {
    return tok->kind;
}

int tokenizer_max_ids(size_t len) {
    /* escaped SPM text is at most 3 bytes per input byte plus the space
     * prefix, and no symbol yields more ids than bytes; BOS adds one */
    return len > (size_t)1 << 28 ? 1 << 30 : (int)(3 * len + 4);
}

int tokenizer_vocab_size(const struct tokenizer *tok) {
    return tok->n_vocab;
}

int tokenizer_bos(const struct tokenizer *tok) {
    return tok->bos;
}

int tokenizer_eos(const struct tokenizer *tok) {
    return tok->eos;
}

int tokenizer_adds_bos(const struct tokenizer *tok) {
    return tok->add_bos && tok->bos >= 0;
}

size_t tokenizer_max_token_bytes(const struct tokenizer *tok) {
    return tok->max_token_bytes;
}

int tokenizer_find(const struct tokenizer *tok, const char *piece, size_t len) {
    return tokenizer_map_get(&tok->lookup, piece, len);
}

int tokenizer_output_begin(const struct tokenizer *tok, struct tokenizer_output *out, int *ids,
                           int max_ids, int add_bos, int *n_ids, char *err, size_t errlen) {
    *out = (struct tokenizer_output){ids, max_ids > 0 ? max_ids : 0, 0};
    *n_ids = 0;
    if (!add_bos) return 0;
    if (tok->bos < 0) {
        snprintf(err, errlen, "tokenizer: BOS requested but the vocabulary has no BOS token");
        return -1;
    }
    tokenizer_output_push(out, tok->bos);
    return 0;
}

int tokenizer_output_end(const struct tokenizer_output *out, int *n_ids, char *err, size_t errlen) {
    *n_ids = out->n_ids;
    if (out->n_ids <= out->max_ids) return 0;
    snprintf(err, errlen, "tokenizer: the text needs %d tokens but there is room for %d",
             out->n_ids, out->max_ids);
    return -1;
}

int tokenizer_encode_text(const struct tokenizer *tok, const char *text, size_t len,
                          struct tokenizer_output *out, char *err, size_t errlen) {
    return tok->kind == TOKENIZER_SPM ? tokenizer_encode_spm(tok, text, len, out, err, errlen)
                                      : tokenizer_encode_bpe(tok, text, len, out, err, errlen);
}

int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len, int add_bos,
                     int *ids, int max_ids, int *n_ids, char *err, size_t errlen) {
    struct tokenizer_output out;
    if (tokenizer_output_begin(tok, &out, ids, max_ids, add_bos, n_ids, err, errlen) ||
        tokenizer_encode_text(tok, text, len, &out, err, errlen))
        return -1;
    return tokenizer_output_end(&out, n_ids, err, errlen);
}

const char *tokenizer_token_bytes(const struct tokenizer *tok, int id, size_t *len) {
    if (id < 0 || id >= tok->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = tok->tokens[id].bytes_len;
    return tok->arena + tok->tokens[id].bytes;
}

const char *tokenizer_piece(const struct tokenizer *tok, int id, size_t *len) {
    if (id < 0 || id >= tok->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = tok->tokens[id].piece_len;
    return tok->arena + tok->tokens[id].piece;
}
