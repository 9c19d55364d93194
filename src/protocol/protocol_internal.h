/* protocol_internal.h -- what the files of the runner protocol codec share:
 * the failure report, the value checks both directions use, and the frame
 * writer and reader.
 *
 * protocol.c holds these and the codec of every message but ADD, and finds
 * frames in received bytes; protocol_add.c encodes and decodes ADD (a
 * request with its sampling, stops, biases, grammar and trigger) and frees
 * what a decoded request owns. Each function that can fail returns 0, or -1
 * with "runner protocol: <frame>: <detail>" in the report's buffer. */
#ifndef LOCKSTEP_RUNNER_PROTOCOL_INTERNAL_H
#define LOCKSTEP_RUNNER_PROTOCOL_INTERNAL_H

#include "protocol/protocol.h"

#include <stddef.h>
#include <stdint.h>

/* Room for a field name with an index, such as "stops[15].n_tokens". */
#define PROTOCOL_FIELD_NAME 48

/* Where check and read failures are reported. */
struct protocol_report {
    const char *context; /* frame type ("ADD") or "header" */
    char *err;           /* message buffer; may be NULL */
    size_t errlen;       /* its size in bytes */
};

/* Writes "runner protocol: <context>: <detail>" to the report's buffer; returns -1. */
__attribute__((format(printf, 2, 3))) int protocol_fail(const struct protocol_report *report,
                                                        const char *format, ...);

/* ---- value checks, shared by encoders and decoders ---- */

int protocol_check_range(const struct protocol_report *report, const char *field, long long value,
                         long long min, long long max);
int protocol_check_at_least(const struct protocol_report *report, const char *field, int value,
                            int min);
/* n token ids at tokens (the array called field), each >= 0. */
int protocol_check_tokens(const struct protocol_report *report, const char *field,
                          const int *tokens, int n);

/* ---- encoding ---- */

/* A frame being appended to a buffer. */
struct protocol_writer {
    struct runner_buffer *out; /* the frame goes at its end */
    size_t start;              /* out->length before the frame: where its header is */
    int failed;                /* an append ran out of memory */
};

/* Appends the header; its payload length is filled in by protocol_writer_end. */
void protocol_writer_begin(struct protocol_writer *writer, struct runner_buffer *out,
                           enum runner_message type);
void protocol_writer_put_u32(struct protocol_writer *writer, uint32_t value);
void protocol_writer_put_u64(struct protocol_writer *writer, uint64_t value);
/* Two's complement: the conversion to unsigned is defined as modulo 2^32. */
void protocol_writer_put_i32(struct protocol_writer *writer, int value);
void protocol_writer_put_f32(struct protocol_writer *writer, float value);
/* A u32 length and the bytes, without a terminator. A length that does not
 * fit the field also makes the frame too long, which protocol_writer_end
 * refuses. */
void protocol_writer_put_string(struct protocol_writer *writer, const char *text);
/* Completes the frame, or removes what was appended of it. */
int protocol_writer_end(struct protocol_writer *writer, const struct protocol_report *report);

/* ---- decoding ---- */

/* A payload being read front to back. */
struct protocol_reader {
    const uint8_t *at;             /* next unread byte */
    size_t left;                   /* bytes not read yet */
    struct protocol_report report; /* context is the frame type */
};

int protocol_reader_begin(struct protocol_reader *reader, const struct runner_frame *frame,
                          enum runner_message type, char *err, size_t errlen);
/* The next n bytes, which hold field. */
int protocol_reader_take(struct protocol_reader *reader, size_t n, const char *field,
                         const uint8_t **bytes);
int protocol_reader_u32(struct protocol_reader *reader, const char *field, uint32_t *value);
int protocol_reader_u64(struct protocol_reader *reader, const char *field, uint64_t *value);
/* Two's complement, spelled out: converting a u32 above INT_MAX to int is
 * implementation-defined in C. */
int protocol_reader_i32(struct protocol_reader *reader, const char *field, int *value);
int protocol_reader_f32(struct protocol_reader *reader, const char *field, float *value);
/* A u32 count in [min, max] of elements of element_size bytes that must all
 * fit in what is left, checked before the caller allocates for them. */
int protocol_reader_count(struct protocol_reader *reader, const char *field, uint32_t min,
                          uint32_t max, size_t element_size, uint32_t *count);
/* A count (named count_field) in [min, max] and that many i32 token ids
 * (named field) in a new array. */
int protocol_reader_tokens(struct protocol_reader *reader, const char *count_field,
                           const char *field, uint32_t min, uint32_t max, int **tokens,
                           int *n_tokens);
/* The payload must end after its last field. */
int protocol_reader_end(struct protocol_reader *reader, const char *last_field);

#endif
