/* vocab.c -- the trie of a vocabulary's byte strings, for grammar_mask.
 *
 * Built once per model: the tokens with bytes (end tokens and empty ones
 * left out) sorted by their bytes, then laid out as trie nodes in
 * depth-first order. In sorted order a token shares with the one before it
 * exactly the nodes of their common prefix, so each token adds one node
 * per byte past that prefix, and the node of a depth stays open (its
 * subtree still growing) until a token branches off above it. Each node
 * records where its subtree ends, which is what lets grammar_mask skip
 * every token under a byte the grammar rejects with one jump. */
#include "grammar_internal.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A token being sorted. */
struct grammar_entry {
    const unsigned char *bytes; /* its bytes (the caller's) */
    size_t length;              /* their count */
    int32_t id;                 /* the token */
};

static atomic_uint_fast64_t grammar_vocab_serials = 1;

static int by_bytes(const void *a, const void *b) {
    const struct grammar_entry *x = a, *y = b;
    size_t n = x->length < y->length ? x->length : y->length;
    int c = memcmp(x->bytes, y->bytes, n);
    if (c) return c;
    if (x->length != y->length) return x->length < y->length ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Bytes the two entries share at the start. */
static size_t common_prefix(const struct grammar_entry *a, const struct grammar_entry *b) {
    size_t n = 0;
    while (n < a->length && n < b->length && a->bytes[n] == b->bytes[n]) n++;
    return n;
}

/* Lays the sorted entries out as nodes (room for one per byte given). */
static void build_nodes(struct grammar_vocab *v, const struct grammar_entry *e, uint32_t n) {
    uint32_t open[GRAMMAR_MAX_TOKEN_BYTES + 1]; /* open[d]: the open node at depth d */
    uint32_t n_open = 0;                        /* depths open: 1 .. n_open */
    for (uint32_t i = 0; i < n; i++) {
        size_t shared = i ? common_prefix(&e[i - 1], &e[i]) : 0;
        while (n_open > shared) v->nodes[open[n_open--]].end = v->n_nodes;
        for (size_t d = shared + 1; d <= e[i].length; d++) {
            open[++n_open] = v->n_nodes;
            v->nodes[v->n_nodes++] = (struct grammar_node){0, i, 0, (uint16_t)d, e[i].bytes[d - 1]};
        }
        assert(n_open > 0);                /* every entry has bytes */
        v->nodes[open[n_open]].n_tokens++; /* a repeat of the bytes before joins their node */
        v->tokens[i] = e[i].id;
        if (e[i].length > v->max_depth) v->max_depth = (uint32_t)e[i].length;
    }
    while (n_open > 0) v->nodes[open[n_open--]].end = v->n_nodes;
}

/* Checks the end tokens and copies them; marks them in is_end. */
static int take_end_tokens(struct grammar_vocab *v, const int *end_tokens, int n_end,
                           uint8_t *is_end, char *err, size_t errlen) {
    v->end_tokens = malloc(((size_t)n_end + 1) * sizeof(*v->end_tokens));
    if (!v->end_tokens) {
        snprintf(err, errlen, "out of memory for the vocabulary's trie");
        return -1;
    }
    for (int i = 0; i < n_end; i++) {
        int t = end_tokens[i];
        if (t < 0 || t >= v->n_tokens) {
            snprintf(err, errlen, "end token %d is out of range (a vocabulary of %d tokens)", t,
                     v->n_tokens);
            return -1;
        }
        if (!is_end[t]) v->end_tokens[v->n_end++] = t;
        is_end[t] = 1;
    }
    return 0;
}

/* The tokens that go in the trie, as entries; their count in *n. */
static struct grammar_entry *trie_entries(int n_tokens, const char *const *bytes,
                                          const size_t *lengths, const uint8_t *is_end, uint32_t *n,
                                          size_t *total, char *err, size_t errlen) {
    struct grammar_entry *e = malloc(((size_t)n_tokens + 1) * sizeof(*e));
    *n = 0;
    *total = 0;
    if (!e) {
        snprintf(err, errlen, "out of memory for the vocabulary's trie");
        return NULL;
    }
    for (int t = 0; t < n_tokens; t++) {
        if (is_end[t] || lengths[t] == 0) continue;
        if (lengths[t] > GRAMMAR_MAX_TOKEN_BYTES || !bytes[t]) {
            if (bytes[t])
                snprintf(err, errlen, "token %d is %zu bytes long; the limit is %d", t, lengths[t],
                         GRAMMAR_MAX_TOKEN_BYTES);
            else
                snprintf(err, errlen, "token %d has a length but no bytes", t);
            free(e);
            return NULL;
        }
        e[(*n)++] = (struct grammar_entry){(const unsigned char *)bytes[t], lengths[t], t};
        *total += lengths[t];
    }
    qsort(e, *n, sizeof(*e), by_bytes);
    return e;
}

/* The sorted entries as nodes and tokens of v. */
static int build_trie(struct grammar_vocab *v, const struct grammar_entry *e, uint32_t n,
                      size_t total, char *err, size_t errlen) {
    if (total > UINT32_MAX / 2) {
        snprintf(err, errlen, "the vocabulary's tokens hold %zu bytes; the trie takes at most %u",
                 total, UINT32_MAX / 2);
        return -1;
    }
    v->nodes = malloc((total + 1) * sizeof(*v->nodes));
    v->tokens = malloc(((size_t)n + 1) * sizeof(*v->tokens));
    if (!v->nodes || !v->tokens) {
        snprintf(err, errlen, "out of memory for the vocabulary's trie");
        return -1;
    }
    build_nodes(v, e, n);
    struct grammar_node *fit = realloc(v->nodes, ((size_t)v->n_nodes + 1) * sizeof(*fit));
    if (fit) v->nodes = fit;
    return 0;
}

/* spread[b]: the 8 bytes 0 or 1 of b's bits, lowest first. */
static void fill_spread(struct grammar_vocab *v) {
    for (int b = 0; b < 256; b++)
        for (int i = 0; i < 8; i++) v->spread[b][i] = (uint8_t)((b >> i) & 1);
}

int grammar_vocab_create(struct grammar_vocab **out, int n_tokens, const char *const *token_bytes,
                         const size_t *lengths, const int *end_tokens, int n_end, char *err,
                         size_t errlen) {
    *out = NULL;
    if (n_tokens < 0 || n_end < 0) {
        snprintf(err, errlen, "a vocabulary of %d tokens with %d end tokens", n_tokens, n_end);
        return -1;
    }
    struct grammar_vocab *v = calloc(1, sizeof(*v));
    uint8_t *is_end = calloc((size_t)n_tokens + 1, 1);
    struct grammar_entry *e = NULL;
    uint32_t n = 0;
    size_t total = 0;
    int rc = -1;
    if (!v || !is_end) {
        snprintf(err, errlen, "out of memory for the vocabulary's trie");
    } else {
        v->n_tokens = n_tokens;
        v->serial = atomic_fetch_add(&grammar_vocab_serials, 1);
        fill_spread(v);
        if (take_end_tokens(v, end_tokens, n_end, is_end, err, errlen) == 0)
            e = trie_entries(n_tokens, token_bytes, lengths, is_end, &n, &total, err, errlen);
        if (e) rc = build_trie(v, e, n, total, err, errlen);
    }
    free(e);
    free(is_end);
    if (rc) {
        grammar_vocab_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

void grammar_vocab_free(struct grammar_vocab *v) {
    if (!v) return;
    free(v->nodes);
    free(v->tokens);
    free(v->end_tokens);
    free(v);
}

int grammar_vocab_size(const struct grammar_vocab *v) {
    return v->n_tokens;
}
