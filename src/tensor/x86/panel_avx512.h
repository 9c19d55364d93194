/* panel_avx512.h -- the block step the AVX-512 VNNI Q8_0/Q4_0 kernels
 * share: the row-layout GEMM on the panels it repacks per call
 * (matmul_avx512.c) and the kernel on weights packed at load
 * (matmul_panels_avx512.c). Included only by *_avx512.c files, which are
 * compiled for AVX-512. */
#ifndef LOCKSTEP_PANEL_AVX512_H
#define LOCKSTEP_PANEL_AVX512_H

#include "x86.h"

#include <immintrin.h>
#include <string.h>

#define PANEL_ALWAYS_INLINE inline __attribute__((always_inline))

/* One block's float step for 16 rows: acc + (float)dot * (d_w * d_x), the
 * scalar sequence (tensor_internal.h), vectorized over the rows. */
static PANEL_ALWAYS_INLINE __m512 panel_add_block(__m512 acc, __m512i dot, __m512 d_w, float d_x) {
    __m512 scale = _mm512_mul_ps(d_w, _mm512_set1_ps(d_x));
    __m512 term = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale);
    return _mm512_add_ps(acc, term);
}

/* acc[c] += one block of 16 rows for batch columns c < nc. quants holds
 * the block as 8 groups of 64 bytes (group g: quants 4g..4g+3 of each row,
 * unsigned), d_w the rows' scales. Column c's quantized block starts at
 * x + c * x_step, its scale and sum are d[c * scale_step] and
 * bias[c * scale_step]. Each weight load serves all nc columns: one
 * vpdpbusd adds 4 products into each row lane, the activation's 4 bytes
 * broadcast, starting from the block's bias. */
static PANEL_ALWAYS_INLINE void panel_block(__m512 *acc, const char *quants, __m512 d_w,
                                            const int8_t *x, size_t x_step, const float *d,
                                            const int32_t *bias, size_t scale_step, const int nc) {
    __m512i dot[8];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) dot[c] = _mm512_set1_epi32(bias[(size_t)c * scale_step]);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        __m512i weights = _mm512_load_si512(quants + 64 * g);
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            int32_t x4;
            memcpy(&x4, x + (size_t)c * x_step + 4 * g, sizeof(x4));
            dot[c] = _mm512_dpbusd_epi32(dot[c], weights, _mm512_set1_epi32(x4));
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        acc[c] = panel_add_block(acc[c], dot[c], d_w, d[(size_t)c * scale_step]);
}

#endif
