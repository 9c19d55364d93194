/* fuzz_runner_protocol.c -- libFuzzer harness for the runner protocol codec
 * (src/protocol/protocol.c). The input is read as a connection reads its byte
 * stream: runner_frame_next, the decoder of the frame's type, the next frame,
 * until the bytes run out or a frame is refused. Every decoded message is
 * encoded again; that frame must decode to the same values, and to the same
 * bytes unless a string was cut to fit its array. A refusal must come with a
 * one-line "runner protocol: " message, and a refused ADD must leave nothing
 * allocated (LeakSanitizer). Built by tests/fuzz/CMakeLists.txt when
 * LOCKSTEP_FUZZ=ON. */
#include "runner/runner.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Room for decoded ERROR messages: longer ones are cut. */
#define FUZZ_MESSAGE_SIZE 160

static void check_refusal(const char *err) {
    if (strncmp(err, "runner protocol: ", 17) != 0 || strchr(err, '\n') != NULL) abort();
}

static int same_float(float a, float b) {
    uint32_t x, y;
    memcpy(&x, &a, sizeof(x));
    memcpy(&y, &b, sizeof(y));
    return x == y;
}

/* The one frame the encoder left in out, which must be whole and of type. */
static struct runner_frame reframe(const struct runner_buffer *out, enum runner_message type) {
    struct runner_frame frame;
    char err[256];
    if (runner_frame_next(out->data, out->length, RUNNER_FRAME_MAX, &frame, err, sizeof(err)) !=
            1 ||
        frame.frame_length != out->length || frame.type != type)
        abort();
    return frame;
}

/* The re-encoding is the original frame byte for byte, or, when the message
 * carries a string that may have been cut, shorter. */
static void check_bytes(const struct runner_frame *frame, const struct runner_buffer *out,
                        int has_string) {
    const uint8_t *original = frame->payload - RUNNER_FRAME_HEADER;
    if (out->length == frame->frame_length) {
        if (memcmp(out->data, original, out->length) != 0) abort();
        return;
    }
    if (!has_string || out->length > frame->frame_length) abort();
}

static void check_hello(const struct runner_frame *frame, struct runner_buffer *out,
                        const struct runner_hello *a) {
    struct runner_hello b;
    char err[512];
    out->length = 0;
    if (runner_encode_hello(out, a, err, sizeof(err)) != 0) abort();
    struct runner_frame again = reframe(out, RUNNER_MSG_HELLO);
    if (runner_decode_hello(&again, &b, err, sizeof(err)) != 0) abort();
    if (a->vocab_size != b.vocab_size || a->context_length != b.context_length ||
        a->max_sequences != b.max_sequences || a->step_tokens != b.step_tokens ||
        a->kv_block_size != b.kv_block_size || a->kv_blocks_total != b.kv_blocks_total ||
        a->tensor_parallel != b.tensor_parallel || strcmp(a->model, b.model) != 0 ||
        strcmp(a->build, b.build) != 0 || a->has_challenge != b.has_challenge ||
        memcmp(a->challenge, b.challenge, sizeof(b.challenge)) != 0)
        abort();
    check_bytes(frame, out, 1);
}

static int same_tokens(const int *a, const int *b, int n) {
    return n == 0 || memcmp(a, b, (size_t)n * sizeof(int)) == 0;
}

static void check_add(const struct runner_frame *frame, struct runner_buffer *out,
                      const struct runner_request *a) {
    struct runner_request b;
    char err[512];
    out->length = 0;
    if (runner_encode_add(out, a, err, sizeof(err)) != 0) abort();
    struct runner_frame again = reframe(out, RUNNER_MSG_ADD);
    if (runner_decode_add(&again, &b, err, sizeof(err)) != 0) abort();
    const struct runner_sampling *x = &a->sampling, *y = &b.sampling;
    int same = a->id == b.id && same_float(x->temperature, y->temperature) &&
               x->top_k == y->top_k && same_float(x->top_p, y->top_p) &&
               same_float(x->min_p, y->min_p) && same_float(x->repeat_penalty, y->repeat_penalty) &&
               x->repeat_last_n == y->repeat_last_n && x->seed == y->seed &&
               a->max_tokens == b.max_tokens && a->logprobs == b.logprobs &&
               a->top_logprobs == b.top_logprobs && a->ignore_eos == b.ignore_eos &&
               a->n_prompt == b.n_prompt && a->n_stops == b.n_stops &&
               same_tokens(a->prompt, b.prompt, a->n_prompt);
    for (int i = 0; same && i < a->n_stops; i++)
        same = a->stops[i].n_tokens == b.stops[i].n_tokens &&
               same_tokens(a->stops[i].tokens, b.stops[i].tokens, a->stops[i].n_tokens);
    runner_request_free(&b);
    if (!same) abort();
    check_bytes(frame, out, 0);
}

static void check_token(const struct runner_frame *frame, struct runner_buffer *out,
                        const struct runner_token *a) {
    struct runner_token b;
    char err[512];
    out->length = 0;
    if (runner_encode_token(out, a, err, sizeof(err)) != 0) abort();
    struct runner_frame again = reframe(out, RUNNER_MSG_TOKEN);
    if (runner_decode_token(&again, &b, err, sizeof(err)) != 0) abort();
    if (a->id != b.id || a->token != b.token || !same_float(a->logprob, b.logprob) ||
        a->n_top != b.n_top)
        abort();
    for (int i = 0; i < a->n_top; i++)
        if (a->top[i].token != b.top[i].token || !same_float(a->top[i].logprob, b.top[i].logprob))
            abort();
    check_bytes(frame, out, 0);
}

static void check_finished(const struct runner_frame *frame, struct runner_buffer *out,
                           const struct runner_finished *a) {
    struct runner_finished b;
    char err[512];
    out->length = 0;
    if (runner_encode_finished(out, a, err, sizeof(err)) != 0) abort();
    struct runner_frame again = reframe(out, RUNNER_MSG_FINISHED);
    if (runner_decode_finished(&again, &b, err, sizeof(err)) != 0) abort();
    if (a->id != b.id || a->reason != b.reason || a->n_prompt != b.n_prompt ||
        a->n_generated != b.n_generated || strcmp(a->message, b.message) != 0 ||
        strcmp(runner_finish_reason_name(a->reason), "unknown") == 0)
        abort();
    check_bytes(frame, out, 1);
}

static void check_heartbeat(const struct runner_frame *frame, struct runner_buffer *out,
                            const struct runner_heartbeat *a) {
    struct runner_heartbeat b;
    char err[512];
    out->length = 0;
    if (runner_encode_heartbeat(out, a, err, sizeof(err)) != 0) abort();
    struct runner_frame again = reframe(out, RUNNER_MSG_HEARTBEAT);
    if (runner_decode_heartbeat(&again, &b, err, sizeof(err)) != 0) abort();
    if (a->step != b.step || a->start_us != b.start_us || a->end_us != b.end_us ||
        a->n_tokens != b.n_tokens || a->n_decode != b.n_decode || a->n_sequences != b.n_sequences ||
        a->n_running != b.n_running || a->n_waiting != b.n_waiting ||
        a->kv_blocks_used != b.kv_blocks_used || a->kv_blocks_total != b.kv_blocks_total ||
        !same_float(a->comm_ms, b.comm_ms))
        abort();
    check_bytes(frame, out, 0);
}

static void check_cancel(const struct runner_frame *frame, struct runner_buffer *out, uint64_t a) {
    uint64_t b;
    char err[512];
    out->length = 0;
    if (runner_encode_cancel(out, a, err, sizeof(err)) != 0) abort();
    struct runner_frame again = reframe(out, RUNNER_MSG_CANCEL);
    if (runner_decode_cancel(&again, &b, err, sizeof(err)) != 0 || a != b) abort();
    check_bytes(frame, out, 0);
}

static void check_error(const struct runner_frame *frame, struct runner_buffer *out,
                        enum runner_error_category category, const char *a) {
    char b[FUZZ_MESSAGE_SIZE], err[512];
    enum runner_error_category again_category;
    out->length = 0;
    if (runner_encode_error(out, category, a, err, sizeof(err)) != 0) abort();
    struct runner_frame again = reframe(out, RUNNER_MSG_ERROR);
    if (runner_decode_error(&again, &again_category, b, sizeof(b), err, sizeof(err)) != 0 ||
        strcmp(a, b) != 0 || again_category != category)
        abort();
    check_bytes(frame, out, 1);
}

static void check_fault(const struct runner_frame *frame, struct runner_buffer *out,
                        const struct runner_fault *a) {
    struct runner_fault b;
    char err[512];
    out->length = 0;
    if (runner_encode_fault(out, a, err, sizeof(err)) != 0) abort();
    struct runner_frame again = reframe(out, RUNNER_MSG_FAULT);
    if (runner_decode_fault(&again, &b, err, sizeof(err)) != 0 || a->kind != b.kind ||
        a->rank != b.rank || a->delay_ms != b.delay_ms || a->steps != b.steps)
        abort();
    check_bytes(frame, out, 0);
}

static void check_auth(const struct runner_frame *frame, struct runner_buffer *out,
                       const struct runner_auth *a) {
    struct runner_auth b;
    char err[512];
    out->length = 0;
    if (runner_encode_auth(out, a, err, sizeof(err)) != 0) abort();
    struct runner_frame again = reframe(out, RUNNER_MSG_AUTH);
    if (runner_decode_auth(&again, &b, err, sizeof(err)) != 0 || memcmp(a, &b, sizeof(b)) != 0)
        abort();
    check_bytes(frame, out, 0);
}

static void check_embedding(const struct runner_frame *frame, struct runner_buffer *out,
                            const struct runner_embedding *a) {
    struct runner_embedding b;
    char err[512];
    out->length = 0;
    if (runner_encode_embedding(out, a, err, sizeof(err)) != 0) abort();
    struct runner_frame again = reframe(out, RUNNER_MSG_EMBEDDING);
    if (runner_decode_embedding(&again, &b, err, sizeof(err)) != 0 || a->id != b.id ||
        a->n != b.n || memcmp(a->values, b.values, (size_t)a->n * sizeof(float)) != 0)
        abort();
    free(b.values);
    check_bytes(frame, out, 0);
}

/* Decodes one frame and checks its re-encoding; -1 if the decoder refused it. */
static int fuzz_frame(const struct runner_frame *frame, struct runner_buffer *out) {
    char err[512] = "";
    int rc = -1;
    switch (frame->type) {
    case RUNNER_MSG_HELLO: {
        struct runner_hello hello;
        if ((rc = runner_decode_hello(frame, &hello, err, sizeof(err))) == 0)
            check_hello(frame, out, &hello);
        break;
    }
    case RUNNER_MSG_ADD: {
        struct runner_request request;
        rc = runner_decode_add(frame, &request, err, sizeof(err));
        if (rc != 0 && (request.prompt != NULL || request.stops != NULL)) abort();
        if (rc == 0) check_add(frame, out, &request);
        runner_request_free(&request);
        break;
    }
    case RUNNER_MSG_CANCEL: {
        uint64_t id;
        if ((rc = runner_decode_cancel(frame, &id, err, sizeof(err))) == 0)
            check_cancel(frame, out, id);
        break;
    }
    case RUNNER_MSG_TOKEN: {
        struct runner_token token;
        if ((rc = runner_decode_token(frame, &token, err, sizeof(err))) == 0)
            check_token(frame, out, &token);
        break;
    }
    case RUNNER_MSG_FINISHED: {
        struct runner_finished finished;
        if ((rc = runner_decode_finished(frame, &finished, err, sizeof(err))) == 0)
            check_finished(frame, out, &finished);
        break;
    }
    case RUNNER_MSG_HEARTBEAT: {
        struct runner_heartbeat heartbeat;
        if ((rc = runner_decode_heartbeat(frame, &heartbeat, err, sizeof(err))) == 0)
            check_heartbeat(frame, out, &heartbeat);
        break;
    }
    case RUNNER_MSG_ERROR: {
        char message[FUZZ_MESSAGE_SIZE];
        enum runner_error_category category;
        if ((rc = runner_decode_error(frame, &category, message, sizeof(message), err,
                                      sizeof(err))) == 0)
            check_error(frame, out, category, message);
        break;
    }
    case RUNNER_MSG_FAULT: {
        struct runner_fault fault;
        if ((rc = runner_decode_fault(frame, &fault, err, sizeof(err))) == 0)
            check_fault(frame, out, &fault);
        break;
    }
    case RUNNER_MSG_AUTH: {
        struct runner_auth auth;
        if ((rc = runner_decode_auth(frame, &auth, err, sizeof(err))) == 0)
            check_auth(frame, out, &auth);
        break;
    }
    case RUNNER_MSG_EMBEDDING: {
        struct runner_embedding embedding;
        if ((rc = runner_decode_embedding(frame, &embedding, err, sizeof(err))) == 0) {
            check_embedding(frame, out, &embedding);
            free(embedding.values);
        }
        break;
    }
    default:
        abort(); /* runner_frame_next only returns known types */
    }
    if (rc != 0) check_refusal(err);
    return rc;
}

/* What runner_frame_next reported is inside the bytes, and the limit and
 * every shorter read behave as specified. */
static void check_frame(const uint8_t *data, size_t size, const struct runner_frame *frame) {
    struct runner_frame other;
    char err[512] = "";
    if (frame->frame_length != RUNNER_FRAME_HEADER + frame->payload_length ||
        frame->frame_length > size || frame->payload != data + RUNNER_FRAME_HEADER)
        abort();
    if (frame->payload_length > 0) {
        if (runner_frame_next(data, size, frame->payload_length - 1, &other, err, sizeof(err)) !=
            -1)
            abort();
        check_refusal(err);
    }
    if (runner_frame_next(data, frame->frame_length - 1, RUNNER_FRAME_MAX, &other, err,
                          sizeof(err)) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct runner_buffer out = {0};
    size_t at = 0;
    if (size == 0) return 0; /* nothing to read, and data may be NULL */
    for (;;) {
        struct runner_frame frame;
        char err[512] = "";
        int rc =
            runner_frame_next(data + at, size - at, RUNNER_FRAME_MAX, &frame, err, sizeof(err));
        if (rc == 0) break;
        if (rc != 1) {
            check_refusal(err);
            break;
        }
        check_frame(data + at, size - at, &frame);
        if (fuzz_frame(&frame, &out) != 0) break;
        at += frame.frame_length;
    }
    runner_buffer_free(&out);
    return 0;
}
