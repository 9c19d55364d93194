/* test_runner_pipeline.c -- the runner on a pipeline, with as many steps in
 * flight as stages (micro-batches of distinct sequences).
 *
 * On a seeded random model of 4 layers, for pp 2, pp 3 and pp 2 x tp 2 over
 * the local backend:
 *   - 16 requests with staggered arrivals, different prompt lengths and
 *     output lengths, greedy and seeded, get token for token and logprob
 *     for logprob (bitwise) what each gets alone on one rank;
 *   - the trace shows steps that overlap (a step planned before the one
 *     before it was collected), so micro-batches were really in flight, and
 *     never a sequence in two of them;
 *   - a KV pool too small for all of them forces preemptions (never of a
 *     sequence in flight) and still gives the same tokens;
 *   - a request cancelled while its step is in flight finishes cancelled
 *     when that step returns, and every block comes back.
 * ctest-labels: concurrency */
#include "engine/engine.h"
#include "runner/runner.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define MAX_REQUESTS 16
#define MAX_OUTPUT   48

struct result {
    int tokens[MAX_OUTPUT];
    float logprobs[MAX_OUTPUT];
    int n_tokens;
    int finished; /* 0 while running, else the reason */
};

static struct result results[MAX_REQUESTS];

static void on_token(void *context, uint32_t client, const struct runner_token *t) {
    (void)context;
    (void)client;
    struct result *r = &results[t->id];
    if (r->n_tokens >= MAX_OUTPUT) return;
    r->logprobs[r->n_tokens] = t->logprob;
    r->tokens[r->n_tokens++] = t->token;
}

static void on_finished(void *context, uint32_t client, const struct runner_finished *f) {
    (void)context;
    (void)client;
    results[f->id].finished = (int)f->reason;
}

static void on_heartbeat(void *context, const struct runner_heartbeat *h) {
    (void)context;
    (void)h;
}

static const struct runner_sink sink = {on_token, on_finished, on_heartbeat, NULL, NULL};

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
    q->ignore_eos = 1;
    q->n_prompt = s->n_prompt;
    q->prompt = malloc((size_t)s->n_prompt * sizeof(int));
    for (int i = 0; i < s->n_prompt; i++)
        q->prompt[i] = (int)((id * 7919u + (uint64_t)i * 104729u) % (uint64_t)(vocab - 1)) + 1;
}

static struct runner *new_runner(struct engine *engine, int max_sequences) {
    char err[256];
    struct runner *r = NULL;
    struct runner_params p = {
        .max_sequences = max_sequences, .max_waiting = 64, .step_tokens = 48, .trace_steps = 4096};
    CHECK_MSG(runner_create(&r, engine, &p, &sink, err, sizeof(err)) == 0, "%s", err);
    return r;
}

/* Submits each spec at its arrival step and steps until all finished;
 * cancels request `cancel` (-1: none) right after the step that first
 * leaves it in flight. Returns the steps run. */
static int run_schedule(struct runner *r, const struct spec *specs, int n, int vocab, int cancel) {
    char err[256];
    int submitted = 0, steps = 0;
    memset(results, 0, sizeof(results));
    for (int i = 0; i < n; i++) submitted += specs[i].arrival_step < 0;
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
        if (cancel >= 0 && results[cancel].n_tokens == 2) {
            runner_cancel(r, 0, (uint64_t)cancel);
            cancel = -1;
        }
        steps++;
    }
    return steps;
}

/* 16 requests, staggered, of different lengths. */
static void make_specs(struct spec *specs, float temperature) {
    for (int i = 0; i < MAX_REQUESTS; i++)
        specs[i] = (struct spec){1 + (i * 37) % 90, 4 + (i * 13) % 40, (i * 3) % 20, temperature};
}

/* Each spec alone on one rank: the reference. */
static void run_alone(const struct model *model, const struct spec *specs, struct result *alone) {
    char err[256];
    struct engine engine;
    struct engine_params p = {.n_threads = 1,
                              .max_tokens = 48,
                              .kv_block_size = 16,
                              .kv_blocks = 16 * 16,
                              .kv_type = TENSOR_F16};
    CHECK_MSG(engine_init(&engine, model, &p, err, sizeof(err)) == 0, "%s", err);
    for (int i = 0; i < MAX_REQUESTS; i++) {
        struct runner *r = new_runner(&engine, 4);
        struct spec padded[MAX_REQUESTS];
        for (int j = 0; j < MAX_REQUESTS; j++) padded[j] = (struct spec){1, 1, -1, 0.0f};
        padded[i] = specs[i];
        padded[i].arrival_step = 0;
        run_schedule(r, padded, MAX_REQUESTS, model->config.vocab_size, -1);
        alone[i] = results[i];
        runner_free(r);
    }
    engine_free(&engine);
}

static void check_same(const struct result *alone, const char *what) {
    for (int i = 0; i < MAX_REQUESTS; i++) {
        const struct result *a = &alone[i], *b = &results[i];
        CHECK_MSG(a->n_tokens == b->n_tokens && a->n_tokens > 0 &&
                      !memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int)) &&
                      test_same_bits(a->logprobs, b->logprobs, (size_t)a->n_tokens) &&
                      b->finished == RUNNER_FINISH_LENGTH,
                  "%s: request %d: %d tokens (alone %d), finished %d, not as alone", what, i,
                  b->n_tokens, a->n_tokens, b->finished);
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

/* Steps of the ring that began before the step before them was collected;
 * and that no sequence is in two steps that overlap. */
static int overlapping_steps(const struct runner *r, const char *what) {
    const struct runner_trace_step *steps[4096];
    int n = runner_trace_recent(r, steps, 4096), overlaps = 0;
    for (int k = 1; k < n; k++) {
        if (steps[k]->start_us >= steps[k - 1]->end_us) continue;
        overlaps++;
        for (int a = 0; a < steps[k]->n_entries; a++)
            for (int b = 0; b < steps[k - 1]->n_entries; b++)
                CHECK_MSG(steps[k]->entries[a].id != steps[k - 1]->entries[b].id,
                          "%s: request %llu in steps %llu and %llu at once", what,
                          (unsigned long long)steps[k]->entries[a].id,
                          (unsigned long long)steps[k - 1]->step,
                          (unsigned long long)steps[k]->step);
    }
    return overlaps;
}

/* Runs the specs on a pipeline of pp stages of tp ranks with kv_blocks
 * blocks; checks them against alone, and the overlap of steps. */
static void check_pipeline(const struct model *model, int pp, int tp, int kv_blocks,
                           const struct spec *specs, const struct result *alone, const char *what) {
    char err[256], name[128];
    struct engine_params p = {.n_threads = 2,
                              .max_tokens = 48,
                              .kv_block_size = 16,
                              .kv_blocks = kv_blocks,
                              .kv_type = TENSOR_F16};
    struct engine_group group = {.n = tp, .stages = pp, .backend = COMM_LOCAL, .deadline = 20.0};
    snprintf(name, sizeof(name), "%s, pp %d x tp %d, %d blocks", what, pp, tp, kv_blocks);
    if (engine_group_start(&group, model, &p, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s: %s", name, err);
        engine_group_stop(&group, err, sizeof(err));
        return;
    }
    struct engine *leader = engine_group_leader(&group);
    struct runner *r = new_runner(leader, MAX_REQUESTS);
    char trace[512];
    test_tmp_path(trace, sizeof(trace), "runner-pipeline-trace.jsonl");
    CHECK_MSG(runner_trace_open(r, trace, err, sizeof(err)) == 0, "%s", err);
    int steps = run_schedule(r, specs, MAX_REQUESTS, model->config.vocab_size, -1);
    check_same(alone, name);
    if (kv_blocks < 16 * 16)
        CHECK_MSG(count_in_file(trace, "\"type\":\"preempt\"") > 0, "%s: no preemption", name);
    int overlaps = overlapping_steps(r, name);
    printf("%s: %d steps, %d planned while the one before was in flight\n", name, steps, overlaps);
    CHECK_MSG(overlaps > steps / 4, "%s: only %d of %d steps overlapped", name, overlaps, steps);
    CHECK(leader->kv.n_free + kv_blocks_cached(&leader->kv) == leader->kv.n_blocks);
    runner_free(r);
    remove(trace);
    CHECK(engine_group_stop(&group, err, sizeof(err)) == 0);
}

/* Request 5 is cancelled while its step is in flight: it finishes
 * cancelled, the others as alone, and every block comes back. */
static void check_cancel(const struct model *model, const struct spec *specs,
                         const struct result *alone) {
    char err[256];
    struct engine_params p = {.n_threads = 2,
                              .max_tokens = 48,
                              .kv_block_size = 16,
                              .kv_blocks = 16 * 16,
                              .kv_type = TENSOR_F16};
    struct engine_group group = {.n = 1, .stages = 2, .backend = COMM_LOCAL, .deadline = 20.0};
    CHECK_MSG(engine_group_start(&group, model, &p, err, sizeof(err)) == 0, "%s", err);
    struct engine *leader = engine_group_leader(&group);
    struct runner *r = new_runner(leader, MAX_REQUESTS);
    run_schedule(r, specs, MAX_REQUESTS, model->config.vocab_size, 5);
    CHECK_MSG(results[5].finished == RUNNER_FINISH_CANCELLED && results[5].n_tokens >= 2 &&
                  results[5].n_tokens < alone[5].n_tokens,
              "cancelled request: finished %d after %d tokens", results[5].finished,
              results[5].n_tokens);
    for (int i = 0; i < MAX_REQUESTS; i++)
        CHECK_MSG(i == 5 || (results[i].n_tokens == alone[i].n_tokens &&
                             !memcmp(results[i].tokens, alone[i].tokens,
                                     (size_t)alone[i].n_tokens * sizeof(int))),
                  "request %d differs after a cancel", i);
    CHECK(leader->kv.n_free + kv_blocks_cached(&leader->kv) == leader->kv.n_blocks);
    runner_free(r);
    CHECK(engine_group_stop(&group, err, sizeof(err)) == 0);
}

int main(void) {
    char path[512], err[256];
    struct model *model = NULL;
    struct model_random_params shape = {MODEL_ARCH_LLAMA, 64, 128,           4, 4, 2, 2048, 512,
                                        TENSOR_Q8_0,      7,  MODEL_MIX_NONE};
    test_tmp_path(path, sizeof(path), "runner-pipeline.gguf");
    CHECK_MSG(model_write_random(&shape, path, err, sizeof(err)) == 0, "%s", err);
    CHECK_MSG(model_load(&model, path, err, sizeof(err)) == 0, "%s", err);
    if (!model) return test_status("test_runner_pipeline");
    static struct result alone[MAX_REQUESTS];
    struct spec specs[MAX_REQUESTS];
    for (float temperature = 0.0f; temperature < 1.0f; temperature += 0.8f) {
        const char *what = temperature > 0 ? "seeded" : "greedy";
        make_specs(specs, temperature);
        run_alone(model, specs, alone);
        check_pipeline(model, 2, 1, 16 * 16, specs, alone, what);
        check_pipeline(model, 3, 1, 16 * 16, specs, alone, what);
        check_pipeline(model, 2, 2, 16 * 16, specs, alone, what);
        if (temperature == 0.0f) {
            check_pipeline(model, 2, 1, 24, specs, alone, "preempted");
            check_cancel(model, specs, alone);
        }
    }
    model_free(model);
    remove(path);
    return test_status("test_runner_pipeline");
}
