/* quants_bf16_avx2.c -- the BF16 row dot with AVX2: widen 8 bf16 values of
 * each side to singles (a shift into the upper half), fused multiply-add
 * into 4 x 8 lane sums, then a fixed tree over the lanes. */
#include "x86.h"

#include <immintrin.h>

/* 8 bf16 values at p as singles. */
static inline __m256 load_bf16(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float sum_lanes(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

float tensor_row_dot_bf16_avx2(const void *w, const void *x, int n) {
    const uint16_t *a = w, *b = x;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(load_bf16(a + i + 8 * k), load_bf16(b + i + 8 * k), acc[k]);
    for (int k = 0; i + 8 <= n; i += 8, k++)
        acc[k] = _mm256_fmadd_ps(load_bf16(a + i), load_bf16(b + i), acc[k]);
    float sum =
        sum_lanes(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += tensor_bf16_to_fp32(a[i]) * tensor_bf16_to_fp32(b[i]);
    return sum;
}
