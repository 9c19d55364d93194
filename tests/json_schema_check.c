/* json_schema_check.c -- a JSON Schema validator (the subset described in
 * json_schema_check.h) and a strict JSON syntax check, for tests. Written
 * apart from src/grammar/json_schema.c on purpose: the tests hold the
 * grammars the converter makes against this code. */
#include "json_schema_check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_MAX_DEPTH 400 /* schema applications on one path before giving up */

/* One validation: the document root for $ref and where the message goes. */
struct checker {
    const cJSON *root; /* the whole schema */
    char *err;         /* message of the first fault */
    size_t errlen;     /* its size */
    int quiet;         /* inside anyOf/oneOf: faults are expected, keep err */
};

static int bad(struct checker *c, const char *fmt, ...) {
    if (!c->quiet && c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int validate(struct checker *c, const cJSON *schema, const cJSON *doc, const char *at,
                    int depth);

/* at + "/" + key, into buf (cut when long: it is only for messages). */
static const char *sub(char *buf, size_t size, const char *at, const char *key) {
    snprintf(buf, size, "%s/%s", at, key);
    return buf;
}

static const char *sub_index(char *buf, size_t size, const char *at, int i) {
    snprintf(buf, size, "%s/%d", at, i);
    return buf;
}

/* ---- equality of JSON values ---- */

static int same_value(const cJSON *a, const cJSON *b);

static int same_members(const cJSON *a, const cJSON *b) {
    if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) return 0;
    for (const cJSON *m = a->child; m; m = m->next) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(b, m->string);
        if (o == NULL || !same_value(m, o)) return 0;
    }
    return 1;
}

static int same_value(const cJSON *a, const cJSON *b) {
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return a->valuedouble == b->valuedouble;
    if (cJSON_IsString(a) && cJSON_IsString(b)) return strcmp(a->valuestring, b->valuestring) == 0;
    if (cJSON_IsNull(a) && cJSON_IsNull(b)) return 1;
    if (cJSON_IsTrue(a) && cJSON_IsTrue(b)) return 1;
    if (cJSON_IsFalse(a) && cJSON_IsFalse(b)) return 1;
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) return same_members(a, b);
    if (cJSON_IsArray(a) && cJSON_IsArray(b)) {
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next)
            if (!same_value(x, y)) return 0;
        return x == NULL && y == NULL;
    }
    return 0;
}

/* ---- types ---- */

static int has_type(const cJSON *doc, const char *type) {
    if (strcmp(type, "null") == 0) return cJSON_IsNull(doc);
    if (strcmp(type, "boolean") == 0) return cJSON_IsBool(doc);
    if (strcmp(type, "object") == 0) return cJSON_IsObject(doc);
    if (strcmp(type, "array") == 0) return cJSON_IsArray(doc);
    if (strcmp(type, "string") == 0) return cJSON_IsString(doc);
    if (strcmp(type, "number") == 0) return cJSON_IsNumber(doc);
    if (strcmp(type, "integer") == 0)
        return cJSON_IsNumber(doc) && isfinite(doc->valuedouble) &&
               trunc(doc->valuedouble) == doc->valuedouble;
    return -1;
}

static int check_type(struct checker *c, const cJSON *type, const cJSON *doc, const char *at) {
    if (cJSON_IsString(type)) {
        int r = has_type(doc, type->valuestring);
        if (r < 0) return bad(c, "schema: unknown type %s", type->valuestring);
        return r ? 0 : bad(c, "%s: not of type %s", at, type->valuestring);
    }
    if (!cJSON_IsArray(type)) return bad(c, "schema: bad \"type\"");
    for (const cJSON *t = type->child; t; t = t->next) {
        int r = cJSON_IsString(t) ? has_type(doc, t->valuestring) : -1;
        if (r < 0) return bad(c, "schema: bad \"type\" entry");
        if (r) return 0;
    }
    return bad(c, "%s: of none of the types listed", at);
}

/* ---- $ref ---- */

/* The schema that "#..." names, or NULL. */
static const cJSON *follow(const cJSON *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    const cJSON *node = root;
    const char *p = ref + 1;
    while (node && *p) {
        if (*p != '/') return NULL;
        char name[512];
        size_t len = 0;
        for (p++; *p && *p != '/' && len + 1 < sizeof name; p++) {
            if (p[0] == '~' && p[1] == '1')
                name[len++] = '/', p++;
            else if (p[0] == '~' && p[1] == '0')
                name[len++] = '~', p++;
            else
                name[len++] = *p;
        }
        name[len] = '\0';
        if (cJSON_IsArray(node))
            node = cJSON_GetArrayItem(node, atoi(name));
        else
            node = cJSON_GetObjectItemCaseSensitive(node, name);
    }
    return node;
}

/* ---- strings ---- */

/* Characters (code points) of UTF-8 text. */
static long char_count(const char *s) {
    long n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) n++;
    return n;
}

static int digits(const char *s, int n) {
    for (int i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

static int number_at(const char *s, int n) {
    int v = 0;
    for (int i = 0; i < n; i++) v = v * 10 + (s[i] - '0');
    return v;
}

static int month_days(int year, int month) {
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return month == 2 && leap ? 29 : days[month - 1];
}

/* Length of an RFC 3339 full-date at s, or 0. */
static int is_date(const char *s) {
    if (strlen(s) < 10 || !digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) || s[7] != '-' ||
        !digits(s + 8, 2))
        return 0;
    int y = number_at(s, 4), m = number_at(s + 5, 2), d = number_at(s + 8, 2);
    return m >= 1 && m <= 12 && d >= 1 && d <= month_days(y, m) ? 10 : 0;
}

/* "HH:MM" with HH < 24 and MM < 60 at s. */
static int is_hour_minute(const char *s) {
    return digits(s, 2) && s[2] == ':' && digits(s + 3, 2) && number_at(s, 2) < 24 &&
           number_at(s + 3, 2) < 60;
}

/* s is exactly an RFC 3339 full-time (seconds 00-59). */
static int is_time(const char *s) {
    if (strlen(s) < 9 || !is_hour_minute(s) || s[5] != ':' || !digits(s + 6, 2) ||
        number_at(s + 6, 2) > 59)
        return 0;
    s += 8;
    if (*s == '.') {
        s++;
        if (!digits(s, 1)) return 0;
        while (*s >= '0' && *s <= '9') s++;
    }
    if (*s == 'Z' || *s == 'z') return s[1] == '\0';
    return (*s == '+' || *s == '-') && strlen(s + 1) == 5 && is_hour_minute(s + 1);
}

static int is_uuid(const char *s) {
    if (strlen(s) != 36) return 0;
    for (int i = 0; i < 36; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        char ch = s[i];
        int hex = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
        if (dash ? ch != '-' : !hex) return 0;
    }
    return 1;
}

static int check_format(struct checker *c, const cJSON *format, const char *s, const char *at) {
    const char *f = cJSON_IsString(format) ? format->valuestring : "";
    int ok;
    if (strcmp(f, "date") == 0)
        ok = is_date(s) == 10 && s[10] == '\0';
    else if (strcmp(f, "time") == 0)
        ok = is_time(s);
    else if (strcmp(f, "date-time") == 0)
        ok = is_date(s) == 10 && (s[10] == 'T' || s[10] == 't') && is_time(s + 11);
    else if (strcmp(f, "uuid") == 0)
        ok = is_uuid(s);
    else
        return bad(c, "schema: format \"%s\" not known to the check", f);
    return ok ? 0 : bad(c, "%s: \"%s\" is not a %s", at, s, f);
}

/* A non-negative integer keyword's value, or -1 (and a message) when bad. */
static double count_of(struct checker *c, const cJSON *v) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || trunc(v->valuedouble) != v->valuedouble) {
        bad(c, "schema: \"%s\" is not a count", v->string);
        return -1;
    }
    return v->valuedouble;
}

/* ---- objects ---- */

static int check_required(struct checker *c, const cJSON *required, const cJSON *doc,
                          const char *at) {
    if (!cJSON_IsArray(required)) return bad(c, "schema: bad \"required\"");
    for (const cJSON *r = required->child; r; r = r->next) {
        if (!cJSON_IsString(r)) return bad(c, "schema: bad \"required\" entry");
        if (cJSON_GetObjectItemCaseSensitive(doc, r->valuestring) == NULL)
            return bad(c, "%s: required property \"%s\" is missing", at, r->valuestring);
    }
    return 0;
}

/* Times a member named name occurs in doc. */
static int occurrences(const cJSON *doc, const char *name) {
    int n = 0;
    for (const cJSON *m = doc->child; m; m = m->next) n += strcmp(m->string, name) == 0;
    return n;
}

/* Each member of doc against its declared schema or additionalProperties. */
static int check_members(struct checker *c, const cJSON *schema, const cJSON *doc, const char *at,
                         int depth) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(schema, "additionalProperties");
    char where[1024];
    if (props && !cJSON_IsObject(props)) return bad(c, "schema: bad \"properties\"");
    for (const cJSON *m = doc->child; m; m = m->next) {
        const cJSON *declared = cJSON_GetObjectItemCaseSensitive(props, m->string);
        sub(where, sizeof where, at, m->string);
        if (declared && occurrences(doc, m->string) > 1)
            return bad(c, "%s: property given twice", where);
        const cJSON *s = declared ? declared : extra;
        if (s == NULL) continue;
        if (validate(c, s, m, where, depth + 1)) {
            if (!declared && cJSON_IsFalse(extra))
                return bad(c, "%s: additional property not allowed", where);
            return -1;
        }
    }
    return 0;
}

/* ---- arrays ---- */

static int check_items(struct checker *c, const cJSON *items, const cJSON *doc, const char *at,
                       int depth) {
    char where[1024];
    int i = 0;
    for (const cJSON *e = doc->child; e; e = e->next, i++)
        if (validate(c, items, e, sub_index(where, sizeof where, at, i), depth + 1)) return -1;
    return 0;
}

/* ---- combinations ---- */

/* Branches of list that doc matches (up to 2), or -1 on a schema fault. */
static int matches(struct checker *c, const cJSON *list, const cJSON *doc, const char *at,
                   int depth) {
    if (!cJSON_IsArray(list) || list->child == NULL) return bad(c, "schema: bad %s", list->string);
    int n = 0, quiet = c->quiet;
    c->quiet = 1;
    for (const cJSON *b = list->child; b && n < 2; b = b->next)
        n += validate(c, b, doc, at, depth + 1) == 0;
    c->quiet = quiet;
    return n;
}

/* ---- one keyword ---- */

static const char *const ignored[] = {"description", "title",
                                      "default",     "examples",
                                      "$schema",     "$id",
                                      "$comment",    "deprecated",
                                      "readOnly",    "writeOnly",
                                      "$defs",       "definitions",
                                      "properties",  "additionalProperties",
                                      NULL};

static int is_ignored(const char *key) {
    for (int i = 0; ignored[i]; i++)
        if (strcmp(ignored[i], key) == 0) return 1;
    return 0;
}

/* Keywords about strings (doc is a string). */
static int string_keyword(struct checker *c, const cJSON *k, const cJSON *doc, const char *at) {
    if (strcmp(k->string, "format") == 0) return check_format(c, k, doc->valuestring, at);
    double limit = count_of(c, k);
    long len = char_count(doc->valuestring);
    if (limit < 0) return -1;
    if (strcmp(k->string, "minLength") == 0 && len < limit)
        return bad(c, "%s: shorter than %.0f characters", at, limit);
    if (strcmp(k->string, "maxLength") == 0 && len > limit)
        return bad(c, "%s: longer than %.0f characters", at, limit);
    return 0;
}

/* Keywords about arrays (doc is an array). */
static int array_keyword(struct checker *c, const cJSON *k, const cJSON *doc, const char *at,
                         int depth) {
    if (strcmp(k->string, "items") == 0) return check_items(c, k, doc, at, depth);
    double limit = count_of(c, k);
    int n = cJSON_GetArraySize(doc);
    if (limit < 0) return -1;
    if (strcmp(k->string, "minItems") == 0 && n < limit)
        return bad(c, "%s: fewer than %.0f items", at, limit);
    if (strcmp(k->string, "maxItems") == 0 && n > limit)
        return bad(c, "%s: more than %.0f items", at, limit);
    return 0;
}

static int is_one_of(const char *key, const char *const *names) {
    for (; *names; names++)
        if (strcmp(key, *names) == 0) return 1;
    return 0;
}

/* Keyword k of schema applied to doc. */
static int keyword(struct checker *c, const cJSON *k, const cJSON *doc, const char *at, int depth) {
    static const char *const string_keys[] = {"format", "minLength", "maxLength", NULL};
    static const char *const array_keys[] = {"items", "minItems", "maxItems", NULL};
    const char *key = k->string;
    if (is_ignored(key)) return 0;
    if (strcmp(key, "type") == 0) return check_type(c, k, doc, at);
    if (strcmp(key, "required") == 0)
        return cJSON_IsObject(doc) ? check_required(c, k, doc, at) : 0;
    if (is_one_of(key, string_keys)) return cJSON_IsString(doc) ? string_keyword(c, k, doc, at) : 0;
    if (is_one_of(key, array_keys))
        return cJSON_IsArray(doc) ? array_keyword(c, k, doc, at, depth) : 0;
    if (strcmp(key, "minimum") == 0 || strcmp(key, "maximum") == 0) {
        if (!cJSON_IsNumber(k)) return bad(c, "schema: bad \"%s\"", key);
        if (!cJSON_IsNumber(doc)) return 0;
        if (key[1] == 'i' ? doc->valuedouble < k->valuedouble : doc->valuedouble > k->valuedouble)
            return bad(c, "%s: %g is beyond the %s %g", at, doc->valuedouble, key, k->valuedouble);
        return 0;
    }
    if (strcmp(key, "const") == 0) return same_value(k, doc) ? 0 : bad(c, "%s: not the const", at);
    if (strcmp(key, "enum") == 0) {
        if (!cJSON_IsArray(k)) return bad(c, "schema: bad \"enum\"");
        for (const cJSON *v = k->child; v; v = v->next)
            if (same_value(v, doc)) return 0;
        return bad(c, "%s: not one of the enum", at);
    }
    if (strcmp(key, "$ref") == 0) {
        const cJSON *target = cJSON_IsString(k) ? follow(c->root, k->valuestring) : NULL;
        if (target == NULL) return bad(c, "schema: $ref does not resolve");
        return validate(c, target, doc, at, depth + 1);
    }
    if (strcmp(key, "anyOf") == 0 || strcmp(key, "oneOf") == 0) {
        int n = matches(c, k, doc, at, depth);
        if (n < 0) return -1;
        if (n == 0) return bad(c, "%s: matches no branch of %s", at, key);
        if (n > 1 && key[0] == 'o') return bad(c, "%s: matches two branches of oneOf", at);
        return 0;
    }
    return bad(c, "schema: keyword \"%s\" not known to the check", key);
}

static int validate(struct checker *c, const cJSON *schema, const cJSON *doc, const char *at,
                    int depth) {
    if (depth > CHECK_MAX_DEPTH) return bad(c, "%s: schema nests too deep", at);
    if (cJSON_IsTrue(schema)) return 0;
    if (cJSON_IsFalse(schema)) return bad(c, "%s: nothing is valid here", at);
    if (!cJSON_IsObject(schema)) return bad(c, "schema: not an object");
    if (cJSON_IsObject(doc) && check_members(c, schema, doc, at, depth)) return -1;
    for (const cJSON *k = schema->child; k; k = k->next)
        if (keyword(c, k, doc, at, depth)) return -1;
    return 0;
}

int json_schema_check(const cJSON *schema, const cJSON *doc, char *err, size_t errlen) {
    struct checker c = {schema, err, errlen, 0};
    if (err && errlen) err[0] = '\0';
    return validate(&c, schema, doc, "", 0);
}

/* ---- strict JSON text ---- */

/* A cursor over JSON text. */
struct text {
    const unsigned char *s; /* the bytes */
    size_t n;               /* their count */
    size_t i;               /* the next one */
};

static int peek(const struct text *t) {
    return t->i < t->n ? t->s[t->i] : -1;
}

static void skip_ws(struct text *t) {
    while (peek(t) == ' ' || peek(t) == '\t' || peek(t) == '\n' || peek(t) == '\r') t->i++;
}

static int text_value(struct text *t, int depth);

static int hex4(struct text *t, unsigned *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        int ch = peek(t);
        unsigned d = ch >= '0' && ch <= '9'   ? (unsigned)(ch - '0')
                     : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10)
                     : ch >= 'A' && ch <= 'F' ? (unsigned)(ch - 'A' + 10)
                                              : 16;
        if (d == 16) return -1;
        *v = *v * 16 + d;
        t->i++;
    }
    return 0;
}

/* After "\u": a non-surrogate, or a high surrogate and "\u" low surrogate. */
static int unicode_escape(struct text *t) {
    unsigned v, low;
    if (hex4(t, &v)) return -1;
    if (v >= 0xDC00 && v <= 0xDFFF) return -1;
    if (v < 0xD800 || v > 0xDBFF) return 0;
    if (peek(t) != '\\') return -1;
    t->i++;
    if (peek(t) != 'u') return -1;
    t->i++;
    return hex4(t, &low) || low < 0xDC00 || low > 0xDFFF ? -1 : 0;
}

/* One UTF-8 character of 2 to 4 bytes starting at lead byte b. */
static int utf8_char(struct text *t, int b) {
    int n = b >= 0xC2 && b <= 0xDF   ? 2
            : b >= 0xE0 && b <= 0xEF ? 3
            : b >= 0xF0 && b <= 0xF4 ? 4
                                     : 0;
    if (n == 0 || t->i + (size_t)n > t->n) return -1;
    unsigned cp = (unsigned)b & (0x7Fu >> n);
    for (int k = 1; k < n; k++) {
        unsigned char c = t->s[t->i + (size_t)k];
        if ((c & 0xC0) != 0x80) return -1;
        cp = cp << 6 | (c & 0x3Fu);
    }
    static const unsigned least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    t->i += (size_t)n;
    return 0;
}

static int text_string(struct text *t) {
    t->i++; /* the opening quote */
    for (;;) {
        int b = peek(t);
        if (b < 0x20) return -1; /* end of text, or a raw control character */
        if (b == '"') {
            t->i++;
            return 0;
        }
        if (b >= 0x80) {
            if (utf8_char(t, b)) return -1;
            continue;
        }
        t->i++;
        if (b != '\\') continue;
        b = peek(t);
        t->i++;
        if (b == 'u') {
            if (unicode_escape(t)) return -1;
        } else if (!b || !strchr("\"\\/bfnrt", b)) {
            return -1;
        }
    }
}

static int text_digits(struct text *t) {
    size_t start = t->i;
    while (peek(t) >= '0' && peek(t) <= '9') t->i++;
    return t->i > start ? 0 : -1;
}

static int text_number(struct text *t) {
    if (peek(t) == '-') t->i++;
    if (peek(t) == '0')
        t->i++;
    else if (text_digits(t))
        return -1;
    if (peek(t) == '.') {
        t->i++;
        if (text_digits(t)) return -1;
    }
    if (peek(t) == 'e' || peek(t) == 'E') {
        t->i++;
        if (peek(t) == '+' || peek(t) == '-') t->i++;
        if (text_digits(t)) return -1;
    }
    return 0;
}

/* The members or elements of an object or array (t at its opening). */
static int text_container(struct text *t, int depth) {
    int object = peek(t) == '{', close = object ? '}' : ']';
    t->i++;
    skip_ws(t);
    if (peek(t) == close) {
        t->i++;
        return 0;
    }
    for (;;) {
        if (object) {
            if (peek(t) != '"' || text_string(t)) return -1;
            skip_ws(t);
            if (peek(t) != ':') return -1;
            t->i++;
            skip_ws(t);
        }
        if (text_value(t, depth + 1)) return -1;
        skip_ws(t);
        if (peek(t) == close) {
            t->i++;
            return 0;
        }
        if (peek(t) != ',') return -1;
        t->i++;
        skip_ws(t);
    }
}

static int text_literal(struct text *t, const char *word) {
    size_t len = strlen(word);
    if (t->n - t->i < len || memcmp(t->s + t->i, word, len) != 0) return -1;
    t->i += len;
    return 0;
}

static int text_value(struct text *t, int depth) {
    int b = peek(t);
    if (depth > 10000) return -1;
    if (b == '{' || b == '[') return text_container(t, depth);
    if (b == '"') return text_string(t);
    if (b == '-' || (b >= '0' && b <= '9')) return text_number(t);
    if (b == 't') return text_literal(t, "true");
    if (b == 'f') return text_literal(t, "false");
    if (b == 'n') return text_literal(t, "null");
    return -1;
}

int json_text_check(const char *text, size_t n, char *err, size_t errlen) {
    struct text t = {(const unsigned char *)text, n, 0};
    skip_ws(&t);
    int rc = text_value(&t, 0);
    skip_ws(&t);
    if (rc == 0 && t.i == n) return 0;
    if (err && errlen) snprintf(err, errlen, "not JSON at byte %zu", t.i);
    return -1;
}
