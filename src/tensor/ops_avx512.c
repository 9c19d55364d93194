/* ops_avx512.c -- AVX-512 versions of the per-row kernels in ops.c.
 *
 * Reductions (dot, the RMS norm's sum of squares, the softmax sum) keep 16
 * lane sums and add them with a fixed tree, so a given n always gives the
 * same bits. exp is a vector implementation (range reduction to
 * [-ln2/2, ln2/2] and a degree-7 polynomial, within 2 ulp of expf). */
#include "tensor_internal.h"

#include <immintrin.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Elements handled by the vector loop; the rest, under a mask. */
static ALWAYS_INLINE __mmask16 tail_mask(int n) {
    return (__mmask16)((1u << (n & 15)) - 1u);
}

/* exp(x) for 16 floats; 0 below -87.3, +inf above 88.7. */
static ALWAYS_INLINE __m512 exp_ps(__m512 x) {
    const __m512 high = _mm512_set1_ps(88.72f), low = _mm512_set1_ps(-87.33f);
    __mmask16 overflow = _mm512_cmp_ps_mask(x, high, _CMP_GT_OQ);
    __mmask16 underflow = _mm512_cmp_ps_mask(x, low, _CMP_LT_OQ);
    x = _mm512_max_ps(_mm512_min_ps(x, high), low);
    /* x = n ln2 + r, |r| <= ln2/2, ln2 split in a high part exact in float and a low part */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    /* e^r by its Taylor series to r^7 (error below 1e-8 on the interval) */
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512 result = _mm512_scalef_ps(p, n); /* p * 2^n */
    result = _mm512_mask_mov_ps(result, overflow, _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_mov_ps(result, underflow, _mm512_setzero_ps());
}

/* tensor_dot's sequence, inlined where many rows are taken in a row. */
static ALWAYS_INLINE float dot(const float *a, const float *b, int n) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    int i = 0;
    for (; i + 64 <= n; i += 64)
#pragma GCC unroll 4 /* keeps the four sums in registers */
        for (int k = 0; k < 4; k++)
            acc[k] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16 * k),
                                     _mm512_loadu_ps(b + i + 16 * k), acc[k]);
    for (; i + 16 <= n; i += 16)
        acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc[0]);
    if (i < n) {
        __mmask16 mask = tail_mask(n);
        acc[1] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a + i),
                                 _mm512_maskz_loadu_ps(mask, b + i), acc[1]);
    }
    __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    return _mm512_reduce_add_ps(sum);
}

void tensor_axpy_avx512(float *y, float a, const float *x, int n) {
    __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i,
                         _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 mask = tail_mask(n);
        __m512 sum = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(mask, x + i),
                                     _mm512_maskz_loadu_ps(mask, y + i));
        _mm512_mask_storeu_ps(y + i, mask, sum);
    }
}

float tensor_dot_avx512(const float *a, const float *b, int n) {
    return dot(a, b, n);
}

void tensor_dot_rows_avx512(float *out, const float *q, const float *const *rows, int n_rows,
                            int n) {
    for (int p = 0; p < n_rows; p++) out[p] = dot(q, rows[p], n);
}

/* Every element takes the fused multiply-adds of tensor_axpy_avx512 in the
 * same order, from +0; they stay in registers, 64 or 16 columns at a time. */
void tensor_weighted_sum_avx512(float *out, const float *weights, const float *const *rows,
                                int n_rows, int n) {
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                         _mm512_setzero_ps()};
        for (int p = 0; p < n_rows; p++) {
            __m512 w = _mm512_set1_ps(weights[p]);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                acc[k] = _mm512_fmadd_ps(w, _mm512_loadu_ps(rows[p] + i + 16 * k), acc[k]);
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) _mm512_storeu_ps(out + i + 16 * k, acc[k]);
    }
    for (; i < n; i += 16) {
        __mmask16 mask = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n);
        __m512 acc = _mm512_setzero_ps();
        for (int p = 0; p < n_rows; p++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(weights[p]),
                                  _mm512_maskz_loadu_ps(mask, rows[p] + i), acc);
        _mm512_mask_storeu_ps(out + i, mask, acc);
    }
}

void tensor_rmsnorm_avx512(float *out, const float *x, const float *weight, int n, float eps) {
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    __mmask16 mask = tail_mask(n);
    if (i < n) {
        __m512 v = _mm512_maskz_loadu_ps(mask, x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    float scale = 1.0f / __builtin_sqrtf(_mm512_reduce_add_ps(acc) / (float)n + eps);
    __m512 vs = _mm512_set1_ps(scale);
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(weight + i),
                                                _mm512_mul_ps(vs, _mm512_loadu_ps(x + i))));
    if (i < n)
        _mm512_mask_storeu_ps(out + i, mask,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, weight + i),
                                            _mm512_mul_ps(vs, _mm512_maskz_loadu_ps(mask, x + i))));
}

void tensor_softmax_avx512(float *x, int n) {
    __mmask16 mask = tail_mask(n);
    __m512 vmax = _mm512_set1_ps(-__builtin_inff());
    int i = 0;
    for (; i + 16 <= n; i += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(x + i));
    if (i < n) vmax = _mm512_mask_max_ps(vmax, mask, vmax, _mm512_maskz_loadu_ps(mask, x + i));
    __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    __m512 sum = _mm512_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), max));
        _mm512_storeu_ps(x + i, e);
        sum = _mm512_add_ps(sum, e);
    }
    if (i < n) {
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), max));
        _mm512_mask_storeu_ps(x + i, mask, e);
        sum = _mm512_mask_add_ps(sum, mask, sum, e);
    }
    __m512 inverse = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inverse));
    if (i < n)
        _mm512_mask_storeu_ps(x + i, mask,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + i), inverse));
}

static ALWAYS_INLINE __m512 swiglu_ps(__m512 gate, __m512 up) {
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 silu =
        _mm512_div_ps(gate, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), gate))));
    return _mm512_mul_ps(silu, up);
}

void tensor_swiglu_avx512(float *out, const float *gate, const float *up, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, swiglu_ps(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
    if (i < n) {
        __mmask16 mask = tail_mask(n);
        _mm512_mask_storeu_ps(
            out + i, mask,
            swiglu_ps(_mm512_maskz_loadu_ps(mask, gate + i), _mm512_maskz_loadu_ps(mask, up + i)));
    }
}
