/* protocol.c -- the runner protocol codec: encodes the frames the gateway and
 * the leader exchange, finds whole frames in received bytes and decodes them
 * (frame layout: runner.h, "protocol frames"). Every integer is written and
 * read byte by byte, little-endian whatever the host; floats travel as their
 * IEEE-754 bits.
 *
 * Encoders and decoders share one set of value checks (protocol_check_*), so
 * an encoder refuses exactly what a decoder refuses and a peer never gets a
 * frame it would reject. Decoders first check the structure: each count
 * against its maximum and against the bytes left before anything is
 * allocated, and that the payload is consumed exactly. Every message names
 * the frame and the field: "runner protocol: ADD: top_p 1.5 out of range [0, 1]". */
#include "runner/runner.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(int) == 4, "token ids and counts travel as 32-bit integers");
_Static_assert(sizeof(float) == 4, "floats travel as IEEE-754 binary32");

/* Bits of the ADD flags field. */
#define PROTOCOL_FLAG_LOGPROBS   1u
#define PROTOCOL_FLAG_IGNORE_EOS 2u
#define PROTOCOL_FLAGS_KNOWN     (PROTOCOL_FLAG_LOGPROBS | PROTOCOL_FLAG_IGNORE_EOS)

/* Room for a field name with an index, such as "stops[15].n_tokens". */
#define PROTOCOL_FIELD_NAME 48

/* Where check and read failures are reported. */
struct protocol_report {
    const char *context; /* frame type ("ADD") or "header" */
    char *err;           /* message buffer; may be NULL */
    size_t errlen;       /* its size in bytes */
};

static const char *protocol_message_name(unsigned type) {
    static const char *const names[] = {
        [RUNNER_MSG_HELLO] = "HELLO",       [RUNNER_MSG_ADD] = "ADD",
        [RUNNER_MSG_CANCEL] = "CANCEL",     [RUNNER_MSG_TOKEN] = "TOKEN",
        [RUNNER_MSG_FINISHED] = "FINISHED", [RUNNER_MSG_HEARTBEAT] = "HEARTBEAT",
        [RUNNER_MSG_ERROR] = "ERROR",       [RUNNER_MSG_FAULT] = "FAULT",
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

/* Writes "runner protocol: <context>: <detail>" to the report's buffer; returns -1. */
__attribute__((format(printf, 2, 3))) static int protocol_fail(const struct protocol_report *report,
                                                               const char *format, ...) {
    if (report->err == NULL || report->errlen == 0) return -1;
    char detail[256];
    va_list args;
    va_start(args, format);
    vsnprintf(detail, sizeof(detail), format, args);
    va_end(args);
    snprintf(report->err, report->errlen, "runner protocol: %s: %s", report->context, detail);
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

static int protocol_check_range(const struct protocol_report *report, const char *field,
                                long long value, long long min, long long max) {
    if (value >= min && value <= max) return 0;
    if (max == INT_MAX && value < min)
        return protocol_fail(report, "%s %lld must be >= %lld", field, value, min);
    return protocol_fail(report, "%s %lld out of range [%lld, %lld]", field, value, min, max);
}

static int protocol_check_at_least(const struct protocol_report *report, const char *field,
                                   int value, int min) {
    return protocol_check_range(report, field, value, min, INT_MAX);
}

static int protocol_check_finite(const struct protocol_report *report, const char *field,
                                 float value) {
    if (isfinite(value)) return 0;
    return protocol_fail(report, "%s %g is not finite", field, (double)value);
}

/* n token ids at tokens (the array called field), each >= 0. */
static int protocol_check_tokens(const struct protocol_report *report, const char *field,
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

static int protocol_check_sampling(const struct protocol_report *report,
                                   const struct runner_sampling *sampling) {
    char field[32], why[160];
    if (runner_check_sampling(sampling, field, sizeof(field), why, sizeof(why)) == 0) return 0;
    return protocol_fail(report, "%s", why);
}

static int protocol_check_request(const struct protocol_report *report,
                                  const struct runner_request *request) {
    if (protocol_check_sampling(report, &request->sampling) ||
        protocol_check_at_least(report, "max_tokens", request->max_tokens, 1) ||
        protocol_check_range(report, "logprobs", request->logprobs, 0, 1) ||
        protocol_check_range(report, "ignore_eos", request->ignore_eos, 0, 1) ||
        protocol_check_range(report, "top_logprobs", request->top_logprobs, 0,
                             RUNNER_TOP_LOGPROBS_MAX) ||
        protocol_check_range(report, "n_stops", request->n_stops, 0, RUNNER_STOPS_MAX))
        return -1;
    if (request->n_stops > 0 && request->stops == NULL)
        return protocol_fail(report, "stops is NULL with n_stops %d", request->n_stops);
    for (int i = 0; i < request->n_stops; i++) {
        const struct runner_stop *stop = &request->stops[i];
        char field[PROTOCOL_FIELD_NAME];
        snprintf(field, sizeof(field), "stops[%d].n_tokens", i);
        if (protocol_check_range(report, field, stop->n_tokens, 1, RUNNER_STOP_TOKENS_MAX))
            return -1;
        snprintf(field, sizeof(field), "stops[%d].tokens", i);
        if (protocol_check_tokens(report, field, stop->tokens, stop->n_tokens)) return -1;
    }
    if (protocol_check_range(report, "n_biases", request->n_biases, 0, RUNNER_BIASES_MAX))
        return -1;
    if (request->n_biases > 0 && request->biases == NULL)
        return protocol_fail(report, "biases is NULL with n_biases %d", request->n_biases);
    for (int i = 0; i < request->n_biases; i++) {
        char field[PROTOCOL_FIELD_NAME];
        snprintf(field, sizeof(field), "biases[%d].token", i);
        if (protocol_check_at_least(report, field, request->biases[i].token, 0)) return -1;
        snprintf(field, sizeof(field), "biases[%d].bias", i);
        float bias = request->biases[i].bias;
        if (!(bias >= -RUNNER_BIAS_LIMIT && bias <= RUNNER_BIAS_LIMIT))
            return protocol_fail(report, "%s %g is not in [-%g, %g]", field, (double)bias,
                                 (double)RUNNER_BIAS_LIMIT, (double)RUNNER_BIAS_LIMIT);
    }
    if (request->grammar && strlen(request->grammar) > RUNNER_GRAMMAR_MAX)
        return protocol_fail(report, "grammar of %zu bytes exceeds %u", strlen(request->grammar),
                             RUNNER_GRAMMAR_MAX);
    if (request->grammar_trigger && strlen(request->grammar_trigger) > RUNNER_TRIGGER_MAX)
        return protocol_fail(report, "grammar_trigger of %zu bytes exceeds %d",
                             strlen(request->grammar_trigger), RUNNER_TRIGGER_MAX);
    if (request->grammar_trigger && !request->grammar)
        return protocol_fail(report, "grammar_trigger without a grammar");
    if (protocol_check_at_least(report, "n_prompt", request->n_prompt, 1) ||
        protocol_check_tokens(report, "prompt", request->prompt, request->n_prompt))
        return -1;
    /* resumed tokens are the generated tail of the prompt: one token at
     * least is the original prompt */
    return protocol_check_range(report, "resumed", request->resumed, 0, request->n_prompt - 1);
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

/* A frame being appended to a buffer. */
struct protocol_writer {
    struct runner_buffer *out; /* the frame goes at its end */
    size_t start;              /* out->length before the frame: where its header is */
    int failed;                /* an append ran out of memory */
};

static void writer_put(struct protocol_writer *writer, const void *bytes, size_t n) {
    if (!writer->failed && runner_buffer_append(writer->out, bytes, n) != 0) writer->failed = 1;
}

static void writer_put_u32(struct protocol_writer *writer, uint32_t value) {
    uint8_t bytes[4];
    protocol_store_u32(bytes, value);
    writer_put(writer, bytes, sizeof(bytes));
}

static void writer_put_u64(struct protocol_writer *writer, uint64_t value) {
    writer_put_u32(writer, (uint32_t)value);
    writer_put_u32(writer, (uint32_t)(value >> 32));
}

/* Two's complement: the conversion to unsigned is defined as modulo 2^32. */
static void writer_put_i32(struct protocol_writer *writer, int value) {
    writer_put_u32(writer, (uint32_t)value);
}

static void writer_put_f32(struct protocol_writer *writer, float value) {
    writer_put_u32(writer, protocol_float_bits(value));
}

/* A u32 length and the bytes, without a terminator. A length that does not
 * fit the field also makes the frame too long, which writer_end refuses. */
static void writer_put_string(struct protocol_writer *writer, const char *text) {
    size_t n = strlen(text);
    writer_put_u32(writer, (uint32_t)n);
    writer_put(writer, text, n);
}

/* Appends the header; its payload length is filled in by writer_end. */
static void writer_begin(struct protocol_writer *writer, struct runner_buffer *out,
                         enum runner_message type) {
    const uint8_t header[RUNNER_FRAME_HEADER] = {0, 0, 0, 0, RUNNER_PROTOCOL_VERSION, (uint8_t)type,
                                                 0, 0};
    writer->out = out;
    writer->start = out->length;
    writer->failed = 0;
    writer_put(writer, header, sizeof(header));
}

/* Completes the frame, or removes what was appended of it. */
static int writer_end(struct protocol_writer *writer, const struct protocol_report *report) {
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
        protocol_check_terminated(&report, "model", hello->model, sizeof(hello->model)))
        return -1;
    struct protocol_writer writer;
    writer_begin(&writer, out, RUNNER_MSG_HELLO);
    writer_put_i32(&writer, hello->vocab_size);
    writer_put_i32(&writer, hello->context_length);
    writer_put_i32(&writer, hello->max_sequences);
    writer_put_i32(&writer, hello->step_tokens);
    writer_put_i32(&writer, hello->kv_block_size);
    writer_put_i32(&writer, hello->kv_blocks_total);
    writer_put_i32(&writer, hello->tensor_parallel);
    writer_put_string(&writer, hello->model);
    return writer_end(&writer, &report);
}

int runner_encode_add(struct runner_buffer *out, const struct runner_request *request, char *err,
                      size_t errlen) {
    const struct protocol_report report = {"ADD", err, errlen};
    if (protocol_check_request(&report, request)) return -1;
    const struct runner_sampling *sampling = &request->sampling;
    uint32_t flags = (request->logprobs ? PROTOCOL_FLAG_LOGPROBS : 0) |
                     (request->ignore_eos ? PROTOCOL_FLAG_IGNORE_EOS : 0);
    struct protocol_writer writer;
    writer_begin(&writer, out, RUNNER_MSG_ADD);
    writer_put_u64(&writer, request->id);
    writer_put_f32(&writer, sampling->temperature);
    writer_put_i32(&writer, sampling->top_k);
    writer_put_f32(&writer, sampling->top_p);
    writer_put_f32(&writer, sampling->min_p);
    writer_put_f32(&writer, sampling->repeat_penalty);
    writer_put_i32(&writer, sampling->repeat_last_n);
    writer_put_u64(&writer, sampling->seed);
    writer_put_f32(&writer, sampling->presence_penalty);
    writer_put_f32(&writer, sampling->frequency_penalty);
    writer_put_i32(&writer, request->max_tokens);
    writer_put_u32(&writer, flags);
    writer_put_i32(&writer, request->top_logprobs);
    writer_put_i32(&writer, request->resumed);
    writer_put_u32(&writer, (uint32_t)request->n_stops);
    for (int i = 0; i < request->n_stops; i++) {
        const struct runner_stop *stop = &request->stops[i];
        writer_put_u32(&writer, (uint32_t)stop->n_tokens);
        for (int j = 0; j < stop->n_tokens; j++) writer_put_i32(&writer, stop->tokens[j]);
    }
    writer_put_u32(&writer, (uint32_t)request->n_biases);
    for (int i = 0; i < request->n_biases; i++) {
        writer_put_i32(&writer, request->biases[i].token);
        writer_put_f32(&writer, request->biases[i].bias);
    }
    writer_put_string(&writer, request->grammar ? request->grammar : "");
    writer_put_string(&writer, request->grammar_trigger ? request->grammar_trigger : "");
    writer_put_u32(&writer, (uint32_t)request->n_prompt);
    for (int i = 0; i < request->n_prompt; i++) writer_put_i32(&writer, request->prompt[i]);
    return writer_end(&writer, &report);
}

int runner_encode_cancel(struct runner_buffer *out, uint64_t id, char *err, size_t errlen) {
    const struct protocol_report report = {"CANCEL", err, errlen};
    struct protocol_writer writer;
    writer_begin(&writer, out, RUNNER_MSG_CANCEL);
    writer_put_u64(&writer, id);
    return writer_end(&writer, &report);
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
    writer_begin(&writer, out, RUNNER_MSG_FAULT);
    writer_put_u32(&writer, (uint32_t)fault->kind);
    writer_put_i32(&writer, fault->rank);
    writer_put_i32(&writer, fault->delay_ms);
    writer_put_i32(&writer, fault->steps);
    return writer_end(&writer, &report);
}

int runner_encode_token(struct runner_buffer *out, const struct runner_token *token, char *err,
                        size_t errlen) {
    const struct protocol_report report = {"TOKEN", err, errlen};
    if (protocol_check_token(&report, token)) return -1;
    struct protocol_writer writer;
    writer_begin(&writer, out, RUNNER_MSG_TOKEN);
    writer_put_u64(&writer, token->id);
    writer_put_i32(&writer, token->token);
    writer_put_f32(&writer, token->logprob);
    writer_put_u32(&writer, (uint32_t)token->n_top);
    for (int i = 0; i < token->n_top; i++) {
        writer_put_i32(&writer, token->top[i].token);
        writer_put_f32(&writer, token->top[i].logprob);
    }
    return writer_end(&writer, &report);
}

int runner_encode_finished(struct runner_buffer *out, const struct runner_finished *finished,
                           char *err, size_t errlen) {
    const struct protocol_report report = {"FINISHED", err, errlen};
    if (protocol_check_finished(&report, finished) ||
        protocol_check_terminated(&report, "message", finished->message, sizeof(finished->message)))
        return -1;
    struct protocol_writer writer;
    writer_begin(&writer, out, RUNNER_MSG_FINISHED);
    writer_put_u64(&writer, finished->id);
    writer_put_u32(&writer, (uint32_t)finished->reason);
    writer_put_i32(&writer, finished->n_prompt);
    writer_put_i32(&writer, finished->n_generated);
    writer_put_i32(&writer, finished->n_cached);
    writer_put_u32(&writer, (uint32_t)finished->category);
    writer_put_string(&writer, finished->message);
    return writer_end(&writer, &report);
}

int runner_encode_heartbeat(struct runner_buffer *out, const struct runner_heartbeat *heartbeat,
                            char *err, size_t errlen) {
    const struct protocol_report report = {"HEARTBEAT", err, errlen};
    if (protocol_check_heartbeat(&report, heartbeat)) return -1;
    struct protocol_writer writer;
    writer_begin(&writer, out, RUNNER_MSG_HEARTBEAT);
    writer_put_u64(&writer, heartbeat->step);
    writer_put_u64(&writer, heartbeat->start_us);
    writer_put_u64(&writer, heartbeat->end_us);
    writer_put_i32(&writer, heartbeat->n_tokens);
    writer_put_i32(&writer, heartbeat->n_decode);
    writer_put_i32(&writer, heartbeat->n_sequences);
    writer_put_i32(&writer, heartbeat->n_running);
    writer_put_i32(&writer, heartbeat->n_waiting);
    writer_put_i32(&writer, heartbeat->kv_blocks_used);
    writer_put_i32(&writer, heartbeat->kv_blocks_total);
    writer_put_i32(&writer, heartbeat->kv_blocks_cached);
    writer_put_f32(&writer, heartbeat->comm_ms);
    return writer_end(&writer, &report);
}

int runner_encode_error(struct runner_buffer *out, enum runner_error_category category,
                        const char *message, char *err, size_t errlen) {
    const struct protocol_report report = {"ERROR", err, errlen};
    if (message == NULL) return protocol_fail(&report, "message is NULL");
    if (protocol_check_range(&report, "category", (long long)category, RUNNER_ERROR_INTERNAL,
                             RUNNER_ERROR_OUT_OF_MEMORY))
        return -1;
    struct protocol_writer writer;
    writer_begin(&writer, out, RUNNER_MSG_ERROR);
    writer_put_u32(&writer, (uint32_t)category);
    writer_put_string(&writer, message);
    return writer_end(&writer, &report);
}

/* ---- frames ---- */

int runner_frame_next(const uint8_t *data, size_t length, size_t max_payload,
                      struct runner_frame *frame, char *err, size_t errlen) {
    const struct protocol_report report = {"header", err, errlen};
    if (length < RUNNER_FRAME_HEADER) return 0;
    uint32_t payload = protocol_load_u32(data);
    unsigned version = data[4], type = data[5];
    unsigned reserved = (unsigned)data[6] | (unsigned)data[7] << 8;
    if (version != RUNNER_PROTOCOL_VERSION)
        return protocol_fail(&report, "version %u, expected %d", version, RUNNER_PROTOCOL_VERSION);
    if (type < RUNNER_MSG_HELLO || type > RUNNER_MSG_FAULT)
        return protocol_fail(&report, "type %u is not a known message (%d..%d)", type,
                             RUNNER_MSG_HELLO, RUNNER_MSG_FAULT);
    if (reserved != 0) return protocol_fail(&report, "reserved field 0x%04x is not zero", reserved);
    if (payload > max_payload)
        return protocol_fail(&report, "%s payload of %" PRIu32 " bytes exceeds the limit of %zu",
                             protocol_message_name(type), payload, max_payload);
    if (length - RUNNER_FRAME_HEADER < payload) return 0;
    frame->type = (enum runner_message)type;
    frame->payload = data + RUNNER_FRAME_HEADER;
    frame->payload_length = payload;
    frame->frame_length = RUNNER_FRAME_HEADER + (size_t)payload;
    return 1;
}

/* ---- decoding ---- */

/* A payload being read front to back. */
struct protocol_reader {
    const uint8_t *at;             /* next unread byte */
    size_t left;                   /* bytes not read yet */
    struct protocol_report report; /* context is the frame type */
};

static int reader_begin(struct protocol_reader *reader, const struct runner_frame *frame,
                        enum runner_message type, char *err, size_t errlen) {
    reader->at = frame->payload;
    reader->left = frame->payload_length;
    reader->report = (struct protocol_report){protocol_message_name(type), err, errlen};
    if (frame->type == type) return 0;
    return protocol_fail(&reader->report, "cannot decode a %s frame",
                         protocol_message_name(frame->type));
}

/* The next n bytes, which hold field. */
static int reader_take(struct protocol_reader *reader, size_t n, const char *field,
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

static int reader_u32(struct protocol_reader *reader, const char *field, uint32_t *value) {
    const uint8_t *bytes = NULL;
    if (reader_take(reader, 4, field, &bytes)) return -1;
    *value = protocol_load_u32(bytes);
    return 0;
}

static int reader_u64(struct protocol_reader *reader, const char *field, uint64_t *value) {
    const uint8_t *bytes = NULL;
    if (reader_take(reader, 8, field, &bytes)) return -1;
    *value = (uint64_t)protocol_load_u32(bytes) | (uint64_t)protocol_load_u32(bytes + 4) << 32;
    return 0;
}

/* Two's complement, spelled out: converting a u32 above INT_MAX to int is
 * implementation-defined in C. */
static int reader_i32(struct protocol_reader *reader, const char *field, int *value) {
    uint32_t bits;
    if (reader_u32(reader, field, &bits)) return -1;
    *value = bits <= INT_MAX ? (int)bits : (int)(bits - 0x80000000u) - INT_MAX - 1;
    return 0;
}

static int reader_f32(struct protocol_reader *reader, const char *field, float *value) {
    uint32_t bits;
    if (reader_u32(reader, field, &bits)) return -1;
    *value = protocol_bits_float(bits);
    return 0;
}

/* A u32 count in [min, max] of elements of element_size bytes that must all
 * fit in what is left, checked before the caller allocates for them. */
static int reader_count(struct protocol_reader *reader, const char *field, uint32_t min,
                        uint32_t max, size_t element_size, uint32_t *count) {
    if (reader_u32(reader, field, count) ||
        protocol_check_range(&reader->report, field, *count, min, max))
        return -1;
    if ((uint64_t)*count * element_size > reader->left)
        return protocol_fail(&reader->report, "%s %" PRIu32 " needs %" PRIu64 " bytes, %zu left",
                             field, *count, (uint64_t)*count * element_size, reader->left);
    return 0;
}

/* A count (named count_field) in [min, max] and that many i32 token ids
 * (named field) in a new array. */
static int reader_tokens(struct protocol_reader *reader, const char *count_field, const char *field,
                         uint32_t min, uint32_t max, int **tokens, int *n_tokens) {
    uint32_t count;
    if (reader_count(reader, count_field, min, max, 4, &count)) return -1;
    if (count == 0) return 0;
    *tokens = malloc((size_t)count * sizeof(**tokens));
    if (*tokens == NULL)
        return protocol_fail(&reader->report, "out of memory for %" PRIu32 " tokens of %s", count,
                             field);
    *n_tokens = (int)count;
    for (int i = 0; i < *n_tokens; i++)
        if (reader_i32(reader, field, &(*tokens)[i])) return -1;
    return 0;
}

/* A u32 length and that many bytes, none of them NUL, into text (size bytes).
 * A longer string is cut to fit, before a whole UTF-8 character, and text is
 * always NUL-terminated (when size > 0). */
static int reader_string(struct protocol_reader *reader, const char *field, char *text,
                         size_t size) {
    char length_field[PROTOCOL_FIELD_NAME];
    snprintf(length_field, sizeof(length_field), "%s length", field);
    uint32_t length;
    const uint8_t *bytes = NULL;
    if (reader_u32(reader, length_field, &length) || reader_take(reader, length, field, &bytes))
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

/* The payload must end after its last field. */
static int reader_end(struct protocol_reader *reader, const char *last_field) {
    if (reader->left == 0) return 0;
    return protocol_fail(&reader->report, "%zu trailing byte%s after %s, the last field",
                         reader->left, reader->left == 1 ? "" : "s", last_field);
}

int runner_decode_hello(const struct runner_frame *frame, struct runner_hello *hello, char *err,
                        size_t errlen) {
    struct protocol_reader reader;
    struct runner_hello decoded;
    memset(&decoded, 0, sizeof(decoded));
    if (reader_begin(&reader, frame, RUNNER_MSG_HELLO, err, errlen) ||
        reader_i32(&reader, "vocab_size", &decoded.vocab_size) ||
        reader_i32(&reader, "context_length", &decoded.context_length) ||
        reader_i32(&reader, "max_sequences", &decoded.max_sequences) ||
        reader_i32(&reader, "step_tokens", &decoded.step_tokens) ||
        reader_i32(&reader, "kv_block_size", &decoded.kv_block_size) ||
        reader_i32(&reader, "kv_blocks_total", &decoded.kv_blocks_total) ||
        reader_i32(&reader, "tensor_parallel", &decoded.tensor_parallel) ||
        reader_string(&reader, "model", decoded.model, sizeof(decoded.model)) ||
        reader_end(&reader, "model") || protocol_check_hello(&reader.report, &decoded))
        return -1;
    *hello = decoded;
    return 0;
}

/* The n_stops stop sequences of an ADD payload, each allocated as it is read. */
static int reader_stops(struct protocol_reader *reader, struct runner_request *request) {
    uint32_t n_stops;
    /* Each stop takes at least its own u32 count. */
    if (reader_count(reader, "n_stops", 0, RUNNER_STOPS_MAX, 4, &n_stops)) return -1;
    if (n_stops == 0) return 0;
    request->stops = calloc(n_stops, sizeof(*request->stops));
    if (request->stops == NULL)
        return protocol_fail(&reader->report, "out of memory for %" PRIu32 " stops", n_stops);
    request->n_stops = (int)n_stops;
    for (int i = 0; i < request->n_stops; i++) {
        char count_field[PROTOCOL_FIELD_NAME], field[PROTOCOL_FIELD_NAME];
        snprintf(count_field, sizeof(count_field), "stops[%d].n_tokens", i);
        snprintf(field, sizeof(field), "stops[%d].tokens", i);
        struct runner_stop *stop = &request->stops[i];
        if (reader_tokens(reader, count_field, field, 1, RUNNER_STOP_TOKENS_MAX, &stop->tokens,
                          &stop->n_tokens))
            return -1;
    }
    return 0;
}

/* The n_biases (token, bias) pairs of an ADD payload. */
static int reader_biases(struct protocol_reader *reader, struct runner_request *request) {
    uint32_t n;
    if (reader_count(reader, "n_biases", 0, RUNNER_BIASES_MAX, 8, &n)) return -1;
    if (n == 0) return 0;
    request->biases = calloc(n, sizeof(*request->biases));
    if (request->biases == NULL)
        return protocol_fail(&reader->report, "out of memory for %" PRIu32 " biases", n);
    request->n_biases = (int)n;
    for (int i = 0; i < request->n_biases; i++)
        if (reader_i32(reader, "biases.token", &request->biases[i].token) ||
            reader_f32(reader, "biases.bias", &request->biases[i].bias))
            return -1;
    return 0;
}

/* A text field of at most max bytes (named field; its length field is
 * "<field> length"), into a new NUL-terminated string: empty is none (NULL);
 * a NUL inside is an error. */
static int reader_text(struct protocol_reader *reader, const char *field, uint32_t max,
                       char **text) {
    char length_field[PROTOCOL_FIELD_NAME];
    snprintf(length_field, sizeof(length_field), "%s length", field);
    uint32_t length;
    const uint8_t *bytes = NULL;
    if (reader_count(reader, length_field, 0, max, 1, &length) ||
        reader_take(reader, length, field, &bytes))
        return -1;
    if (length == 0) return 0;
    const uint8_t *nul = memchr(bytes, '\0', length);
    if (nul != NULL)
        return protocol_fail(&reader->report, "%s has a NUL byte at offset %td", field,
                             nul - bytes);
    *text = malloc((size_t)length + 1);
    if (*text == NULL)
        return protocol_fail(&reader->report, "out of memory for %s of %" PRIu32 " bytes", field,
                             length);
    memcpy(*text, bytes, length);
    (*text)[length] = '\0';
    return 0;
}

int runner_decode_add(const struct runner_frame *frame, struct runner_request *request, char *err,
                      size_t errlen) {
    struct protocol_reader reader;
    struct runner_request decoded;
    memset(&decoded, 0, sizeof(decoded));
    struct runner_sampling *sampling = &decoded.sampling;
    uint32_t flags;
    if (reader_begin(&reader, frame, RUNNER_MSG_ADD, err, errlen) ||
        reader_u64(&reader, "id", &decoded.id) ||
        reader_f32(&reader, "temperature", &sampling->temperature) ||
        reader_i32(&reader, "top_k", &sampling->top_k) ||
        reader_f32(&reader, "top_p", &sampling->top_p) ||
        reader_f32(&reader, "min_p", &sampling->min_p) ||
        reader_f32(&reader, "repeat_penalty", &sampling->repeat_penalty) ||
        reader_i32(&reader, "repeat_last_n", &sampling->repeat_last_n) ||
        reader_u64(&reader, "seed", &sampling->seed) ||
        reader_f32(&reader, "presence_penalty", &sampling->presence_penalty) ||
        reader_f32(&reader, "frequency_penalty", &sampling->frequency_penalty) ||
        reader_i32(&reader, "max_tokens", &decoded.max_tokens) ||
        reader_u32(&reader, "flags", &flags))
        goto fail;
    if (flags & ~PROTOCOL_FLAGS_KNOWN) {
        protocol_fail(&reader.report, "flags 0x%" PRIx32 " has unknown bits 0x%" PRIx32, flags,
                      flags & ~PROTOCOL_FLAGS_KNOWN);
        goto fail;
    }
    decoded.logprobs = (flags & PROTOCOL_FLAG_LOGPROBS) != 0;
    decoded.ignore_eos = (flags & PROTOCOL_FLAG_IGNORE_EOS) != 0;
    if (reader_i32(&reader, "top_logprobs", &decoded.top_logprobs) ||
        reader_i32(&reader, "resumed", &decoded.resumed) || reader_stops(&reader, &decoded) ||
        reader_biases(&reader, &decoded) ||
        reader_text(&reader, "grammar", RUNNER_GRAMMAR_MAX, &decoded.grammar) ||
        reader_text(&reader, "grammar_trigger", RUNNER_TRIGGER_MAX, &decoded.grammar_trigger) ||
        reader_tokens(&reader, "n_prompt", "prompt", 1, INT_MAX, &decoded.prompt,
                      &decoded.n_prompt) ||
        reader_end(&reader, "prompt") || protocol_check_request(&reader.report, &decoded))
        goto fail;
    *request = decoded;
    return 0;
fail:
    runner_request_free(&decoded);
    memset(request, 0, sizeof(*request));
    return -1;
}

int runner_decode_cancel(const struct runner_frame *frame, uint64_t *id, char *err, size_t errlen) {
    struct protocol_reader reader;
    uint64_t decoded;
    if (reader_begin(&reader, frame, RUNNER_MSG_CANCEL, err, errlen) ||
        reader_u64(&reader, "id", &decoded) || reader_end(&reader, "id"))
        return -1;
    *id = decoded;
    return 0;
}

int runner_decode_fault(const struct runner_frame *frame, struct runner_fault *fault, char *err,
                        size_t errlen) {
    struct protocol_reader reader;
    uint32_t kind;
    struct runner_fault decoded;
    if (reader_begin(&reader, frame, RUNNER_MSG_FAULT, err, errlen) ||
        reader_u32(&reader, "kind", &kind) || reader_i32(&reader, "rank", &decoded.rank) ||
        reader_i32(&reader, "delay_ms", &decoded.delay_ms) ||
        reader_i32(&reader, "steps", &decoded.steps) || reader_end(&reader, "steps"))
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
    if (reader_begin(&reader, frame, RUNNER_MSG_TOKEN, err, errlen) ||
        reader_u64(&reader, "id", &decoded.id) || reader_i32(&reader, "token", &decoded.token) ||
        reader_f32(&reader, "logprob", &decoded.logprob) ||
        reader_count(&reader, "n_top", 0, RUNNER_TOP_LOGPROBS_MAX, 8, &n_top))
        return -1;
    decoded.n_top = (int)n_top;
    for (int i = 0; i < decoded.n_top; i++)
        if (reader_i32(&reader, "top token", &decoded.top[i].token) ||
            reader_f32(&reader, "top logprob", &decoded.top[i].logprob))
            return -1;
    if (reader_end(&reader, "top") || protocol_check_token(&reader.report, &decoded)) return -1;
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
    if (reader_begin(&reader, frame, RUNNER_MSG_FINISHED, err, errlen) ||
        reader_u64(&reader, "id", &decoded.id) || reader_u32(&reader, "reason", &reason) ||
        protocol_check_range(&reader.report, "reason", reason, RUNNER_FINISH_EOS,
                             RUNNER_FINISH_ERROR))
        return -1;
    decoded.reason = (enum runner_finish_reason)reason;
    if (reader_i32(&reader, "n_prompt", &decoded.n_prompt) ||
        reader_i32(&reader, "n_generated", &decoded.n_generated) ||
        reader_i32(&reader, "n_cached", &decoded.n_cached) ||
        reader_u32(&reader, "category", &category) ||
        protocol_check_range(&reader.report, "category", category, RUNNER_ERROR_INTERNAL,
                             RUNNER_ERROR_OUT_OF_MEMORY))
        return -1;
    decoded.category = (enum runner_error_category)category;
    if (reader_string(&reader, "message", decoded.message, sizeof(decoded.message)) ||
        reader_end(&reader, "message") || protocol_check_finished(&reader.report, &decoded))
        return -1;
    *finished = decoded;
    return 0;
}

int runner_decode_heartbeat(const struct runner_frame *frame, struct runner_heartbeat *heartbeat,
                            char *err, size_t errlen) {
    struct protocol_reader reader;
    struct runner_heartbeat decoded;
    memset(&decoded, 0, sizeof(decoded));
    if (reader_begin(&reader, frame, RUNNER_MSG_HEARTBEAT, err, errlen) ||
        reader_u64(&reader, "step", &decoded.step) ||
        reader_u64(&reader, "start_us", &decoded.start_us) ||
        reader_u64(&reader, "end_us", &decoded.end_us) ||
        reader_i32(&reader, "n_tokens", &decoded.n_tokens) ||
        reader_i32(&reader, "n_decode", &decoded.n_decode) ||
        reader_i32(&reader, "n_sequences", &decoded.n_sequences) ||
        reader_i32(&reader, "n_running", &decoded.n_running) ||
        reader_i32(&reader, "n_waiting", &decoded.n_waiting) ||
        reader_i32(&reader, "kv_blocks_used", &decoded.kv_blocks_used) ||
        reader_i32(&reader, "kv_blocks_total", &decoded.kv_blocks_total) ||
        reader_i32(&reader, "kv_blocks_cached", &decoded.kv_blocks_cached) ||
        reader_f32(&reader, "comm_ms", &decoded.comm_ms) || reader_end(&reader, "comm_ms") ||
        protocol_check_heartbeat(&reader.report, &decoded))
        return -1;
    *heartbeat = decoded;
    return 0;
}

int runner_decode_error(const struct runner_frame *frame, enum runner_error_category *category,
                        char *message, size_t message_size, char *err, size_t errlen) {
    struct protocol_reader reader;
    uint32_t kind;
    if (reader_begin(&reader, frame, RUNNER_MSG_ERROR, err, errlen) ||
        reader_u32(&reader, "category", &kind) ||
        protocol_check_range(&reader.report, "category", kind, RUNNER_ERROR_INTERNAL,
                             RUNNER_ERROR_OUT_OF_MEMORY) ||
        reader_string(&reader, "message", message, message_size) ||
        reader_end(&reader, "message")) {
        if (message_size > 0) message[0] = '\0'; /* no half-checked text */
        return -1;
    }
    if (category) *category = (enum runner_error_category)kind;
    return 0;
}

void runner_request_free(struct runner_request *request) {
    if (request == NULL) return;
    for (int i = 0; request->stops != NULL && i < request->n_stops; i++)
        free(request->stops[i].tokens);
    free(request->stops);
    free(request->prompt);
    free(request->biases);
    free(request->grammar);
    free(request->grammar_trigger);
    request->grammar_trigger = NULL;
    request->biases = NULL;
    request->n_biases = 0;
    request->grammar = NULL;
    request->stops = NULL;
    request->n_stops = 0;
    request->prompt = NULL;
    request->n_prompt = 0;
}
