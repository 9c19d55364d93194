/* charset.c -- sets of code points for the grammar's CHARS elements.
 *
 * The parser collects a class's ranges (or one code point of a literal) in
 * a struct grammar_ranges; grammar_ranges_normalize sorts and merges them,
 * complements a negated class over U+0000..U+10FFFF, and removes the
 * surrogates U+D800..U+DFFF, which UTF-8 text cannot hold. The automaton
 * asks whether a set has a code point (a character read whole) or meets
 * an interval (the characters a partial UTF-8 sequence can still become). */
#include "grammar_internal.h"

#include <stdlib.h>

#define GRAMMAR_LAST_CODE_POINT 0x10FFFFu
#define GRAMMAR_SURROGATE_LO    0xD800u
#define GRAMMAR_SURROGATE_HI    0xDFFFu

int grammar_ranges_add(struct grammar_ranges *set, uint32_t lo, uint32_t hi) {
    if (set->n == set->cap) {
        uint32_t cap = set->cap ? 2 * set->cap : 8;
        struct grammar_range *r = realloc(set->r, cap * sizeof(*r));
        if (!r) return -1;
        set->r = r;
        set->cap = cap;
    }
    set->r[set->n++] = (struct grammar_range){lo, hi};
    return 0;
}

static int by_lo(const void *a, const void *b) {
    const struct grammar_range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Sorts the ranges and merges those that overlap or touch. */
static void merge(struct grammar_ranges *set) {
    if (set->n == 0) return;
    qsort(set->r, set->n, sizeof(*set->r), by_lo);
    uint32_t n = 1;
    for (uint32_t i = 1; i < set->n; i++) {
        struct grammar_range *last = &set->r[n - 1];
        if (set->r[i].lo <= last->hi + 1) {
            if (set->r[i].hi > last->hi) last->hi = set->r[i].hi;
        } else {
            set->r[n++] = set->r[i];
        }
    }
    set->n = n;
}

/* Replaces the merged set by its complement in 0..U+10FFFF. */
static int complement(struct grammar_ranges *set) {
    struct grammar_ranges out = {0};
    uint32_t next = 0; /* first code point not yet covered */
    int rc = 0;
    for (uint32_t i = 0; i < set->n && rc == 0; i++) {
        if (set->r[i].lo > next) rc = grammar_ranges_add(&out, next, set->r[i].lo - 1);
        next = set->r[i].hi + 1;
    }
    if (rc == 0 && next <= GRAMMAR_LAST_CODE_POINT)
        rc = grammar_ranges_add(&out, next, GRAMMAR_LAST_CODE_POINT);
    free(set->r);
    *set = out;
    return rc;
}

/* Cuts the surrogates out of the merged set. */
static int drop_surrogates(struct grammar_ranges *set) {
    struct grammar_ranges out = {0};
    int rc = 0;
    for (uint32_t i = 0; i < set->n && rc == 0; i++) {
        struct grammar_range r = set->r[i];
        if (r.lo < GRAMMAR_SURROGATE_LO)
            rc = grammar_ranges_add(&out, r.lo,
                                    r.hi < GRAMMAR_SURROGATE_LO ? r.hi : GRAMMAR_SURROGATE_LO - 1);
        if (rc == 0 && r.hi > GRAMMAR_SURROGATE_HI)
            rc = grammar_ranges_add(
                &out, r.lo > GRAMMAR_SURROGATE_HI ? r.lo : GRAMMAR_SURROGATE_HI + 1, r.hi);
    }
    free(set->r);
    *set = out;
    return rc;
}

int grammar_ranges_normalize(struct grammar_ranges *set, int negate) {
    merge(set);
    if (negate && complement(set)) return -1;
    return drop_surrogates(set);
}

/* Index of the first range of c whose end is at or past cp (c->count if
 * none). */
static uint32_t first_ending_at_or_after(const struct grammar *g, const struct grammar_charset *c,
                                         uint32_t cp) {
    const struct grammar_range *r = g->ranges + c->first;
    uint32_t lo = 0, hi = c->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (r[mid].hi < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int grammar_charset_meets(const struct grammar *g, const struct grammar_charset *c, uint32_t lo,
                          uint32_t hi) {
    uint32_t i = first_ending_at_or_after(g, c, lo);
    return i < c->count && g->ranges[c->first + i].lo <= hi;
}

int grammar_charset_has(const struct grammar *g, const struct grammar_charset *c, uint32_t cp) {
    if (cp < 128) return (int)((c->ascii[cp >> 6] >> (cp & 63)) & 1);
    return grammar_charset_meets(g, c, cp, cp);
}
