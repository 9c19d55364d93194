/* test_runner_protocol.c -- the runner protocol codec (src/protocol/protocol.c):
 * every message round-trips field by field; two frames match bytes written
 * out by hand; every validation rule refuses its bad value, in the decoder
 * (a valid frame with one field patched) and in the encoder (the same value
 * in the struct), with the exact message naming the field (in
 * test_runner_protocol_rules.c); truncated
 * payloads, trailing bytes and bad headers are refused; frames are found
 * whole in a byte stream (every prefix is incomplete, frames back to back);
 * strings are cut to the struct's array before a whole UTF-8 character; the
 * frames in tests/fuzz/corpus-runner are valid. Leaks show under ASan. */
#include "runner_protocol_check.h"

#include <dirent.h>
#include <math.h>

/* ---- round trips ---- */

static void check_same_request(const struct runner_request *a, const struct runner_request *b) {
    CHECK(a->id == b->id);
    CHECK(same_float(a->sampling.temperature, b->sampling.temperature));
    CHECK(a->sampling.top_k == b->sampling.top_k);
    CHECK(same_float(a->sampling.top_p, b->sampling.top_p));
    CHECK(same_float(a->sampling.min_p, b->sampling.min_p));
    CHECK(same_float(a->sampling.repeat_penalty, b->sampling.repeat_penalty));
    CHECK(a->sampling.repeat_last_n == b->sampling.repeat_last_n);
    CHECK(a->sampling.seed == b->sampling.seed);
    CHECK(a->max_tokens == b->max_tokens && a->logprobs == b->logprobs);
    CHECK(a->top_logprobs == b->top_logprobs && a->ignore_eos == b->ignore_eos);
    CHECK(a->resumed == b->resumed);
    CHECK(a->n_prompt == b->n_prompt && a->n_stops == b->n_stops);
    CHECK(a->n_biases == b->n_biases);
    for (int i = 0; i < a->n_biases && a->n_biases == b->n_biases; i++)
        CHECK(a->biases[i].token == b->biases[i].token &&
              same_float(a->biases[i].bias, b->biases[i].bias));
    CHECK(a->grammar == NULL ? b->grammar == NULL
                             : b->grammar != NULL && strcmp(a->grammar, b->grammar) == 0);
    CHECK(a->grammar_trigger == NULL
              ? b->grammar_trigger == NULL
              : b->grammar_trigger != NULL && strcmp(a->grammar_trigger, b->grammar_trigger) == 0);
    if (a->n_prompt != b->n_prompt || a->n_stops != b->n_stops) return;
    CHECK(memcmp(a->prompt, b->prompt, (size_t)a->n_prompt * sizeof(int)) == 0);
    for (int i = 0; i < a->n_stops; i++) {
        CHECK(a->stops[i].n_tokens == b->stops[i].n_tokens);
        if (a->stops[i].n_tokens == b->stops[i].n_tokens)
            CHECK(memcmp(a->stops[i].tokens, b->stops[i].tokens,
                         (size_t)a->stops[i].n_tokens * sizeof(int)) == 0);
    }
}

static void round_trip_request(const struct runner_request *request) {
    struct runner_buffer buffer = {0};
    struct runner_request decoded;
    CHECK_MSG(runner_encode_add(&buffer, request, err, sizeof(err)) == 0, "%s", err);
    struct runner_frame frame = only_frame(&buffer);
    CHECK(frame.type == RUNNER_MSG_ADD);
    CHECK_MSG(runner_decode_add(&frame, &decoded, err, sizeof(err)) == 0, "%s", err);
    check_same_request(request, &decoded);
    runner_request_free(&decoded);
    CHECK(decoded.prompt == NULL && decoded.stops == NULL);
    runner_buffer_free(&buffer);
}

static void test_round_trip_add(void) {
    struct sample_add s;
    sample_add_init(&s);
    round_trip_request(&s.request);

    /* logit biases at their bounds, and a grammar with every byte but NUL */
    static struct runner_bias biases[RUNNER_BIASES_MAX];
    static char grammar[300];
    for (int i = 0; i < RUNNER_BIASES_MAX; i++)
        biases[i] = (struct runner_bias){i * 401, i % 2 ? -RUNNER_BIAS_LIMIT : RUNNER_BIAS_LIMIT};
    for (int i = 0; i < 255; i++) grammar[i] = (char)(i + 1);
    s.request.n_biases = RUNNER_BIASES_MAX;
    s.request.biases = biases;
    s.request.grammar = grammar;
    round_trip_request(&s.request);
    char trigger[RUNNER_TRIGGER_MAX + 1];
    memset(trigger, 'T', RUNNER_TRIGGER_MAX);
    trigger[RUNNER_TRIGGER_MAX] = '\0';
    s.request.grammar_trigger = trigger;
    round_trip_request(&s.request);
    sample_add_init(&s);

    /* Every bound that is allowed: 16 stops of 64 tokens, edge sampling values. */
    static int stop_tokens[RUNNER_STOPS_MAX][RUNNER_STOP_TOKENS_MAX];
    struct runner_stop stops[RUNNER_STOPS_MAX];
    for (int i = 0; i < RUNNER_STOPS_MAX; i++) {
        for (int j = 0; j < RUNNER_STOP_TOKENS_MAX; j++) stop_tokens[i][j] = i * 100 + j;
        stops[i] = (struct runner_stop){RUNNER_STOP_TOKENS_MAX, stop_tokens[i]};
    }
    int prompt[1] = {0};
    struct runner_request edge = {.sampling = {0.0f, 0, 1.0f, 1.0f, 1e-30f, 0, 0, -2.0f, 2.0f},
                                  .max_tokens = 2147483647,
                                  .top_logprobs = RUNNER_TOP_LOGPROBS_MAX,
                                  .n_prompt = 1,
                                  .prompt = prompt,
                                  .n_stops = RUNNER_STOPS_MAX,
                                  .stops = stops};
    round_trip_request(&edge);
    edge.sampling.min_p = -0.0f; /* -0 is in [0, 1] and keeps its sign bit */
    edge.sampling.temperature = 1e6f;
    edge.logprobs = 1;
    round_trip_request(&edge);
}

static void test_round_trip_others(void) {
    struct runner_buffer buffer = {0};
    struct runner_frame frame;

    struct runner_hello hello = sample_hello(), hello_out;
    CHECK(runner_encode_hello(&buffer, &hello, err, sizeof(err)) == 0);
    frame = only_frame(&buffer);
    CHECK(frame.type == RUNNER_MSG_HELLO);
    CHECK_MSG(runner_decode_hello(&frame, &hello_out, err, sizeof(err)) == 0, "%s", err);
    CHECK(hello_out.vocab_size == 32000 && hello_out.context_length == 4096);
    CHECK(hello_out.max_sequences == 8 && hello_out.step_tokens == 512);
    CHECK(hello_out.kv_block_size == 16 && hello_out.kv_blocks_total == 1024);
    CHECK(hello_out.tensor_parallel == 2 && strcmp(hello_out.model, "kjv2m-q8_0.gguf") == 0);
    CHECK(strcmp(hello_out.build, "0.9.0 (git test)") == 0);

    const uint64_t ids[] = {0, 42, UINT64_MAX};
    for (int i = 0; i < 3; i++) {
        uint64_t id = 1;
        buffer.length = 0;
        CHECK(runner_encode_cancel(&buffer, ids[i], err, sizeof(err)) == 0);
        frame = only_frame(&buffer);
        CHECK(frame.type == RUNNER_MSG_CANCEL && frame.payload_length == 8);
        CHECK(runner_decode_cancel(&frame, &id, err, sizeof(err)) == 0 && id == ids[i]);
    }

    for (int n_top = 0; n_top <= RUNNER_TOP_LOGPROBS_MAX; n_top += RUNNER_TOP_LOGPROBS_MAX) {
        struct runner_token token = sample_token(n_top), token_out;
        buffer.length = 0;
        CHECK(runner_encode_token(&buffer, &token, err, sizeof(err)) == 0);
        frame = only_frame(&buffer);
        CHECK(frame.type == RUNNER_MSG_TOKEN);
        CHECK_MSG(runner_decode_token(&frame, &token_out, err, sizeof(err)) == 0, "%s", err);
        CHECK(token_out.id == token.id && token_out.token == 31999);
        CHECK(same_float(token_out.logprob, -1.5e-3f) && token_out.n_top == n_top);
        for (int i = 0; i < n_top; i++)
            CHECK(token_out.top[i].token == i * 1000 + 7 &&
                  same_float(token_out.top[i].logprob, -0.25f * (float)i));
    }

    for (int reason = RUNNER_FINISH_EOS; reason <= RUNNER_FINISH_ERROR; reason++) {
        struct runner_finished finished = {
            (uint64_t)reason << 40, reason, 17, 3 * reason, "", 0, 16};
        struct runner_finished finished_out;
        if (reason == RUNNER_FINISH_ERROR) {
            snprintf(finished.message, sizeof(finished.message), "context full: 4096 positions");
            finished.category = RUNNER_ERROR_OVER_CAPACITY;
        }
        buffer.length = 0;
        CHECK(runner_encode_finished(&buffer, &finished, err, sizeof(err)) == 0);
        frame = only_frame(&buffer);
        CHECK(frame.type == RUNNER_MSG_FINISHED);
        CHECK_MSG(runner_decode_finished(&frame, &finished_out, err, sizeof(err)) == 0, "%s", err);
        CHECK(finished_out.id == finished.id && finished_out.reason == finished.reason);
        CHECK(finished_out.n_prompt == 17 && finished_out.n_generated == 3 * reason);
        CHECK(finished_out.category == finished.category && finished_out.n_cached == 16);
        CHECK(strcmp(finished_out.message, finished.message) == 0);
    }

    struct runner_heartbeat beat = sample_heartbeat(), beat_out;
    buffer.length = 0;
    CHECK(runner_encode_heartbeat(&buffer, &beat, err, sizeof(err)) == 0);
    frame = only_frame(&buffer);
    CHECK(frame.type == RUNNER_MSG_HEARTBEAT && frame.payload_length == 60);
    CHECK_MSG(runner_decode_heartbeat(&frame, &beat_out, err, sizeof(err)) == 0, "%s", err);
    CHECK(beat_out.step == 123456789012ull && beat_out.start_us == 1000000000000ull);
    CHECK(beat_out.end_us == 1000000002500ull && beat_out.n_tokens == 512);
    CHECK(beat_out.n_decode == 7 && beat_out.n_sequences == 9 && beat_out.n_running == 7);
    CHECK(beat_out.n_waiting == 3 && beat_out.kv_blocks_used == 100);
    CHECK(beat_out.kv_blocks_total == 1024 && same_float(beat_out.comm_ms, 1.25f));
    CHECK(beat_out.kv_blocks_cached == 40);

    char message[64];
    buffer.length = 0;
    CHECK(runner_encode_error(&buffer, RUNNER_ERROR_INTERNAL, "model file kjv2m.gguf: bad tensor",
                              err, sizeof(err)) == 0);
    frame = only_frame(&buffer);
    CHECK(frame.type == RUNNER_MSG_ERROR);
    enum runner_error_category category;
    CHECK(runner_decode_error(&frame, &category, message, sizeof(message), err, sizeof(err)) == 0);
    CHECK(category == RUNNER_ERROR_INTERNAL);
    CHECK(strcmp(message, "model file kjv2m.gguf: bad tensor") == 0);
    runner_buffer_free(&buffer);
}

/* ---- exact bytes ---- */

static void check_bytes(const struct runner_buffer *buffer, const uint8_t *expected, size_t n) {
    CHECK_MSG(buffer->length == n, "%zu bytes, expected %zu", buffer->length, n);
    for (size_t i = 0; i < n && i < buffer->length; i++)
        CHECK_MSG(buffer->data[i] == expected[i], "byte %zu: 0x%02x, expected 0x%02x", i,
                  buffer->data[i], expected[i]);
}

static void test_exact_bytes(void) {
    struct runner_buffer buffer = {0};
    struct runner_token token = sample_token(1);
    token.id = 0x0102030405060708ull;
    token.token = 300;
    token.logprob = -0.5f;
    token.top[0] = (struct runner_alternative){5, -1.0f};
    static const uint8_t token_frame[] = {
        0x1C, 0x00, 0x00, 0x00, 0x06, 0x04, 0x00, 0x00, /* 28-byte payload, version 6, TOKEN */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* id */
        0x2C, 0x01, 0x00, 0x00,                         /* token 300 */
        0x00, 0x00, 0x00, 0xBF,                         /* logprob -0.5 */
        0x01, 0x00, 0x00, 0x00,                         /* n_top 1 */
        0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0xBF, /* top[0]: token 5, logprob -1 */
    };
    CHECK(runner_encode_token(&buffer, &token, err, sizeof(err)) == 0);
    check_bytes(&buffer, token_frame, sizeof(token_frame));

    static const uint8_t error_frame[] = {0x0A, 0x00, 0x00, 0x00, 0x06, 0x07,
                                          0x00, 0x00, 0x02, 0x00, 0x00, 0x00, /* over capacity */
                                          0x02, 0x00, 0x00, 0x00, 'h',  'i'};
    buffer.length = 0;
    CHECK(runner_encode_error(&buffer, RUNNER_ERROR_OVER_CAPACITY, "hi", err, sizeof(err)) == 0);
    check_bytes(&buffer, error_frame, sizeof(error_frame));
    runner_buffer_free(&buffer);
}

/* ---- embeddings ---- */

/* EMBEDDING's bytes, its round trip, its refusals; the poolings' names and
 * the one normalization. */
static void test_embedding(void) {
    struct runner_buffer buffer = {0};
    float values[2] = {-0.5f, 2.0f};
    struct runner_embedding e = {0x0102030405060708ull, 2, values}, back;
    static const uint8_t bytes[] = {
        0x14, 0x00, 0x00, 0x00, 0x06, 0x0A, 0x00, 0x00, /* 20-byte payload, version 6, EMBEDDING */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* id */
        0x02, 0x00, 0x00, 0x00,                         /* n 2 */
        0x00, 0x00, 0x00, 0xBF, 0x00, 0x00, 0x00, 0x40, /* -0.5, 2 */
    };
    CHECK(runner_encode_embedding(&buffer, &e, err, sizeof(err)) == 0);
    check_bytes(&buffer, bytes, sizeof(bytes));
    struct runner_frame frame = only_frame(&buffer);
    CHECK(runner_decode_embedding(&frame, &back, err, sizeof(err)) == 0);
    CHECK(back.id == e.id && back.n == 2 && back.values[0] == -0.5f && back.values[1] == 2.0f);
    free(back.values);
    /* n 3 with two values' bytes; n 0; a NaN */
    CHECK_FAILS(decode_patched(&buffer, 8, 3), "EMBEDDING: n 3 needs 12 bytes, 8 left");
    CHECK_FAILS(decode_patched(&buffer, 8, 0), "EMBEDDING: n 0 out of range [1, 65536]");
    CHECK_FAILS(decode_patched(&buffer, 12, 0x7FC00000u), "EMBEDDING: values[0] is not finite");
    values[1] = INFINITY;
    buffer.length = 0;
    CHECK_FAILS(runner_encode_embedding(&buffer, &e, err, sizeof(err)),
                "EMBEDDING: values[1] is not finite");
    CHECK(buffer.length == 0);
    runner_buffer_free(&buffer);

    enum runner_pooling pooling = RUNNER_POOLING_NONE;
    CHECK(runner_pooling_parse("last", &pooling) == 0 && pooling == RUNNER_POOLING_LAST);
    CHECK(runner_pooling_parse("cls", &pooling) == 0 && pooling == RUNNER_POOLING_CLS);
    CHECK(runner_pooling_parse("none", &pooling) == -1 && pooling == RUNNER_POOLING_CLS);
    CHECK(strcmp(runner_pooling_name(RUNNER_POOLING_MEAN), "mean") == 0);
    float v[3] = {3.0f, 0.0f, -4.0f}, zero[2] = {0.0f, 0.0f};
    runner_embedding_normalize(v, 3);
    CHECK(v[0] == 0.6f && v[1] == 0.0f && v[2] == -0.8f);
    runner_embedding_normalize(zero, 2);
    CHECK(zero[0] == 0.0f && zero[1] == 0.0f);
}

/* ---- finding frames ---- */

/* One frame of every type, in the order of their numbers, appended to stream. */
static void encode_every_type(struct runner_buffer *stream) {
    struct sample_add s;
    sample_add_init(&s);
    struct runner_hello hello = sample_hello();
    struct runner_token token = sample_token(3);
    struct runner_finished finished = {9,      RUNNER_FINISH_ERROR,      5, 2,
                                       "oops", RUNNER_ERROR_BAD_REQUEST, 1};
    struct runner_heartbeat beat = sample_heartbeat();
    CHECK(runner_encode_hello(stream, &hello, err, sizeof(err)) == 0);
    CHECK(runner_encode_add(stream, &s.request, err, sizeof(err)) == 0);
    CHECK(runner_encode_cancel(stream, 7, err, sizeof(err)) == 0);
    CHECK(runner_encode_token(stream, &token, err, sizeof(err)) == 0);
    CHECK(runner_encode_finished(stream, &finished, err, sizeof(err)) == 0);
    CHECK(runner_encode_heartbeat(stream, &beat, err, sizeof(err)) == 0);
    CHECK(runner_encode_error(stream, RUNNER_ERROR_INTERNAL, "bye", err, sizeof(err)) == 0);
    struct runner_fault fault = {RUNNER_FAULT_DELAY, 1, 10, 5};
    CHECK(runner_encode_fault(stream, &fault, err, sizeof(err)) == 0);
    struct runner_auth auth;
    memset(&auth, 0xA5, sizeof(auth));
    CHECK(runner_encode_auth(stream, &auth, err, sizeof(err)) == 0);
    float values[3] = {1.0f, -0.5f, 0.25f};
    struct runner_embedding embedding = {11, 3, values};
    CHECK(runner_encode_embedding(stream, &embedding, err, sizeof(err)) == 0);
}

static void test_stream(void) {
    struct runner_buffer stream = {0};
    encode_every_type(&stream);

    /* Back to back: each frame is found whole, in order, and every prefix of
     * it (with nothing after) is incomplete. */
    size_t at = 0;
    int n_frames = 0;
    while (at < stream.length) {
        struct runner_frame frame;
        int rc = runner_frame_next(stream.data + at, stream.length - at, RUNNER_FRAME_MAX, &frame,
                                   err, sizeof(err));
        CHECK_MSG(rc == 1, "frame %d: rc %d (%s)", n_frames, rc, err);
        if (rc != 1) break;
        n_frames++;
        CHECK(frame.type == (enum runner_message)n_frames);
        CHECK(frame.payload == stream.data + at + RUNNER_FRAME_HEADER);
        CHECK(frame.frame_length == RUNNER_FRAME_HEADER + frame.payload_length);
        CHECK_MSG(decode_any(&frame) == 0, "%s", err);
        for (size_t n = 0; n < frame.frame_length; n++) {
            struct runner_frame partial;
            CHECK_MSG(runner_frame_next(stream.data + at, n, RUNNER_FRAME_MAX, &partial, err,
                                        sizeof(err)) == 0,
                      "frame %d prefix %zu", n_frames, n);
        }
        at += frame.frame_length;
    }
    CHECK(n_frames == RUNNER_MSG_EMBEDDING && at == stream.length);

    /* Consuming from the buffer as a reader would. */
    n_frames = 0;
    struct runner_frame frame;
    while (runner_frame_next(stream.data, stream.length, RUNNER_FRAME_MAX, &frame, err,
                             sizeof(err)) == 1) {
        n_frames++;
        runner_buffer_consume(&stream, frame.frame_length);
    }
    CHECK(n_frames == RUNNER_MSG_EMBEDDING && stream.length == 0);
    runner_buffer_free(&stream);
}

static void test_header_errors(void) {
    struct runner_buffer buffer = {0};
    struct runner_frame frame;
    CHECK(runner_encode_cancel(&buffer, 1, err, sizeof(err)) == 0);
    uint8_t bytes[16];
    memcpy(bytes, buffer.data, sizeof(bytes));
    const struct {
        size_t offset;
        uint8_t value;
        const char *expected;
    } cases[] = {
        {4, 1, "header: version 1, expected 6"},
        {4, 0, "header: version 0, expected 6"},
        {5, 0, "header: type 0 is not a known message (1..10)"},
        {5, 11, "header: type 11 is not a known message (1..10)"},
        {6, 1, "header: reserved field 0x0001 is not zero"},
        {7, 0x80, "header: reserved field 0x8000 is not zero"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t bad[16];
        memcpy(bad, bytes, sizeof(bad));
        bad[cases[i].offset] = cases[i].value;
        /* The header alone is enough to refuse the frame. */
        CHECK_FAILS(
            runner_frame_next(bad, RUNNER_FRAME_HEADER, RUNNER_FRAME_MAX, &frame, err, sizeof(err)),
            cases[i].expected);
    }
    CHECK_FAILS(runner_frame_next(bytes, sizeof(bytes), 7, &frame, err, sizeof(err)),
                "header: CANCEL payload of 8 bytes exceeds the limit of 7");
    CHECK(runner_frame_next(bytes, sizeof(bytes), 8, &frame, err, sizeof(err)) == 1);
    put_u32(bytes, 0xFFFFFFFFu);
    CHECK_FAILS(
        runner_frame_next(bytes, RUNNER_FRAME_HEADER, RUNNER_FRAME_MAX, &frame, err, sizeof(err)),
        "header: CANCEL payload of 4294967295 bytes exceeds the limit of 4194304");
    CHECK(runner_frame_next(bytes, 0, RUNNER_FRAME_MAX, &frame, err, sizeof(err)) == 0);
    runner_buffer_free(&buffer);
}

/* Every strict prefix of every payload is refused by its decoder (read from
 * an exact-size copy, so ASan sees any read past the end), and so is the
 * payload with one byte more; a decoder refuses a frame of another type. */
static void test_truncated_and_trailing(void) {
    struct runner_buffer stream = {0};
    encode_every_type(&stream);
    const char *last_field[] = {"",        "challenge", "prompt", "id",  "top",   "message",
                                "comm_ms", "message",   "steps",  "mac", "values"};
    struct runner_frame frame;
    for (size_t at = 0; runner_frame_next(stream.data + at, stream.length - at, RUNNER_FRAME_MAX,
                                          &frame, err, sizeof(err)) == 1;
         at += frame.frame_length) {
        const char *name = last_field[frame.type];
        for (size_t n = 0; n <= frame.payload_length + 1; n++) {
            if (n == frame.payload_length) continue;
            uint8_t *copy = malloc(n > 0 ? n : 1);
            memcpy(copy, frame.payload, n < frame.payload_length ? n : frame.payload_length);
            if (n > frame.payload_length) copy[frame.payload_length] = 0xEE;
            struct runner_frame cut = frame;
            cut.payload = copy;
            cut.payload_length = n;
            err[0] = '\0';
            CHECK_MSG(decode_any(&cut) == -1 && strncmp(err, "runner protocol: ", 17) == 0,
                      "type %d, payload %zu of %zu: err '%s'", frame.type, n, frame.payload_length,
                      err);
            if (n > frame.payload_length) {
                char expected[128];
                snprintf(expected, sizeof(expected), "1 trailing byte after %s, the last field",
                         name);
                CHECK_MSG(strstr(err, expected) != NULL, "err '%s'", err);
            }
            free(copy);
        }
    }
    struct runner_token token_out;
    CHECK(runner_frame_next(stream.data, stream.length, RUNNER_FRAME_MAX, &frame, err,
                            sizeof(err)) == 1);
    CHECK_FAILS(runner_decode_token(&frame, &token_out, err, sizeof(err)),
                "TOKEN: cannot decode a HELLO frame");
    runner_buffer_free(&stream);
}

/* ---- strings ---- */

/* A frame made by hand: a header for type, then n payload bytes. */
static struct runner_frame hand_frame(uint8_t *bytes, int type, size_t n) {
    struct runner_frame frame;
    put_u32(bytes, (uint32_t)n);
    bytes[4] = RUNNER_PROTOCOL_VERSION;
    bytes[5] = (uint8_t)type;
    bytes[6] = bytes[7] = 0;
    CHECK(runner_frame_next(bytes, RUNNER_FRAME_HEADER + n, RUNNER_FRAME_MAX, &frame, err,
                            sizeof(err)) == 1);
    return frame;
}

/* A FINISHED frame whose message is text; returns the decoded message length. */
static size_t finished_message_length(const char *text, char *message) {
    static uint8_t bytes[RUNNER_FRAME_HEADER + 32 + 400];
    size_t n = strlen(text);
    uint8_t *payload = bytes + RUNNER_FRAME_HEADER;
    memset(payload, 0, 32);
    put_u32(payload + 8, RUNNER_FINISH_ERROR);
    put_u32(payload + 28, (uint32_t)n);
    for (size_t i = 0; i < n; i++) payload[32 + i] = (uint8_t)text[i]; /* no terminator */
    struct runner_frame frame = hand_frame(bytes, RUNNER_MSG_FINISHED, 32 + n);
    struct runner_finished finished;
    CHECK_MSG(runner_decode_finished(&frame, &finished, err, sizeof(err)) == 0, "%s", err);
    strcpy(message, finished.message);
    return strlen(finished.message);
}

static void test_strings(void) {
    char text[400], message[200];
    /* Longer than the 200-byte array: cut to 199 bytes and terminated. */
    memset(text, 'a', 300);
    text[300] = '\0';
    CHECK(finished_message_length(text, message) == 199 && message[198] == 'a');
    /* A 2-byte character across the cut is left out whole... */
    memset(text, 'a', 198);
    strcpy(text + 198, "\xc3\xa9"
                       "b");
    CHECK(finished_message_length(text, message) == 198);
    /* ...one that ends at the cut is kept... */
    memset(text, 'a', 197);
    strcpy(text + 197, "\xc3\xa9"
                       "bb");
    CHECK(finished_message_length(text, message) == 199 && strcmp(message + 197, "\xc3\xa9") == 0);
    /* ...and so is one that fits exactly. */
    text[199] = '\0';
    CHECK(finished_message_length(text, message) == 199);
    /* A 4-byte character across the cut. */
    memset(text, 'a', 197);
    strcpy(text + 197, "\xf0\x9f\x98\x80");
    CHECK(finished_message_length(text, message) == 197);

    /* The model name is cut to 127 bytes (after an empty build). */
    static uint8_t bytes[RUNNER_FRAME_HEADER + 36 + 300 + 4]; /* no challenge */
    uint8_t *payload = bytes + RUNNER_FRAME_HEADER;
    put_u32(payload, 0);
    for (int i = 1; i < 8; i++) put_u32(payload + 4 * i, 1);
    put_u32(payload + 32, 300);
    memset(payload + 36, 'm', 300);
    struct runner_frame frame = hand_frame(bytes, RUNNER_MSG_HELLO, 36 + 300 + 4);
    struct runner_hello hello;
    CHECK_MSG(runner_decode_hello(&frame, &hello, err, sizeof(err)) == 0, "%s", err);
    CHECK(strlen(hello.model) == 127 && hello.model[0] == 'm');

    /* ERROR: cut to the caller's buffer; NUL bytes refused; no buffer at all is fine. */
    struct runner_buffer buffer = {0};
    char small[4];
    CHECK(runner_encode_error(&buffer, RUNNER_ERROR_INTERNAL, "hello", err, sizeof(err)) == 0);
    frame = only_frame(&buffer);
    CHECK(runner_decode_error(&frame, NULL, small, sizeof(small), err, sizeof(err)) == 0);
    CHECK(strcmp(small, "hel") == 0);
    CHECK(runner_decode_error(&frame, NULL, NULL, 0, err, sizeof(err)) == 0);
    CHECK_FAILS(decode_patched(&buffer, 8, 0x006C6568u),
                "ERROR: message has a NUL byte at offset 3");
    CHECK_FAILS(decode_patched(&buffer, 4, 4),
                "ERROR: 1 trailing byte after message, the last field");
    CHECK_FAILS(decode_patched(&buffer, 0, 4), "ERROR: category 4 out of range [0, 3]");
    CHECK_FAILS(runner_encode_error(&buffer, (enum runner_error_category)7, "x", err, sizeof(err)),
                "ERROR: category 7 out of range [0, 3]");
    CHECK_FAILS(runner_encode_error(&buffer, RUNNER_ERROR_INTERNAL, NULL, err, sizeof(err)),
                "ERROR: message is NULL");
    runner_buffer_free(&buffer);
}

/* The encoders refuse a payload the default receiver would refuse. */
static void test_frame_limit(void) {
    struct runner_buffer buffer = {0};
    struct sample_add s;
    sample_add_init(&s);
    /* 84 fixed bytes without stops, biases or grammar, then 4 per prompt token. */
    int n_fit = (int)((RUNNER_FRAME_MAX - 84) / 4);
    int *prompt = calloc((size_t)n_fit + 1, sizeof(int));
    s.request.prompt = prompt;
    s.request.n_stops = 0;
    s.request.n_prompt = n_fit + 1;
    CHECK_FAILS(runner_encode_add(&buffer, &s.request, err, sizeof(err)),
                "ADD: payload of 4194308 bytes exceeds the frame limit of 4194304 bytes");
    CHECK(buffer.length == 0);
    s.request.n_prompt = n_fit;
    CHECK(runner_encode_add(&buffer, &s.request, err, sizeof(err)) == 0);
    CHECK(buffer.length == RUNNER_FRAME_HEADER + RUNNER_FRAME_MAX);
    struct runner_frame frame = only_frame(&buffer);
    struct runner_request decoded;
    CHECK_MSG(runner_decode_add(&frame, &decoded, err, sizeof(err)) == 0, "%s", err);
    CHECK(decoded.n_prompt == n_fit && decoded.n_stops == 0);
    runner_request_free(&decoded);
    free(prompt);

    char *message = malloc(RUNNER_FRAME_MAX);
    memset(message, 'e', RUNNER_FRAME_MAX - 7);
    message[RUNNER_FRAME_MAX - 7] = '\0'; /* category, length and text: one byte too many */
    size_t before = buffer.length;
    CHECK_FAILS(runner_encode_error(&buffer, RUNNER_ERROR_INTERNAL, message, err, sizeof(err)),
                "ERROR: payload of 4194305 bytes exceeds the frame limit of 4194304 bytes");
    CHECK(buffer.length == before);
    message[RUNNER_FRAME_MAX - 8] = '\0';
    CHECK(runner_encode_error(&buffer, RUNNER_ERROR_INTERNAL, message, err, sizeof(err)) == 0);
    CHECK(buffer.length == before + RUNNER_FRAME_HEADER + RUNNER_FRAME_MAX);
    free(message);
    runner_buffer_free(&buffer);
}

/* ---- buffer, names, corpus ---- */

static void test_buffer(void) {
    struct runner_buffer buffer = {0};
    uint8_t bytes[1000];
    for (int i = 0; i < 1000; i++) bytes[i] = (uint8_t)(i * 7);
    CHECK(runner_buffer_append(&buffer, NULL, 0) == 0 && buffer.length == 0);
    CHECK(runner_buffer_append(&buffer, bytes, 3) == 0 && buffer.length == 3);
    CHECK(runner_buffer_append(&buffer, bytes, 1000) == 0 && buffer.length == 1003);
    CHECK(buffer.capacity >= 1003);
    runner_buffer_consume(&buffer, 3);
    CHECK(buffer.length == 1000 && memcmp(buffer.data, bytes, 1000) == 0);
    runner_buffer_consume(&buffer, 998);
    CHECK(buffer.length == 2 && buffer.data[0] == bytes[998] && buffer.data[1] == bytes[999]);
    runner_buffer_consume(&buffer, 5000);
    CHECK(buffer.length == 0);
    CHECK(runner_buffer_append(&buffer, bytes, 2) == 0);
    CHECK(runner_buffer_append(&buffer, bytes, SIZE_MAX - 1) == -1 && buffer.length == 2);
    runner_buffer_free(&buffer);
    CHECK(buffer.data == NULL && buffer.length == 0 && buffer.capacity == 0);
    runner_buffer_free(&buffer);

    struct runner_request empty;
    memset(&empty, 0, sizeof(empty));
    runner_request_free(&empty);
    runner_request_free(NULL);
}

static void test_finish_reason_names(void) {
    CHECK(strcmp(runner_finish_reason_name(RUNNER_FINISH_EOS), "eos") == 0);
    CHECK(strcmp(runner_finish_reason_name(RUNNER_FINISH_LENGTH), "length") == 0);
    CHECK(strcmp(runner_finish_reason_name(RUNNER_FINISH_STOP), "stop") == 0);
    CHECK(strcmp(runner_finish_reason_name(RUNNER_FINISH_CANCELLED), "cancelled") == 0);
    CHECK(strcmp(runner_finish_reason_name(RUNNER_FINISH_ERROR), "error") == 0);
    CHECK(strcmp(runner_finish_reason_name((enum runner_finish_reason)0), "unknown") == 0);
}

/* Every file in tests/fuzz/corpus-runner is a whole number of valid frames,
 * and together they hold every message type. */
static void test_corpus(void) {
    const char *source = __FILE__, *slash = strrchr(source, '/');
    if (source[0] != '/' || slash == NULL) {
        printf("note: %s is not an absolute path; corpus not checked\n", source);
        return;
    }
    char dir[1024];
    snprintf(dir, sizeof(dir), "%.*s/fuzz/corpus-runner", (int)(slash - source), source);
    DIR *listing = opendir(dir);
    CHECK_MSG(listing != NULL, "cannot open %s", dir);
    if (listing == NULL) return;
    int seen[RUNNER_MSG_EMBEDDING + 1] = {0}, n_files = 0;
    const struct dirent *entry;
    while ((entry = readdir(listing)) != NULL) {
        if (entry->d_name[0] == '.') continue;
        char path[1300];
        uint8_t bytes[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, entry->d_name);
        FILE *file = fopen(path, "rb");
        CHECK_MSG(file != NULL, "cannot open %s", path);
        if (file == NULL) continue;
        size_t length = fread(bytes, 1, sizeof(bytes), file);
        CHECK_MSG(feof(file), "%s is 4096 bytes or more", path);
        fclose(file);
        n_files++;
        size_t at = 0;
        struct runner_frame frame;
        while (runner_frame_next(bytes + at, length - at, RUNNER_FRAME_MAX, &frame, err,
                                 sizeof(err)) == 1) {
            CHECK_MSG(decode_any(&frame) == 0, "%s at %zu: %s", path, at, err);
            seen[frame.type] = 1;
            at += frame.frame_length;
        }
        CHECK_MSG(at == length && length > 0, "%s: %zu of %zu bytes are whole frames", path, at,
                  length);
    }
    closedir(listing);
    CHECK(n_files >= RUNNER_MSG_EMBEDDING);
    for (int type = RUNNER_MSG_HELLO; type <= RUNNER_MSG_EMBEDDING; type++)
        CHECK_MSG(seen[type], "no frame of type %d in %s", type, dir);
}

int main(void) {
    test_buffer();
    test_embedding();
    test_finish_reason_names();
    test_round_trip_add();
    test_round_trip_others();
    test_exact_bytes();
    test_stream();
    test_header_errors();
    test_truncated_and_trailing();
    test_strings();
    test_frame_limit();
    test_corpus();
    return test_status("test_runner_protocol");
}
