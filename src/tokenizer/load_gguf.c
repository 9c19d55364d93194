/* load_gguf.c -- a tokenizer from a GGUF file's tokenizer.ggml.* keys.
 *
 * Everything is copied out of the file, so the tokenizer outlives it. Every
 * key is checked before use: array element types, lengths that must match
 * the token count, token types, and special ids in range. Absent optional
 * keys take llama.cpp's defaults: scores 0, type NORMAL, add_bos_token and
 * add_space_prefix true for "llama" and false for "gpt2", and for "llama"
 * the ids bos 1, eos 2, unk 0. An id stored as -1 / 0xFFFFFFFF means none. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

static const char *type_name(enum gguf_type type) {
    static const char *const names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                        "int32",  "float32", "bool",   "string", "array",
                                        "uint64", "int64",   "float64"};
    return (unsigned)type < sizeof(names) / sizeof(names[0]) ? names[type] : "unknown";
}

/* The array at key with elements of elem_type: *out is NULL if the key is
 * absent (and not required). n_expected (if not 0) is the length it must have. */
static int find_array(const struct gguf_file *file, const char *key, enum gguf_type elem_type,
                      int required, uint64_t n_expected, const struct gguf_value **out, char *err,
                      size_t errlen) {
    const struct gguf_kv *kv = gguf_find(file, key);
    *out = NULL;
    if (!kv) {
        if (required) snprintf(err, errlen, "%s: %s is missing", file->path, key);
        return required ? -1 : 0;
    }
    if (kv->value.type != GGUF_TYPE_ARRAY || kv->value.v.arr.type != elem_type) {
        snprintf(
            err, errlen, "%s: %s must be an array of %s, not %s%s", file->path, key,
            type_name(elem_type), kv->value.type == GGUF_TYPE_ARRAY ? "an array of " : "",
            type_name(kv->value.type == GGUF_TYPE_ARRAY ? kv->value.v.arr.type : kv->value.type));
        return -1;
    }
    if (n_expected && kv->value.v.arr.n != n_expected) {
        snprintf(err, errlen, "%s: %s has %llu entries but there are %llu tokens", file->path, key,
                 (unsigned long long)kv->value.v.arr.n, (unsigned long long)n_expected);
        return -1;
    }
    *out = &kv->value;
    return 0;
}

/* A boolean key, or def when absent. */
static int read_bool(const struct gguf_file *file, const char *key, int def, int *out, char *err,
                     size_t errlen) {
    const struct gguf_kv *kv = gguf_find(file, key);
    *out = def;
    if (!kv) return 0;
    if (kv->value.type != GGUF_TYPE_BOOL) {
        snprintf(err, errlen, "%s: %s must be a bool, not %s", file->path, key,
                 type_name(kv->value.type));
        return -1;
    }
    *out = kv->value.v.u64 != 0;
    return 0;
}

/* A special token id, def when absent, -1 when stored as -1/0xFFFFFFFF. */
static int read_token_id(const struct gguf_file *file, const char *key, int def, int n_vocab,
                         int *out, char *err, size_t errlen) {
    const struct gguf_kv *kv = gguf_find(file, key);
    *out = def < n_vocab ? def : -1;
    if (!kv) return 0;
    long long value;
    switch (kv->value.type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64:
        value = kv->value.v.u64 == 0xFFFFFFFFu || kv->value.v.u64 > LLONG_MAX
                    ? -1
                    : (long long)kv->value.v.u64;
        break;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64:
        value = kv->value.v.i64 < 0 ? -1 : kv->value.v.i64;
        break;
    default:
        snprintf(err, errlen, "%s: %s must be an integer, not %s", file->path, key,
                 type_name(kv->value.type));
        return -1;
    }
    if (value >= n_vocab) {
        snprintf(err, errlen, "%s: %s = %lld is out of range (vocabulary of %d tokens)", file->path,
                 key, value, n_vocab);
        return -1;
    }
    *out = (int)value;
    return 0;
}

/* Copies every token with its score and type. */
static int read_tokens(struct tokenizer *tok, const struct gguf_file *file,
                       const struct gguf_value *tokens, char *err, size_t errlen) {
    const struct gguf_value *scores, *types;
    uint64_t n = (uint64_t)tok->n_vocab;
    if (find_array(file, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, 0, n, &scores, err, errlen) !=
            0 ||
        find_array(file, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, 0, n, &types, err, errlen) !=
            0)
        return -1;
    for (int id = 0; id < tok->n_vocab; id++) {
        struct gguf_string text = gguf_array_string(tokens, (uint64_t)id);
        float score = 0.0f;
        int32_t type = TOKENIZER_TYPE_NORMAL;
        if (scores) memcpy(&score, scores->v.arr.data + 4 * (size_t)id, 4);
        if (types) memcpy(&type, types->v.arr.data + 4 * (size_t)id, 4);
        if (type < TOKENIZER_TYPE_UNDEFINED || type > TOKENIZER_TYPE_BYTE) {
            snprintf(err, errlen,
                     "%s: tokenizer.ggml.token_type[%d] = %d is not a token type (0-6)", file->path,
                     id, (int)type);
            return -1;
        }
        if (text.len > ((uint64_t)1 << 20)) {
            snprintf(err, errlen, "%s: tokenizer.ggml.tokens[%d] is %llu bytes long", file->path,
                     id, (unsigned long long)text.len);
            return -1;
        }
        if (type == TOKENIZER_TYPE_UNDEFINED) type = TOKENIZER_TYPE_NORMAL;
        if (tokenizer_add_token(tok, id, text.data, (size_t)text.len, text.data, (size_t)text.len,
                                score, type) != 0) {
            snprintf(err, errlen, "%s: out of memory reading %d tokens", file->path, tok->n_vocab);
            return -1;
        }
    }
    return 0;
}

/* BPE only: the pre-tokenizer and the merges. */
static int read_bpe(struct tokenizer *tok, const struct gguf_file *file, char *err, size_t errlen) {
    const struct gguf_kv *pre = gguf_find(file, "tokenizer.ggml.pre");
    if (pre && pre->value.type != GGUF_TYPE_STRING) {
        snprintf(err, errlen, "%s: tokenizer.ggml.pre must be a string, not %s", file->path,
                 type_name(pre->value.type));
        return -1;
    }
    if (tokenizer_bpe_init(tok, pre ? pre->value.v.str.data : NULL,
                           pre ? (size_t)pre->value.v.str.len : 0, file->path, err, errlen) != 0)
        return -1;
    const struct gguf_value *merges;
    if (find_array(file, "tokenizer.ggml.merges", GGUF_TYPE_STRING, 1, 0, &merges, err, errlen))
        return -1;
    size_t n = (size_t)merges->v.arr.n;
    if (merges->v.arr.n > INT_MAX) {
        snprintf(err, errlen, "%s: tokenizer.ggml.merges has %llu entries", file->path,
                 (unsigned long long)merges->v.arr.n);
        return -1;
    }
    const char **texts = malloc((n ? n : 1) * sizeof(*texts));
    size_t *lengths = malloc((n ? n : 1) * sizeof(*lengths));
    int rc = -1;
    if (!texts || !lengths) {
        snprintf(err, errlen, "%s: out of memory reading %zu merges", file->path, n);
    } else {
        for (size_t i = 0; i < n; i++) {
            struct gguf_string merge = gguf_array_string(merges, i);
            texts[i] = merge.data;
            lengths[i] = (size_t)merge.len;
        }
        rc = tokenizer_bpe_add_merges(tok, texts, lengths, n, file->path, err, errlen);
    }
    free(texts);
    free(lengths);
    return rc;
}

/* The scheme named by tokenizer.ggml.model. */
static int read_kind(const struct gguf_file *file, enum tokenizer_kind *kind, char *err,
                     size_t errlen) {
    struct gguf_string model;
    if (gguf_get_string(file, "tokenizer.ggml.model", &model, err, errlen) != 0) return -1;
    if (gguf_string_equals(model, "llama")) {
        *kind = TOKENIZER_SPM;
    } else if (gguf_string_equals(model, "gpt2")) {
        *kind = TOKENIZER_BPE;
    } else {
        snprintf(err, errlen, "%s: tokenizer.ggml.model '%.*s' is not supported (llama, gpt2)",
                 file->path, (int)(model.len > 64 ? 64 : model.len), model.data);
        return -1;
    }
    return 0;
}

/* Special ids and flags. */
static int read_specials(struct tokenizer *tok, const struct gguf_file *file, char *err,
                         size_t errlen) {
    int spm = tok->kind == TOKENIZER_SPM;
    int n = tok->n_vocab;
    if (read_token_id(file, "tokenizer.ggml.bos_token_id", spm ? 1 : -1, n, &tok->bos, err,
                      errlen) ||
        read_token_id(file, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, n, &tok->eos, err,
                      errlen) ||
        read_token_id(file, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, n, &tok->unk, err,
                      errlen) ||
        read_bool(file, "tokenizer.ggml.add_bos_token", spm, &tok->add_bos, err, errlen) ||
        read_bool(file, "tokenizer.ggml.add_space_prefix", spm, &tok->add_space_prefix, err,
                  errlen))
        return -1;
    return 0;
}

int tokenizer_load_gguf(struct tokenizer **out, const struct gguf_file *file, char *err,
                        size_t errlen) {
    *out = NULL;
    enum tokenizer_kind kind;
    const struct gguf_value *tokens;
    if (read_kind(file, &kind, err, errlen) != 0 ||
        find_array(file, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, 1, 0, &tokens, err, errlen))
        return -1;
    if (tokens->v.arr.n == 0 || tokens->v.arr.n > INT_MAX) {
        snprintf(err, errlen, "%s: tokenizer.ggml.tokens has %llu entries", file->path,
                 (unsigned long long)tokens->v.arr.n);
        return -1;
    }
    struct tokenizer *tok = tokenizer_create(kind, (int)tokens->v.arr.n);
    if (!tok) {
        snprintf(err, errlen, "%s: out of memory for the tokenizer", file->path);
        return -1;
    }
    if (read_tokens(tok, file, tokens, err, errlen) != 0 ||
        read_specials(tok, file, err, errlen) != 0 ||
        (kind == TOKENIZER_BPE && read_bpe(tok, file, err, errlen) != 0) ||
        tokenizer_finish(tok, file->path, err, errlen) != 0) {
        tokenizer_free(tok);
        return -1;
    }
    *out = tok;
    return 0;
}
