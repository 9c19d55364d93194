/* tensor_bench.c -- micro-benchmark of tensor_matmul on a llama-shaped model.
 *
 * The weights of a dim-768, hidden-2048, 12-layer, vocab-512 model (85M
 * parameters: the shape BASELINES.md measures llama.cpp on) are allocated
 * for one type at a time, every layer separately so generation streams them
 * from memory as a real forward pass does. For each type and instruction
 * set it reports:
 *  - GEMV (batch 1, a generated token): GB/s of weights read and tokens/s;
 *  - the same GEMV on one matrix read again and again from the caches (the
 *    first layer's ffn_gate, 2048 x 768): the kernel's rate with no memory
 *    to wait for, the ceiling of the first figure, and their ratio;
 *  - GEMM (batch 64 and 512, a prompt): GFLOP/s and tokens/s.
 * Only the matmuls are timed (no attention, norms or activations).
 *
 * Build (not part of CMake; the library comes from a build directory):
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -I src bench/tensor_bench.c \
 *       build/liblockstep_tensor.a -lpthread -lm -o tensor_bench
 * Run: ./tensor_bench [threads=2] [types=f32,f16,q8_0,q8_0p,q4_0,q4_0p] [isas=avx2,avx512] [cpu]
 * (the k-quants q4_k, q5_k and q6_k and iq4_xs may be listed among the types too)
 * ("scalar" may be listed among the instruction sets; it is slow. "cpu"
 * times with the process's CPU time instead of wall time.) */
#include "tensor/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DIM                768
#define HIDDEN             2048
#define LAYERS             12
#define VOCAB              512
#define MATRICES_PER_LAYER 7

struct model {
    struct tensor_matrix layers[LAYERS][MATRICES_PER_LAYER]; /* wq wk wv wo gate up down */
    struct tensor_matrix output;                             /* (VOCAB, DIM) */
    size_t bytes;                                            /* all weight bytes */
    double flops_per_token;                                  /* 2 * parameters */
};

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;

static float random_float(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)(rng_state >> 40) / 8388608.0f - 1.0f;
}

static int make_matrix(struct tensor_matrix *m, enum tensor_type type, int rows, int cols) {
    size_t row_bytes = tensor_row_bytes(type, cols);
    char *data = aligned_alloc(64, (row_bytes * rows + 63) / 64 * 64);
    float *values = malloc(sizeof(float) * cols);
    if (!data || !values) {
        free(data);
        free(values);
        return -1;
    }
    for (int r = 0; r < rows; r++) {
        char *row = data + (size_t)r * row_bytes;
        for (int i = 0; i < cols; i++) values[i] = random_float() * 0.05f;
        if (type == TENSOR_F32)
            memcpy(row, values, row_bytes);
        else if (type == TENSOR_F16)
            for (int i = 0; i < cols; i++) ((uint16_t *)row)[i] = tensor_fp32_to_fp16(values[i]);
        else if (type == TENSOR_Q8_0)
            tensor_quantize_q8_0((struct tensor_block_q8_0 *)row, values, cols);
        else if (type == TENSOR_Q4_0)
            tensor_quantize_q4_0((struct tensor_block_q4_0 *)row, values, cols);
        else
            tensor_quantize_row(type, row, values, cols);
    }
    free(values);
    *m = tensor_matrix_make(data, type, rows, cols);
    return 0;
}

/* Replaces m by its panel layout (what the engine runs Q8_0 on with AVX2
 * and AVX-512, Q4_0 with AVX2). */
static int pack_matrix(struct tensor_matrix *m) {
    size_t bytes = (tensor_panels_bytes(m) + 63) / 64 * 64;
    void *panels = aligned_alloc(64, bytes);
    if (!panels) return -1;
    const void *rows = m->data;
    *m = tensor_pack_panels(panels, m);
    free((void *)rows);
    return 0;
}

static int make_model(struct model *model, enum tensor_type type, int packed) {
    static const int shapes[MATRICES_PER_LAYER][2] = {{DIM, DIM},   {DIM, DIM},    {DIM, DIM},
                                                      {DIM, DIM},   {HIDDEN, DIM}, {HIDDEN, DIM},
                                                      {DIM, HIDDEN}};
    memset(model, 0, sizeof(*model));
    double parameters = 0;
    for (int l = 0; l < LAYERS; l++) {
        for (int k = 0; k < MATRICES_PER_LAYER; k++) {
            struct tensor_matrix *m = &model->layers[l][k];
            if (make_matrix(m, type, shapes[k][0], shapes[k][1])) return -1;
            model->bytes += m->row_stride * m->rows;
            parameters += (double)m->rows * m->cols;
            if (packed && pack_matrix(m)) return -1;
        }
    }
    if (make_matrix(&model->output, type, VOCAB, DIM)) return -1;
    model->bytes += model->output.row_stride * VOCAB;
    if (packed && pack_matrix(&model->output)) return -1;
    parameters += (double)VOCAB * DIM;
    model->flops_per_token = 2 * parameters;
    return 0;
}

static void free_model(struct model *model) {
    for (int l = 0; l < LAYERS; l++)
        for (int k = 0; k < MATRICES_PER_LAYER; k++) free((void *)model->layers[l][k].data);
    free((void *)model->output.data);
}

/* Timings use wall time, or with "cpu" the process's CPU time: on a shared
 * machine, 1-thread CPU time measures the kernels without the preemptions. */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Memory read bandwidth with the pool's threads: a reference measured in
 * the same run (the machine is shared and noisy). */
struct read_job {
    const uint64_t *data; /* words to read */
    size_t n;             /* word count */
    uint64_t sums[64];    /* per-thread result, so the reads are not optimized away */
};

static void read_worker(void *arg, int thread, int n_threads) {
    struct read_job *job = arg;
    size_t first = job->n * thread / n_threads, last = job->n * (thread + 1) / n_threads;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = first; i + 4 <= last; i += 4) {
        a ^= job->data[i];
        b ^= job->data[i + 1];
        c ^= job->data[i + 2];
        d ^= job->data[i + 3];
    }
    job->sums[thread % 64] = a ^ b ^ c ^ d;
}

static double read_bandwidth(struct tensor_pool *pool) {
    struct read_job job = {0};
    job.n = (size_t)512 << 17; /* 512 MiB */
    uint64_t *data = malloc(job.n * sizeof(uint64_t));
    if (!data) return 0;
    for (size_t i = 0; i < job.n; i++) data[i] = i;
    job.data = data;
    double best = 1e30;
    for (int i = 0; i < 5; i++) {
        double start = now_seconds();
        tensor_pool_run(pool, read_worker, &job);
        double t = now_seconds() - start;
        if (t < best) best = t;
    }
    free(data);
    return job.n * sizeof(uint64_t) / best * 1e-9;
}

/* One forward pass worth of matmuls for batch tokens; seconds taken. */
static double run_pass(struct tensor_pool *pool, const struct model *model, float *x, float *out,
                       int batch) {
    double start = now_seconds();
    for (int l = 0; l < LAYERS; l++) {
        for (int k = 0; k < MATRICES_PER_LAYER; k++) {
            const struct tensor_matrix *m = &model->layers[l][k];
            if (tensor_matmul(pool, out, m, x, batch) != 0) {
                fprintf(stderr, "tensor_matmul failed\n");
                exit(1);
            }
        }
    }
    tensor_matmul(pool, out, &model->output, x, batch);
    return now_seconds() - start;
}

/* Best time of repeats passes (after one warm-up pass). */
static double best_pass(struct tensor_pool *pool, const struct model *model, float *x, float *out,
                        int batch, int repeats) {
    run_pass(pool, model, x, out, batch);
    double best = 1e30;
    for (int i = 0; i < repeats; i++) {
        double t = run_pass(pool, model, x, out, batch);
        if (t < best) best = t;
    }
    return best;
}

/* GB/s of GEMV on w alone, repeated while it stays in the caches (best of
 * 5 rounds of 100 products, after one). */
static double cached_gemv(struct tensor_pool *pool, const struct tensor_matrix *w, float *x,
                          float *out) {
    tensor_matmul(pool, out, w, x, 1);
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        double start = now_seconds();
        for (int i = 0; i < 100; i++) tensor_matmul(pool, out, w, x, 1);
        double t = (now_seconds() - start) / 100;
        if (t < best) best = t;
    }
    return (double)tensor_row_bytes(w->type, w->cols) * w->rows / best * 1e-9;
}

static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    const char *types = argc > 2 ? argv[2] : "f32,f16,q8_0,q8_0p,q4_0,q4_0p";
    const char *isas = argc > 3 ? argv[3] : "avx2,avx512";
    if (argc > 4 && strcmp(argv[4], "cpu") == 0) bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    struct tensor_pool *pool = tensor_pool_create(threads);
    int max_batch = 512;
    float *x = malloc(sizeof(float) * (size_t)max_batch * HIDDEN);
    float *out = malloc(sizeof(float) * (size_t)max_batch * HIDDEN);
    if (!pool || !x || !out) {
        fprintf(stderr, "out of memory\n");
        tensor_pool_free(pool);
        free(x);
        free(out);
        return 1;
    }
    for (size_t i = 0; i < (size_t)max_batch * HIDDEN; i++) x[i] = random_float();
    printf("threads %d, best instruction set %s, memory read %.1f GB/s\n", threads,
           tensor_isa_name(tensor_isa_best()), read_bandwidth(pool));
    printf("%-6s %-7s %10s %9s %9s %9s %6s | %9s %9s | %9s %9s\n", "type", "isa", "tg GB/s",
           "tg tok/s", "tg ms", "L2 GB/s", "tg/L2", "pp64 GF/s", "pp64 t/s", "pp512GF/s",
           "pp512 t/s");
    /* "q8_0p", "q4_0p": packed into panels, as the engine runs them where
     * the instruction set prefers that */
    static const enum tensor_type all_types[] = {
        TENSOR_F32,  TENSOR_F16,  TENSOR_Q8_0, TENSOR_Q8_0, TENSOR_Q4_0,
        TENSOR_Q4_0, TENSOR_Q4_K, TENSOR_Q5_K, TENSOR_Q6_K, TENSOR_IQ4_XS};
    static const char *const names[] = {"f32",   "f16",  "q8_0", "q8_0p", "q4_0",
                                        "q4_0p", "q4_k", "q5_k", "q6_k",  "iq4_xs"};
    for (int t = 0; t < 10; t++) {
        int packed = names[t][strlen(names[t]) - 1] == 'p';
        if (!listed(types, names[t])) continue;
        struct model model;
        if (make_model(&model, all_types[t], packed)) {
            fprintf(stderr, "out of memory\n");
            free_model(&model);
            break;
        }
        for (int isa = TENSOR_ISA_SCALAR; isa <= TENSOR_ISA_AVX512; isa++) {
            if (!listed(isas, tensor_isa_name((enum tensor_isa)isa))) continue;
            if (tensor_isa_select((enum tensor_isa)isa) != 0) continue;
            /* the others read panels slowly */
            if (packed && !tensor_panels_preferred(all_types[t])) continue;
            int slow = isa == TENSOR_ISA_SCALAR;
            double tg = best_pass(pool, &model, x, out, 1, slow ? 1 : 10);
            double cached = slow ? 0 : cached_gemv(pool, &model.layers[0][4], x, out);
            double pp64 = best_pass(pool, &model, x, out, 64, slow ? 1 : 3);
            double pp512 = slow ? 0 : best_pass(pool, &model, x, out, 512, 2);
            printf("%-6s %-7s %10.2f %9.1f %9.3f %9.2f %6.2f | %9.1f %9.1f | %9.1f %9.1f\n",
                   names[t], tensor_isa_name((enum tensor_isa)isa), model.bytes / tg * 1e-9, 1 / tg,
                   tg * 1e3, cached, slow ? 0 : model.bytes / tg * 1e-9 / cached,
                   model.flops_per_token * 64 / pp64 * 1e-9, 64 / pp64,
                   slow ? 0 : model.flops_per_token * 512 / pp512 * 1e-9, slow ? 0 : 512 / pp512);
            fflush(stdout);
        }
        free_model(&model);
    }
    tensor_pool_free(pool);
    free(x);
    free(out);
    return 0;
}
