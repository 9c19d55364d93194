/* ops_avx2.c -- AVX2 (+FMA) versions of the per-row kernels in ops.c.
 *
 * Reductions (dot, the RMS norm's sum of squares, the softmax sum) keep 8
 * lane sums and add them with a fixed tree, so a given n always gives the
 * same bits. exp is a vector implementation (range reduction to
 * [-ln2/2, ln2/2] and a degree-7 polynomial, within 2 ulp of expf; it
 * saturates to +inf above 88, a little below float's limit). */
#include "lanes_avx2.h"
#include "x86.h"

#include <immintrin.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Rounding of floats to half: to nearest, ties to even, as tensor_fp32_to_fp16. */
#define FP16_ROUNDING (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* The n < 8 floats at p, zero-filled to a vector. */
static ALWAYS_INLINE __m256 load_tail(const float *p, int n) {
    float lanes[8] = {0};
    memcpy(lanes, p, sizeof(float) * (size_t)n);
    return _mm256_loadu_ps(lanes);
}

static ALWAYS_INLINE void store_tail(float *p, __m256 v, int n) {
    float lanes[8];
    _mm256_storeu_ps(lanes, v);
    memcpy(p, lanes, sizeof(float) * (size_t)n);
}

/* exp(x) for 8 floats; 0 below -87.33, +inf above 88. The same steps as
 * ops_avx512.c's and ops.c's exp_steps: the same bits. */
static ALWAYS_INLINE __m256 exp_ps(__m256 x) {
    const __m256 high = _mm256_set1_ps(88.0f), low = _mm256_set1_ps(-87.33f);
    __m256 overflow = _mm256_cmp_ps(x, high, _CMP_GT_OQ);
    __m256 underflow = _mm256_cmp_ps(x, low, _CMP_LT_OQ);
    x = _mm256_max_ps(_mm256_min_ps(x, high), low);
    /* x = n ln2 + r, |r| <= ln2/2, ln2 split in a high part exact in float and a low part */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    /* e^r by its Taylor series to r^7 (error below 1e-8 on the interval) */
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n from its exponent bits: n is in [-126, 127] after the clamp */
    __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    result = _mm256_blendv_ps(result, _mm256_set1_ps(__builtin_inff()), overflow);
    return _mm256_andnot_ps(underflow, result);
}

/* 8 elements of a row from element i (the n < 8 left, zero-filled, for
 * the tail form), as floats: F32 rows; F16 rows converted exactly.
 * Callers pass a constant type, so each inlined copy has one kind of load. */
static ALWAYS_INLINE __m256 load_row(const void *row, enum tensor_type type, int i) {
    if (type == TENSOR_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
    return _mm256_loadu_ps((const float *)row + i);
}

static ALWAYS_INLINE __m256 load_row_tail(const void *row, enum tensor_type type, int i, int n) {
    if (type == TENSOR_F32) return load_tail((const float *)row + i, n);
    uint16_t lanes[8] = {0};
    memcpy(lanes, (const uint16_t *)row + i, sizeof(uint16_t) * (size_t)n);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)lanes));
}

void tensor_axpy_avx2(float *y, float a, const float *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    if (i < n)
        store_tail(y + i, _mm256_fmadd_ps(va, load_tail(x + i, n - i), load_tail(y + i, n - i)),
                   n - i);
}

void tensor_scale_avx2(float *x, float a, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), va));
    for (; i < n; i++) x[i] *= a;
}

/* Four running sums, 32 elements a round, then 8, then the zero-filled
 * tail, added as (0+1) + (2+3), then the lane tree. */
float tensor_dot_avx2(const float *a, const float *b, int n) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int i = 0;
    for (; i + 32 <= n; i += 32)
#pragma GCC unroll 4 /* keeps the four sums in registers */
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k),
                                     acc[k]);
    for (; i + 8 <= n; i += 8)
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
    if (i < n) acc[1] = _mm256_fmadd_ps(load_tail(a + i, n - i), load_tail(b + i, n - i), acc[1]);
    return sum_lanes(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

/* Eight columns of a dimension-major block from offset at, as floats; the
 * tail form (n < 8) takes the first n and zero-fills the rest, so a
 * block's last columns never read past it. */
static ALWAYS_INLINE __m256 load_columns(const void *columns, enum tensor_type type, size_t at,
                                         int n) {
    const void *from = type == TENSOR_F16 ? (const void *)((const uint16_t *)columns + at)
                                          : (const void *)((const float *)columns + at);
    return n == 8 ? load_row(from, type, 0) : load_row_tail(from, type, 0, n);
}

/* Queries a dot_columns tile keeps in registers: four sums each, 12 of
 * the 16 registers, beside the columns' dimension and a broadcast. */
#define TILE_DOT_QUERIES 3

/* dot_columns for queries [t0, t0 + nq) of the tile (nq a constant the
 * compiler unrolls): each dimension of eight columns is loaded and
 * converted once for all of them; each query's sums are dot_columns'. */
static ALWAYS_INLINE void dot_columns_queries(const struct tensor_tile *tile, int t0, const int nq,
                                              const void *columns, enum tensor_type type,
                                              int n_rows, int n, int stride) {
    const float *q[TILE_DOT_QUERIES];
#pragma GCC unroll 3
    for (int t = 0; t < nq; t++) q[t] = tile->in + (size_t)(t0 + t) * tile->in_stride;
    for (int r = 0; r < n_rows; r += 8) {
        int width = n_rows - r < 8 ? n_rows - r : 8;
        __m256 sums[TILE_DOT_QUERIES][4];
#pragma GCC unroll 3
        for (int t = 0; t < nq; t++)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) sums[t][k] = _mm256_setzero_ps();
        int i = 0;
        for (; i + 4 <= n; i += 4)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256 column = load_columns(columns, type,
                                             (size_t)(i + k) * (size_t)stride + (size_t)r, width);
#pragma GCC unroll 3
                for (int t = 0; t < nq; t++)
                    sums[t][k] = _mm256_fmadd_ps(_mm256_set1_ps(q[t][i + k]), column, sums[t][k]);
            }
#pragma GCC unroll 3
        for (int k = 0; k < 3; k++) {
            if (i + k >= n) break;
            __m256 column =
                load_columns(columns, type, (size_t)(i + k) * (size_t)stride + (size_t)r, width);
#pragma GCC unroll 3
            for (int t = 0; t < nq; t++)
                sums[t][k] = _mm256_fmadd_ps(_mm256_set1_ps(q[t][i + k]), column, sums[t][k]);
        }
#pragma GCC unroll 3
        for (int t = 0; t < nq; t++) {
            __m256 total = _mm256_add_ps(_mm256_add_ps(sums[t][0], sums[t][1]),
                                         _mm256_add_ps(sums[t][2], sums[t][3]));
            float *out = tile->out + (size_t)(t0 + t) * tile->out_stride + r;
            if (width == 8)
                _mm256_storeu_ps(out, total);
            else
                store_tail(out, total, width);
        }
    }
}

static ALWAYS_INLINE void dot_columns_tile(const struct tensor_tile *tile, const void *columns,
                                           enum tensor_type type, int n_rows, int n, int stride) {
    int t = 0;
    for (; t + TILE_DOT_QUERIES <= tile->n; t += TILE_DOT_QUERIES)
        dot_columns_queries(tile, t, TILE_DOT_QUERIES, columns, type, n_rows, n, stride);
    if (tile->n - t == 2) dot_columns_queries(tile, t, 2, columns, type, n_rows, n, stride);
    if (tile->n - t == 1) dot_columns_queries(tile, t, 1, columns, type, n_rows, n, stride);
}

void tensor_dot_columns_tile_avx2(const struct tensor_tile *tile, const void *columns,
                                  enum tensor_type type, int n_rows, int n, int stride) {
    if (type == TENSOR_F16)
        dot_columns_tile(tile, columns, TENSOR_F16, n_rows, n, stride);
    else
        dot_columns_tile(tile, columns, TENSOR_F32, n_rows, n, stride);
}

/* The one-query kernel is the tile of one query: the same code, so the
 * same bits as every row of a tile. */
void tensor_dot_columns_avx2(float *out, const float *q, const void *columns, enum tensor_type type,
                             int n_rows, int n, int stride) {
    struct tensor_tile one = {1, q, 0, out, 0};
    tensor_dot_columns_tile_avx2(&one, columns, type, n_rows, n, stride);
}

/* The four quants of each of width (<= 8) keys from key r, dimensions
 * [i, i + 4), one key a 32-bit lane, and (load_key_scales) the width
 * scales at scales as floats; zeros past width, so a block's last keys
 * never read past it. */
static ALWAYS_INLINE __m256i load_key_quants(const int8_t *quants, int i, int r, int stride,
                                             int width) {
    const int8_t *from = quants + ((size_t)(i / 4) * (size_t)stride + (size_t)r) * 4;
    if (width == 8) return _mm256_loadu_si256((const __m256i *)from);
    int8_t lanes[32] = {0};
    memcpy(lanes, from, 4 * (size_t)width);
    return _mm256_loadu_si256((const __m256i *)lanes);
}
static ALWAYS_INLINE __m256 load_key_scales(const uint16_t *scales, int width) {
    uint16_t lanes[8] = {0};
    memcpy(lanes, scales, sizeof(uint16_t) * (size_t)width);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)lanes));
}

/* One key a lane, eight at a time. Four dimensions' products go through
 * one multiply-add of unsigned by signed bytes: |key| times the query's
 * quants with the key's sign (each pair's sum stays within 16 bits, as
 * quants lie in [-127, 127]), then pairs of 16-bit sums into 32 bits;
 * then the matmul's float step. */
void tensor_dot_q8_0_keys_avx2(float *out, const struct tensor_q8_0_query *query, const void *keys,
                               int n_rows, int n, int stride) {
    const int8_t *quants = keys;
    const uint16_t *scales = (const void *)(quants + (size_t)n * (size_t)stride);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < n_rows; r += 8) {
        int width = n_rows - r < 8 ? n_rows - r : 8;
        __m256 acc = _mm256_setzero_ps();
        for (int j = 0; j < n / TENSOR_QK; j++) {
            __m256i dot = _mm256_setzero_si256();
            for (int g = 0; g < TENSOR_QK / 4; g++) {
                int i = j * TENSOR_QK + 4 * g;
                __m256i key4 = load_key_quants(quants, i, r, stride, width);
                int32_t query4;
                memcpy(&query4, query->quants + i, sizeof(query4));
                __m256i signed_query = _mm256_sign_epi8(_mm256_set1_epi32(query4), key4);
                __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(key4, key4), signed_query);
                dot = _mm256_add_epi32(dot, _mm256_madd_epi16(pairs, ones));
            }
            __m256 scale = _mm256_mul_ps(
                load_key_scales(scales + (size_t)j * (size_t)stride + (size_t)r, width),
                _mm256_set1_ps(query->scales[j]));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(dot), scale));
        }
        if (width == 8)
            _mm256_storeu_ps(out + r, acc);
        else
            store_tail(out + r, acc, width);
    }
}

/* Q8_0 values for columns [i, i + 32) (one block) of every row into out:
 * per block of a row, the weight times the block's scale, then a fused
 * multiply-add per quant. */
static ALWAYS_INLINE void weighted_sum_q8_0(float *out, const float *weights, const void *rows,
                                            size_t stride, int n_rows, int i) {
    __m256 acc[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) acc[k] = _mm256_loadu_ps(out + i + 8 * k);
    for (int p = 0; p < n_rows; p++) {
        const struct tensor_block_q8_0 *block =
            tensor_q8_0_block((const char *)rows + (size_t)p * stride, i);
        __m256 scaled = _mm256_set1_ps(weights[p] * _cvtsh_ss(block->d));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m128i quants = _mm_loadl_epi64((const __m128i *)(block->qs + 8 * k));
            acc[k] =
                _mm256_fmadd_ps(scaled, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(quants)), acc[k]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) _mm256_storeu_ps(out + i + 8 * k, acc[k]);
}

/* weighted_sum's columns [i, n), eight at a time. */
static ALWAYS_INLINE void weighted_sum_columns(float *out, const float *weights, const void *rows,
                                               enum tensor_type type, int n_rows, int n, int i) {
    size_t stride = tensor_row_bytes(type, n);
    for (; i < n; i += 8) {
        int width = n - i < 8 ? n - i : 8;
        __m256 acc = load_tail(out + i, width);
        for (int p = 0; p < n_rows; p++)
            acc = _mm256_fmadd_ps(
                _mm256_set1_ps(weights[p]),
                load_row_tail((const char *)rows + (size_t)p * stride, type, i, width), acc);
        store_tail(out + i, acc, width);
    }
}

void tensor_weighted_sum_avx2(float *out, const float *weights, const void *rows,
                              enum tensor_type type, int n_rows, int n) {
    if (type == TENSOR_Q8_0) {
        size_t stride = tensor_row_bytes(TENSOR_Q8_0, n);
        for (int i = 0; i < n; i += TENSOR_QK)
            weighted_sum_q8_0(out, weights, rows, stride, n_rows, i);
    } else {
        /* F32 and F16 rows: every element takes the fused multiply-adds
         * of tensor_axpy_avx2 in the same order, from out's value (the
         * tile of one query) */
        struct tensor_tile one = {1, weights, 0, out, 0};
        tensor_weighted_sum_tile_avx2(&one, rows, type, n_rows, n);
    }
}

/* Queries a weighted_sum tile keeps in registers: 32 columns of each, 8
 * registers, beside a row's four vectors and a weight. */
#define TILE_SUM_QUERIES 2

/* weighted_sum's 32-column step at column i for queries [t0, t0 + nq):
 * each row's 32 elements are loaded and converted once for all of them;
 * each query's fused multiply-adds are weighted_sum's, in its order. */
static ALWAYS_INLINE void weighted_sum_queries(const struct tensor_tile *tile, int t0, const int nq,
                                               const void *rows, enum tensor_type type, int n_rows,
                                               size_t stride, int i) {
    __m256 acc[TILE_SUM_QUERIES][4];
    const float *weights[TILE_SUM_QUERIES];
#pragma GCC unroll 2
    for (int t = 0; t < nq; t++) {
        weights[t] = tile->in + (size_t)(t0 + t) * tile->in_stride;
        const float *out = tile->out + (size_t)(t0 + t) * tile->out_stride + i;
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) acc[t][k] = _mm256_loadu_ps(out + 8 * k);
    }
    for (int p = 0; p < n_rows; p++) {
        const void *row = (const char *)rows + (size_t)p * stride;
        __m256 elements[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) elements[k] = load_row(row, type, i + 8 * k);
#pragma GCC unroll 2
        for (int t = 0; t < nq; t++) {
            __m256 w = _mm256_set1_ps(weights[t][p]);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) acc[t][k] = _mm256_fmadd_ps(w, elements[k], acc[t][k]);
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < nq; t++) {
        float *out = tile->out + (size_t)(t0 + t) * tile->out_stride + i;
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) _mm256_storeu_ps(out + 8 * k, acc[t][k]);
    }
}

/* The tile's whole 32-column steps, two queries at a time; the columns
 * past them one query at a time (weighted_sum's tail). */
static ALWAYS_INLINE void weighted_sum_tile(const struct tensor_tile *tile, const void *rows,
                                            enum tensor_type type, int n_rows, int n) {
    size_t stride = tensor_row_bytes(type, n);
    int whole = n - n % 32;
    for (int i = 0; i < whole; i += 32) {
        int t = 0;
        for (; t + TILE_SUM_QUERIES <= tile->n; t += TILE_SUM_QUERIES)
            weighted_sum_queries(tile, t, TILE_SUM_QUERIES, rows, type, n_rows, stride, i);
        if (t < tile->n) weighted_sum_queries(tile, t, 1, rows, type, n_rows, stride, i);
    }
    if (whole == n) return;
    for (int t = 0; t < tile->n; t++)
        weighted_sum_columns(tile->out + (size_t)t * tile->out_stride,
                             tile->in + (size_t)t * tile->in_stride, rows, type, n_rows, n, whole);
}

void tensor_weighted_sum_tile_avx2(const struct tensor_tile *tile, const void *rows,
                                   enum tensor_type type, int n_rows, int n) {
    if (type == TENSOR_Q8_0) /* one query at a time */
        for (int t = 0; t < tile->n; t++)
            tensor_weighted_sum_avx2(tile->out + (size_t)t * tile->out_stride,
                                     tile->in + (size_t)t * tile->in_stride, rows, type, n_rows, n);
    else if (type == TENSOR_F16)
        weighted_sum_tile(tile, rows, TENSOR_F16, n_rows, n);
    else
        weighted_sum_tile(tile, rows, TENSOR_F32, n_rows, n);
}

void tensor_fp16_from_fp32_avx2(uint16_t *out, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), FP16_ROUNDING));
    if (i < n) {
        uint16_t lanes[8];
        _mm_storeu_si128((__m128i *)lanes, _mm256_cvtps_ph(load_tail(x + i, n - i), FP16_ROUNDING));
        memcpy(out + i, lanes, sizeof(uint16_t) * (size_t)(n - i));
    }
}

void tensor_rmsnorm_avx2(float *out, const float *x, const float *weight, int n, float eps) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    if (i < n) {
        __m256 v = load_tail(x + i, n - i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    float scale = 1.0f / __builtin_sqrtf(sum_lanes(acc) / (float)n + eps);
    __m256 vs = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(weight + i),
                                                _mm256_mul_ps(vs, _mm256_loadu_ps(x + i))));
    for (; i < n; i++) out[i] = weight[i] * (scale * x[i]);
}

/* The weights of 8 elements (tensor_exp_weights). */
static ALWAYS_INLINE __m256 weights_of(__m256 x, __m256 shift, __m256 divisor, __m256 floor) {
    __m256 kept = _mm256_cmp_ps(x, floor, _CMP_GE_OQ);
    return _mm256_and_ps(kept, exp_ps(_mm256_div_ps(_mm256_sub_ps(x, shift), divisor)));
}

void tensor_exp_weights_avx2(float *out, const float *x, int n, float shift, float divisor,
                             float floor) {
    __m256 vshift = _mm256_set1_ps(shift), vdivisor = _mm256_set1_ps(divisor);
    __m256 vfloor = _mm256_set1_ps(floor);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, weights_of(_mm256_loadu_ps(x + i), vshift, vdivisor, vfloor));
    if (i < n)
        store_tail(out + i, weights_of(load_tail(x + i, n - i), vshift, vdivisor, vfloor), n - i);
}

void tensor_softmax_avx2(float *x, int n) {
    __m256 vmax = _mm256_set1_ps(-__builtin_inff());
    int i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float max = max_lanes(vmax);
    for (; i < n; i++)
        if (x[i] > max) max = x[i];
    __m256 vmax_all = _mm256_set1_ps(max);
    __m256 sum = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax_all));
        _mm256_storeu_ps(x + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (i < n) {
        /* zero-filled lanes would add exp(-max): mask them out of the sum */
        __m256 e = exp_ps(_mm256_sub_ps(load_tail(x + i, n - i), vmax_all));
        store_tail(x + i, e, n - i);
        __m256 keep = _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7),
                                    _mm256_set1_ps((float)(n - i)), _CMP_LT_OQ);
        sum = _mm256_add_ps(sum, _mm256_and_ps(e, keep));
    }
    __m256 inverse = _mm256_set1_ps(1.0f / sum_lanes(sum));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inverse));
    if (i < n) store_tail(x + i, _mm256_mul_ps(load_tail(x + i, n - i), inverse), n - i);
}

static ALWAYS_INLINE __m256 swiglu_ps(__m256 gate, __m256 up) {
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), gate));
    return _mm256_mul_ps(_mm256_div_ps(gate, _mm256_add_ps(one, e)), up);
}

void tensor_swiglu_avx2(float *out, const float *gate, const float *up, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, swiglu_ps(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n)
        store_tail(out + i, swiglu_ps(load_tail(gate + i, n - i), load_tail(up + i, n - i)), n - i);
}

/* NEOX as in ops_avx512.c, 8 pairs a vector; returns the first pair left
 * for the scalar tail. */
static int turn_neox(float *head, int pairs, const float *cosines, const float *sines) {
    int j = 0;
    for (; j + 8 <= pairs; j += 8) {
        __m256 c = _mm256_loadu_ps(cosines + j), s = _mm256_loadu_ps(sines + j);
        __m256 a = _mm256_loadu_ps(head + j), b = _mm256_loadu_ps(head + j + pairs);
        _mm256_storeu_ps(head + j, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
        _mm256_storeu_ps(head + j + pairs, _mm256_add_ps(_mm256_mul_ps(a, s), _mm256_mul_ps(b, c)));
    }
    return j;
}

/* NORM as in ops_avx512.c (each lane its element times the cosine plus its
 * neighbour times the sine, negated in the first lane: bit for bit the
 * scalar turn), 4 pairs a vector; returns the first pair left. */
static int turn_norm(float *head, int pairs, const float *cosines, const float *sines) {
    const __m256i twice = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    const __m256 first_lanes = _mm256_castsi256_ps(
        _mm256_setr_epi32(INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0));
    int j = 0;
    for (; j + 4 <= pairs; j += 4) {
        __m256 c =
            _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cosines + j)), twice);
        __m256 s = _mm256_xor_ps(
            _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sines + j)), twice),
            first_lanes);
        __m256 v = _mm256_loadu_ps(head + 2 * j);
        __m256 neighbour = _mm256_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1));
        _mm256_storeu_ps(head + 2 * j,
                         _mm256_add_ps(_mm256_mul_ps(v, c), _mm256_mul_ps(neighbour, s)));
    }
    return j;
}

int tensor_rope_turn_vectors_avx2(float *head, int pairs, const float *cosines, const float *sines,
                                  enum tensor_rope_style style) {
    return style == TENSOR_ROPE_NEOX ? turn_neox(head, pairs, cosines, sines)
                                     : turn_norm(head, pairs, cosines, sines);
}
