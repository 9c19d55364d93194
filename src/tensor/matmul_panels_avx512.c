/* matmul_panels_avx512.c -- the AVX-512 VNNI kernel for Q8_0 weights in
 * panel layout (tensor.h), at every batch size.
 *
 * A panel block's 64-byte group g holds quants 4g..4g+3 of 16 rows, already
 * unsigned: one vpdpbusd adds 4 products into each of 16 row lanes for one
 * batch column (its 4 activation bytes broadcast), so there is nothing to
 * transpose and nothing to reduce across lanes. A tile keeps up to 8 batch
 * columns in registers and each weight load serves all of them. The block's
 * float step is the scalar one, vectorized over the 16 rows, so the result
 * has the bits of tensor_matmul_q8_0_panels_scalar and of the row-layout
 * kernels (tensor_internal.h). */
#include "tensor_internal.h"

#include <immintrin.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

#define TILE_COLUMNS 8 /* batch columns a tile keeps in registers */

/* One block's float step for 16 rows: acc + (float)dot * (d_w * d_x). */
static ALWAYS_INLINE __m512 add_block(__m512 acc, __m512i dot, __m512 d_w, float d_x) {
    __m512 scale = _mm512_mul_ps(d_w, _mm512_set1_ps(d_x));
    __m512 term = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale);
    return _mm512_add_ps(acc, term);
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
    const char *scales = panel + w->scales_offset;
    const int8_t *xs[TILE_COLUMNS];
    __m512 acc[TILE_COLUMNS];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        xs[c] = xq->qs + (size_t)(b0 + c) * w->cols;
        acc[c] = _mm512_setzero_ps();
    }
    for (int j = 0; j < blocks; j++) {
        const char *quants = panel + (size_t)j * TENSOR_PANEL_QUANTS;
        if (next) {
            const char *ahead = next + (size_t)j * TENSOR_PANEL_QUANTS;
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) _mm_prefetch(ahead + 64 * g, _MM_HINT_T1);
            if (j % 2 == 0)
                _mm_prefetch(next + w->scales_offset + (size_t)j * TENSOR_PANEL_SCALES,
                             _MM_HINT_T1);
        }
        __m512i dot[TILE_COLUMNS];
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++)
            dot[c] = _mm512_set1_epi32(xq->bias[(size_t)(b0 + c) * blocks + j]);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i weights = _mm512_load_si512(quants + 64 * g);
#pragma GCC unroll 8
            for (int c = 0; c < nc; c++) {
                int32_t x4;
                memcpy(&x4, xs[c] + (size_t)j * TENSOR_QK + 4 * g, sizeof(x4));
                dot[c] = _mm512_dpbusd_epi32(dot[c], weights, _mm512_set1_epi32(x4));
            }
        }
        __m512 d_w = _mm512_cvtph_ps(
            _mm256_loadu_si256((const __m256i *)(scales + (size_t)j * TENSOR_PANEL_SCALES)));
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++)
            acc[c] = add_block(acc[c], dot[c], d_w, xq->d[(size_t)(b0 + c) * blocks + j]);
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

/* Panel by panel, every batch column of a panel before the next; the
 * panel's first tile fetches the next panel, the others find this one in
 * cache. */
void tensor_matmul_q8_0_panels_avx512(const struct tensor_matmul_job *job, int row_begin,
                                      int row_end, void *scratch) {
    (void)scratch;
    for (int r = row_begin; r < row_end; r += TENSOR_PANEL_ROWS) {
        int nr = row_end - r < TENSOR_PANEL_ROWS ? row_end - r : TENSOR_PANEL_ROWS;
        const char *next = r + TENSOR_PANEL_ROWS < row_end
                               ? (const char *)job->w->data +
                                     (size_t)(r / TENSOR_PANEL_ROWS + 1) * job->w->row_stride
                               : NULL;
        for (int b = 0; b < job->batch; b += TILE_COLUMNS) {
            int nc = job->batch - b < TILE_COLUMNS ? job->batch - b : TILE_COLUMNS;
            panel_tile_columns(job, r, nr, b, nc, b == 0 ? next : NULL);
        }
    }
}
