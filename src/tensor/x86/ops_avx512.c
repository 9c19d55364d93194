/* ops_avx512.c -- AVX-512 versions of the per-row kernels in ops.c.
 *
 * Only the kernels whose bits are the canonical ones (the scalar
 * reference's, tensor_internal.h): element-wise ops, and per-column sums
 * that keep one lane per column, and the attention tiles that serve
 * several queries with each load. The reductions along a row (dot, the
 * RMS norm's sum of squares) are AVX2's: 16 lanes would add in another
 * order; the softmax makes its exps 16 at a time and adds them into
 * AVX2's 8 lane sums in AVX2's order. exp is the vector implementation of
 * ops_avx2.c's steps (range reduction to [-ln2/2, ln2/2], a degree-7
 * polynomial). */
#include "lanes_avx2.h"
#include "panel_avx512.h"
#include "x86.h"

#include <immintrin.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Rounding of floats to half: to nearest, ties to even, as tensor_fp32_to_fp16. */
#define FP16_ROUNDING (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* Elements handled by the vector loop; the rest, under a mask. */
static ALWAYS_INLINE __mmask16 tail_mask(int n) {
    return (__mmask16)((1u << (n & 15)) - 1u);
}

/* exp(x) for 16 floats; 0 below -87.33, +inf above 88. The same steps as
 * ops_avx2.c's and ops.c's exp_steps: the same bits. */
static ALWAYS_INLINE __m512 exp_ps(__m512 x) {
    const __m512 high = _mm512_set1_ps(88.0f), low = _mm512_set1_ps(-87.33f);
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
    /* 2^n from its exponent bits: n is in [-126, 127] after the clamp */
    __m512i bits =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 result = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
    result = _mm512_mask_mov_ps(result, overflow, _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_mov_ps(result, underflow, _mm512_setzero_ps());
}

/* 16 elements of a row from element i, as floats: F32 rows; F16 rows
 * converted exactly. The masked form zeroes the lanes outside mask.
 * Callers pass a constant type, so each inlined copy has one kind of load. */
static ALWAYS_INLINE __m512 load_row(const void *row, enum tensor_type type, int i) {
    if (type == TENSOR_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)));
    return _mm512_loadu_ps((const float *)row + i);
}

static ALWAYS_INLINE __m512 load_row_masked(const void *row, enum tensor_type type, int i,
                                            __mmask16 mask) {
    if (type == TENSOR_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, (const uint16_t *)row + i));
    return _mm512_maskz_loadu_ps(mask, (const float *)row + i);
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

void tensor_scale_avx512(float *x, float a, int n) {
    __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), va));
    if (i < n) {
        __mmask16 mask = tail_mask(n);
        _mm512_mask_storeu_ps(x + i, mask, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + i), va));
    }
}

/* Sixteen columns of a dimension-major block from offset at, as floats
 * (lanes outside mask zero). */
static ALWAYS_INLINE __m512 load_columns(const void *columns, enum tensor_type type, size_t at,
                                         __mmask16 mask) {
    if (type == TENSOR_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, (const uint16_t *)columns + at));
    return _mm512_maskz_loadu_ps(mask, (const float *)columns + at);
}

/* Queries a dot_columns tile keeps in registers: four sums each, 24 of
 * the 32 registers, beside the columns' dimension and the broadcasts. */
#define TILE_DOT_QUERIES 6

/* dot_columns for queries [t0, t0 + nq) of the tile (nq a constant the
 * compiler unrolls): each dimension of sixteen columns is loaded and
 * converted once for all of them; each query's sums are dot_columns'. */
static ALWAYS_INLINE void dot_columns_queries(const struct tensor_tile *tile, int t0, const int nq,
                                              const void *columns, enum tensor_type type,
                                              int n_rows, int n, int stride) {
    const float *q[TILE_DOT_QUERIES];
#pragma GCC unroll 6
    for (int t = 0; t < nq; t++) q[t] = tile->in + (size_t)(t0 + t) * tile->in_stride;
    for (int r = 0; r < n_rows; r += 16) {
        __mmask16 mask = n_rows - r >= 16 ? (__mmask16)0xffff : tail_mask(n_rows - r);
        __m512 sums[TILE_DOT_QUERIES][4];
#pragma GCC unroll 6
        for (int t = 0; t < nq; t++)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) sums[t][k] = _mm512_setzero_ps();
        int i = 0;
        for (; i + 4 <= n; i += 4)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m512 column =
                    load_columns(columns, type, (size_t)(i + k) * (size_t)stride + (size_t)r, mask);
#pragma GCC unroll 6
                for (int t = 0; t < nq; t++)
                    sums[t][k] = _mm512_fmadd_ps(_mm512_set1_ps(q[t][i + k]), column, sums[t][k]);
            }
#pragma GCC unroll 3
        for (int k = 0; k < 3; k++) {
            if (i + k >= n) break;
            __m512 column =
                load_columns(columns, type, (size_t)(i + k) * (size_t)stride + (size_t)r, mask);
#pragma GCC unroll 6
            for (int t = 0; t < nq; t++)
                sums[t][k] = _mm512_fmadd_ps(_mm512_set1_ps(q[t][i + k]), column, sums[t][k]);
        }
#pragma GCC unroll 6
        for (int t = 0; t < nq; t++)
            _mm512_mask_storeu_ps(tile->out + (size_t)(t0 + t) * tile->out_stride + r, mask,
                                  _mm512_add_ps(_mm512_add_ps(sums[t][0], sums[t][1]),
                                                _mm512_add_ps(sums[t][2], sums[t][3])));
    }
}

static ALWAYS_INLINE void dot_columns_tile(const struct tensor_tile *tile, const void *columns,
                                           enum tensor_type type, int n_rows, int n, int stride) {
    int t = 0;
    for (; t + TILE_DOT_QUERIES <= tile->n; t += TILE_DOT_QUERIES)
        dot_columns_queries(tile, t, TILE_DOT_QUERIES, columns, type, n_rows, n, stride);
    switch (tile->n - t) {
    case 5:
        dot_columns_queries(tile, t, 5, columns, type, n_rows, n, stride);
        break;
    case 4:
        dot_columns_queries(tile, t, 4, columns, type, n_rows, n, stride);
        break;
    case 3:
        dot_columns_queries(tile, t, 3, columns, type, n_rows, n, stride);
        break;
    case 2:
        dot_columns_queries(tile, t, 2, columns, type, n_rows, n, stride);
        break;
    case 1:
        dot_columns_queries(tile, t, 1, columns, type, n_rows, n, stride);
        break;
    default:
        break;
    }
}

void tensor_dot_columns_tile_avx512(const struct tensor_tile *tile, const void *columns,
                                    enum tensor_type type, int n_rows, int n, int stride) {
    if (type == TENSOR_F16)
        dot_columns_tile(tile, columns, TENSOR_F16, n_rows, n, stride);
    else
        dot_columns_tile(tile, columns, TENSOR_F32, n_rows, n, stride);
}

/* Queries a Q8_0 keys tile keeps in registers: a block's integer sums and
 * the running float sums, 12 registers. */
#define TILE_KEY_QUERIES 6

/* tensor_dot_q8_0_keys_avx512 for queries [t0, t0 + nq): each four
 * dimensions of sixteen keys are loaded and made unsigned once for all of
 * them, and each block's key scales converted once; each query's sums are
 * the one-query kernel's. */
static ALWAYS_INLINE void q8_0_keys_queries(float *out, size_t out_stride,
                                            const struct tensor_q8_0_query *queries, int t0,
                                            const int nq, const void *keys, int n_rows, int n,
                                            int stride) {
    const int8_t *quants = keys;
    const uint16_t *scales = (const void *)(quants + (size_t)n * (size_t)stride);
    const __m512i unsigned_offset = _mm512_set1_epi8((char)0x80);
    const struct tensor_q8_0_query *q = queries + t0;
    for (int r = 0; r < n_rows; r += 16) {
        __mmask16 mask = n_rows - r >= 16 ? (__mmask16)0xffff : tail_mask(n_rows - r);
        __m512 acc[TILE_KEY_QUERIES];
#pragma GCC unroll 6
        for (int t = 0; t < nq; t++) acc[t] = _mm512_setzero_ps();
        for (int j = 0; j < n / TENSOR_QK; j++) {
            __m512i dot[TILE_KEY_QUERIES];
#pragma GCC unroll 6
            for (int t = 0; t < nq; t++) dot[t] = _mm512_set1_epi32(q[t].bias[j]);
#pragma GCC unroll 8
            for (int g = 0; g < TENSOR_QK / 4; g++) {
                int i = j * TENSOR_QK + 4 * g;
                __m512i key4 = _mm512_xor_si512(
                    _mm512_maskz_loadu_epi32(
                        mask, quants + ((size_t)(i / 4) * (size_t)stride + (size_t)r) * 4),
                    unsigned_offset);
#pragma GCC unroll 6
                for (int t = 0; t < nq; t++) {
                    int32_t query4;
                    memcpy(&query4, q[t].quants + i, sizeof(query4));
                    dot[t] = _mm512_dpbusd_epi32(dot[t], key4, _mm512_set1_epi32(query4));
                }
            }
            __m512 d_key = _mm512_cvtph_ps(
                _mm256_maskz_loadu_epi16(mask, scales + (size_t)j * (size_t)stride + (size_t)r));
#pragma GCC unroll 6
            for (int t = 0; t < nq; t++)
                acc[t] = panel_add_block(acc[t], dot[t], d_key, q[t].scales[j]);
        }
#pragma GCC unroll 6
        for (int t = 0; t < nq; t++)
            _mm512_mask_storeu_ps(out + (size_t)(t0 + t) * out_stride + r, mask, acc[t]);
    }
}

void tensor_dot_q8_0_keys_tile_avx512(float *out, size_t out_stride,
                                      const struct tensor_q8_0_query *queries, int n_queries,
                                      const void *keys, int n_rows, int n, int stride) {
    int t = 0;
    for (; t + TILE_KEY_QUERIES <= n_queries; t += TILE_KEY_QUERIES)
        q8_0_keys_queries(out, out_stride, queries, t, TILE_KEY_QUERIES, keys, n_rows, n, stride);
    switch (n_queries - t) {
    case 5:
        q8_0_keys_queries(out, out_stride, queries, t, 5, keys, n_rows, n, stride);
        break;
    case 4:
        q8_0_keys_queries(out, out_stride, queries, t, 4, keys, n_rows, n, stride);
        break;
    case 3:
        q8_0_keys_queries(out, out_stride, queries, t, 3, keys, n_rows, n, stride);
        break;
    case 2:
        q8_0_keys_queries(out, out_stride, queries, t, 2, keys, n_rows, n, stride);
        break;
    case 1:
        q8_0_keys_queries(out, out_stride, queries, t, 1, keys, n_rows, n, stride);
        break;
    default:
        break;
    }
}

/* weighted_sum's columns [i, n), sixteen at a time (the last ones under a
 * mask). */
static ALWAYS_INLINE void weighted_sum_columns(float *out, const float *weights, const void *rows,
                                               enum tensor_type type, int n_rows, int n, int i) {
    size_t stride = tensor_row_bytes(type, n);
    for (; i < n; i += 16) {
        __mmask16 mask = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n);
        __m512 acc = _mm512_maskz_loadu_ps(mask, out + i);
        for (int p = 0; p < n_rows; p++)
            acc = _mm512_fmadd_ps(
                _mm512_set1_ps(weights[p]),
                load_row_masked((const char *)rows + (size_t)p * stride, type, i, mask), acc);
        _mm512_mask_storeu_ps(out + i, mask, acc);
    }
}

/* Queries a weighted_sum tile keeps in registers: 64 columns of each, 24
 * registers, beside a row's four vectors and a weight. */
#define TILE_SUM_QUERIES 6

/* weighted_sum's 64-column step at column i for queries [t0, t0 + nq):
 * each row's 64 elements are loaded and converted once for all of them;
 * each query's fused multiply-adds are weighted_sum's, in its order. */
static ALWAYS_INLINE void weighted_sum_queries(const struct tensor_tile *tile, int t0, const int nq,
                                               const void *rows, enum tensor_type type, int n_rows,
                                               size_t stride, int i) {
    __m512 acc[TILE_SUM_QUERIES][4];
    const float *weights[TILE_SUM_QUERIES];
#pragma GCC unroll 6
    for (int t = 0; t < nq; t++) {
        weights[t] = tile->in + (size_t)(t0 + t) * tile->in_stride;
        const float *out = tile->out + (size_t)(t0 + t) * tile->out_stride + i;
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) acc[t][k] = _mm512_loadu_ps(out + 16 * k);
    }
    for (int p = 0; p < n_rows; p++) {
        const void *row = (const char *)rows + (size_t)p * stride;
        __m512 elements[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) elements[k] = load_row(row, type, i + 16 * k);
#pragma GCC unroll 6
        for (int t = 0; t < nq; t++) {
            __m512 w = _mm512_set1_ps(weights[t][p]);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) acc[t][k] = _mm512_fmadd_ps(w, elements[k], acc[t][k]);
        }
    }
#pragma GCC unroll 6
    for (int t = 0; t < nq; t++) {
        float *out = tile->out + (size_t)(t0 + t) * tile->out_stride + i;
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) _mm512_storeu_ps(out + 16 * k, acc[t][k]);
    }
}

/* The tile's whole 64-column steps, TILE_SUM_QUERIES queries at a time;
 * the columns past them one query at a time (weighted_sum's tail). */
static ALWAYS_INLINE void weighted_sum_tile(const struct tensor_tile *tile, const void *rows,
                                            enum tensor_type type, int n_rows, int n) {
    size_t stride = tensor_row_bytes(type, n);
    int whole = n - n % 64;
    for (int i = 0; i < whole; i += 64) {
        int t = 0;
        for (; t + TILE_SUM_QUERIES <= tile->n; t += TILE_SUM_QUERIES)
            weighted_sum_queries(tile, t, TILE_SUM_QUERIES, rows, type, n_rows, stride, i);
        switch (tile->n - t) {
        case 5:
            weighted_sum_queries(tile, t, 5, rows, type, n_rows, stride, i);
            break;
        case 4:
            weighted_sum_queries(tile, t, 4, rows, type, n_rows, stride, i);
            break;
        case 3:
            weighted_sum_queries(tile, t, 3, rows, type, n_rows, stride, i);
            break;
        case 2:
            weighted_sum_queries(tile, t, 2, rows, type, n_rows, stride, i);
            break;
        case 1:
            weighted_sum_queries(tile, t, 1, rows, type, n_rows, stride, i);
            break;
        default:
            break;
        }
    }
    if (whole == n) return;
    for (int t = 0; t < tile->n; t++)
        weighted_sum_columns(tile->out + (size_t)t * tile->out_stride,
                             tile->in + (size_t)t * tile->in_stride, rows, type, n_rows, n, whole);
}

/* Queries a Q8_0 weighted_sum tile keeps in registers: 64 columns of
 * each, 16 registers, beside a row's four vectors and a weight. */
#define TILE_Q8_0_QUERIES 4

/* weighted_sum_q8_0's step at column i (vectors 4 or 2: two blocks or one)
 * for queries [t0, t0 + nq): each row's quants are converted to floats
 * once for all of them; each query's weight times the block's scale, and
 * its fused multiply-adds, are weighted_sum_q8_0's. */
static ALWAYS_INLINE void q8_0_sum_queries(const struct tensor_tile *tile, int t0, const int nq,
                                           const void *rows, size_t stride, int n_rows, int i,
                                           const int vectors) {
    __m512 acc[TILE_Q8_0_QUERIES][4];
#pragma GCC unroll 4
    for (int t = 0; t < nq; t++)
#pragma GCC unroll 4
        for (int k = 0; k < vectors; k++)
            acc[t][k] =
                _mm512_loadu_ps(tile->out + (size_t)(t0 + t) * tile->out_stride + i + 16 * k);
    for (int p = 0; p < n_rows; p++) {
        const struct tensor_block_q8_0 *block =
            tensor_q8_0_block((const char *)rows + (size_t)p * stride, i);
        __m512 quants[4];
#pragma GCC unroll 4
        for (int k = 0; k < vectors; k++)
            quants[k] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                _mm_loadu_si128((const __m128i *)(block[k / 2].qs + 16 * (k % 2)))));
#pragma GCC unroll 4
        for (int t = 0; t < nq; t++) {
            float weight = tile->in[(size_t)(t0 + t) * tile->in_stride + (size_t)p];
#pragma GCC unroll 4
            for (int k = 0; k < vectors; k++)
                acc[t][k] = _mm512_fmadd_ps(_mm512_set1_ps(weight * _cvtsh_ss(block[k / 2].d)),
                                            quants[k], acc[t][k]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < nq; t++)
#pragma GCC unroll 4
        for (int k = 0; k < vectors; k++)
            _mm512_storeu_ps(tile->out + (size_t)(t0 + t) * tile->out_stride + i + 16 * k,
                             acc[t][k]);
}

/* The Q8_0 tile at column i, TILE_Q8_0_QUERIES queries at a time. */
static ALWAYS_INLINE void q8_0_sum_tile(const struct tensor_tile *tile, const void *rows,
                                        size_t stride, int n_rows, int i, const int vectors) {
    int t = 0;
    for (; t + TILE_Q8_0_QUERIES <= tile->n; t += TILE_Q8_0_QUERIES)
        q8_0_sum_queries(tile, t, TILE_Q8_0_QUERIES, rows, stride, n_rows, i, vectors);
    switch (tile->n - t) {
    case 3:
        q8_0_sum_queries(tile, t, 3, rows, stride, n_rows, i, vectors);
        break;
    case 2:
        q8_0_sum_queries(tile, t, 2, rows, stride, n_rows, i, vectors);
        break;
    case 1:
        q8_0_sum_queries(tile, t, 1, rows, stride, n_rows, i, vectors);
        break;
    default:
        break;
    }
}

void tensor_weighted_sum_tile_avx512(const struct tensor_tile *tile, const void *rows,
                                     enum tensor_type type, int n_rows, int n) {
    if (type == TENSOR_Q8_0) {
        size_t stride = tensor_row_bytes(TENSOR_Q8_0, n);
        int i = 0;
        for (; i + 64 <= n; i += 64) q8_0_sum_tile(tile, rows, stride, n_rows, i, 4);
        if (i < n) q8_0_sum_tile(tile, rows, stride, n_rows, i, 2);
    } else if (type == TENSOR_F16)
        weighted_sum_tile(tile, rows, TENSOR_F16, n_rows, n);
    else
        weighted_sum_tile(tile, rows, TENSOR_F32, n_rows, n);
}

/* The one-query kernels are the tiles of one query: the same code, so the
 * same bits as every row of a tile. */
void tensor_dot_columns_avx512(float *out, const float *q, const void *columns,
                               enum tensor_type type, int n_rows, int n, int stride) {
    struct tensor_tile one = {1, q, 0, out, 0};
    tensor_dot_columns_tile_avx512(&one, columns, type, n_rows, n, stride);
}

/* One key a lane, sixteen at a time. A block's integer dot is eight
 * vpdpbusd, each adding four dimensions: the keys' quants made unsigned
 * (+128, which the query's bias takes back) times four of the query's,
 * broadcast; then the matmul's float step (panel_add_block). */
void tensor_dot_q8_0_keys_avx512(float *out, const struct tensor_q8_0_query *query,
                                 const void *keys, int n_rows, int n, int stride) {
    tensor_dot_q8_0_keys_tile_avx512(out, 0, query, 1, keys, n_rows, n, stride);
}

/* F32 and F16 rows: every element takes the fused multiply-adds of
 * tensor_axpy_avx512 in the same order, from out's value; Q8_0: per block
 * of a row, the weight times the block's scale, then a fused multiply-add
 * per quant. */
void tensor_weighted_sum_avx512(float *out, const float *weights, const void *rows,
                                enum tensor_type type, int n_rows, int n) {
    struct tensor_tile one = {1, weights, 0, out, 0};
    tensor_weighted_sum_tile_avx512(&one, rows, type, n_rows, n);
}

void tensor_fp16_from_fp32_avx512(uint16_t *out, const float *x, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(out + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), FP16_ROUNDING));
    if (i < n) {
        __mmask16 mask = tail_mask(n);
        _mm256_mask_storeu_epi16(
            out + i, mask, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(mask, x + i), FP16_ROUNDING));
    }
}

/* The weights of 16 elements (tensor_exp_weights). */
static ALWAYS_INLINE __m512 weights_of(__m512 x, __m512 shift, __m512 divisor, __m512 floor) {
    __mmask16 kept = _mm512_cmp_ps_mask(x, floor, _CMP_GE_OQ);
    return _mm512_maskz_mov_ps(kept, exp_ps(_mm512_div_ps(_mm512_sub_ps(x, shift), divisor)));
}

void tensor_exp_weights_avx512(float *out, const float *x, int n, float shift, float divisor,
                               float floor) {
    __m512 vshift = _mm512_set1_ps(shift), vdivisor = _mm512_set1_ps(divisor);
    __m512 vfloor = _mm512_set1_ps(floor);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, weights_of(_mm512_loadu_ps(x + i), vshift, vdivisor, vfloor));
    if (i < n) {
        __mmask16 mask = tail_mask(n);
        _mm512_mask_storeu_ps(
            out + i, mask,
            weights_of(_mm512_maskz_loadu_ps(mask, x + i), vshift, vdivisor, vfloor));
    }
}

/* tensor_softmax_avx2's bits with exp on sixteen lanes: the maximum is
 * found in its 8 lanes and tree; each 16 exps are added into its 8 lane
 * sums as two of its vectors, low half first, so every sum is made in its
 * order; the tail's lanes past n add nothing, as in it. */
void tensor_softmax_avx512(float *x, int n) {
    __m256 lanes8 = _mm256_set1_ps(-__builtin_inff());
    int i = 0;
    for (; i + 8 <= n; i += 8) lanes8 = _mm256_max_ps(lanes8, _mm256_loadu_ps(x + i));
    float max = max_lanes(lanes8);
    for (; i < n; i++)
        if (x[i] > max) max = x[i];
    const __m512 vmax = _mm512_set1_ps(max);
    __m256 sum = _mm256_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax));
        _mm512_storeu_ps(x + i, e);
        sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
        sum = _mm256_add_ps(sum, _mm512_extractf32x8_ps(e, 1));
    }
    if (i < n) {
        __mmask16 mask = tail_mask(n);
        __m512 e = _mm512_maskz_mov_ps(
            mask, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), vmax)));
        _mm512_mask_storeu_ps(x + i, mask, e);
        sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
        if (n - i > 8) sum = _mm256_add_ps(sum, _mm512_extractf32x8_ps(e, 1));
    }
    const __m512 inverse = _mm512_set1_ps(1.0f / sum_lanes(sum));
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inverse));
    if (i < n) {
        __mmask16 mask = tail_mask(n);
        _mm512_mask_storeu_ps(x + i, mask,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + i), inverse));
    }
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

/* NEOX: pair j is (j, j + pairs), so a vector of firsts and one of seconds
 * turn 16 pairs. Returns the first pair left for the scalar tail. */
static int turn_neox(float *head, int pairs, const float *cosines, const float *sines) {
    int j = 0;
    for (; j + 16 <= pairs; j += 16) {
        __m512 c = _mm512_loadu_ps(cosines + j), s = _mm512_loadu_ps(sines + j);
        __m512 a = _mm512_loadu_ps(head + j), b = _mm512_loadu_ps(head + j + pairs);
        _mm512_storeu_ps(head + j, _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, s)));
        _mm512_storeu_ps(head + j + pairs, _mm512_add_ps(_mm512_mul_ps(a, s), _mm512_mul_ps(b, c)));
    }
    return j;
}

/* NORM: pairs lie side by side, (a, b). Each lane multiplies its element by
 * the pair's cosine and adds its neighbour times the sine, negated in the
 * first lane -- a c + b (-s) and b c + a s, the scalar a c - b s and
 * a s + b c bit for bit (negation is exact, the sum commutes). 8 pairs a
 * vector; returns the first pair left for the scalar tail. */
static int turn_norm(float *head, int pairs, const float *cosines, const float *sines) {
    const __m512i twice = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512 first_lanes = _mm512_castsi512_ps(
        _mm512_setr_epi32(INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0,
                          INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0));
    int j = 0;
    for (; j + 8 <= pairs; j += 8) {
        __m512 c =
            _mm512_permutexvar_ps(twice, _mm512_castps256_ps512(_mm256_loadu_ps(cosines + j)));
        __m512 s = _mm512_xor_ps(
            _mm512_permutexvar_ps(twice, _mm512_castps256_ps512(_mm256_loadu_ps(sines + j))),
            first_lanes);
        __m512 v = _mm512_loadu_ps(head + 2 * j);
        __m512 neighbour = _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1));
        _mm512_storeu_ps(head + 2 * j,
                         _mm512_add_ps(_mm512_mul_ps(v, c), _mm512_mul_ps(neighbour, s)));
    }
    return j;
}

int tensor_rope_turn_vectors_avx512(float *head, int pairs, const float *cosines,
                                    const float *sines, enum tensor_rope_style style) {
    return style == TENSOR_ROPE_NEOX ? turn_neox(head, pairs, cosines, sines)
                                     : turn_norm(head, pairs, cosines, sines);
}
