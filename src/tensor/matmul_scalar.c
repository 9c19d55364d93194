/* matmul_scalar.c -- the scalar reference matmul kernels.
 *
 * Plain loops that state, operation for operation, what every instruction
 * set computes (canon.h: the AVX2 order is the canonical one). Float types
 * keep 8 lane sums per output, lane l taking elements i = l (mod 8) in
 * order of i with fused multiply-adds, added by the lane tree; quantized
 * types add, block by block, (float)(integer block dot) * (d_w * d_x).
 * Also the scalar activation quantizer. */
#include "canon.h"
#include "tensor_internal.h"

#include <math.h>
#include <string.h>

size_t tensor_matmul_scratch_f16_scalar(enum tensor_type type, int cols, int batch) {
    (void)type, (void)batch;
    /* room for one weight row as floats (F16 rows are converted once, used batch times) */
    return (size_t)cols * sizeof(float);
}

/* One output of a float matmul in the order of matmul_avx2.c's float_tile:
 * lane l = fmaf(w[i], x[i], lane l) for i = l (mod 8) in order of i (its
 * zero-filled tail lanes add +0 to sums that are never -0: nothing), then
 * the lane tree. */
static float dot_lanes(const float *w, const float *x, int n) {
    float lanes[CANON_LANES] = {0};
    for (int i = 0; i < n; i++) lanes[i % CANON_LANES] = fmaf(w[i], x[i], lanes[i % CANON_LANES]);
    return canon_sum_lanes(lanes);
}

void tensor_matmul_f32_scalar(const struct tensor_matmul_job *job, int row_begin, int row_end,
                              void *scratch) {
    const struct tensor_matrix *w = job->w;
    (void)scratch;
    for (int r = row_begin; r < row_end; r++) {
        const float *row = (const void *)((const char *)w->data + (size_t)r * w->row_stride);
        for (int b = 0; b < job->batch; b++)
            job->out[(size_t)b * w->rows + r] =
                dot_lanes(row, job->x + (size_t)b * w->cols, w->cols);
    }
}

void tensor_matmul_f16_scalar(const struct tensor_matmul_job *job, int row_begin, int row_end,
                              void *scratch) {
    const struct tensor_matrix *w = job->w;
    float *row = scratch;
    for (int r = row_begin; r < row_end; r++) {
        tensor_dequantize_row(row, (const char *)w->data + (size_t)r * w->row_stride, TENSOR_F16,
                              w->cols);
        for (int b = 0; b < job->batch; b++)
            job->out[(size_t)b * w->rows + r] =
                dot_lanes(row, job->x + (size_t)b * w->cols, w->cols);
    }
}

void tensor_matmul_q8_0_scalar(const struct tensor_matmul_job *job, int row_begin, int row_end,
                               void *scratch) {
    const struct tensor_matrix *w = job->w;
    int blocks = w->cols / TENSOR_QK;
    (void)scratch;
    for (int r = row_begin; r < row_end; r++) {
        const struct tensor_block_q8_0 *row =
            (const void *)((const char *)w->data + (size_t)r * w->row_stride);
        for (int b = 0; b < job->batch; b++) {
            const int8_t *xq = job->xq->qs + (size_t)b * w->cols;
            const float *xd = job->xq->d + (size_t)b * blocks;
            float acc = 0.0f;
            for (int j = 0; j < blocks; j++) {
                int32_t dot = 0;
                for (int i = 0; i < TENSOR_QK; i++)
                    dot += (int32_t)row[j].qs[i] * xq[j * TENSOR_QK + i];
                acc = tensor_add_block(acc, dot, tensor_fp16_to_fp32(row[j].d), xd[j]);
            }
            job->out[(size_t)b * w->rows + r] = acc;
        }
    }
}

/* The panel layout read element by element: what the AVX-512 panel kernel
 * must compute, and the path of instruction sets without one. */
void tensor_matmul_q8_0_panels_scalar(const struct tensor_matmul_job *job, int row_begin,
                                      int row_end, void *scratch) {
    const struct tensor_matrix *w = job->w;
    int blocks = w->cols / TENSOR_QK;
    (void)scratch;
    for (int r = row_begin; r < row_end; r++) {
        const uint8_t *panel =
            (const uint8_t *)w->data + (size_t)(r / TENSOR_PANEL_ROWS) * w->row_stride;
        int m = r % TENSOR_PANEL_ROWS;
        for (int b = 0; b < job->batch; b++) {
            const int8_t *xq = job->xq->qs + (size_t)b * w->cols;
            const float *xd = job->xq->d + (size_t)b * blocks;
            float acc = 0.0f;
            for (int j = 0; j < blocks; j++) {
                const uint8_t *quants = panel + (size_t)j * TENSOR_PANEL_QUANTS;
                int32_t dot = 0;
                for (int i = 0; i < TENSOR_QK; i++) {
                    int stored = quants[(i / 4) * 64 + m * 4 + i % 4];
                    dot += (stored - 128) * xq[j * TENSOR_QK + i];
                }
                uint16_t d_w;
                memcpy(&d_w,
                       panel + w->scales_offset + (size_t)j * TENSOR_PANEL_SCALES + 2 * (size_t)m,
                       sizeof(d_w));
                acc = tensor_add_block(acc, dot, tensor_fp16_to_fp32(d_w), xd[j]);
            }
            job->out[(size_t)b * w->rows + r] = acc;
        }
    }
}

/* The Q4_0 panel layout read element by element: what the AVX2 Q4_0 panel
 * kernel must compute, and the path of instruction sets without one.
 * Element i of a block is a nibble of the block's byte i % 16 (low for the
 * first 16), and that byte lies in group (i % 16) / 4 of the row's panel
 * block. The activations may be interleaved (tensor_internal.h). */
void tensor_matmul_q4_0_panels_scalar(const struct tensor_matmul_job *job, int row_begin,
                                      int row_end, void *scratch) {
    const struct tensor_matrix *w = job->w;
    const struct tensor_xq *xq = job->xq;
    int blocks = w->cols / TENSOR_QK;
    (void)scratch;
    for (int r = row_begin; r < row_end; r++) {
        const uint8_t *panel =
            (const uint8_t *)w->data + (size_t)(r / TENSOR_PANEL_ROWS) * w->row_stride;
        int m = r % TENSOR_PANEL_ROWS;
        for (int b = 0; b < job->batch; b++) {
            float acc = 0.0f;
            for (int j = 0; j < blocks; j++) {
                size_t number = xq->interleaved ? tensor_xq_number(job->batch, blocks, b, j)
                                                : (size_t)b * blocks + j;
                const int8_t *xj = xq->qs + number * TENSOR_QK;
                const uint8_t *quants = panel + (size_t)j * TENSOR_PANEL_QUANTS_Q4_0;
                int32_t dot = 0;
                for (int i = 0; i < TENSOR_QK / 2; i++) {
                    int stored = quants[(i / 4) * 64 + m * 4 + i % 4];
                    dot += ((stored & 0x0f) - 8) * xj[i];
                    dot += ((stored >> 4) - 8) * xj[i + TENSOR_QK / 2];
                }
                uint16_t d_w;
                memcpy(&d_w,
                       panel + w->scales_offset + (size_t)j * TENSOR_PANEL_SCALES + 2 * (size_t)m,
                       sizeof(d_w));
                acc = tensor_add_block(acc, dot, tensor_fp16_to_fp32(d_w), xq->d[number]);
            }
            job->out[(size_t)b * w->rows + r] = acc;
        }
    }
}

void tensor_matmul_q4_0_scalar(const struct tensor_matmul_job *job, int row_begin, int row_end,
                               void *scratch) {
    const struct tensor_matrix *w = job->w;
    int blocks = w->cols / TENSOR_QK;
    (void)scratch;
    for (int r = row_begin; r < row_end; r++) {
        const struct tensor_block_q4_0 *row =
            (const void *)((const char *)w->data + (size_t)r * w->row_stride);
        for (int b = 0; b < job->batch; b++) {
            const int8_t *xq = job->xq->qs + (size_t)b * w->cols;
            const float *xd = job->xq->d + (size_t)b * blocks;
            float acc = 0.0f;
            for (int j = 0; j < blocks; j++) {
                const int8_t *xj = xq + j * TENSOR_QK;
                int32_t dot = 0;
                for (int i = 0; i < TENSOR_QK / 2; i++) {
                    dot += ((row[j].qs[i] & 0x0f) - 8) * xj[i];
                    dot += ((row[j].qs[i] >> 4) - 8) * xj[i + TENSOR_QK / 2];
                }
                acc = tensor_add_block(acc, dot, tensor_fp16_to_fp32(row[j].d), xd[j]);
            }
            job->out[(size_t)b * w->rows + r] = acc;
        }
    }
}

/* tensor_quantize_x_avx2's values: the canonical block quantizer, its
 * scale rounded to fp16 (tensor_canon_quantize_block_q8_0). */
void tensor_quantize_x_scalar(int8_t *qs, float *d, int32_t *bias, const float *x, int n,
                              int32_t offset) {
    for (int j = 0; j < n / TENSOR_QK; j++) {
        int32_t sum;
        float scale = tensor_canon_quantize_block_q8_0(qs + j * TENSOR_QK, &sum, x + j * TENSOR_QK);
        d[j] = tensor_fp16_to_fp32(tensor_fp32_to_fp16(scale));
        bias[j] = (int32_t)((uint32_t)-offset * (uint32_t)sum); /* wraps, as imul does */
    }
}
