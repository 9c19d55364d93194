/* matmul_rows.c -- the product kernel of every type that has a row dot
 * (quants.h) instead of a matmul kernel of its own: the legacy quants
 * beyond Q4_0 / Q8_0, the k-quants, IQ4 and BF16.
 *
 * out[b][r] is one row dot of weight row r with input row b (quantized to
 * the type's dot type before the job starts, matmul.c). Rows are taken one
 * at a time and multiplied by every input row while they sit in the core's
 * cache, so each weight byte is read from memory once per product whatever
 * the batch. Which thread or batch computes an element does not change its
 * operations, so results are batch invariant. */
#include "tensor_internal.h"

void tensor_matmul_row_dots(const struct tensor_matmul_job *job, int row_begin, int row_end,
                            void *scratch) {
    const struct tensor_matrix *w = job->w;
    (void)scratch;
    for (int r = row_begin; r < row_end; r++) {
        const void *row = (const char *)w->data + (size_t)r * w->row_stride;
        for (int b = 0; b < job->batch; b++)
            job->out[(size_t)b * w->rows + r] =
                job->row_dot(row, job->xa + (size_t)b * job->xa_stride, w->cols);
    }
}
