/* protocol.c -- the runner protocol codec: encodes the frames the gateway and
 * the leader exchange, finds whole frames in received bytes and decodes them
 * (frame layout: protocol/protocol.h, "protocol frames"). Every integer is written and
 * read byte by byte, little-endian whatever the host; floats travel as their
 * IEEE-754 bits.
 *
 * Encoders and decoders share one set of value checks (protocol_check_*), so
 * an encoder refuses exactly what a decoder refuses and a peer never gets a
 * frame it would reject. Decoders first check the structure: each count
 * against its maximum and against the bytes left before anything is
 * allocated, and that the payload is consumed exactly. Every message names
 * the frame and the field: "runner protocol: ADD: top_p 1.5 out of range [0, 1]".
 *
 * The ADD message (a request) is protocol_add.c's; protocol_internal.h is
 * what the two share. */
#include "protocol_internal.h"
#include "protocol/protocol.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(int) == 4, "token ids and counts travel as 32-bit integers");
_Static_assert(sizeof(float) == 4, "floats travel as IEEE-754 binary32");

static const char *protocol_message_name(unsigned type) {
    static const char *const names[] = {
        [RUNNER_MSG_HELLO] = "HELLO",       [RUNNER_MSG_ADD] = "ADD",
        [RUNNER_MSG_CANCEL] = "CANCEL",     [RUNNER_MSG_TOKEN] = "TOKEN",
        [RUNNER_MSG_FINISHED] = "FINISHED", [RUNNER_MSG_HEARTBEAT] = "HEARTBEAT",
        [RUNNER_MSG_ERROR] = "ERROR",       [RUNNER_MSG_FAULT] = "FAULT",
        [RUNNER_MSG_AUTH] = "AUTH",         [RUNNER_MSG_EMBEDDING] = "EMBEDDING",
    };
    if (type >= sizeof(names) / sizeof(names[0]) || names[type] == NULL) return "unknown";
    return names[type];
}

const char *runner_finish_reason_name(enum runner_finish_reason reason) {
    switch (reason) {
    case RUNNER_FINISH_EOS:
        return "eos";
    case RUNNER_FINISH_LENGTH:
        return "length";
    case RUNNER_FINISH_STOP:
        return "stop";
    case RUNNER_FINISH_CANCELLED:
        return "cancelled";
    case RUNNER_FINISH_ERROR:
        return "error";
    }
    return "unknown";
}

int protocol_fail(const struct protocol_report *report, const char *format, ...) {
    char where[160];
    snprintf(where, sizeof(where), "runner protocol: %s", report->context);
    va_list args;
    va_start(args, format);
    error_vformat_at(report->err, report->errlen, where, format, args);
    va_end(args);
    return -1;
}

static uint32_t protocol_float_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof(bits));
    return bits;
}

static float protocol_bits_float(uint32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof(value));
    return value;
}

static uint32_t protocol_load_u32(const uint8_t *bytes) {
    return (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 |
           (uint32_t)bytes[3] << 24;
}

static void protocol_store_u32(uint8_t *bytes, uint32_t value) {
    bytes[0] = (uint8_t)value;
    bytes[1] = (uint8_t)(value >> 8);
    bytes[2] = (uint8_t)(value >> 16);
    bytes[3] = (uint8_t)(value >> 24);
}

/* ---- value checks, shared by encoders and decoders ---- */

int protocol_check_range(const struct protocol_report *report, const char *field, long long value,
                         long long min, long long max) {
    if (value >= min && value <= max) return 0;
    if (max == INT_MAX && value < min)
        return protocol_fail(report, "%s %lld must be >= %lld", field, value, min);
    return protocol_fail(report, "%s %lld out of range [%lld, %lld]", field, value, min, max);
}

int protocol_check_at_least(const struct protocol_report *report, const char *field, int value,
                            int min) {
    return protocol_check_range(report, field, value, min, INT_MAX);
}

static int protocol_check_finite(const struct protocol_report *report, const char *field,
                                 float value) {
    if (isfinite(value)) return 0;
    return protocol_fail(report, "%s %g is not finite", field, (double)value);
}

int protocol_check_tokens(const struct protocol_report *report, const char *field,
                          const int *tokens, int n) {
    if (n > 0 && tokens == NULL)
        return protocol_fail(report, "%s is NULL with %d tokens", field, n);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0)
            return protocol_fail(report, "%s[%d] %d must be >= 0", field, i, tokens[i]);
    return 0;
}

/* A string field the encoder sends from a fixed array must end inside it. */
static int protocol_check_terminated(const struct protocol_report *report, const char *field,
                                     const char *text, size_t size) {
    if (memchr(text, '\0', size) != NULL) return 0;
    return protocol_fail(report, "%s is not NUL-terminated within its %zu bytes", field, size);
}

static int protocol_check_hello(const struct protocol_report *report,
                                const struct runner_hello *hello) {
    return protocol_check_at_least(report, "vocab_size", hello->vocab_size, 1) ||
                   protocol_check_at_least(report, "context_length", hello->context_length, 1) ||
                   protocol_check_at_least(report, "max_sequences", hello->max_sequences, 1) ||
                   protocol_check_at_least(report, "step_tokens", hello->step_tokens, 1) ||
                   protocol_check_at_least(report, "kv_block_size", hello->kv_block_size, 1) ||
                   protocol_check_at_least(report, "kv_blocks_total", hello->kv_blocks_total, 1) ||
                   protocol_check_at_least(report, "tensor_parallel", hello->tensor_parallel, 1)
               ? -1
               : 0;
}

static int protocol_check_token(const struct protocol_report *report,
                                const struct runner_token *token) {
    if (protocol_check_at_least(report, "token", token->token, 0) ||
        protocol_check_finite(report, "logprob", token->logprob) ||
        protocol_check_range(report, "n_top", token->n_top, 0, RUNNER_TOP_LOGPROBS_MAX))
        return -1;
    for (int i = 0; i < token->n_top; i++) {
        char field[PROTOCOL_FIELD_NAME];
        snprintf(field, sizeof(field), "top[%d].token", i);
        if (protocol_check_at_least(report, field, token->top[i].token, 0)) return -1;
        snprintf(field, sizeof(field), "top[%d].logprob", i);
        if (protocol_check_finite(report, field, token->top[i].logprob)) return -1;
    }
    return 0;
}

static int protocol_check_finished(const struct protocol_report *report,
                                   const struct runner_finished *finished) {
    if (protocol_check_range(report, "reason", (long long)finished->reason, RUNNER_FINISH_EOS,
                             RUNNER_FINISH_ERROR) ||
        protocol_check_at_least(report, "n_prompt", finished->n_prompt, 0) ||
        protocol_check_at_least(report, "n_generated", finished->n_generated, 0) ||
        protocol_check_range(report, "n_cached", finished->n_cached, 0, finished->n_prompt) ||
        protocol_check_range(report, "category", (long long)finished->category,
                             RUNNER_ERROR_INTERNAL, RUNNER_ERROR_OUT_OF_MEMORY))
        return -1;
    if (finished->reason != RUNNER_FINISH_ERROR && finished->category != RUNNER_ERROR_INTERNAL)
        return protocol_fail(report, "category %d on a finish that is not an error",
                             (int)finished->category);
    return 0;
}

static int protocol_check_heartbeat(const struct protocol_report *report,
                                    const struct runner_heartbeat *beat) {
    if (protocol_check_at_least(report, "n_tokens", beat->n_tokens, 0) ||
        protocol_check_at_least(report, "n_decode", beat->n_decode, 0) ||
        protocol_check_at_least(report, "n_sequences", beat->n_sequences, 0) ||
        protocol_check_at_least(report, "n_running", beat->n_running, 0) ||
        protocol_check_at_least(report, "n_waiting", beat->n_waiting, 0) ||
        protocol_check_at_least(report, "kv_blocks_used", beat->kv_blocks_used, 0) ||
        protocol_check_at_least(report, "kv_blocks_total", beat->kv_blocks_total, 0) ||
        protocol_check_range(report, "kv_blocks_cached", beat->kv_blocks_cached, 0,
                             beat->kv_blocks_total))
        return -1;
    if (beat->n_decode > beat->n_tokens)
        return protocol_fail(report, "n_decode %d exceeds n_tokens %d", beat->n_decode,
                             beat->n_tokens);
    /* Every sequence in a batch contributes at least one token. */
    if (beat->n_sequences > beat->n_tokens)
        return protocol_fail(report, "n_sequences %d exceeds n_tokens %d", beat->n_sequences,
                             beat->n_tokens);
    if (beat->kv_blocks_used > beat->kv_blocks_total)
        return protocol_fail(report, "kv_blocks_used %d exceeds kv_blocks_total %d",
                             beat->kv_blocks_used, beat->kv_blocks_total);
    if (beat->end_us < beat->start_us)
        return protocol_fail(report, "end_us %" PRIu64 " is before start_us %" PRIu64, beat->end_us,
                             beat->start_us);
    if (!(isfinite(beat->comm_ms) && beat->comm_ms >= 0.0f))
        return protocol_fail(report, "comm_ms %g must be finite and >= 0", (double)beat->comm_ms);
    return 0;
}

/* ---- encoding ---- */

static void protocol_writer_put(struct protocol_writer *writer, const void *bytes, size_t n) {
    if (!writer->failed && runner_buffer_append(writer->out, bytes, n) != 0) writer->failed = 1;
}

void protocol_writer_put_u32(struct protocol_writer *writer, uint32_t value) {
    uint8_t bytes[4];
    protocol_store_u32(bytes, value);
    protocol_writer_put(writer, bytes, sizeof(bytes));
}

void protocol_writer_put_u64(struct protocol_writer *writer, uint64_t value) {
    protocol_writer_put_u32(writer, (uint32_t)value);
    protocol_writer_put_u32(writer, (uint32_t)(value >> 32));
}

void protocol_writer_put_i32(struct protocol_writer *writer, int value) {
    protocol_writer_put_u32(writer, (uint32_t)value);
}

void protocol_writer_put_f32(struct protocol_writer *writer, float value) {
    protocol_writer_put_u32(writer, protocol_float_bits(value));
}

void protocol_writer_put_string(struct protocol_writer *writer, const char *text) {
    size_t n = strlen(text);
    protocol_writer_put_u32(writer, (uint32_t)n);
    protocol_writer_put(writer, text, n);
}

void protocol_writer_begin(struct protocol_writer *writer, struct runner_buffer *out,
                           enum runner_message type) {
    const uint8_t header[RUNNER_FRAME_HEADER] = {0, 0, 0, 0, RUNNER_PROTOCOL_VERSION, (uint8_t)type,
                                                 0, 0};
    writer->out = out;
    writer->start = out->length;
    writer->failed = 0;
    protocol_writer_put(writer, header, sizeof(header));
}

int protocol_writer_end(struct protocol_writer *writer, const struct protocol_report *report) {
    struct runner_buffer *out = writer->out;
    if (writer->failed) {
        out->length = writer->start;
        return protocol_fail(report, "out of memory");
    }
    size_t payload = out->length - writer->start - RUNNER_FRAME_HEADER;
    if (payload > RUNNER_FRAME_MAX) {
        out->length = writer->start;
        return protocol_fail(report, "payload of %zu bytes exceeds the frame limit of %u bytes",
                             payload, RUNNER_FRAME_MAX);
    }
    protocol_store_u32(out->data + writer->start, (uint32_t)payload);
    return 0;
}

int runner_encode_hello(struct runner_buffer *out, const struct runner_hello *hello, char *err,
                        size_t errlen) {
    const struct protocol_report report = {"HELLO", err, errlen};
    if (protocol_check_hello(&report, hello) ||
        protocol_check_terminated(&report, "build", hello->build, sizeof(hello->build)) ||
        protocol_check_terminated(&report, "model", hello->model, sizeof(hello->model)))
        return -1;
    struct protocol_writer writer;
    protocol_writer_begin(&writer, out, RUNNER_MSG_HELLO);
    protocol_writer_put_string(&writer, hello->build);
    protocol_writer_put_i32(&writer, hello->vocab_size);
    protocol_writer_put_i32(&writer, hello->context_length);
    protocol_writer_put_i32(&writer, hello->max_sequences);
    protocol_writer_put_i32(&writer, hello->step_tokens);
    protocol_writer_put_i32(&writer, hello->kv_block_size);
    protocol_writer_put_i32(&writer, hello->kv_blocks_total);
    protocol_writer_put_i32(&writer, hello->tensor_parallel);
    protocol_writer_put_string(&writer, hello->model);
    protocol_writer_put_u32(&writer, hello->has_challenge ? RUNNER_AUTH_BYTES : 0);
    if (hello->has_challenge) protocol_writer_put(&writer, hello->challenge, RUNNER_AUTH_BYTES);
    return protocol_writer_end(&writer, &report);
}

int runner_encode_auth(struct runner_buffer *out, const struct runner_auth *auth, char *err,
                       size_t errlen) {
    const struct protocol_report report = {"AUTH", err, errlen};
    struct protocol_writer writer;
    protocol_writer_begin(&writer, out, RUNNER_MSG_AUTH);
    protocol_writer_put(&writer, auth->nonce, RUNNER_AUTH_BYTES);
    protocol_writer_put(&writer, auth->mac, RUNNER_AUTH_BYTES);
    return protocol_writer_end(&writer, &report);
}

int runner_encode_cancel(struct runner_buffer *out, uint64_t id, char *err, size_t errlen) {
    const struct protocol_report report = {"CANCEL", err, errlen};
    struct protocol_writer writer;
    protocol_writer_begin(&writer, out, RUNNER_MSG_CANCEL);
    protocol_writer_put_u64(&writer, id);
    return protocol_writer_end(&writer, &report);
}

/* The ranges of a fault's fields, for both directions. */
static int protocol_check_fault(const struct protocol_report *report,
                                const struct runner_fault *fault) {
    if (protocol_check_range(report, "kind", (int)fault->kind, RUNNER_FAULT_STALL,
                             RUNNER_FAULT_CLOSE) ||
        protocol_check_range(report, "rank", fault->rank, 0, RUNNER_RANKS_MAX - 1))
        return -1;
    if (fault->kind != RUNNER_FAULT_DELAY) return 0;
    return protocol_check_range(report, "delay_ms", fault->delay_ms, 1, 60000) ||
                   protocol_check_range(report, "steps", fault->steps, 1, 1000000)
               ? -1
               : 0;
}

int runner_encode_fault(struct runner_buffer *out, const struct runner_fault *fault, char *err,
                        size_t errlen) {
    const struct protocol_report report = {"FAULT", err, errlen};
    struct protocol_writer writer;
    if (protocol_check_fault(&report, fault)) return -1;
    protocol_writer_begin(&writer, out, RUNNER_MSG_FAULT);
    protocol_writer_put_u32(&writer, (uint32_t)fault->kind);
    protocol_writer_put_i32(&writer, fault->rank);
    protocol_writer_put_i32(&writer, fault->delay_ms);
    protocol_writer_put_i32(&writer, fault->steps);
    return protocol_writer_end(&writer, &report);
}

int runner_encode_token(struct runner_buffer *out, const struct runner_token *token, char *err,
                        size_t errlen) {
    const struct protocol_report report = {"TOKEN", err, errlen};
    if (protocol_check_token(&report, token)) return -1;
    struct protocol_writer writer;
    protocol_writer_begin(&writer, out, RUNNER_MSG_TOKEN);
    protocol_writer_put_u64(&writer, token->id);
    protocol_writer_put_i32(&writer, token->token);
    protocol_writer_put_f32(&writer, token->logprob);
    protocol_writer_put_u32(&writer, (uint32_t)token->n_top);
    for (int i = 0; i < token->n_top; i++) {
        protocol_writer_put_i32(&writer, token->top[i].token);
        protocol_writer_put_f32(&writer, token->top[i].logprob);
    }
    return protocol_writer_end(&writer, &report);
}

int runner_encode_finished(struct runner_buffer *out, const struct runner_finished *finished,
                           char *err, size_t errlen) {
    const struct protocol_report report = {"FINISHED", err, errlen};
    if (protocol_check_finished(&report, finished) ||
        protocol_check_terminated(&report, "message", finished->message, sizeof(finished->message)))
        return -1;
    struct protocol_writer writer;
    protocol_writer_begin(&writer, out, RUNNER_MSG_FINISHED);
    protocol_writer_put_u64(&writer, finished->id);
    protocol_writer_put_u32(&writer, (uint32_t)finished->reason);
    protocol_writer_put_i32(&writer, finished->n_prompt);
    protocol_writer_put_i32(&writer, finished->n_generated);
    protocol_writer_put_i32(&writer, finished->n_cached);
    protocol_writer_put_u32(&writer, (uint32_t)finished->category);
    protocol_writer_put_string(&writer, finished->message);
    return protocol_writer_end(&writer, &report);
}

int runner_encode_heartbeat(struct runner_buffer *out, const struct runner_heartbeat *heartbeat,
                            char *err, size_t errlen) {
    const struct protocol_report report = {"HEARTBEAT", err, errlen};
    if (protocol_check_heartbeat(&report, heartbeat)) return -1;
    struct protocol_writer writer;
    protocol_writer_begin(&writer, out, RUNNER_MSG_HEARTBEAT);
    protocol_writer_put_u64(&writer, heartbeat->step);
    protocol_writer_put_u64(&writer, heartbeat->start_us);
    protocol_writer_put_u64(&writer, heartbeat->end_us);
    protocol_writer_put_i32(&writer, heartbeat->n_tokens);
    protocol_writer_put_i32(&writer, heartbeat->n_decode);
    protocol_writer_put_i32(&writer, heartbeat->n_sequences);
    protocol_writer_put_i32(&writer, heartbeat->n_running);
    protocol_writer_put_i32(&writer, heartbeat->n_waiting);
    protocol_writer_put_i32(&writer, heartbeat->kv_blocks_used);
    protocol_writer_put_i32(&writer, heartbeat->kv_blocks_total);
    protocol_writer_put_i32(&writer, heartbeat->kv_blocks_cached);
    protocol_writer_put_f32(&writer, heartbeat->comm_ms);
    return protocol_writer_end(&writer, &report);
}

int runner_encode_error(struct runner_buffer *out, enum runner_error_category category,
                        const char *message, char *err, size_t errlen) {
    const struct protocol_report report = {"ERROR", err, errlen};
    if (message == NULL) return protocol_fail(&report, "message is NULL");
    if (protocol_check_range(&report, "category", (long long)category, RUNNER_ERROR_INTERNAL,
                             RUNNER_ERROR_OUT_OF_MEMORY))
        return -1;
    struct protocol_writer writer;
    protocol_writer_begin(&writer, out, RUNNER_MSG_ERROR);
    protocol_writer_put_u32(&writer, (uint32_t)category);
    protocol_writer_put_string(&writer, message);
    return protocol_writer_end(&writer, &report);
}

/* ---- frames ---- */

int runner_frame_next(const uint8_t *data, size_t length, size_t max_payload,
                      struct runner_frame *frame, char *err, size_t errlen) {
    const struct protocol_report report = {"header", err, errlen};
    if (length < RUNNER_FRAME_HEADER) return 0;
    uint32_t payload = protocol_load_u32(data);
    unsigned version = data[4], type = data[5];
    unsigned reserved = (unsigned)data[6] | (unsigned)data[7] << 8;
    if (version != RUNNER_PROTOCOL_VERSION && type != RUNNER_MSG_HELLO)
        return protocol_fail(&report, "version %u, expected %d", version, RUNNER_PROTOCOL_VERSION);
    if (type < RUNNER_MSG_HELLO || type > RUNNER_MSG_EMBEDDING)
        return protocol_fail(&report, "type %u is not a known message (%d..%d)", type,
                             RUNNER_MSG_HELLO, RUNNER_MSG_EMBEDDING);
    if (reserved != 0) return protocol_fail(&report, "reserved field 0x%04x is not zero", reserved);
    if (payload > max_payload)
        return protocol_fail(&report, "%s payload of %" PRIu32 " bytes exceeds the limit of %zu",
                             protocol_message_name(type), payload, max_payload);
    if (length - RUNNER_FRAME_HEADER < payload) return 0;
    frame->type = (enum runner_message)type;
    frame->payload = data + RUNNER_FRAME_HEADER;
    frame->payload_length = payload;
    frame->frame_length = RUNNER_FRAME_HEADER + (size_t)payload;
    frame->version = version;
    return 1;
}

/* ---- decoding ---- */

int protocol_reader_begin(struct protocol_reader *reader, const struct runner_frame *frame,
                          enum runner_message type, char *err, size_t errlen) {
    reader->at = frame->payload;
    reader->left = frame->payload_length;
    reader->report = (struct protocol_report){protocol_message_name(type), err, errlen};
    if (frame->type == type) return 0;
    return protocol_fail(&reader->report, "cannot decode a %s frame",
                         protocol_message_name(frame->type));
}

int protocol_reader_take(struct protocol_reader *reader, size_t n, const char *field,
                         const uint8_t **bytes) {
    if (n > reader->left) {
        protocol_fail(&reader->report, "payload ends inside %s (%zu bytes needed, %zu left)", field,
                      n, reader->left);
        return -1; /* spelled out: the analyzers do not see that protocol_fail returns -1 */
    }
    *bytes = reader->at;
    reader->at += n;
    reader->left -= n;
    return 0;
}

int protocol_reader_u32(struct protocol_reader *reader, const char *field, uint32_t *value) {
    const uint8_t *bytes = NULL;
    if (protocol_reader_take(reader, 4, field, &bytes)) return -1;
    *value = protocol_load_u32(bytes);
    return 0;
}

int protocol_reader_u64(struct protocol_reader *reader, const char *field, uint64_t *value) {
    const uint8_t *bytes = NULL;
    if (protocol_reader_take(reader, 8, field, &bytes)) return -1;
    *value = (uint64_t)protocol_load_u32(bytes) | (uint64_t)protocol_load_u32(bytes + 4) << 32;
    return 0;
}

int protocol_reader_i32(struct protocol_reader *reader, const char *field, int *value) {
    uint32_t bits;
    if (protocol_reader_u32(reader, field, &bits)) return -1;
    *value = bits <= INT_MAX ? (int)bits : (int)(bits - 0x80000000u) - INT_MAX - 1;
    return 0;
}

int protocol_reader_f32(struct protocol_reader *reader, const char *field, float *value) {
    uint32_t bits;
    if (protocol_reader_u32(reader, field, &bits)) return -1;
    *value = protocol_bits_float(bits);
    return 0;
}

int protocol_reader_count(struct protocol_reader *reader, const char *field, uint32_t min,
                          uint32_t max, size_t element_size, uint32_t *count) {
    if (protocol_reader_u32(reader, field, count) ||
        protocol_check_range(&reader->report, field, *count, min, max))
        return -1;
    if ((uint64_t)*count * element_size > reader->left)
        return protocol_fail(&reader->report, "%s %" PRIu32 " needs %" PRIu64 " bytes, %zu left",
                             field, *count, (uint64_t)*count * element_size, reader->left);
    return 0;
}

int protocol_reader_tokens(struct protocol_reader *reader, const char *count_field,
                           const char *field, uint32_t min, uint32_t max, int **tokens,
                           int *n_tokens) {
    uint32_t count;
    if (protocol_reader_count(reader, count_field, min, max, 4, &count)) return -1;
    if (count == 0) return 0;
    *tokens = malloc((size_t)count * sizeof(**tokens));
    if (*tokens == NULL)
        return protocol_fail(&reader->report, "out of memory for %" PRIu32 " tokens of %s", count,
                             field);
    *n_tokens = (int)count;
    for (int i = 0; i < *n_tokens; i++)
        if (protocol_reader_i32(reader, field, &(*tokens)[i])) return -1;
    return 0;
}

/* A u32 length and that many bytes, none of them NUL, into text (size bytes).
 * A longer string is cut to fit, before a whole UTF-8 character, and text is
 * always NUL-terminated (when size > 0). */
static int protocol_reader_string(struct protocol_reader *reader, const char *field, char *text,
                                  size_t size) {
    char length_field[PROTOCOL_FIELD_NAME];
    snprintf(length_field, sizeof(length_field), "%s length", field);
    uint32_t length;
    const uint8_t *bytes = NULL;
    if (protocol_reader_u32(reader, length_field, &length) ||
        protocol_reader_take(reader, length, field, &bytes))
        return -1;
    const uint8_t *nul = memchr(bytes, '\0', length);
    if (nul != NULL)
        return protocol_fail(&reader->report, "%s has a NUL byte at offset %td", field,
                             nul - bytes);
    if (size == 0) return 0;
    size_t keep = length;
    if (keep > size - 1) {
        keep = size - 1;
        /* bytes[keep] is the first byte left out; if it continues a character,
         * leave out that character's first bytes too (at most 3 of them). */
        for (int back = 0; back < 3 && keep > 0 && (bytes[keep] & 0xC0) == 0x80; back++) keep--;
    }
    memcpy(text, bytes, keep);
    text[keep] = '\0';
    return 0;
}

/* A u32 length of 0 (*present 0), or RUNNER_AUTH_BYTES (when optional) and
 * that many bytes into bytes (*present 1). */
static int protocol_reader_bytes(struct protocol_reader *reader, const char *field, int optional,
                                 uint8_t *bytes, int *present) {
    char length_field[PROTOCOL_FIELD_NAME];
    snprintf(length_field, sizeof(length_field), "%s length", field);
    uint32_t length;
    const uint8_t *at = NULL;
    if (protocol_reader_u32(reader, length_field, &length)) return -1;
    *present = length != 0;
    if (length == 0 && optional) return 0;
    if (length != RUNNER_AUTH_BYTES)
        return protocol_fail(&reader->report, "%s is %" PRIu32 " bytes, not %d", field, length,
                             RUNNER_AUTH_BYTES);
    if (protocol_reader_take(reader, length, field, &at)) return -1;
    memcpy(bytes, at, length);
    return 0;
}

int protocol_reader_end(struct protocol_reader *reader, const char *last_field) {
    if (reader->left == 0) return 0;
    return protocol_fail(&reader->report, "%zu trailing byte%s after %s, the last field",
                         reader->left, reader->left == 1 ? "" : "s", last_field);
}

/* A HELLO of another protocol version: refused, naming both versions and
 * both builds (the peer's is the first field from version 4 on). */
static int protocol_refuse_version(struct protocol_reader *reader, unsigned version) {
    char build[VERSION_BUILD_MAX] = "";
    char peer[VERSION_BUILD_MAX + 16] = "a build older than 0.9.0";
    if (version >= 4 && protocol_reader_string(reader, "build", build, sizeof(build)) == 0) {
        /* the peer's text goes into a one-line message: no control bytes */
        for (char *c = build; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        snprintf(peer, sizeof(peer), "lockstep %s", build);
    }
    return protocol_fail(&reader->report,
                         "the runner speaks protocol version %u (%s), this process %d "
                         "(lockstep %s): the gateway and every rank must run the same build",
                         version, peer, RUNNER_PROTOCOL_VERSION, version_build());
}

int runner_decode_hello(const struct runner_frame *frame, struct runner_hello *hello, char *err,
                        size_t errlen) {
    struct protocol_reader reader;
    struct runner_hello decoded;
    memset(&decoded, 0, sizeof(decoded));
    if (protocol_reader_begin(&reader, frame, RUNNER_MSG_HELLO, err, errlen)) return -1;
    if (frame->version != RUNNER_PROTOCOL_VERSION)
        return protocol_refuse_version(&reader, frame->version);
    if (protocol_reader_string(&reader, "build", decoded.build, sizeof(decoded.build)) ||
        protocol_reader_i32(&reader, "vocab_size", &decoded.vocab_size) ||
        protocol_reader_i32(&reader, "context_length", &decoded.context_length) ||
        protocol_reader_i32(&reader, "max_sequences", &decoded.max_sequences) ||
        protocol_reader_i32(&reader, "step_tokens", &decoded.step_tokens) ||
        protocol_reader_i32(&reader, "kv_block_size", &decoded.kv_block_size) ||
        protocol_reader_i32(&reader, "kv_blocks_total", &decoded.kv_blocks_total) ||
        protocol_reader_i32(&reader, "tensor_parallel", &decoded.tensor_parallel) ||
        protocol_reader_string(&reader, "model", decoded.model, sizeof(decoded.model)) ||
        protocol_reader_bytes(&reader, "challenge", 1, decoded.challenge, &decoded.has_challenge) ||
        protocol_reader_end(&reader, "challenge") || protocol_check_hello(&reader.report, &decoded))
        return -1;
    *hello = decoded;
    return 0;
}

int runner_decode_auth(const struct runner_frame *frame, struct runner_auth *auth, char *err,
                       size_t errlen) {
    struct protocol_reader reader;
    const uint8_t *nonce = NULL, *mac = NULL;
    if (protocol_reader_begin(&reader, frame, RUNNER_MSG_AUTH, err, errlen) ||
        protocol_reader_take(&reader, RUNNER_AUTH_BYTES, "nonce", &nonce) ||
        protocol_reader_take(&reader, RUNNER_AUTH_BYTES, "mac", &mac) ||
        protocol_reader_end(&reader, "mac"))
        return -1;
    memcpy(auth->nonce, nonce, RUNNER_AUTH_BYTES);
    memcpy(auth->mac, mac, RUNNER_AUTH_BYTES);
    return 0;
}

int runner_decode_cancel(const struct runner_frame *frame, uint64_t *id, char *err, size_t errlen) {
    struct protocol_reader reader;
    uint64_t decoded;
    if (protocol_reader_begin(&reader, frame, RUNNER_MSG_CANCEL, err, errlen) ||
        protocol_reader_u64(&reader, "id", &decoded) || protocol_reader_end(&reader, "id"))
        return -1;
    *id = decoded;
    return 0;
}

int runner_decode_fault(const struct runner_frame *frame, struct runner_fault *fault, char *err,
                        size_t errlen) {
    struct protocol_reader reader;
    uint32_t kind;
    struct runner_fault decoded;
    if (protocol_reader_begin(&reader, frame, RUNNER_MSG_FAULT, err, errlen) ||
        protocol_reader_u32(&reader, "kind", &kind) ||
        protocol_reader_i32(&reader, "rank", &decoded.rank) ||
        protocol_reader_i32(&reader, "delay_ms", &decoded.delay_ms) ||
        protocol_reader_i32(&reader, "steps", &decoded.steps) ||
        protocol_reader_end(&reader, "steps"))
        return -1;
    decoded.kind = kind <= RUNNER_FAULT_CLOSE ? (enum runner_fault_kind)kind : 0;
    if (kind > RUNNER_FAULT_CLOSE)
        return protocol_fail(&reader.report, "kind %" PRIu32 " is not a known fault", kind);
    if (protocol_check_fault(&reader.report, &decoded)) return -1;
    *fault = decoded;
    return 0;
}

int runner_decode_token(const struct runner_frame *frame, struct runner_token *token, char *err,
                        size_t errlen) {
    struct protocol_reader reader;
    struct runner_token decoded;
    memset(&decoded, 0, sizeof(decoded));
    uint32_t n_top;
    if (protocol_reader_begin(&reader, frame, RUNNER_MSG_TOKEN, err, errlen) ||
        protocol_reader_u64(&reader, "id", &decoded.id) ||
        protocol_reader_i32(&reader, "token", &decoded.token) ||
        protocol_reader_f32(&reader, "logprob", &decoded.logprob) ||
        protocol_reader_count(&reader, "n_top", 0, RUNNER_TOP_LOGPROBS_MAX, 8, &n_top))
        return -1;
    decoded.n_top = (int)n_top;
    for (int i = 0; i < decoded.n_top; i++)
        if (protocol_reader_i32(&reader, "top token", &decoded.top[i].token) ||
            protocol_reader_f32(&reader, "top logprob", &decoded.top[i].logprob))
            return -1;
    if (protocol_reader_end(&reader, "top") || protocol_check_token(&reader.report, &decoded))
        return -1;
    *token = decoded;
    return 0;
}

int runner_decode_finished(const struct runner_frame *frame, struct runner_finished *finished,
                           char *err, size_t errlen) {
    struct protocol_reader reader;
    struct runner_finished decoded;
    memset(&decoded, 0, sizeof(decoded));
    uint32_t reason, category;
    /* The reason and the category are range-checked before they become enums. */
    if (protocol_reader_begin(&reader, frame, RUNNER_MSG_FINISHED, err, errlen) ||
        protocol_reader_u64(&reader, "id", &decoded.id) ||
        protocol_reader_u32(&reader, "reason", &reason) ||
        protocol_check_range(&reader.report, "reason", reason, RUNNER_FINISH_EOS,
                             RUNNER_FINISH_ERROR))
        return -1;
    decoded.reason = (enum runner_finish_reason)reason;
    if (protocol_reader_i32(&reader, "n_prompt", &decoded.n_prompt) ||
        protocol_reader_i32(&reader, "n_generated", &decoded.n_generated) ||
        protocol_reader_i32(&reader, "n_cached", &decoded.n_cached) ||
        protocol_reader_u32(&reader, "category", &category) ||
        protocol_check_range(&reader.report, "category", category, RUNNER_ERROR_INTERNAL,
                             RUNNER_ERROR_OUT_OF_MEMORY))
        return -1;
    decoded.category = (enum runner_error_category)category;
    if (protocol_reader_string(&reader, "message", decoded.message, sizeof(decoded.message)) ||
        protocol_reader_end(&reader, "message") ||
        protocol_check_finished(&reader.report, &decoded))
        return -1;
    *finished = decoded;
    return 0;
}

int runner_decode_heartbeat(const struct runner_frame *frame, struct runner_heartbeat *heartbeat,
                            char *err, size_t errlen) {
    struct protocol_reader reader;
    struct runner_heartbeat decoded;
    memset(&decoded, 0, sizeof(decoded));
    if (protocol_reader_begin(&reader, frame, RUNNER_MSG_HEARTBEAT, err, errlen) ||
        protocol_reader_u64(&reader, "step", &decoded.step) ||
        protocol_reader_u64(&reader, "start_us", &decoded.start_us) ||
        protocol_reader_u64(&reader, "end_us", &decoded.end_us) ||
        protocol_reader_i32(&reader, "n_tokens", &decoded.n_tokens) ||
        protocol_reader_i32(&reader, "n_decode", &decoded.n_decode) ||
        protocol_reader_i32(&reader, "n_sequences", &decoded.n_sequences) ||
        protocol_reader_i32(&reader, "n_running", &decoded.n_running) ||
        protocol_reader_i32(&reader, "n_waiting", &decoded.n_waiting) ||
        protocol_reader_i32(&reader, "kv_blocks_used", &decoded.kv_blocks_used) ||
        protocol_reader_i32(&reader, "kv_blocks_total", &decoded.kv_blocks_total) ||
        protocol_reader_i32(&reader, "kv_blocks_cached", &decoded.kv_blocks_cached) ||
        protocol_reader_f32(&reader, "comm_ms", &decoded.comm_ms) ||
        protocol_reader_end(&reader, "comm_ms") ||
        protocol_check_heartbeat(&reader.report, &decoded))
        return -1;
    *heartbeat = decoded;
    return 0;
}

int runner_decode_error(const struct runner_frame *frame, enum runner_error_category *category,
                        char *message, size_t message_size, char *err, size_t errlen) {
    struct protocol_reader reader;
    uint32_t kind;
    if (protocol_reader_begin(&reader, frame, RUNNER_MSG_ERROR, err, errlen) ||
        protocol_reader_u32(&reader, "category", &kind) ||
        protocol_check_range(&reader.report, "category", kind, RUNNER_ERROR_INTERNAL,
                             RUNNER_ERROR_OUT_OF_MEMORY) ||
        protocol_reader_string(&reader, "message", message, message_size) ||
        protocol_reader_end(&reader, "message")) {
        if (message_size > 0) message[0] = '\0'; /* no half-checked text */
        return -1;
    }
    if (category) *category = (enum runner_error_category)kind;
    return 0;
}
