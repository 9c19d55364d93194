/* vnni_peak.c -- measures this machine's peak rate of 8-bit multiply-adds
 * (AVX-512 VNNI vpdpbusd), the ceiling of batched Q8_0 products: with many
 * sequences a decode step's products are bound by it, not by reading the
 * weights (runner_bench prints the rate the products reach).
 *
 * usage: vnni_peak [threads]   prints the best of 7 passes in GMAC/s
 * (multiply-adds of 8-bit pairs per second, all threads together), or
 * "0" and exit status 77 on a CPU without AVX-512 VNNI. Each thread keeps
 * twelve independent accumulators, enough to hide the instruction's
 * latency, so the pass is bound by its throughput alone. */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ITERATIONS   50000000L /* loop trips per thread and pass */
#define ACCUMULATORS 12        /* independent vpdpbusd chains per thread */
#define LANE_PAIRS   64        /* 8-bit products one vpdpbusd adds (16 lanes x 4) */

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

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
    struct worker workers[64];
    double best = 0;
    for (int pass = 0; pass < 7; pass++) {
        double t0 = now();
        for (int t = 0; t < n_threads; t++)
            pthread_create(&workers[t].thread, NULL, multiply_add, &workers[t]);
        for (int t = 0; t < n_threads; t++) pthread_join(workers[t].thread, NULL);
        double macs = (double)n_threads * ITERATIONS * ACCUMULATORS * LANE_PAIRS;
        double rate = macs / (now() - t0) / 1e9;
        if (rate > best) best = rate;
    }
    printf("%.1f\n", best);
    return 0;
}
