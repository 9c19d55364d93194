/* runner_bench.c -- what continuous batching buys, and what a prompt
 * admission costs the running streams (issue 4's benchmarks).
 *
 * Usage: runner_bench MODEL [THREADS] [KV_TYPE]   (KV_TYPE f16, the default, q8_0 or f32)
 * Runs the runner in process (no socket) on the model:
 *   1. aggregate generation tok/s with 1, 4, 16 and 64 sequences decoding
 *      (steady state: decode-only steps), as a ratio to 1 sequence;
 *   2. a 512-token prompt admitted while 16 sequences decode, for step
 *      budgets from 32 to 528 tokens (528: the whole prompt in one step):
 *      its time to first token, and the running streams' inter-token
 *      latency during the admission (median and worst step), against their
 *      latency without it and against the unchunked time to first token.
 * Every number is a median of several runs in this invocation. */
#include "runner/runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPEATS 3
#define MAX_IDS 128

static uint64_t first_token_us[MAX_IDS];
static int tokens_seen[MAX_IDS];

static void on_token(void *c, uint32_t client, const struct runner_token *t) {
    (void)c;
    (void)client;
    if (t->id < MAX_IDS && tokens_seen[t->id]++ == 0) first_token_us[t->id] = runner_now_us();
}
static void on_finished(void *c, uint32_t client, const struct runner_finished *f) {
    (void)c;
    (void)client;
    if (f->reason == RUNNER_FINISH_ERROR) fprintf(stderr, "runner_bench: %s\n", f->message);
}
static void on_heartbeat(void *c, const struct runner_heartbeat *h) {
    (void)c;
    (void)h;
}
static const struct runner_sink sink = {on_token, on_finished, on_heartbeat, NULL};

static void submit(struct runner *r, uint64_t id, int n_prompt, int max_tokens, int vocab) {
    struct runner_request q = {
        .id = id, .max_tokens = max_tokens, .n_prompt = n_prompt, .ignore_eos = 1};
    sampler_params_default(&q.sampling);
    q.sampling.temperature = 0;
    q.prompt = malloc((size_t)n_prompt * sizeof(int));
    for (int i = 0; i < n_prompt; i++)
        q.prompt[i] = 1 + (int)((id * 131 + (uint64_t)i * 7) % (uint64_t)(vocab - 1));
    runner_submit(r, 0, &q, runner_now_us());
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static struct runner *make_runner(struct engine *e, int max_sequences, int budget) {
    char err[256];
    struct runner *r = NULL;
    struct runner_params p = {max_sequences, 256, budget, 64, 0, {0}};
    if (runner_create(&r, e, &p, &sink, err, sizeof(err))) fprintf(stderr, "%s\n", err);
    return r;
}

/* Steps until the runner is idle; returns the mean decode-only step rate in
 * tokens/s over the steps where every sequence was decoding. */
static double run_until_idle(struct runner *r, struct engine *e, int n_sequences) {
    char err[256];
    double decode_seconds = 0, decode_tokens = 0;
    const struct runner_trace_step *last;
    while (runner_has_work(r)) {
        if (runner_step(r, 0, err, sizeof(err)) < 0) {
            fprintf(stderr, "runner_bench: %s\n", err);
            exit(1);
        }
        runner_trace_recent(r, &last, 1);
        int all_decode = last->n_entries == n_sequences;
        for (int i = 0; i < last->n_entries; i++) all_decode &= last->entries[i].decode;
        if (all_decode) {
            decode_seconds += (double)(last->end_us - last->start_us) * 1e-6;
            decode_tokens += last->n_tokens;
        }
    }
    (void)e;
    return decode_seconds > 0 ? decode_tokens / decode_seconds : 0;
}

/* Rounds alternate the sequence counts (1, 4, 16, 64, 1, 4, ...), so a
 * drift of the machine's speed during the run weighs on every count alike
 * instead of on whichever ran last. */
#define AGGREGATE_ROUNDS 5

static void bench_aggregate(struct engine *e, int vocab) {
    static const int counts[] = {1, 4, 16, 64};
    double rates[4][AGGREGATE_ROUNDS];
    printf("\n## aggregate generation (decode-only steps, median of %d alternating rounds)\n\n",
           AGGREGATE_ROUNDS);
    printf("| sequences | tok/s | x 1 sequence |\n|---|---|---|\n");
    for (int k = 0; k < AGGREGATE_ROUNDS; k++)
        for (int c = 0; c < 4; c++) {
            struct runner *r = make_runner(e, 64, 128);
            for (int i = 0; i < counts[c]; i++) submit(r, (uint64_t)i, 16, 48, vocab);
            rates[c][k] = run_until_idle(r, e, counts[c]);
            runner_free(r);
        }
    double base = median(rates[0], AGGREGATE_ROUNDS);
    for (int c = 0; c < 4; c++) {
        double m = median(rates[c], AGGREGATE_ROUNDS);
        printf("| %d | %.1f | %.2f |\n", counts[c], m, m / base);
    }
    fflush(stdout);
}

/* One admission: 16 streams decoding, then a 512-token prompt. Fills its
 * TTFT and the streams' median and worst step time while it was prefilled,
 * and their step time before it came (ms). */
static void admit_once(struct engine *e, int vocab, int budget, double *ttft, double *itl_median,
                       double *itl_worst, double *itl_before) {
    char err[256];
    struct runner *r = make_runner(e, 17, budget);
    double before[8], during[600];
    int n_before = 0, n_during = 0;
    const struct runner_trace_step *last;
    memset(tokens_seen, 0, sizeof(tokens_seen));
    for (int i = 0; i < 16; i++) submit(r, (uint64_t)i, 16, 400, vocab);
    for (int k = 0; k < 12; k++) {
        runner_step(r, 0, err, sizeof(err));
        runner_trace_recent(r, &last, 1);
        if (k >= 4) before[n_before++] = (double)(last->end_us - last->start_us) * 1e-3;
    }
    uint64_t t0 = runner_now_us();
    submit(r, 100, 512, 4, vocab);
    while (tokens_seen[100] == 0 && n_during < 600) {
        runner_step(r, 0, err, sizeof(err));
        runner_trace_recent(r, &last, 1);
        during[n_during++] = (double)(last->end_us - last->start_us) * 1e-3;
    }
    *ttft = (double)(first_token_us[100] - t0) * 1e-3;
    *itl_before = median(before, n_before);
    *itl_median = median(during, n_during);
    *itl_worst = during[n_during - 1]; /* sorted by median() */
    runner_free(r);
}

static void bench_admission(struct engine *e, int vocab) {
    static const int budgets[] = {32, 40, 44, 48, 64, 128, 528};
    double rows[7][4];
    printf("\n## a 512-token prompt admitted while 16 sequences decode (median of %d)\n\n",
           REPEATS);
    for (int b = 0; b < 7; b++) {
        double v[4][REPEATS];
        for (int k = 0; k < REPEATS; k++)
            admit_once(e, vocab, budgets[b], &v[0][k], &v[1][k], &v[2][k], &v[3][k]);
        for (int j = 0; j < 4; j++) rows[b][j] = median(v[j], REPEATS);
    }
    printf("| budget | TTFT ms | x unchunked TTFT | streams' ITL ms (median / worst) | ITL "
           "before ms | worst / before |\n|---|---|---|---|---|---|\n");
    for (int b = 0; b < 7; b++)
        printf("| %d | %.1f | %.2f | %.1f / %.1f | %.1f | %.2f |\n", budgets[b], rows[b][0],
               rows[b][0] / rows[6][0], rows[b][1], rows[b][2], rows[b][3],
               rows[b][2] / rows[b][3]);
}

int main(int argc, char **argv) {
    char err[256];
    struct model *model = NULL;
    struct engine engine;
    if (argc < 2) {
        fprintf(stderr, "usage: runner_bench MODEL [THREADS] [f16|q8_0|f32]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int kv_type = argc > 3 ? tensor_type_from_name(argv[3]) : TENSOR_F16;
    if (!kv_cache_type_supported(kv_type)) {
        fprintf(stderr, "runner_bench: the KV type is f16, q8_0 or f32, not '%s'\n", argv[3]);
        return 2;
    }
    if (model_load(&model, argv[1], err, sizeof(err))) {
        fprintf(stderr, "runner_bench: %s\n", err);
        return 1;
    }
    struct engine_params p = {.n_threads = threads,
                              .max_tokens = 528,
                              .context_length = 1024,
                              .kv_block_size = 16,
                              .kv_blocks = 2048,
                              .kv_type = (enum tensor_type)kv_type};
    if (engine_init(&engine, model, &p, err, sizeof(err))) {
        fprintf(stderr, "runner_bench: %s\n", err);
        return 1;
    }
    printf("runner_bench: %s, %d threads, %s KV cache\n", argv[1], threads,
           tensor_type_name(kv_type));
    bench_aggregate(&engine, model->config.vocab_size);
    bench_admission(&engine, model->config.vocab_size);
    engine_free(&engine);
    model_free(model);
    return 0;
}
