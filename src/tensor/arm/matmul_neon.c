/* matmul_neon.c -- Q8_0 and Q4_0 products with baseline NEON (armv8-a):
 * a block's 32 byte products by widening multiplies (smull, smull2) into
 * 16-bit lanes, pairs of them added into 32-bit lanes (sadalp), then
 * across the lanes. Exact integers, so the scalar reference's bits. */
#include "matmul_neon.h"

/* Adds the products of 16 byte pairs to four 32-bit lanes. */
static ALWAYS_INLINE int32x4_t add_products(int32x4_t acc, int8x16_t a, int8x16_t b) {
    int16x8_t low = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    int16x8_t high = vmull_high_s8(a, b);
    return vpadalq_s16(vpadalq_s16(acc, low), high);
}

static ALWAYS_INLINE int32_t dot_q8_0(const uint8_t *weights, const int8_t *x) {
    const int8_t *w = (const int8_t *)weights;
    int32x4_t acc = add_products(vdupq_n_s32(0), vld1q_s8(w), vld1q_s8(x));
    acc = add_products(acc, vld1q_s8(w + 16), vld1q_s8(x + 16));
    return vaddvq_s32(acc);
}

static ALWAYS_INLINE int32_t dot_q4_0(const uint8_t *weights, const int8_t *x) {
    int8x16_t low, high;
    unpack_q4_0(weights, &low, &high);
    int32x4_t acc = add_products(vdupq_n_s32(0), low, vld1q_s8(x));
    acc = add_products(acc, high, vld1q_s8(x + 16));
    return vaddvq_s32(acc);
}

void tensor_matmul_q8_0_neon(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch) {
    (void)scratch;
    quant_matmul(job, row_begin, row_end, sizeof(struct tensor_block_q8_0), dot_q8_0);
}

void tensor_matmul_q4_0_neon(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch) {
    (void)scratch;
    quant_matmul(job, row_begin, row_end, sizeof(struct tensor_block_q4_0), dot_q4_0);
}
