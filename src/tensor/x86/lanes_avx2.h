/* lanes_avx2.h -- the canonical reduction of 8 float lanes (canon.h's
 * lane tree), shared by the AVX2 kernels and the AVX-512 ones that keep
 * AVX2's order (the softmax). */
#ifndef LOCKSTEP_TENSOR_X86_LANES_AVX2_H
#define LOCKSTEP_TENSOR_X86_LANES_AVX2_H

#include <immintrin.h>

/* The fixed lane tree: (l, l+4), then (l, l+2), (l, l+1). */
static inline __attribute__((always_inline)) float sum_lanes(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

static inline __attribute__((always_inline)) float max_lanes(__m256 v) {
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    return _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
}

#endif
