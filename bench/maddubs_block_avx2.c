/* maddubs_block_avx2.c -- the AVX2 panel kernel's block step
 * (panel_block_avx2 in src/tensor/x86/panel_avx2.h, the very code the engine
 * runs) in a loop, for maddubs_peak. Compiled for AVX2 alone; maddubs_peak
 * calls it only once it has found AVX2 on the CPU. */
#include "tensor/x86/panel_avx2.h"

int32_t maddubs_block_steps(long n_blocks);

/* Runs n_blocks block steps of 16 rows and PANEL_AVX2_COLUMNS columns on
 * weights and activations in L1, and returns a value of their sums so
 * that none is optimized away. The pointers pass through an empty asm
 * each step, so every step loads its operands again, as the kernel does. */
int32_t maddubs_block_steps(long n_blocks) {
    _Alignas(64) char quants[TENSOR_PANEL_QUANTS];
    _Alignas(64) char scales[TENSOR_PANEL_SCALES];
    int8_t x[PANEL_AVX2_COLUMNS * TENSOR_QK];
    float d[PANEL_AVX2_COLUMNS];
    for (int i = 0; i < TENSOR_PANEL_QUANTS; i++) quants[i] = (char)(i * 7);
    for (int i = 0; i < TENSOR_PANEL_SCALES / 2; i++) {
        uint16_t half = _cvtss_sh(0.001f * (float)(i + 1), 0);
        memcpy(scales + 2 * i, &half, sizeof(half));
    }
    for (int i = 0; i < PANEL_AVX2_COLUMNS * TENSOR_QK; i++) x[i] = (int8_t)(i % 11 - 5);
    for (int c = 0; c < PANEL_AVX2_COLUMNS; c++) d[c] = 0.01f * (float)(c + 1);
    const char *q = quants, *s = scales;
    const int8_t *xs = x;
    __m256 acc[2 * PANEL_AVX2_COLUMNS];
    for (int i = 0; i < 2 * PANEL_AVX2_COLUMNS; i++) acc[i] = _mm256_setzero_ps();
    for (long n = 0; n < n_blocks; n++) {
        panel_block_avx2(acc, q, s, xs, TENSOR_QK, d, 1, PANEL_AVX2_COLUMNS);
        __asm__ volatile("" : "+r"(q), "+r"(s), "+r"(xs));
    }
    __m256 sum = acc[0];
    for (int i = 1; i < 2 * PANEL_AVX2_COLUMNS; i++) sum = _mm256_add_ps(sum, acc[i]);
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return (int32_t)(lanes[0] + lanes[7]);
}
