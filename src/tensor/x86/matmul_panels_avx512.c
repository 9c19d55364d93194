/* matmul_panels_avx512.c -- the AVX-512 VNNI kernel for Q8_0 weights in
 * panel layout (tensor.h), at every batch size.
 *
 * A panel block's 64-byte group g holds quants 4g..4g+3 of 16 rows, already
 * unsigned: one vpdpbusd adds 4 products into each of 16 row lanes for one
 * batch column (its 4 activation bytes broadcast), so there is nothing to
 * transpose and nothing to reduce across lanes. A tile keeps up to 8 batch
 * columns in registers and each weight load serves all of them. The
 * activations come interleaved (tensor_internal.h): a tile's columns are
 * one group, whose blocks j lie side by side, so a tile reads one stream
 * of activations, at offsets known when compiled, instead of one stream
 * per column (measured: about 5% more tokens a second from the runner with
 * 16 sequences). The block's float step is the scalar one, vectorized over
 * the 16 rows, so the result has the bits of
 * tensor_matmul_q8_0_panels_scalar and of the row-layout kernels
 * (tensor_internal.h). */
#include "panel_avx512.h"

#include <immintrin.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

#define TILE_COLUMNS 8 /* batch columns a tile keeps in registers: one activation group */
_Static_assert(TILE_COLUMNS == TENSOR_XQ_GROUP, "a tile reads one group of activations");

/* The 16 rows' scales of block j of a panel, as floats. */
static ALWAYS_INLINE __m512 block_scales(const char *panel, const struct tensor_matrix *w, int j) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(
        (const __m256i *)(panel + w->scales_offset + (size_t)j * TENSOR_PANEL_SCALES)));
}

/* Block j of the panel at panel (quants, and every other block the line
 * holding two blocks' scales) into L2. */
static ALWAYS_INLINE void prefetch_block(const char *panel, size_t scales_offset, int j) {
    const char *quants = panel + (size_t)j * TENSOR_PANEL_QUANTS;
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) _mm_prefetch(quants + 64 * g, _MM_HINT_T1);
    if (j % 2 == 0)
        _mm_prefetch(panel + scales_offset + (size_t)j * TENSOR_PANEL_SCALES, _MM_HINT_T1);
}

/* The 16 rows of the panel holding row r0 (nr of them real) for batch
 * columns b0 .. b0 + nc - 1. With next set, block j of the panel at next is
 * fetched while block j of this one is used: the next panel arrives in the
 * time this one takes, whatever the batch (one sequential stream a thread
 * is too little for the hardware prefetchers to cover the memory latency). */
static ALWAYS_INLINE void panel_tile(const struct tensor_matmul_job *job, int r0, int nr, int b0,
                                     const int nc, const char *next) {
    const struct tensor_matrix *w = job->w;
    const struct tensor_xq *xq = job->xq;
    const int blocks = w->cols / TENSOR_QK;
    const char *panel = (const char *)w->data + (size_t)(r0 / TENSOR_PANEL_ROWS) * w->row_stride;
    __m512 acc[TILE_COLUMNS];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) acc[c] = _mm512_setzero_ps();
    for (int j = 0; j < blocks; j++) {
        size_t x_block = tensor_xq_number(job->batch, blocks, b0, j); /* column b0's block j */
        if (next) prefetch_block(next, w->scales_offset, j);
        panel_block(acc, panel + (size_t)j * TENSOR_PANEL_QUANTS, block_scales(panel, w, j),
                    xq->qs + x_block * TENSOR_QK, TENSOR_QK, xq->d + x_block, xq->bias + x_block, 1,
                    nc);
    }
    __mmask16 mask = (__mmask16)((1u << nr) - 1u);
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(job->out + (size_t)(b0 + c) * w->rows + r0, mask, acc[c]);
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

/* Generation (nc <= 3 columns): two panels side by side, rows r0 .. r0+31
 * (all real), block by block. The product is bound by memory there, and two
 * streams a thread keep more reads in flight than one (measured: one
 * panel at a time ran about 18% slower than the row-layout kernel, which
 * reads 16 rows at once; two at a time, slightly faster than it). */
static ALWAYS_INLINE void panel_pair(const struct tensor_matmul_job *job, int r0, const int nc,
                                     const char *next) {
    const struct tensor_matrix *w = job->w;
    const struct tensor_xq *xq = job->xq;
    const int blocks = w->cols / TENSOR_QK;
    const char *first = (const char *)w->data + (size_t)(r0 / TENSOR_PANEL_ROWS) * w->row_stride;
    __m512 acc[2][3];
#pragma GCC unroll 3
    for (int c = 0; c < nc; c++) acc[0][c] = acc[1][c] = _mm512_setzero_ps();
    for (int j = 0; j < blocks; j++) {
        size_t x_block = tensor_xq_number(job->batch, blocks, 0, j); /* column 0's block j */
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            const char *panel = first + p * w->row_stride;
            if (next) prefetch_block(next + p * w->row_stride, w->scales_offset, j);
            panel_block(acc[p], panel + (size_t)j * TENSOR_PANEL_QUANTS, block_scales(panel, w, j),
                        xq->qs + x_block * TENSOR_QK, TENSOR_QK, xq->d + x_block,
                        xq->bias + x_block, 1, nc);
        }
    }
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++)
#pragma GCC unroll 3
        for (int c = 0; c < nc; c++)
            _mm512_storeu_ps(job->out + (size_t)c * w->rows + r0 + TENSOR_PANEL_ROWS * p,
                             acc[p][c]);
}

/* Pairs of panels from row_begin while two whole panels are left; returns
 * the first row not done. */
static int panel_pairs(const struct tensor_matmul_job *job, int row_begin, int row_end) {
    const int pair_rows = 2 * TENSOR_PANEL_ROWS;
    int r = row_begin;
    for (; r + pair_rows <= row_end; r += pair_rows) {
        const char *next = r + 2 * pair_rows <= row_end
                               ? (const char *)job->w->data +
                                     (size_t)(r / TENSOR_PANEL_ROWS + 2) * job->w->row_stride
                               : NULL;
        switch (job->batch) {
        case 1:
            panel_pair(job, r, 1, next);
            break;
        case 2:
            panel_pair(job, r, 2, next);
            break;
        default:
            panel_pair(job, r, 3, next);
            break;
        }
    }
    return r;
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

/* Generation takes panels in pairs. Otherwise panel by panel, every batch
 * column of a panel before the next. */
void tensor_matmul_q8_0_panels_avx512(const struct tensor_matmul_job *job, int row_begin,
                                      int row_end, void *scratch) {
    (void)scratch;
    int r = job->batch <= 3 ? panel_pairs(job, row_begin, row_end) : row_begin;
    for (; r < row_end; r += TENSOR_PANEL_ROWS) panel_columns(job, r, row_end);
}

/* The parts of a column-split product (attn_output, ffn_down), panel by
 * panel: every part's tiles of a panel, then the next panel. Part by part,
 * a thread walks its panels once per part, a few blocks of each (6 of
 * attn_output's 24 in 4 parts), fetching only that much of the next panel
 * ahead, and starts every tile over for so few blocks. Panel by panel it
 * reads the weights as one stream, and each part's tile fetches its blocks
 * of the next panel while the panel's other parts are computed: a whole
 * panel ahead, as an unsplit product does (measured, 85M Q8_0 model, 4
 * parts, 16 sequences decoding: attn_output 25% and ffn_down 8% shorter,
 * decode steps 2-3% shorter, alternated in one process). Each tile is the
 * same as alone, so each part's sums are too. Generation (batch <= 3)
 * keeps the part-by-part walk of panel pairs. */
void tensor_matmul_q8_0_panels_parts_avx512(const struct tensor_matmul_job *jobs, int n_parts,
                                            int row_begin, int row_end, void *scratch) {
    if (jobs[0].batch <= 3) {
        for (int p = 0; p < n_parts; p++)
            tensor_matmul_q8_0_panels_avx512(&jobs[p], row_begin, row_end, scratch);
        return;
    }
    for (int r = row_begin; r < row_end; r += TENSOR_PANEL_ROWS)
        for (int p = 0; p < n_parts; p++) panel_columns(&jobs[p], r, row_end);
}
