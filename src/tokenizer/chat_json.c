/* chat_json.c -- JSON in chat prompts, written the way the families'
 * reference templates write it: Hugging Face renders a tool or a call's
 * arguments with Python's json.dumps(ensure_ascii=False), so ", " and ": "
 * between items (or indent=4), non-ASCII characters as they are, and
 * strings re-escaped. The text is walked once to check it (strict JSON,
 * RFC 8259) and once to write it; numbers keep their spelling (Python
 * would rewrite 1E2 as 100.0, which no client is likely to send).
 *
 * Used by chat_tools.c for the tools, the calls' arguments and tool
 * results, and for the arguments of calls read from generated text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_internal.h"

#define JSON_MAX_DEPTH 512

/* Where a walk writes: nowhere (only checking) or to t, in a style. */
struct json_out {
    struct chat_text *t;        /* NULL when only checking */
    enum chat_json_style style; /* spacing between items */
};

static void put(const struct json_out *o, const char *s, size_t n) {
    if (o->t) chat_append_bytes(o->t, s, n);
}

static void put_str(const struct json_out *o, const char *s) {
    put(o, s, strlen(s));
}

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

static const char *skip_space(const char *p, const char *end) {
    while (p < end && chat_is_space(*p)) p++;
    return p;
}

/* Writes code point cp inside a string literal as json.dumps does. */
static void put_codepoint(struct chat_text *t, unsigned cp) {
    static const char escapes[] = "\"\"\\\\\bb\ff\nn\rr\tt";
    char buf[8];
    for (int i = 0; escapes[i]; i += 2) {
        if (cp == (unsigned char)escapes[i]) {
            buf[0] = '\\';
            buf[1] = escapes[i + 1];
            chat_append_bytes(t, buf, 2);
            return;
        }
    }
    if (cp < 0x20 || (cp >= 0xD800 && cp <= 0xDFFF)) {
        snprintf(buf, sizeof(buf), "\\u%04x", cp);
        chat_append(t, buf);
        return;
    }
    int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const unsigned char lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; i--) {
        buf[i] = (char)(0x80 | (cp & 0x3F));
        cp >>= 6;
    }
    buf[0] = (char)(lead[n] | cp);
    chat_append_bytes(t, buf, (size_t)n);
}

/* Writes s[0..n) (raw bytes, none of them a backslash escape): runs of
 * plain bytes at once, quotes, backslashes and control bytes escaped. */
static void put_raw(struct chat_text *t, const char *s, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        chat_append_bytes(t, s + run, i - run);
        put_codepoint(t, c);
        run = i + 1;
    }
    chat_append_bytes(t, s + run, n - run);
}

void chat_json_string(struct chat_text *t, const char *s, size_t n) {
    chat_append(t, "\"");
    put_raw(t, s, n);
    chat_append(t, "\"");
}

static int hex4(const char *p, const char *end, unsigned *value) {
    *value = 0;
    if (end - p < 4) return -1;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int digit = is_digit(c)              ? c - '0'
                    : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                             : -1;
        if (digit < 0) return -1;
        *value = *value * 16 + (unsigned)digit;
    }
    return 0;
}

/* Reads the escape after a backslash at p into *cp (a surrogate pair
 * into one code point); returns the byte after it, NULL if invalid. */
static const char *read_escape(const char *p, const char *end, unsigned *cp) {
    static const char simple[] = "\"\"\\\\//b\bf\fn\nr\rt\t";
    if (p >= end) return NULL;
    for (int i = 0; simple[i]; i += 2) {
        if (*p == simple[i]) {
            *cp = (unsigned char)simple[i + 1];
            return p + 1;
        }
    }
    if (*p != 'u' || hex4(p + 1, end, cp) != 0) return NULL;
    p += 5;
    unsigned low;
    if (*cp >= 0xD800 && *cp <= 0xDBFF && end - p >= 6 && p[0] == '\\' && p[1] == 'u' &&
        hex4(p + 2, end, &low) == 0 && low >= 0xDC00 && low <= 0xDFFF) {
        *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
        p += 6;
    }
    return p;
}

/* The string literal at p (its opening quote); returns the byte after
 * its closing quote, or NULL if it is not a valid literal. */
static const char *walk_string(const struct json_out *o, const char *p, const char *end) {
    if (p >= end || *p != '"') return NULL;
    put_str(o, "\"");
    for (p++; p < end && *p != '"';) {
        const char *run = p;
        while (p < end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) p++;
        put(o, run, (size_t)(p - run));
        if (p >= end || *p == '"') break;
        if (*p != '\\') return NULL; /* a raw control character */
        unsigned cp;
        if (!(p = read_escape(p + 1, end, &cp))) return NULL;
        if (o->t) put_codepoint(o->t, cp);
    }
    if (p >= end) return NULL;
    put_str(o, "\"");
    return p + 1;
}

static const char *digits(const char *p, const char *end) {
    if (p >= end || !is_digit(*p)) return NULL;
    while (p < end && is_digit(*p)) p++;
    return p;
}

/* A number, true, false or null at p: the byte after it, or NULL. */
static const char *literal_end(const char *p, const char *end) {
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(end - p) >= n && memcmp(p, words[i], n) == 0) return p + n;
    }
    if (p < end && *p == '-') p++;
    if (p < end && *p == '0')
        p++;
    else if (!(p = digits(p, end)))
        return NULL;
    if (p < end && *p == '.' && !(p = digits(p + 1, end))) return NULL;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        p = digits(p, end);
    }
    return p;
}

static void put_newline(const struct json_out *o, int depth) {
    if (o->style != CHAT_JSON_INDENT) return;
    put_str(o, "\n");
    for (int i = 0; i < depth; i++) put_str(o, "    ");
}

static const char *walk_value(const struct json_out *o, const char *p, const char *end, int depth);

/* One member of an object ("key": value) or item of an array. */
static const char *walk_item(const struct json_out *o, const char *p, const char *end, int object,
                             int depth) {
    if (object) {
        p = walk_string(o, p, end);
        p = p ? skip_space(p, end) : NULL;
        if (!p || p >= end || *p != ':') return NULL;
        put_str(o, o->style == CHAT_JSON_COMPACT ? ":" : ": ");
        p++;
    }
    return walk_value(o, p, end, depth);
}

/* The object or array at p (its opening bracket). */
static const char *walk_container(const struct json_out *o, const char *p, const char *end,
                                  int depth) {
    int object = *p == '{';
    const char close = object ? '}' : ']';
    if (depth >= JSON_MAX_DEPTH) return NULL;
    put(o, p, 1);
    p = skip_space(p + 1, end);
    if (p < end && *p == close) {
        put(o, &close, 1);
        return p + 1;
    }
    for (;;) {
        put_newline(o, depth + 1);
        p = walk_item(o, p, end, object, depth + 1);
        p = p ? skip_space(p, end) : NULL;
        if (!p || p >= end) return NULL;
        if (*p == close) break;
        if (*p != ',') return NULL;
        put_str(o, o->style == CHAT_JSON_INLINE ? ", " : ",");
        p = skip_space(p + 1, end);
    }
    put_newline(o, depth);
    put(o, &close, 1);
    return p + 1;
}

static const char *walk_value(const struct json_out *o, const char *p, const char *end, int depth) {
    p = skip_space(p, end);
    if (p >= end) return NULL;
    if (*p == '"') return walk_string(o, p, end);
    if (*p == '{' || *p == '[') return walk_container(o, p, end, depth);
    const char *after = literal_end(p, end);
    if (after) put(o, p, (size_t)(after - p));
    return after;
}

int chat_json_write(struct chat_text *t, const char *text, size_t len, enum chat_json_style style) {
    struct json_out o = {NULL, style};
    const char *end = text + len;
    const char *after = walk_value(&o, text, end, 0);
    if (!after || skip_space(after, end) != end) return -1;
    if (!t) return 0;
    o.t = t;
    walk_value(&o, text, end, 0);
    return 0;
}

/* 1 if the string literal at p, decoded, is key; *after receives the
 * byte after it (NULL if the literal is invalid). */
static int key_is(const char *p, const char *end, const char *key, const char **after) {
    struct chat_text name = {NULL, 0, 0, 0};
    struct json_out o = {&name, CHAT_JSON_COMPACT};
    *after = walk_string(&o, p, end);
    size_t n = strlen(key);
    int same = *after && !name.failed && name.len == n + 2 && memcmp(name.data + 1, key, n) == 0;
    free(name.data);
    return same;
}

const char *chat_json_member(const char *text, size_t len, const char *key, size_t *value_len) {
    const struct json_out check = {NULL, CHAT_JSON_COMPACT};
    const char *end = text + len, *p = text;
    if (p >= end || *p != '{') return NULL;
    for (p = skip_space(p + 1, end); p < end && *p == '"';) {
        const char *after, *value;
        int same = key_is(p, end, key, &after);
        p = after ? skip_space(after, end) : NULL;
        if (!p || p >= end || *p != ':') return NULL;
        value = skip_space(p + 1, end);
        p = walk_value(&check, value, end, 1);
        if (same && p) {
            *value_len = (size_t)(p - value);
            return value;
        }
        p = p ? skip_space(p, end) : NULL;
        if (!p || p >= end || *p != ',') return NULL;
        p = skip_space(p + 1, end);
    }
    return NULL;
}
