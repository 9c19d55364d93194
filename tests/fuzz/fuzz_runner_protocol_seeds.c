/* fuzz_runner_protocol_seeds.c -- writes the seed corpus for
 * fuzz_runner_protocol into the directory given as argv[1]: a frame of every
 * message type, frames at the limits the decoders accept (16 stops, 20
 * alternatives, boundary sampling values, logit biases and a grammar),
 * strings longer than the arrays
 * they are decoded into, and every type back to back, whole and cut
 * short. Run by CTest before the fuzzer; tests/fuzz/corpus-runner keeps a
 * few of these frames in the repository as well. */
#include "runner/runner.h"

#include <stdio.h>
#include <string.h>

static int write_seed(const char *dir, const char *name, const struct runner_buffer *buffer,
                      size_t length) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *file = fopen(path, "wb");
    int failed = file == NULL || fwrite(buffer->data, 1, length, file) != length;
    if (file != NULL && fclose(file) != 0) failed = 1;
    if (failed) fprintf(stderr, "fuzz_runner_protocol_seeds: cannot write %s\n", path);
    return failed;
}

/* A FINISHED frame whose message is text, longer than the decoder's array. */
static int append_long_finished(struct runner_buffer *out, const char *text) {
    const struct runner_finished finished = {77, RUNNER_FINISH_ERROR,        12, 0,
                                             "", RUNNER_ERROR_OVER_CAPACITY, 0};
    char err[256];
    size_t start = out->length, n = strlen(text);
    if (runner_encode_finished(out, &finished, err, sizeof(err)) != 0 ||
        runner_buffer_append(out, text, n) != 0)
        return -1;
    uint8_t *frame = out->data + start;
    uint32_t payload = (uint32_t)(out->length - start - RUNNER_FRAME_HEADER);
    for (int i = 0; i < 4; i++) {
        frame[i] = (uint8_t)(payload >> (8 * i));
        frame[RUNNER_FRAME_HEADER + 20 + i] = (uint8_t)(n >> (8 * i));
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_runner_protocol_seeds <corpus directory>\n");
        return 2;
    }
    const char *dir = argv[1];
    char err[512] = "";
    int failed = 0;
    struct runner_buffer one = {0}, stream = {0};

    struct runner_hello hello = {
        32000, 4096, 8, 512, 16, 1024, 2, "kjv2m-q8_0.gguf", "0.9.0 (git 0229c56)", 0, {0}};
    failed |= runner_encode_hello(&one, &hello, err, sizeof(err));
    failed |= write_seed(dir, "hello.bin", &one, one.length);
    one.length = 0;
    hello.has_challenge = 1;
    for (int i = 0; i < RUNNER_AUTH_BYTES; i++) hello.challenge[i] = (uint8_t)(i * 37 + 1);
    failed |= runner_encode_hello(&one, &hello, err, sizeof(err));
    failed |= write_seed(dir, "hello-challenge.bin", &one, one.length);
    failed |= runner_buffer_append(&stream, one.data, one.length);

    struct runner_auth auth;
    for (int i = 0; i < RUNNER_AUTH_BYTES; i++) {
        auth.nonce[i] = (uint8_t)(255 - i);
        auth.mac[i] = (uint8_t)(i * 11);
    }
    one.length = 0;
    failed |= runner_encode_auth(&one, &auth, err, sizeof(err));
    failed |= write_seed(dir, "auth.bin", &one, one.length);
    failed |= runner_buffer_append(&stream, one.data, one.length);

    int prompt[6] = {1, 450, 4123, 29871, 13, 0};
    int newline[2] = {13, 13}, period[1] = {29889};
    struct runner_stop stops[RUNNER_STOPS_MAX] = {{2, newline}, {1, period}};
    struct runner_request request = {
        .id = 0x8000000000000001ull,
        .sampling = {0.8f, 40, 0.95f, 0.05f, 1.1f, 64, 0x5eed, 0.5f, 0.25f},
        .max_tokens = 128,
        .logprobs = 1,
        .top_logprobs = 3,
        .n_prompt = 6,
        .prompt = prompt,
        .n_stops = 2,
        .stops = stops};
    one.length = 0;
    failed |= runner_encode_add(&one, &request, err, sizeof(err));
    failed |= write_seed(dir, "add.bin", &one, one.length);
    failed |= runner_buffer_append(&stream, one.data, one.length);

    for (int i = 2; i < RUNNER_STOPS_MAX; i++) stops[i] = (struct runner_stop){2, newline};
    request.n_stops = RUNNER_STOPS_MAX;
    request.sampling =
        (struct runner_sampling){0.0f, 0, 1.0f, 1.0f, 1e-30f, 0, UINT64_MAX, -2.0f, 2.0f};
    request.top_logprobs = RUNNER_TOP_LOGPROBS_MAX;
    request.ignore_eos = 1;
    one.length = 0;
    failed |= runner_encode_add(&one, &request, err, sizeof(err));
    failed |= write_seed(dir, "add-limits.bin", &one, one.length);

    struct runner_bias biases[2] = {{29889, -100.0f}, {13, 2.5f}};
    char grammar[] = "root ::= \"{\" [a-z]+ \"}\"";
    request.n_biases = 2;
    request.biases = biases;
    request.grammar = grammar;
    char trigger[] = "{";
    request.grammar_trigger = trigger;
    one.length = 0;
    failed |= runner_encode_add(&one, &request, err, sizeof(err));
    failed |= write_seed(dir, "add-grammar.bin", &one, one.length);

    one.length = 0;
    failed |= runner_encode_cancel(&one, 0x8000000000000001ull, err, sizeof(err));
    failed |= write_seed(dir, "cancel.bin", &one, one.length);
    failed |= runner_buffer_append(&stream, one.data, one.length);

    struct runner_token token = {0x8000000000000001ull, 450, -0.125f, 3, {{450, -0.125f}}};
    token.top[1] = (struct runner_alternative){29871, -2.5f};
    token.top[2] = (struct runner_alternative){0, -7.75f};
    one.length = 0;
    failed |= runner_encode_token(&one, &token, err, sizeof(err));
    failed |= write_seed(dir, "token.bin", &one, one.length);
    failed |= runner_buffer_append(&stream, one.data, one.length);

    token.n_top = RUNNER_TOP_LOGPROBS_MAX;
    for (int i = 0; i < RUNNER_TOP_LOGPROBS_MAX; i++)
        token.top[i] = (struct runner_alternative){i * 37, -0.5f * (float)i};
    one.length = 0;
    failed |= runner_encode_token(&one, &token, err, sizeof(err));
    failed |= write_seed(dir, "token-top20.bin", &one, one.length);

    const struct runner_finished finished = {
        0x8000000000000001ull,          RUNNER_FINISH_ERROR,        6, 1,
        "context full: 4096 positions", RUNNER_ERROR_OUT_OF_MEMORY, 0};
    one.length = 0;
    failed |= runner_encode_finished(&one, &finished, err, sizeof(err));
    failed |= write_seed(dir, "finished.bin", &one, one.length);
    failed |= runner_buffer_append(&stream, one.data, one.length);

    /* 198 ASCII bytes, then a 2-byte character across the 199-byte cut. */
    char text[300];
    memset(text, 'a', 198);
    snprintf(text + 198, sizeof(text) - 198, "\xc3\xa9 and more");
    one.length = 0;
    failed |= append_long_finished(&one, text);
    failed |= write_seed(dir, "finished-long.bin", &one, one.length);

    const struct runner_heartbeat heartbeat = {41, 1000000, 1002500, 9,  2,     3,
                                               2,  1,       5,       64, 0.75f, 3};
    one.length = 0;
    failed |= runner_encode_heartbeat(&one, &heartbeat, err, sizeof(err));
    failed |= write_seed(dir, "heartbeat.bin", &one, one.length);
    failed |= runner_buffer_append(&stream, one.data, one.length);

    one.length = 0;
    failed |= runner_encode_error(&one, RUNNER_ERROR_INTERNAL, "unknown model", err, sizeof(err));
    failed |= write_seed(dir, "error.bin", &one, one.length);
    failed |= runner_buffer_append(&stream, one.data, one.length);

    one.length = 0;
    failed |= runner_encode_error(&one, RUNNER_ERROR_INTERNAL, text, err, sizeof(err));
    failed |= write_seed(dir, "error-long.bin", &one, one.length);

    struct runner_fault fault = {RUNNER_FAULT_DELAY, 1, 250, 40};
    one.length = 0;
    failed |= runner_encode_fault(&one, &fault, err, sizeof(err));
    failed |= write_seed(dir, "fault.bin", &one, one.length);
    failed |= runner_buffer_append(&stream, one.data, one.length);

    float values[6] = {0.5f, -0.25f, 1e-30f, -3.0e7f, 0.0f, 1.0f};
    const struct runner_embedding embedding = {0x8000000000000001ull, 6, values};
    one.length = 0;
    failed |= runner_encode_embedding(&one, &embedding, err, sizeof(err));
    failed |= write_seed(dir, "embedding.bin", &one, one.length);
    failed |= runner_buffer_append(&stream, one.data, one.length);

    failed |= write_seed(dir, "stream.bin", &stream, stream.length);
    failed |= write_seed(dir, "stream-cut.bin", &stream, stream.length - 3);

    runner_buffer_free(&one);
    runner_buffer_free(&stream);
    if (failed)
        fprintf(stderr, "fuzz_runner_protocol_seeds: could not write every seed into %s %s\n", dir,
                err);
    return failed ? 1 : 0;
}
