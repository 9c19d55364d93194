/* matmul_gemv_avx512.c -- AVX-512 Q4_0 GEMV: Q4_0 weights times one or two
 * activation rows (token generation).
 *
 * Generation streams every weight once per token, so the work per weight
 * byte must stay below what memory delivers (the 16-row kernel of
 * matmul_avx512.c, which still serves Q8_0, spends a 128-bit load and an
 * insert per block and row plus a gather per block). This kernel takes a
 * tile of 16 rows and walks it in groups of 4 consecutive blocks (72 bytes
 * of a row):
 *  - per row, two overlapping 64-byte loads and one word permutation
 *    (vpermt2w) put block k's 16 quant bytes in 128-bit lane k; masking
 *    splits low nibbles (elements 0..15) from high nibbles (16..31);
 *  - the activations were laid out once per call to match: per group, the
 *    first 16 quants of its 4 blocks, then the last 16 (gemv_layout_x);
 *  - vpdpbusd (unsigned nibbles x signed activations; the activation bias
 *    -8 * sum(x) of matmul.c restores the sign) gives 4 partial sums per
 *    block and row; 4 rows reduce to one vector (lane k = block k, rows in
 *    order), and a 4x4 transpose of 128-bit lanes makes one vector of 16
 *    rows per block;
 *  - the 16 rows' fp16 scales are picked out of the same loads by a tree of
 *    permutations.
 * Then the float step of tensor_internal.h runs block after block on 16
 * rows at once: acc = acc + (float)dot * (d_w * d_x), the scalar sequence,
 * so results match the scalar kernel bit for bit. */
#include "x86.h"

#include <immintrin.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

#define GEMV_ROWS        16  /* rows per tile: one float vector of results */
#define GEMV_GROUP       4   /* blocks per step: one per 128-bit lane */
#define GEMV_GROUP_BYTES 128 /* laid-out activation bytes per group */
#define GEMV_MAX_COLS    2   /* activation rows sharing one pass over the weights */
#define BLOCK_BYTES      ((int)sizeof(struct tensor_block_q4_0))

/* Prefetches of the next tile go to L2: into L1 they hold up the loads in
 * flight. */
#define GEMV_PREFETCH(p) _mm_prefetch((p), _MM_HINT_T1)

/* Word indices (vpermt2w) of block k's quants in lane k, from a group's
 * bytes [0, 64) and [8, 72). */
static const int16_t quant_words[32] = {1,  2,  3,  4,  5,  6,  7,  8,  10, 11, 12,
                                        13, 14, 15, 16, 17, 19, 20, 21, 22, 23, 24,
                                        25, 26, 56, 57, 58, 59, 60, 61, 62, 63};

/* The scales (words 0, 9, 18, 27 of a row's first load) by a tree of
 * vpermt2w: two rows' 4 scales side by side, then 4 rows (word 4 * row +
 * block), 8 rows, and finally word 16 * block + row for blocks 0,1 / 2,3. */
static const int16_t pair_words[32] = {0, 9, 18, 27, 32, 41, 50, 59};
static const int16_t quad_words[32] = {0, 1, 2, 3, 4, 5, 6, 7, 32, 33, 34, 35, 36, 37, 38, 39};
static const int16_t octet_words[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                        11, 12, 13, 14, 15, 32, 33, 34, 35, 36, 37,
                                        38, 39, 40, 41, 42, 43, 44, 45, 46, 47};
static const int16_t final_words[2][32] = {
    {0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60,
     1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53, 57, 61},
    {2, 6, 10, 14, 18, 22, 26, 30, 34, 38, 42, 46, 50, 54, 58, 62,
     3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47, 51, 55, 59, 63}};

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

/* The permutation indices and the activations of one group. */
struct gemv_step {
    __m512i quant_words;         /* quant_words above */
    __m512i tree_words[3];       /* pair_words, quad_words, octet_words */
    __m512i final_words[2];      /* final_words above */
    __m512i x[GEMV_MAX_COLS][2]; /* laid-out activations: first halves, second halves */
};

/* One row's block dots for the group (s[c]: 4 partial sums per lane); its
 * first load (holding the scales) is returned. */
static ALWAYS_INLINE __m512i gemv_row(const struct gemv_step *step, const char *p, int len,
                                      __m512i *s, const int nc, const int full) {
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    __m512i a = load_part(p, 0, len, full);
    __m512i q = _mm512_permutex2var_epi16(a, step->quant_words, load_part(p, 8, len, full));
    __m512i low = _mm512_and_si512(q, nibble);
    __m512i high = _mm512_and_si512(_mm512_srli_epi16(q, 4), nibble);
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++)
        s[c] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), low, step->x[c][0]),
                                   high, step->x[c][1]);
    return a;
}

/* One group of nb blocks (4 unless the row's last) for 16 rows from base;
 * adds each block's float step to acc[c] in block order. */
static ALWAYS_INLINE void gemv_group(const struct gemv_step *step, const char *base,
                                     const char *next, size_t stride, int nr, int nb,
                                     const float *const *xd, const int32_t *const *xbias,
                                     __m512 *acc, const int nc, const int full_rows,
                                     const int full) {
    int len = nb * BLOCK_BYTES;
    __m512i v[4][GEMV_MAX_COLS]; /* v[sub]: lane k = block k of rows 4sub .. 4sub+3 */
    __m512i pairs[2], quads[2], octets[2];
#pragma GCC unroll 4
    for (int sub = 0; sub < 4; sub++) {
        __m512i s[4][GEMV_MAX_COLS], first[2];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            int m = 4 * sub + i;
            /* the next tile's rows, one prefetch per 64 bytes */
            GEMV_PREFETCH(next + m * stride);
            GEMV_PREFETCH(next + m * stride + 64);
            /* a partial tile repeats its last row */
            int row = full_rows || m < nr ? m : nr - 1;
            first[i % 2] = gemv_row(step, base + (size_t)row * stride, len, s[i], nc, full);
            if (i % 2 == 1)
                pairs[i / 2] = _mm512_permutex2var_epi16(first[0], step->tree_words[0], first[1]);
        }
        quads[sub % 2] = _mm512_permutex2var_epi16(pairs[0], step->tree_words[1], pairs[1]);
        if (sub % 2 == 1)
            octets[sub / 2] = _mm512_permutex2var_epi16(quads[0], step->tree_words[2], quads[1]);
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++)
            v[sub][c] = add_pairs_epi64(add_pairs_epi32(s[0][c], s[1][c]),
                                        add_pairs_epi32(s[2][c], s[3][c]));
    }
    __m512i scales01 = _mm512_permutex2var_epi16(octets[0], step->final_words[0], octets[1]);
    __m512i scales23 = _mm512_permutex2var_epi16(octets[0], step->final_words[1], octets[1]);
    __m512 d_w[GEMV_GROUP];
    d_w[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(scales01));
    d_w[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(scales01, 1));
    d_w[2] = _mm512_cvtph_ps(_mm512_castsi512_si256(scales23));
    d_w[3] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(scales23, 1));
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++) {
        /* transpose the 128-bit lanes: dot[k] = block k of rows 0 .. 15 */
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

/* Rows r0 .. r0 + nr - 1 (nr <= 16; full_rows: nr == 16) for batch rows
 * b0 .. b0 + nc - 1. */
static ALWAYS_INLINE void gemv_tile(const struct tensor_matmul_job *job, const int8_t *layout,
                                    int r0, int nr, int b0, const int nc, const int full_rows) {
    const struct tensor_matrix *w = job->w;
    const int blocks = w->cols / TENSOR_QK, groups = (blocks + GEMV_GROUP - 1) / GEMV_GROUP;
    const char *base = (const char *)w->data + (size_t)r0 * w->row_stride;
    const char *next = base + GEMV_ROWS * w->row_stride;
    struct gemv_step step;
    step.quant_words = _mm512_loadu_si512(quant_words);
    step.tree_words[0] = _mm512_loadu_si512(pair_words);
    step.tree_words[1] = _mm512_loadu_si512(quad_words);
    step.tree_words[2] = _mm512_loadu_si512(octet_words);
    step.final_words[0] = _mm512_loadu_si512(final_words[0]);
    step.final_words[1] = _mm512_loadu_si512(final_words[1]);
    __m512 acc[GEMV_MAX_COLS];
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++) acc[c] = _mm512_setzero_ps();
    for (int g = 0; g < groups; g++) {
        const float *gd[GEMV_MAX_COLS];
        const int32_t *gbias[GEMV_MAX_COLS];
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) {
            const int8_t *x = layout + ((size_t)(b0 + c) * groups + g) * GEMV_GROUP_BYTES;
            step.x[c][0] = _mm512_loadu_si512(x);
            step.x[c][1] = _mm512_loadu_si512(x + 64);
            gd[c] = job->xq->d + (size_t)(b0 + c) * blocks + g * GEMV_GROUP;
            gbias[c] = job->xq->bias + (size_t)(b0 + c) * blocks + g * GEMV_GROUP;
        }
        size_t offset = (size_t)g * GEMV_GROUP * BLOCK_BYTES;
        int nb = blocks - g * GEMV_GROUP;
        if (nb >= GEMV_GROUP)
            gemv_group(&step, base + offset, next + offset, w->row_stride, nr, GEMV_GROUP, gd,
                       gbias, acc, nc, full_rows, 1);
        else
            gemv_group(&step, base + offset, next + offset, w->row_stride, nr, nb, gd, gbias, acc,
                       nc, full_rows, 0);
    }
    __mmask16 mask = (__mmask16)((1u << nr) - 1u);
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(job->out + (size_t)(b0 + c) * w->rows + r0, mask, acc[c]);
}

static ALWAYS_INLINE void gemv_columns(const struct tensor_matmul_job *job, const int8_t *layout,
                                       int r, int nr, const int full_rows) {
    int b = 0;
    for (; b + 2 <= job->batch; b += 2) gemv_tile(job, layout, r, nr, b, 2, full_rows);
    if (b < job->batch) gemv_tile(job, layout, r, nr, b, 1, full_rows);
}

void tensor_gemv_q4_0_avx512(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch) {
    int8_t *layout = scratch;
    gemv_layout_x(layout, job->xq, job->batch, job->w->cols);
    for (int r = row_begin; r < row_end; r += GEMV_ROWS) {
        if (row_end - r >= GEMV_ROWS)
            gemv_columns(job, layout, r, GEMV_ROWS, 1);
        else
            gemv_columns(job, layout, r, row_end - r, 0);
    }
}

size_t tensor_gemv_scratch_avx512(int cols, int batch) {
    int groups = (cols / TENSOR_QK + GEMV_GROUP - 1) / GEMV_GROUP;
    return (size_t)batch * (size_t)groups * GEMV_GROUP_BYTES;
}
