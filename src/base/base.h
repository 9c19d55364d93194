/* base.h -- what every layer above may use and none owns: the clock, the
 * log, the build's version, UTF-8 decoding and error messages.
 *
 * src/base is the bottom of the layer order (docs/DESIGN.md): it includes
 * no other module, and a module that needs a monotonic time, a log line or a
 * formatted error takes it from here rather than from the runner. */
#ifndef LOCKSTEP_BASE_H
#define LOCKSTEP_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* ============================== clock (clock.c) ============================== */

/* Microseconds on CLOCK_MONOTONIC. */
uint64_t clock_now_us(void);

/* ============================ version (version.c) ============================ */

#define VERSION_BUILD_MAX 64 /* bytes of a build's name with its terminator */

/* The project version ("0.9.0"), the git commit built from ("0229c56",
 * "0229c56-dirty"; "" outside a checkout), and both as one name
 * ("0.9.0 (git 0229c56)"). Ranks and gateway must run the same build. */
const char *version_string(void);
const char *version_commit(void);
const char *version_build(void);

/* ============================== logs (log.c) ============================== */

/* One line per event on stderr (log.c), for the gateway and the runner:
 * `2026-12-02T05:12:00.123Z info gateway: message key=value ...` as text, or
 * `{"time":...,"level":...,"component":...,"message":...,"key":value}` as
 * JSON. Each line is one write(), so lines of concurrent threads never mix. */
enum log_level { LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };
enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON };

/* A named value an event carries besides its message (a request log's
 * status, token counts, times). */
struct log_field {
    const char *key;  /* a JSON member name */
    const char *text; /* the value as a string, or NULL for number */
    double number;    /* the value when text is NULL */
};

/* Chooses the format of later lines (text until called); "text" or "json"
 * for log_format_parse, which returns -1 for anything else. */
void log_set_format(enum log_format format);
int log_format_parse(const char *name, enum log_format *out);
void log_event(enum log_level level, const char *component, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
void log_event_fields(enum log_level level, const char *component, const char *message,
                      const struct log_field *fields, int n_fields);
/* Formats one line (without writing it) into out; its length, or -1 if it
 * does not fit. What log_event writes, exposed for tests. */
int log_format_line(char *out, size_t size, double unix_seconds, enum log_level level,
                    const char *component, const char *message, const struct log_field *fields,
                    int n_fields);

/* ============================== UTF-8 (utf8.c) ============================== */

/* The well-formed UTF-8 sequence at s (n >= 1 bytes available): its length,
 * 1 to 4; or, when it is not one (a stray byte, an overlong form, a
 * surrogate, past U+10FFFF, cut short by n or by a NUL), -k: its first k
 * bytes are the ill-formed part that one U+FFFD replaces (Unicode's
 * "maximal subpart" practice). Bytes are read in order and never past the
 * first one that does not fit, so a NUL-terminated string may pass n = 4. */
int utf8_sequence(const unsigned char *s, size_t n);
/* utf8_sequence that also gives the code point of a well-formed sequence. */
int utf8_decode(const unsigned char *s, size_t n, uint32_t *codepoint);
/* 1 if the n bytes are well-formed UTF-8 throughout (NUL bytes allowed). */
int utf8_valid(const char *s, size_t n);

/* ============================ errors (error.c) ============================ */

/* "WHERE: message" into err (errlen bytes, always terminated; nothing if
 * err is NULL or errlen is 0): where names the place (a file and line, a
 * frame, a rank), the message what was wrong there; a NULL where writes
 * the message alone. Returns -1, so that a module's failure helper
 * reports in one line. */
int error_vformat_at(char *err, size_t errlen, const char *where, const char *format, va_list args);

#endif
