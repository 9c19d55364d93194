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
 *   block step  the panel kernel's own block step (panel_block in
 *               panel_avx512.h, run by vnni_block_avx512.c) on a tile of
 *               16 rows and 8 batch columns with its operands in L1: 64
 *               vpdpbusd, then per column a scale product, a conversion, a
 *               multiply and an add. Where the multiplies share the
 *               vpdpbusd units (measured on AMD Zen 4) this is the highest
 *               rate the kernel can reach, whatever its memory does; where
 *               they do not, it is near the peak. */
#include "peak.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>

#define ITERATIONS   50000000L /* loop trips per thread and pass */
#define ACCUMULATORS 12        /* independent vpdpbusd chains per thread */
#define LANE_PAIRS   64        /* 8-bit products one vpdpbusd adds (16 lanes x 4) */
#define BLOCKS       10000000L /* block steps per thread and pass */
#define BLOCK_MACS   4096      /* multiply-adds of a block step: 16 rows x 32 quants x 8 columns */

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

/* vnni_block_avx512.c: n block steps of the panel kernel; a value of
 * their sums. */
int32_t vnni_block_steps(long n_blocks);

static void *block_step(void *arg) {
    struct worker *w = arg;
    w->result = vnni_block_steps(BLOCKS);
    return NULL;
}

int main(int argc, char **argv) {
    __builtin_cpu_init();
    struct peak_kernels k = {"vnni_peak",  __builtin_cpu_supports("avx512vnni"),
                             multiply_add, (double)ITERATIONS * ACCUMULATORS * LANE_PAIRS,
                             block_step,   (double)BLOCKS * BLOCK_MACS};
    return peak_main(argc, argv, &k);
}
