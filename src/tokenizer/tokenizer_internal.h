/* tokenizer_internal.h -- what the files of the tokenizer module share and
 * nobody else sees: struct tokenizer itself, the string hash map, the pair
 * merger used by both encoders, and the small UTF-8 helpers.
 *
 * Life of a tokenizer: a loader (load_gguf.c, load_llama2c.c) calls
 * tokenizer_create, appends every token with tokenizer_add_token and then
 * calls tokenizer_finish (vocab.c), which builds the lookup map, the decoded
 * bytes of every token and the byte-fallback table. The encoders (spm.c,
 * bpe.c) and the stream decoder (stream.c) only read it afterwards, so one
 * tokenizer may be used by many threads at once. */
#ifndef LOCKSTEP_TOKENIZER_INTERNAL_H
#define LOCKSTEP_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* Token types, numbered as llama.cpp writes tokenizer.ggml.token_type. */
enum tokenizer_token_type {
    TOKENIZER_TYPE_UNDEFINED = 0,
    TOKENIZER_TYPE_NORMAL = 1,
    TOKENIZER_TYPE_UNKNOWN = 2,
    TOKENIZER_TYPE_CONTROL = 3,
    TOKENIZER_TYPE_USER_DEFINED = 4,
    TOKENIZER_TYPE_UNUSED = 5,
    TOKENIZER_TYPE_BYTE = 6,
};

/* ---- string hash map (strmap.c) ---- */

/* One slot of the open-addressing table; key == NULL marks it empty. */
struct tokenizer_map_slot {
    const char *key; /* not owned; must outlive the map */
    uint32_t len;    /* key bytes */
    uint32_t hash;   /* full hash of the key, compared before the bytes */
    int value;
};

/* A fixed-capacity map from byte strings to ints (linear probing). */
struct tokenizer_map {
    struct tokenizer_map_slot *slots; /* (capacity) */
    size_t capacity;                  /* a power of two, >= 2 * the planned count */
};

/* Sizes the table for up to count keys. Returns -1 when out of memory. */
int tokenizer_map_init(struct tokenizer_map *map, size_t count);
void tokenizer_map_free(struct tokenizer_map *map);
/* Inserts or replaces (the last value put for a key wins, as in llama.cpp). */
void tokenizer_map_put(struct tokenizer_map *map, const char *key, size_t len, int value);
/* The value for key, or -1 if absent. */
int tokenizer_map_get(const struct tokenizer_map *map, const char *key, size_t len);

/* ---- the vocabulary (vocab.c) ---- */

/* One vocabulary entry. Offsets index tok->arena. */
struct tokenizer_token {
    size_t piece; /* the vocabulary's own text (tokenizer_piece) */
    size_t piece_len;
    size_t text; /* the form encoders look up: "▁" for spaces in SPM */
    size_t text_len;
    size_t bytes; /* decoded bytes (tokenizer_token_bytes) */
    size_t bytes_len;
    float score; /* SPM merge priority (higher merges first) */
    int type;    /* enum tokenizer_token_type */
};

/* The GPT-2 style pre-tokenizer regex (bpe.c). */
struct tokenizer_pretokenizer;

/* A loaded vocabulary and everything derived from it; read-only once
 * tokenizer_finish has run. */
struct tokenizer {
    enum tokenizer_kind kind;       /* SPM or BPE: which encoder runs */
    int n_vocab;                    /* tokens; ids are 0..n_vocab-1 */
    struct tokenizer_token *tokens; /* (n_vocab) */
    char *arena;                    /* all token strings, each NUL-terminated */
    size_t arena_len;               /* bytes used */
    size_t arena_cap;               /* bytes allocated */
    struct tokenizer_map lookup;    /* text -> id */
    int byte_token[256];            /* token for a raw byte (fallback), -1 if none */
    size_t max_token_bytes;         /* longest decoded token */
    int bos, eos, unk;              /* special ids, -1 if none */
    int add_bos;                    /* 1 if prompts start with BOS */
    int add_space_prefix;           /* SPM: 1 to prefix the text with a space */
    /* BPE only */
    char *merge_arena;           /* merge strings "left right", NUL-terminated */
    struct tokenizer_map merges; /* "left right" -> rank */
    struct tokenizer_pretokenizer *pretokenizer;
    int ignore_merges; /* 1: a word that is a whole token is not merged */
};

/* Allocates a tokenizer for n_vocab tokens with no specials yet. NULL when
 * out of memory. */
struct tokenizer *tokenizer_create(enum tokenizer_kind kind, int n_vocab);
/* Stores token id's piece and lookup text (text may equal piece). Returns
 * -1 when out of memory. */
int tokenizer_add_token(struct tokenizer *tok, int id, const char *piece, size_t piece_len,
                        const char *text, size_t text_len, float score, int type);
/* Builds the lookup map, decoded bytes and byte table once every token is
 * in. name is the source file for messages. */
int tokenizer_finish(struct tokenizer *tok, const char *name, char *err, size_t errlen);
/* text with every space spelled "▁" (SentencePiece's visible space), into
 * buf (room for 3 * len); returns the length. */
size_t tokenizer_spm_escape(const char *text, size_t len, char *buf);
/* Parses "<0xXX>" into *byte; returns 1 if text is such a byte token. */
int tokenizer_parse_byte_token(const char *text, size_t len, unsigned char *byte);

/* ---- encoders ---- */

/* Where encoders put their ids: writes while there is room, always counts. */
struct tokenizer_output {
    int *ids;    /* (max_ids) the caller's array */
    int max_ids; /* room in ids */
    int n_ids;   /* ids produced so far, possibly more than max_ids */
};

static inline void tokenizer_output_push(struct tokenizer_output *out, int id) {
    if (out->n_ids < out->max_ids) out->ids[out->n_ids] = id;
    out->n_ids++;
}

int tokenizer_encode_spm(const struct tokenizer *tok, const char *text, size_t len,
                         struct tokenizer_output *out, char *err, size_t errlen);
int tokenizer_encode_bpe(const struct tokenizer *tok, const char *text, size_t len,
                         struct tokenizer_output *out, char *err, size_t errlen);
/* Text without special tokens, by the vocabulary's own algorithm. */
int tokenizer_encode_text(const struct tokenizer *tok, const char *text, size_t len,
                          struct tokenizer_output *out, char *err, size_t errlen);
/* An output over the caller's ids, with BOS first if asked (-1 if the
 * vocabulary has none); then, at the end, the count and the check that
 * every id fitted (-1 with the count needed). */
int tokenizer_output_begin(const struct tokenizer *tok, struct tokenizer_output *out, int *ids,
                           int max_ids, int add_bos, int *n_ids, char *err, size_t errlen);
int tokenizer_output_end(const struct tokenizer_output *out, int *n_ids, char *err, size_t errlen);

/* BPE setup (bpe.c): compiles the split regex named by pre (NULL, "default"
 * and "gpt-2" mean GPT-2's; name is the file, for messages), then
 * tokenizer_bpe_add_merges reads the merges into tok->merges. */
int tokenizer_bpe_init(struct tokenizer *tok, const char *pre, size_t pre_len, const char *name,
                       char *err, size_t errlen);
int tokenizer_bpe_add_merges(struct tokenizer *tok, const char *const *merges,
                             const size_t *lengths, size_t n, const char *name, char *err,
                             size_t errlen);
void tokenizer_bpe_free(struct tokenizer *tok);
/* GPT-2's byte-to-unicode table: the code point standing for byte b. */
unsigned tokenizer_bpe_byte_codepoint(unsigned char b);
/* The byte a code point stands for, or -1 if it stands for none. */
int tokenizer_bpe_codepoint_byte(unsigned codepoint);

/* ---- pair merging (merge.c) ---- */

/* A run of bytes of the text being merged; a doubly linked list in order. */
struct tokenizer_symbol {
    int prev, next; /* neighbours, -1 at the ends */
    size_t start;   /* offset in the text */
    size_t len;     /* bytes; 0 once merged into its left neighbour */
};

/* A candidate merge of two adjacent symbols. */
struct tokenizer_bigram {
    int left, right; /* symbol indices */
    float score;     /* higher merges first; ties go to the leftmost */
    size_t len;      /* left.len + right.len when it was scored (stale check) */
};

/* Scores the merge of the symbol at text[start, start + left_len) with the
 * one that follows it (right_len bytes). Returns 1 and sets *score if the
 * pair may merge, 0 otherwise. */
typedef int (*tokenizer_pair_scorer)(const void *ctx, const char *text, size_t start,
                                     size_t left_len, size_t right_len, float *score);

/* Repeatedly merges the best-scoring adjacent pair of symbols[0..n) until
 * none may merge. heap must hold 3 * n bigrams. Afterwards the surviving
 * symbols are linked from symbols[0]. */
void tokenizer_merge(const char *text, struct tokenizer_symbol *symbols, int n,
                     struct tokenizer_bigram *heap, tokenizer_pair_scorer scorer, const void *ctx);

/* ---- UTF-8 ---- */

/* Bytes of the UTF-8 sequence that lead byte c starts, judged by its top
 * four bits as llama.cpp does (continuation bytes count as 1; callers clip
 * the result to the bytes left). */
static inline size_t tokenizer_utf8_len(unsigned char c) {
    static const unsigned char lengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lengths[c >> 4];
}

/* Writes code point cp as UTF-8 to out (room for 4); returns the length. */
size_t tokenizer_utf8_encode(unsigned cp, char *out);

#endif
