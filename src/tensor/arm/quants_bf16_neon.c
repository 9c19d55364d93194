/* quants_bf16_neon.c -- the BF16 row dot of the NEON table, in the order
 * of the scalar reference (quants_bf16.c): four sums of 8 lanes, each as
 * two float32x4_t, rounds of 32 elements putting element i + 8k + l in
 * sum k, lane l, the whole vectors of 8 left going to sums 0, 1, 2 in
 * turn, all fused (fmla); the sums added as (0 + 1) + (2 + 3) lane by
 * lane, then the lane tree, then the last n % 8 products one by one,
 * unfused. BF16 widens to a single exactly (its bits moved up 16), so
 * this gives the scalar reference's bits. */
#include "quants_neon.h"

/* Sum k's two halves, lanes 0-3 and 4-7. */
struct bf16_sum {
    float32x4_t low, high;
};

/* Adds the products of 8 elements of a and b to s, fused. */
static ALWAYS_INLINE void add_eight(struct bf16_sum *s, const uint16_t *a, const uint16_t *b) {
    uint16x8_t va = vld1q_u16(a), vb = vld1q_u16(b);
    float32x4_t a_low = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(va), 16));
    float32x4_t a_high = vreinterpretq_f32_u32(vshll_high_n_u16(va, 16));
    float32x4_t b_low = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(vb), 16));
    float32x4_t b_high = vreinterpretq_f32_u32(vshll_high_n_u16(vb, 16));
    s->low = vfmaq_f32(s->low, a_low, b_low);
    s->high = vfmaq_f32(s->high, a_high, b_high);
}

float tensor_row_dot_bf16_neon(const void *w, const void *x, int n) {
    const uint16_t *a = w, *b = x;
    struct bf16_sum acc[4];
    for (int k = 0; k < 4; k++) acc[k] = (struct bf16_sum){vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    int i = 0;
    for (; i + 32 <= n; i += 32)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) add_eight(&acc[k], a + i + 8 * k, b + i + 8 * k);
    for (int k = 0; i + 8 <= n; i += 8, k++) add_eight(&acc[k], a + i, b + i);
    float sum = sum_lanes_neon(
        vaddq_f32(vaddq_f32(acc[0].low, acc[1].low), vaddq_f32(acc[2].low, acc[3].low)),
        vaddq_f32(vaddq_f32(acc[0].high, acc[1].high), vaddq_f32(acc[2].high, acc[3].high)));
    for (; i < n; i++) sum = sum + tensor_bf16_to_fp32(a[i]) * tensor_bf16_to_fp32(b[i]);
    return sum;
}
