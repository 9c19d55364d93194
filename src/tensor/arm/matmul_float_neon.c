/* matmul_float_neon.c -- F32 and F16 products with NEON (armv8-a), rows
 * layout.
 *
 * Each output keeps the canonical 8 lane sums (tensor_matmul_f32_scalar:
 * lane l takes elements i = l mod 8 in order of i with fused
 * multiply-adds, the tail zero-filled) as two registers, added by the lane
 * tree, so every output has the scalar reference's bits whatever the tile.
 * Tiles as matmul_avx2.c's: 8 rows for one input row (the weights stream
 * once), 4 rows by 2 input rows for a batch, over blocks of the batch
 * whose rows stay in cache. F16 weights convert exactly (fcvtl). */
#include "ops_neon.h"

#define GEMV_ROWS         8
#define GEMM_ROWS         4
#define GEMM_COLS         2
#define FLOAT_BLOCK_BYTES (256 * 1024)

static ALWAYS_INLINE struct lanes load_weights(const void *row, int i, int f16) {
    if (f16) return load_halves((const uint16_t *)row + i);
    return load_lanes((const float *)row + i);
}

/* The last n < 8 elements from i, zero-filled. */
static ALWAYS_INLINE struct lanes load_weights_tail(const void *row, int i, int n, int f16) {
    if (f16) return load_halves_tail((const uint16_t *)row + i, n);
    return load_lanes_tail((const float *)row + i, n);
}

/* out[b0 + c][r0 + m] for m < nr, c < nc (rows past nr repeat the last). */
static ALWAYS_INLINE void float_tile(const struct tensor_matmul_job *job, int r0, int nr, int b0,
                                     const int NR, const int nc, const int f16) {
    const struct tensor_matrix *w = job->w;
    const int cols = w->cols;
    const char *rows[GEMV_ROWS];
    const float *xs[GEMM_COLS];
    struct lanes acc[GEMV_ROWS][GEMM_COLS];
#pragma GCC unroll 8
    for (int m = 0; m < NR; m++)
        rows[m] = (const char *)w->data + (size_t)(r0 + (m < nr ? m : nr - 1)) * w->row_stride;
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++) xs[c] = job->x + (size_t)(b0 + c) * cols;
#pragma GCC unroll 8
    for (int m = 0; m < NR; m++)
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) acc[m][c] = lanes_zero();
    int i = 0;
    for (; i + 8 <= cols; i += 8) {
        struct lanes xv[GEMM_COLS];
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) xv[c] = load_lanes(xs[c] + i);
#pragma GCC unroll 8
        for (int m = 0; m < NR; m++) {
            struct lanes wv = load_weights(rows[m], i, f16);
#pragma GCC unroll 2
            for (int c = 0; c < nc; c++) acc[m][c] = fma_lanes(acc[m][c], wv, xv[c]);
        }
    }
    if (i < cols) {
        /* zero-filled lanes add +0 to sums that are never -0: nothing */
        struct lanes xv[GEMM_COLS];
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) xv[c] = load_lanes_tail(xs[c] + i, cols - i);
#pragma GCC unroll 8
        for (int m = 0; m < NR; m++) {
            struct lanes wv = load_weights_tail(rows[m], i, cols - i, f16);
#pragma GCC unroll 2
            for (int c = 0; c < nc; c++) acc[m][c] = fma_lanes(acc[m][c], wv, xv[c]);
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < NR; m++)
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++)
            if (m < nr) job->out[(size_t)(b0 + c) * w->rows + r0 + m] = sum_lanes(acc[m][c]);
}

static ALWAYS_INLINE void matmul_float(const struct tensor_matmul_job *job, int row_begin,
                                       int row_end, const int f16) {
    if (job->batch == 1) {
        for (int r = row_begin; r < row_end; r += GEMV_ROWS) {
            int nr = row_end - r < GEMV_ROWS ? row_end - r : GEMV_ROWS;
            float_tile(job, r, nr, 0, GEMV_ROWS, 1, f16);
        }
        return;
    }
    size_t row_bytes = (size_t)job->w->cols * sizeof(float);
    int block = (int)(FLOAT_BLOCK_BYTES / row_bytes) / GEMM_COLS * GEMM_COLS;
    if (block < GEMM_COLS) block = GEMM_COLS;
    for (int b0 = 0; b0 < job->batch; b0 += block) {
        int b_end = b0 + block < job->batch ? b0 + block : job->batch;
        for (int r = row_begin; r < row_end; r += GEMM_ROWS) {
            int nr = row_end - r < GEMM_ROWS ? row_end - r : GEMM_ROWS;
            for (int b = b0; b < b_end; b += GEMM_COLS) {
                if (b_end - b >= GEMM_COLS)
                    float_tile(job, r, nr, b, GEMM_ROWS, GEMM_COLS, f16);
                else
                    float_tile(job, r, nr, b, GEMM_ROWS, 1, f16);
            }
        }
    }
}

void tensor_matmul_f32_neon(const struct tensor_matmul_job *job, int row_begin, int row_end,
                            void *scratch) {
    (void)scratch;
    matmul_float(job, row_begin, row_end, 0);
}

void tensor_matmul_f16_neon(const struct tensor_matmul_job *job, int row_begin, int row_end,
                            void *scratch) {
    (void)scratch;
    matmul_float(job, row_begin, row_end, 1);
}
