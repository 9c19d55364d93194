/* matmul_gemv_avx512.c -- AVX-512 quantized GEMV: Q8_0 / Q4_0 weights times
 * one or two activation rows (token generation).
 *
 * Generation streams every weight once per token, so the work per weight
 * byte must stay below what memory delivers. The kernel takes a tile of 16
 * rows and walks it in groups of 4 consecutive blocks:
 *  - per row, two or four 64-byte loads and one word permutation
 *    (vpermt2w) per 64 quant bytes put block k's quants in 128-bit lane k:
 *    Q4_0 packs low nibbles (elements 0..15) and high nibbles (16..31) of
 *    the 4 blocks in one register, Q8_0 needs two (first and second 16
 *    elements of each block);
 *  - the activations were laid out once per call to match: per group, the
 *    first 16 quants of its 4 blocks, then the last 16 (gemv_layout_x);
 *  - vpdpbusd (unsigned weights x signed activations, see matmul_avx512.c
 *    for the bias that restores the sign) gives 4 partial sums per block
 *    and row; 4 rows reduce to one vector (lane k = block k, rows in
 *    order), and a 4x4 transpose of 128-bit lanes makes one vector of 16
 *    rows per block;
 *  - the 16 rows' fp16 scales are merged out of the same loads.
 * Then the float step of tensor_internal.h runs block after block on 16
 * rows at once: acc = acc + (float)dot * (d_w * d_x), the scalar sequence,
 * so results match the scalar kernel bit for bit. */
#include "tensor_internal.h"

#include <immintrin.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

#define GEMV_ROWS        16  /* rows per tile: one float vector of results */
#define GEMV_GROUP       4   /* blocks per step: one per 128-bit lane */
#define GEMV_MAX_COLS    2   /* activation rows sharing one pass over the weights */
#define GEMV_GROUP_BYTES 128 /* laid-out activation bytes per group */

/* Word indices (vpermt2w) of block k's quants in lane k, from the group's
 * loads: Q4_0 from bytes [0, 64) and [8, 72); Q8_0 first halves from [0, 64)
 * and [64, 128), second halves from [8, 72) and [72, 136). */
static const int16_t q4_quant_words[32] = {1,  2,  3,  4,  5,  6,  7,  8,  10, 11, 12,
                                           13, 14, 15, 16, 17, 19, 20, 21, 22, 23, 24,
                                           25, 26, 56, 57, 58, 59, 60, 61, 62, 63};
static const int16_t q8_low_words[32] = {1,  2,  3,  4,  5,  6,  7,  8,  18, 19, 20,
                                         21, 22, 23, 24, 25, 35, 36, 37, 38, 39, 40,
                                         41, 42, 52, 53, 54, 55, 56, 57, 58, 59};
static const int16_t q8_high_words[32] = {5,  6,  7,  8,  9,  10, 11, 12, 22, 23, 24,
                                          25, 26, 27, 28, 29, 39, 40, 41, 42, 43, 44,
                                          45, 46, 56, 57, 58, 59, 60, 61, 62, 63};

/* Lays out the activation quants of batch rows for the kernel: group g of row
 * b at out + (b * groups + g) * 128 holds the first 16 quants of blocks
 * 4g .. 4g+3, then their last 16; blocks past the row are zeros. */
static void gemv_layout_x(int8_t *out, const struct tensor_xq *xq, int batch, int cols) {
    int blocks = cols / TENSOR_QK, groups = (blocks + GEMV_GROUP - 1) / GEMV_GROUP;
    for (int b = 0; b < batch; b++) {
        const int8_t *x = xq->qs + (size_t)b * cols;
        for (int g = 0; g < groups; g++) {
            int8_t *dst = out + ((size_t)b * groups + g) * GEMV_GROUP_BYTES;
            for (int k = 0; k < GEMV_GROUP; k++) {
                int block = g * GEMV_GROUP + k;
                if (block < blocks) {
                    memcpy(dst + 16 * k, x + block * TENSOR_QK, 16);
                    memcpy(dst + 64 + 16 * k, x + block * TENSOR_QK + 16, 16);
                } else {
                    memset(dst + 16 * k, 0, 16);
                    memset(dst + 64 + 16 * k, 0, 16);
                }
            }
        }
    }
}

/* 64 bytes from p + offset, or (last group of a row) only those before
 * p + len, zeros after: masked loads never touch the bytes they skip. */
static ALWAYS_INLINE __m512i load_part(const char *p, int offset, int len, const int full) {
    if (full) return _mm512_loadu_si512(p + offset);
    int n = len - offset;
    n = n < 0 ? 0 : n;
    __mmask64 mask = n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
    return _mm512_maskz_loadu_epi8(mask, p + offset);
}

static ALWAYS_INLINE __m512i add_pairs_epi32(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}

static ALWAYS_INLINE __m512i add_pairs_epi64(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

/* The weights and activations of one group, and where to merge scales. */
struct gemv_step {
    __m512i quant_words[2]; /* vpermt2w indices (Q8_0: first and second halves) */
    __m512i scale_words[2]; /* merge indices of the scales of blocks 0,1 and 2,3 */
    __m512i x[GEMV_MAX_COLS][2]; /* laid-out activations: first halves, second halves */
};

/* Row m's block dots for the group (s[c]: 4 partial sums per lane) and its
 * scales merged into words m and 16 + m of sw[0] (blocks 0, 1) and sw[1]. */
static ALWAYS_INLINE void gemv_row(const struct gemv_step *step, const char *p, int len, int m,
                                   __m512i *s, __m512i *sw, const int nc, const int full,
                                   const int q4) {
    __mmask32 lanes = (__mmask32)(0x10001u << m);
    __m512i low, high;
    if (q4) {
        const __m512i nibble = _mm512_set1_epi8(0x0f);
        __m512i a = load_part(p, 0, len, full);
        __m512i q = _mm512_permutex2var_epi16(a, step->quant_words[0], load_part(p, 8, len, full));
        low = _mm512_and_si512(q, nibble);
        high = _mm512_and_si512(_mm512_srli_epi16(q, 4), nibble);
        sw[0] = _mm512_mask_permutex2var_epi16(sw[0], lanes, step->scale_words[0], a);
        sw[1] = _mm512_mask_permutex2var_epi16(sw[1], lanes, step->scale_words[1], a);
    } else {
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        __m512i a = load_part(p, 0, len, full), b = load_part(p, 64, len, full);
        low = _mm512_xor_si512(_mm512_permutex2var_epi16(a, step->quant_words[0], b), flip);
        high = _mm512_xor_si512(_mm512_permutex2var_epi16(load_part(p, 8, len, full),
                                                          step->quant_words[1],
                                                          load_part(p, 72, len, full)),
                                flip);
        sw[0] = _mm512_mask_permutex2var_epi16(sw[0], lanes, step->scale_words[0], a);
        sw[1] = _mm512_mask_permutex2var_epi16(sw[1], lanes, step->scale_words[1], b);
    }
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++)
        s[c] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), low, step->x[c][0]),
                                   high, step->x[c][1]);
}

/* One group of nb blocks (4 unless the row's last) for 16 rows; adds each
 * block's float step to acc[c] in block order. */
static ALWAYS_INLINE void gemv_group(const struct gemv_step *step, const char *const *rows,
                                     const char *next, size_t stride, size_t offset, int nb,
                                     const float *const *xd, const int32_t *const *xbias,
                                     __m512 *acc, const int nc, const int full, const int q4) {
    const int block_bytes = q4 ? (int)sizeof(struct tensor_block_q4_0)
                               : (int)sizeof(struct tensor_block_q8_0);
    int len = nb * block_bytes;
    __m512i v[GEMV_GROUP][GEMV_MAX_COLS];
    __m512i sw[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
    for (int sub = 0; sub < 4; sub++) {
        __m512i s[4][GEMV_MAX_COLS];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            int m = 4 * sub + i;
            /* the next tile's rows, one prefetch per 64 bytes */
            _mm_prefetch(next + m * stride + offset, _MM_HINT_T0);
            _mm_prefetch(next + m * stride + offset + 64, _MM_HINT_T0);
            if (!q4) _mm_prefetch(next + m * stride + offset + 128, _MM_HINT_T0);
            gemv_row(step, rows[m] + offset, len, m, s[i], sw, nc, full, q4);
        }
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++)
            v[sub][c] = add_pairs_epi64(add_pairs_epi32(s[0][c], s[1][c]),
                                        add_pairs_epi32(s[2][c], s[3][c]));
    }
    __m512 d_w[GEMV_GROUP];
    d_w[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(sw[0]));
    d_w[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(sw[0], 1));
    d_w[2] = _mm512_cvtph_ps(_mm512_castsi512_si256(sw[1]));
    d_w[3] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(sw[1], 1));
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++) {
        /* v[sub] lane k holds block k of rows 4sub..4sub+3: transpose the lanes */
        __m512i t0 = _mm512_shuffle_i32x4(v[0][c], v[1][c], _MM_SHUFFLE(1, 0, 1, 0));
        __m512i t1 = _mm512_shuffle_i32x4(v[0][c], v[1][c], _MM_SHUFFLE(3, 2, 3, 2));
        __m512i t2 = _mm512_shuffle_i32x4(v[2][c], v[3][c], _MM_SHUFFLE(1, 0, 1, 0));
        __m512i t3 = _mm512_shuffle_i32x4(v[2][c], v[3][c], _MM_SHUFFLE(3, 2, 3, 2));
        __m512i dot[GEMV_GROUP];
        dot[0] = _mm512_shuffle_i32x4(t0, t2, _MM_SHUFFLE(2, 0, 2, 0));
        dot[1] = _mm512_shuffle_i32x4(t0, t2, _MM_SHUFFLE(3, 1, 3, 1));
        dot[2] = _mm512_shuffle_i32x4(t1, t3, _MM_SHUFFLE(2, 0, 2, 0));
        dot[3] = _mm512_shuffle_i32x4(t1, t3, _MM_SHUFFLE(3, 1, 3, 1));
#pragma GCC unroll 4
        for (int k = 0; k < GEMV_GROUP; k++) {
            if (k >= nb) break;
            __m512i d = _mm512_add_epi32(dot[k], _mm512_set1_epi32(xbias[c][k]));
            __m512 scale = _mm512_mul_ps(d_w[k], _mm512_set1_ps(xd[c][k]));
            __m512 term = _mm512_mul_ps(_mm512_cvtepi32_ps(d), scale);
            acc[c] = _mm512_add_ps(acc[c], term);
        }
    }
}

/* Rows r0 .. r0 + nr - 1 (nr <= 16; rows past nr repeat the last and are not
 * stored) for batch rows b0 .. b0 + nc - 1. */
static ALWAYS_INLINE void gemv_tile(const struct tensor_matmul_job *job, const int8_t *layout,
                                    int r0, int nr, int b0, const int nc, const int q4) {
    const struct tensor_matrix *w = job->w;
    const int blocks = w->cols / TENSOR_QK, groups = (blocks + GEMV_GROUP - 1) / GEMV_GROUP;
    const size_t group_bytes = GEMV_GROUP * (q4 ? sizeof(struct tensor_block_q4_0)
                                                : sizeof(struct tensor_block_q8_0));
    const char *rows[GEMV_ROWS];
    for (int m = 0; m < GEMV_ROWS; m++)
        rows[m] = (const char *)w->data + (size_t)(r0 + (m < nr ? m : nr - 1)) * w->row_stride;
    const char *next = rows[0] + GEMV_ROWS * w->row_stride;
    struct gemv_step step;
    step.quant_words[0] = _mm512_loadu_si512(q4 ? q4_quant_words : q8_low_words);
    step.quant_words[1] = _mm512_loadu_si512(q8_high_words);
    /* scale words: Q4_0 bytes 0, 18, 36, 54 of the first load; Q8_0 bytes 0,
     * 34 of the first load and 34, 51 words into the second (bytes 68, 102) */
    step.scale_words[0] = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(32),
                                                  _mm512_set1_epi16(q4 ? 32 + 9 : 32 + 17));
    step.scale_words[1] =
        _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(q4 ? 32 + 18 : 32 + 2),
                                _mm512_set1_epi16(q4 ? 32 + 27 : 32 + 19));
    __m512 acc[GEMV_MAX_COLS];
    const float *xd[GEMV_MAX_COLS];
    const int32_t *xbias[GEMV_MAX_COLS];
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++) {
        acc[c] = _mm512_setzero_ps();
        xd[c] = job->xq->d + (size_t)(b0 + c) * blocks;
        xbias[c] = job->xq->bias + (size_t)(b0 + c) * blocks;
    }
    int g = 0;
    for (; g < blocks / GEMV_GROUP; g++) {
        const float *gd[GEMV_MAX_COLS];
        const int32_t *gbias[GEMV_MAX_COLS];
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) {
            const int8_t *x = layout + ((size_t)(b0 + c) * groups + g) * GEMV_GROUP_BYTES;
            step.x[c][0] = _mm512_loadu_si512(x);
            step.x[c][1] = _mm512_loadu_si512(x + 64);
            gd[c] = xd[c] + g * GEMV_GROUP;
            gbias[c] = xbias[c] + g * GEMV_GROUP;
        }
        gemv_group(&step, rows, next, w->row_stride, g * group_bytes, GEMV_GROUP, gd, gbias, acc,
                   nc, 1, q4);
    }
    if (g < groups) {
        const float *gd[GEMV_MAX_COLS];
        const int32_t *gbias[GEMV_MAX_COLS];
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) {
            const int8_t *x = layout + ((size_t)(b0 + c) * groups + g) * GEMV_GROUP_BYTES;
            step.x[c][0] = _mm512_loadu_si512(x);
            step.x[c][1] = _mm512_loadu_si512(x + 64);
            gd[c] = xd[c] + g * GEMV_GROUP;
            gbias[c] = xbias[c] + g * GEMV_GROUP;
        }
        gemv_group(&step, rows, next, w->row_stride, g * group_bytes, blocks - g * GEMV_GROUP, gd,
                   gbias, acc, nc, 0, q4);
    }
    __mmask16 mask = (__mmask16)((1u << nr) - 1u);
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(job->out + (size_t)(b0 + c) * w->rows + r0, mask, acc[c]);
}

static ALWAYS_INLINE void gemv(const struct tensor_matmul_job *job, int row_begin, int row_end,
                               void *scratch, const int q4) {
    int8_t *layout = scratch;
    gemv_layout_x(layout, job->xq, job->batch, job->w->cols);
    for (int r = row_begin; r < row_end; r += GEMV_ROWS) {
        int nr = row_end - r < GEMV_ROWS ? row_end - r : GEMV_ROWS;
        int b = 0;
        for (; b + 2 <= job->batch; b += 2) gemv_tile(job, layout, r, nr, b, 2, q4);
        if (b < job->batch) gemv_tile(job, layout, r, nr, b, 1, q4);
    }
}

void tensor_gemv_q8_0_avx512(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch) {
    gemv(job, row_begin, row_end, scratch, 0);
}

void tensor_gemv_q4_0_avx512(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch) {
    gemv(job, row_begin, row_end, scratch, 1);
}

size_t tensor_gemv_scratch_avx512(int cols, int batch) {
    int groups = (cols / TENSOR_QK + GEMV_GROUP - 1) / GEMV_GROUP;
    return (size_t)batch * (size_t)groups * GEMV_GROUP_BYTES;
}
