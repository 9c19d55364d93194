/* state.c -- compiling a grammar, and one sequence's place in it.
 *
 * grammar_compile parses (parse.c), checks (check.c) and keeps the start
 * set; a state starts as a copy of it. grammar_accept steps the state's
 * set byte by byte (step.c) into two spare sets, and only when every byte
 * is taken does the result become the state's: a rejected text leaves the
 * state as it was. A copy gets its own sets and working memory and shares
 * the memo of masks (mask.c). */
#include "grammar_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void grammar_free(struct grammar *g) {
    if (!g) return;
    free(g->elements);
    free(g->alts);
    free(g->rules);
    free(g->charsets);
    free(g->ranges);
    free(g->start);
    free(g);
}

int grammar_compile(struct grammar **out, const char *gbnf, size_t length, char *err,
                    size_t errlen) {
    *out = NULL;
    struct grammar *g = calloc(1, sizeof(*g));
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (grammar_parse(g, gbnf ? gbnf : "", gbnf ? length : 0, err, errlen)) {
        grammar_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

/* Sets s's configuration to n words and partial. */
static int set_words(struct grammar_state *s, const uint32_t *words, uint32_t n, uint32_t partial) {
    if (grammar_words_reserve(&s->set, n ? n : 1)) return -1;
    if (n) memcpy(s->set.w, words, (size_t)n * sizeof(*words));
    s->set.n = n;
    s->partial = partial;
    return 0;
}

struct grammar_state *grammar_state_create(const struct grammar *g) {
    struct grammar_state *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->g = g;
    s->memo_limit = GRAMMAR_MEMO_BYTES;
    if (set_words(s, g->start, g->n_start, 0)) {
        grammar_state_free(s);
        return NULL;
    }
    return s;
}

struct grammar_state *grammar_state_copy(const struct grammar_state *s) {
    struct grammar_state *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->g = s->g;
    c->memo_limit = s->memo_limit;
    if (set_words(c, s->set.w, s->set.n, s->partial)) {
        grammar_state_free(c);
        return NULL;
    }
    c->memo = grammar_memo_share(s->memo);
    return c;
}

void grammar_state_free(struct grammar_state *s) {
    if (!s) return;
    grammar_memo_release(s->memo);
    grammar_scratch_free(&s->work);
    free(s->set.w);
    free(s->spare[0].w);
    free(s->spare[1].w);
    free(s);
}

int grammar_accept(struct grammar_state *s, const char *bytes, size_t n) {
    struct grammar_set from = {s->set.w, s->set.n, s->partial};
    struct grammar_words *to = NULL;
    for (size_t i = 0; i < n; i++) {
        to = &s->spare[i & 1];
        uint32_t partial;
        if (grammar_step(s->g, &from, (uint8_t)bytes[i], &s->work, to, &partial) <= 0) return -1;
        from = (struct grammar_set){to->w, to->n, partial};
    }
    if (to) {
        /* the last set written becomes the state's (buffers swap, no copy) */
        struct grammar_words old = s->set;
        s->set = *to;
        *to = old;
        s->partial = from.partial;
    }
    return 0;
}

int grammar_can_end(const struct grammar_state *s) {
    struct grammar_set set = {s->set.w, s->set.n, s->partial};
    return grammar_set_can_end(&set);
}

int grammar_is_done(const struct grammar_state *s) {
    struct grammar_set set = {s->set.w, s->set.n, s->partial};
    return grammar_set_is_done(s->g, &set);
}
