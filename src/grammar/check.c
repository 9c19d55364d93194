/* check.c -- what a parsed grammar must satisfy before it runs, and its
 * start.
 *
 * After parse.c: every rule used is defined, a rule named root exists, and
 * no rule is left-recursive in a way that grows the stack. The automaton
 * (step.c) expands a rule reference by pushing where the caller continues
 * and the alternatives' first elements; reaching the same rule again
 * before any character is read is harmless when the reference is the last
 * element of its alternative (nothing is pushed: the stack is one seen
 * before, and the expansion stops there) but endless otherwise. So a
 * grammar is refused when a rule can reach itself, through elements that
 * can match nothing, over at least one reference that is not last; the
 * message names the rule and says that left recursion is not supported.
 * The check: "left edges" A -> B where B is referenced in A after only
 * nullable elements, marked growing when it is not last; strongly
 * connected components (Tarjan's algorithm, without recursion); a growing
 * edge inside a component is such a cycle. Then the start set (root
 * expanded) is computed once for every state to copy. */
#include "grammar_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rule graph's left edges, by source rule (CSR). */
struct grammar_edges {
    uint32_t *first;  /* (n_rules + 1) edges of rule r: first[r] .. first[r + 1] */
    uint32_t *target; /* (n_edges) */
    uint8_t *growing; /* (n_edges) 1 if the reference is not last in its alternative */
    uint32_t n_edges; /* edges */
};

/* Writes "L:C: message" for offset at; returns -1. */
static int fail(const char *text, size_t at, char *err, size_t errlen, const char *message) {
    char where[32];
    grammar_where(text, at, where, sizeof(where));
    snprintf(err, errlen, "%s: %s", where, message);
    return -1;
}

/* The first rule used but never defined, as an error; or root's id. */
static int find_root(const struct grammar *g, const struct grammar_origin *origins,
                     const char *text, uint32_t *root, char *err, size_t errlen) {
    char message[256];
    *root = UINT32_MAX;
    for (uint32_t r = 0; r < g->n_rules; r++) {
        const struct grammar_origin *o = &origins[r];
        if (!o->defined) {
            snprintf(message, sizeof(message), "undefined rule '%.*s'", (int)o->name_len, o->name);
            return fail(text, o->used_at, err, errlen, message);
        }
        if (!o->made && o->name_len == 4 && !memcmp(o->name, "root", 4)) *root = r;
    }
    if (*root == UINT32_MAX)
        return fail(text, 0, err, errlen, "no rule named 'root' (the start rule)");
    return 0;
}

/* The rule each alternative belongs to, into owner (n_alts). */
static void alternative_owners(const struct grammar *g, uint32_t *owner) {
    for (uint32_t r = 0; r < g->n_rules; r++)
        for (uint32_t a = 0; a < g->rules[r].n_alts; a++) owner[g->rules[r].first_alt + a] = r;
}

/* The references to each rule, as the alternatives holding them (CSR:
 * uses of r are alt_of[first[r] .. first[r + 1]]). */
static int rule_uses(const struct grammar *g, const uint32_t *alt_of_element, uint32_t **first,
                     uint32_t **alt_of) {
    *first = calloc((size_t)g->n_rules + 1, sizeof(**first));
    *alt_of = malloc(((size_t)g->n_elements + 1) * sizeof(**alt_of));
    if (!*first || !*alt_of) return -1;
    for (uint32_t i = 0; i < g->n_elements; i++)
        if (g->elements[i].kind == GRAMMAR_RULE) (*first)[g->elements[i].value + 1]++;
    for (uint32_t r = 0; r < g->n_rules; r++) (*first)[r + 1] += (*first)[r];
    uint32_t *fill = malloc(((size_t)g->n_rules + 1) * sizeof(*fill));
    if (!fill) return -1;
    memcpy(fill, *first, ((size_t)g->n_rules + 1) * sizeof(*fill));
    for (uint32_t i = 0; i < g->n_elements; i++)
        if (g->elements[i].kind == GRAMMAR_RULE)
            (*alt_of)[fill[g->elements[i].value]++] = alt_of_element[i];
    free(fill);
    return 0;
}

/* Elements of alternative a that are not yet known to match nothing (an
 * alternative with a CHARS element never will: UINT32_MAX). */
static uint32_t pending_elements(const struct grammar *g, uint32_t a) {
    uint32_t n = 0;
    for (uint32_t i = g->alts[a]; g->elements[i].kind != GRAMMAR_END; i++) {
        if (g->elements[i].kind == GRAMMAR_CHARS) return UINT32_MAX;
        n++;
    }
    return n;
}

/* Marks r nullable and queues it, unless it is already. */
static void mark_nullable(uint8_t *nullable, uint32_t *queue, uint32_t *n_queue, uint32_t r) {
    if (nullable[r]) return;
    nullable[r] = 1;
    queue[(*n_queue)++] = r;
}

/* nullable[r] = 1 if rule r can match the empty text (a worklist: an
 * alternative becomes empty when its last pending reference does). */
static int find_nullable(const struct grammar *g, uint8_t *nullable) {
    uint32_t *owner = calloc((size_t)g->n_alts + 1, sizeof(*owner));
    uint32_t *pending = malloc(((size_t)g->n_alts + 1) * sizeof(*pending));
    uint32_t *alt_of_element = calloc((size_t)g->n_elements + 1, sizeof(*alt_of_element));
    uint32_t *queue = malloc(((size_t)g->n_rules + 1) * sizeof(*queue));
    uint32_t *first = NULL, *alt_of = NULL, n_queue = 0;
    int rc = -1;
    if (owner && pending && alt_of_element && queue) {
        alternative_owners(g, owner);
        for (uint32_t a = 0; a < g->n_alts; a++)
            for (uint32_t i = g->alts[a]; g->elements[i].kind != GRAMMAR_END; i++)
                alt_of_element[i] = a;
        rc = rule_uses(g, alt_of_element, &first, &alt_of);
    }
    for (uint32_t a = 0; rc == 0 && a < g->n_alts; a++) {
        pending[a] = pending_elements(g, a);
        if (pending[a] == 0) mark_nullable(nullable, queue, &n_queue, owner[a]);
    }
    for (uint32_t q = 0; rc == 0 && q < n_queue; q++) {
        uint32_t r = queue[q];
        for (uint32_t u = first[r]; u < first[r + 1]; u++) {
            uint32_t a = alt_of[u];
            if (pending[a] != UINT32_MAX && --pending[a] == 0)
                mark_nullable(nullable, queue, &n_queue, owner[a]);
        }
    }
    free(owner);
    free(pending);
    free(alt_of_element);
    free(queue);
    free(first);
    free(alt_of);
    return rc;
}

/* The left edges of g: with edges == NULL counts each rule's into
 * fill[r + 1]; else writes them at fill[r] on. Returns how many. */
static uint32_t left_edges(const struct grammar *g, const uint8_t *nullable,
                           struct grammar_edges *edges, uint32_t *fill) {
    uint32_t n = 0;
    for (uint32_t r = 0; r < g->n_rules; r++) {
        const struct grammar_rule *rule = &g->rules[r];
        for (uint32_t a = rule->first_alt; a < rule->first_alt + rule->n_alts; a++) {
            for (uint32_t i = g->alts[a]; g->elements[i].kind == GRAMMAR_RULE; i++) {
                uint32_t b = g->elements[i].value;
                if (edges) {
                    uint32_t e = fill[r]++;
                    edges->target[e] = b;
                    edges->growing[e] = g->elements[i + 1].kind != GRAMMAR_END;
                } else {
                    fill[r + 1]++;
                }
                n++;
                if (!nullable[b]) break;
            }
        }
    }
    return n;
}

/* Builds the left edges of g (CSR by source). */
static int build_edges(const struct grammar *g, const uint8_t *nullable, struct grammar_edges *e) {
    e->first = calloc((size_t)g->n_rules + 1, sizeof(*e->first));
    uint32_t *fill = malloc(((size_t)g->n_rules + 1) * sizeof(*fill));
    if (!e->first || !fill) {
        free(fill);
        return -1;
    }
    e->n_edges = left_edges(g, nullable, NULL, e->first);
    for (uint32_t r = 0; r < g->n_rules; r++) e->first[r + 1] += e->first[r];
    e->target = malloc(((size_t)e->n_edges + 1) * sizeof(*e->target));
    e->growing = malloc((size_t)e->n_edges + 1);
    if (e->target && e->growing) {
        memcpy(fill, e->first, ((size_t)g->n_rules + 1) * sizeof(*fill));
        left_edges(g, nullable, e, fill);
    }
    free(fill);
    return e->target && e->growing ? 0 : -1;
}

/* Tarjan's working arrays. */
struct grammar_tarjan {
    const struct grammar_edges *edges; /* the graph */
    uint32_t *index;                   /* (n) visit order + 1, 0 unvisited */
    uint32_t *low;                     /* (n) lowest index reachable */
    uint32_t *component;               /* (n) component id once assigned, else UINT32_MAX */
    uint32_t *stack;                   /* (n) Tarjan's stack of nodes */
    uint32_t n_stack;                  /* its depth */
    uint32_t *calls;                   /* (n) the depth-first path: nodes */
    uint32_t *next_edge;               /* (n) each path node's next edge to follow */
    uint32_t counter;                  /* next visit index */
};

/* Pushes node v onto the depth-first path. */
static void tarjan_enter(struct grammar_tarjan *t, uint32_t *depth, uint32_t v) {
    t->index[v] = t->low[v] = ++t->counter;
    t->stack[t->n_stack++] = v;
    t->calls[*depth] = v;
    t->next_edge[*depth] = t->edges->first[v];
    (*depth)++;
}

/* Pops v off the path; closes its component if it is a root. */
static void tarjan_leave(struct grammar_tarjan *t, uint32_t *depth, uint32_t v) {
    (*depth)--;
    if (t->low[v] == t->index[v]) {
        uint32_t w;
        do {
            w = t->stack[--t->n_stack];
            t->component[w] = v;
        } while (w != v);
    }
    if (*depth > 0) {
        uint32_t parent = t->calls[*depth - 1];
        if (t->low[v] < t->low[parent]) t->low[parent] = t->low[v];
    }
}

/* Strongly connected components from node s. */
static void tarjan_from(struct grammar_tarjan *t, uint32_t s) {
    uint32_t depth = 0;
    tarjan_enter(t, &depth, s);
    while (depth > 0) {
        uint32_t v = t->calls[depth - 1];
        if (t->next_edge[depth - 1] == t->edges->first[v + 1]) {
            tarjan_leave(t, &depth, v);
            continue;
        }
        uint32_t w = t->edges->target[t->next_edge[depth - 1]++];
        if (t->index[w] == 0)
            tarjan_enter(t, &depth, w);
        else if (t->component[w] == UINT32_MAX && t->index[w] < t->low[v])
            t->low[v] = t->index[w];
    }
}

/* component[r] for every rule; -1 if out of memory. */
static int components(uint32_t n, const struct grammar_edges *edges, uint32_t *component) {
    struct grammar_tarjan t = {.edges = edges, .component = component};
    size_t size = ((size_t)n + 1) * sizeof(uint32_t);
    t.index = calloc(1, size);
    t.low = malloc(size);
    t.stack = malloc(size);
    t.calls = malloc(size);
    t.next_edge = malloc(size);
    int ok = t.index && t.low && t.stack && t.calls && t.next_edge;
    for (uint32_t r = 0; r < n; r++) component[r] = UINT32_MAX;
    for (uint32_t r = 0; ok && r < n; r++)
        if (t.index[r] == 0) tarjan_from(&t, r);
    free(t.index);
    free(t.low);
    free(t.stack);
    free(t.calls);
    free(t.next_edge);
    return ok ? 0 : -1;
}

/* The first rule with a growing left edge inside its component, or
 * UINT32_MAX. */
static uint32_t growing_cycle(uint32_t n, const struct grammar_edges *e,
                              const uint32_t *component) {
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t k = e->first[r]; k < e->first[r + 1]; k++)
            if (e->growing[k] && component[e->target[k]] == component[r]) return r;
    return UINT32_MAX;
}

/* Refuses left recursion that grows the stack. */
static int check_left_recursion(const struct grammar *g, const struct grammar_origin *origins,
                                const char *text, char *err, size_t errlen) {
    uint8_t *nullable = calloc((size_t)g->n_rules + 1, 1);
    uint32_t *component = malloc(((size_t)g->n_rules + 1) * sizeof(*component));
    struct grammar_edges edges = {0};
    int rc = nullable && component ? find_nullable(g, nullable) : -1;
    if (rc == 0) rc = build_edges(g, nullable, &edges);
    if (rc == 0) rc = components(g->n_rules, &edges, component);
    if (rc) snprintf(err, errlen, "out of memory");
    uint32_t r = rc ? UINT32_MAX : growing_cycle(g->n_rules, &edges, component);
    if (r != UINT32_MAX) {
        char message[400];
        const struct grammar_origin *o = &origins[r];
        snprintf(message, sizeof(message),
                 "rule '%.*s' is left-recursive (it can reach itself again before reading a "
                 "character); left recursion is not supported: write it with repetition, e.g. "
                 "a ::= a \"x\" | \"y\" as a ::= \"y\" \"x\"*",
                 (int)o->name_len, o->name);
        rc = fail(text, o->defined_at, err, errlen, message);
    }
    free(nullable);
    free(component);
    free(edges.first);
    free(edges.target);
    free(edges.growing);
    return rc;
}

/* Appends [RULE root, END], where the automaton starts. */
static int append_start(struct grammar *g, uint32_t root) {
    struct grammar_element *e = realloc(g->elements, ((size_t)g->n_elements + 2) * sizeof(*e));
    if (!e) return -1;
    g->elements = e;
    e[g->n_elements++] = (struct grammar_element){GRAMMAR_RULE, root};
    e[g->n_elements++] = (struct grammar_element){GRAMMAR_END, 0};
    return 0;
}

int grammar_check(struct grammar *g, const struct grammar_origin *origins, const char *text,
                  char *err, size_t errlen) {
    uint32_t root;
    if (find_root(g, origins, text, &root, err, errlen) ||
        check_left_recursion(g, origins, text, err, errlen))
        return -1;
    if (append_start(g, root)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char message[256];
    if (grammar_start(g, message, sizeof(message)) == 0) return 0;
    return fail(text, origins[root].defined_at, err, errlen, message);
}
