/* step.c -- the automaton: one byte read from a set of stacks.
 *
 * A byte either completes a character (ASCII, or the last byte of a UTF-8
 * sequence) or starts or continues one. A completed character advances
 * every stack whose top set holds it: the top moves to the next element,
 * a finished alternative pops, and the new top is expanded (closure) until
 * every stack's top is a CHARS element or the stack is empty. A character
 * still incomplete keeps the stacks whose top set holds some character
 * its bytes so far can begin (an interval of code points, cut to the
 * bytes' UTF-8 length so no overlong or out-of-range form passes).
 *
 * Expansion of a stack whose top is RULE r: pop it, push where the
 * alternative continues (unless the reference was its last element), then
 * one stack per alternative of r with that alternative's first element on
 * top (an empty alternative leaves the stack as it was after the pop, so
 * the expansion goes on below). Every stack made in a step is kept in a
 * hash set: one made twice is dropped, which ends the expansion of
 * grammars that reach a rule again through references in last position
 * (check.c refuses the growing kind). The result is sorted so equal sets
 * have equal words. GRAMMAR_MAX_STACKS, GRAMMAR_MAX_DEPTH and
 * GRAMMAR_MAX_STACK_WORDS bound a step's work: past them the byte is
 * rejected. */
#include "grammar_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAMMAR_SEEN_MIN 256 /* first size of a step's hash set */

int grammar_words_reserve(struct grammar_words *w, uint32_t n) {
    if (n <= w->cap) return 0;
    uint32_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    uint32_t *bigger = realloc(w->w, (size_t)cap * sizeof(*bigger));
    if (!bigger) return -1;
    w->w = bigger;
    w->cap = cap;
    return 0;
}

void grammar_scratch_free(struct grammar_scratch *s) {
    free(s->pool.w);
    free(s->todo.w);
    free(s->done.w);
    free(s->seen);
    free(s->order);
    memset(s, 0, sizeof(*s));
}

/* ------------------------------------------------------------ stacks made */

static uint32_t hash_words(const uint32_t *w, uint32_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (uint32_t i = 0; i < n; i++) h = (h ^ w[i]) * 0xFF51AFD7ED558CCDull;
    return (uint32_t)(h ^ (h >> 32));
}

/* The stack at pool offset `at`: [depth, positions...]. */
static const uint32_t *stack_at(const struct grammar_scratch *s, uint32_t at) {
    return s->pool.w + at;
}

static int same_stack(const uint32_t *a, const uint32_t *b) {
    return a[0] == b[0] && !memcmp(a + 1, b + 1, (size_t)a[0] * sizeof(*a));
}

/* Empties the hash set (sized for a new step). */
static int seen_reset(struct grammar_scratch *s) {
    if (!s->seen) {
        s->seen = calloc(GRAMMAR_SEEN_MIN, sizeof(*s->seen));
        if (!s->seen) return -1;
        s->seen_cap = GRAMMAR_SEEN_MIN;
    } else {
        memset(s->seen, 0, (size_t)s->seen_cap * sizeof(*s->seen));
    }
    s->n_seen = 0;
    return 0;
}

/* Inserts offset `at` (hash h) into the set, which has room. */
static void seen_put(struct grammar_scratch *s, uint32_t at, uint32_t h) {
    uint32_t mask = s->seen_cap - 1, i = h & mask;
    while (s->seen[i]) i = (i + 1) & mask;
    s->seen[i] = at + 1;
    s->n_seen++;
}

/* Doubles the hash set. */
static int seen_grow(struct grammar_scratch *s) {
    uint32_t *old = s->seen, old_cap = s->seen_cap;
    s->seen = calloc((size_t)old_cap * 2, sizeof(*s->seen));
    if (!s->seen) {
        s->seen = old;
        return -1;
    }
    s->seen_cap = old_cap * 2;
    s->n_seen = 0;
    for (uint32_t i = 0; i < old_cap; i++) {
        if (!old[i]) continue;
        const uint32_t *w = stack_at(s, old[i] - 1);
        seen_put(s, old[i] - 1, hash_words(w, w[0] + 1));
    }
    free(old);
    return 0;
}

/* Keeps the stack just written at the end of the pool (offset `at`) if it
 * is new: queued for expansion, or among the results if its top reads a
 * character or it is empty. 1 kept or dropped as a repeat, 0 a limit hit,
 * -1 out of memory. */
static int keep(const struct grammar *g, struct grammar_scratch *s, uint32_t at) {
    const uint32_t *w = stack_at(s, at);
    uint32_t h = hash_words(w, w[0] + 1), mask = s->seen_cap - 1;
    for (uint32_t i = h & mask; s->seen[i]; i = (i + 1) & mask)
        if (same_stack(stack_at(s, s->seen[i] - 1), w)) {
            s->pool.n = at; /* a repeat: forget it */
            return 1;
        }
    if (s->n_seen >= GRAMMAR_MAX_STACKS || w[0] > GRAMMAR_MAX_DEPTH ||
        s->pool.n > GRAMMAR_MAX_STACK_WORDS)
        return 0;
    if (2 * (s->n_seen + 1) > s->seen_cap && seen_grow(s)) return -1;
    seen_put(s, at, h);
    w = stack_at(s, at);
    int reads = w[0] == 0 || g->elements[w[w[0]]].kind == GRAMMAR_CHARS;
    struct grammar_words *list = reads ? &s->done : &s->todo;
    if (grammar_words_reserve(list, list->n + 1)) return -1;
    list->w[list->n++] = at;
    return 1;
}

/* Writes a stack to the pool: the `depth` entries of base (a pool offset's
 * positions, or other memory), then up to two more (UINT32_MAX: none).
 * Its offset in *at. */
static int make(struct grammar_scratch *s, const uint32_t *base, uint32_t depth, uint32_t more1,
                uint32_t more2, uint32_t *at) {
    if (grammar_words_reserve(&s->pool, s->pool.n + depth + 3)) return -1;
    uint32_t *w = s->pool.w + s->pool.n;
    *at = s->pool.n;
    memcpy(w + 1, base, (size_t)depth * sizeof(*w));
    if (more1 != UINT32_MAX) w[1 + depth++] = more1;
    if (more2 != UINT32_MAX) w[1 + depth++] = more2;
    w[0] = depth;
    s->pool.n += depth + 1;
    return 0;
}

/* Expands the queued stacks until every one reads a character. */
static int closure(const struct grammar *g, struct grammar_scratch *s) {
    for (uint32_t q = 0; q < s->todo.n; q++) {
        uint32_t at = s->todo.w[q];
        uint32_t depth = s->pool.w[at], top = s->pool.w[at + depth];
        const struct grammar_rule *rule = &g->rules[g->elements[top].value];
        uint32_t next = g->elements[top + 1].kind == GRAMMAR_END ? UINT32_MAX : top + 1;
        for (uint32_t a = rule->first_alt; a < rule->first_alt + rule->n_alts; a++) {
            uint32_t start = g->alts[a], made;
            uint32_t first = g->elements[start].kind == GRAMMAR_END ? UINT32_MAX : start;
            /* the pool may move as it grows: make copies from its offset */
            if (grammar_words_reserve(&s->pool, s->pool.n + depth + 3)) return -1;
            if (make(s, s->pool.w + at + 1, depth - 1, next, first, &made)) return -1;
            int rc = keep(g, s, made);
            if (rc <= 0) return rc;
        }
    }
    return 1;
}

/* ------------------------------------------------------------ sorting */

/* a < b in the set's order: shallower first, then by positions. */
static int stack_before(const uint32_t *a, const uint32_t *b) {
    if (a[0] != b[0]) return a[0] < b[0];
    for (uint32_t i = 1; i <= a[0]; i++)
        if (a[i] != b[i]) return a[i] < b[i];
    return 0;
}

/* Sorts the result offsets (a bottom-up merge sort). */
static int sort_done(struct grammar_scratch *s) {
    uint32_t n = s->done.n;
    if (n > s->order_cap) {
        uint32_t *spare = realloc(s->order, (size_t)n * sizeof(*spare));
        if (!spare) return -1;
        s->order = spare;
        s->order_cap = n;
    }
    uint32_t *a = s->done.w, *b = s->order;
    for (uint32_t width = 1; width < n; width *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * width) {
            uint32_t mid = lo + width < n ? lo + width : n;
            uint32_t hi = lo + 2 * width < n ? lo + 2 * width : n, i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                b[k++] = stack_before(stack_at(s, a[j]), stack_at(s, a[i])) ? a[j++] : a[i++];
            while (i < mid) b[k++] = a[i++];
            while (j < hi) b[k++] = a[j++];
        }
        uint32_t *t = a;
        a = b;
        b = t;
    }
    if (a != s->done.w) memcpy(s->done.w, a, (size_t)n * sizeof(*a));
    return 0;
}

/* Writes the sorted results to out. */
static int write_done(struct grammar_scratch *s, struct grammar_words *out) {
    uint32_t total = 0;
    if (sort_done(s)) return -1;
    for (uint32_t i = 0; i < s->done.n; i++) total += s->pool.w[s->done.w[i]] + 1;
    if (grammar_words_reserve(out, total)) return -1;
    out->n = 0;
    for (uint32_t i = 0; i < s->done.n; i++) {
        const uint32_t *w = stack_at(s, s->done.w[i]);
        memcpy(out->w + out->n, w, (size_t)(w[0] + 1) * sizeof(*w));
        out->n += w[0] + 1;
    }
    return 0;
}

static int scratch_reset(struct grammar_scratch *s) {
    s->pool.n = s->todo.n = s->done.n = 0;
    return seen_reset(s);
}

/* ------------------------------------------------------------ UTF-8 */

#define PARTIAL(value, length, left) (((value) << 8) | ((length) << 4) | (left))

/* The code points a UTF-8 sequence of `length` bytes with `left` still to
 * come and the bits `value` so far can become: [*lo, *hi]; 0 if none. */
static int partial_interval(uint32_t value, uint32_t length, uint32_t left, uint32_t *lo,
                            uint32_t *hi) {
    static const uint32_t smallest[5] = {0, 0, 0x80, 0x800, 0x10000};
    static const uint32_t largest[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    uint32_t shift = 6 * left;
    *lo = value << shift;
    *hi = *lo | ((1u << shift) - 1);
    if (*lo < smallest[length]) *lo = smallest[length];
    if (*hi > largest[length]) *hi = largest[length];
    return *lo <= *hi;
}

/* Reads byte against the partial character of `from`: a complete code
 * point (*cp, returns 1), a partial one (*partial, returns 2), or invalid
 * UTF-8 (0). */
static int read_byte(uint32_t from, uint8_t byte, uint32_t *cp, uint32_t *partial) {
    uint32_t value, length, left;
    if (from == 0) {
        if (byte < 0x80) {
            *cp = byte;
            return 1;
        }
        length = (byte >> 5) == 6 ? 2 : (byte >> 4) == 14 ? 3 : (byte >> 3) == 30 ? 4 : 0;
        if (length == 0) return 0;
        value = byte & (0x7Fu >> length);
        left = length - 1;
    } else {
        if ((byte & 0xC0) != 0x80) return 0;
        value = ((from >> 8) << 6) | (byte & 0x3Fu);
        length = (from >> 4) & 15;
        left = (from & 15) - 1;
    }
    uint32_t lo, hi;
    if (!partial_interval(value, length, left, &lo, &hi)) return 0;
    *partial = PARTIAL(value, length, left);
    *cp = value;
    return left == 0 ? 1 : 2;
}

/* ------------------------------------------------------------ a step */

/* Advances every stack of `from` whose top holds cp, then expands. */
static int step_char(const struct grammar *g, const struct grammar_set *from, uint32_t cp,
                     struct grammar_scratch *s) {
    for (uint32_t i = 0; i < from->n_words; i += from->words[i] + 1) {
        const uint32_t *w = from->words + i;
        uint32_t depth = w[0], top = w[depth], at;
        if (depth == 0 || !grammar_charset_has(g, &g->charsets[g->elements[top].value], cp))
            continue;
        /* the top moves on; a finished alternative pops */
        int finished = g->elements[top + 1].kind == GRAMMAR_END;
        if (make(s, w + 1, depth - 1, finished ? UINT32_MAX : top + 1, UINT32_MAX, &at)) return -1;
        int rc = keep(g, s, at);
        if (rc <= 0) return rc;
    }
    return closure(g, s);
}

/* Keeps the stacks of `from` whose top can take a character in [lo, hi]. */
static int step_partial(const struct grammar *g, const struct grammar_set *from, uint32_t lo,
                        uint32_t hi, struct grammar_words *out) {
    if (grammar_words_reserve(out, from->n_words)) return -1;
    out->n = 0;
    for (uint32_t i = 0; i < from->n_words; i += from->words[i] + 1) {
        const uint32_t *w = from->words + i;
        uint32_t depth = w[0];
        if (depth == 0 ||
            !grammar_charset_meets(g, &g->charsets[g->elements[w[depth]].value], lo, hi))
            continue;
        memcpy(out->w + out->n, w, (size_t)(depth + 1) * sizeof(*w));
        out->n += depth + 1;
    }
    return 0;
}

int grammar_step(const struct grammar *g, const struct grammar_set *from, uint8_t byte,
                 struct grammar_scratch *scratch, struct grammar_words *out, uint32_t *partial) {
    uint32_t cp, next = 0;
    int kind = read_byte(from->partial, byte, &cp, &next);
    if (kind == 0) return 0;
    if (kind == 2) {
        uint32_t lo, hi;
        partial_interval(next >> 8, (next >> 4) & 15, next & 15, &lo, &hi);
        if (step_partial(g, from, lo, hi, out)) return -1;
        *partial = next;
        return out->n > 0;
    }
    if (scratch_reset(scratch)) return -1;
    int rc = step_char(g, from, cp, scratch);
    if (rc <= 0) return rc;
    if (write_done(scratch, out)) return -1;
    *partial = 0;
    return out->n > 0;
}

int grammar_start(struct grammar *g, char *err, size_t errlen) {
    struct grammar_scratch s = {0};
    struct grammar_words out = {0};
    uint32_t position = g->n_elements - 2, at; /* append_start's RULE root */
    int rc = scratch_reset(&s) ? -1 : make(&s, &position, 1, UINT32_MAX, UINT32_MAX, &at);
    if (rc == 0) rc = keep(g, &s, at);
    if (rc > 0) rc = closure(g, &s);
    if (rc > 0) rc = write_done(&s, &out) ? -1 : 1;
    grammar_scratch_free(&s);
    if (rc <= 0) {
        free(out.w);
        if (rc == 0)
            snprintf(err, errlen,
                     "root opens more than %d alternatives (or nests rules deeper than %d) at "
                     "its first character: shorten its largest alternation (a long list of "
                     "literals, a JSON Schema enum or anyOf)",
                     GRAMMAR_MAX_STACKS, GRAMMAR_MAX_DEPTH);
        else
            snprintf(err, errlen, "out of memory");
        return -1;
    }
    g->start = out.w;
    g->n_start = out.n;
    return 0;
}

int grammar_set_can_end(const struct grammar_set *set) {
    return set->partial == 0 && set->n_words > 0 && set->words[0] == 0;
}

int grammar_set_is_done(const struct grammar *g, const struct grammar_set *set) {
    if (!grammar_set_can_end(set)) return 0;
    for (uint32_t i = 0; i < set->n_words; i += set->words[i] + 1) {
        uint32_t depth = set->words[i];
        if (depth > 0 && g->charsets[g->elements[set->words[i + depth]].value].count > 0) return 0;
    }
    return 1;
}
