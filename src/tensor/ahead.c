/* ahead.c -- activations quantized ahead of a product (tensor.h), and the
 * row quantizer every quantized product uses.
 *
 * tensor_ahead_begin lays out, in memory the set owns, the same per-part
 * quantized activations (struct tensor_xq) that a tensor_matmul lays out
 * in the pool's scratch; tensor_ahead_row fills one row of them with the
 * function tensor_matmul fills its rows with. The product then only
 * reads them (matmul.c). */
#include "tensor_internal.h"

#include <stdlib.h>
#include <string.h>

/* Blocks quantized at a time into a buffer on the stack before they are
 * moved to their interleaved places: the width of the widest kernel's
 * group (quantization is block by block, so a row quantized in segments
 * has the same bits as whole). */
#define SEGMENT_BLOCKS 16

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* Row b quantized in place (activations by rows), or through a stack
 * segment then block by block to its interleaved places. */
void tensor_xq_quantize_row(const struct tensor_kernels *k, const struct tensor_xq *xq, int batch,
                            int b, const float *x, int cols) {
    int blocks = cols / TENSOR_QK;
    if (!xq->interleaved) {
        k->quantize_x(xq->qs + (size_t)b * cols, xq->d + (size_t)b * blocks,
                      xq->bias + (size_t)b * blocks, x, cols, xq->offset);
        return;
    }
    int8_t qs[SEGMENT_BLOCKS * TENSOR_QK];
    float d[SEGMENT_BLOCKS];
    int32_t bias[SEGMENT_BLOCKS];
    for (int j0 = 0; j0 < blocks; j0 += SEGMENT_BLOCKS) {
        int n = blocks - j0 < SEGMENT_BLOCKS ? blocks - j0 : SEGMENT_BLOCKS;
        k->quantize_x(qs, d, bias, x + (size_t)j0 * TENSOR_QK, n * TENSOR_QK, xq->offset);
        for (int j = 0; j < n; j++) {
            size_t number = tensor_xq_number(batch, blocks, b, j0 + j);
            memcpy(xq->qs + number * TENSOR_QK, qs + (size_t)j * TENSOR_QK, TENSOR_QK);
            xq->d[number] = d[j];
            xq->bias[number] = bias[j];
        }
    }
}

struct tensor_ahead *tensor_ahead_create(void) {
    return calloc(1, sizeof(struct tensor_ahead));
}

void tensor_ahead_free(struct tensor_ahead *ahead) {
    if (!ahead) return;
    free(ahead->memory);
    free(ahead);
}

/* Memory of at least bytes, 64-byte aligned; 0, or -1 if it cannot grow. */
static int ensure_capacity(struct tensor_ahead *ahead, size_t bytes) {
    if (bytes <= ahead->capacity) return 0;
    void *memory = NULL;
    if (posix_memalign(&memory, 64, bytes)) return -1;
    free(ahead->memory);
    ahead->memory = memory;
    ahead->capacity = bytes;
    return 0;
}

/* 1 if the n matrices ws (or ws[0] in n_parts parts) can take one input
 * quantized ahead. */
static int can_quantize_ahead(const struct tensor_matrix *const *ws, int n, int n_parts) {
    const struct tensor_matrix *w = ws[0];
    if (tensor_input_for(tensor_kernels_current(), w) != TENSOR_INPUT_BLOCKS) return 0;
    if (n < 1 || n > TENSOR_MAX_PARTS || (n > 1 && n_parts != 1)) return 0;
    return tensor_split_fits(w, n_parts) && tensor_share_input(ws, n);
}

int tensor_ahead_begin(struct tensor_ahead *ahead, const struct tensor_matrix *const *ws, int n,
                       int n_parts, int batch) {
    ahead->batch = 0;
    if (batch <= 0 || !can_quantize_ahead(ws, n, n_parts)) return 0;
    const struct tensor_matrix *w = ws[0];
    const struct tensor_kernels *k = tensor_kernels_current();
    size_t part_cols = (size_t)(w->cols / n_parts), values = (size_t)batch * part_cols;
    size_t qs_bytes = align64(values), scale_bytes = align64(values / TENSOR_QK * sizeof(float));
    size_t part_bytes = qs_bytes + 2 * scale_bytes;
    if (ensure_capacity(ahead, (size_t)n_parts * part_bytes)) return 0;
    for (int p = 0; p < n_parts; p++) {
        char *at = ahead->memory + (size_t)p * part_bytes;
        ahead->xq[p] = (struct tensor_xq){.qs = (void *)at,
                                          .d = (void *)(at + qs_bytes),
                                          .bias = (void *)(at + qs_bytes + scale_bytes)};
        tensor_xq_layout_for(k, w, &ahead->xq[p]);
    }
    ahead->k = k;
    ahead->type = w->type;
    ahead->layout = w->layout;
    ahead->batch = batch;
    ahead->cols = w->cols;
    ahead->n_parts = n_parts;
    return 1;
}

void tensor_ahead_row(struct tensor_ahead *ahead, int b, const float *x) {
    int part_cols = ahead->cols / ahead->n_parts;
    for (int p = 0; p < ahead->n_parts; p++)
        tensor_xq_quantize_row(ahead->k, &ahead->xq[p], ahead->batch, b, x + (size_t)p * part_cols,
                               part_cols);
}
