/* panel_avx2.h -- the block step of the AVX2 kernel for Q8_0 weights in
 * panel layout (matmul_panels_avx2.c), shared with bench/maddubs_peak,
 * which runs it in L1 to find the rate the kernel can reach. Included only
 * by *_avx2.c files, which are compiled for AVX2.
 *
 * A panel block's 64-byte group g holds quants 4g..4g+3 of 16 rows, plus
 * 128; its first 32 bytes are rows 0..7, its last rows 8..15 (a half). One
 * 32-bit lane of a half is one row's four quants, so a batch column's four
 * activation bytes, broadcast, meet every row at once: nothing to
 * transpose, nothing to reduce across lanes. AVX2 has no unsigned-by-signed
 * 4-way multiply-add, and vpmaddubsw's 16-bit pair sums of w + 128 times a
 * signed activation could saturate, so the stored byte is turned back into
 * w (xor 0x80) and the product is |w| times x carrying w's sign: every pair
 * sum stays within 2 * 128 * 127 < 2^15, and vpmaddwd by ones widens the
 * pairs to the four-product sum of the row. The weights' conversion is paid
 * once per load and serves every batch column of a tile. */
#ifndef LOCKSTEP_PANEL_AVX2_H
#define LOCKSTEP_PANEL_AVX2_H

#include "x86.h"

#include <immintrin.h>
#include <string.h>

#define PANEL_ALWAYS_INLINE inline __attribute__((always_inline))

/* Batch columns one block step handles at most: an activation group. */
#define PANEL_AVX2_COLUMNS 8

/* One block's float step for 8 rows: acc + (float)dot * (d_w * d_x), the
 * scalar sequence (tensor_internal.h), vectorized over the rows. */
static PANEL_ALWAYS_INLINE __m256 panel_add_block_avx2(__m256 acc, __m256i dot, __m256 d_w,
                                                       float d_x) {
    __m256 scale = _mm256_mul_ps(d_w, _mm256_set1_ps(d_x));
    __m256 term = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), scale);
    return _mm256_add_ps(acc, term);
}

/* The 8 rows' scales of half h of block j, as floats. */
static PANEL_ALWAYS_INLINE __m256 panel_scales_avx2(const char *scales, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + 16 * h)));
}

/* Four quants of each of 8 rows times four activation bytes, broadcast:
 * each row's four-product sum, exact. */
static PANEL_ALWAYS_INLINE __m256i panel_dot4_avx2(__m256i magnitudes, __m256i weights,
                                                   const int8_t *x) {
    int32_t x4;
    memcpy(&x4, x, sizeof(x4));
    __m256i signed_x = _mm256_sign_epi8(_mm256_set1_epi32(x4), weights);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, signed_x), _mm256_set1_epi16(1));
}

/* acc[2c + h] += half h of one block (8 rows) for batch columns c < nc.
 * quants holds the block's 8 groups of 64 bytes, scales its 16 fp16 row
 * scales. Column c's quantized block starts at x + c * x_step, its scale
 * is d[c * scale_step]. The weights' bias offset is 0: the product is the
 * signed one. */
static PANEL_ALWAYS_INLINE void panel_half_avx2(__m256 *acc, const char *quants, const char *scales,
                                                int h, const int8_t *x, size_t x_step,
                                                const float *d, size_t scale_step, const int nc) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m256i dot[PANEL_AVX2_COLUMNS];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) dot[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        __m256i weights =
            _mm256_xor_si256(_mm256_load_si256((const __m256i *)(quants + 64 * g + 32 * h)), flip);
        __m256i magnitudes = _mm256_abs_epi8(weights);
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            dot[c] = _mm256_add_epi32(
                dot[c], panel_dot4_avx2(magnitudes, weights, x + (size_t)c * x_step + 4 * g));
            /* each column's sum in order of g: left free, GCC reassociates
             * the integer sums into trees that keep dozens of products live
             * and spills them (block step measured 0.50-0.55 of the peak
             * so, 0.68-0.70 with this and the barrier between halves) */
            __asm__("" : "+x"(dot[c]));
        }
    }
    __m256 d_w = panel_scales_avx2(scales, h);
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        acc[2 * c + h] =
            panel_add_block_avx2(acc[2 * c + h], dot[c], d_w, d[(size_t)c * scale_step]);
}

/* Both halves of one block (16 rows) for batch columns c < nc: acc[2c]
 * rows 0..7, acc[2c + 1] rows 8..15. */
static PANEL_ALWAYS_INLINE void panel_block_avx2(__m256 *acc, const char *quants,
                                                 const char *scales, const int8_t *x, size_t x_step,
                                                 const float *d, size_t scale_step, const int nc) {
    panel_half_avx2(acc, quants, scales, 0, x, x_step, d, scale_step, nc);
    /* an opaque x: else GCC keeps the first half's 64 broadcasts of x for
     * the second and spills them */
    __asm__("" : "+r"(x));
    panel_half_avx2(acc, quants, scales, 1, x, x_step, d, scale_step, nc);
}

#endif
