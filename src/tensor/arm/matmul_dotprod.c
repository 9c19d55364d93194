/* matmul_dotprod.c -- Q8_0 and Q4_0 products with the armv8.2-a dot
 * product (sdot: four byte products added into each 32-bit lane). Exact
 * integers, so the scalar reference's bits. */
#include "matmul_neon.h"

static ALWAYS_INLINE int32_t dot_q8_0(const uint8_t *weights, const int8_t *x) {
    const int8_t *w = (const int8_t *)weights;
    int32x4_t acc = vdotq_s32(vdupq_n_s32(0), vld1q_s8(w), vld1q_s8(x));
    acc = vdotq_s32(acc, vld1q_s8(w + 16), vld1q_s8(x + 16));
    return vaddvq_s32(acc);
}

static ALWAYS_INLINE int32_t dot_q4_0(const uint8_t *weights, const int8_t *x) {
    int8x16_t low, high;
    unpack_q4_0(weights, &low, &high);
    int32x4_t acc = vdotq_s32(vdupq_n_s32(0), low, vld1q_s8(x));
    acc = vdotq_s32(acc, high, vld1q_s8(x + 16));
    return vaddvq_s32(acc);
}

void tensor_matmul_q8_0_dotprod(const struct tensor_matmul_job *job, int row_begin, int row_end,
                                void *scratch) {
    (void)scratch;
    quant_matmul(job, row_begin, row_end, sizeof(struct tensor_block_q8_0), dot_q8_0);
}

void tensor_matmul_q4_0_dotprod(const struct tensor_matmul_job *job, int row_begin, int row_end,
                                void *scratch) {
    (void)scratch;
    quant_matmul(job, row_begin, row_end, sizeof(struct tensor_block_q4_0), dot_q4_0);
}
