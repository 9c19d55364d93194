/* matmul_avx512.c -- AVX-512 (F, BW, VL, DQ, VNNI) matmul kernels.
 *
 * Float weights (F32, F16) and the activation quantizer take the AVX2
 * kernels (the AVX-512 table leaves them out): their 16-lane sums would
 * add in another order than the canonical 8 lanes, and so give other bits.
 *
 * Quantized weights (Q8_0, Q4_0) against Q8_0 activations: the exact
 * integer dot per 32-block comes from vpdpbusd (unsigned x signed bytes):
 * weights are made unsigned (Q8_0: w + 128; Q4_0: the raw nibble) and the
 * activation block's bias -offset * sum(x) (matmul.c) restores the signed
 * sum. The float step per block is the scalar one, vectorized over 16 rows.
 * Three shapes, same bits:
 *  - Q8_0 GEMV (small batch): rows are read as stored, one block of 16 rows
 *    at a time, and the per-row integer sums are reduced across lanes;
 *  - Q4_0 GEMV: matmul_gemv_avx512.c, 4 blocks of a row per register;
 *  - GEMM: a panel of 16 rows is repacked once per batch block (row loads
 *    transposed in registers, no gathers) so that one 64-byte load holds 4
 *    consecutive weights of each of the 16 rows; each vpdpbusd then adds 4
 *    products into 16 row lanes for one batch column (the activation's 4
 *    bytes broadcast), with no reduction at all. A micro-kernel keeps 8
 *    batch columns in registers, so each weight load serves 8 vpdpbusd.
 *    Its limit on Zen 4 is the float step, whose two multiplies share the
 *    vpdpbusd pipes (about 340 GFLOP/s a core with everything in L1). */
#include "panel_avx512.h"

#include <immintrin.h>
#include <limits.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* ---- float weights ---- */

/* Float tile shapes: GEMV uses 8 rows x 1 column, GEMM 4 rows x 6 columns. */
#define GEMV_ROWS 8
#define GEMM_ROWS 4
#define GEMM_COLS 6
/* Float batch block: activation rows kept in L2 while a weight tile is reused. */
#define FLOAT_BLOCK_BYTES (384 * 1024)

/* ---- quantized weights ---- */

#define Q_ROWS           16  /* rows per vector of results */
#define Q_GEMM_MIN_BATCH 4   /* smaller batches use the GEMV shape */
#define Q_GEMV_COLS      3   /* batch columns a GEMV pass shares weight loads across */
#define Q_GEMM_COLS      8   /* batch columns per GEMM micro-kernel */
#define Q_BATCH_BLOCK    256 /* batch columns per repacked panel use */
#define Q_PANEL_QUANTS   512 /* panel bytes per block: 8 groups x 16 rows x 4 */
#define Q_PANEL_BLOCK    (Q_PANEL_QUANTS + Q_ROWS * (int)sizeof(float)) /* + 16 scales */

/* The fp16 scales at byte offset within 16 rows (a gather of 32-bit words
 * whose low half is the scale). */
static ALWAYS_INLINE __m512 gather_scales(const char *row0, __m512i row_offsets, size_t offset) {
    __m512i words = _mm512_i32gather_epi32(row_offsets, row0 + offset, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
}

static ALWAYS_INLINE __m512i add_pairs_epi32(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}

static ALWAYS_INLINE __m512i add_pairs_epi64(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

/* Q8_0 block j of 16 rows against one activation block: s[p] holds the
 * 8-lane partial dots of rows (p, p+4) for p < 4 and (p+4, p+8) for p >= 4,
 * an order that makes the reduction below come out in row order. */
static ALWAYS_INLINE __m512i q8_0_dots(const char *const *rows, size_t offset, __m512i x2) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i s[8];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        int a = p < 4 ? p : p + 4, b = a + 4;
        __m256i low = _mm256_loadu_si256((const __m256i *)(rows[a] + offset));
        __m256i high = _mm256_loadu_si256((const __m256i *)(rows[b] + offset));
        __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
        s[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(both, flip), x2);
    }
    __m512i u0 = add_pairs_epi64(add_pairs_epi32(s[0], s[1]), add_pairs_epi32(s[2], s[3]));
    __m512i u1 = add_pairs_epi64(add_pairs_epi32(s[4], s[5]), add_pairs_epi32(s[6], s[7]));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Pointers to 16 rows from r0 (rows past nr repeat the last one) and their
 * byte offsets from row r0 for gathers. */
static ALWAYS_INLINE __m512i row_pointers(const struct tensor_matrix *w, int r0, int nr,
                                          const char **rows) {
    int offsets[Q_ROWS];
    for (int m = 0; m < Q_ROWS; m++) {
        int row = m < nr ? m : nr - 1;
        offsets[m] = (int)((size_t)row * w->row_stride);
        rows[m] = (const char *)w->data + (size_t)(r0 + row) * w->row_stride;
    }
    return _mm512_loadu_si512(offsets);
}

/* Q8_0 GEMV shape: 16 rows from r0 for batch columns b0 .. b0 + nc - 1. */
static ALWAYS_INLINE void quant_gemv_tile(const struct tensor_matmul_job *job, int r0, int nr,
                                          int b0, const int nc) {
    const struct tensor_matrix *w = job->w;
    const struct tensor_xq *xq = job->xq;
    const int blocks = w->cols / TENSOR_QK;
    const size_t block_bytes = sizeof(struct tensor_block_q8_0);
    const char *rows[Q_ROWS];
    __m512i offsets = row_pointers(w, r0, nr, rows);
    __m512 acc[Q_GEMV_COLS];
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) acc[c] = _mm512_setzero_ps();
    const char *next = rows[0] + (size_t)Q_ROWS * w->row_stride;
    for (int j = 0; j < blocks; j++) {
        size_t offset = (size_t)j * block_bytes;
        /* the next tile's rows, one prefetch per row and block */
        for (int m = 0; m < Q_ROWS; m++)
            _mm_prefetch(next + m * w->row_stride + offset, _MM_HINT_T1);
        __m512 d_w = gather_scales(rows[0], offsets, offset);
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            size_t xb = (size_t)(b0 + c) * blocks + j;
            const int8_t *x = xq->qs + xb * TENSOR_QK;
            __m512i x2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x));
            __m512i dot = q8_0_dots(rows, offset + 2, x2);
            dot = _mm512_add_epi32(dot, _mm512_set1_epi32(xq->bias[xb]));
            acc[c] = panel_add_block(acc[c], dot, d_w, xq->d[xb]);
        }
    }
    __mmask16 mask = (__mmask16)((1u << nr) - 1u);
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(job->out + (size_t)(b0 + c) * w->rows + r0, mask, acc[c]);
}

static ALWAYS_INLINE void quant_gemv(const struct tensor_matmul_job *job, int row_begin,
                                     int row_end) {
    for (int r = row_begin; r < row_end; r += Q_ROWS) {
        int nr = row_end - r < Q_ROWS ? row_end - r : Q_ROWS;
        for (int b = 0; b < job->batch; b += Q_GEMV_COLS) {
            switch (job->batch - b) {
            case 1:
                quant_gemv_tile(job, r, nr, b, 1);
                break;
            case 2:
                quant_gemv_tile(job, r, nr, b, 2);
                break;
            default:
                quant_gemv_tile(job, r, nr, b, Q_GEMV_COLS);
                break;
            }
        }
    }
}

/* The 16 rows' fp16 scales of block j as floats; scalar loads are cheaper
 * than a gather and the panel is reused across many batch columns. */
static ALWAYS_INLINE __m512 load_scales(const char *const *rows, size_t block) {
    uint16_t halves[Q_ROWS];
#pragma GCC unroll 16
    for (int m = 0; m < Q_ROWS; m++) memcpy(&halves[m], rows[m] + block, sizeof(uint16_t));
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)halves));
}

/* Q8_0 block at byte offset block of 16 rows, transposed into out[g] =
 * dword g (quants 4g..4g+3) of rows 0..15. z[m] holds rows m and m + 8 in
 * its 256-bit halves; three rounds of interleaves (dwords, qwords, then
 * qword pairs across two vectors) transpose both 8 x 8 halves at once. */
static ALWAYS_INLINE void transpose_q8_0(const char *const *rows, size_t block, __m512i *out) {
    const __m512i pair_low = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i pair_high = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    __m512i z[8], a[8], c[8];
#pragma GCC unroll 8
    for (int m = 0; m < 8; m++) {
        __m256i low = _mm256_loadu_si256((const __m256i *)(rows[m] + block + 2));
        __m256i high = _mm256_loadu_si256((const __m256i *)(rows[m + 8] + block + 2));
        z[m] = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
    }
    /* a[2k] = dwords 0,1 | 4,5 of rows 2k, 2k+1 interleaved; a[2k+1]: 2,3 | 6,7 */
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        a[2 * k] = _mm512_unpacklo_epi32(z[2 * k], z[2 * k + 1]);
        a[2 * k + 1] = _mm512_unpackhi_epi32(z[2 * k], z[2 * k + 1]);
    }
    /* c[k] (k < 4) = dword k | k + 4 of rows 0..3, c[k + 4]: of rows 4..7 */
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        c[4 * h + 0] = _mm512_unpacklo_epi64(a[4 * h + 0], a[4 * h + 2]);
        c[4 * h + 1] = _mm512_unpackhi_epi64(a[4 * h + 0], a[4 * h + 2]);
        c[4 * h + 2] = _mm512_unpacklo_epi64(a[4 * h + 1], a[4 * h + 3]);
        c[4 * h + 3] = _mm512_unpackhi_epi64(a[4 * h + 1], a[4 * h + 3]);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        out[k] = _mm512_permutex2var_epi64(c[k], pair_low, c[k + 4]);
        out[k + 4] = _mm512_permutex2var_epi64(c[k], pair_high, c[k + 4]);
    }
}

/* Q4_0 block at byte offset block of 16 rows: out[g] = packed dword g (low
 * nibbles: quants 4g..4g+3, high: 16+4g..) of rows 0..15. z[k] holds rows
 * k, k+4, k+8, k+12 in its 128-bit lanes; two rounds of interleaves
 * transpose the four 4 x 4 lanes. */
static ALWAYS_INLINE void transpose_q4_0(const char *const *rows, size_t block, __m512i *out) {
    __m512i z[4], a[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(rows[k] + block + 2)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rows[k + 4] + block + 2)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rows[k + 8] + block + 2)), 2);
        z[k] =
            _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rows[k + 12] + block + 2)), 3);
    }
    a[0] = _mm512_unpacklo_epi32(z[0], z[1]);
    a[1] = _mm512_unpackhi_epi32(z[0], z[1]);
    a[2] = _mm512_unpacklo_epi32(z[2], z[3]);
    a[3] = _mm512_unpackhi_epi32(z[2], z[3]);
    out[0] = _mm512_unpacklo_epi64(a[0], a[2]);
    out[1] = _mm512_unpackhi_epi64(a[0], a[2]);
    out[2] = _mm512_unpacklo_epi64(a[1], a[3]);
    out[3] = _mm512_unpackhi_epi64(a[1], a[3]);
}

/* Repacks 16 rows from r0 into panel: per block, 8 groups of 64 bytes (group
 * g = weights 4g..4g+3 of rows 0..15, unsigned as vpdpbusd wants them), then
 * the 16 row scales as floats. The next panel's rows are fetched into L2
 * meanwhile: they arrive while the micro-kernels use this one. */
static ALWAYS_INLINE void repack_panel(const struct tensor_matrix *w, int r0, int nr,
                                       int prefetch_rows, char *panel, const int q4) {
    const int blocks = w->cols / TENSOR_QK;
    const size_t block_bytes =
        q4 ? sizeof(struct tensor_block_q4_0) : sizeof(struct tensor_block_q8_0);
    const char *rows[Q_ROWS];
    row_pointers(w, r0, nr, rows);
    const char *next = (const char *)w->data + (size_t)(r0 + Q_ROWS) * w->row_stride;
    size_t fetched = 0; /* bytes of each next row prefetched so far */
    for (int j = 0; j < blocks; j++) {
        char *out = panel + (size_t)j * Q_PANEL_BLOCK;
        size_t block = (size_t)j * block_bytes;
        for (; fetched < block + block_bytes; fetched += 64)
            for (int m = 0; m < prefetch_rows; m++)
                _mm_prefetch(next + (size_t)m * w->row_stride + fetched, _MM_HINT_T1);
        __m512i quants[8];
        if (q4) {
            const __m512i nibble = _mm512_set1_epi8(0x0f);
            transpose_q4_0(rows, block, quants);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                _mm512_store_si512(out + 64 * g, _mm512_and_si512(quants[g], nibble));
                _mm512_store_si512(out + 64 * (g + 4),
                                   _mm512_and_si512(_mm512_srli_epi16(quants[g], 4), nibble));
            }
        } else {
            const __m512i flip = _mm512_set1_epi8((char)0x80);
            transpose_q8_0(rows, block, quants);
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++)
                _mm512_store_si512(out + 64 * g, _mm512_xor_si512(quants[g], flip));
        }
        _mm512_store_ps(out + Q_PANEL_QUANTS, load_scales(rows, block));
    }
}

/* GEMM micro-kernel: the 16 panel rows from r0 for batch columns b0.. b0+nc-1. */
static ALWAYS_INLINE void quant_gemm_tile(const struct tensor_matmul_job *job, const char *panel,
                                          int r0, int nr, int b0, const int nc) {
    const struct tensor_matrix *w = job->w;
    const struct tensor_xq *xq = job->xq;
    const int blocks = w->cols / TENSOR_QK;
    __m512 acc[Q_GEMM_COLS];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) acc[c] = _mm512_setzero_ps();
    for (int j = 0; j < blocks; j++) {
        const char *pj = panel + (size_t)j * Q_PANEL_BLOCK;
        size_t first = (size_t)b0 * blocks + j; /* column b0's block j, by rows */
        panel_block(acc, pj, _mm512_load_ps(pj + Q_PANEL_QUANTS), xq->qs + first * TENSOR_QK,
                    (size_t)w->cols, xq->d + first, xq->bias + first, blocks, nc);
    }
    __mmask16 mask = (__mmask16)((1u << nr) - 1u);
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(job->out + (size_t)(b0 + c) * w->rows + r0, mask, acc[c]);
}

static ALWAYS_INLINE void quant_gemm_columns(const struct tensor_matmul_job *job, const char *panel,
                                             int r0, int nr, int b0, int nc) {
    switch (nc) {
    case 1:
        quant_gemm_tile(job, panel, r0, nr, b0, 1);
        break;
    case 2:
        quant_gemm_tile(job, panel, r0, nr, b0, 2);
        break;
    case 3:
        quant_gemm_tile(job, panel, r0, nr, b0, 3);
        break;
    case 4:
        quant_gemm_tile(job, panel, r0, nr, b0, 4);
        break;
    case 5:
        quant_gemm_tile(job, panel, r0, nr, b0, 5);
        break;
    case 6:
        quant_gemm_tile(job, panel, r0, nr, b0, 6);
        break;
    case 7:
        quant_gemm_tile(job, panel, r0, nr, b0, 7);
        break;
    default:
        quant_gemm_tile(job, panel, r0, nr, b0, Q_GEMM_COLS);
        break;
    }
}

static ALWAYS_INLINE void quant_gemm(const struct tensor_matmul_job *job, int row_begin,
                                     int row_end, char *panel, const int q4) {
    for (int b0 = 0; b0 < job->batch; b0 += Q_BATCH_BLOCK) {
        int b_end = b0 + Q_BATCH_BLOCK < job->batch ? b0 + Q_BATCH_BLOCK : job->batch;
        for (int r = row_begin; r < row_end; r += Q_ROWS) {
            int nr = row_end - r < Q_ROWS ? row_end - r : Q_ROWS;
            int ahead = row_end - (r + Q_ROWS) < Q_ROWS ? row_end - (r + Q_ROWS) : Q_ROWS;
            repack_panel(job->w, r, nr, ahead > 0 ? ahead : 0, panel, q4);
            for (int b = b0; b < b_end; b += Q_GEMM_COLS) {
                int nc = b_end - b < Q_GEMM_COLS ? b_end - b : Q_GEMM_COLS;
                quant_gemm_columns(job, panel, r, nr, b, nc);
            }
        }
    }
}

/* Row offsets for the gathers must fit in 32 bits. */
static int strides_fit_gathers(const struct tensor_matrix *w) {
    return w->row_stride <= (size_t)INT_MAX / Q_ROWS;
}

void tensor_matmul_q8_0_avx512(const struct tensor_matmul_job *job, int row_begin, int row_end,
                               void *scratch) {
    if (!strides_fit_gathers(job->w))
        tensor_matmul_q8_0_scalar(job, row_begin, row_end, scratch);
    else if (job->batch < Q_GEMM_MIN_BATCH)
        quant_gemv(job, row_begin, row_end);
    else
        quant_gemm(job, row_begin, row_end, scratch, 0);
}

void tensor_matmul_q4_0_avx512(const struct tensor_matmul_job *job, int row_begin, int row_end,
                               void *scratch) {
    if (!strides_fit_gathers(job->w))
        tensor_matmul_q4_0_scalar(job, row_begin, row_end, scratch);
    else if (job->batch < Q_GEMM_MIN_BATCH)
        tensor_gemv_q4_0_avx512(job, row_begin, row_end, scratch);
    else
        quant_gemm(job, row_begin, row_end, scratch, 1);
}

size_t tensor_matmul_scratch_avx512(enum tensor_type type, int cols, int batch) {
    if ((type == TENSOR_Q8_0 || type == TENSOR_Q4_0) && batch >= Q_GEMM_MIN_BATCH)
        return (size_t)(cols / TENSOR_QK) * Q_PANEL_BLOCK;
    if (type == TENSOR_Q4_0) return tensor_gemv_scratch_avx512(cols, batch);
    return 0;
}

/* ---- activation quantization ---- */
