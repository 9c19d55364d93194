/* matmul_panels_avx2.c -- the AVX2 kernels for Q8_0 and Q4_0 weights in
 * panel layout (tensor.h), at every batch size.
 *
 * The weights are packed once at load, so a batched product reads them as
 * they are used instead of gathering 8-row panels on every call (the row
 * kernels in matmul_avx2.c). A tile is one panel's 16 rows and up to 8
 * batch columns (one activation group); its block step (panel_avx2.h for
 * Q8_0, q4_0_half here) loads each weight vector once for all of them. The
 * float step per block is the scalar one, vectorized over the rows, so the
 * results have the bits of the scalar panel kernels and of the row-layout
 * kernels (tensor_internal.h). */
#include "panel_avx2.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

#define TILE_COLUMNS PANEL_AVX2_COLUMNS
_Static_assert(TILE_COLUMNS == TENSOR_XQ_GROUP, "a tile reads one group of activations");

/* Block j of the panel at panel (quants of quant_bytes a block, and every
 * other block the line holding two blocks' scales) into L2. */
static ALWAYS_INLINE void prefetch_block(const char *panel, size_t scales_offset, int j,
                                         const size_t quant_bytes) {
    const char *quants = panel + (size_t)j * quant_bytes;
#pragma GCC unroll 8
    for (size_t line = 0; line < quant_bytes; line += 64) _mm_prefetch(quants + line, _MM_HINT_T1);
    if (j % 2 == 0)
        _mm_prefetch(panel + scales_offset + (size_t)j * TENSOR_PANEL_SCALES, _MM_HINT_T1);
}

/* acc[2c + h] += half h (8 rows) of one Q4_0 block for batch columns
 * c < nc, as panel_half_avx2 does for Q8_0. The nibbles are unsigned, so
 * vpmaddubsw takes them as they are and the block's bias (-8 times the
 * sum of the activation's quants, tensor_xq) makes the product signed;
 * a pair sum is at most 2 * 15 * 127, so the 8 of a row's 32 products add
 * up in 16 bits exactly, and one vpmaddwd a column and block widens them. */
static ALWAYS_INLINE void q4_0_half(__m256 *acc, const char *quants, const char *scales, int h,
                                    const int8_t *x, const float *d, const int32_t *bias,
                                    const int nc) {
    const __m256i nibble = _mm256_set1_epi8(0x0f);
    __m256i pairs[TILE_COLUMNS];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) pairs[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        __m256i bytes = _mm256_load_si256((const __m256i *)(quants + 64 * g + 32 * h));
        __m256i low = _mm256_and_si256(bytes, nibble);
        __m256i high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            int32_t x_low, x_high;
            memcpy(&x_low, x + (size_t)c * TENSOR_QK + 4 * g, sizeof(x_low));
            memcpy(&x_high, x + (size_t)c * TENSOR_QK + TENSOR_QK / 2 + 4 * g, sizeof(x_high));
            pairs[c] =
                _mm256_add_epi16(pairs[c], _mm256_maddubs_epi16(low, _mm256_set1_epi32(x_low)));
            pairs[c] =
                _mm256_add_epi16(pairs[c], _mm256_maddubs_epi16(high, _mm256_set1_epi32(x_high)));
            __asm__("" : "+x"(pairs[c])); /* in order, as panel_half_avx2 adds */
        }
    }
    __m256 d_w = panel_scales_avx2(scales, h);
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(pairs[c], _mm256_set1_epi16(1)),
                                       _mm256_set1_epi32(bias[c]));
        acc[2 * c + h] = panel_add_block_avx2(acc[2 * c + h], dot, d_w, d[c]);
    }
}

/* Rows r0 .. r0 + nr - 1 of batch column b from 8-row vectors lo, hi. */
static ALWAYS_INLINE void store_rows(float *out, int nr, __m256 lo, __m256 hi) {
    if (nr == TENSOR_PANEL_ROWS) {
        _mm256_storeu_ps(out, lo);
        _mm256_storeu_ps(out + 8, hi);
        return;
    }
    float lanes[TENSOR_PANEL_ROWS];
    _mm256_storeu_ps(lanes, lo);
    _mm256_storeu_ps(lanes + 8, hi);
    memcpy(out, lanes, sizeof(float) * (size_t)nr);
}

/* The 16 rows of the panel holding row r0 (nr of them real) for batch
 * columns b0 .. b0 + nc - 1. With next set, block j of the panel at next is
 * fetched while block j of this one is used, so the next panel arrives in
 * the time this one takes, whatever the batch. */
static ALWAYS_INLINE void panel_tile(const struct tensor_matmul_job *job, int r0, int nr, int b0,
                                     const int nc, const char *next, const int q4) {
    const struct tensor_matrix *w = job->w;
    const struct tensor_xq *xq = job->xq;
    const int blocks = w->cols / TENSOR_QK;
    const size_t quant_bytes = q4 ? TENSOR_PANEL_QUANTS_Q4_0 : TENSOR_PANEL_QUANTS;
    const char *panel = (const char *)w->data + (size_t)(r0 / TENSOR_PANEL_ROWS) * w->row_stride;
    __m256 acc[2 * TILE_COLUMNS];
#pragma GCC unroll 16
    for (int i = 0; i < 2 * nc; i++) acc[i] = _mm256_setzero_ps();
    for (int j = 0; j < blocks; j++) {
        size_t x_block = tensor_xq_number(job->batch, blocks, b0, j); /* column b0's block j */
        const char *quants = panel + (size_t)j * quant_bytes;
        const char *scales = panel + w->scales_offset + (size_t)j * TENSOR_PANEL_SCALES;
        const int8_t *x = xq->qs + x_block * TENSOR_QK;
        if (next) prefetch_block(next, w->scales_offset, j, quant_bytes);
        if (q4) {
            q4_0_half(acc, quants, scales, 0, x, xq->d + x_block, xq->bias + x_block, nc);
            __asm__("" : "+r"(x)); /* as panel_block_avx2 does */
            q4_0_half(acc, quants, scales, 1, x, xq->d + x_block, xq->bias + x_block, nc);
        } else {
            panel_block_avx2(acc, quants, scales, x, TENSOR_QK, xq->d + x_block, 1, nc);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        store_rows(job->out + (size_t)(b0 + c) * w->rows + r0, nr, acc[2 * c], acc[2 * c + 1]);
}

static ALWAYS_INLINE void panel_tile_columns(const struct tensor_matmul_job *job, int r0, int nr,
                                             int b0, int nc, const char *next, const int q4) {
    switch (nc) {
    case 1:
        panel_tile(job, r0, nr, b0, 1, next, q4);
        break;
    case 2:
        panel_tile(job, r0, nr, b0, 2, next, q4);
        break;
    case 3:
        panel_tile(job, r0, nr, b0, 3, next, q4);
        break;
    case 4:
        panel_tile(job, r0, nr, b0, 4, next, q4);
        break;
    case 5:
        panel_tile(job, r0, nr, b0, 5, next, q4);
        break;
    case 6:
        panel_tile(job, r0, nr, b0, 6, next, q4);
        break;
    case 7:
        panel_tile(job, r0, nr, b0, 7, next, q4);
        break;
    default:
        panel_tile(job, r0, nr, b0, TILE_COLUMNS, next, q4);
        break;
    }
}

/* Every batch column of the panel at row r (of rows below row_end); its
 * first tile fetches the next panel, the others find this one in cache. */
static ALWAYS_INLINE void panel_columns(const struct tensor_matmul_job *job, int r, int row_end,
                                        const int q4) {
    int nr = row_end - r < TENSOR_PANEL_ROWS ? row_end - r : TENSOR_PANEL_ROWS;
    const char *next =
        r + TENSOR_PANEL_ROWS < row_end
            ? (const char *)job->w->data + (size_t)(r / TENSOR_PANEL_ROWS + 1) * job->w->row_stride
            : NULL;
    for (int b = 0; b < job->batch; b += TILE_COLUMNS) {
        int nc = job->batch - b < TILE_COLUMNS ? job->batch - b : TILE_COLUMNS;
        panel_tile_columns(job, r, nr, b, nc, b == 0 ? next : NULL, q4);
    }
}

/* Panel by panel, every batch column of a panel before the next. */
void tensor_matmul_q8_0_panels_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                                    void *scratch) {
    (void)scratch;
    for (int r = row_begin; r < row_end; r += TENSOR_PANEL_ROWS) panel_columns(job, r, row_end, 0);
}

void tensor_matmul_q4_0_panels_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                                    void *scratch) {
    (void)scratch;
    for (int r = row_begin; r < row_end; r += TENSOR_PANEL_ROWS) panel_columns(job, r, row_end, 1);
}

/* The parts of a column-split product (attn_output, ffn_down), panel by
 * panel: every part's tiles of a panel, then the next panel, so a thread
 * reads its weights as one stream and each part's first tile fetches its
 * blocks of the next panel while the others are computed (the AVX-512
 * kernel's reasoning, matmul_panels_avx512.c). Each tile is the same as
 * alone, so each part's sums are too. */
void tensor_matmul_q8_0_panels_parts_avx2(const struct tensor_matmul_job *jobs, int n_parts,
                                          int row_begin, int row_end, void *scratch) {
    (void)scratch;
    for (int r = row_begin; r < row_end; r += TENSOR_PANEL_ROWS)
        for (int p = 0; p < n_parts; p++) panel_columns(&jobs[p], r, row_end, 0);
}
