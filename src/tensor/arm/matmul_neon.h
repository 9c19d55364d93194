/* matmul_neon.h -- the Q8_0 and Q4_0 products of the NEON and dotprod
 * tables, written once over the block dot each file gives for its
 * instruction set (the exact integer dot of one 32-element block of
 * weights with the input's quants). The float step per block is the
 * scalar reference's (tensor_add_block), so the bits are every set's.
 * Included only by files compiled for arm64. */
#ifndef LOCKSTEP_TENSOR_MATMUL_NEON_H
#define LOCKSTEP_TENSOR_MATMUL_NEON_H

#include "arm.h"

#include <arm_neon.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* The integer dot of one block's quants (after its fp16 scale) with 32
 * input quants. */
typedef int32_t (*block_dot_fn)(const uint8_t *weights, const int8_t *x);

/* Q4_0's 32 weights of one block as signed bytes: low nibbles are
 * elements 0..15, high nibbles 16..31, each less 8. */
static ALWAYS_INLINE void unpack_q4_0(const uint8_t *qs, int8x16_t *low, int8x16_t *high) {
    uint8x16_t bytes = vld1q_u8(qs);
    *low = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(bytes, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    *high = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(bytes, 4)), vdupq_n_s8(8));
}

/* Rows [row_begin, row_end) of a product with blocks of block_bytes (an
 * fp16 scale, then the quants dot reads), every input row each. */
static ALWAYS_INLINE void quant_matmul(const struct tensor_matmul_job *job, int row_begin,
                                       int row_end, size_t block_bytes, block_dot_fn dot) {
    const struct tensor_matrix *w = job->w;
    int blocks = w->cols / TENSOR_QK;
    for (int r = row_begin; r < row_end; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_stride;
        for (int b = 0; b < job->batch; b++) {
            const int8_t *xq = job->xq->qs + (size_t)b * w->cols;
            const float *xd = job->xq->d + (size_t)b * blocks;
            float acc = 0.0f;
            for (int j = 0; j < blocks; j++) {
                const uint8_t *block = row + (size_t)j * block_bytes;
                uint16_t d;
                memcpy(&d, block, sizeof(d));
                int32_t sum = dot(block + sizeof(d), xq + (size_t)j * TENSOR_QK);
                acc = tensor_add_block(acc, sum, tensor_fp16_to_fp32(d), xd[j]);
            }
            job->out[(size_t)b * w->rows + r] = acc;
        }
    }
}

#endif
