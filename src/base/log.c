/* log.c -- one line per event on stderr, as text or JSON (base/base.h).
 *
 * The gateway, `lockstep serve` and the runner report what happens here
 * rather than with their own fprintf, so every line carries a UTC
 * timestamp, a level and the component that speaks, and a log collector can
 * read them all one way (--log-format json). A line is formatted in a
 * buffer and written with one write(): stderr's own buffering would let
 * the lines of concurrent threads interleave. */
#include "base/base.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 4096 /* longer messages are cut, never split over lines */

static atomic_int log_format_chosen = LOG_FORMAT_TEXT;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_format(enum log_format format) {
    atomic_store(&log_format_chosen, (int)format);
}

int log_format_parse(const char *name, enum log_format *out) {
    if (!strcmp(name, "text") || !strcmp(name, "json")) {
        *out = !strcmp(name, "json") ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT;
        return 0;
    }
    return -1;
}

/* Appends to out (used bytes in *at); sets *at past size when it does not fit. */
struct log_out {
    char *text;
    size_t size, at;
};

static void put(struct log_out *o, const char *s, size_t n) {
    if (o->at + n < o->size) memcpy(o->text + o->at, s, n);
    o->at += n;
}

static void put_text(struct log_out *o, const char *s) {
    put(o, s, strlen(s));
}

/* s as a JSON string's contents: quotes, backslashes and control bytes escaped. */
static void put_escaped(struct log_out *o, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char escape[8];
        if (c == '"' || c == '\\') {
            escape[0] = '\\';
            escape[1] = (char)c;
            put(o, escape, 2);
        } else if (c < 0x20) {
            snprintf(escape, sizeof(escape), "\\u%04x", c);
            put(o, escape, 6);
        } else {
            put(o, s, 1);
        }
    }
}

/* Text lines keep a message on one line: a newline in it is shown as \n. */
static void put_one_line(struct log_out *o, const char *s) {
    for (; *s; s++) put(o, *s == '\n' ? "\\n" : s, *s == '\n' ? 2 : 1);
}

static void put_number(struct log_out *o, double value) {
    char number[32];
    snprintf(number, sizeof(number), "%.10g", value);
    put_text(o, number);
}

static void put_time(struct log_out *o, double unix_seconds) {
    time_t seconds = (time_t)unix_seconds;
    int millis = (int)((unix_seconds - (double)seconds) * 1000.0);
    struct tm utc;
    char text[40];
    gmtime_r(&seconds, &utc);
    size_t n = strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
    snprintf(text + n, sizeof(text) - n, ".%03dZ", millis);
    put_text(o, text);
}

static void format_text(struct log_out *o, const char *component, const char *message,
                        const struct log_field *fields, int n_fields) {
    put_text(o, " ");
    put_text(o, component);
    put_text(o, ": ");
    put_one_line(o, message);
    for (int i = 0; i < n_fields; i++) {
        put_text(o, " ");
        put_text(o, fields[i].key);
        put_text(o, "=");
        if (fields[i].text) /* an empty value as "-", so key=value pairs stay readable */
            put_one_line(o, *fields[i].text ? fields[i].text : "-");
        else
            put_number(o, fields[i].number);
    }
}

static void format_json(struct log_out *o, const char *level, const char *component,
                        const char *message, const struct log_field *fields, int n_fields) {
    put_text(o, "\",\"level\":\"");
    put_text(o, level);
    put_text(o, "\",\"component\":\"");
    put_escaped(o, component);
    put_text(o, "\",\"message\":\"");
    put_escaped(o, message);
    put_text(o, "\"");
    for (int i = 0; i < n_fields; i++) {
        put_text(o, ",\"");
        put_escaped(o, fields[i].key);
        put_text(o, "\":");
        if (fields[i].text) {
            put_text(o, "\"");
            put_escaped(o, fields[i].text);
            put_text(o, "\"");
        } else {
            put_number(o, fields[i].number);
        }
    }
    put_text(o, "}");
}

static int format_line(char *out, size_t size, double unix_seconds, enum log_level level,
                       const char *component, const char *message, const struct log_field *fields,
                       int n_fields, enum log_format format) {
    struct log_out o = {out, size, 0};
    const char *name = level_names[level];
    if (format == LOG_FORMAT_JSON) {
        put_text(&o, "{\"time\":\"");
        put_time(&o, unix_seconds);
        format_json(&o, name, component, message, fields, n_fields);
    } else {
        put_time(&o, unix_seconds);
        put_text(&o, " ");
        put_text(&o, name);
        format_text(&o, component, message, fields, n_fields);
    }
    put_text(&o, "\n");
    if (o.at >= size) return -1;
    out[o.at] = '\0';
    return (int)o.at;
}

int log_format_line(char *out, size_t size, double unix_seconds, enum log_level level,
                    const char *component, const char *message, const struct log_field *fields,
                    int n_fields) {
    return format_line(out, size, unix_seconds, level, component, message, fields, n_fields,
                       (enum log_format)atomic_load(&log_format_chosen));
}

void log_event_fields(enum log_level level, const char *component, const char *message,
                      const struct log_field *fields, int n_fields) {
    char line[LOG_LINE_MAX];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double seconds = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
    int n =
        log_format_line(line, sizeof(line), seconds, level, component, message, fields, n_fields);
    if (n < 0) {       /* too long: the message is cut, the line stays well formed */
        char cut[512]; /* fits even with every byte escaped */
        snprintf(cut, sizeof(cut), "%s", message);
        n = log_format_line(line, sizeof(line), seconds, level, component, cut, NULL, 0);
    }
    if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) return; /* nowhere to report it */
}

void log_event(enum log_level level, const char *component, const char *format, ...) {
    char message[LOG_LINE_MAX / 2];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof(message), format, args);
    va_end(args);
    log_event_fields(level, component, message, NULL, 0);
}
