/* parse.c -- GBNF text to the rules of a struct grammar.
 *
 * A recursive-descent parser of llama.cpp's GBNF (see grammar.h for the
 * syntax). Each rule's alternatives are collected in a sequence of its own
 * (struct grammar_seq), then committed to the grammar's element array;
 * groups and repetitions become rules made here, as llama.cpp makes them:
 * x* is R ::= x R | (empty); x+ is x x*; x? is R ::= x | (empty); x{m,n}
 * is x m times, then n-m nested optionals (R_1 ::= x | ..., R_k ::= x
 * R_k-1 | ...) so the automaton never holds more than one of them open;
 * a repeated literal of several characters is a rule first. Whitespace
 * rules are llama.cpp's: spaces, tabs and # comments anywhere; a newline
 * ends a rule except after '|' or inside parentheses. Every error names
 * the line and column where the parser stood. check.c validates what is
 * parsed (undefined rules, root, left recursion). */
#include "base/base.h"
#include "grammar_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The alternatives of one rule being parsed, each ended by an END element. */
struct grammar_seq {
    struct grammar_element *e; /* (cap) */
    uint32_t n;                /* in use */
    uint32_t cap;              /* allocated */
};

struct grammar_parser {
    const char *text;               /* the GBNF */
    size_t length;                  /* its bytes */
    size_t pos;                     /* where the parser stands */
    char *err;                      /* the message of the first error */
    size_t errlen;                  /* its size */
    struct grammar *g;              /* what is built */
    struct grammar_origin *origins; /* (cap_rules) where each rule came from */
    uint32_t cap_rules;             /* allocated g->rules and origins (they grow together) */
    uint32_t cap_elements;          /* allocated g->elements */
    uint32_t cap_alts;              /* allocated g->alts */
    uint32_t cap_charsets;          /* allocated g->charsets */
    uint32_t cap_ranges;            /* allocated g->ranges */
    uint32_t *names;                /* (names_cap) hash table of named rules' ids + 1, 0 empty */
    uint32_t names_cap;             /* a power of two, or 0 */
    uint32_t n_names;               /* named rules */
    uint32_t open;                  /* elements in sequences not yet committed */
    uint32_t owner;                 /* the rule whose definition is being parsed */
    int nesting;                    /* parentheses open */
};

/* ------------------------------------------------------------ errors */

void grammar_where(const char *text, size_t offset, char *buf, size_t size) {
    unsigned line = 1, column = 1;
    for (size_t i = 0; i < offset; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n') {
            line++;
            column = 1;
        } else if ((c & 0xC0) != 0x80) {
            column++; /* continuation bytes belong to the character before */
        }
    }
    snprintf(buf, size, "%u:%u", line, column);
}

/* Writes "L:C: message" for byte offset at; returns -1. */
static int fail_at(struct grammar_parser *p, size_t at, const char *fmt, ...) {
    char where[32];
    grammar_where(p->text, at, where, sizeof(where));
    va_list ap;
    va_start(ap, fmt);
    error_vformat_at(p->err, p->errlen, where, fmt, ap);
    va_end(ap);
    return -1;
}

static int out_of_memory(struct grammar_parser *p) {
    return fail_at(p, p->pos, "out of memory");
}

/* How the byte at `at` looks in a message: 'c', "byte 0xXX", "the end of
 * the line" or "the end of the grammar". */
static void describe(struct grammar_parser *p, size_t at, char *buf, size_t size) {
    if (at >= p->length) {
        snprintf(buf, size, "the end of the grammar");
        return;
    }
    unsigned char c = (unsigned char)p->text[at];
    if (c == '\n' || c == '\r')
        snprintf(buf, size, "the end of the line");
    else if (c > 0x20 && c < 0x7F)
        snprintf(buf, size, "'%c'", c);
    else
        snprintf(buf, size, "byte 0x%02X", c);
}

/* ------------------------------------------------------------ growth */

/* array (*cap items of size bytes) made to hold need items, by doubling:
 * array itself if it has room, else its new place (*cap updated); NULL if
 * out of memory (array stays as it was). */
static void *grow(void *array, uint32_t *cap, uint32_t need, size_t size) {
    if (need == 0) need = 1; /* so an array is always allocated */
    if (need <= *cap) return array;
    uint32_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    void *bigger = realloc(array, (size_t)n * size);
    if (bigger) *cap = n;
    return bigger;
}

/* Appends one element to seq, within GRAMMAR_MAX_ELEMENTS. */
static int push(struct grammar_parser *p, struct grammar_seq *seq, uint32_t kind, uint32_t value) {
    if (p->g->n_elements + p->open >= GRAMMAR_MAX_ELEMENTS)
        return fail_at(p, p->pos, "grammar too large: more than %d elements (GRAMMAR_MAX_ELEMENTS)",
                       GRAMMAR_MAX_ELEMENTS);
    struct grammar_element *e = grow(seq->e, &seq->cap, seq->n + 1, sizeof(*e));
    if (!e) return out_of_memory(p);
    seq->e = e;
    seq->e[seq->n++] = (struct grammar_element){kind, value};
    p->open++;
    return 0;
}

/* Drops seq's elements from index `from` on. */
static void truncate_seq(struct grammar_parser *p, struct grammar_seq *seq, uint32_t from) {
    p->open -= seq->n - from;
    seq->n = from;
}

static void free_seq(struct grammar_parser *p, struct grammar_seq *seq) {
    truncate_seq(p, seq, 0);
    free(seq->e);
    seq->e = NULL;
    seq->cap = 0;
}

/* ------------------------------------------------------------ rules */

/* A new rule with origin o; its id in *id. */
static int add_rule(struct grammar_parser *p, struct grammar_origin o, uint32_t *id) {
    struct grammar *g = p->g;
    if (g->n_rules >= GRAMMAR_MAX_RULES)
        return fail_at(p, p->pos, "grammar too large: more than %d rules (GRAMMAR_MAX_RULES)",
                       GRAMMAR_MAX_RULES);
    uint32_t cap = p->cap_rules;
    struct grammar_rule *rules = grow(g->rules, &cap, g->n_rules + 1, sizeof(*rules));
    if (rules) g->rules = rules;
    struct grammar_origin *origins =
        rules ? grow(p->origins, &p->cap_rules, g->n_rules + 1, sizeof(*origins)) : NULL;
    if (!origins) return out_of_memory(p);
    p->origins = origins;
    g->rules[g->n_rules] = (struct grammar_rule){0, 0};
    p->origins[g->n_rules] = o;
    *id = g->n_rules++;
    return 0;
}

static uint32_t name_hash(const char *name, uint32_t len) {
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < len; i++) h = (h ^ (unsigned char)name[i]) * 16777619u;
    return h;
}

/* The slot of names where the rule called name is, or the empty slot
 * where it would go. */
static uint32_t name_slot(const struct grammar_parser *p, const char *name, uint32_t len) {
    uint32_t mask = p->names_cap - 1, i = name_hash(name, len) & mask;
    for (;; i = (i + 1) & mask) {
        uint32_t id = p->names[i];
        if (id == 0) return i;
        const struct grammar_origin *o = &p->origins[id - 1];
        if (o->name_len == len && !memcmp(o->name, name, len)) return i;
    }
}

/* Makes room in names for one more rule. */
static int grow_names(struct grammar_parser *p) {
    if (2 * (p->n_names + 1) <= p->names_cap) return 0;
    uint32_t *old = p->names, old_cap = p->names_cap;
    p->names_cap = old_cap ? 2 * old_cap : 64;
    p->names = calloc(p->names_cap, sizeof(*p->names));
    if (!p->names) {
        p->names = old;
        p->names_cap = old_cap;
        return -1;
    }
    for (uint32_t i = 0; i < old_cap; i++) {
        if (old[i] == 0) continue;
        const struct grammar_origin *o = &p->origins[old[i] - 1];
        p->names[name_slot(p, o->name, o->name_len)] = old[i];
    }
    free(old);
    return 0;
}

/* The id of the rule called name (len bytes), made on first sight. */
static int named_rule(struct grammar_parser *p, const char *name, uint32_t len, size_t at,
                      uint32_t *id) {
    if (grow_names(p)) return out_of_memory(p);
    uint32_t slot = name_slot(p, name, len);
    if (p->names[slot]) {
        *id = p->names[slot] - 1;
        return 0;
    }
    struct grammar_origin o = {name, len, 0, at, 0, 0};
    if (add_rule(p, o, id)) return -1;
    p->names[slot] = *id + 1;
    p->n_names++;
    return 0;
}

/* A rule made for a group or a repetition inside the rule being defined. */
static int made_rule(struct grammar_parser *p, uint32_t *id) {
    struct grammar_origin o = p->origins[p->owner];
    o.defined = 1;
    o.made = 1; /* never looked up by name: only named rules are in names */
    return add_rule(p, o, id);
}

/* Moves seq (alternatives ended by END) into the grammar as rule's body. */
static int commit(struct grammar_parser *p, uint32_t rule, struct grammar_seq *seq) {
    struct grammar *g = p->g;
    uint32_t n_alts = 0;
    for (uint32_t i = 0; i < seq->n; i++) n_alts += seq->e[i].kind == GRAMMAR_END;
    struct grammar_element *elements =
        grow(g->elements, &p->cap_elements, g->n_elements + seq->n, sizeof(*elements));
    if (elements) g->elements = elements;
    uint32_t *alts =
        elements ? grow(g->alts, &p->cap_alts, g->n_alts + n_alts, sizeof(*alts)) : NULL;
    if (!alts) return out_of_memory(p);
    g->alts = alts;
    g->rules[rule] = (struct grammar_rule){g->n_alts, n_alts};
    uint32_t start = g->n_elements;
    for (uint32_t i = 0; i < seq->n; i++) {
        g->elements[g->n_elements++] = seq->e[i];
        if (seq->e[i].kind == GRAMMAR_END) {
            g->alts[g->n_alts++] = start;
            start = g->n_elements;
        }
    }
    free_seq(p, seq);
    return 0;
}

/* Commits n elements (alternatives ended by END) as rule's body. */
static int commit_elements(struct grammar_parser *p, uint32_t rule, const struct grammar_element *e,
                           uint32_t n) {
    struct grammar_seq seq = {0};
    for (uint32_t i = 0; i < n; i++)
        if (push(p, &seq, e[i].kind, e[i].value)) {
            free_seq(p, &seq);
            return -1;
        }
    return commit(p, rule, &seq);
}

/* A rule made here whose body is the n elements e; its id in *id. */
static int made_body(struct grammar_parser *p, const struct grammar_element *e, uint32_t n,
                     uint32_t *id) {
    return made_rule(p, id) ? -1 : commit_elements(p, *id, e, n);
}

/* ------------------------------------------------------------ charsets */

/* Room for n more ranges and one more charset; -1 if out of memory. */
static int reserve_charset(struct grammar_parser *p, uint32_t n) {
    struct grammar *g = p->g;
    struct grammar_range *ranges =
        grow(g->ranges, &p->cap_ranges, g->n_ranges + n, sizeof(*ranges));
    if (ranges) g->ranges = ranges;
    struct grammar_charset *charsets =
        ranges ? grow(g->charsets, &p->cap_charsets, g->n_charsets + 1, sizeof(*charsets)) : NULL;
    if (!charsets) return -1;
    g->charsets = charsets;
    return 0;
}

/* Appends set, normalized (negated if negate), as a charset; its index in
 * *index. */
static int add_charset(struct grammar_parser *p, struct grammar_ranges *set, int negate,
                       uint32_t *index) {
    struct grammar *g = p->g;
    if (grammar_ranges_normalize(set, negate) || reserve_charset(p, set->n))
        return out_of_memory(p);
    struct grammar_charset *c = &g->charsets[g->n_charsets];
    *c = (struct grammar_charset){g->n_ranges, set->n, {0, 0}};
    for (uint32_t i = 0; i < set->n; i++) {
        struct grammar_range r = set->r[i];
        g->ranges[g->n_ranges++] = r;
        for (uint32_t cp = r.lo; cp <= r.hi && cp < 128; cp++)
            c->ascii[cp >> 6] |= 1ull << (cp & 63);
    }
    *index = g->n_charsets++;
    return 0;
}

/* ------------------------------------------------------------ lexing */

static int at_end(const struct grammar_parser *p) {
    return p->pos >= p->length;
}

static int peek(const struct grammar_parser *p, size_t ahead) {
    return p->pos + ahead < p->length ? (unsigned char)p->text[p->pos + ahead] : -1;
}

static int is_word_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Skips spaces, tabs and comments, and newlines too if newline_ok. */
static void skip_space(struct grammar_parser *p, int newline_ok) {
    while (!at_end(p)) {
        int c = peek(p, 0);
        if (c == '#') {
            while (!at_end(p) && peek(p, 0) != '\n' && peek(p, 0) != '\r') p->pos++;
        } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            p->pos++;
        } else {
            return;
        }
    }
}

/* Bytes of the word (rule name) at pos. */
static uint32_t word_length(const struct grammar_parser *p) {
    uint32_t n = 0;
    while (is_word_char(peek(p, n))) n++;
    return n;
}

/* Decodes the UTF-8 character at pos into *cp and moves past it. */
static int decode_utf8(struct grammar_parser *p, uint32_t *cp) {
    int n = p->pos < p->length
                ? utf8_decode((const unsigned char *)p->text + p->pos, p->length - p->pos, cp)
                : -1;
    if (n < 0) return fail_at(p, p->pos, "invalid UTF-8 in the grammar");
    p->pos += (size_t)n;
    return 0;
}

/* Reads `digits` hex digits at pos (after \x, \u or \U) into *cp. */
static int parse_hex(struct grammar_parser *p, size_t escape_at, int digits, uint32_t *cp) {
    uint32_t value = 0;
    for (int i = 0; i < digits; i++) {
        int c = peek(p, 0), d = -1;
        if (c >= '0' && c <= '9') d = c - '0';
        if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        if (d < 0)
            return fail_at(p, escape_at, "'\\%c' needs %d hex digits", p->text[escape_at + 1],
                           digits);
        value = value * 16 + (uint32_t)d;
        p->pos++;
    }
    if (value > 0x10FFFF)
        return fail_at(p, escape_at, "U+%X is past the last code point U+10FFFF", value);
    *cp = value;
    return 0;
}

/* Reads one character of a literal or class (an escape or UTF-8). */
static int parse_char(struct grammar_parser *p, uint32_t *cp) {
    if (peek(p, 0) != '\\') return decode_utf8(p, cp);
    size_t at = p->pos;
    int c = peek(p, 1);
    p->pos += 2;
    switch (c) {
    case 'x':
        return parse_hex(p, at, 2, cp);
    case 'u':
        return parse_hex(p, at, 4, cp);
    case 'U':
        return parse_hex(p, at, 8, cp);
    case 'n':
        *cp = '\n';
        return 0;
    case 'r':
        *cp = '\r';
        return 0;
    case 't':
        *cp = '\t';
        return 0;
    case '\\':
    case '"':
    case '[':
    case ']':
        *cp = (uint32_t)c;
        return 0;
    default:
        break;
    }
    if (c > 0x20 && c < 0x7F) return fail_at(p, at, "unknown escape '\\%c'", c);
    return fail_at(p, at, "unknown escape: '\\' followed by %s",
                   c < 0 ? "the end of the grammar" : "a character that is not an escape");
}

/* parse_char for a character that must be one (a literal's, a class
 * member that is not a range's end): not a surrogate. */
static int parse_whole_char(struct grammar_parser *p, uint32_t *cp) {
    size_t at = p->pos;
    if (parse_char(p, cp)) return -1;
    if (*cp >= 0xD800 && *cp <= 0xDFFF)
        return fail_at(p, at, "U+%04X is a surrogate, which UTF-8 text cannot hold", *cp);
    return 0;
}

/* ------------------------------------------------------------ symbols */

static int parse_alternates(struct grammar_parser *p, struct grammar_seq *seq, int nested);

/* "..." at pos: one CHARS element per character. */
static int parse_literal(struct grammar_parser *p, struct grammar_seq *seq) {
    size_t open = p->pos++;
    while (peek(p, 0) != '"') {
        uint32_t cp = 0, index = 0;
        struct grammar_ranges set = {0};
        if (at_end(p)) return fail_at(p, open, "unterminated string literal");
        if (parse_whole_char(p, &cp)) return -1;
        int rc =
            grammar_ranges_add(&set, cp, cp) ? out_of_memory(p) : add_charset(p, &set, 0, &index);
        free(set.r);
        if (rc || push(p, seq, GRAMMAR_CHARS, index)) return -1;
    }
    p->pos++;
    return 0;
}

/* The members of a class after '[' (and '^'), up to ']', into set. */
static int parse_members(struct grammar_parser *p, size_t open, struct grammar_ranges *set) {
    while (peek(p, 0) != ']') {
        uint32_t lo = 0, hi = 0;
        size_t at = p->pos;
        if (at_end(p)) return fail_at(p, open, "unterminated character class");
        if (parse_char(p, &lo)) return -1;
        hi = lo;
        if (peek(p, 0) == '-' && peek(p, 1) != ']' && peek(p, 1) >= 0) {
            p->pos++;
            if (parse_char(p, &hi)) return -1;
            if (hi < lo) return fail_at(p, at, "range U+%04X-U+%04X is reversed", lo, hi);
        } else if (lo >= 0xD800 && lo <= 0xDFFF) {
            return fail_at(p, at, "U+%04X is a surrogate, which UTF-8 text cannot hold", lo);
        }
        if (grammar_ranges_add(set, lo, hi)) return out_of_memory(p);
    }
    p->pos++;
    return 0;
}

/* [...] or [^...] at pos: one CHARS element. */
static int parse_class(struct grammar_parser *p, struct grammar_seq *seq) {
    size_t open = p->pos++;
    int negate = peek(p, 0) == '^';
    struct grammar_ranges set = {0};
    uint32_t index = 0;
    p->pos += (size_t)negate;
    int rc = parse_members(p, open, &set);
    if (rc == 0) rc = add_charset(p, &set, negate, &index);
    free(set.r);
    return rc ? -1 : push(p, seq, GRAMMAR_CHARS, index);
}

/* `.` at pos: any character. */
static int parse_any(struct grammar_parser *p, struct grammar_seq *seq) {
    struct grammar_ranges set = {0};
    uint32_t index = 0;
    p->pos++;
    int rc = add_charset(p, &set, 1, &index);
    free(set.r);
    return rc ? -1 : push(p, seq, GRAMMAR_CHARS, index);
}

/* ( alternates ) at pos: a RULE element for a rule made of them. */
static int parse_group(struct grammar_parser *p, struct grammar_seq *seq) {
    size_t open = p->pos++;
    struct grammar_seq body = {0};
    uint32_t rule = 0;
    if (++p->nesting > GRAMMAR_MAX_NESTING)
        return fail_at(p, open, "parentheses nested deeper than %d (GRAMMAR_MAX_NESTING)",
                       GRAMMAR_MAX_NESTING);
    skip_space(p, 1);
    int rc = parse_alternates(p, &body, 1);
    if (rc == 0 && peek(p, 0) != ')') {
        char where[32], found[32];
        grammar_where(p->text, open, where, sizeof(where));
        describe(p, p->pos, found, sizeof(found));
        rc = fail_at(p, p->pos, "missing ')' for the '(' at %s (found %s)", where, found);
    }
    if (rc == 0) rc = made_rule(p, &rule);
    if (rc == 0) rc = commit(p, rule, &body);
    free_seq(p, &body);
    p->nesting--;
    if (rc) return -1;
    p->pos++;
    return push(p, seq, GRAMMAR_RULE, rule);
}

/* A rule name used in a body. */
static int parse_reference(struct grammar_parser *p, struct grammar_seq *seq) {
    size_t at = p->pos;
    uint32_t len = word_length(p), rule = 0;
    p->pos += len;
    size_t after = p->pos;
    skip_space(p, 0);
    if (p->pos + 3 <= p->length && !memcmp(p->text + p->pos, "::=", 3))
        return fail_at(p, at,
                       "rule '%.*s' begins inside another rule's body (after a '|' or inside "
                       "parentheses the body goes on past the end of the line)",
                       (int)len, p->text + at);
    p->pos = after;
    if (named_rule(p, p->text + at, len, at, &rule)) return -1;
    return push(p, seq, GRAMMAR_RULE, rule);
}

/* ------------------------------------------------------------ repetition */

/* A non-negative integer at pos (at most GRAMMAR_MAX_REPEAT). */
static int parse_count(struct grammar_parser *p, uint32_t *n) {
    size_t at = p->pos;
    uint64_t value = 0;
    if (peek(p, 0) < '0' || peek(p, 0) > '9') {
        char found[32];
        describe(p, p->pos, found, sizeof(found));
        return fail_at(p, at, "expected a number in the repetition, found %s", found);
    }
    while (peek(p, 0) >= '0' && peek(p, 0) <= '9') {
        if (value <= GRAMMAR_MAX_REPEAT) value = value * 10 + (uint64_t)(peek(p, 0) - '0');
        p->pos++;
    }
    if (value > GRAMMAR_MAX_REPEAT)
        return fail_at(p, at, "repetition count %.*s is over the limit of %d (GRAMMAR_MAX_REPEAT)",
                       (int)(p->pos - at), p->text + at, GRAMMAR_MAX_REPEAT);
    *n = (uint32_t)value;
    return 0;
}

/* {m}, {m,}, {m,n} or {,n} at pos: *max is UINT32_MAX when unbounded. */
static int parse_braces(struct grammar_parser *p, uint32_t *min, uint32_t *max) {
    size_t open = p->pos++;
    skip_space(p, 0);
    *min = 0;
    if (peek(p, 0) != ',' && parse_count(p, min)) return -1;
    skip_space(p, 0);
    *max = *min;
    if (peek(p, 0) == ',') {
        p->pos++;
        skip_space(p, 0);
        *max = UINT32_MAX;
        if (peek(p, 0) != '}' && parse_count(p, max)) return -1;
        skip_space(p, 0);
    }
    if (peek(p, 0) != '}') {
        char found[32];
        describe(p, p->pos, found, sizeof(found));
        return fail_at(p, p->pos, "expected '}' to close the repetition, found %s", found);
    }
    p->pos++;
    if (*max < *min)
        return fail_at(p, open, "repetition {%u,%u} has its maximum below its minimum", *min, *max);
    return 0;
}

/* Appends the rules for up to k more of x (k >= 1): R_1 ::= x | (empty),
 * R_j ::= x R_j-1 | (empty); and a RULE element for R_k. */
static int push_optionals(struct grammar_parser *p, struct grammar_seq *seq,
                          struct grammar_element x, uint32_t k) {
    const struct grammar_element end = {GRAMMAR_END, 0};
    uint32_t rule = 0;
    for (uint32_t j = 1; j <= k; j++) {
        struct grammar_element body[4];
        uint32_t n = 0;
        body[n++] = x;
        if (j > 1) body[n++] = (struct grammar_element){GRAMMAR_RULE, rule};
        body[n++] = end; /* the first alternative ends */
        body[n++] = end; /* the empty one */
        if (made_body(p, body, n, &rule)) return -1;
    }
    return push(p, seq, GRAMMAR_RULE, rule);
}

/* Appends R ::= x R | (empty) and a RULE element for it. */
static int push_star(struct grammar_parser *p, struct grammar_seq *seq, struct grammar_element x) {
    uint32_t rule = 0;
    if (made_rule(p, &rule)) return -1;
    const struct grammar_element body[4] = {
        x, {GRAMMAR_RULE, rule}, {GRAMMAR_END, 0}, {GRAMMAR_END, 0}};
    return commit_elements(p, rule, body, 4) ? -1 : push(p, seq, GRAMMAR_RULE, rule);
}

/* Rewrites seq's elements from `last` on (the symbol before the operator)
 * as min to max (UINT32_MAX: any number) of them. */
static int repeat(struct grammar_parser *p, struct grammar_seq *seq, uint32_t last, uint32_t min,
                  uint32_t max) {
    struct grammar_element x = seq->e[last];
    if (seq->n - last > 1) {
        /* several elements (a literal): a rule of them first */
        struct grammar_element end = {GRAMMAR_END, 0};
        uint32_t rule = 0;
        if (push(p, seq, end.kind, end.value) || made_body(p, seq->e + last, seq->n - last, &rule))
            return -1;
        x = (struct grammar_element){GRAMMAR_RULE, rule};
    }
    truncate_seq(p, seq, last);
    for (uint32_t i = 0; i < min; i++)
        if (push(p, seq, x.kind, x.value)) return -1;
    if (max == UINT32_MAX) return push_star(p, seq, x);
    return max > min ? push_optionals(p, seq, x, max - min) : 0;
}

/* A postfix operator at pos applied to seq's elements from last on. */
static int parse_postfix(struct grammar_parser *p, struct grammar_seq *seq, uint32_t last,
                         int have_last) {
    size_t at = p->pos;
    int op = peek(p, 0);
    uint32_t min = 0, max = UINT32_MAX;
    if (!have_last || last == seq->n)
        return fail_at(p, at, "'%c' has nothing before it to repeat", op);
    if (op == '{') {
        if (parse_braces(p, &min, &max)) return -1;
    } else {
        p->pos++;
        if (op == '+') min = 1;
        if (op == '?') max = 1;
    }
    return repeat(p, seq, last, min, max);
}

/* ------------------------------------------------------------ sequences */

/* One symbol at pos (the caller knows one starts here). */
static int parse_symbol(struct grammar_parser *p, struct grammar_seq *seq) {
    int c = peek(p, 0);
    if (c == '"') return parse_literal(p, seq);
    if (c == '[') return parse_class(p, seq);
    if (c == '(') return parse_group(p, seq);
    if (c == '.') return parse_any(p, seq);
    return parse_reference(p, seq);
}

/* Symbols up to the end of an alternative ('|', ')', a newline outside
 * parentheses, or anything else that cannot start a symbol). */
static int parse_sequence(struct grammar_parser *p, struct grammar_seq *seq, int nested) {
    uint32_t last = seq->n;
    int have_last = 0;
    for (;;) {
        int c = peek(p, 0);
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (parse_postfix(p, seq, last, have_last)) return -1;
        } else if (c == '<' || c == '!') {
            return fail_at(p, p->pos, "token references (<...>, <[id]>, !<...>) are not supported");
        } else if (c == '"' || c == '[' || c == '(' || c == '.' || is_word_char(c)) {
            last = seq->n;
            have_last = 1;
            if (parse_symbol(p, seq)) return -1;
        } else {
            return 0;
        }
        skip_space(p, nested);
    }
}

static int parse_alternates(struct grammar_parser *p, struct grammar_seq *seq, int nested) {
    for (;;) {
        if (parse_sequence(p, seq, nested) || push(p, seq, GRAMMAR_END, 0)) return -1;
        if (peek(p, 0) != '|') return 0;
        p->pos++;
        skip_space(p, 1);
    }
}

/* ------------------------------------------------------------ rules */

/* What may follow a rule's body: a newline or the end. */
static int end_of_rule(struct grammar_parser *p) {
    int c = peek(p, 0);
    char found[32];
    if (c < 0 || c == '\n' || c == '\r') return 0;
    if (c == ')') return fail_at(p, p->pos, "unmatched ')'");
    describe(p, p->pos, found, sizeof(found));
    return fail_at(p, p->pos, "expected the end of the line after rule '%.*s', found %s",
                   (int)p->origins[p->owner].name_len, p->origins[p->owner].name, found);
}

/* name ::= alternates */
static int parse_rule(struct grammar_parser *p) {
    size_t at = p->pos;
    uint32_t len = word_length(p), rule = 0;
    char found[32];
    if (len == 0) {
        describe(p, p->pos, found, sizeof(found));
        if (peek(p, 0) == ')') return fail_at(p, at, "unmatched ')'");
        return fail_at(p, at, "expected a rule name, found %s", found);
    }
    if (named_rule(p, p->text + at, len, at, &rule)) return -1;
    struct grammar_origin *o = &p->origins[rule];
    if (o->defined) {
        char first[32];
        grammar_where(p->text, o->defined_at, first, sizeof(first));
        return fail_at(p, at, "rule '%.*s' is defined twice (first at %s)", (int)len, p->text + at,
                       first);
    }
    o->defined = 1;
    o->defined_at = at;
    p->owner = rule;
    p->pos += len;
    skip_space(p, 0);
    if (p->pos + 3 > p->length || memcmp(p->text + p->pos, "::=", 3) != 0) {
        describe(p, p->pos, found, sizeof(found));
        return fail_at(p, p->pos, "expected '::=' after the rule name '%.*s', found %s", (int)len,
                       p->text + at, found);
    }
    p->pos += 3;
    skip_space(p, 1);
    struct grammar_seq body = {0};
    int rc = parse_alternates(p, &body, 0);
    if (rc == 0) rc = end_of_rule(p);
    if (rc == 0) rc = commit(p, rule, &body);
    free_seq(p, &body);
    return rc;
}

/* Allocates the first rules and origins (they grow together in add_rule). */
static int start_rules(struct grammar_parser *p) {
    p->g->rules = calloc(16, sizeof(*p->g->rules));
    p->origins = calloc(16, sizeof(*p->origins));
    if (!p->g->rules || !p->origins) return out_of_memory(p);
    p->cap_rules = 16;
    return 0;
}

int grammar_parse(struct grammar *g, const char *text, size_t length, char *err, size_t errlen) {
    struct grammar_parser p = {
        .text = text, .length = length, .err = err, .errlen = errlen, .g = g};
    int rc = start_rules(&p);
    skip_space(&p, 1);
    if (rc == 0 && at_end(&p)) rc = fail_at(&p, p.pos, "empty grammar (no rules)");
    while (rc == 0 && !at_end(&p)) {
        rc = parse_rule(&p);
        skip_space(&p, 1);
    }
    if (rc == 0) rc = grammar_check(g, p.origins, text, err, errlen);
    free(p.origins);
    free(p.names);
    return rc;
}
