/* special.c -- tokenizer_encode_special: encoding a text in which the
 * spelling of a special token stands for that token, as llama.cpp does for
 * chat-templated prompts (llama_tokenize with parse_special).
 *
 * Special tokens are those of type CONTROL, USER_DEFINED and UNKNOWN: the
 * set llama.cpp keeps in cache_special_tokens (UNKNOWN joined it with its
 * PR #8228, so "<unk>" in the text is token 0 of a llama vocabulary).
 *
 * The text is cut as llama.cpp's tokenizer_st_partition cuts it: one special
 * token at a time, longest spelling first (equal lengths: lower id first),
 * every occurrence of that spelling in the pieces still raw becomes the
 * token, leftmost first, and the raw text around it is searched for the
 * next token. The raw pieces left are encoded by the ordinary encoder
 * without BOS. llama.cpp gives SPM raw text a space prefix when it starts
 * the text or follows a special token; raw pieces are never adjacent, so
 * that is every piece, which is what the encoder does anyway.
 *
 * The special tokens are collected per call, keeping only those that occur
 * in the text: the tokenizer is read-only once loaded and has no field for
 * them. The scan over the vocabulary costs about 0.6 ns per token (measured
 * 19 us for llama's 32k tokens, 29 us for GPT-2's 50k; ~80 us expected for
 * a 128k vocabulary), small next to a request's prompt evaluation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

/* A special token whose spelling occurs in the text being encoded. */
struct special_token {
    int id;
    const char *text; /* its piece, in the tokenizer's arena */
    size_t len;       /* bytes; > 0 */
};

/* A piece of the text: raw bytes still to encode, or one special token. */
struct fragment {
    size_t start; /* offset in the text */
    size_t len;   /* bytes */
    int id;       /* the special token, or -1 for raw text */
};

/* A growable array of fragments in text order. */
struct fragment_list {
    struct fragment *items; /* (cap) */
    size_t n;               /* fragments in use */
    size_t cap;             /* fragments allocated */
};

static int is_special_type(int type) {
    return type == TOKENIZER_TYPE_CONTROL || type == TOKENIZER_TYPE_USER_DEFINED ||
           type == TOKENIZER_TYPE_UNKNOWN;
}

/* Longest first, then lower id (a deterministic order where llama.cpp's
 * std::sort leaves ties unspecified). */
static int compare_specials(const void *a, const void *b) {
    const struct special_token *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The special tokens whose spelling occurs in text, in matching order,
 * into *out (malloc'd, NULL when there are none). Returns their count or
 * -1 when out of memory. */
static int collect_specials(const struct tokenizer *tok, const char *text, size_t len,
                            struct special_token **out) {
    int n = 0, cap = 0;
    struct special_token *specials = NULL;
    *out = NULL;
    for (int id = 0; id < tok->n_vocab; id++) {
        const struct tokenizer_token *t = &tok->tokens[id];
        if (!is_special_type(t->type) || t->piece_len == 0 || t->piece_len > len) continue;
        const char *piece = tok->arena + t->piece;
        if (!memmem(text, len, piece, t->piece_len)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            struct special_token *grown = realloc(specials, (size_t)cap * sizeof(*specials));
            if (!grown) {
                free(specials);
                return -1;
            }
            specials = grown;
        }
        specials[n++] = (struct special_token){id, piece, t->piece_len};
    }
    if (n > 1) qsort(specials, (size_t)n, sizeof(*specials), compare_specials);
    *out = specials;
    return n;
}

/* Appends a fragment; -1 when out of memory. */
static int push_fragment(struct fragment_list *list, size_t start, size_t len, int id) {
    if (list->n == list->cap) {
        size_t cap = list->cap ? 2 * list->cap : 16;
        struct fragment *grown = realloc(list->items, cap * sizeof(*grown));
        if (!grown) return -1;
        list->items = grown;
        list->cap = cap;
    }
    list->items[list->n++] = (struct fragment){start, len, id};
    return 0;
}

/* Copies in to out (emptied first), cutting every raw fragment at the
 * occurrences of special. Returns -1 when out of memory. */
static int split_fragments(const struct fragment_list *in, struct fragment_list *out,
                           const char *text, const struct special_token *special) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        struct fragment f = in->items[i];
        if (f.id >= 0) {
            if (push_fragment(out, f.start, f.len, f.id) != 0) return -1;
            continue;
        }
        size_t pos = f.start, end = f.start + f.len;
        const char *match;
        while ((match = memmem(text + pos, end - pos, special->text, special->len)) != NULL) {
            size_t at = (size_t)(match - text);
            if (at > pos && push_fragment(out, pos, at - pos, -1) != 0) return -1;
            if (push_fragment(out, at, special->len, special->id) != 0) return -1;
            pos = at + special->len;
        }
        if (pos < end && push_fragment(out, pos, end - pos, -1) != 0) return -1;
    }
    return 0;
}

/* Cuts text into fragments (into *result, which the caller frees). Returns
 * -1 when out of memory. */
static int partition_text(const struct tokenizer *tok, const char *text, size_t len,
                          struct fragment_list *result) {
    struct fragment_list lists[2] = {{NULL, 0, 0}, {NULL, 0, 0}};
    struct special_token *specials;
    int n_specials = collect_specials(tok, text, len, &specials);
    int current = 0, rc = n_specials < 0 ? -1 : 0;
    if (rc == 0 && len > 0) rc = push_fragment(&lists[0], 0, len, -1);
    for (int s = 0; s < n_specials && rc == 0; s++) {
        rc = split_fragments(&lists[current], &lists[1 - current], text, &specials[s]);
        current = 1 - current;
    }
    free(specials);
    free(lists[1 - current].items);
    *result = lists[current];
    return rc;
}

int tokenizer_encode_special(const struct tokenizer *tok, const char *text, size_t len, int add_bos,
                             int *ids, int max_ids, int *n_ids, char *err, size_t errlen) {
    struct tokenizer_output out;
    if (tokenizer_output_begin(tok, &out, ids, max_ids, add_bos, n_ids, err, errlen)) return -1;
    struct fragment_list fragments;
    if (partition_text(tok, text, len, &fragments) != 0) {
        free(fragments.items);
        snprintf(err, errlen, "tokenizer: out of memory encoding %zu bytes", len);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < fragments.n && rc == 0; i++) {
        const struct fragment *f = &fragments.items[i];
        if (f->id >= 0)
            tokenizer_output_push(&out, f->id);
        else
            rc = tokenizer_encode_text(tok, text + f->start, f->len, &out, err, errlen);
    }
    free(fragments.items);
    return rc != 0 ? -1 : tokenizer_output_end(&out, n_ids, err, errlen);
}
