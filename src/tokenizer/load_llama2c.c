/* load_llama2c.c -- a tokenizer from llama2.c's tokenizer.bin.
 *
 * Layout (little-endian): uint32 max_token_length, then for each token a
 * float32 score, a uint32 byte length and the bytes (no NUL). Pieces spell
 * spaces as ' ' rather than "▁", byte tokens as "<0xXX>", and ids 1 and 2
 * are "\n<s>\n" and "\n</s>\n". The file carries no types or special ids, so
 * it is read as an SPM vocabulary with bos 1, eos 2, unk 0, add_bos true:
 * pieces keep their spelling for tokenizer_piece, the lookup text gets
 * "▁" for spaces, and types are inferred (id 0 UNKNOWN, ids 1-2 CONTROL,
 * <0xXX> BYTE). The whole file is read and every length is checked against
 * its size before use. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

/* The whole file in memory; NULL (with err) on failure. */
static unsigned char *read_file(const char *path, size_t *size, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    unsigned char *data = NULL;
    long end = -1;
    if (fseek(f, 0, SEEK_END) == 0) end = ftell(f);
    if (end < 0 || fseek(f, 0, SEEK_SET) != 0) {
        snprintf(err, errlen, "%s: cannot determine the file size", path);
    } else if (!(data = malloc(end > 0 ? (size_t)end : 1))) {
        snprintf(err, errlen, "%s: out of memory reading %ld bytes", path, end);
    } else if (fread(data, 1, (size_t)end, f) != (size_t)end) {
        snprintf(err, errlen, "%s: read error", path);
        free(data);
        data = NULL;
    }
    fclose(f);
    *size = end > 0 ? (size_t)end : 0;
    return data;
}

static uint32_t load_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int infer_type(int id, const char *piece, size_t len) {
    unsigned char byte;
    if (id == 0) return TOKENIZER_TYPE_UNKNOWN;
    if (id == 1 || id == 2) return TOKENIZER_TYPE_CONTROL;
    if (tokenizer_parse_byte_token(piece, len, &byte)) return TOKENIZER_TYPE_BYTE;
    return TOKENIZER_TYPE_NORMAL;
}

/* Reads vocab_size tokens from data (after the header); tokens past
 * vocab_size are ignored, as llama2.c does. */
static int read_tokens(struct tokenizer *tok, const char *path, const unsigned char *data,
                       size_t size, uint32_t max_len, char *err, size_t errlen) {
    char *escaped = malloc(3 * (size_t)max_len + 1);
    if (!escaped) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    size_t pos = 4;
    int rc = 0;
    for (int id = 0; id < tok->n_vocab && rc == 0; id++) {
        rc = -1;
        if (size - pos < 8) {
            snprintf(err, errlen,
                     "%s: token %d: the file ends at byte %zu, before its score and length "
                     "(vocab_size %d)",
                     path, id, size, tok->n_vocab);
            break;
        }
        float score;
        memcpy(&score, data + pos, 4);
        uint32_t len = load_u32(data + pos + 4);
        pos += 8;
        if (len > max_len || len > size - pos) {
            snprintf(err, errlen,
                     "%s: token %d: length %u exceeds %s (%zu bytes left, max_token_length %u)",
                     path, id, (unsigned)len, len > max_len ? "max_token_length" : "the file",
                     size - pos, (unsigned)max_len);
            break;
        }
        const char *piece = (const char *)data + pos;
        size_t text_len = tokenizer_spm_escape(piece, len, escaped);
        if (tokenizer_add_token(tok, id, piece, len, escaped, text_len, score,
                                infer_type(id, piece, len)) != 0) {
            snprintf(err, errlen, "%s: out of memory", path);
            break;
        }
        pos += len;
        rc = 0;
    }
    free(escaped);
    return rc;
}

int tokenizer_load_llama2c(struct tokenizer **out, const char *path, int vocab_size, char *err,
                           size_t errlen) {
    *out = NULL;
    if (vocab_size < 3) {
        snprintf(err, errlen, "%s: vocab_size %d is too small (need at least 3 tokens)", path,
                 vocab_size);
        return -1;
    }
    size_t size;
    unsigned char *data = read_file(path, &size, err, errlen);
    if (!data) return -1;
    struct tokenizer *tok = NULL;
    uint32_t max_len = size >= 4 ? load_u32(data) : 0;
    if (size < 4) {
        snprintf(err, errlen, "%s: %zu bytes is too short for the max_token_length header", path,
                 size);
    } else if (max_len == 0 || max_len > (1u << 20)) {
        snprintf(err, errlen, "%s: max_token_length %u is out of range (1..1048576)", path,
                 (unsigned)max_len);
    } else if (!(tok = tokenizer_create(TOKENIZER_SPM, vocab_size))) {
        snprintf(err, errlen, "%s: out of memory", path);
    } else {
        tok->bos = 1;
        tok->eos = 2;
        tok->unk = 0;
        tok->add_bos = 1;
        tok->add_space_prefix = 1;
        if (read_tokens(tok, path, data, size, max_len, err, errlen) != 0 ||
            tokenizer_finish(tok, path, err, errlen) != 0) {
            tokenizer_free(tok);
            tok = NULL;
        }
    }
    free(data);
    *out = tok;
    return tok ? 0 : -1;
}
