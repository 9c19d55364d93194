/* chat_scan.c -- tool calls as the model writes them: which calls a
 * generated text holds so far, each one's name once it is written and the
 * bytes of its arguments so far, for a stream that sends them as they
 * come (the gateway's tool_calls.c). The calls' grammar makes their JSON a
 * prefix of what tokenizer_chat_parse_tool_calls (chat_tools.c) reads, and
 * both give the arguments minified the same way (tokenizer_json_minify),
 * so the pieces a stream sends join to the parsed arguments. */
#include <string.h>

#include "tokenizer/chat_internal.h"
#include "tokenizer/tokenizer.h"

size_t tokenizer_json_minify(const char *text, size_t len, char *out) {
    size_t n = 0;
    int in_string = 0, escaped = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (!in_string && chat_is_space(ch)) continue;
        out[n++] = ch;
        if (escaped)
            escaped = 0;
        else if (in_string && ch == '\\')
            escaped = 1;
        else if (ch == '"')
            in_string = !in_string;
    }
    return n;
}

/* The state of a scan: where it is in the JSON of the calls. */
struct call_scan {
    int depth; /* objects and arrays open (0: between calls) */
    int in_string, escaped;
    int want_key;      /* at depth 1: the next string is a key */
    int in_key;        /* reading a key at depth 1 */
    size_t key_start;  /* its first byte */
    int value;         /* what the value after the current key is: 0 other, 1 name, 2 arguments */
    int value_started; /* its first byte was seen */
};

/* 1 if text[start, end) is the key the family writes the arguments under,
 * or the other one (tokenizer_chat_parse_tool_calls takes both). */
static int is_arguments_key(const char *text, size_t start, size_t end) {
    size_t n = end - start;
    return (n == 9 && !memcmp(text + start, "arguments", 9)) ||
           (n == 10 && !memcmp(text + start, "parameters", 10));
}

/* Byte p of a call's object at depth 1 or deeper, outside strings. */
static void scan_structure(struct call_scan *s, const char *text, size_t p,
                           struct tokenizer_call_progress *call) {
    char ch = text[p];
    if (s->value == 2 && !s->value_started && !chat_is_space(ch) && ch != ':') {
        s->value_started = 1;
        call->arguments_start = p;
    }
    if (ch == '{' || ch == '[') s->depth++;
    if (ch == '}' || ch == ']') s->depth--;
    if (s->value == 2 && s->value_started && s->depth <= 1 &&
        (ch == '}' || ch == ']' || ch == ',')) {
        call->arguments_end = ch == ',' || s->depth == 0 ? p : p + 1;
        call->arguments_done = 1;
        s->value = 0;
    }
    if (s->depth == 1 && ch == ',') s->want_key = 1;
    if (s->depth == 0) call->done = 1;
}

int tokenizer_chat_scan_tool_calls(enum tokenizer_chat_template family, const char *text,
                                   size_t len, size_t at, struct tokenizer_call_progress *calls,
                                   int max) {
    struct call_scan s = {0};
    int n = 0;
    /* the text between calls (a tag, "[", separators) holds no "{" */
    if (!tokenizer_chat_tool_format(family)) return 0;
    for (size_t p = at; p < len; p++) {
        char ch = text[p];
        struct tokenizer_call_progress *call = n > 0 ? &calls[n - 1] : NULL;
        if (s.depth == 0) { /* between calls: only an object starts one */
            if (ch != '{' || n == max) continue;
            calls[n++] = (struct tokenizer_call_progress){0};
            s = (struct call_scan){.depth = 1, .want_key = 1};
            continue;
        }
        if (s.in_string) {
            if (s.escaped) {
                s.escaped = 0;
            } else if (ch == '\\') {
                s.escaped = 1;
            } else if (ch == '"') {
                s.in_string = 0;
                if (s.in_key) {
                    s.in_key = 0;
                    s.value = (p - s.key_start == 4 && !memcmp(text + s.key_start, "name", 4)) ? 1
                              : is_arguments_key(text, s.key_start, p)                         ? 2
                                                                                               : 0;
                    s.value_started = 0;
                } else if (s.value == 1 && s.depth == 1) {
                    size_t start = call->name_start, length = p - start;
                    if (length >= sizeof(call->name)) length = sizeof(call->name) - 1;
                    memcpy(call->name, text + start, length);
                    call->name[length] = '\0';
                    s.value = 0;
                }
            }
            continue;
        }
        if (ch == '"') {
            s.in_string = 1;
            if (s.depth == 1 && s.want_key) {
                s.in_key = 1;
                s.want_key = 0;
                s.key_start = p + 1;
                continue;
            }
            if (s.depth == 1 && s.value == 1) call->name_start = p + 1;
        }
        scan_structure(&s, text, p, call);
    }
    /* the arguments written so far of a call still writing them */
    if (n > 0 && s.value == 2 && s.value_started && !calls[n - 1].arguments_done)
        calls[n - 1].arguments_end = len;
    return n;
}
