/* runner_bench.c -- what continuous batching buys, and what a prompt
 * admission costs the running streams (issue 4's benchmarks).
 *
 * Usage: runner_bench MODEL [THREADS] [KV_TYPE] [TP] [SAMPLING] [PARTS]
 *   KV_TYPE: f16 (the default), q8_0 or f32; TP: tensor-parallel ranks, as
 *   threads of this process sharing THREADS (default 1: one engine whose
 *   pool has THREADS threads); SAMPLING: greedy (the default), llama
 *   (llama.cpp's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p
 *   0.05) or openai (the OpenAI API's: temperature 1 over the whole
 *   vocabulary), every request seeded by its id; PARTS: which of the three
 *   parts below run, a comma list of aggregate, breakdown and admission
 *   (default: all; on a 1B-shaped model the first and third take many
 *   minutes)
 * Runs the runner in process (no socket) on the model:
 *   1. aggregate generation tok/s with 1, 4, 16 and 64 sequences decoding
 *      (steady state: decode-only steps), as a ratio to 1 sequence, and to
 *      1 sequence with the last-level cache emptied before every step;
 *   2. a 512-token prompt admitted while 16 sequences decode, for step
 *      budgets from 32 to 528 tokens (528: the whole prompt in one step):
 *      its time to first token, and the running streams' inter-token
 *      latency during the admission (median and worst step), against their
 *      latency without it and against the unchunked time to first token;
 *   3. where a decode step of 1 and of 16 sequences goes: matrix products
 *      (and the rate they multiply-add at), attention, per-token work and
 *      the rest (scheduling, sampling), from the engine's profile.
 * Every number is a median of several runs in this invocation, but the
 * breakdown's, which are means over every decode-only step of its rounds.
 * The cross-core round trip, printed before and after, tells what state
 * the machine was in (see core_round_trip_ns). */
#include "engine/engine.h"
#include "runner/runner.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REPEATS 3
#define MAX_IDS 128

static uint64_t first_token_us[MAX_IDS];
static int tokens_seen[MAX_IDS];

static void on_token(void *c, uint32_t client, const struct runner_token *t) {
    (void)c;
    (void)client;
    if (t->id < MAX_IDS && tokens_seen[t->id]++ == 0) first_token_us[t->id] = clock_now_us();
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
static const struct runner_sink sink = {on_token, on_finished, on_heartbeat, NULL, NULL};

/* What every request samples with (SAMPLING), less its seed. */
static struct runner_sampling sampling;

/* Sets sampling from a SAMPLING argument; -1 if it names none. */
static int set_sampling(const char *name) {
    runner_sampling_default(&sampling);
    if (!strcmp(name, "greedy")) {
        sampling.temperature = 0;
    } else if (!strcmp(name, "openai")) {
        sampling.temperature = 1;
        sampling.top_k = 0;
        sampling.top_p = 1;
        sampling.min_p = 0;
    } else if (strcmp(name, "llama") != 0) {
        return -1;
    }
    return 0;
}

static void submit(struct runner *r, uint64_t id, int n_prompt, int max_tokens, int vocab) {
    struct runner_request q = {
        .id = id, .max_tokens = max_tokens, .n_prompt = n_prompt, .ignore_eos = 1};
    q.sampling = sampling;
    q.sampling.seed = id;
    q.prompt = malloc((size_t)n_prompt * sizeof(int));
    for (int i = 0; i < n_prompt; i++)
        q.prompt[i] = 1 + (int)((id * 131 + (uint64_t)i * 7) % (uint64_t)(vocab - 1));
    runner_submit(r, 0, &q, clock_now_us());
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
    struct runner_params p = {.max_sequences = max_sequences,
                              .max_waiting = 256,
                              .step_tokens = budget,
                              .trace_steps = 64,
                              .prefix_cache = 1}; /* the default cache */
    if (runner_create(&r, e, &p, &sink, err, sizeof(err))) fprintf(stderr, "%s\n", err);
    return r;
}

/* What the decode-only steps of one run (every sequence decoding) took. */
struct decode_steps {
    int steps;                      /* decode-only steps */
    double seconds;                 /* their wall time */
    double tokens;                  /* tokens they carried */
    double work[ENGINE_WORK_KINDS]; /* seconds per kind of work (profile only) */
};

/* Memory read between steps to push the weights out of the last-level
 * cache (evict_cache): twice the cache or 64 MiB, whichever is more. */
static unsigned char *evict_buffer;
static size_t evict_bytes;

/* Reads evict_buffer through, a line at a time, so that what the last
 * step left in the caches is gone. */
static void evict_cache(void) {
    const volatile unsigned char *bytes = evict_buffer;
    for (size_t i = 0; i < evict_bytes; i += 64) (void)bytes[i];
}

/* Runs n_sequences fresh requests (16-token prompts, 48 tokens each) to the
 * end on a new runner and adds its decode-only steps to out; with profile,
 * also the engine's time per kind of work in those steps; with evict, the
 * last-level cache is emptied before every step (outside its time). */
static void run_decode(struct engine *e, int vocab, int n_sequences, int profile, int evict,
                       struct decode_steps *out) {
    char err[256];
    const struct runner_trace_step *last;
    struct runner *r = make_runner(e, 64, 128);
    for (int i = 0; i < n_sequences; i++) submit(r, (uint64_t)i, 16, 48, vocab);
    while (runner_has_work(r)) {
        if (evict) evict_cache();
        memset(&e->profile, 0, sizeof(e->profile));
        e->profile.on = profile;
        if (runner_step(r, 0, err, sizeof(err)) < 0) {
            fprintf(stderr, "runner_bench: %s\n", err);
            exit(1);
        }
        runner_trace_recent(r, &last, 1);
        int all_decode = last->n_entries == n_sequences;
        for (int i = 0; i < last->n_entries; i++) all_decode &= last->entries[i].decode;
        if (!all_decode) continue;
        out->steps++;
        out->seconds += (double)(last->end_us - last->start_us) * 1e-6;
        out->tokens += last->n_tokens;
        for (int w = 0; w < ENGINE_WORK_KINDS; w++) out->work[w] += e->profile.seconds[w];
    }
    memset(&e->profile, 0, sizeof(e->profile));
    runner_free(r);
}

/* Rounds alternate the sequence counts (1, 4, 16, 64, 1, 4, ...), so a
 * drift of the machine's speed during the run weighs on every count alike
 * instead of on whichever ran last. Besides the ratio of the medians, each
 * count's ratio to the single sequence of its own round is taken, and
 * their median printed: the single-sequence rate drifts by a quarter
 * within minutes on the guests measured, and a round's counts run within
 * seconds of each other.
 *
 * Each round also runs one sequence with the last-level cache emptied
 * before every step. A step of one sequence reads every weight once, and
 * when the weights are not much larger than that cache part of them is
 * still there from the step before (85M Q8_0: 90 MB of weights, a 32 MB
 * cache): one sequence then runs faster than memory can deliver the
 * weights, and the ratios above are measured against that. Against the
 * evicted run they show what batching buys over reading every weight
 * from memory each step. */
#define AGGREGATE_ROUNDS 9

/* Sequence counts of a round; the last entry is 1 sequence, evicted. */
static const int aggregate_counts[] = {1, 4, 16, 64, 1};
#define AGGREGATE_RUNS 5
#define EVICTED        (AGGREGATE_RUNS - 1)

/* Median over the rounds of run c's rate (tok/s) over run base's of the
 * same round; base -1: of the rate itself. Leaves rates as they are. */
static double median_ratio(double rates[][AGGREGATE_ROUNDS], int c, int base) {
    double v[AGGREGATE_ROUNDS];
    for (int k = 0; k < AGGREGATE_ROUNDS; k++) {
        double below = base < 0 ? 1 : rates[base][k];
        v[k] = below > 0 ? rates[c][k] / below : 0;
    }
    return median(v, AGGREGATE_ROUNDS);
}

static void bench_aggregate(struct engine *e, int vocab) {
    double rates[AGGREGATE_RUNS][AGGREGATE_ROUNDS];
    printf("\n## aggregate generation (decode-only steps, median of %d alternating rounds)\n\n",
           AGGREGATE_ROUNDS);
    for (int k = 0; k < AGGREGATE_ROUNDS; k++)
        for (int c = 0; c < AGGREGATE_RUNS; c++) {
            struct decode_steps d = {0};
            run_decode(e, vocab, aggregate_counts[c], 0, c == EVICTED, &d);
            rates[c][k] = d.seconds > 0 ? d.tokens / d.seconds : 0;
        }
    double base = median_ratio(rates, 0, -1);
    printf("| sequences | tok/s | x 1 sequence | x 1 sequence of the same round (median) | x 1 "
           "sequence evicted, same round (median) |\n|---|---|---|---|---|\n");
    for (int c = 0; c < AGGREGATE_RUNS; c++) {
        double m = median_ratio(rates, c, -1);
        if (c == EVICTED)
            printf("| 1, cache evicted before each step ");
        else
            printf("| %d ", aggregate_counts[c]);
        printf("| %.1f | %.2f | %.2f | %.2f |\n", m, base > 0 ? m / base : 0,
               median_ratio(rates, c, 0), median_ratio(rates, c, EVICTED));
    }
    fflush(stdout);
}

/* Multiply-adds of one token's matrix products. */
static double token_multiply_adds(const struct model *m) {
    double sum = (double)m->output.rows * m->output.cols;
    for (int l = 0; l < m->config.n_layers; l++) {
        const struct model_layer *w = &m->layers[l];
        const struct tensor_matrix *ms[] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                            &w->w_gate, &w->w_up, &w->w_down};
        for (int i = 0; i < 7; i++) sum += (double)ms[i]->rows * ms[i]->cols;
    }
    return sum;
}

/* Means over the decode-only steps of BREAKDOWN_ROUNDS runs of each count. */
#define BREAKDOWN_ROUNDS 5

static void bench_breakdown(struct engine *e, const struct model *m) {
    static const int counts[] = {1, 16};
    printf("\n## where a decode step goes (means over the decode-only steps of %d rounds)\n\n",
           BREAKDOWN_ROUNDS);
    printf("| sequences | step ms | products ms (share) | products GMAC/s | attention ms (share) "
           "| per-token work ms (share) | rest ms (share) |\n|---|---|---|---|---|---|---|\n");
    for (int c = 0; c < 2; c++) {
        struct decode_steps d = {0};
        for (int k = 0; k < BREAKDOWN_ROUNDS; k++)
            run_decode(e, m->config.vocab_size, counts[c], 1, 0, &d);
        double per_step = d.steps ? 1e3 / d.steps : 0, work[ENGINE_WORK_KINDS]; /* ms */
        for (int w = 0; w < ENGINE_WORK_KINDS; w++) work[w] = d.work[w] * per_step;
        double step = d.seconds * per_step;
        double rest = step - work[ENGINE_WORK_PRODUCTS] - work[ENGINE_WORK_ATTENTION] -
                      work[ENGINE_WORK_TOKENS];
        double share = step > 0 ? 100 / step : 0;
        double products = work[ENGINE_WORK_PRODUCTS];
        double rate = products > 0 ? counts[c] * token_multiply_adds(m) / (products * 1e6) : 0;
        printf("| %d | %.2f | %.2f (%.0f%%) | %.0f | %.2f (%.0f%%) | %.2f (%.0f%%) | %.2f (%.0f%%) "
               "|\n",
               counts[c], step, products, products * share, rate, work[ENGINE_WORK_ATTENTION],
               work[ENGINE_WORK_ATTENTION] * share, work[ENGINE_WORK_TOKENS],
               work[ENGINE_WORK_TOKENS] * share, rest, rest * share);
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
    double before[8] = {0}, during[600] = {0};
    int n_before = 0, n_during = 0;
    const struct runner_trace_step *last;
    memset(tokens_seen, 0, sizeof(tokens_seen));
    for (int i = 0; i < 16; i++) submit(r, (uint64_t)i, 16, 400, vocab);
    for (int k = 0; k < 12; k++) {
        runner_step(r, 0, err, sizeof(err));
        runner_trace_recent(r, &last, 1);
        if (k >= 4) before[n_before++] = (double)(last->end_us - last->start_us) * 1e-3;
    }
    uint64_t t0 = clock_now_us();
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

/* A cache line passed back and forth between two threads. Every pool job,
 * and every row one core writes and the other reads, pays this round trip.
 * On the 2-vCPU guests measured here it is 50-180 ns when the two vCPUs
 * sit close and 300-430 ns when they do not (the VNNI peak and the memory
 * bandwidth stay the same); work passed between the cores then costs 2-3
 * times as much, so a run's state must be known to compare it with
 * another. */
#define ROUND_TRIPS 100000

static _Alignas(64) atomic_int ball;

static void *return_ball(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUND_TRIPS; i++) {
        while (atomic_load_explicit(&ball, memory_order_acquire) != 2 * i + 1) continue;
        atomic_store_explicit(&ball, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

/* Nanoseconds per round trip, or -1 if the second thread cannot start. */
static double core_round_trip_ns(void) {
    pthread_t other;
    atomic_store(&ball, 0);
    if (pthread_create(&other, NULL, return_ball, NULL)) return -1;
    uint64_t start = clock_now_us();
    for (int i = 0; i < ROUND_TRIPS; i++) {
        atomic_store_explicit(&ball, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&ball, memory_order_acquire) != 2 * i + 2) continue;
    }
    uint64_t end = clock_now_us();
    pthread_join(other, NULL);
    return (double)(end - start) * 1e3 / ROUND_TRIPS;
}

int main(int argc, char **argv) {
    char err[256];
    struct model *model = NULL;
    if (argc < 2) {
        fprintf(stderr,
                "usage: runner_bench MODEL [THREADS] [f16|q8_0|f32] [TP] [greedy|llama|openai] "
                "[aggregate,breakdown,admission]\n");
        return 2;
    }
    const char *sampling_name = argc > 5 ? argv[5] : "greedy";
    if (set_sampling(sampling_name)) {
        fprintf(stderr, "runner_bench: SAMPLING is greedy, llama or openai, not '%s'\n",
                sampling_name);
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int kv_type = argc > 3 ? tensor_type_from_name(argv[3]) : TENSOR_F16;
    int tp = argc > 4 ? atoi(argv[4]) : 1;
    if (!kv_cache_type_supported(kv_type)) {
        fprintf(stderr, "runner_bench: the KV type is f16, q8_0 or f32, not '%s'\n", argv[3]);
        return 2;
    }
    if (tp < 1 || tp > threads) {
        fprintf(stderr, "runner_bench: TP is 1 .. THREADS, not '%s'\n", argv[4]);
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
    struct engine_group group = {.n = tp, .backend = COMM_LOCAL, .deadline = 30};
    if (engine_group_start(&group, model, &p, err, sizeof(err))) {
        fprintf(stderr, "runner_bench: %s\n", err);
        engine_group_stop(&group, err, sizeof(err));
        model_free(model);
        return 1;
    }
    long cache = sysconf(_SC_LEVEL3_CACHE_SIZE);
    evict_bytes = cache > 32L << 20 ? 2 * (size_t)cache : (size_t)64 << 20;
    evict_buffer = malloc(evict_bytes);
    if (!evict_buffer) {
        fprintf(stderr, "runner_bench: cannot allocate %zu bytes\n", evict_bytes);
        engine_group_stop(&group, err, sizeof(err));
        model_free(model);
        return 1;
    }
    memset(evict_buffer, 1, evict_bytes);
    struct engine *engine = engine_group_leader(&group);
    printf("runner_bench: %s, %d threads, tensor-parallel ranks %d, %s KV cache, %s sampling\n",
           argv[1], threads, tp, tensor_type_name(kv_type), sampling_name);
    printf("cross-core round trip before: %.0f ns\n", core_round_trip_ns());
    const char *parts = argc > 6 ? argv[6] : "aggregate,breakdown,admission";
    if (strstr(parts, "aggregate")) bench_aggregate(engine, model->config.vocab_size);
    if (strstr(parts, "breakdown")) bench_breakdown(engine, model);
    if (strstr(parts, "admission")) bench_admission(engine, model->config.vocab_size);
    printf("\ncross-core round trip after: %.0f ns\n", core_round_trip_ns());
    free(evict_buffer);
    int rc = engine_group_stop(&group, err, sizeof(err)) ? 1 : 0;
    if (rc) fprintf(stderr, "runner_bench: %s\n", err);
    model_free(model);
    return rc;
}
