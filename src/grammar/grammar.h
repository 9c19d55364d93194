/* grammar.h -- grammars that constrain sampling: GBNF compiled to a
 * pushdown automaton over bytes, and token masks from it.
 *
 * A grammar is written in GBNF as llama.cpp's `grammar` field takes it:
 * rules `name ::= body` (names of letters, digits, '-' and '_'; the start
 * rule is `root`), string literals "..." and character classes [a-z],
 * [^"\\] over Unicode code points (the grammar text is UTF-8), `.` (any
 * character), grouping ( ), alternation |, postfix *, +, ?, {m}, {m,},
 * {m,n} and {,n}, and # comments. Escapes: \n \r \t \\ \" \[ \] \xHH
 * \uHHHH \UHHHHHHHH. A rule's body continues on the next line after a '|'
 * or inside parentheses. Not supported (refused with a message): llama.cpp's
 * token references <...>, <[id]> and !<...>, and left recursion that would
 * grow the stack (a ::= a "x" | "y": write a ::= "y" "x"*).
 *
 * The text is matched as bytes of UTF-8: a token may end inside a
 * character, and the automaton keeps that partial character until the next
 * token completes it. Code points are encoded the standard way (no
 * overlong forms, no surrogates, nothing past U+10FFFF).
 *
 * A struct grammar is immutable once compiled, so one may be shared by any
 * number of sequences and threads. A struct grammar_state is one sequence's
 * place in it and belongs to one thread at a time. grammar_mask walks a
 * trie of the vocabulary's byte strings (struct grammar_vocab, built once
 * per model and shared read-only) and visits only the part of it the
 * automaton can read. A state keeps a memo (see GRAMMAR_MEMO_BYTES) of the
 * automaton's transitions and of the masks it computed, keyed by the
 * automaton's configuration; grammar_state_copy shares the memo with the
 * copy (under a lock, so copies may mask on different threads). */
#ifndef LOCKSTEP_GRAMMAR_H
#define LOCKSTEP_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

/* Limits of a grammar (compile refuses past them, naming the limit). */
#define GRAMMAR_MAX_RULES    16384  /* rules, with those made for groups and repetitions */
#define GRAMMAR_MAX_ELEMENTS 262144 /* symbols of all rules after repetitions are expanded */
#define GRAMMAR_MAX_REPEAT   1000   /* m and n of {m,n} */
#define GRAMMAR_MAX_NESTING  256    /* parentheses inside parentheses */
/* Limits of the automaton: a byte whose reading would need more stacks at
 * once (an ambiguous grammar), a stack deeper than GRAMMAR_MAX_DEPTH
 * (nesting), or stacks of more than GRAMMAR_MAX_STACK_WORDS entries in all,
 * is rejected as if the grammar did not allow it. */
#define GRAMMAR_MAX_STACKS      4096
#define GRAMMAR_MAX_DEPTH       2048
#define GRAMMAR_MAX_STACK_WORDS (1 << 20)
/* Bytes a state's memo of transitions and masks may hold (4 MiB): past it
 * the memo is emptied before the next mask and new transitions are not
 * kept meanwhile. */
#define GRAMMAR_MEMO_BYTES ((size_t)4 << 20)
/* Longest token (bytes) a vocabulary may have. */
#define GRAMMAR_MAX_TOKEN_BYTES 4096

struct grammar;       /* compiled, immutable: shared by every sequence and thread */
struct grammar_state; /* where one sequence is in the grammar */
struct grammar_vocab; /* trie of a vocabulary's byte strings, built once per model */

/* Compiles length bytes of GBNF. Returns 0, or -1 with a message in err
 * that starts with the line and column (1-based, columns in characters)
 * of what is wrong, e.g. "3:9: undefined rule 'valu'". */
int grammar_compile(struct grammar **out, const char *gbnf, size_t length, char *err,
                    size_t errlen);
void grammar_free(struct grammar *g);

/* The start of g: nothing read yet. NULL if out of memory. */
struct grammar_state *grammar_state_create(const struct grammar *g);
/* The same place, sharing s's memo. NULL if out of memory. */
struct grammar_state *grammar_state_copy(const struct grammar_state *s);
void grammar_state_free(struct grammar_state *s);

/* Reads n bytes. 0: accepted, the state advanced; -1: rejected (or out of
 * memory), the state unchanged. */
int grammar_accept(struct grammar_state *s, const char *bytes, size_t n);
/* 1 if the text so far is a complete match of root. */
int grammar_can_end(const struct grammar_state *s);
/* 1 if nothing more can be accepted (it can end, and no byte continues). */
int grammar_is_done(const struct grammar_state *s);

/* n_tokens byte strings (token_bytes[i], lengths[i]); end_tokens: tokens
 * that end the text (EOS, end-of-turn), allowed exactly when the state can
 * end; tokens with empty bytes that are not end tokens are never allowed.
 * The strings are read here only (the trie keeps what it needs). 0, or -1
 * with err (an end token out of range, a
 * token longer than GRAMMAR_MAX_TOKEN_BYTES, out of memory). */
int grammar_vocab_create(struct grammar_vocab **out, int n_tokens, const char *const *token_bytes,
                         const size_t *lengths, const int *end_tokens, int n_end, char *err,
                         size_t errlen);
void grammar_vocab_free(struct grammar_vocab *v);
int grammar_vocab_size(const struct grammar_vocab *v);

/* allowed[t] = 1 if token t can come next, else 0, for every t < n_tokens;
 * returns the number allowed, or -1 if out of memory (allowed is then all
 * 0). */
int grammar_mask(struct grammar_state *s, const struct grammar_vocab *v, uint8_t *allowed);

/* Sets the byte budget of s's memo (shared with its copies); 0 turns the
 * memo off, so every mask walks the trie computing every transition (for
 * tests and measurements). Empties the memo. */
void grammar_state_set_memo_limit(struct grammar_state *s, size_t bytes);

/* ---- JSON Schema (json_schema.c) ---- */

struct cJSON;

/* GBNF text for JSON matching schema (a cJSON tree); NULL schema: any JSON
 * object (response_format json_object). Returns a malloc'd NUL-terminated
 * string, or NULL with err naming the unsupported keyword and where (a JSON
 * pointer like /properties/age) or what is wrong. The subset, and where the
 * grammar is narrower than the schema (fixed property order, one spelling
 * of enum values, bounded whitespace), are listed at the top of
 * json_schema.c. */
char *grammar_from_json_schema(const struct cJSON *schema, char *err, size_t errlen);

#endif
