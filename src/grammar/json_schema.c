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
 *
 * Object schemas (properties, required, additionalProperties) are written
 * by json_schema_object.c; json_schema_internal.h is what the two share.
 */
#include "base/base.h"
#include "grammar/grammar.h"
#include "json_schema_internal.h"

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

void schema_sb_putn(struct strbuf *b, const char *s, size_t n) {
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

void schema_sb_puts(struct strbuf *b, const char *s) {
    schema_sb_putn(b, s, strlen(s));
}

void schema_sb_printf(struct strbuf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
    } else if ((size_t)n < sizeof small) {
        schema_sb_putn(b, small, (size_t)n);
    } else {
        char *big = malloc((size_t)n + 1);
        if (big == NULL) {
            b->oom = 1;
            return;
        }
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        schema_sb_putn(b, big, (size_t)n);
        free(big);
    }
}

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

int schema_fail(struct schema_ctx *ctx, const char *fmt, ...) {
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

int schema_fail_oom(struct schema_ctx *ctx) {
    return schema_fail(ctx, "out of memory converting a JSON Schema");
}

const char *schema_where(const char *path) {
    return path[0] ? path : "the root";
}

char *schema_child_path(const char *path, const char *key, const char *key2) {
    struct strbuf b = {0};
    schema_sb_puts(&b, path);
    for (int k = 0; k < 2; k++) {
        const char *s = k ? key2 : key;
        if (s == NULL) break;
        schema_sb_puts(&b, "/");
        for (; *s; s++) {
            if (*s == '~')
                schema_sb_puts(&b, "~0");
            else if (*s == '/')
                schema_sb_puts(&b, "~1");
            else
                schema_sb_putn(&b, s, 1);
        }
    }
    if (b.oom || b.p == NULL) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

long schema_utf8_next(const unsigned char *s, int *len) {
    uint32_t cp = 0;
    int n = utf8_decode(s, 4, &cp); /* s is NUL-terminated: decoding stops at the NUL */
    *len = n > 0 ? n : 1;
    return n > 0 ? (long)cp : -1;
}

void schema_put_literal_text(struct strbuf *b, const char *text, size_t n) {
    for (const unsigned char *s = (const unsigned char *)text; s < (const unsigned char *)text + n;
         s++) {
        if (*s == '"')
            schema_sb_puts(b, "\\\"");
        else if (*s == '\\')
            schema_sb_puts(b, "\\\\");
        else if (*s < 0x20 || *s == 0x7F)
            schema_sb_printf(b, "\\x%02X", *s);
        else
            schema_sb_putn(b, (const char *)s, 1);
    }
}

/* Appends s as its canonical JSON string text (quotes, escapes). */
static void put_json_string(struct strbuf *b, const char *s) {
    schema_sb_puts(b, "\"");
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
            schema_sb_puts(b, esc);
        else if (*p < 0x20)
            schema_sb_printf(b, "\\u%04x", *p);
        else
            schema_sb_putn(b, (const char *)p, 1);
    }
    schema_sb_puts(b, "\"");
}

/* Appends a GBNF literal matching the canonical JSON text of string s. */
static void put_string_literal(struct strbuf *b, const char *s) {
    struct strbuf json = {0};
    put_json_string(&json, s);
    if (json.oom) {
        b->oom = 1;
    } else {
        schema_sb_puts(b, "\"");
        schema_put_literal_text(b, json.p, json.n);
        schema_sb_puts(b, "\"");
    }
    free(json.p);
}

void schema_rule_name(struct schema_ctx *ctx, const char *kind, const char *hint, char *name,
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

int schema_add_rule(struct schema_ctx *ctx, const char *kind, const char *hint,
                    const struct strbuf *body, struct strbuf *out) {
    char name[64];
    if (body->oom || body->p == NULL) return schema_fail_oom(ctx);
    schema_rule_name(ctx, kind, hint, name, sizeof name);
    schema_sb_printf(&ctx->rules, "%s ::= %s\n", name, body->p);
    schema_sb_puts(out, name);
    return 0;
}

const char *schema_path_hint(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

int schema_gen_child(struct schema_ctx *ctx, const cJSON *s, const char *path, const char *key,
                     const char *key2, struct strbuf *out) {
    char *child = schema_child_path(path, key, key2);
    if (child == NULL) return schema_fail_oom(ctx);
    int rc = schema_gen_schema(ctx, s, child, out);
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
            return schema_fail(ctx, "unsupported JSON Schema keyword \"%s\" at %s", k->string,
                               schema_where(path));
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
int schema_check_siblings(struct schema_ctx *ctx, const cJSON *s, const char *path,
                          const char *keyword, const char *const *allowed) {
    for (const cJSON *k = s->child; k; k = k->next) {
        const char *name = k->string;
        if (strcmp(name, keyword) == 0 || in_list(annotation_keys, name) ||
            strcmp(name, "$defs") == 0 || strcmp(name, "definitions") == 0 ||
            in_list(allowed, name))
            continue;
        return schema_fail(ctx, "\"%s\" with sibling keyword \"%s\" is not supported at %s",
                           keyword, name, schema_where(path));
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
        return schema_fail(ctx, "\"%s\" must be a non-negative integer at %s", keyword,
                           schema_where(path));
    if (v->valuedouble > SCHEMA_MAX_COUNT)
        return schema_fail(ctx, "\"%s\" above %d is not supported at %s", keyword, SCHEMA_MAX_COUNT,
                           schema_where(path));
    *value = (long)v->valuedouble;
    return 0;
}

/* min and max (-1: none) of keywords lo and hi, checked against each other. */
static int bounds(struct schema_ctx *ctx, const cJSON *s, const char *path, const char *lo,
                  const char *hi, long *min, long *max) {
    if (count_keyword(ctx, s, path, lo, 0, min) || count_keyword(ctx, s, path, hi, -1, max))
        return -1;
    if (*max >= 0 && *min > *max)
        return schema_fail(ctx, "\"%s\" is greater than \"%s\" at %s", lo, hi, schema_where(path));
    return 0;
}

/* Appends item (an atomic expression) repeated min to max times (max -1:
 * no bound); nothing when max is 0. */
static void put_repeat(struct strbuf *out, const char *item, long min, long max) {
    if (max == 0) return;
    if (min == 0 && max < 0)
        schema_sb_printf(out, "%s*", item);
    else if (min == 1 && max < 0)
        schema_sb_printf(out, "%s+", item);
    else if (min == 0 && max == 1)
        schema_sb_printf(out, "%s?", item);
    else if (max < 0)
        schema_sb_printf(out, "%s{%ld,}", item, min);
    else if (min == max)
        schema_sb_printf(out, "%s{%ld}", item, min);
    else
        schema_sb_printf(out, "%s{%ld,%ld}", item, min, max);
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
        if (*types == 0)
            return schema_fail(ctx, "unknown type \"%s\" at %s", t->valuestring,
                               schema_where(path));
        return 0;
    }
    if (!cJSON_IsArray(t) || t->child == NULL)
        return schema_fail(ctx, "\"type\" must be a type name or a non-empty array of them at %s",
                           schema_where(path));
    for (const cJSON *e = t->child; e; e = e->next) {
        int bit = cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
        if (bit == 0)
            return schema_fail(ctx,
                               "\"type\" must be a type name or a non-empty array of them at %s",
                               schema_where(path));
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

int schema_gen_string_value(struct schema_ctx *ctx, const char *s, const char *path,
                            struct strbuf *out) {
    if (!utf8_valid(s, strlen(s)))
        return schema_fail(ctx, "a string is not valid UTF-8 at %s", schema_where(path));
    put_string_literal(out, s);
    return 0;
}

/* The members or elements of container v, with ws between the tokens. */
static int gen_container_value(struct schema_ctx *ctx, const cJSON *v, const char *path,
                               struct strbuf *out) {
    int object = cJSON_IsObject(v);
    char index[32];
    int i = 0;
    schema_sb_puts(out, object ? "( \"{\" ws " : "( \"[\" ws ");
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (i > 0) schema_sb_puts(out, "\",\" ws ");
        snprintf(index, sizeof index, "%d", i);
        char *child = schema_child_path(path, object ? e->string : index, NULL);
        if (child == NULL) return schema_fail_oom(ctx);
        int rc = object ? schema_gen_string_value(ctx, e->string, child, out) : 0;
        if (object) schema_sb_puts(out, " ws \":\" ws ");
        rc = rc ? rc : gen_value(ctx, e, child, out);
        free(child);
        if (rc) return rc;
        schema_sb_puts(out, " ws ");
    }
    schema_sb_puts(out, object ? "\"}\" )" : "\"]\" )");
    ctx->used |= USE_WS;
    return 0;
}

/* A GBNF expression matching the JSON value v written canonically. */
static int gen_value(struct schema_ctx *ctx, const cJSON *v, const char *path, struct strbuf *out) {
    char text[64];
    if (cJSON_IsNull(v)) {
        schema_sb_puts(out, "\"null\"");
    } else if (cJSON_IsBool(v)) {
        schema_sb_puts(out, cJSON_IsTrue(v) ? "\"true\"" : "\"false\"");
    } else if (cJSON_IsNumber(v)) {
        if (!isfinite(v->valuedouble))
            return schema_fail(ctx, "a number out of range at %s", schema_where(path));
        number_text(v->valuedouble, text, sizeof text);
        schema_sb_printf(out, "\"%s\"", text);
    } else if (cJSON_IsString(v)) {
        return schema_gen_string_value(ctx, v->valuestring, path, out);
    } else if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        return gen_container_value(ctx, v, path, out);
    } else {
        return schema_fail(ctx, "a value that is not JSON at %s", schema_where(path));
    }
    return 0;
}

/* enum or const: the listed values whose type the schema allows. */
static int gen_enum(struct schema_ctx *ctx, const cJSON *s, const char *path, struct strbuf *out) {
    static const char *const only_type[] = {"type", NULL};
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const char *keyword = en ? "enum" : "const";
    int types, n = 0;
    if (schema_check_siblings(ctx, s, path, keyword, only_type) || type_set(ctx, s, path, &types))
        return -1;
    if (en && (!cJSON_IsArray(en) || en->child == NULL))
        return schema_fail(ctx, "\"enum\" must be a non-empty array at %s", schema_where(path));
    /* each value is an alternative the grammar follows at once */
    if (en && cJSON_GetArraySize(en) > GRAMMAR_MAX_STACKS)
        return schema_fail(ctx,
                           "\"enum\" at %s has %d values; at most %d are supported: shorten the "
                           "list, or describe the values by their type (\"type\": \"string\" with "
                           "\"maxLength\")",
                           schema_where(path), cJSON_GetArraySize(en), GRAMMAR_MAX_STACKS);
    char *kpath = schema_child_path(path, keyword, NULL);
    if (kpath == NULL) return schema_fail_oom(ctx);
    struct strbuf body = {0};
    const cJSON *first = en ? en->child : cJSON_GetObjectItemCaseSensitive(s, "const");
    char index[32];
    int i = 0, rc = 0;
    for (const cJSON *v = first; v && rc == 0; v = en ? v->next : NULL, i++) {
        if ((value_types(v) & types) == 0) continue;
        if (n++ > 0) schema_sb_puts(&body, " | ");
        snprintf(index, sizeof index, "%d", i);
        char *vpath = en ? schema_child_path(kpath, index, NULL) : NULL;
        if (en && vpath == NULL)
            rc = schema_fail_oom(ctx);
        else
            rc = gen_value(ctx, v, en ? vpath : kpath, &body);
        free(vpath);
    }
    free(kpath);
    if (rc == 0 && n == 0)
        rc = schema_fail(ctx, "no value of \"%s\" has a type the schema allows at %s", keyword,
                         schema_where(path));
    if (rc == 0) rc = schema_add_rule(ctx, "enum", schema_path_hint(path), &body, out);
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
            return schema_fail(
                ctx, "\"format\" with sibling keyword \"minLength\" is not supported at %s",
                schema_where(path));
        if (cJSON_GetObjectItemCaseSensitive(s, "maxLength"))
            return schema_fail(
                ctx, "\"format\" with sibling keyword \"maxLength\" is not supported at %s",
                schema_where(path));
        for (int i = 0; cJSON_IsString(format) && i < 4; i++) {
            if (strcmp(format->valuestring, names[i]) != 0) continue;
            ctx->used |= flags[i];
            schema_sb_printf(out, "( \"\\\"\" %s \"\\\"\" )", names[i]);
            return 0;
        }
        if (!cJSON_IsString(format))
            return schema_fail(ctx, "\"format\" must be a string at %s", schema_where(path));
        return schema_fail(ctx, "unsupported format \"%s\" at %s", format->valuestring,
                           schema_where(path));
    }
    if (bounds(ctx, s, path, "minLength", "maxLength", &min, &max)) return -1;
    if (min == 0 && max < 0) {
        ctx->used |= USE_STRING;
        schema_sb_puts(out, "string");
        return 0;
    }
    ctx->used |= USE_CHAR;
    schema_sb_puts(out, "( \"\\\"\" ");
    put_repeat(out, "char", min, max);
    schema_sb_puts(out, " \"\\\"\" )");
    return 0;
}

/* ---- arrays ---- */

/* The schema of the items at path/items, or "value" when absent or true. */
static int gen_items(struct schema_ctx *ctx, const cJSON *s, const char *path, struct strbuf *out) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (items == NULL || cJSON_IsTrue(items)) {
        ctx->used |= USE_VALUE;
        schema_sb_puts(out, "value");
        return 0;
    }
    if (cJSON_IsArray(items))
        return schema_fail(ctx, "\"items\" as an array of schemas (a tuple) is not supported at %s",
                           schema_where(path));
    return schema_gen_child(ctx, items, path, "items", NULL, out);
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
        return schema_fail_oom(ctx);
    }
    if (max == 0) {
        schema_sb_puts(&body, "\"[\" ws \"]\"");
    } else {
        struct strbuf more = {0};
        schema_sb_printf(&more, "( \",\" ws %s ws )", item.p);
        schema_sb_printf(&body, "\"[\" ws %s%s ws ", min == 0 ? "( " : "", item.p);
        if (!more.oom) put_repeat(&body, more.p, min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
        schema_sb_printf(&body, "%s \"]\"", min == 0 ? " )?" : "");
        body.oom |= more.oom;
        free(more.p);
    }
    int rc = schema_add_rule(ctx, "arr", schema_path_hint(path), &body, out);
    free(item.p);
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
        return schema_fail(ctx, "\"minimum\" and \"maximum\" must be numbers at %s",
                           schema_where(path));
    double min = lo ? lo->valuedouble : -1e300, max = hi ? hi->valuedouble : 1e300;
    if (min > 0 || max < 0)
        return schema_fail(ctx, "\"minimum\" above 0 or \"maximum\" below 0 is not supported at %s",
                           schema_where(path));
    int up = nines_within(max), down = nines_within(-min);
    schema_sb_puts(out, "( \"0\"");
    if (up > 0) schema_sb_printf(out, " | [1-9] [0-9]{0,%d}", up - 1);
    if (down > 0) schema_sb_printf(out, " | \"-\" [1-9] [0-9]{0,%d}", down - 1);
    schema_sb_puts(out, " )");
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
        return schema_fail(
            ctx, "\"minimum\"/\"maximum\" on a number (not an integer) is not supported at %s",
            schema_where(path));
    struct strbuf alts = {0};
    for (int bit = 1; bit <= T_INTEGER && rc == 0; bit <<= 1) {
        if (!(types & bit)) continue;
        if (n++ > 0) schema_sb_puts(&alts, " | ");
        if (bit == T_NULL) schema_sb_puts(&alts, "\"null\"");
        if (bit == T_BOOLEAN) schema_sb_puts(&alts, "\"true\" | \"false\"");
        if (bit == T_OBJECT) rc = schema_gen_object(ctx, s, path, &alts);
        if (bit == T_ARRAY) rc = gen_array(ctx, s, path, &alts);
        if (bit == T_STRING) rc = gen_string(ctx, s, path, &alts);
        if (bit == T_NUMBER) schema_sb_puts(&alts, "number");
        if (bit == T_INTEGER && has_bounds(s)) rc = put_bounded_integer(ctx, s, path, &alts);
        if (bit == T_INTEGER && !has_bounds(s)) schema_sb_puts(&alts, "integer");
        ctx->used |= bit == T_NUMBER ? USE_NUMBER : bit == T_INTEGER ? USE_INTEGER : 0;
    }
    if (rc == 0) {
        if (n == 1 && !(types & T_BOOLEAN))
            schema_sb_puts(out, alts.p);
        else
            schema_sb_printf(out, "( %s )", alts.p);
        if (alts.oom) rc = schema_fail_oom(ctx);
    }
    free(alts.p);
    return rc;
}

/* anyOf or oneOf: one alternative per branch. */
static int gen_any_of(struct schema_ctx *ctx, const cJSON *s, const char *path, const char *keyword,
                      struct strbuf *out) {
    static const char *const none[] = {NULL};
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(s, keyword);
    if (schema_check_siblings(ctx, s, path, keyword, none)) return -1;
    if (!cJSON_IsArray(list) || list->child == NULL)
        return schema_fail(ctx, "\"%s\" must be a non-empty array of schemas at %s", keyword,
                           schema_where(path));
    struct strbuf body = {0};
    char index[32];
    int i = 0, rc = 0;
    for (const cJSON *b = list->child; b && rc == 0; b = b->next, i++) {
        if (i > 0) schema_sb_puts(&body, " | ");
        snprintf(index, sizeof index, "%d", i);
        rc = schema_gen_child(ctx, b, path, keyword, index, &body);
    }
    if (rc == 0) rc = schema_add_rule(ctx, "alt", schema_path_hint(path), &body, out);
    free(body.p);
    return rc;
}

/* ---- one schema ---- */

/* schema_gen_schema once the depth is checked. */
static int gen_schema_at(struct schema_ctx *ctx, const cJSON *s, const char *path,
                         struct strbuf *out) {
    if (cJSON_IsTrue(s)) {
        ctx->used |= USE_VALUE;
        schema_sb_puts(out, "value");
        return 0;
    }
    if (cJSON_IsFalse(s))
        return schema_fail(ctx, "the schema false (nothing is valid) is not supported at %s",
                           schema_where(path));
    if (!cJSON_IsObject(s))
        return schema_fail(ctx, "a schema must be an object or a boolean at %s",
                           schema_where(path));
    if (check_keywords(ctx, s, path)) return -1;
    if (unconstrained(s)) {
        ctx->used |= USE_VALUE;
        schema_sb_puts(out, "value");
        return 0;
    }
    if (cJSON_GetObjectItemCaseSensitive(s, "$ref")) return schema_gen_ref(ctx, s, path, out);
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

int schema_gen_schema(struct schema_ctx *ctx, const cJSON *s, const char *path,
                      struct strbuf *out) {
    if (ctx->depth >= SCHEMA_MAX_DEPTH)
        return schema_fail(ctx, "the schema nests deeper than %d levels at %s", SCHEMA_MAX_DEPTH,
                           schema_where(path));
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
        if (used & shared_rules[i].flag) schema_sb_puts(out, shared_rules[i].text);
}

char *grammar_from_json_schema(const cJSON *schema, char *err, size_t errlen) {
    struct schema_ctx ctx = {.root = schema, .current = -1, .err = err, .errlen = errlen};
    struct strbuf root = {0}, text = {0};
    if (err && errlen) err[0] = '\0';
    int rc;
    if (schema == NULL) {
        ctx.used |= USE_OBJECT;
        schema_sb_puts(&root, "object");
        rc = 0;
    } else {
        rc = schema_gen_schema(&ctx, schema, "", &root);
    }
    if (rc == 0) rc = schema_check_left_cycles(&ctx);
    if (rc == 0) {
        schema_sb_printf(&text, "root ::= %s\n", root.p ? root.p : "");
        schema_sb_puts(&text, ctx.rules.p ? ctx.rules.p : "");
        put_shared_rules(ctx.used, &text);
        if (text.oom || root.oom || ctx.rules.oom) rc = schema_fail_oom(&ctx);
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
