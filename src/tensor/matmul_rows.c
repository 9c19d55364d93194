/* matmul_rows.c -- the product kernel of every type that has a row dot
 * (quants.h) instead of a matmul kernel of its own: the legacy quants
 * beyond Q4_0 / Q8_0, the k-quants, IQ4 and BF16.
 *
 * out[b][r] is one row dot of weight row r with input row b (quantized to
 * the type's dot type before the job starts, matmul.c). Where the type has
 * a multi-column row dot, input rows go TENSOR_DOT_COLUMNS at a time, so
 * each weight block is unpacked once per group instead of once per row;
 * the rest of the batch takes single row dots, which give the same bits.
 * Rows go in blocks of ROW_BLOCK: a group of input rows meets every row of
 * a block while both sit in the core's caches. Which thread or batch
 * computes an element does not change its operations, so results are
 * batch invariant. */
#include "tensor_internal.h"

/* Weight rows a group of input rows meets before the next group. */
#define ROW_BLOCK 16

/* A product of few input rows is a stream through the weights, each row
 * dotted once: rows are asked for PREFETCH_ROWS ahead (into L2), which
 * the hardware prefetcher alone did not do early enough. Generation on a
 * Llama 3.2 1B-shaped Q4_K_M model, AVX-512, measured 15.2 -> 21-22 tok/s
 * on 1 thread and 27.9 -> 33.4-34.5 on 2; 2, 4 and 8 rows ahead came out
 * within the noise of each other. */
#define PREFETCH_ROWS     4
#define PREFETCH_LOCALITY 1

/* Row r of w against input rows [b, b + TENSOR_DOT_COLUMNS). */
static void dot_columns(const struct tensor_matmul_job *job, const void *row, int r, int b) {
    const struct tensor_matrix *w = job->w;
    float dots[TENSOR_DOT_COLUMNS];
    job->row_dots(dots, row, job->xa + (size_t)b * job->xa_stride, job->xa_stride, w->cols);
    for (int c = 0; c < TENSOR_DOT_COLUMNS; c++) job->out[(size_t)(b + c) * w->rows + r] = dots[c];
}

/* Asks for the cache lines of the row `ahead` rows past row (within the
 * matrix), so that memory works while the core computes. */
static void prefetch_row(const struct tensor_matrix *w, const char *row, int r, int ahead) {
    if (r + ahead >= w->rows) return;
    const char *next = row + (size_t)ahead * w->row_stride;
    size_t bytes = tensor_row_bytes(w->type, w->cols);
    for (size_t offset = 0; offset < bytes; offset += 64)
        __builtin_prefetch(next + offset, 0, PREFETCH_LOCALITY);
}

/* Rows [row_begin, row_end) against input rows [b_begin, b_end) one at a time. */
static void dot_singles(const struct tensor_matmul_job *job, int row_begin, int row_end,
                        int b_begin, int b_end) {
    const struct tensor_matrix *w = job->w;
    for (int r = row_begin; r < row_end; r++) {
        const void *row = (const char *)w->data + (size_t)r * w->row_stride;
        if (b_end - b_begin < TENSOR_DOT_COLUMNS) prefetch_row(w, row, r, PREFETCH_ROWS);
        for (int b = b_begin; b < b_end; b++)
            job->out[(size_t)b * w->rows + r] =
                job->row_dot(row, job->xa + (size_t)b * job->xa_stride, w->cols);
    }
}

void tensor_matmul_row_dots(const struct tensor_matmul_job *job, int row_begin, int row_end,
                            void *scratch) {
    const struct tensor_matrix *w = job->w;
    (void)scratch;
    int grouped = job->row_dots ? job->batch - job->batch % TENSOR_DOT_COLUMNS : 0;
    for (int r0 = row_begin; r0 < row_end; r0 += ROW_BLOCK) {
        int r1 = r0 + ROW_BLOCK < row_end ? r0 + ROW_BLOCK : row_end;
        for (int b = 0; b < grouped; b += TENSOR_DOT_COLUMNS)
            for (int r = r0; r < r1; r++)
                dot_columns(job, (const char *)w->data + (size_t)r * w->row_stride, r, b);
        dot_singles(job, r0, r1, grouped, job->batch);
    }
}
