/* vnni_peak.c -- measures this machine's peak rate of 8-bit multiply-adds
 * (AVX-512 VNNI vpdpbusd), the ceiling of batched Q8_0 products: with many
 * sequences a decode step's products are bound by it, not by reading the
 * weights (runner_bench prints the rate the products reach).
 *
 * usage: vnni_peak [threads]   prints two rates in GMAC/s (multiply-adds
 * of 8-bit pairs per second, all threads together), each the best of 7
 * passes, or "0" and exit status 77 on a CPU without AVX-512 VNNI:
 *   peak        vpdpbusd alone: twelve independent accumulators a thread,
 *               enough to hide the instruction's latency;
 *   block step  the instruction mix of the panel kernel's block step
 *               (panel_avx512.h) on a tile of 16 rows and 8 batch columns:
 *               64 vpdpbusd, then per column a scale product, a conversion,
 *               a multiply and an add. Where the multiplies share the
 *               vpdpbusd units (measured on AMD Zen 4) this is the highest
 *               rate the kernel can reach with data in registers, whatever
 *               its memory does; where they do not, it equals the peak. */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ITERATIONS   50000000L /* loop trips per thread and pass */
#define ACCUMULATORS 12        /* independent vpdpbusd chains per thread */
#define LANE_PAIRS   64        /* 8-bit products one vpdpbusd adds (16 lanes x 4) */
#define BLOCKS       10000000L /* block steps per thread and pass */
#define TILE_COLUMNS 8         /* batch columns of a tile, as the panel kernel */
#define BLOCK_GROUPS 8         /* 4-byte groups of a 32-quant block */

struct worker {
    pthread_t thread;
    int32_t result; /* the sums, stored so the loop is not optimized away */
};

__attribute__((target("avx512f,avx512vnni"))) static void *multiply_add(void *arg) {
    struct worker *w = arg;
    __m512i weights = _mm512_set1_epi32(0x01020304), inputs = _mm512_set1_epi32(0x05060708);
    __m512i acc[ACCUMULATORS];
    for (int i = 0; i < ACCUMULATORS; i++) acc[i] = _mm512_set1_epi32(i);
    for (long n = 0; n < ITERATIONS; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < ACCUMULATORS; i++)
            acc[i] = _mm512_dpbusd_epi32(acc[i], weights, inputs);
        /* the inputs may change every trip: the compiler must keep the
         * multiply-adds in the loop */
        __asm__ volatile("" : "+v"(inputs));
    }
    __m512i sum = acc[0];
    for (int i = 1; i < ACCUMULATORS; i++) sum = _mm512_add_epi32(sum, acc[i]);
    w->result = _mm512_reduce_add_epi32(sum);
    return NULL;
}

/* The panel kernel's block step, over and over: per column, 8 vpdpbusd
 * into an integer sum that starts from the block's bias, then
 * acc += (float)sum * (d_w * d_x). Each column's activation bytes and
 * scale are read from memory as the kernel reads them, so the compiler
 * cannot share work between columns; the weights may change every block. */
__attribute__((target("avx512f,avx512vnni"))) static void *block_step(void *arg) {
    struct worker *w = arg;
    static const float column_scales[TILE_COLUMNS] = {1.0f, 0.5f,  0.25f, 2.0f,
                                                      1.5f, 0.75f, 3.0f,  1.25f};
    int32_t activations[TILE_COLUMNS * BLOCK_GROUPS];
    for (int i = 0; i < TILE_COLUMNS * BLOCK_GROUPS; i++) activations[i] = 0x01010101 * (i % 5);
    const float *d_x = column_scales;
    const int32_t *x = activations;
    __m512i weights = _mm512_set1_epi32(0x01020304);
    __m512i bias = _mm512_set1_epi32(-7);
    __m512 d_w = _mm512_set_ps(16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
    __m512 acc[TILE_COLUMNS];
    for (int c = 0; c < TILE_COLUMNS; c++) acc[c] = _mm512_setzero_ps();
    for (long n = 0; n < BLOCKS; n++) {
        __m512i dot[TILE_COLUMNS];
#pragma GCC unroll 8
        for (int c = 0; c < TILE_COLUMNS; c++) dot[c] = bias;
#pragma GCC unroll 8
        for (int g = 0; g < BLOCK_GROUPS; g++)
#pragma GCC unroll 8
            for (int c = 0; c < TILE_COLUMNS; c++)
                dot[c] = _mm512_dpbusd_epi32(dot[c], weights,
                                             _mm512_set1_epi32(x[c * BLOCK_GROUPS + g]));
#pragma GCC unroll 8
        for (int c = 0; c < TILE_COLUMNS; c++) {
            __m512 scale = _mm512_mul_ps(d_w, _mm512_set1_ps(d_x[c]));
            acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_cvtepi32_ps(dot[c]), scale));
        }
        __asm__ volatile("" : "+v"(weights), "+v"(bias), "+v"(d_w), "+r"(d_x), "+r"(x));
    }
    __m512 sum = acc[0];
    for (int c = 1; c < TILE_COLUMNS; c++) sum = _mm512_add_ps(sum, acc[c]);
    w->result = (int32_t)_mm512_reduce_add_ps(sum);
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best rate of 7 passes of fn on n_threads threads, in GMAC/s, for
 * macs_per_thread multiply-adds a thread and pass. */
static double best_rate(void *(*fn)(void *), int n_threads, double macs_per_thread) {
    struct worker workers[64];
    double best = 0;
    for (int pass = 0; pass < 7; pass++) {
        double t0 = now();
        for (int t = 0; t < n_threads; t++)
            pthread_create(&workers[t].thread, NULL, fn, &workers[t]);
        for (int t = 0; t < n_threads; t++) pthread_join(workers[t].thread, NULL);
        double rate = n_threads * macs_per_thread / (now() - t0) / 1e9;
        if (rate > best) best = rate;
    }
    return best;
}

int main(int argc, char **argv) {
    int n_threads = argc > 1 ? atoi(argv[1]) : 1;
    if (n_threads < 1 || n_threads > 64) {
        fprintf(stderr, "usage: vnni_peak [threads 1..64]\n");
        return 2;
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vnni")) {
        printf("0\n");
        return 77;
    }
    double peak =
        best_rate(multiply_add, n_threads, (double)ITERATIONS * ACCUMULATORS * LANE_PAIRS);
    double block =
        best_rate(block_step, n_threads, (double)BLOCKS * BLOCK_GROUPS * TILE_COLUMNS * LANE_PAIRS);
    printf("peak        %.1f GMAC/s\n", peak);
    printf("block step  %.1f GMAC/s (%.2f of peak)\n", block, block / peak);
    return 0;
}
