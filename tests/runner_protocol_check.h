/* runner_protocol_check.h -- what the runner protocol tests share: the
 * error buffer and CHECK_FAILS, decoding any frame, patching a field of an
 * encoded frame, and sample messages. Included by test_runner_protocol.c
 * and test_runner_protocol_rules.c (each gets its own copy). */
#ifndef LOCKSTEP_TESTS_RUNNER_PROTOCOL_CHECK_H
#define LOCKSTEP_TESTS_RUNNER_PROTOCOL_CHECK_H

#include "runner/runner.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static char err[512];

/* rc must be -1 and err exactly "runner protocol: <expected>"; clears err. */
#define CHECK_FAILS(rc, expected) check_fails(__LINE__, (rc), (expected))
static inline void check_fails(int line, int rc, const char *expected) {
    char want[512];
    snprintf(want, sizeof(want), "runner protocol: %s", expected);
    CHECK_MSG(rc == -1 && strcmp(err, want) == 0, "line %d: rc %d, err '%s', expected '%s'", line,
              rc, err, want);
    err[0] = '\0';
}

static inline int same_float(float a, float b) {
    return test_same_bits(&a, &b, 1);
}

static inline void put_u32(uint8_t *at, uint32_t value) {
    for (int i = 0; i < 4; i++) at[i] = (uint8_t)(value >> (8 * i));
}

/* The one frame in buffer (it must hold exactly one). */
static inline struct runner_frame only_frame(const struct runner_buffer *buffer) {
    struct runner_frame frame;
    memset(&frame, 0, sizeof(frame));
    int rc =
        runner_frame_next(buffer->data, buffer->length, RUNNER_FRAME_MAX, &frame, err, sizeof(err));
    CHECK_MSG(rc == 1 && frame.frame_length == buffer->length, "rc %d (%s), frame %zu of %zu", rc,
              err, frame.frame_length, buffer->length);
    return frame;
}

/* Decodes any frame with the decoder of its type and frees what it made. */
static inline int decode_any(const struct runner_frame *frame) {
    union {
        struct runner_hello hello;
        struct runner_request request;
        struct runner_token token;
        struct runner_finished finished;
        struct runner_heartbeat heartbeat;
        uint64_t id;
        char message[256];
        struct runner_fault fault;
        struct runner_auth auth;
        struct runner_embedding embedding;
    } any;
    int rc = -1;
    switch (frame->type) {
    case RUNNER_MSG_HELLO:
        return runner_decode_hello(frame, &any.hello, err, sizeof(err));
    case RUNNER_MSG_ADD:
        rc = runner_decode_add(frame, &any.request, err, sizeof(err));
        runner_request_free(&any.request);
        return rc;
    case RUNNER_MSG_CANCEL:
        return runner_decode_cancel(frame, &any.id, err, sizeof(err));
    case RUNNER_MSG_TOKEN:
        return runner_decode_token(frame, &any.token, err, sizeof(err));
    case RUNNER_MSG_FINISHED:
        return runner_decode_finished(frame, &any.finished, err, sizeof(err));
    case RUNNER_MSG_HEARTBEAT:
        return runner_decode_heartbeat(frame, &any.heartbeat, err, sizeof(err));
    case RUNNER_MSG_ERROR:
        return runner_decode_error(frame, NULL, any.message, sizeof(any.message), err, sizeof(err));
    case RUNNER_MSG_FAULT:
        return runner_decode_fault(frame, &any.fault, err, sizeof(err));
    case RUNNER_MSG_AUTH:
        return runner_decode_auth(frame, &any.auth, err, sizeof(err));
    case RUNNER_MSG_EMBEDDING:
        rc = runner_decode_embedding(frame, &any.embedding, err, sizeof(err));
        if (rc == 0) free(any.embedding.values);
        return rc;
    }
    return rc;
}

/* Decodes the one frame in buffer with the u32 at payload offset replaced by bits. */
static inline int decode_patched(const struct runner_buffer *buffer, size_t offset, uint32_t bits) {
    uint8_t *copy = malloc(buffer->length);
    memcpy(copy, buffer->data, buffer->length);
    put_u32(copy + RUNNER_FRAME_HEADER + offset, bits);
    struct runner_frame frame;
    int rc = runner_frame_next(copy, buffer->length, RUNNER_FRAME_MAX, &frame, err, sizeof(err));
    CHECK_MSG(rc == 1, "patched frame: rc %d (%s)", rc, err);
    rc = rc == 1 ? decode_any(&frame) : 0;
    free(copy);
    return rc;
}

/* A u32 field of a payload with a value its decoder must refuse. */
struct bad_field {
    size_t offset;        /* in the payload */
    uint32_t bits;        /* written there */
    int encoder;          /* 1: the same value in the struct must make the encoder fail too */
    const char *expected; /* err after "runner protocol: " */
};

/* ---- sample messages ---- */

static inline struct runner_hello sample_hello(void) {
    /* The build travels first: 4 + 16 bytes before vocab_size. */
    struct runner_hello hello = {
        32000, 4096, 8, 512, 16, 1024, 2, "kjv2m-q8_0.gguf", "0.9.0 (git test)", 0, {0}};
    return hello;
}

/* A request and the arrays it points into; sample_add_init ties them together. */
struct sample_add {
    struct runner_request request;
    int prompt[5];
    int stop_newlines[2];
    int stop_period[1];
    struct runner_stop stops[2];
};

static inline void sample_add_init(struct sample_add *s) {
    const int prompt[5] = {1, 15043, 3186, 0, 2147483647};
    memset(s, 0, sizeof(*s));
    memcpy(s->prompt, prompt, sizeof(prompt));
    s->stop_newlines[0] = s->stop_newlines[1] = 13;
    s->stop_period[0] = 29889;
    s->stops[0] = (struct runner_stop){2, s->stop_newlines};
    s->stops[1] = (struct runner_stop){1, s->stop_period};
    struct runner_request *r = &s->request;
    r->id = 0xFEDCBA9876543210ull;
    r->sampling = (struct runner_sampling){
        0.7f, 40, 0.9f, 0.05f, 1.1f, 64, 0x0123456789ABCDEFull, 0.5f, -0.25f};
    r->max_tokens = 256;
    r->logprobs = 1;
    r->top_logprobs = 5;
    r->resumed = 2;
    r->ignore_eos = 1;
    r->n_prompt = 5;
    r->prompt = s->prompt;
    r->n_stops = 2;
    r->stops = s->stops;
}

static inline struct runner_token sample_token(int n_top) {
    struct runner_token token;
    memset(&token, 0, sizeof(token));
    token.id = 0x8000000000000001ull;
    token.token = 31999;
    token.logprob = -1.5e-3f;
    token.n_top = n_top;
    for (int i = 0; i < n_top; i++)
        token.top[i] = (struct runner_alternative){i * 1000 + 7, -0.25f * (float)i};
    return token;
}

static inline struct runner_heartbeat sample_heartbeat(void) {
    struct runner_heartbeat beat = {
        123456789012ull, 1000000000000ull, 1000000002500ull, 512, 7, 9, 7, 3, 100, 1024, 1.25f, 40};
    return beat;
}

#endif
