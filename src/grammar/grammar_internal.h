/* grammar_internal.h -- what the files of src/grammar share: the compiled
 * form of a grammar, the automaton's configurations and its step function.
 *
 * A grammar compiles (parse.c, check.c) to rules whose alternatives are
 * sequences of elements in one array, each alternative ended by an END
 * element: a CHARS element reads one code point of a set of ranges
 * (charset.c), a RULE element stands for another rule. Groups and
 * repetitions become rules of their own, as llama.cpp does it.
 *
 * The automaton (step.c) is llama.cpp's: a configuration is a set of
 * stacks of element positions; a stack's top is the CHARS element it reads
 * next, the entries below are where each enclosing rule continues. The
 * empty stack means root has been matched. A set is kept in one array of
 * words, each stack as [depth, bottom .. top], stacks sorted, no stack
 * twice, so equal sets have equal words (the memo's key, mask.c). A token
 * may end inside a UTF-8 character: the set then carries the partial
 * character (the same for every stack, as UTF-8 splits a text into
 * characters one way only) and keeps the stacks whose set can still take
 * a character that starts so. */
#ifndef LOCKSTEP_GRAMMAR_INTERNAL_H
#define LOCKSTEP_GRAMMAR_INTERNAL_H

#include "grammar.h"

#include <stddef.h>
#include <stdint.h>

enum grammar_kind {
    GRAMMAR_END = 0,   /* end of an alternative */
    GRAMMAR_CHARS = 1, /* one code point of charset `value` */
    GRAMMAR_RULE = 2,  /* rule `value` */
};

/* One symbol of an alternative. */
struct grammar_element {
    uint32_t kind;  /* enum grammar_kind */
    uint32_t value; /* charset index (CHARS) or rule id (RULE) */
};

/* An inclusive range of code points. */
struct grammar_range {
    uint32_t lo; /* first code point */
    uint32_t hi; /* last code point */
};

/* A set of code points: sorted, disjoint, non-adjacent ranges without
 * surrogates, and a bitmap of its ASCII part. */
struct grammar_charset {
    uint32_t first;    /* index in grammar->ranges of its first range */
    uint32_t count;    /* its ranges */
    uint64_t ascii[2]; /* bit c set if code point c < 128 is in the set */
};

/* A rule: its alternatives start at alts[first_alt .. first_alt + n_alts). */
struct grammar_rule {
    uint32_t first_alt; /* index in grammar->alts */
    uint32_t n_alts;    /* alternatives */
};

struct grammar {
    struct grammar_element *elements; /* (n_elements) every alternative, each ended by END */
    uint32_t n_elements;
    uint32_t *alts; /* (n_alts) element index where each alternative starts */
    uint32_t n_alts;
    struct grammar_rule *rules; /* (n_rules) by rule id */
    uint32_t n_rules;
    struct grammar_charset *charsets; /* (n_charsets) */
    uint32_t n_charsets;
    struct grammar_range *ranges; /* (n_ranges) the charsets' ranges */
    uint32_t n_ranges;
    uint32_t *start; /* (n_start) words of the start set (root expanded) */
    uint32_t n_start;
};

/* ---- charset.c ---- */

/* A set being built: ranges in any order, maybe overlapping. */
struct grammar_ranges {
    struct grammar_range *r; /* (cap) */
    uint32_t n;              /* ranges in use */
    uint32_t cap;            /* allocated */
};

/* Adds [lo, hi]; -1 if out of memory. */
int grammar_ranges_add(struct grammar_ranges *set, uint32_t lo, uint32_t hi);
/* Sorts and merges the set, takes its complement if negate, removes the
 * surrogates. -1 if out of memory. */
int grammar_ranges_normalize(struct grammar_ranges *set, int negate);
/* 1 if charset c has code point cp. */
int grammar_charset_has(const struct grammar *g, const struct grammar_charset *c, uint32_t cp);
/* 1 if charset c has a code point in [lo, hi]. */
int grammar_charset_meets(const struct grammar *g, const struct grammar_charset *c, uint32_t lo,
                          uint32_t hi);

/* ---- parse.c and check.c ---- */

/* Parses GBNF into g (its elements, alts, rules, charsets, ranges);
 * check.c's grammar_check then validates it. 0 or -1 with err. */
int grammar_parse(struct grammar *g, const char *text, size_t length, char *err, size_t errlen);
/* Where each rule came from, for check.c's messages. */
struct grammar_origin {
    const char *name; /* the rule's name in the text, or its owner's for a made rule */
    uint32_t name_len;
    size_t defined_at; /* byte offset of its definition (of its owner for a made rule) */
    size_t used_at;    /* byte offset of its first reference */
    int defined;       /* 1 once a body is given */
    int made;          /* 1 for a rule made for a group or a repetition */
};
/* Line:column of byte offset in text, as "L:C" into buf. */
void grammar_where(const char *text, size_t offset, char *buf, size_t size);
/* Checks the parsed g against its origins: undefined rules, root, left
 * recursion. 0 or -1 with err. */
int grammar_check(struct grammar *g, const struct grammar_origin *origins, const char *text,
                  char *err, size_t errlen);

/* ---- step.c: the automaton ---- */

/* A configuration: words of a sorted stack set and the partial character. */
struct grammar_set {
    const uint32_t *words; /* (n_words) [depth, positions...] per stack */
    uint32_t n_words;
    uint32_t partial; /* 0, or (value << 8) | (length << 4) | bytes still to come */
};

/* A growable array of words. */
struct grammar_words {
    uint32_t *w;  /* (cap) */
    uint32_t n;   /* in use */
    uint32_t cap; /* allocated */
};

/* Working memory of steps (reused from step to step). */
struct grammar_scratch {
    struct grammar_words pool; /* stacks made during a step, each [depth, positions...] */
    struct grammar_words todo; /* offsets in pool of stacks to expand */
    struct grammar_words done; /* offsets in pool of the stacks of the result */
    uint32_t *seen;            /* (seen_cap) hash set of offsets + 1 of stacks made, 0 empty */
    uint32_t seen_cap;         /* a power of two */
    uint32_t n_seen;           /* entries in seen */
    uint32_t *order;           /* (order_cap) merge sort's spare */
    uint32_t order_cap;        /* allocated */
};

void grammar_scratch_free(struct grammar_scratch *s);
int grammar_words_reserve(struct grammar_words *w, uint32_t n);
/* The set reached from `from` by reading byte, written to out and *partial.
 * 1: some stack took it; 0: rejected (no stack did, or a limit was hit);
 * -1: out of memory. */
int grammar_step(const struct grammar *g, const struct grammar_set *from, uint8_t byte,
                 struct grammar_scratch *scratch, struct grammar_words *out, uint32_t *partial);
/* The start set of g (root expanded) into g->start. 0, or -1 with err. */
int grammar_start(struct grammar *g, char *err, size_t errlen);
/* 1 if the set is a complete match (no partial character, the empty stack). */
int grammar_set_can_end(const struct grammar_set *set);
/* 1 if it can end and no byte continues. */
int grammar_set_is_done(const struct grammar *g, const struct grammar_set *set);

/* ---- vocab.c: the trie ---- */

/* A node of the vocabulary's trie, in depth-first order: its subtree is
 * the nodes after it up to `end`, so a walk skips a subtree by jumping. */
struct grammar_node {
    uint32_t end;      /* index past the last node of its subtree */
    uint32_t tokens;   /* index in vocab->tokens of the first token whose bytes end here */
    uint32_t n_tokens; /* such tokens (several tokens may have the same bytes) */
    uint16_t depth;    /* bytes from the root (1 for a first byte) */
    uint8_t byte;      /* the byte that leads into it */
};

struct grammar_vocab {
    int n_tokens;               /* tokens of the vocabulary */
    struct grammar_node *nodes; /* (n_nodes) the trie without its root, depth first */
    uint32_t n_nodes;
    int32_t *tokens;     /* token ids in node order (tokens with bytes, not end tokens) */
    int32_t *end_tokens; /* (n_end) tokens that end the text */
    int n_end;
    uint32_t max_depth;     /* bytes of the longest token */
    uint64_t serial;        /* unique among the process's vocabularies (the memo's key) */
    uint8_t spread[256][8]; /* byte i of spread[b] is bit i of b (bitset to bytes) */
};

/* ---- state.c and mask.c ---- */

struct grammar_memo;

struct grammar_state {
    const struct grammar *g;       /* the grammar */
    struct grammar_words set;      /* the configuration's stacks */
    uint32_t partial;              /* and its partial character */
    struct grammar_scratch work;   /* grammar_accept's working memory */
    struct grammar_words spare[2]; /* grammar_accept's sets between bytes */
    struct grammar_memo *memo;     /* transitions and masks, shared with copies; NULL until the
                                    * first mask */
    size_t memo_limit;             /* the budget of a memo made later */
};

/* Takes another reference to memo (NULL allowed). */
struct grammar_memo *grammar_memo_share(struct grammar_memo *memo);
/* Drops a reference to memo (NULL allowed); the last frees it. */
void grammar_memo_release(struct grammar_memo *memo);

#endif
