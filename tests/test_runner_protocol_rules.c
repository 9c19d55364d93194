/* test_runner_protocol_rules.c -- every validation rule of the runner
 * protocol (src/protocol/protocol.c) refuses its bad value twice: in the
 * decoder (a valid frame with one u32 field patched) and in the encoder (the
 * same value in the struct), each time with the exact message naming the
 * frame and the field. */
#include "runner_protocol_check.h"

/* ---- validation rules: decoder (patched frame) and encoder (same value) ---- */

/* Stores bits in the 4-byte int or float that fields[offset / 4] points to
 * (the struct member that travels at that payload offset). */
static void set_field(void *const *fields, size_t n_fields, size_t offset, uint32_t bits) {
    void *field = offset / 4 < n_fields ? fields[offset / 4] : NULL;
    CHECK_MSG(field != NULL, "no struct member for payload offset %zu", offset);
    if (field != NULL) memcpy(field, &bits, sizeof(bits));
}

static void set_add_field(struct sample_add *s, size_t offset, uint32_t bits) {
    struct runner_request *r = &s->request;
    void *const fields[] = {[2] = &r->sampling.temperature,
                            [3] = &r->sampling.top_k,
                            [4] = &r->sampling.top_p,
                            [5] = &r->sampling.min_p,
                            [6] = &r->sampling.repeat_penalty,
                            [7] = &r->sampling.repeat_last_n,
                            [10] = &r->sampling.presence_penalty,
                            [11] = &r->sampling.frequency_penalty,
                            [12] = &r->max_tokens,
                            [14] = &r->top_logprobs,
                            [15] = &r->resumed,
                            [16] = &r->n_stops,
                            [17] = &s->stops[0].n_tokens,
                            [19] = &s->stop_newlines[1],
                            [21] = &s->stop_period[0],
                            [22] = &r->n_biases,
                            [25] = &r->n_prompt,
                            [30] = &s->prompt[4]};
    set_field(fields, sizeof(fields) / sizeof(fields[0]), offset, bits);
}

static void test_add_rules(void) {
    /* Payload offsets of the sample request: id 0, temperature 8, top_k 12,
     * top_p 16, min_p 20, repeat_penalty 24, repeat_last_n 28, seed 32,
     * presence_penalty 40, frequency_penalty 44, max_tokens 48, flags 52,
     * top_logprobs 56, resumed 60, n_stops 64, stops[0] 68 (count) 72 76,
     * stops[1] 80 (count) 84, n_biases 88, grammar length 92, grammar_trigger
     * length 96, n_prompt 100, prompt 104..120. */
    static const struct bad_field cases[] = {
        {8, 0xBF800000u, 1, "ADD: temperature -1 must be finite and >= 0"},
        {8, 0x7FC00000u, 1, "ADD: temperature nan must be finite and >= 0"},
        {8, 0x7F800000u, 1, "ADD: temperature inf must be finite and >= 0"},
        {12, 0xFFFFFFFFu, 1, "ADD: top_k -1 must be >= 0"},
        {16, 0x3FC00000u, 1, "ADD: top_p 1.5 out of range [0, 1]"},
        {16, 0x7FC00000u, 1, "ADD: top_p nan out of range [0, 1]"},
        {20, 0xBDCCCCCDu, 1, "ADD: min_p -0.1 out of range [0, 1]"},
        {20, 0x3F8CCCCDu, 1, "ADD: min_p 1.1 out of range [0, 1]"},
        {20, 0x7F800000u, 1, "ADD: min_p inf out of range [0, 1]"},
        {24, 0x00000000u, 1, "ADD: repeat_penalty 0 must be finite and > 0"},
        {24, 0xBF800000u, 1, "ADD: repeat_penalty -1 must be finite and > 0"},
        {24, 0x7F800000u, 1, "ADD: repeat_penalty inf must be finite and > 0"},
        {28, 0xFFFFFFFFu, 1, "ADD: repeat_last_n -1 must be >= 0"},
        {40, 0x40400000u, 1, "ADD: presence_penalty 3 out of range [-2, 2]"},
        {44, 0xC0400000u, 1, "ADD: frequency_penalty -3 out of range [-2, 2]"},
        {44, 0x7FC00000u, 1, "ADD: frequency_penalty nan out of range [-2, 2]"},
        {48, 0x00000000u, 1, "ADD: max_tokens 0 must be >= 1"},
        {48, 0x80000000u, 1, "ADD: max_tokens -2147483648 must be >= 1"},
        {52, 0x00000008u, 0, "ADD: flags 0x8 has unknown bits 0x8"},
        {52, 0x80000003u, 0, "ADD: flags 0x80000003 has unknown bits 0x80000000"},
        {56, 0xFFFFFFFFu, 1, "ADD: top_logprobs -1 out of range [0, 20]"},
        {56, 21, 1, "ADD: top_logprobs 21 out of range [0, 20]"},
        {60, 0xFFFFFFFFu, 1, "ADD: resumed -1 out of range [0, 4]"},
        {60, 5, 1, "ADD: resumed 5 out of range [0, 4]"},
        {64, 17, 1, "ADD: n_stops 17 out of range [0, 16]"},
        {64, 0xFFFFFFFFu, 0, "ADD: n_stops 4294967295 out of range [0, 16]"},
        {68, 0, 1, "ADD: stops[0].n_tokens 0 out of range [1, 64]"},
        {68, 65, 1, "ADD: stops[0].n_tokens 65 out of range [1, 64]"},
        {76, 0xFFFFFFFFu, 1, "ADD: stops[0].tokens[1] -1 must be >= 0"},
        {84, 0x80000000u, 1, "ADD: stops[1].tokens[0] -2147483648 must be >= 0"},
        {88, 301, 1, "ADD: n_biases 301 out of range [0, 300]"},
        {88, 5, 0, "ADD: n_biases 5 needs 40 bytes, 32 left"},
        {92, 0x00100001u, 0, "ADD: grammar length 1048577 out of range [0, 1048576]"},
        {92, 29, 0, "ADD: grammar length 29 needs 29 bytes, 28 left"},
        {96, 257, 0, "ADD: grammar_trigger length 257 out of range [0, 256]"},
        {96, 25, 0, "ADD: grammar_trigger length 25 needs 25 bytes, 24 left"},
        {100, 0, 1, "ADD: n_prompt 0 must be >= 1"},
        {100, 6, 0, "ADD: n_prompt 6 needs 24 bytes, 20 left"},
        {100, 0x40000000u, 0, "ADD: n_prompt 1073741824 needs 4294967296 bytes, 20 left"},
        {100, 0x80000000u, 0, "ADD: n_prompt 2147483648 out of range [1, 2147483647]"},
        {120, 0xFFFFFFFFu, 1, "ADD: prompt[4] -1 must be >= 0"},
    };
    struct runner_buffer buffer = {0};
    struct sample_add s;
    sample_add_init(&s);
    CHECK(runner_encode_add(&buffer, &s.request, err, sizeof(err)) == 0);
    CHECK(buffer.length == RUNNER_FRAME_HEADER + 124);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_FAILS(decode_patched(&buffer, cases[i].offset, cases[i].bits), cases[i].expected);
        if (!cases[i].encoder) continue;
        struct runner_buffer out = {0};
        sample_add_init(&s);
        set_add_field(&s, cases[i].offset, cases[i].bits);
        CHECK_FAILS(runner_encode_add(&out, &s.request, err, sizeof(err)), cases[i].expected);
        CHECK(out.length == 0);
        runner_buffer_free(&out);
    }

    /* A refused request leaves nothing allocated and the output zeroed. */
    struct runner_request request;
    memset(&request, 0xAB, sizeof(request));
    CHECK(decode_patched(&buffer, 120, 0xFFFFFFFFu) == -1);
    struct runner_frame frame = only_frame(&buffer);
    uint8_t *copy = malloc(buffer.length);
    memcpy(copy, buffer.data, buffer.length);
    put_u32(copy + RUNNER_FRAME_HEADER + 108, 0xFFFFFFFFu);
    frame.payload = copy + RUNNER_FRAME_HEADER;
    CHECK(runner_decode_add(&frame, &request, err, sizeof(err)) == -1);
    CHECK(request.prompt == NULL && request.stops == NULL && request.n_prompt == 0);
    runner_request_free(&request);
    free(copy);

    /* What only the encoder can be given. */
    struct runner_buffer out = {0};
    sample_add_init(&s);
    s.request.logprobs = 2;
    CHECK_FAILS(runner_encode_add(&out, &s.request, err, sizeof(err)),
                "ADD: logprobs 2 out of range [0, 1]");
    sample_add_init(&s);
    s.request.ignore_eos = -1;
    CHECK_FAILS(runner_encode_add(&out, &s.request, err, sizeof(err)),
                "ADD: ignore_eos -1 out of range [0, 1]");
    sample_add_init(&s);
    s.request.prompt = NULL;
    CHECK_FAILS(runner_encode_add(&out, &s.request, err, sizeof(err)),
                "ADD: prompt is NULL with 5 tokens");
    sample_add_init(&s);
    s.request.stops = NULL;
    CHECK_FAILS(runner_encode_add(&out, &s.request, err, sizeof(err)),
                "ADD: stops is NULL with n_stops 2");
    struct runner_bias bias = {7, 100.5f};
    sample_add_init(&s);
    s.request.n_biases = 1;
    CHECK_FAILS(runner_encode_add(&out, &s.request, err, sizeof(err)),
                "ADD: biases is NULL with n_biases 1");
    s.request.biases = &bias;
    CHECK_FAILS(runner_encode_add(&out, &s.request, err, sizeof(err)),
                "ADD: biases[0].bias 100.5 is not in [-100, 100]");
    bias = (struct runner_bias){-1, 0.0f};
    CHECK_FAILS(runner_encode_add(&out, &s.request, err, sizeof(err)),
                "ADD: biases[0].token -1 must be >= 0");
    sample_add_init(&s);
    char trigger[] = "<tool_call>";
    s.request.grammar_trigger = trigger;
    CHECK_FAILS(runner_encode_add(&out, &s.request, err, sizeof(err)),
                "ADD: grammar_trigger without a grammar");
    sample_add_init(&s);
    s.stops[1].tokens = NULL;
    CHECK_FAILS(runner_encode_add(&out, &s.request, err, sizeof(err)),
                "ADD: stops[1].tokens is NULL with 1 tokens");
    CHECK(out.length == 0);
    runner_buffer_free(&out);
    runner_buffer_free(&buffer);
}

static void set_token_field(struct runner_token *t, size_t offset, uint32_t bits) {
    void *const fields[] = {
        [2] = &t->token,         [3] = &t->logprob,        [4] = &t->n_top,
        [5] = &t->top[0].token,  [6] = &t->top[0].logprob, [7] = &t->top[1].token,
        [8] = &t->top[1].logprob};
    set_field(fields, sizeof(fields) / sizeof(fields[0]), offset, bits);
}

static void test_token_rules(void) {
    /* id 0, token 8, logprob 12, n_top 16, top[0] 20 24, top[1] 28 32. */
    static const struct bad_field cases[] = {
        {8, 0xFFFFFFFFu, 1, "TOKEN: token -1 must be >= 0"},
        {12, 0x7FC00000u, 1, "TOKEN: logprob nan is not finite"},
        {12, 0xFF800000u, 1, "TOKEN: logprob -inf is not finite"},
        {16, 21, 1, "TOKEN: n_top 21 out of range [0, 20]"},
        {16, 0xFFFFFFFFu, 0, "TOKEN: n_top 4294967295 out of range [0, 20]"},
        {16, 3, 0, "TOKEN: n_top 3 needs 24 bytes, 16 left"},
        {20, 0x80000000u, 1, "TOKEN: top[0].token -2147483648 must be >= 0"},
        {28, 0xFFFFFFFBu, 1, "TOKEN: top[1].token -5 must be >= 0"},
        {24, 0x7F800000u, 1, "TOKEN: top[0].logprob inf is not finite"},
        {32, 0xFFC00000u, 1, "TOKEN: top[1].logprob -nan is not finite"},
    };
    struct runner_buffer buffer = {0};
    struct runner_token token = sample_token(2);
    CHECK(runner_encode_token(&buffer, &token, err, sizeof(err)) == 0);
    CHECK(buffer.length == RUNNER_FRAME_HEADER + 36);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_FAILS(decode_patched(&buffer, cases[i].offset, cases[i].bits), cases[i].expected);
        if (!cases[i].encoder) continue;
        struct runner_buffer out = {0};
        token = sample_token(2);
        set_token_field(&token, cases[i].offset, cases[i].bits);
        CHECK_FAILS(runner_encode_token(&out, &token, err, sizeof(err)), cases[i].expected);
        CHECK(out.length == 0);
        runner_buffer_free(&out);
    }
    runner_buffer_free(&buffer);
}

static void test_finished_rules(void) {
    /* id 0, reason 8, n_prompt 12, n_generated 16, n_cached 20, category 24,
     * message length 28, message 32. */
    static const struct bad_field cases[] = {
        {8, 0, 1, "FINISHED: reason 0 out of range [1, 5]"},
        {8, 6, 1, "FINISHED: reason 6 out of range [1, 5]"},
        {8, 0xFFFFFFFFu, 0, "FINISHED: reason 4294967295 out of range [1, 5]"},
        {12, 0xFFFFFFFFu, 1, "FINISHED: n_prompt -1 must be >= 0"},
        {16, 0xFFFFFFFDu, 1, "FINISHED: n_generated -3 must be >= 0"},
        {20, 0xFFFFFFFFu, 1, "FINISHED: n_cached -1 out of range [0, 5]"},
        {20, 6, 1, "FINISHED: n_cached 6 out of range [0, 5]"},
        {24, 4, 1, "FINISHED: category 4 out of range [0, 3]"},
        {28, 5, 0, "FINISHED: payload ends inside message (5 bytes needed, 4 left)"},
        {28, 0xFFFFFFF0u, 0,
         "FINISHED: payload ends inside message (4294967280 bytes needed, 4 left)"},
        {28, 3, 0, "FINISHED: 1 trailing byte after message, the last field"},
        {32, 0x00006F6Fu, 0, "FINISHED: message has a NUL byte at offset 2"},
    };
    struct runner_buffer buffer = {0};
    struct runner_finished finished = {9,      RUNNER_FINISH_ERROR,      5, 2,
                                       "oops", RUNNER_ERROR_BAD_REQUEST, 1};
    CHECK(runner_encode_finished(&buffer, &finished, err, sizeof(err)) == 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_FAILS(decode_patched(&buffer, cases[i].offset, cases[i].bits), cases[i].expected);
        if (!cases[i].encoder) continue;
        struct runner_finished bad = finished;
        void *const fields[] = {[2] = &bad.reason,
                                [3] = &bad.n_prompt,
                                [4] = &bad.n_generated,
                                [5] = &bad.n_cached,
                                [6] = &bad.category};
        set_field(fields, 7, cases[i].offset, cases[i].bits);
        size_t before = buffer.length;
        CHECK_FAILS(runner_encode_finished(&buffer, &bad, err, sizeof(err)), cases[i].expected);
        CHECK(buffer.length == before);
    }
    memset(finished.message, 'x', sizeof(finished.message));
    CHECK_FAILS(runner_encode_finished(&buffer, &finished, err, sizeof(err)),
                "FINISHED: message is not NUL-terminated within its 200 bytes");
    runner_buffer_free(&buffer);
}

static void test_heartbeat_rules(void) {
    /* step 0, start_us 8, end_us 16, n_tokens 24, n_decode 28, n_sequences
     * 32, n_running 36, n_waiting 40, kv_blocks_used 44, kv_blocks_total 48,
     * kv_blocks_cached 52, comm_ms 56. */
    static const struct bad_field cases[] = {
        {20, 0, 1, "HEARTBEAT: end_us 3567589828 is before start_us 1000000000000"},
        {24, 0xFFFFFFFFu, 1, "HEARTBEAT: n_tokens -1 must be >= 0"},
        {28, 0xFFFFFFFFu, 1, "HEARTBEAT: n_decode -1 must be >= 0"},
        {32, 0xFFFFFFFFu, 1, "HEARTBEAT: n_sequences -1 must be >= 0"},
        {36, 0xFFFFFFFFu, 1, "HEARTBEAT: n_running -1 must be >= 0"},
        {40, 0xFFFFFFFFu, 1, "HEARTBEAT: n_waiting -1 must be >= 0"},
        {44, 0xFFFFFFFFu, 1, "HEARTBEAT: kv_blocks_used -1 must be >= 0"},
        {48, 0xFFFFFFFFu, 1, "HEARTBEAT: kv_blocks_total -1 must be >= 0"},
        {28, 513, 1, "HEARTBEAT: n_decode 513 exceeds n_tokens 512"},
        {32, 600, 1, "HEARTBEAT: n_sequences 600 exceeds n_tokens 512"},
        {44, 2000, 1, "HEARTBEAT: kv_blocks_used 2000 exceeds kv_blocks_total 1024"},
        {52, 0xFFFFFFFFu, 1, "HEARTBEAT: kv_blocks_cached -1 out of range [0, 1024]"},
        {52, 1025, 1, "HEARTBEAT: kv_blocks_cached 1025 out of range [0, 1024]"},
        {56, 0x7FC00000u, 1, "HEARTBEAT: comm_ms nan must be finite and >= 0"},
        {56, 0xBF800000u, 1, "HEARTBEAT: comm_ms -1 must be finite and >= 0"},
    };
    struct runner_buffer buffer = {0};
    struct runner_heartbeat beat = sample_heartbeat();
    CHECK(runner_encode_heartbeat(&buffer, &beat, err, sizeof(err)) == 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_FAILS(decode_patched(&buffer, cases[i].offset, cases[i].bits), cases[i].expected);
        struct runner_heartbeat bad = beat;
        void *const fields[] = {
            [6] = &bad.n_tokens,         [7] = &bad.n_decode,          [8] = &bad.n_sequences,
            [9] = &bad.n_running,        [10] = &bad.n_waiting,        [11] = &bad.kv_blocks_used,
            [12] = &bad.kv_blocks_total, [13] = &bad.kv_blocks_cached, [14] = &bad.comm_ms};
        if (cases[i].offset == 20)
            bad.end_us &= 0xFFFFFFFFull; /* what zeroing its high half does to the frame */
        else
            set_field(fields, 15, cases[i].offset, cases[i].bits);
        size_t before = buffer.length;
        CHECK_FAILS(runner_encode_heartbeat(&buffer, &bad, err, sizeof(err)), cases[i].expected);
        CHECK(buffer.length == before);
    }
    runner_buffer_free(&buffer);
}

static void test_hello_rules(void) {
    const char *names[] = {"vocab_size",    "context_length",  "max_sequences",  "step_tokens",
                           "kv_block_size", "kv_blocks_total", "tensor_parallel"};
    struct runner_buffer buffer = {0};
    struct runner_hello hello = sample_hello();
    CHECK(runner_encode_hello(&buffer, &hello, err, sizeof(err)) == 0);
    for (int i = 0; i < 7; i++) {
        char expected[128];
        snprintf(expected, sizeof(expected), "HELLO: %s 0 must be >= 1", names[i]);
        CHECK_FAILS(decode_patched(&buffer, 20 + (size_t)i * 4, 0), expected);
        struct runner_hello bad = hello;
        int *fields[] = {&bad.vocab_size,     &bad.context_length, &bad.max_sequences,
                         &bad.step_tokens,    &bad.kv_block_size,  &bad.kv_blocks_total,
                         &bad.tensor_parallel};
        *fields[i] = 0;
        size_t before = buffer.length;
        CHECK_FAILS(runner_encode_hello(&buffer, &bad, err, sizeof(err)), expected);
        CHECK(buffer.length == before);
    }
    CHECK_FAILS(decode_patched(&buffer, 48, 100),
                "HELLO: payload ends inside model (100 bytes needed, 19 left)");
    CHECK_FAILS(decode_patched(&buffer, 52, 0x67006A6Bu),
                "HELLO: model has a NUL byte at offset 2");
    CHECK_FAILS(decode_patched(&buffer, 4, 0x0039002Eu), "HELLO: build has a NUL byte at offset 1");
    memset(hello.model, 'm', sizeof(hello.model));
    CHECK_FAILS(runner_encode_hello(&buffer, &hello, err, sizeof(err)),
                "HELLO: model is not NUL-terminated within its 128 bytes");
    hello = sample_hello();
    memset(hello.build, 'b', sizeof(hello.build));
    CHECK_FAILS(runner_encode_hello(&buffer, &hello, err, sizeof(err)),
                "HELLO: build is not NUL-terminated within its 64 bytes");
    runner_buffer_free(&buffer);
}

/* Decodes the one HELLO in buffer sent as protocol version (header byte 4). */
static int decode_hello_of_version(const struct runner_buffer *buffer, uint8_t version) {
    uint8_t *copy = malloc(buffer->length);
    memcpy(copy, buffer->data, buffer->length);
    copy[4] = version;
    struct runner_frame frame;
    struct runner_hello hello;
    int rc = runner_frame_next(copy, buffer->length, RUNNER_FRAME_MAX, &frame, err, sizeof(err));
    CHECK_MSG(rc == 1 && frame.version == version, "HELLO of version %u: rc %d (%s)", version, rc,
              err);
    rc = rc == 1 ? runner_decode_hello(&frame, &hello, err, sizeof(err)) : 0;
    free(copy);
    return rc;
}

/* A runner of another build: its HELLO passes the header check and is
 * refused by the decoder, naming both versions and both builds (an older
 * runner's HELLO carries no build); every other frame of another version is
 * refused at the header. */
static void test_hello_version(void) {
    struct runner_buffer buffer = {0};
    struct runner_hello hello = sample_hello();
    CHECK(runner_encode_hello(&buffer, &hello, err, sizeof(err)) == 0);
    CHECK(buffer.data[4] == RUNNER_PROTOCOL_VERSION);
    char expected[256];
    snprintf(expected, sizeof(expected),
             "HELLO: the runner speaks protocol version 7 (lockstep 0.9.0 (git test)), this "
             "process %d (lockstep %s): the gateway and every rank must run the same build",
             RUNNER_PROTOCOL_VERSION, version_build());
    CHECK_FAILS(decode_hello_of_version(&buffer, 7), expected);
    snprintf(expected, sizeof(expected),
             "HELLO: the runner speaks protocol version 3 (a build older than 0.9.0), this "
             "process %d (lockstep %s): the gateway and every rank must run the same build",
             RUNNER_PROTOCOL_VERSION, version_build());
    CHECK_FAILS(decode_hello_of_version(&buffer, 3), expected);
    CHECK(decode_hello_of_version(&buffer, RUNNER_PROTOCOL_VERSION) == 0);
    /* the peer's build is quoted on one line, whatever bytes it has */
    buffer.length = 0;
    snprintf(hello.build, sizeof(hello.build), "0.9\n(git\x01x)");
    CHECK(runner_encode_hello(&buffer, &hello, err, sizeof(err)) == 0);
    snprintf(expected, sizeof(expected),
             "HELLO: the runner speaks protocol version 4 (lockstep 0.9?(git?x)), this "
             "process %d (lockstep %s): the gateway and every rank must run the same build",
             RUNNER_PROTOCOL_VERSION, version_build());
    CHECK_FAILS(decode_hello_of_version(&buffer, 4), expected);

    buffer.length = 0;
    CHECK(runner_encode_cancel(&buffer, 7, err, sizeof(err)) == 0);
    buffer.data[4] = RUNNER_PROTOCOL_VERSION + 1;
    struct runner_frame frame;
    snprintf(expected, sizeof(expected), "header: version %d, expected %d",
             RUNNER_PROTOCOL_VERSION + 1, RUNNER_PROTOCOL_VERSION);
    CHECK_FAILS(
        runner_frame_next(buffer.data, buffer.length, RUNNER_FRAME_MAX, &frame, err, sizeof(err)),
        expected);
    runner_buffer_free(&buffer);
}

/* FAULT: round trip, and every range refused by both sides. */
static void test_fault(void) {
    struct runner_buffer buffer = {0};
    struct runner_fault in = {RUNNER_FAULT_DELAY, 3, 250, 40}, out;
    CHECK(runner_encode_fault(&buffer, &in, err, sizeof(err)) == 0);
    CHECK(buffer.length == RUNNER_FRAME_HEADER + 16);
    struct runner_frame frame = only_frame(&buffer);
    CHECK(runner_decode_fault(&frame, &out, err, sizeof(err)) == 0);
    CHECK(out.kind == in.kind && out.rank == 3 && out.delay_ms == 250 && out.steps == 40);
    static const struct bad_field cases[] = {
        {0, 0, 1, "FAULT: kind 0 out of range [1, 3]"},
        {0, 4, 0, "FAULT: kind 4 is not a known fault"},
        {4, 64, 1, "FAULT: rank 64 out of range [0, 63]"},
        {4, 0xFFFFFFFFu, 1, "FAULT: rank -1 out of range [0, 63]"},
        {8, 0, 1, "FAULT: delay_ms 0 out of range [1, 60000]"},
        {8, 60001, 1, "FAULT: delay_ms 60001 out of range [1, 60000]"},
        {12, 0, 1, "FAULT: steps 0 out of range [1, 1000000]"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_FAILS(decode_patched(&buffer, cases[i].offset, cases[i].bits), cases[i].expected);
        if (!cases[i].encoder) continue;
        struct runner_buffer refused = {0};
        struct runner_fault bad = in;
        int *fields[] = {(int *)&bad.kind, &bad.rank, &bad.delay_ms, &bad.steps};
        *fields[cases[i].offset / 4] = (int)cases[i].bits;
        CHECK_FAILS(runner_encode_fault(&refused, &bad, err, sizeof(err)), cases[i].expected);
        runner_buffer_free(&refused);
    }
    /* a stall needs no delay or steps */
    struct runner_fault stall = {RUNNER_FAULT_STALL, 1, 0, 0};
    buffer.length = 0;
    CHECK(runner_encode_fault(&buffer, &stall, err, sizeof(err)) == 0);
    runner_buffer_free(&buffer);
}

int main(void) {
    test_add_rules();
    test_token_rules();
    test_finished_rules();
    test_heartbeat_rules();
    test_hello_rules();
    test_hello_version();
    test_fault();
    return test_status("test_runner_protocol_rules");
}
