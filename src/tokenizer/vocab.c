/* vocab.c -- building a vocabulary: the loaders hand over each token's
 * text, score and type, and tokenizer_finish derives what encoding and
 * decoding need: the text -> id map, the raw bytes every token decodes to
 * and the token for every byte (SPM's <0xXX> fallback, GPT-2's byte
 * symbols). All strings live in one arena addressed by offsets, so the
 * arena can grow while loading. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

/* "▁" (U+2581), SentencePiece's visible space. */
static const char spm_space[3] = {'\xe2', '\x96', '\x81'};

struct tokenizer *tokenizer_create(enum tokenizer_kind kind, int n_vocab) {
    struct tokenizer *tok = calloc(1, sizeof(*tok));
    if (!tok) return NULL;
    tok->kind = kind;
    tok->n_vocab = n_vocab;
    tok->bos = tok->eos = tok->unk = -1;
    tok->tokens = calloc((size_t)n_vocab > 0 ? (size_t)n_vocab : 1, sizeof(*tok->tokens));
    if (!tok->tokens) {
        free(tok);
        return NULL;
    }
    return tok;
}

/* Appends len bytes and a NUL to the arena; returns the offset or
 * (size_t)-1 when out of memory. */
static size_t arena_append(struct tokenizer *tok, const char *data, size_t len) {
    if (tok->arena_cap - tok->arena_len < len + 1) {
        size_t cap = tok->arena_cap ? tok->arena_cap : 4096;
        while (cap - tok->arena_len < len + 1) cap *= 2;
        char *grown = realloc(tok->arena, cap);
        if (!grown) return (size_t)-1;
        tok->arena = grown;
        tok->arena_cap = cap;
    }
    size_t offset = tok->arena_len;
    if (len) memcpy(tok->arena + offset, data, len);
    tok->arena[offset + len] = '\0';
    tok->arena_len += len + 1;
    return offset;
}

int tokenizer_add_token(struct tokenizer *tok, int id, const char *piece, size_t piece_len,
                        const char *text, size_t text_len, float score, int type) {
    struct tokenizer_token *t = &tok->tokens[id];
    t->piece = arena_append(tok, piece, piece_len);
    if (t->piece == (size_t)-1) return -1;
    t->piece_len = piece_len;
    if (text == piece && text_len == piece_len) {
        t->text = t->piece;
    } else {
        t->text = arena_append(tok, text, text_len);
        if (t->text == (size_t)-1) return -1;
    }
    t->text_len = text_len;
    t->score = score;
    t->type = type;
    return 0;
}

int tokenizer_parse_byte_token(const char *text, size_t len, unsigned char *byte) {
    if (len != 6 || memcmp(text, "<0x", 3) != 0 || text[5] != '>') return 0;
    unsigned value = 0;
    for (int i = 3; i < 5; i++) {
        char c = text[i];
        unsigned digit;
        if (c >= '0' && c <= '9')
            digit = (unsigned)(c - '0');
        else if (c >= 'A' && c <= 'F')
            digit = (unsigned)(c - 'A' + 10);
        else if (c >= 'a' && c <= 'f')
            digit = (unsigned)(c - 'a' + 10);
        else
            return 0;
        value = value * 16 + digit;
    }
    *byte = (unsigned char)value;
    return 1;
}

size_t tokenizer_utf8_encode(unsigned cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes one UTF-8 character of s (len > 0) into *cp; returns its length,
 * or 0 if the bytes there are not a complete well-formed sequence. */
static size_t vocab_utf8_decode(const unsigned char *s, size_t len, unsigned *cp) {
    size_t n = tokenizer_utf8_len(s[0]);
    if (n == 1) {
        *cp = s[0];
        return s[0] < 0x80;
    }
    if (n > len) return 0;
    unsigned value = s[0] & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        value = (value << 6) | (s[i] & 0x3F);
    }
    *cp = value;
    return n;
}

size_t tokenizer_spm_escape(const char *text, size_t len, char *buf) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + n, spm_space, sizeof(spm_space));
            n += sizeof(spm_space);
        } else {
            buf[n++] = text[i];
        }
    }
    return n;
}

/* SPM text with every "▁" turned back into a space, into buf (>= len). */
static size_t spm_unescape(const char *text, size_t len, char *buf) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        if (len - i >= sizeof(spm_space) && memcmp(text + i, spm_space, sizeof(spm_space)) == 0) {
            buf[n++] = ' ';
            i += sizeof(spm_space);
        } else {
            buf[n++] = text[i++];
        }
    }
    return n;
}

/* GPT-2 text with the byte-to-unicode mapping undone, into buf (>= len).
 * Characters outside the mapping are kept as they are. */
static size_t bpe_unmap(const char *text, size_t len, char *buf) {
    const unsigned char *s = (const unsigned char *)text;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned cp;
        size_t step = vocab_utf8_decode(s + i, len - i, &cp);
        int byte = step ? tokenizer_bpe_codepoint_byte(cp) : -1;
        if (byte >= 0) {
            buf[n++] = (char)byte;
        } else {
            if (step == 0) step = 1;
            memcpy(buf + n, text + i, step);
            n += step;
        }
        i += step;
    }
    return n;
}

/* The bytes token id decodes to, into buf (>= its text length). Returns
 * the length, or -1 for a BYTE token whose text is not <0xXX>. */
static long decode_token(const struct tokenizer *tok, int id, char *buf) {
    const struct tokenizer_token *t = &tok->tokens[id];
    const char *text = tok->arena + t->text;
    switch (t->type) {
    case TOKENIZER_TYPE_CONTROL:
    case TOKENIZER_TYPE_UNKNOWN:
    case TOKENIZER_TYPE_UNUSED:
        return 0;
    case TOKENIZER_TYPE_BYTE: {
        unsigned char byte;
        if (!tokenizer_parse_byte_token(text, t->text_len, &byte)) return -1;
        buf[0] = (char)byte;
        return 1;
    }
    case TOKENIZER_TYPE_USER_DEFINED:
        memcpy(buf, tok->arena + t->piece, t->piece_len);
        return (long)t->piece_len;
    default:
        if (tok->kind == TOKENIZER_SPM) return (long)spm_unescape(text, t->text_len, buf);
        return (long)bpe_unmap(text, t->text_len, buf);
    }
}

/* Fills tok->byte_token: SPM looks up "<0xXX>" and then the byte itself
 * (as llama.cpp does); GPT-2 looks up the byte's mapped character. */
static void build_byte_tokens(struct tokenizer *tok) {
    for (int b = 0; b < 256; b++) {
        char key[8];
        size_t len;
        int id = -1;
        if (tok->kind == TOKENIZER_SPM) {
            snprintf(key, sizeof(key), "<0x%02X>", (unsigned)b);
            id = tokenizer_map_get(&tok->lookup, key, 6);
            key[0] = (char)b;
            len = 1;
        } else {
            len = tokenizer_utf8_encode(tokenizer_bpe_byte_codepoint((unsigned char)b), key);
        }
        if (id < 0) id = tokenizer_map_get(&tok->lookup, key, len);
        tok->byte_token[b] = id;
    }
}

/* Stores the decoded bytes of every token (tokenizer_token_bytes). */
static int decode_tokens(struct tokenizer *tok, const char *name, char *err, size_t errlen) {
    size_t longest = 0;
    for (int id = 0; id < tok->n_vocab; id++) {
        size_t len = tok->tokens[id].text_len;
        if (tok->tokens[id].piece_len > len) len = tok->tokens[id].piece_len;
        if (len > longest) longest = len;
    }
    char *buf = malloc(longest + 1);
    int rc = buf ? 0 : -1;
    for (int id = 0; id < tok->n_vocab && rc == 0; id++) {
        struct tokenizer_token *t = &tok->tokens[id];
        long n = decode_token(tok, id, buf);
        if (n < 0) {
            snprintf(err, errlen, "%s: token %d has type BYTE but its text '%.32s' is not <0xXX>",
                     name, id, tok->arena + t->text);
            free(buf);
            return -1;
        }
        /* Most tokens decode to their own text: share it. */
        if ((size_t)n == t->text_len && memcmp(buf, tok->arena + t->text, (size_t)n) == 0)
            t->bytes = t->text;
        else
            t->bytes = arena_append(tok, buf, (size_t)n);
        t->bytes_len = (size_t)n;
        if (t->bytes == (size_t)-1) rc = -1;
        if ((size_t)n > tok->max_token_bytes) tok->max_token_bytes = (size_t)n;
    }
    free(buf);
    if (rc != 0) snprintf(err, errlen, "%s: out of memory decoding the vocabulary", name);
    return rc;
}

int tokenizer_finish(struct tokenizer *tok, const char *name, char *err, size_t errlen) {
    if (decode_tokens(tok, name, err, errlen) != 0) return -1;
    /* The arena is complete: keys may now point into it. */
    if (tokenizer_map_init(&tok->lookup, (size_t)tok->n_vocab) != 0) {
        snprintf(err, errlen, "%s: out of memory building the token map", name);
        return -1;
    }
    for (int id = 0; id < tok->n_vocab; id++)
        tokenizer_map_put(&tok->lookup, tok->arena + tok->tokens[id].text, tok->tokens[id].text_len,
                          id);
    build_byte_tokens(tok);
    return 0;
}
