/* json_schema_internal.h -- what the files of the JSON Schema converter
 * share: the conversion's context, the string buffer the GBNF text grows
 * in, and the functions the parts call one another through.
 *
 * json_schema.c holds the converter (grammar_from_json_schema): keywords,
 * types, values, strings, arrays, references and the shared rules;
 * json_schema_object.c writes the rules of object schemas (properties,
 * required, additionalProperties), which gen_typed there calls for the type
 * "object" and which call back schema_gen_schema for each property. Each
 * function appends GBNF to an out buffer and returns 0, or -1 once an error
 * is reported (schema_fail: the first one is kept in the context). */
#ifndef LOCKSTEP_JSON_SCHEMA_INTERNAL_H
#define LOCKSTEP_JSON_SCHEMA_INTERNAL_H

#include <cjson/cJSON.h>

#include <stddef.h>

/* A growing NUL-terminated string. */
struct strbuf {
    char *p;    /* the bytes, NUL-terminated once anything was added */
    size_t n;   /* length without the NUL */
    size_t cap; /* bytes allocated */
    int oom;    /* an allocation failed: the content is incomplete */
};

void schema_sb_putn(struct strbuf *b, const char *s, size_t n);
void schema_sb_puts(struct strbuf *b, const char *s);
void schema_sb_printf(struct strbuf *b, const char *fmt, ...);

/* Shared rules, emitted once each when used. */
enum {
    USE_WS = 1 << 0,
    USE_STRING = 1 << 1,
    USE_CHAR = 1 << 2,
    USE_HEX = 1 << 3,
    USE_INTEGER = 1 << 4,
    USE_NUMBER = 1 << 5,
    USE_VALUE = 1 << 6,
    USE_OBJECT = 1 << 7,
    USE_ARRAY = 1 << 8,
    USE_DATE = 1 << 9,
    USE_TIME = 1 << 10,
    USE_DATE_TIME = 1 << 11,
    USE_UUID = 1 << 12,
    USE_KEY_FREE = 1 << 13,
};

/* The conversion of one schema (struct ref_rule and struct left_edge are
 * json_schema_ref.c's own). */
struct schema_ctx {
    const cJSON *root;       /* the whole schema document, for $ref */
    struct strbuf rules;     /* rule definitions emitted so far */
    unsigned used;           /* USE_ bits of the shared rules needed */
    int next_id;             /* number of the next generated rule */
    struct ref_rule *refs;   /* $ref targets that have a rule */
    int n_refs, cap_refs;    /* used and allocated entries of refs */
    struct left_edge *edges; /* references reached without consuming input */
    int n_edges, cap_edges;  /* used and allocated entries of edges */
    int current;             /* the referred schema being generated, -1 for the root */
    int consumed;            /* input is consumed between current's start and here */
    int depth;               /* schemas being converted, one inside the other */
    char *err;               /* where the first error goes */
    size_t errlen;           /* its size */
    int failed;              /* an error was reported */
};

/* ---- json_schema.c: errors, paths, text ---- */

/* Reports an error (printf-style; only the first one is kept); -1. */
int schema_fail(struct schema_ctx *ctx, const char *fmt, ...);
int schema_fail_oom(struct schema_ctx *ctx);
/* The place a path names, for messages: the root's path is empty. */
const char *schema_where(const char *path);
/* path + "/" + key (with ~ and / escaped as JSON pointers do), + "/" + key2
 * when key2 is not NULL; malloc'd, NULL when out of memory. */
char *schema_child_path(const char *path, const char *key, const char *key2);
/* The last segment of a path, as a hint for rule names. */
const char *schema_path_hint(const char *path);
/* The code point at *s (UTF-8) and its length; -1 (and length 1) when the
 * bytes are not valid UTF-8 (overlong forms and surrogates included). */
long schema_utf8_next(const unsigned char *s, int *len);
/* Appends the n bytes at text as the inside of a GBNF "..." literal. */
void schema_put_literal_text(struct strbuf *b, const char *text, size_t n);
/* A new rule name "<kind>-<hint>-<n>" from the hint's letters and digits. */
void schema_rule_name(struct schema_ctx *ctx, const char *kind, const char *hint, char *name,
                      size_t size);
/* Emits "name ::= body" for a new rule and appends its name to out. */
int schema_add_rule(struct schema_ctx *ctx, const char *kind, const char *hint,
                    const struct strbuf *body, struct strbuf *out);

/* ---- json_schema.c: schemas and values ---- */

/* Appends to out an atomic GBNF expression for the JSON values valid under s. */
int schema_gen_schema(struct schema_ctx *ctx, const cJSON *s, const char *path, struct strbuf *out);
/* schema_gen_schema for the member key (and key2) of s, whose path is path. */
int schema_gen_child(struct schema_ctx *ctx, const cJSON *s, const char *path, const char *key,
                     const char *key2, struct strbuf *out);
/* A GBNF literal matching string s written canonically (valid UTF-8 only). */
int schema_gen_string_value(struct schema_ctx *ctx, const char *s, const char *path,
                            struct strbuf *out);

/* ---- json_schema_object.c ---- */

/* The rule of an object schema (properties, required, additionalProperties):
 * declared members in order, then additional ones; its name into out. */
int schema_gen_object(struct schema_ctx *ctx, const cJSON *s, const char *path, struct strbuf *out);

/* The keywords of s that may stand beside keyword, other than annotations
 * and definitions, are those in allowed (NULL-terminated, may be empty);
 * else -1 with the error. */
int schema_check_siblings(struct schema_ctx *ctx, const cJSON *s, const char *path,
                          const char *keyword, const char *const *allowed);

/* ---- json_schema_ref.c ---- */

/* The rule of a schema with "$ref" (its target's rule, made once). */
int schema_gen_ref(struct schema_ctx *ctx, const cJSON *s, const char *path, struct strbuf *out);
/* A cycle among the references reached without consuming input (a left
 * recursion, which no grammar engine can run): 0 when there is none. */
int schema_check_left_cycles(struct schema_ctx *ctx);

#endif
