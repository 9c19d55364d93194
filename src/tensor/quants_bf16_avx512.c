/* quants_bf16_avx512.c -- the BF16 row dot with AVX-512F, without the
 * AVX512_BF16 instructions (not every AVX-512 CPU has them): 32 bf16
 * values load as 16 32-bit pairs, the odd element of each pair already in
 * a single's place (mask off the even one), the even one a 16-bit shift
 * away. Fused multiply-adds go into 4 x 16 lane sums, enough chains to
 * hide their latency; the last partial 64 values are a masked load
 * (zeros add nothing), and a fixed tree adds the lanes. The float order
 * differs from the scalar and AVX2 dots, so the result does by rounding. */
#include "tensor_internal.h"

#include <immintrin.h>

/* The even (first) and odd (second) elements of the 32 bf16 values in v
 * as singles. */
static inline __m512 bf16_even(__m512i v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

static inline __m512 bf16_odd(__m512i v) {
    return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
}

/* Adds the products of 64 values (two vectors of 32 from each side) to the
 * four lane sums. */
static inline void add_products(__m512 *acc, const __m512i *a, const __m512i *b) {
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        acc[2 * k] = _mm512_fmadd_ps(bf16_even(a[k]), bf16_even(b[k]), acc[2 * k]);
        acc[2 * k + 1] = _mm512_fmadd_ps(bf16_odd(a[k]), bf16_odd(b[k]), acc[2 * k + 1]);
    }
}

/* The up to 32 values of p from index `start` on (n in all), zeros after
 * the end: the masked load reads nothing past it. */
static inline __m512i load_part(const uint16_t *p, int start, int n) {
    int count = n - start;
    if (count <= 0) return _mm512_setzero_si512();
    __mmask32 mask = count >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << count) - 1;
    return _mm512_maskz_loadu_epi16(mask, p + start);
}

float tensor_row_dot_bf16_avx512(const void *w, const void *x, int n) {
    const uint16_t *a = w, *b = x;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i va[2] = {_mm512_loadu_si512((const void *)(a + i)),
                         _mm512_loadu_si512((const void *)(a + i + 32))};
        __m512i vb[2] = {_mm512_loadu_si512((const void *)(b + i)),
                         _mm512_loadu_si512((const void *)(b + i + 32))};
        add_products(acc, va, vb);
    }
    if (i < n) {
        __m512i va[2] = {load_part(a, i, n), load_part(a, i + 32, n)};
        __m512i vb[2] = {load_part(b, i, n), load_part(b, i + 32, n)};
        add_products(acc, va, vb);
    }
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}
