/* vnni_block_avx512.c -- the panel kernel's block step (panel_block in
 * src/tensor/x86/panel_avx512.h, the very code the engine runs) in a loop, for
 * vnni_peak. Compiled for AVX-512 alone; vnni_peak calls it only once it
 * has found AVX-512 VNNI on the CPU. */
#include "tensor/x86/panel_avx512.h"

#define TILE_COLUMNS 8 /* batch columns of a tile, as the panel kernel's */

int32_t vnni_block_steps(long n_blocks);

/* Runs n_blocks block steps of 16 rows and TILE_COLUMNS columns on
 * weights and activations in L1, and returns a value of their sums so
 * that none is optimized away. The pointers pass through an empty asm
 * each step, so every step loads its operands again, as the kernel does. */
int32_t vnni_block_steps(long n_blocks) {
    _Alignas(64) char quants[TENSOR_PANEL_QUANTS];
    int8_t x[TILE_COLUMNS * TENSOR_QK];
    float d[TILE_COLUMNS];
    int32_t bias[TILE_COLUMNS];
    for (int i = 0; i < TENSOR_PANEL_QUANTS; i++) quants[i] = (char)(i * 7);
    for (int i = 0; i < TILE_COLUMNS * TENSOR_QK; i++) x[i] = (int8_t)(i % 11 - 5);
    for (int c = 0; c < TILE_COLUMNS; c++) {
        d[c] = 0.01f * (float)(c + 1);
        bias[c] = -128 * c;
    }
    const char *q = quants;
    const int8_t *xs = x;
    __m512 d_w = _mm512_set_ps(16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
    __m512 acc[TILE_COLUMNS];
    for (int c = 0; c < TILE_COLUMNS; c++) acc[c] = _mm512_setzero_ps();
    for (long n = 0; n < n_blocks; n++) {
        panel_block(acc, q, d_w, xs, TENSOR_QK, d, bias, 1, TILE_COLUMNS);
        __asm__ volatile("" : "+r"(q), "+r"(xs), "+v"(d_w));
    }
    __m512 sum = acc[0];
    for (int c = 1; c < TILE_COLUMNS; c++) sum = _mm512_add_ps(sum, acc[c]);
    return (int32_t)_mm512_reduce_add_ps(sum);
}
