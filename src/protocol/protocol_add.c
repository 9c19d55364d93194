/* protocol_add.c -- the ADD message of the runner protocol codec: a request
 * (id, sampling, limits, flags, stops, biases, grammar and its trigger,
 * prompt) encoded by the gateway and decoded by the leader, with the checks
 * both sides apply to it, and runner_request_free for what a decoded request
 * owns. The frame writer and reader, the shared value checks and the other
 * messages are protocol.c's (protocol_internal.h is what the two share); the
 * payload layout is in protocol/protocol.h, "protocol frames".
 *
 * The decoder allocates the stops, biases, grammar texts and prompt as it
 * reads them, each count checked against its maximum and the bytes left
 * first; on any failure it frees them and leaves the request zeroed. */
#include "protocol_internal.h"
#include "protocol/protocol.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bits of the ADD flags field. */
#define PROTOCOL_FLAG_LOGPROBS   1u
#define PROTOCOL_FLAG_IGNORE_EOS 2u
#define PROTOCOL_FLAG_EMBED      4u
#define PROTOCOL_FLAGS_KNOWN                                                                       \
    (PROTOCOL_FLAG_LOGPROBS | PROTOCOL_FLAG_IGNORE_EOS | PROTOCOL_FLAG_EMBED)

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
        protocol_check_range(report, "embed", request->embed, 0, 1) ||
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

int runner_encode_add(struct runner_buffer *out, const struct runner_request *request, char *err,
                      size_t errlen) {
    const struct protocol_report report = {"ADD", err, errlen};
    if (protocol_check_request(&report, request)) return -1;
    const struct runner_sampling *sampling = &request->sampling;
    uint32_t flags = (request->logprobs ? PROTOCOL_FLAG_LOGPROBS : 0) |
                     (request->ignore_eos ? PROTOCOL_FLAG_IGNORE_EOS : 0) |
                     (request->embed ? PROTOCOL_FLAG_EMBED : 0);
    struct protocol_writer writer;
    protocol_writer_begin(&writer, out, RUNNER_MSG_ADD);
    protocol_writer_put_u64(&writer, request->id);
    protocol_writer_put_f32(&writer, sampling->temperature);
    protocol_writer_put_i32(&writer, sampling->top_k);
    protocol_writer_put_f32(&writer, sampling->top_p);
    protocol_writer_put_f32(&writer, sampling->min_p);
    protocol_writer_put_f32(&writer, sampling->repeat_penalty);
    protocol_writer_put_i32(&writer, sampling->repeat_last_n);
    protocol_writer_put_u64(&writer, sampling->seed);
    protocol_writer_put_f32(&writer, sampling->presence_penalty);
    protocol_writer_put_f32(&writer, sampling->frequency_penalty);
    protocol_writer_put_i32(&writer, request->max_tokens);
    protocol_writer_put_u32(&writer, flags);
    protocol_writer_put_i32(&writer, request->top_logprobs);
    protocol_writer_put_i32(&writer, request->resumed);
    protocol_writer_put_u32(&writer, (uint32_t)request->n_stops);
    for (int i = 0; i < request->n_stops; i++) {
        const struct runner_stop *stop = &request->stops[i];
        protocol_writer_put_u32(&writer, (uint32_t)stop->n_tokens);
        for (int j = 0; j < stop->n_tokens; j++) protocol_writer_put_i32(&writer, stop->tokens[j]);
    }
    protocol_writer_put_u32(&writer, (uint32_t)request->n_biases);
    for (int i = 0; i < request->n_biases; i++) {
        protocol_writer_put_i32(&writer, request->biases[i].token);
        protocol_writer_put_f32(&writer, request->biases[i].bias);
    }
    protocol_writer_put_string(&writer, request->grammar ? request->grammar : "");
    protocol_writer_put_string(&writer, request->grammar_trigger ? request->grammar_trigger : "");
    protocol_writer_put_u32(&writer, (uint32_t)request->n_prompt);
    for (int i = 0; i < request->n_prompt; i++)
        protocol_writer_put_i32(&writer, request->prompt[i]);
    return protocol_writer_end(&writer, &report);
}

/* The n_stops stop sequences of an ADD payload, each allocated as it is read. */
static int protocol_reader_stops(struct protocol_reader *reader, struct runner_request *request) {
    uint32_t n_stops;
    /* Each stop takes at least its own u32 count. */
    if (protocol_reader_count(reader, "n_stops", 0, RUNNER_STOPS_MAX, 4, &n_stops)) return -1;
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
        if (protocol_reader_tokens(reader, count_field, field, 1, RUNNER_STOP_TOKENS_MAX,
                                   &stop->tokens, &stop->n_tokens))
            return -1;
    }
    return 0;
}

/* The n_biases (token, bias) pairs of an ADD payload. */
static int protocol_reader_biases(struct protocol_reader *reader, struct runner_request *request) {
    uint32_t n;
    if (protocol_reader_count(reader, "n_biases", 0, RUNNER_BIASES_MAX, 8, &n)) return -1;
    if (n == 0) return 0;
    request->biases = calloc(n, sizeof(*request->biases));
    if (request->biases == NULL)
        return protocol_fail(&reader->report, "out of memory for %" PRIu32 " biases", n);
    request->n_biases = (int)n;
    for (int i = 0; i < request->n_biases; i++)
        if (protocol_reader_i32(reader, "biases.token", &request->biases[i].token) ||
            protocol_reader_f32(reader, "biases.bias", &request->biases[i].bias))
            return -1;
    return 0;
}

/* A text field of at most max bytes (named field; its length field is
 * "<field> length"), into a new NUL-terminated string: empty is none (NULL);
 * a NUL inside is an error. */
static int protocol_reader_text(struct protocol_reader *reader, const char *field, uint32_t max,
                                char **text) {
    char length_field[PROTOCOL_FIELD_NAME];
    snprintf(length_field, sizeof(length_field), "%s length", field);
    uint32_t length;
    const uint8_t *bytes = NULL;
    if (protocol_reader_count(reader, length_field, 0, max, 1, &length) ||
        protocol_reader_take(reader, length, field, &bytes))
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
    if (protocol_reader_begin(&reader, frame, RUNNER_MSG_ADD, err, errlen) ||
        protocol_reader_u64(&reader, "id", &decoded.id) ||
        protocol_reader_f32(&reader, "temperature", &sampling->temperature) ||
        protocol_reader_i32(&reader, "top_k", &sampling->top_k) ||
        protocol_reader_f32(&reader, "top_p", &sampling->top_p) ||
        protocol_reader_f32(&reader, "min_p", &sampling->min_p) ||
        protocol_reader_f32(&reader, "repeat_penalty", &sampling->repeat_penalty) ||
        protocol_reader_i32(&reader, "repeat_last_n", &sampling->repeat_last_n) ||
        protocol_reader_u64(&reader, "seed", &sampling->seed) ||
        protocol_reader_f32(&reader, "presence_penalty", &sampling->presence_penalty) ||
        protocol_reader_f32(&reader, "frequency_penalty", &sampling->frequency_penalty) ||
        protocol_reader_i32(&reader, "max_tokens", &decoded.max_tokens) ||
        protocol_reader_u32(&reader, "flags", &flags))
        goto fail;
    if (flags & ~PROTOCOL_FLAGS_KNOWN) {
        protocol_fail(&reader.report, "flags 0x%" PRIx32 " has unknown bits 0x%" PRIx32, flags,
                      flags & ~PROTOCOL_FLAGS_KNOWN);
        goto fail;
    }
    decoded.logprobs = (flags & PROTOCOL_FLAG_LOGPROBS) != 0;
    decoded.ignore_eos = (flags & PROTOCOL_FLAG_IGNORE_EOS) != 0;
    decoded.embed = (flags & PROTOCOL_FLAG_EMBED) != 0;
    if (protocol_reader_i32(&reader, "top_logprobs", &decoded.top_logprobs) ||
        protocol_reader_i32(&reader, "resumed", &decoded.resumed) ||
        protocol_reader_stops(&reader, &decoded) || protocol_reader_biases(&reader, &decoded) ||
        protocol_reader_text(&reader, "grammar", RUNNER_GRAMMAR_MAX, &decoded.grammar) ||
        protocol_reader_text(&reader, "grammar_trigger", RUNNER_TRIGGER_MAX,
                             &decoded.grammar_trigger) ||
        protocol_reader_tokens(&reader, "n_prompt", "prompt", 1, INT_MAX, &decoded.prompt,
                               &decoded.n_prompt) ||
        protocol_reader_end(&reader, "prompt") || protocol_check_request(&reader.report, &decoded))
        goto fail;
    *request = decoded;
    return 0;
fail:
    runner_request_free(&decoded);
    memset(request, 0, sizeof(*request));
    return -1;
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
