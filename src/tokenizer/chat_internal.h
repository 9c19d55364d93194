/* chat_internal.h -- what chat.c, chat_json.c and chat_tools.c share
 * inside the tokenizer module: the growable prompt text, Python's
 * str.strip() on it, and JSON written as Python's json.dumps writes it.
 * Not part of the module's interface (tokenizer.h is). */
#ifndef LOCKSTEP_TOKENIZER_CHAT_INTERNAL_H
#define LOCKSTEP_TOKENIZER_CHAT_INTERNAL_H

#include <stddef.h>

#include "tokenizer/tokenizer.h"

/* The prompt being built: a growable NUL-terminated string. */
struct chat_text {
    char *data; /* (cap) */
    size_t len; /* bytes written, without the NUL */
    size_t cap; /* bytes allocated */
    int failed; /* 1 once an allocation failed; later appends do nothing */
};

/* Appends n bytes of s (sets t->failed when out of memory). */
void chat_append_bytes(struct chat_text *t, const char *s, size_t n);
/* The start of applying a template to n messages: the family's name, room
 * for each message's role, *out empty; -1 with err for an unknown family,
 * no messages or out of memory. */
int chat_start(enum tokenizer_chat_template family, int n, const char **name, int **roles,
               char **out, size_t *out_len, char *err, size_t errlen);
/* Appends a C string; NULL appends nothing. */
void chat_append(struct chat_text *t, const char *s);
/* Applies Python's str.strip() to the text written since offset from. */
void chat_strip_from(struct chat_text *t, size_t from);

/* JSON's whitespace (and the whitespace tool-call formats allow). */
static inline int chat_is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* How chat_json_write spaces JSON: as json.dumps(separators=(",", ":")),
 * json.dumps() (", " and ": ") or json.dumps(indent=4). */
enum chat_json_style { CHAT_JSON_COMPACT = 0, CHAT_JSON_INLINE = 1, CHAT_JSON_INDENT = 2 };

/* Writes the one JSON value in text[0..len) (whitespace around it
 * allowed) re-spaced in style, as Python's json.dumps(ensure_ascii=False)
 * writes what json.loads read from it, except that numbers keep their
 * spelling. Strings are re-escaped: \" \\ \b \f \n \r \t, other control
 * characters and lone surrogates as \u00XX, everything else as UTF-8.
 * t NULL only checks. Returns -1 (writing nothing) if the text is not
 * strict JSON or nests deeper than 512. */
int chat_json_write(struct chat_text *t, const char *text, size_t len, enum chat_json_style style);
/* Writes n bytes of s as a JSON string literal, escaped as above. */
void chat_json_string(struct chat_text *t, const char *s, size_t n);
/* The value of member key in the JSON object that starts at text[0] and
 * is valid JSON within text[0..len): its start, with its length in
 * *value_len; NULL if the object has none (the first of duplicate keys
 * counts, as with cJSON). */
const char *chat_json_member(const char *text, size_t len, const char *key, size_t *value_len);

#endif
