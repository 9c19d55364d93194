/* maddubs_peak.c -- measures this machine's peak rate of 8-bit
 * multiply-adds with AVX2 alone (vpmaddubsw, vpmaddwd, vpaddd), the
 * ceiling of batched Q8_0 products on a CPU without AVX-512 VNNI, as
 * vnni_peak does for AVX-512.
 *
 * usage: maddubs_peak [threads]   prints two rates in GMAC/s (multiply-adds
 * of 8-bit pairs per second, all threads together), each the best of 7
 * passes, or "0" and exit status 77 on a CPU without AVX2:
 *   peak        the multiply-add sequence alone: vpmaddubsw (32 products
 *               summed in 16-bit pairs), vpmaddwd by ones (to 8 sums of
 *               four), vpaddd into an accumulator; twelve independent
 *               chains a thread, enough to hide the latencies (the
 *               operands pass through an empty asm between chains, else
 *               the compiler makes one product for all twelve);
 *   block step  the panel kernel's own block step (panel_block_avx2 in
 *               panel_avx2.h, run by maddubs_block_avx2.c) on a tile of
 *               16 rows and 8 batch columns with its operands in L1: per
 *               weight vector an xor and an absolute value, per column a
 *               sign, the three instructions above, and per block a scale
 *               product, a conversion, a multiply and an add. The highest
 *               rate the kernel can reach, whatever its memory does. */
#include "peak.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>

#define ITERATIONS   50000000L /* loop trips per thread and pass */
#define ACCUMULATORS 12        /* independent chains per thread */
#define LANE_PAIRS   32        /* 8-bit products one vpmaddubsw makes */
#define BLOCKS       5000000L  /* block steps per thread and pass */
#define BLOCK_MACS   4096      /* multiply-adds of a block step: 16 rows x 32 quants x 8 columns */

__attribute__((target("avx2"))) static void *multiply_add(void *arg) {
    struct worker *w = arg;
    __m256i weights = _mm256_set1_epi32(0x01020304), inputs = _mm256_set1_epi32(0x05060708);
    __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[ACCUMULATORS];
    for (int i = 0; i < ACCUMULATORS; i++) acc[i] = _mm256_set1_epi32(i);
    for (long n = 0; n < ITERATIONS; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < ACCUMULATORS; i++) {
            acc[i] = _mm256_add_epi32(
                acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(weights, inputs), ones));
            /* the operands may change between chains: each chain makes
             * its own products */
            __asm__ volatile("" : "+x"(inputs), "+x"(weights));
        }
    }
    __m256i sum = acc[0];
    for (int i = 1; i < ACCUMULATORS; i++) sum = _mm256_add_epi32(sum, acc[i]);
    int32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, sum);
    w->result = lanes[0] + lanes[7];
    return NULL;
}

/* maddubs_block_avx2.c: n block steps of the panel kernel; a value of
 * their sums. */
int32_t maddubs_block_steps(long n_blocks);

static void *block_step(void *arg) {
    struct worker *w = arg;
    w->result = maddubs_block_steps(BLOCKS);
    return NULL;
}

int main(int argc, char **argv) {
    __builtin_cpu_init();
    struct peak_kernels k = {
        "maddubs_peak", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
        multiply_add,   (double)ITERATIONS * ACCUMULATORS * LANE_PAIRS,
        block_step,     (double)BLOCKS * BLOCK_MACS};
    return peak_main(argc, argv, &k);
}
