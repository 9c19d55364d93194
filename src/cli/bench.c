/* bench.c -- `lockstep bench`: prompt processing and generation speed, like
 * llama-bench.
 *
 * pp: p tokens prefilled in chunks of --batch; tg: n tokens decoded one at
 * a time; each from an empty cache, or after -d tokens prefilled before the
 * clock starts (a long conversation's cached prefix, llama-bench's -d). Tokens are fixed
 * pseudo-random ids, so tokenization is not measured. One warm-up run, then
 * --reps timed runs of each; the median and the spread (min..max) are
 * printed, with generation's achieved memory bandwidth: the bytes of weights
 * read per token times tokens per second. --profile adds, per test, where
 * the timed runs' time went (the engine's profile; see engine.h). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bench_options {
    const char *model_path;
    int n_prompt; /* pp test length (0: skip) */
    int n_gen;    /* tg test length (0: skip) */
    int depth;    /* tokens already in the cache when a test starts (-d) */
    int n_threads;
    int reps;
    int batch;
    struct cli_parallel parallel;
    enum tensor_type kv_type; /* --kv-type */
    int profile;              /* --profile: print where each test's time went */
};

static void bench_usage(FILE *out) {
    fprintf(out,
            "usage: lockstep bench -m MODEL [-p 512] [-n 128] [-d 0] [-t 2] [--reps 5] [-b 512]\n"
            "  -p N        prompt tokens to process (0 skips the test)\n"
            "  -n N        tokens to generate (0 skips the test)\n"
            "  -d N        tokens of context already cached when each test starts\n"
            "              (prefilled before the clock starts, as llama-bench's -d)\n"
            "  -t N        threads\n"
            "  --reps N    timed repetitions (median and spread are printed)\n"
            "  -b N        prompt tokens per forward pass\n"
            "  --profile   print where each test's time goes (products, attention, per-token\n"
            "              work, collectives, the rest)\n" CLI_KV_TYPE_HELP CLI_PARALLEL_HELP);
}

static int parse_bench_options(int argc, char **argv, struct bench_options *o) {
    const char *cmd = "bench";
    *o = (struct bench_options){.n_prompt = 512,
                                .n_gen = 128,
                                .n_threads = 2,
                                .reps = 5,
                                .batch = 512,
                                .kv_type = TENSOR_F16};
    cli_parallel_default(&o->parallel);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (cli_parallel_option(cmd, argc, argv, &i, &o->parallel, &rc)) return -1;
        if (rc) continue;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->model_path);
        else if (!strcmp(a, "-p"))
            rc = cli_int_value(cmd, argc, argv, &i, 0, 1 << 20, &o->n_prompt);
        else if (!strcmp(a, "-n"))
            rc = cli_int_value(cmd, argc, argv, &i, 0, 1 << 20, &o->n_gen);
        else if (!strcmp(a, "-d") || !strcmp(a, "--depth"))
            rc = cli_int_value(cmd, argc, argv, &i, 0, 1 << 20, &o->depth);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            rc = cli_int_value(cmd, argc, argv, &i, 1, 256, &o->n_threads);
        else if (!strcmp(a, "--reps") || !strcmp(a, "-r"))
            rc = cli_int_value(cmd, argc, argv, &i, 1, 1000, &o->reps);
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch"))
            rc = cli_int_value(cmd, argc, argv, &i, 1, 1 << 16, &o->batch);
        else if (!strcmp(a, "--profile"))
            o->profile = 1;
        else if (!strcmp(a, "--kv-type"))
            rc = cli_kv_type_value(cmd, argc, argv, &i, &o->kv_type);
        else {
            fprintf(stderr, "lockstep bench: unknown option '%s' (see --help)\n", a);
            return -1;
        }
        if (rc) return -1;
    }
    if (!o->model_path) {
        fprintf(stderr, "lockstep bench: no model given (-m FILE)\n");
        return -1;
    }
    return 0;
}

/* Passes of up to chunk tokens over tokens [begin, end) of seq; 0 or -1. */
static int run_passes(struct engine *engine, struct kv_sequence *seq, const int *tokens, int begin,
                      int end, int chunk) {
    char err[256];
    for (int start = begin; start < end; start += chunk) {
        int len = end - start < chunk ? end - start : chunk;
        if (engine_run_sequence(engine, seq, tokens + start, len, start, err, sizeof(err))) {
            fprintf(stderr, "lockstep bench: %s\n", err);
            return -1;
        }
    }
    return 0;
}

/* Runs one test: the first depth tokens prefilled in passes of prefill
 * tokens before the clock starts, then n tokens in passes of chunk tokens
 * (1 for tg). Returns the timed seconds, or a negative value on error. */
static double run_once(struct engine *engine, const int *tokens, int depth, int n, int chunk,
                       int prefill) {
    struct kv_sequence seq = {0};
    double elapsed = -1.0;
    int profile = engine->profile.on;
    engine->profile.on = 0; /* the depth is not the test */
    int prefilled = kv_sequence_reserve(&engine->kv, &seq, depth + n) == 0 &&
                    run_passes(engine, &seq, tokens, 0, depth, prefill) == 0;
    engine->profile.on = profile;
    if (prefilled) {
        double t0 = cli_now();
        if (run_passes(engine, &seq, tokens, depth, depth + n, chunk) == 0)
            elapsed = cli_now() - t0;
    }
    kv_sequence_release(&engine->kv, &seq);
    return elapsed;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Where the timed runs' seconds went, per token, from the engine's profile
 * and its time in collectives. */
static void print_profile(const struct engine *engine, const char *label, double seconds,
                          double comm_seconds, int tokens) {
    static const char *const names[ENGINE_WORK_KINDS] = {"products", "attention", "per-token work"};
    double rest = seconds - comm_seconds, per_token = 1e3 / tokens;
    printf("%s, ms per token:", label);
    for (int w = 0; w < ENGINE_WORK_KINDS; w++) {
        printf(" %s %.4f (%.0f%%),", names[w], engine->profile.seconds[w] * per_token,
               100 * engine->profile.seconds[w] / seconds);
        rest -= engine->profile.seconds[w];
    }
    printf(" collectives %.4f (%.0f%%), rest %.4f (%.0f%%)\n", comm_seconds * per_token,
           100 * comm_seconds / seconds, rest * per_token, 100 * rest / seconds);
}

/* Times reps runs after a warm-up; prints a table row, and where the time
 * went if profile. Returns the median tok/s, or -1. */
static double bench_test(struct engine *engine, const int *tokens, const struct bench_options *o,
                         int n, int chunk, int prefill, const char *label) {
    int reps = o->reps;
    double *rates = malloc((size_t)reps * sizeof(double));
    if (!rates || run_once(engine, tokens, o->depth, n, chunk, prefill) < 0) {
        free(rates);
        return -1;
    }
    double comm_before = engine->comm_seconds, total = 0;
    memset(&engine->profile, 0, sizeof(engine->profile));
    engine->profile.on = o->profile;
    for (int r = 0; r < reps && total >= 0; r++) {
        double seconds = run_once(engine, tokens, o->depth, n, chunk, prefill);
        rates[r] = n / seconds;
        total = seconds < 0 ? -1 : total + seconds;
    }
    engine->profile.on = 0;
    if (total < 0) {
        free(rates);
        return -1;
    }
    double comm_ms = (engine->comm_seconds - comm_before) * 1e3 / ((double)n * reps);
    qsort(rates, (size_t)reps, sizeof(double), compare_doubles);
    double median = reps % 2 ? rates[reps / 2] : (rates[reps / 2 - 1] + rates[reps / 2]) / 2;
    printf("| %-12s | %10.2f | %10.2f .. %-10.2f | %8.4f |\n", label, median, rates[0],
           rates[reps - 1], comm_ms);
    if (o->profile)
        print_profile(engine, label, total, engine->comm_seconds - comm_before, n * reps);
    free(rates);
    return median;
}

/* Fixed pseudo-random token ids (tokenization is not measured). */
static int *bench_tokens(int n, int vocab_size) {
    uint64_t state = 0x9E3779B97F4A7C15ull;
    int *tokens = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    for (int i = 0; tokens && i < n; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        tokens[i] = (int)((state >> 33) % (uint64_t)vocab_size);
    }
    return tokens;
}

/* The pp and tg tests on the leader's engine; 0 or -1. */
static int bench_tests(struct engine *engine, const struct model *model,
                       const struct bench_options *o, int chunk, const int *tokens, int tp) {
    char label[48], at[24] = "";
    int rc = 0;
    if (o->depth > 0) snprintf(at, sizeof(at), " @ d%d", o->depth);
    printf("model: %s (%s, %d layers, dim %d, %s weights %.1f MB), threads %d, tp %d, pp %d, "
           "isa %s, %s KV cache, reps %d\n",
           model->path, model_arch_name(model->config.arch), model->config.n_layers,
           model->config.dim, tensor_type_name(model->layers[0].wq.type), model->weight_bytes / 1e6,
           o->n_threads, tp, engine->n_stages, tensor_isa_name(tensor_isa_current()),
           tensor_type_name(o->kv_type), o->reps);
    printf("| test         |   tok/s    |   spread (min .. max)   | comm ms/token |\n");
    if (o->n_prompt > 0) {
        snprintf(label, sizeof(label), "pp%d%s", o->n_prompt, at);
        rc |= bench_test(engine, tokens, o, o->n_prompt, chunk, o->batch, label) < 0;
    }
    if (o->n_gen > 0) {
        snprintf(label, sizeof(label), "tg%d%s", o->n_gen, at);
        double tg = bench_test(engine, tokens, o, o->n_gen, 1, o->batch, label);
        rc |= tg < 0;
        if (tg > 0)
            printf("generation memory bandwidth: %.2f GB/s (%.1f MB of weights per token)\n",
                   model->weight_bytes * tg / 1e9, model->weight_bytes / 1e6);
    }
    return rc ? -1 : 0;
}

/* Returns the process exit status. */
static int run_bench(const struct model *model, const struct bench_options *o) {
    char err[512];
    int longest = o->depth + (o->n_prompt > o->n_gen ? o->n_prompt : o->n_gen);
    int chunk = o->batch < o->n_prompt ? o->batch : (o->n_prompt > 0 ? o->n_prompt : 1);
    int depth_pass = o->batch < o->depth ? o->batch : o->depth;
    struct engine_params params = {.n_threads = o->n_threads,
                                   .max_tokens = chunk > depth_pass ? chunk : depth_pass,
                                   .context_length = longest > 0 ? longest : 1,
                                   .kv_block_size = 16,
                                   .kv_type = o->kv_type};
    struct engine_group group = cli_parallel_group(&o->parallel);
    int *tokens = bench_tokens(longest, model->config.vocab_size);
    int rc = 1;
    if (!tokens)
        fprintf(stderr, "lockstep bench: out of memory\n");
    else if (cli_read_fault("bench", &params.fault) == 0 &&
             (rc = engine_group_start(&group, model, &params, err, sizeof(err))) != 0)
        fprintf(stderr, "lockstep bench: %s\n", err);
    else if (rc == 0) {
        struct engine *leader = engine_group_leader(&group);
        if (leader && bench_tests(leader, model, o, chunk, tokens, group.n) != 0)
            rc = engine_exit_code(leader);
        cli_leave_if_collective_failed(leader);
    }
    if (engine_group_stop(&group, err, sizeof(err)) != 0 && rc == 0) {
        fprintf(stderr, "lockstep bench: %s\n", err);
        rc = 1;
    }
    free(tokens);
    return rc;
}

int cli_bench(int argc, char **argv) {
    struct bench_options o;
    char err[512];
    struct model *model;
    int parsed = parse_bench_options(argc, argv, &o);
    if (parsed) {
        bench_usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    if (model_load(&model, o.model_path, err, sizeof(err))) {
        fprintf(stderr, "lockstep bench: %s\n", err);
        return 1;
    }
    int rc = run_bench(model, &o);
    model_free(model);
    return rc;
}
