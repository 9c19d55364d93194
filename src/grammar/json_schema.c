/* json_schema.c -- JSON Schema (a subset) to GBNF text.
 *
 * grammar_from_json_schema turns a schema held as a cJSON tree into a GBNF
 * grammar whose root matches the JSON texts valid under it. The subset and
 * every choice made where the match is not exact:
 *
 * - supported: type (a name or an array of names), properties, required,
 *   additionalProperties (false: none; true or absent: any value; a schema:
 *   that schema), items, minItems, maxItems, minLength, maxLength, format
 *   (date, time, date-time, uuid), enum and const of any JSON value, anyOf,
 *   oneOf (as anyOf: overlapping branches are not detected), $ref to a local
 *   JSON pointer ("#", "#/$defs/x", "#/definitions/x", ...), recursive
 *   references; annotations (description, title, default, examples,
 *   $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored;
 *   minimum and maximum on integers, when minimum <= 0 <= maximum: the
 *   grammar writes integers of as many digits as fit (zod's int(), whose
 *   bounds are +-(2^53 - 1), gets 15);
 * - refused with an error naming the keyword and its JSON pointer: every
 *   other keyword (pattern, allOf, not, if/then/else, minimum and maximum
 *   on numbers or away from 0, exclusiveMinimum,
 *   multipleOf, patternProperties, uniqueItems, ...), other formats, $ref to
 *   another document, a $ref cycle that consumes no input, and enum, const,
 *   anyOf, oneOf, $ref or format combined with a constraining sibling;
 * - what the grammar leaves out of the valid texts: properties come in the
 *   schema's order, declared ones first, then additional ones (whose names
 *   are written without escapes and are none of the declared names);
 *   enum/const values, declared names and numbers are written one way
 *   (canonical escapes, shortest round-trip number); integers have no
 *   fraction or exponent; strings never hold U+0000 or a lone surrogate;
 *   no whitespace before or after the document, and between two tokens at
 *   most a space, or a newline and up to 20 spaces or tabs, so a model
 *   cannot loop in whitespace.
 */
#include "grammar/grammar.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest minItems/maxItems/minLength/maxLength accepted: the compiler's
 * bound on {m,n}. */
#define SCHEMA_MAX_COUNT GRAMMAR_MAX_REPEAT
/* Deepest nesting of schemas (through properties, items, branches and
 * references not yet converted) accepted: bounds the converter's stack. */
#define SCHEMA_MAX_DEPTH 256

/* A growing NUL-terminated string. */
struct strbuf {
    char *p;    /* the bytes, NUL-terminated once anything was added */
    size_t n;   /* length without the NUL */
    size_t cap; /* bytes allocated */
    int oom;    /* an allocation failed: the content is incomplete */
};

static void sb_putn(struct strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_puts(struct strbuf *b, const char *s) {
    sb_putn(b, s, strlen(s));
}

static void sb_printf(struct strbuf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
    } else if ((size_t)n < sizeof small) {
        sb_putn(b, small, (size_t)n);
    } else {
        char *big = malloc((size_t)n + 1);
        if (big == NULL) {
            b->oom = 1;
            return;
        }
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        sb_putn(b, big, (size_t)n);
        free(big);
    }
}

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

/* One shared rule: its flag, the flags it needs, and its text. */
struct shared_rule {
    unsigned flag;  /* its USE_ bit */
    unsigned needs; /* USE_ bits of the rules it refers to */
    const char *text;
};

static const struct shared_rule shared_rules[] = {
    {USE_WS, 0, "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n"},
    {USE_STRING, USE_CHAR, "string ::= \"\\\"\" char* \"\\\"\"\n"},
    {USE_CHAR, USE_HEX,
     "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( uquad | upair ) )\n"
     "uquad ::= [1-9a-cA-C] hex hex hex | \"0\" unonzero | [dD] [0-7] hex hex"
     " | [eEfF] hex hex hex\n"
     "unonzero ::= [1-9a-fA-F] hex hex | \"0\" [1-9a-fA-F] hex | \"00\" [1-9a-fA-F]\n"
     "upair ::= [dD] [89abAB] hex hex \"\\\\u\" [dD] [c-fC-F] hex hex\n"},
    {USE_HEX, 0, "hex ::= [0-9a-fA-F]\n"},
    {USE_INTEGER, 0, "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]* )\n"},
    {USE_NUMBER, USE_INTEGER,
     "number ::= integer ( \".\" [0-9]+ )? ( [eE] ( \"+\" | \"-\" )? [0-9]+ )?\n"},
    {USE_VALUE, USE_OBJECT | USE_ARRAY | USE_STRING | USE_NUMBER,
     "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"},
    {USE_OBJECT, USE_WS | USE_STRING | USE_VALUE,
     "object ::= \"{\" ws ( member ws ( \",\" ws member ws )* )? \"}\"\n"
     "member ::= string ws \":\" ws value\n"},
    {USE_ARRAY, USE_WS | USE_VALUE,
     "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"},
    {USE_DATE, 0,
     "date ::= [0-9] [0-9] [0-9] [0-9] \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\""
     " ( day28 | \"29\" | \"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( day28 | \"29\" | \"30\" )"
     " | \"02-\" day28 ) | leap-year \"-02-29\"\n"
     "day28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n"
     "leap-year ::= [0-9] [0-9] ( [02468] [48] | [13579] [26] | [2468] \"0\" )"
     " | ( [02468] [048] | [13579] [26] ) \"00\"\n"},
    {USE_TIME, 0,
     "time ::= hour \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]+ )?"
     " ( [Zz] | ( \"+\" | \"-\" ) hour \":\" [0-5] [0-9] )\n"
     "hour ::= [01] [0-9] | \"2\" [0-3]\n"},
    {USE_DATE_TIME, USE_DATE | USE_TIME, "date-time ::= date [Tt] time\n"},
    {USE_UUID, USE_HEX, "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n"},
    {USE_KEY_FREE, 0, "key-free ::= [^\"\\\\\\x00-\\x1F]* \"\\\"\"\n"},
};

/* A $ref target that has a rule. */
struct ref_rule {
    const cJSON *target; /* the schema referred to */
    const char *pointer; /* the $ref's text that first named it (in the schema) */
    char name[48];       /* its rule's name */
};

/* A $ref met without consuming input since the start of a referred schema:
 * from (index in refs, or -1 for the root) reaches to first. */
struct left_edge {
    int from; /* the schema whose rule begins with the reference */
    int to;   /* the schema referred to */
};

/* The conversion of one schema. */
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

/* Copies msg into err (errlen bytes, truncated, NUL-terminated) with its
 * control characters written as JSON escapes (\n, \u001f, ...), so that a
 * message naming a key or a pointer with them stays one line. */
static void copy_one_line(char *err, size_t errlen, const char *msg) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        char esc[8];
        if (*p >= 0x20 && *p != 0x7f) {
            esc[0] = (char)*p;
            esc[1] = '\0';
        } else if (*p == '\n' || *p == '\r' || *p == '\t') {
            snprintf(esc, sizeof esc, "\\%c", *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't');
        } else {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
        }
        size_t k = strlen(esc);
        if (n + k + 1 > errlen) break;
        memcpy(err + n, esc, k);
        n += k;
    }
    err[n] = '\0';
}

static int fail(struct schema_ctx *ctx, const char *fmt, ...) {
    if (!ctx->failed && ctx->err && ctx->errlen) {
        char small[512], *msg = small;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(small, sizeof small, fmt, ap);
        va_end(ap);
        if (n >= (int)sizeof small && (msg = malloc((size_t)n + 1)) != NULL) {
            va_start(ap, fmt);
            vsnprintf(msg, (size_t)n + 1, fmt, ap);
            va_end(ap);
        }
        if (n < 0) small[0] = '\0';
        copy_one_line(ctx->err, ctx->errlen, msg ? msg : small);
        if (msg != small) free(msg);
    }
    ctx->failed = 1;
    return -1;
}

static int fail_oom(struct schema_ctx *ctx) {
    return fail(ctx, "out of memory converting a JSON Schema");
}

/* The place a path names, for messages: the root's path is empty. */
static const char *where(const char *path) {
    return path[0] ? path : "the root";
}

/* path + "/" + key (with ~ and / escaped as JSON pointers do), + "/" + key2
 * when key2 is not NULL; malloc'd, NULL when out of memory. */
static char *child_path(const char *path, const char *key, const char *key2) {
    struct strbuf b = {0};
    sb_puts(&b, path);
    for (int k = 0; k < 2; k++) {
        const char *s = k ? key2 : key;
        if (s == NULL) break;
        sb_puts(&b, "/");
        for (; *s; s++) {
            if (*s == '~')
                sb_puts(&b, "~0");
            else if (*s == '/')
                sb_puts(&b, "~1");
            else
                sb_putn(&b, s, 1);
        }
    }
    if (b.oom || b.p == NULL) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* The code point at *s (UTF-8) and its length; -1 (and length 1) when the
 * bytes are not valid UTF-8 (overlong forms and surrogates included). */
static long utf8_next(const unsigned char *s, int *len) {
    static const long min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    *len = 1;
    int n = s[0] < 0x80                   ? 1
            : s[0] >= 0xC2 && s[0] < 0xE0 ? 2
            : s[0] >= 0xE0 && s[0] < 0xF0 ? 3
            : s[0] >= 0xF0 && s[0] < 0xF5 ? 4
                                          : 0;
    if (n == 0) return -1;
    long cp = n == 1 ? s[0] : s[0] & (0x3F >> (n - 1));
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min_of[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return -1;
    *len = n;
    return cp;
}

static int valid_utf8(const char *s) {
    int len;
    for (const unsigned char *p = (const unsigned char *)s; *p; p += len)
        if (utf8_next(p, &len) < 0) return 0;
    return 1;
}

/* Appends the n bytes at text as the inside of a GBNF "..." literal. */
static void put_literal_text(struct strbuf *b, const char *text, size_t n) {
    for (const unsigned char *s = (const unsigned char *)text; s < (const unsigned char *)text + n;
         s++) {
        if (*s == '"')
            sb_puts(b, "\\\"");
        else if (*s == '\\')
            sb_puts(b, "\\\\");
        else if (*s < 0x20 || *s == 0x7F)
            sb_printf(b, "\\x%02X", *s);
        else
            sb_putn(b, (const char *)s, 1);
    }
}

/* Appends s as its canonical JSON string text (quotes, escapes). */
static void put_json_string(struct strbuf *b, const char *s) {
    sb_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const char *esc = *p == '"'    ? "\\\""
                          : *p == '\\' ? "\\\\"
                          : *p == '\b' ? "\\b"
                          : *p == '\f' ? "\\f"
                          : *p == '\n' ? "\\n"
                          : *p == '\r' ? "\\r"
                          : *p == '\t' ? "\\t"
                                       : NULL;
        if (esc)
            sb_puts(b, esc);
        else if (*p < 0x20)
            sb_printf(b, "\\u%04x", *p);
        else
            sb_putn(b, (const char *)p, 1);
    }
    sb_puts(b, "\"");
}

/* Appends a GBNF literal matching the canonical JSON text of string s. */
static void put_string_literal(struct strbuf *b, const char *s) {
    struct strbuf json = {0};
    put_json_string(&json, s);
    if (json.oom) {
        b->oom = 1;
    } else {
        sb_puts(b, "\"");
        put_literal_text(b, json.p, json.n);
        sb_puts(b, "\"");
    }
    free(json.p);
}

/* A new rule name "<kind>-<hint>-<n>" from the hint's letters and digits. */
static void rule_name(struct schema_ctx *ctx, const char *kind, const char *hint, char *name,
                      size_t size) {
    char clean[24];
    size_t n = 0;
    for (const char *s = hint; s && *s && n + 1 < sizeof clean; s++) {
        char c = *s;
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
            clean[n++] = c;
        else if (n > 0 && clean[n - 1] != '-')
            clean[n++] = '-';
    }
    while (n > 0 && clean[n - 1] == '-') n--;
    clean[n] = '\0';
    snprintf(name, size, "%s%s%s-%d", kind, n ? "-" : "", clean, ctx->next_id++);
}

/* Emits "name ::= body" for a new rule and appends its name to out. */
static int add_rule(struct schema_ctx *ctx, const char *kind, const char *hint,
                    const struct strbuf *body, struct strbuf *out) {
    char name[64];
    if (body->oom || body->p == NULL) return fail_oom(ctx);
    rule_name(ctx, kind, hint, name, sizeof name);
    sb_printf(&ctx->rules, "%s ::= %s\n", name, body->p);
    sb_puts(out, name);
    return 0;
}

/* The last segment of a path, as a hint for rule names. */
static const char *path_hint(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int gen_schema(struct schema_ctx *ctx, const cJSON *s, const char *path, struct strbuf *out);

/* gen_schema for the member key (and key2) of s, whose path is path. */
static int gen_child(struct schema_ctx *ctx, const cJSON *s, const char *path, const char *key,
                     const char *key2, struct strbuf *out) {
    char *child = child_path(path, key, key2);
    if (child == NULL) return fail_oom(ctx);
    int rc = gen_schema(ctx, s, child, out);
    free(child);
    return rc;
}

/* ---- keywords ---- */

static const char *const annotation_keys[] = {"description", "title",     "default",  "examples",
                                              "$schema",     "$id",       "$comment", "deprecated",
                                              "readOnly",    "writeOnly", NULL};

static const char *const supported_keys[] = {
    "type",        "properties", "required", "additionalProperties",
    "items",       "minItems",   "maxItems", "minLength",
    "maxLength",   "format",     "enum",     "const",
    "anyOf",       "oneOf",      "$ref",     "$defs",
    "definitions", "minimum",    "maximum",  NULL};

static int in_list(const char *const *list, const char *key) {
    for (; *list; list++)
        if (strcmp(*list, key) == 0) return 1;
    return 0;
}

/* Every keyword of s is supported or an annotation. */
static int check_keywords(struct schema_ctx *ctx, const cJSON *s, const char *path) {
    for (const cJSON *k = s->child; k; k = k->next)
        if (!in_list(annotation_keys, k->string) && !in_list(supported_keys, k->string))
            return fail(ctx, "unsupported JSON Schema keyword \"%s\" at %s", k->string,
                        where(path));
    return 0;
}

/* s constrains nothing: it has only annotations and definitions. */
static int unconstrained(const cJSON *s) {
    for (const cJSON *k = s->child; k; k = k->next)
        if (!in_list(annotation_keys, k->string) && strcmp(k->string, "$defs") != 0 &&
            strcmp(k->string, "definitions") != 0)
            return 0;
    return 1;
}

/* The keywords of s that may stand beside keyword, other than annotations
 * and definitions, are those in allowed (NULL-terminated, may be empty). */
static int check_siblings(struct schema_ctx *ctx, const cJSON *s, const char *path,
                          const char *keyword, const char *const *allowed) {
    for (const cJSON *k = s->child; k; k = k->next) {
        const char *name = k->string;
        if (strcmp(name, keyword) == 0 || in_list(annotation_keys, name) ||
            strcmp(name, "$defs") == 0 || strcmp(name, "definitions") == 0 ||
            in_list(allowed, name))
            continue;
        return fail(ctx, "\"%s\" with sibling keyword \"%s\" is not supported at %s", keyword, name,
                    where(path));
    }
    return 0;
}

/* The non-negative integer value of keyword in s, or dflt when absent. */
static int count_keyword(struct schema_ctx *ctx, const cJSON *s, const char *path,
                         const char *keyword, long dflt, long *value) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, keyword);
    *value = dflt;
    if (v == NULL) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return fail(ctx, "\"%s\" must be a non-negative integer at %s", keyword, where(path));
    if (v->valuedouble > SCHEMA_MAX_COUNT)
        return fail(ctx, "\"%s\" above %d is not supported at %s", keyword, SCHEMA_MAX_COUNT,
                    where(path));
    *value = (long)v->valuedouble;
    return 0;
}

/* min and max (-1: none) of keywords lo and hi, checked against each other. */
static int bounds(struct schema_ctx *ctx, const cJSON *s, const char *path, const char *lo,
                  const char *hi, long *min, long *max) {
    if (count_keyword(ctx, s, path, lo, 0, min) || count_keyword(ctx, s, path, hi, -1, max))
        return -1;
    if (*max >= 0 && *min > *max)
        return fail(ctx, "\"%s\" is greater than \"%s\" at %s", lo, hi, where(path));
    return 0;
}

/* Appends item (an atomic expression) repeated min to max times (max -1:
 * no bound); nothing when max is 0. */
static void put_repeat(struct strbuf *out, const char *item, long min, long max) {
    if (max == 0) return;
    if (min == 0 && max < 0)
        sb_printf(out, "%s*", item);
    else if (min == 1 && max < 0)
        sb_printf(out, "%s+", item);
    else if (min == 0 && max == 1)
        sb_printf(out, "%s?", item);
    else if (max < 0)
        sb_printf(out, "%s{%ld,}", item, min);
    else if (min == max)
        sb_printf(out, "%s{%ld}", item, min);
    else
        sb_printf(out, "%s{%ld,%ld}", item, min, max);
}

/* ---- types ---- */

enum {
    T_NULL = 1 << 0,
    T_BOOLEAN = 1 << 1,
    T_OBJECT = 1 << 2,
    T_ARRAY = 1 << 3,
    T_STRING = 1 << 4,
    T_NUMBER = 1 << 5,
    T_INTEGER = 1 << 6,
    T_ANY = T_NULL | T_BOOLEAN | T_OBJECT | T_ARRAY | T_STRING | T_NUMBER,
};

static const char *const type_names[] = {"null",   "boolean", "object", "array",
                                         "string", "number",  "integer"};

static int type_bit(const char *name) {
    for (int i = 0; i < 7; i++)
        if (strcmp(name, type_names[i]) == 0) return 1 << i;
    return 0;
}

/* The set of types s allows (T_ANY without "type"). */
static int type_set(struct schema_ctx *ctx, const cJSON *s, const char *path, int *types) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    *types = 0;
    if (t == NULL) {
        *types = T_ANY;
        return 0;
    }
    if (cJSON_IsString(t)) {
        *types = type_bit(t->valuestring);
        if (*types == 0) return fail(ctx, "unknown type \"%s\" at %s", t->valuestring, where(path));
        return 0;
    }
    if (!cJSON_IsArray(t) || t->child == NULL)
        return fail(ctx, "\"type\" must be a type name or a non-empty array of them at %s",
                    where(path));
    for (const cJSON *e = t->child; e; e = e->next) {
        int bit = cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
        if (bit == 0)
            return fail(ctx, "\"type\" must be a type name or a non-empty array of them at %s",
                        where(path));
        *types |= bit;
    }
    return 0;
}

/* ---- JSON values as literals (enum, const) ---- */

/* The type bit of value v (an integral number counts as both numbers). */
static int value_types(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOLEAN;
    if (cJSON_IsObject(v)) return T_OBJECT;
    if (cJSON_IsArray(v)) return T_ARRAY;
    if (cJSON_IsString(v)) return T_STRING;
    return v->valuedouble == floor(v->valuedouble) ? T_NUMBER | T_INTEGER : T_NUMBER;
}

static int gen_value(struct schema_ctx *ctx, const cJSON *v, const char *path, struct strbuf *out);

/* The shortest text of d that reads back as d. */
static void number_text(double d, char *buf, size_t size) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) return;
    }
}

static int gen_string_value(struct schema_ctx *ctx, const char *s, const char *path,
                            struct strbuf *out) {
    if (!valid_utf8(s)) return fail(ctx, "a string is not valid UTF-8 at %s", where(path));
    put_string_literal(out, s);
    return 0;
}

/* The members or elements of container v, with ws between the tokens. */
static int gen_container_value(struct schema_ctx *ctx, const cJSON *v, const char *path,
                               struct strbuf *out) {
    int object = cJSON_IsObject(v);
    char index[32];
    int i = 0;
    sb_puts(out, object ? "( \"{\" ws " : "( \"[\" ws ");
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (i > 0) sb_puts(out, "\",\" ws ");
        snprintf(index, sizeof index, "%d", i);
        char *child = child_path(path, object ? e->string : index, NULL);
        if (child == NULL) return fail_oom(ctx);
        int rc = object ? gen_string_value(ctx, e->string, child, out) : 0;
        if (object) sb_puts(out, " ws \":\" ws ");
        rc = rc ? rc : gen_value(ctx, e, child, out);
        free(child);
        if (rc) return rc;
        sb_puts(out, " ws ");
    }
    sb_puts(out, object ? "\"}\" )" : "\"]\" )");
    ctx->used |= USE_WS;
    return 0;
}

/* A GBNF expression matching the JSON value v written canonically. */
static int gen_value(struct schema_ctx *ctx, const cJSON *v, const char *path, struct strbuf *out) {
    char text[64];
    if (cJSON_IsNull(v)) {
        sb_puts(out, "\"null\"");
    } else if (cJSON_IsBool(v)) {
        sb_puts(out, cJSON_IsTrue(v) ? "\"true\"" : "\"false\"");
    } else if (cJSON_IsNumber(v)) {
        if (!isfinite(v->valuedouble)) return fail(ctx, "a number out of range at %s", where(path));
        number_text(v->valuedouble, text, sizeof text);
        sb_printf(out, "\"%s\"", text);
    } else if (cJSON_IsString(v)) {
        return gen_string_value(ctx, v->valuestring, path, out);
    } else if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        return gen_container_value(ctx, v, path, out);
    } else {
        return fail(ctx, "a value that is not JSON at %s", where(path));
    }
    return 0;
}

/* enum or const: the listed values whose type the schema allows. */
static int gen_enum(struct schema_ctx *ctx, const cJSON *s, const char *path, struct strbuf *out) {
    static const char *const only_type[] = {"type", NULL};
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const char *keyword = en ? "enum" : "const";
    int types, n = 0;
    if (check_siblings(ctx, s, path, keyword, only_type) || type_set(ctx, s, path, &types))
        return -1;
    if (en && (!cJSON_IsArray(en) || en->child == NULL))
        return fail(ctx, "\"enum\" must be a non-empty array at %s", where(path));
    char *kpath = child_path(path, keyword, NULL);
    if (kpath == NULL) return fail_oom(ctx);
    struct strbuf body = {0};
    const cJSON *first = en ? en->child : cJSON_GetObjectItemCaseSensitive(s, "const");
    char index[32];
    int i = 0, rc = 0;
    for (const cJSON *v = first; v && rc == 0; v = en ? v->next : NULL, i++) {
        if ((value_types(v) & types) == 0) continue;
        if (n++ > 0) sb_puts(&body, " | ");
        snprintf(index, sizeof index, "%d", i);
        char *vpath = en ? child_path(kpath, index, NULL) : NULL;
        if (en && vpath == NULL)
            rc = fail_oom(ctx);
        else
            rc = gen_value(ctx, v, en ? vpath : kpath, &body);
        free(vpath);
    }
    free(kpath);
    if (rc == 0 && n == 0)
        rc = fail(ctx, "no value of \"%s\" has a type the schema allows at %s", keyword,
                  where(path));
    if (rc == 0) rc = add_rule(ctx, "enum", path_hint(path), &body, out);
    free(body.p);
    return rc;
}

/* ---- strings ---- */

static int gen_string(struct schema_ctx *ctx, const cJSON *s, const char *path,
                      struct strbuf *out) {
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(s, "format");
    long min, max;
    if (format) {
        static const char *const names[] = {"date", "time", "date-time", "uuid"};
        static const unsigned flags[] = {USE_DATE, USE_TIME, USE_DATE_TIME, USE_UUID};
        if (cJSON_GetObjectItemCaseSensitive(s, "minLength"))
            return fail(ctx, "\"format\" with sibling keyword \"minLength\" is not supported at %s",
                        where(path));
        if (cJSON_GetObjectItemCaseSensitive(s, "maxLength"))
            return fail(ctx, "\"format\" with sibling keyword \"maxLength\" is not supported at %s",
                        where(path));
        for (int i = 0; cJSON_IsString(format) && i < 4; i++) {
            if (strcmp(format->valuestring, names[i]) != 0) continue;
            ctx->used |= flags[i];
            sb_printf(out, "( \"\\\"\" %s \"\\\"\" )", names[i]);
            return 0;
        }
        if (!cJSON_IsString(format))
            return fail(ctx, "\"format\" must be a string at %s", where(path));
        return fail(ctx, "unsupported format \"%s\" at %s", format->valuestring, where(path));
    }
    if (bounds(ctx, s, path, "minLength", "maxLength", &min, &max)) return -1;
    if (min == 0 && max < 0) {
        ctx->used |= USE_STRING;
        sb_puts(out, "string");
        return 0;
    }
    ctx->used |= USE_CHAR;
    sb_puts(out, "( \"\\\"\" ");
    put_repeat(out, "char", min, max);
    sb_puts(out, " \"\\\"\" )");
    return 0;
}

/* ---- arrays ---- */

/* The schema of the items at path/items, or "value" when absent or true. */
static int gen_items(struct schema_ctx *ctx, const cJSON *s, const char *path, struct strbuf *out) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (items == NULL || cJSON_IsTrue(items)) {
        ctx->used |= USE_VALUE;
        sb_puts(out, "value");
        return 0;
    }
    if (cJSON_IsArray(items))
        return fail(ctx, "\"items\" as an array of schemas (a tuple) is not supported at %s",
                    where(path));
    return gen_child(ctx, items, path, "items", NULL, out);
}

static int gen_array(struct schema_ctx *ctx, const cJSON *s, const char *path, struct strbuf *out) {
    long min, max;
    struct strbuf item = {0}, body = {0};
    if (bounds(ctx, s, path, "minItems", "maxItems", &min, &max) ||
        gen_items(ctx, s, path, &item)) {
        free(item.p);
        return -1;
    }
    ctx->used |= USE_WS;
    if (item.oom) {
        free(item.p);
        return fail_oom(ctx);
    }
    if (max == 0) {
        sb_puts(&body, "\"[\" ws \"]\"");
    } else {
        struct strbuf more = {0};
        sb_printf(&more, "( \",\" ws %s ws )", item.p);
        sb_printf(&body, "\"[\" ws %s%s ws ", min == 0 ? "( " : "", item.p);
        if (!more.oom) put_repeat(&body, more.p, min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
        sb_printf(&body, "%s \"]\"", min == 0 ? " )?" : "");
        body.oom |= more.oom;
        free(more.p);
    }
    int rc = add_rule(ctx, "arr", path_hint(path), &body, out);
    free(item.p);
    free(body.p);
    return rc;
}

/* ---- objects ---- */

/* One declared property of an object schema. */
struct prop {
    const cJSON *schema; /* its schema (properties/<name>) */
    const char *name;    /* its name */
    int required;        /* it is listed in "required" */
};

/* The declared properties of s and their required flags into *props. */
static int object_props(struct schema_ctx *ctx, const cJSON *s, const char *path,
                        struct prop **props, int *n) {
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    *props = NULL;
    *n = 0;
    if (pr && !cJSON_IsObject(pr))
        return fail(ctx, "\"properties\" must be an object at %s", where(path));
    if (req && !cJSON_IsArray(req))
        return fail(ctx, "\"required\" must be an array of strings at %s", where(path));
    int count = cJSON_GetArraySize(pr);
    *props = calloc((size_t)count + 1, sizeof **props);
    if (*props == NULL) return fail_oom(ctx);
    for (const cJSON *p = pr ? pr->child : NULL; p; p = p->next, (*n)++)
        (*props)[*n] = (struct prop){p, p->string, 0};
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r))
            return fail(ctx, "\"required\" must be an array of strings at %s", where(path));
        int i = 0;
        while (i < *n && strcmp((*props)[i].name, r->valuestring) != 0) i++;
        if (i == *n)
            return fail(ctx, "\"required\" names \"%s\", which is not in \"properties\", at %s",
                        r->valuestring, where(path));
        (*props)[i].required = 1;
    }
    return 0;
}

/* A name can be written without escapes (so an additional key may equal it). */
static int plain_name(const char *name) {
    for (const unsigned char *s = (const unsigned char *)name; *s; s++)
        if (*s < 0x20 || *s == '"' || *s == '\\') return 0;
    return 1;
}

/* Appends a character class item for code point cp (UTF-8 bytes at s, len). */
static void put_class_char(struct strbuf *b, const char *s, int len, long cp) {
    if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
        cp >= 0x80)
        sb_putn(b, s, (size_t)len);
    else
        sb_printf(b, "\\x%02lX", cp);
}

/* The number of distinct characters that follow the first depth bytes of
 * names[0..n) (sorted); *ends is set when one of the names ends there. */
static int key_groups(const char **names, int n, size_t depth, int *ends) {
    int groups = 0, len = 1;
    *ends = 0;
    for (int i = 0; i < n; i++) {
        if (names[i][depth] == '\0') {
            *ends = 1;
            continue;
        }
        utf8_next((const unsigned char *)names[i] + depth, &len);
        if (i == 0 || names[i - 1][depth] == '\0' ||
            strncmp(names[i - 1] + depth, names[i] + depth, (size_t)len) != 0)
            groups++;
    }
    return groups;
}

/* Emits the rule called name for the rest of an additional key (after its
 * opening quote) whose first depth bytes equal those of names[0..n) (plain,
 * distinct, sorted): any escape-free rest that makes the key none of them.
 * A chain of single children is walked in a loop and recursion happens only
 * where the names branch, so a long name costs no stack. */
static int gen_key_node(struct schema_ctx *ctx, const char **names, int n, size_t depth,
                        const char *name) {
    char own[64], child[64];
    snprintf(own, sizeof own, "%s", name);
    for (;;) {
        int ends, groups = key_groups(names, n, depth, &ends), alts = 0, rc = 0, len = 1;
        int next_n = 0;
        const char **next_names = NULL;
        size_t next_depth = 0;
        struct strbuf body = {0}, cls = {0};
        sb_puts(&cls, "[^\"\\\\\\x00-\\x1F");
        for (int i = 0, j; i < n && rc == 0; i = j) {
            j = i + 1;
            if (names[i][depth] == '\0') continue;
            long cp = utf8_next((const unsigned char *)names[i] + depth, &len);
            while (j < n && strncmp(names[j] + depth, names[i] + depth, (size_t)len) == 0) j++;
            put_class_char(&cls, names[i] + depth, len, cp);
            rule_name(ctx, "key", "", child, sizeof child);
            sb_puts(&body, alts++ ? " | \"" : "\"");
            put_literal_text(&body, names[i] + depth, (size_t)len);
            sb_printf(&body, "\" %s", child);
            next_names = names + i;
            next_n = j - i;
            next_depth = depth + (size_t)len;
            if (groups > 1) rc = gen_key_node(ctx, next_names, next_n, next_depth, child);
        }
        sb_printf(&body, "%s%s] key-free", alts ? " | " : "", cls.p ? cls.p : "");
        if (!ends) sb_puts(&body, " | \"\\\"\"");
        if (rc == 0 && (body.oom || cls.oom)) rc = fail_oom(ctx);
        if (rc == 0) sb_printf(&ctx->rules, "%s ::= %s\n", own, body.p);
        free(body.p);
        free(cls.p);
        if (rc || groups != 1) return rc;
        names = next_names;
        n = next_n;
        depth = next_depth;
        snprintf(own, sizeof own, "%s", child);
    }
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Expression for the key of an additional property: any string without
 * escapes that is none of the declared names (any string when none). */
static int gen_extra_key(struct schema_ctx *ctx, const struct prop *props, int n,
                         struct strbuf *out) {
    if (n == 0) {
        ctx->used |= USE_STRING;
        sb_puts(out, "string");
        return 0;
    }
    const char **names = calloc((size_t)n, sizeof *names);
    if (names == NULL) return fail_oom(ctx);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (plain_name(props[i].name)) names[m++] = props[i].name;
    qsort(names, (size_t)m, sizeof *names, compare_names);
    char root[64];
    rule_name(ctx, "key", "", root, sizeof root);
    ctx->used |= USE_KEY_FREE;
    sb_printf(out, "( \"\\\"\" %s )", root);
    int rc = gen_key_node(ctx, names, m, 0, root);
    free(names);
    return rc;
}

/* Expression for one additional member ("key" ws ":" ws value), or empty
 * (out untouched) when additionalProperties is false. */
static int gen_extra_member(struct schema_ctx *ctx, const cJSON *s, const char *path,
                            const struct prop *props, int n, struct strbuf *out) {
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (cJSON_IsFalse(ap)) return 0;
    if (gen_extra_key(ctx, props, n, out)) return -1;
    sb_puts(out, " ws \":\" ws ");
    if (ap == NULL || cJSON_IsTrue(ap)) {
        ctx->used |= USE_VALUE;
        sb_puts(out, "value");
        return 0;
    }
    return gen_child(ctx, ap, path, "additionalProperties", NULL, out);
}

/* Expressions "key" ws ":" ws value of every declared property into kv[]. */
static int gen_members(struct schema_ctx *ctx, const char *path, const struct prop *props, int n,
                       struct strbuf *kv) {
    for (int i = 0; i < n; i++) {
        char *ppath = child_path(path, "properties", props[i].name);
        if (ppath == NULL) return fail_oom(ctx);
        int rc = gen_string_value(ctx, props[i].name, ppath, &kv[i]);
        sb_puts(&kv[i], " ws \":\" ws ");
        rc = rc ? rc : gen_schema(ctx, props[i].schema, ppath, &kv[i]);
        free(ppath);
        if (rc) return rc;
        if (kv[i].oom) return fail_oom(ctx);
    }
    return 0;
}

/* The rules rest[i] (i = 1..n): the members after the i-th declared one,
 * each with its comma; rest[i] is left empty when nothing can follow. */
static int gen_rests(struct schema_ctx *ctx, const char *path, const struct prop *props, int n,
                     const struct strbuf *kv, const char *extra, struct strbuf *rest) {
    for (int i = n; i >= 1; i--) {
        struct strbuf body = {0};
        if (i == n && extra[0]) sb_printf(&body, "( \",\" ws %s ws )*", extra);
        if (i < n) {
            sb_printf(&body, props[i].required ? "\",\" ws %s ws" : "( \",\" ws %s ws )?", kv[i].p);
            if (rest[i + 1].p) sb_printf(&body, " %s", rest[i + 1].p);
        }
        int rc = body.p ? add_rule(ctx, "rest", path_hint(path), &body, &rest[i]) : 0;
        free(body.p);
        if (rc) return rc;
    }
    return 0;
}

/* The inside of an object: "{" ws inside "}". Members come in the declared
 * order, each optional one may be left out, additional ones come last. */
static void gen_inside(const struct prop *props, int n, const struct strbuf *kv, const char *extra,
                       const struct strbuf *rest, struct strbuf *out) {
    int alts = 0, first_required = n;
    for (int i = 0; i < n; i++)
        if (props[i].required) {
            first_required = i;
            break;
        }
    sb_puts(out, "( ");
    for (int j = 0; j < n && j <= first_required; j++) {
        sb_printf(out, "%s%s ws", alts++ ? " | " : "", kv[j].p);
        if (rest[j + 1].p) sb_printf(out, " %s", rest[j + 1].p);
    }
    if (first_required == n && extra[0]) {
        sb_printf(out, "%s%s ws ( \",\" ws %s ws )*", alts++ ? " | " : "", extra, extra);
    }
    sb_puts(out, first_required == n ? " )?" : " )");
    if (alts == 0) {
        out->n = 0;
        if (out->p) out->p[0] = '\0';
    }
}

static int gen_object(struct schema_ctx *ctx, const cJSON *s, const char *path,
                      struct strbuf *out) {
    struct prop *props;
    int n, rc;
    if (object_props(ctx, s, path, &props, &n)) {
        free(props);
        return -1;
    }
    struct strbuf *kv = calloc((size_t)n + 1, sizeof *kv);
    struct strbuf *rest = calloc((size_t)n + 2, sizeof *rest);
    struct strbuf extra = {0}, inside = {0}, body = {0};
    ctx->used |= USE_WS;
    if (kv == NULL || rest == NULL)
        rc = fail_oom(ctx);
    else
        rc = gen_members(ctx, path, props, n, kv);
    if (rc == 0) rc = gen_extra_member(ctx, s, path, props, n, &extra);
    if (rc == 0 && extra.oom) rc = fail_oom(ctx);
    if (rc == 0) rc = gen_rests(ctx, path, props, n, kv, extra.p ? extra.p : "", rest);
    if (rc == 0) gen_inside(props, n, kv, extra.p ? extra.p : "", rest, &inside);
    if (rc == 0 && inside.oom) rc = fail_oom(ctx);
    if (rc == 0) {
        sb_printf(&body, "\"{\" ws %s%s\"}\"", inside.p ? inside.p : "", inside.n ? " " : "");
        rc = add_rule(ctx, "obj", path_hint(path), &body, out);
    }
    for (int i = 0; kv && i < n; i++) free(kv[i].p);
    for (int i = 0; rest && i < n + 2; i++) free(rest[i].p);
    free(kv);
    free(rest);
    free(props);
    free(extra.p);
    free(inside.p);
    free(body.p);
    return rc;
}

/* ---- typed schemas ---- */

/* Digits of the widest run of nines in [0, limit]: 10^k - 1 <= limit. */
static int nines_within(double limit) {
    int k = 0;
    for (double nines = 9; k < 17 && nines <= limit; nines = nines * 10 + 9) k++;
    return k;
}

/* An integer within minimum and maximum, as the integers of a few digits:
 * at most k digits where 10^k - 1 is within the bounds (zod's int() is
 * +-(2^53 - 1): 15 digits), negative ones only if the minimum allows -9.
 * Only bounds around 0 are supported (minimum <= 0 <= maximum); numbers
 * with bounds are refused in gen_typed. */
static int put_bounded_integer(struct schema_ctx *ctx, const cJSON *s, const char *path,
                               struct strbuf *out) {
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(s, "minimum");
    const cJSON *hi = cJSON_GetObjectItemCaseSensitive(s, "maximum");
    if ((lo && !cJSON_IsNumber(lo)) || (hi && !cJSON_IsNumber(hi)))
        return fail(ctx, "\"minimum\" and \"maximum\" must be numbers at %s", where(path));
    double min = lo ? lo->valuedouble : -1e300, max = hi ? hi->valuedouble : 1e300;
    if (min > 0 || max < 0)
        return fail(ctx, "\"minimum\" above 0 or \"maximum\" below 0 is not supported at %s",
                    where(path));
    int up = nines_within(max), down = nines_within(-min);
    sb_puts(out, "( \"0\"");
    if (up > 0) sb_printf(out, " | [1-9] [0-9]{0,%d}", up - 1);
    if (down > 0) sb_printf(out, " | \"-\" [1-9] [0-9]{0,%d}", down - 1);
    sb_puts(out, " )");
    return 0;
}

/* 1 if s bounds its numbers (minimum or maximum). */
static int has_bounds(const cJSON *s) {
    return cJSON_GetObjectItemCaseSensitive(s, "minimum") ||
           cJSON_GetObjectItemCaseSensitive(s, "maximum");
}

/* One alternative for each type the schema allows, each with the keywords
 * of its type (keywords of other types are ignored). */
static int gen_typed(struct schema_ctx *ctx, const cJSON *s, const char *path, struct strbuf *out) {
    int types, n = 0, rc = 0;
    if (type_set(ctx, s, path, &types)) return -1;
    if (types & T_NUMBER) types &= ~T_INTEGER;
    if ((types & T_NUMBER) && has_bounds(s))
        return fail(ctx,
                    "\"minimum\"/\"maximum\" on a number (not an integer) is not supported at %s",
                    where(path));
    struct strbuf alts = {0};
    for (int bit = 1; bit <= T_INTEGER && rc == 0; bit <<= 1) {
        if (!(types & bit)) continue;
        if (n++ > 0) sb_puts(&alts, " | ");
        if (bit == T_NULL) sb_puts(&alts, "\"null\"");
        if (bit == T_BOOLEAN) sb_puts(&alts, "\"true\" | \"false\"");
        if (bit == T_OBJECT) rc = gen_object(ctx, s, path, &alts);
        if (bit == T_ARRAY) rc = gen_array(ctx, s, path, &alts);
        if (bit == T_STRING) rc = gen_string(ctx, s, path, &alts);
        if (bit == T_NUMBER) sb_puts(&alts, "number");
        if (bit == T_INTEGER && has_bounds(s)) rc = put_bounded_integer(ctx, s, path, &alts);
        if (bit == T_INTEGER && !has_bounds(s)) sb_puts(&alts, "integer");
        ctx->used |= bit == T_NUMBER ? USE_NUMBER : bit == T_INTEGER ? USE_INTEGER : 0;
    }
    if (rc == 0) {
        if (n == 1 && !(types & T_BOOLEAN))
            sb_puts(out, alts.p);
        else
            sb_printf(out, "( %s )", alts.p);
        if (alts.oom) rc = fail_oom(ctx);
    }
    free(alts.p);
    return rc;
}

/* anyOf or oneOf: one alternative per branch. */
static int gen_any_of(struct schema_ctx *ctx, const cJSON *s, const char *path, const char *keyword,
                      struct strbuf *out) {
    static const char *const none[] = {NULL};
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(s, keyword);
    if (check_siblings(ctx, s, path, keyword, none)) return -1;
    if (!cJSON_IsArray(list) || list->child == NULL)
        return fail(ctx, "\"%s\" must be a non-empty array of schemas at %s", keyword, where(path));
    struct strbuf body = {0};
    char index[32];
    int i = 0, rc = 0;
    for (const cJSON *b = list->child; b && rc == 0; b = b->next, i++) {
        if (i > 0) sb_puts(&body, " | ");
        snprintf(index, sizeof index, "%d", i);
        rc = gen_child(ctx, b, path, keyword, index, &body);
    }
    if (rc == 0) rc = add_rule(ctx, "alt", path_hint(path), &body, out);
    free(body.p);
    return rc;
}

/* ---- references ---- */

/* The schema that a local JSON pointer (after '#') names in the root. */
static const cJSON *resolve_pointer(const cJSON *root, const char *pointer) {
    const cJSON *node = root;
    char token[256];
    while (node && *pointer == '/') {
        size_t n = 0;
        for (pointer++; *pointer && *pointer != '/'; pointer++) {
            char c = *pointer;
            if (c == '~' && (pointer[1] == '0' || pointer[1] == '1'))
                c = *++pointer == '0' ? '~' : '/';
            if (n + 1 >= sizeof token) return NULL;
            token[n++] = c;
        }
        token[n] = '\0';
        if (cJSON_IsArray(node)) {
            char *end;
            long k = strtol(token, &end, 10);
            node = (n && *end == '\0' && k >= 0) ? cJSON_GetArrayItem(node, (int)k) : NULL;
        } else {
            node = cJSON_GetObjectItemCaseSensitive(node, token);
        }
    }
    return *pointer ? NULL : node;
}

static int add_edge(struct schema_ctx *ctx, int to) {
    if (ctx->n_edges == ctx->cap_edges) {
        int cap = ctx->cap_edges ? 2 * ctx->cap_edges : 16;
        struct left_edge *e = realloc(ctx->edges, (size_t)cap * sizeof *e);
        if (e == NULL) return fail_oom(ctx);
        ctx->edges = e;
        ctx->cap_edges = cap;
    }
    ctx->edges[ctx->n_edges++] = (struct left_edge){ctx->current, to};
    return 0;
}

/* A new entry in refs for target, with a fresh rule name; its index or -1. */
static int new_ref(struct schema_ctx *ctx, const cJSON *target, const char *pointer) {
    if (ctx->n_refs == ctx->cap_refs) {
        int cap = ctx->cap_refs ? 2 * ctx->cap_refs : 16;
        struct ref_rule *r = realloc(ctx->refs, (size_t)cap * sizeof *r);
        if (r == NULL) return fail_oom(ctx);
        ctx->refs = r;
        ctx->cap_refs = cap;
    }
    struct ref_rule *r = &ctx->refs[ctx->n_refs];
    r->target = target;
    r->pointer = pointer;
    rule_name(ctx, "ref", path_hint(pointer + 1), r->name, sizeof r->name);
    return ctx->n_refs++;
}

/* Emits the rule of refs[index]: its target's expression. */
static int gen_ref_rule(struct schema_ctx *ctx, int index, const char *pointer) {
    struct strbuf body = {0};
    int saved_current = ctx->current, saved_consumed = ctx->consumed;
    ctx->current = index;
    ctx->consumed = 0;
    int rc = gen_schema(ctx, ctx->refs[index].target, pointer, &body);
    ctx->current = saved_current;
    ctx->consumed = saved_consumed;
    if (rc == 0 && (body.oom || body.p == NULL)) rc = fail_oom(ctx);
    if (rc == 0) sb_printf(&ctx->rules, "%s ::= %s\n", ctx->refs[index].name, body.p);
    free(body.p);
    return rc;
}

static int gen_ref(struct schema_ctx *ctx, const cJSON *s, const char *path, struct strbuf *out) {
    static const char *const none[] = {NULL};
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (check_siblings(ctx, s, path, "$ref", none)) return -1;
    if (!cJSON_IsString(ref)) return fail(ctx, "\"$ref\" must be a string at %s", where(path));
    const char *pointer = ref->valuestring;
    if (pointer[0] != '#')
        return fail(ctx, "\"$ref\" to another document (\"%s\") is not supported at %s", pointer,
                    where(path));
    const cJSON *target = resolve_pointer(ctx->root, pointer + 1);
    if (target == NULL)
        return fail(ctx, "\"$ref\" \"%s\" does not resolve at %s", pointer, where(path));
    int index = 0;
    while (index < ctx->n_refs && ctx->refs[index].target != target) index++;
    int fresh = index == ctx->n_refs;
    if (fresh && new_ref(ctx, target, pointer) < 0) return -1;
    if (!ctx->consumed && add_edge(ctx, index)) return -1;
    sb_puts(out, ctx->refs[index].name);
    return fresh ? gen_ref_rule(ctx, index, pointer + 1) : 0;
}

/* A cycle among the references reached without consuming input (a left
 * recursion, which no grammar engine can run): 0 when there is none. */
static int check_left_cycles(struct schema_ctx *ctx) {
    int n = ctx->n_refs;
    char *state = calloc((size_t)n + 1, 1); /* 0 new, 1 on the path, 2 done */
    int *stack = malloc(((size_t)n + 1) * sizeof *stack);
    int *next = calloc((size_t)n + 1, sizeof *next); /* next edge to try */
    int rc = 0;
    if (state == NULL || stack == NULL || next == NULL) {
        free(state);
        free(stack);
        free(next);
        return fail_oom(ctx);
    }
    for (int start = 0; start < n && rc == 0; start++) {
        if (state[start]) continue;
        int depth = 0;
        stack[depth++] = start;
        state[start] = 1;
        while (depth > 0 && rc == 0) {
            int v = stack[depth - 1], e = next[v]++;
            if (e >= ctx->n_edges) {
                state[v] = 2;
                depth--;
            } else if (ctx->edges[e].from == v && state[ctx->edges[e].to] == 1) {
                rc = fail(ctx, "\"$ref\" cycle that consumes no input through \"%s\"",
                          ctx->refs[ctx->edges[e].to].pointer);
            } else if (ctx->edges[e].from == v && state[ctx->edges[e].to] == 0) {
                state[ctx->edges[e].to] = 1;
                stack[depth++] = ctx->edges[e].to;
            }
        }
    }
    free(state);
    free(stack);
    free(next);
    return rc;
}

/* ---- one schema ---- */

/* gen_schema once the depth is checked. */
static int gen_schema_at(struct schema_ctx *ctx, const cJSON *s, const char *path,
                         struct strbuf *out) {
    if (cJSON_IsTrue(s)) {
        ctx->used |= USE_VALUE;
        sb_puts(out, "value");
        return 0;
    }
    if (cJSON_IsFalse(s))
        return fail(ctx, "the schema false (nothing is valid) is not supported at %s", where(path));
    if (!cJSON_IsObject(s))
        return fail(ctx, "a schema must be an object or a boolean at %s", where(path));
    if (check_keywords(ctx, s, path)) return -1;
    if (unconstrained(s)) {
        ctx->used |= USE_VALUE;
        sb_puts(out, "value");
        return 0;
    }
    if (cJSON_GetObjectItemCaseSensitive(s, "$ref")) return gen_ref(ctx, s, path, out);
    if (cJSON_GetObjectItemCaseSensitive(s, "anyOf")) return gen_any_of(ctx, s, path, "anyOf", out);
    if (cJSON_GetObjectItemCaseSensitive(s, "oneOf")) return gen_any_of(ctx, s, path, "oneOf", out);
    int saved = ctx->consumed;
    ctx->consumed = 1; /* every alternative below begins with a token */
    int rc;
    if (cJSON_GetObjectItemCaseSensitive(s, "enum") || cJSON_GetObjectItemCaseSensitive(s, "const"))
        rc = gen_enum(ctx, s, path, out);
    else
        rc = gen_typed(ctx, s, path, out);
    ctx->consumed = saved;
    return rc;
}

/* Appends to out an atomic GBNF expression for the JSON values valid under s. */
static int gen_schema(struct schema_ctx *ctx, const cJSON *s, const char *path,
                      struct strbuf *out) {
    if (ctx->depth >= SCHEMA_MAX_DEPTH)
        return fail(ctx, "the schema nests deeper than %d levels at %s", SCHEMA_MAX_DEPTH,
                    where(path));
    ctx->depth++;
    int rc = gen_schema_at(ctx, s, path, out);
    ctx->depth--;
    return rc;
}

/* The shared rules used, and those they need, appended to out. */
static void put_shared_rules(unsigned used, struct strbuf *out) {
    size_t n = sizeof shared_rules / sizeof shared_rules[0];
    for (unsigned before = 0; before != used;) {
        before = used;
        for (size_t i = 0; i < n; i++)
            if (used & shared_rules[i].flag) used |= shared_rules[i].needs;
    }
    for (size_t i = 0; i < n; i++)
        if (used & shared_rules[i].flag) sb_puts(out, shared_rules[i].text);
}

char *grammar_from_json_schema(const cJSON *schema, char *err, size_t errlen) {
    struct schema_ctx ctx = {.root = schema, .current = -1, .err = err, .errlen = errlen};
    struct strbuf root = {0}, text = {0};
    if (err && errlen) err[0] = '\0';
    int rc;
    if (schema == NULL) {
        ctx.used |= USE_OBJECT;
        sb_puts(&root, "object");
        rc = 0;
    } else {
        rc = gen_schema(&ctx, schema, "", &root);
    }
    if (rc == 0) rc = check_left_cycles(&ctx);
    if (rc == 0) {
        sb_printf(&text, "root ::= %s\n", root.p ? root.p : "");
        sb_puts(&text, ctx.rules.p ? ctx.rules.p : "");
        put_shared_rules(ctx.used, &text);
        if (text.oom || root.oom || ctx.rules.oom) rc = fail_oom(&ctx);
    }
    free(root.p);
    free(ctx.rules.p);
    free(ctx.refs);
    free(ctx.edges);
    if (rc) {
        free(text.p);
        return NULL;
    }
    return text.p;
}
