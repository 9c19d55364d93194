/* test_runner.c -- the continuous batching runner, in process.
 *
 * On a seeded random model (so it needs nothing from ../shared):
 *   - 16 requests with staggered arrivals, different prompt lengths and
 *     output lengths get, token for token and logprob for logprob (bitwise,
 *     at tp=1), what each gets when it runs alone (DESIGN.md I5), though
 *     together they are sampled on both threads and alone on one;
 *   - seeded sampling at temperature 0.8 is as independent of the batch;
 *   - a greedy token is the first of its top log-probabilities, with the
 *     same log-probability, and the top ones are in order and sum to at
 *     most 1;
 *   - a KV pool too small for all of them forces preemptions (seen in the
 *     trace) and still gives the same tokens;
 *   - with nothing waiting, steps carry decode tokens only; a long prompt is
 *     chunked within the budget while every running sequence keeps getting
 *     one token per step; a new prompt gets prefill tokens in the very next
 *     step;
 *   - cancel frees the blocks; stop sequences, max_tokens and refusals
 *     (prompt longer than the context, token outside the vocabulary,
 *     duplicate id) finish with the right reason. */
#include "engine/engine.h"
#include "runner/runner.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REQUESTS 20
#define MAX_OUTPUT   64

/* What came back for one request. */
struct result {
    int tokens[MAX_OUTPUT];
    float logprobs[MAX_OUTPUT];
    struct runner_alternative top[MAX_OUTPUT][3];
    int n_tokens;
    int finished; /* 0 while running, else the reason */
    char message[200];
};

static struct result results[MAX_REQUESTS];

static void on_token(void *context, uint32_t client, const struct runner_token *t) {
    (void)context;
    (void)client;
    struct result *r = &results[t->id];
    if (r->n_tokens >= MAX_OUTPUT) return;
    r->logprobs[r->n_tokens] = t->logprob;
    memcpy(r->top[r->n_tokens], t->top, sizeof(r->top[0]));
    r->tokens[r->n_tokens++] = t->token;
}

static void on_finished(void *context, uint32_t client, const struct runner_finished *f) {
    (void)context;
    (void)client;
    results[f->id].finished = (int)f->reason;
    snprintf(results[f->id].message, sizeof(results[f->id].message), "%s", f->message);
}

static void on_heartbeat(void *context, const struct runner_heartbeat *h) {
    (void)context;
    (void)h;
}

static const struct runner_sink sink = {on_token, on_finished, on_heartbeat, NULL, NULL};

/* A request's shape: prompt of n_prompt pseudo-random ids, output limit. */
struct spec {
    int n_prompt, max_tokens, arrival_step;
    float temperature;
};

static void make_request(struct runner_request *q, uint64_t id, const struct spec *s, int vocab) {
    memset(q, 0, sizeof(*q));
    runner_sampling_default(&q->sampling);
    q->sampling.temperature = s->temperature;
    q->sampling.seed = 1000 + id;
    q->id = id;
    q->max_tokens = s->max_tokens;
    q->logprobs = 1;
    q->top_logprobs = 3;
    q->ignore_eos = 1;
    q->n_prompt = s->n_prompt;
    q->prompt = malloc((size_t)s->n_prompt * sizeof(int));
    for (int i = 0; i < s->n_prompt; i++)
        q->prompt[i] = (int)((id * 7919u + (uint64_t)i * 104729u) % (uint64_t)(vocab - 1)) + 1;
}

static struct runner *new_runner(struct engine *engine, int step_tokens, int max_sequences,
                                 const char *trace) {
    char err[256];
    struct runner *r = NULL;
    struct runner_params p = {.max_sequences = max_sequences,
                              .max_waiting = 64,
                              .step_tokens = step_tokens,
                              .trace_steps = 4096};
    CHECK_MSG(runner_create(&r, engine, &p, &sink, err, sizeof(err)) == 0, "%s", err);
    if (r && trace) CHECK_MSG(runner_trace_open(r, trace, err, sizeof(err)) == 0, "%s", err);
    return r;
}

/* Submits each spec at its arrival step and steps until all finished;
 * returns the number of steps. */
static int run_schedule(struct runner *r, const struct spec *specs, int n, int vocab) {
    char err[256];
    int submitted = 0, steps = 0;
    memset(results, 0, sizeof(results));
    for (int i = 0; i < n; i++) submitted += specs[i].arrival_step < 0; /* never sent */
    while (submitted < n || runner_has_work(r)) {
        for (int i = 0; i < n; i++)
            if (specs[i].arrival_step == steps) {
                struct runner_request q;
                make_request(&q, (uint64_t)i, &specs[i], vocab);
                runner_submit(r, 0, &q, clock_now_us());
                submitted++;
            }
        int rc = runner_step(r, 0, err, sizeof(err));
        CHECK_MSG(rc >= 0, "%s", err);
        if (rc < 0 || steps > 100000) break;
        steps++;
    }
    return steps;
}

/* Each spec alone on an empty runner: the reference results. */
static void run_alone(struct engine *engine, const struct spec *specs, int n, int vocab,
                      struct result *alone) {
    for (int i = 0; i < n; i++) {
        struct runner *r = new_runner(engine, 64, 4, NULL);
        struct spec s = specs[i];
        s.arrival_step = 0;
        /* ids index results: run it under its own id */
        struct spec padded[MAX_REQUESTS] = {{0}};
        for (int j = 0; j < n; j++) padded[j].arrival_step = -1;
        padded[i] = s;
        run_schedule(r, padded, n, vocab);
        alone[i] = results[i];
        runner_free(r);
    }
}

static void check_same(const struct result *alone, int n, const char *what) {
    for (int i = 0; i < n; i++) {
        const struct result *a = &alone[i], *b = &results[i];
        CHECK_MSG(a->n_tokens == b->n_tokens && a->n_tokens > 0, "%s: request %d: %d vs %d tokens",
                  what, i, b->n_tokens, a->n_tokens);
        CHECK_MSG(!memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int)),
                  "%s: request %d: tokens differ from running alone", what, i);
        CHECK_MSG(test_same_bits(a->logprobs, b->logprobs, (size_t)a->n_tokens),
                  "%s: request %d: logprobs differ in their bits", what, i);
        CHECK_MSG(!memcmp(a->top, b->top, (size_t)a->n_tokens * sizeof(a->top[0])),
                  "%s: request %d: top logprobs differ", what, i);
        CHECK_MSG(b->finished == RUNNER_FINISH_LENGTH, "%s: request %d finished %d", what, i,
                  b->finished);
    }
}

/* What the log-probabilities of greedy results must be whatever computes
 * them: each token the first of its top three, its log-probability that
 * entry's, the three in descending order, below 0, and their probabilities
 * summing to at most 1. */
static void check_greedy_logprobs(int n) {
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int t = 0; t < results[i].n_tokens; t++) {
            const struct runner_alternative *top = results[i].top[t];
            double mass = exp(top[0].logprob) + exp(top[1].logprob) + exp(top[2].logprob);
            bad += top[0].token != results[i].tokens[t] ||
                   fabsf(top[0].logprob - results[i].logprobs[t]) > 1e-5f ||
                   !(top[0].logprob >= top[1].logprob && top[1].logprob >= top[2].logprob) ||
                   top[0].logprob > 0.0f || mass > 1.0 + 1e-5;
        }
    CHECK_MSG(bad == 0, "greedy: %d tokens whose log-probabilities disagree", bad);
}

/* 16 requests, staggered, different lengths: as alone, greedy and seeded. */
static void test_batch_invariance(struct engine *engine, int vocab, const char *trace) {
    struct spec specs[16];
    static struct result alone[16];
    for (float temperature = 0.0f; temperature < 1.0f; temperature += 0.8f) {
        for (int i = 0; i < 16; i++)
            specs[i] =
                (struct spec){1 + (i * 37) % 150, 4 + (i * 13) % 40, (i * 3) % 20, temperature};
        run_alone(engine, specs, 16, vocab, alone);
        struct runner *r = new_runner(engine, 64, 16, trace);
        run_schedule(r, specs, 16, vocab);
        check_same(alone, 16, temperature > 0 ? "seeded" : "greedy");
        if (temperature == 0.0f) check_greedy_logprobs(16);
        CHECK(engine->kv.n_free == engine->kv.n_blocks);
        runner_free(r);
    }
}

/* Counts lines of the trace file containing needle. */
static int count_in_file(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    char line[1 << 16];
    int n = 0;
    while (f && fgets(line, sizeof(line), f)) n += strstr(line, needle) != NULL;
    if (f) fclose(f);
    return n;
}

/* A pool of 24 blocks of 16 for 8 sequences that grow to ~100 positions. */
static void test_preemption(const struct model *model, int vocab, const char *trace) {
    char err[256];
    struct engine small;
    struct engine_params p = {.n_threads = 2,
                              .max_tokens = 64,
                              .kv_block_size = 16,
                              .kv_blocks = 24,
                              .kv_type = TENSOR_F16};
    struct spec specs[8];
    static struct result alone[8];
    CHECK_MSG(engine_init(&small, model, &p, err, sizeof(err)) == 0, "%s", err);
    for (int i = 0; i < 8; i++) specs[i] = (struct spec){30 + 9 * i, 60, i, 0.0f};
    run_alone(&small, specs, 8, vocab, alone);
    struct runner *r = new_runner(&small, 64, 8, trace);
    run_schedule(r, specs, 8, vocab);
    runner_free(r);
    check_same(alone, 8, "preempted");
    CHECK_MSG(count_in_file(trace, "\"type\":\"preempt\"") > 0, "no preemption happened");
    CHECK(small.kv.n_free == small.kv.n_blocks);
    engine_free(&small);
}

/* Reads the ring: decode-only steps once prompts are in; a long prompt is
 * chunked under the budget while the others decode every step. */
static void test_chunking(struct engine *engine, int vocab) {
    char err[256];
    struct runner *r = new_runner(engine, 48, 8, NULL);
    struct runner_request q;
    const struct runner_trace_step *steps[64];
    memset(results, 0, sizeof(results));
    for (int i = 0; i < 4; i++) {
        make_request(&q, (uint64_t)i, &(struct spec){5, 40, 0, 0.0f}, vocab);
        runner_submit(r, 0, &q, clock_now_us());
    }
    for (int k = 0; k < 3; k++) runner_step(r, 0, err, sizeof(err));
    int n = runner_trace_recent(r, steps, 64);
    CHECK(n == 3);
    CHECK_MSG(steps[0]->n_tokens == 20 && steps[0]->n_entries == 4, "first step: %d tokens",
              steps[0]->n_tokens);
    for (int k = 1; k < n; k++) /* nothing waiting: decode tokens only */
        CHECK(steps[k]->n_tokens == 4 && steps[k]->entries[0].decode &&
              steps[k]->entries[3].decode);
    make_request(&q, 4, &(struct spec){200, 4, 0, 0.0f}, vocab);
    runner_submit(r, 0, &q, clock_now_us());
    int first = 3, chunks = 0, prefilled = 0;
    while (results[4].n_tokens == 0 && runner_step(r, 0, err, sizeof(err)) == 1) continue;
    n = runner_trace_recent(r, steps, 64);
    for (int k = first; k < n; k++) {
        const struct runner_trace_step *s = steps[k];
        CHECK_MSG(s->n_tokens <= 48, "step %llu has %d tokens over the budget 48",
                  (unsigned long long)s->step, s->n_tokens);
        CHECK_MSG(s->n_entries == 5, "step %llu: %d sequences", (unsigned long long)s->step,
                  s->n_entries);
        for (int e = 0; e < 4 && e < s->n_entries; e++)
            CHECK(s->entries[e].decode && s->entries[e].n_tokens == 1);
        if (s->n_entries == 5 && !s->entries[4].decode) {
            CHECK(s->entries[4].position == prefilled);
            prefilled += s->entries[4].n_tokens;
            chunks++;
        }
    }
    CHECK_MSG(prefilled == 200 && chunks == 5, "200 tokens in %d chunks (%d)", chunks, prefilled);
    CHECK_MSG(steps[first]->entries[4].id == 4, "the new prompt did not start in the next step");
    runner_free(r);
}

static void test_cancel_and_stops(struct engine *engine, int vocab) {
    char err[256];
    struct runner *r = new_runner(engine, 64, 8, NULL);
    struct runner_request q;
    memset(results, 0, sizeof(results));
    make_request(&q, 0, &(struct spec){40, 50, 0, 0.0f}, vocab);
    runner_submit(r, 0, &q, clock_now_us());
    for (int k = 0; k < 4; k++) runner_step(r, 0, err, sizeof(err));
    CHECK(engine->kv.n_free < engine->kv.n_blocks);
    runner_cancel(r, 0, 0);
    CHECK(results[0].finished == RUNNER_FINISH_CANCELLED && results[0].n_tokens == 4);
    CHECK_MSG(engine->kv.n_free == engine->kv.n_blocks, "cancel left %d blocks in use",
              engine->kv.n_blocks - engine->kv.n_free);
    CHECK(!runner_has_work(r));

    /* stop sequence: tokens 3 and 4 of the greedy output of the same prompt */
    int expected[MAX_OUTPUT];
    make_request(&q, 1, &(struct spec){40, 12, 0, 0.0f}, vocab);
    runner_submit(r, 0, &q, clock_now_us());
    while (runner_step(r, 0, err, sizeof(err)) == 1) continue;
    CHECK(results[1].finished == RUNNER_FINISH_LENGTH && results[1].n_tokens == 12);
    memcpy(expected, results[1].tokens, sizeof(expected));
    int first_match = 3; /* the stop may occur earlier: find its first end */
    for (int i = 1; i <= 3; i++)
        if (expected[i - 1] == expected[3] && expected[i] == expected[4]) {
            first_match = i - 1;
            break;
        }
    make_request(&q, 1, &(struct spec){40, 12, 0, 0.0f}, vocab); /* request 1's prompt */
    q.id = 2;
    q.n_stops = 1;
    q.stops = calloc(1, sizeof(*q.stops));
    q.stops[0].n_tokens = 2;
    q.stops[0].tokens = malloc(2 * sizeof(int));
    q.stops[0].tokens[0] = expected[3];
    q.stops[0].tokens[1] = expected[4];
    runner_submit(r, 0, &q, clock_now_us());
    while (runner_step(r, 0, err, sizeof(err)) == 1) continue;
    CHECK_MSG(results[2].finished == RUNNER_FINISH_STOP && results[2].n_tokens == first_match + 2,
              "stop: reason %d after %d tokens", results[2].finished, results[2].n_tokens);

    /* refusals */
    make_request(&q, 3, &(struct spec){engine->context_length, 4, 0, 0.0f}, vocab);
    CHECK(runner_submit(r, 0, &q, clock_now_us()) == -1);
    CHECK(results[3].finished == RUNNER_FINISH_ERROR && strstr(results[3].message, "context"));
    make_request(&q, 4, &(struct spec){3, 4, 0, 0.0f}, vocab);
    q.prompt[1] = vocab;
    CHECK(runner_submit(r, 0, &q, clock_now_us()) == -1);
    CHECK(results[4].finished == RUNNER_FINISH_ERROR && strstr(results[4].message, "vocabulary"));
    make_request(&q, 5, &(struct spec){3, 4, 0, 0.0f}, vocab);
    CHECK(runner_submit(r, 0, &q, clock_now_us()) == 0);
    make_request(&q, 5, &(struct spec){3, 4, 0, 0.0f}, vocab);
    results[5].finished = 0;
    CHECK(runner_submit(r, 0, &q, clock_now_us()) == -1);
    CHECK(results[5].finished == RUNNER_FINISH_ERROR && strstr(results[5].message, "in use"));
    runner_free(r);
    CHECK(engine->kv.n_free == engine->kv.n_blocks);
}

int main(void) {
    char path[512], trace[512], err[256];
    struct model *model = NULL;
    struct engine engine;
    /* a vocabulary big enough that 3 sequences or more sample on both threads of
     * the pool (runner.c, SAMPLE_SHARED_WORK) and one alone on the leader */
    struct model_random_params shape = {MODEL_ARCH_LLAMA, 64, 128,           2, 4, 2, 12288, 512,
                                        TENSOR_Q8_0,      7,  MODEL_MIX_NONE};
    test_tmp_path(path, sizeof(path), "runner-model.gguf");
    test_tmp_path(trace, sizeof(trace), "runner-trace.jsonl");
    CHECK_MSG(model_write_random(&shape, path, err, sizeof(err)) == 0, "%s", err);
    CHECK_MSG(model_load(&model, path, err, sizeof(err)) == 0, "%s", err);
    if (!model) return test_status("test_runner");
    struct engine_params p = {.n_threads = 2,
                              .max_tokens = 64,
                              .kv_block_size = 16,
                              .kv_blocks = 16 * 40,
                              .kv_type = TENSOR_F16};
    CHECK_MSG(engine_init(&engine, model, &p, err, sizeof(err)) == 0, "%s", err);
    test_batch_invariance(&engine, shape.vocab_size, trace);
    test_chunking(&engine, shape.vocab_size);
    test_cancel_and_stops(&engine, shape.vocab_size);
    test_preemption(model, shape.vocab_size, trace);
    engine_free(&engine);
    model_free(model);
    return test_status("test_runner");
}
