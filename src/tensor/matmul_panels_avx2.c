/* matmul_panels_avx2.c -- the AVX2 kernel for Q8_0 weights in panel layout
 * (tensor.h), at every batch size.
 *
 * The weights are packed once at load, so a batched product reads them as
 * they are used instead of gathering 8-row panels on every call (the row
 * kernel in matmul_avx2.c). A tile is one panel's 16 rows and up to 8
 * batch columns (one activation group); its block step (panel_avx2.h)
 * loads each weight vector once for all of them. The float step per block
 * is the scalar one, vectorized over the rows, so the result has the bits
 * of tensor_matmul_q8_0_panels_scalar and of the row-layout kernels
 * (tensor_internal.h). */
#include "panel_avx2.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

#define TILE_COLUMNS PANEL_AVX2_COLUMNS
_Static_assert(TILE_COLUMNS == TENSOR_XQ_GROUP, "a tile reads one group of activations");

/* Block j of the panel at panel (quants, and every other block the line
 * holding two blocks' scales) into L2. */
static ALWAYS_INLINE void prefetch_block(const char *panel, size_t scales_offset, int j) {
    const char *quants = panel + (size_t)j * TENSOR_PANEL_QUANTS;
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) _mm_prefetch(quants + 64 * g, _MM_HINT_T1);
    if (j % 2 == 0)
        _mm_prefetch(panel + scales_offset + (size_t)j * TENSOR_PANEL_SCALES, _MM_HINT_T1);
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
                                     const int nc, const char *next) {
    const struct tensor_matrix *w = job->w;
    const struct tensor_xq *xq = job->xq;
    const int blocks = w->cols / TENSOR_QK;
    const char *panel = (const char *)w->data + (size_t)(r0 / TENSOR_PANEL_ROWS) * w->row_stride;
    __m256 acc[2 * TILE_COLUMNS];
#pragma GCC unroll 16
    for (int i = 0; i < 2 * nc; i++) acc[i] = _mm256_setzero_ps();
    for (int j = 0; j < blocks; j++) {
        size_t x_block = tensor_xq_number(job->batch, blocks, b0, j); /* column b0's block j */
        if (next) prefetch_block(next, w->scales_offset, j);
        panel_block_avx2(acc, panel + (size_t)j * TENSOR_PANEL_QUANTS,
                         panel + w->scales_offset + (size_t)j * TENSOR_PANEL_SCALES,
                         xq->qs + x_block * TENSOR_QK, TENSOR_QK, xq->d + x_block, 1, nc);
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        store_rows(job->out + (size_t)(b0 + c) * w->rows + r0, nr, acc[2 * c], acc[2 * c + 1]);
}

static ALWAYS_INLINE void panel_tile_columns(const struct tensor_matmul_job *job, int r0, int nr,
                                             int b0, int nc, const char *next) {
    switch (nc) {
    case 1:
        panel_tile(job, r0, nr, b0, 1, next);
        break;
    case 2:
        panel_tile(job, r0, nr, b0, 2, next);
        break;
    case 3:
        panel_tile(job, r0, nr, b0, 3, next);
        break;
    case 4:
        panel_tile(job, r0, nr, b0, 4, next);
        break;
    case 5:
        panel_tile(job, r0, nr, b0, 5, next);
        break;
    case 6:
        panel_tile(job, r0, nr, b0, 6, next);
        break;
    case 7:
        panel_tile(job, r0, nr, b0, 7, next);
        break;
    default:
        panel_tile(job, r0, nr, b0, TILE_COLUMNS, next);
        break;
    }
}

/* Every batch column of the panel at row r (of rows below row_end); its
 * first tile fetches the next panel, the others find this one in cache. */
static void panel_columns(const struct tensor_matmul_job *job, int r, int row_end) {
    int nr = row_end - r < TENSOR_PANEL_ROWS ? row_end - r : TENSOR_PANEL_ROWS;
    const char *next =
        r + TENSOR_PANEL_ROWS < row_end
            ? (const char *)job->w->data + (size_t)(r / TENSOR_PANEL_ROWS + 1) * job->w->row_stride
            : NULL;
    for (int b = 0; b < job->batch; b += TILE_COLUMNS) {
        int nc = job->batch - b < TILE_COLUMNS ? job->batch - b : TILE_COLUMNS;
        panel_tile_columns(job, r, nr, b, nc, b == 0 ? next : NULL);
    }
}

/* Panel by panel, every batch column of a panel before the next. */
void tensor_matmul_q8_0_panels_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                                    void *scratch) {
    (void)scratch;
    for (int r = row_begin; r < row_end; r += TENSOR_PANEL_ROWS) panel_columns(job, r, row_end);
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
        for (int p = 0; p < n_parts; p++) panel_columns(&jobs[p], r, row_end);
}
