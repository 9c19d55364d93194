/* fma_peak.c -- measures this machine's peak rate of float multiply-adds
 * (AVX-512 vfmadd231ps on 16 lanes, else AVX2's on 8), the ceiling of
 * attention over an F16 or F32 cache: its scores and weighted values are
 * float multiply-adds, two per cached element a query, so a long cached
 * prefix costs at least that many over this rate.
 *
 * usage: fma_peak [threads]   prints two rates in GMAC/s (fused
 * multiply-adds of floats per second, all threads together), each the best
 * of 7 passes, or "0" and exit status 77 on a CPU without AVX2 and FMA:
 *   peak        the multiply-adds alone: twelve independent accumulators
 *               a thread, enough to hide the instruction's latency;
 *   block step  the engine's attention tiles (tensor_dot_columns_tile and
 *               tensor_weighted_sum_tile, the instruction set the library
 *               picks) for 16 queries of head dimension 64 against one F16
 *               cache block of 16 positions, operands in L1: the highest
 *               rate attention reaches, before its softmax and memory. */
#include "peak.h"
#include "tensor/tensor.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define ITERATIONS   50000000L /* loop trips per thread and pass */
#define ACCUMULATORS 12        /* independent multiply-add chains per thread */
#define BLOCKS       400000L   /* block steps per thread and pass */
#define QUERIES      16
#define HEAD_DIM     64
#define POSITIONS    16
#define BLOCK_MACS   (2 * QUERIES * HEAD_DIM * POSITIONS) /* scores, then values */

static int lanes; /* floats a multiply-add adds: 16 with AVX-512, 8 with AVX2 */

__attribute__((target("avx512f"))) static float multiply_add_512(void) {
    __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f), acc[ACCUMULATORS];
    for (int i = 0; i < ACCUMULATORS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < ITERATIONS; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < ACCUMULATORS; i++) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
        /* b may change every trip: the compiler must keep the multiply-adds */
        __asm__ volatile("" : "+v"(b));
    }
    __m512 sum = acc[0];
    for (int i = 1; i < ACCUMULATORS; i++) sum = _mm512_add_ps(sum, acc[i]);
    return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx2,fma"))) static float multiply_add_256(void) {
    __m256 a = _mm256_set1_ps(1.0001f), b = _mm256_set1_ps(0.9999f), acc[ACCUMULATORS];
    for (int i = 0; i < ACCUMULATORS; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long n = 0; n < ITERATIONS; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < ACCUMULATORS; i++) acc[i] = _mm256_fmadd_ps(a, b, acc[i]);
        __asm__ volatile("" : "+x"(b));
    }
    float out[8];
    __m256 sum = acc[0];
    for (int i = 1; i < ACCUMULATORS; i++) sum = _mm256_add_ps(sum, acc[i]);
    _mm256_storeu_ps(out, sum);
    return out[0];
}

static void *multiply_add(void *arg) {
    struct worker *w = arg;
    w->result = (int32_t)(lanes == 16 ? multiply_add_512() : multiply_add_256());
    return NULL;
}

static void *block_step(void *arg) {
    struct worker *w = arg;
    static float queries[QUERIES * HEAD_DIM];
    float scores[QUERIES * POSITIONS], out[QUERIES * HEAD_DIM];
    uint16_t keys[HEAD_DIM * POSITIONS], values[POSITIONS * HEAD_DIM];
    float filler[HEAD_DIM * POSITIONS];
    for (int i = 0; i < HEAD_DIM * POSITIONS; i++) filler[i] = (float)(i % 7) * 0.01f;
    for (int i = 0; i < QUERIES * HEAD_DIM; i++) queries[i] = (float)(i % 5) * 0.1f;
    tensor_fp16_from_fp32(keys, filler, HEAD_DIM * POSITIONS);
    tensor_fp16_from_fp32(values, filler, HEAD_DIM * POSITIONS);
    memset(out, 0, sizeof(out));
    struct tensor_tile dot = {QUERIES, queries, HEAD_DIM, scores, POSITIONS};
    struct tensor_tile sum = {QUERIES, scores, POSITIONS, out, HEAD_DIM};
    for (long n = 0; n < BLOCKS; n++) {
        tensor_dot_columns_tile(&dot, keys, TENSOR_F16, POSITIONS, HEAD_DIM, POSITIONS);
        tensor_weighted_sum_tile(&sum, values, TENSOR_F16, POSITIONS, HEAD_DIM);
    }
    w->result = (int32_t)out[0];
    return NULL;
}

int main(int argc, char **argv) {
    __builtin_cpu_init();
    lanes = __builtin_cpu_supports("avx512f") ? 16 : 8;
    struct peak_kernels k = {
        "fma_peak",   __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
        multiply_add, (double)ITERATIONS * ACCUMULATORS * lanes,
        block_step,   (double)BLOCKS * BLOCK_MACS};
    return peak_main(argc, argv, &k);
}
