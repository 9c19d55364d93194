/* quants_k_low_neon.h -- the Q2_K, Q3_K and IQ4_XS row dots of the NEON
 * and dotprod tables, written once over a dot4_fn (quants_neon.h) and
 * instantiated by quants_k_low_neon.c and quants_k_low_dotprod.c.
 *
 * The order is the scalar references' (quants_k_low.c, quants_iq4_xs.c):
 * per super-block, 8 exact integer lane sums, lane l the elements e with
 * e % 32 in 4l .. 4l + 3 times their group scale (so each run of 32
 * elements gives lanes 0-3 from its first 16 and 4-7 from its last 16),
 * each fused times d = d_x * d_w into float lane l (Q2_K: then its
 * minimums' lane fused times -dmin), the 8 float lanes as two
 * float32x4_t; at the end, the lane tree. */
#ifndef LOCKSTEP_TENSOR_QUANTS_K_LOW_NEON_H
#define LOCKSTEP_TENSOR_QUANTS_K_LOW_NEON_H

#include "quants_neon.h"

/* Exact integer lanes of one super-block: lanes 0-3 and 4-7. */
struct int_lanes {
    int32x4_t low, high;
};

/* Adds run r of 32 elements (weight quants q0 for its first 16, q1 for
 * its last 16, whose group scales are s0 and s1) with the activation
 * quants x of the run to the lanes. */
static ALWAYS_INLINE void add_run(struct int_lanes *sums, int8x16_t q0, int8x16_t q1, int32_t s0,
                                  int32_t s1, const int8_t *x, dot4_fn dot4) {
    sums->low = vmlaq_n_s32(sums->low, dot4(q0, vld1q_s8(x)), s0);
    sums->high = vmlaq_n_s32(sums->high, dot4(q1, vld1q_s8(x + 16)), s1);
}

/* sum_g c_g * bsum_g for the group pairs (2l, 2l + 1) in lane l: the
 * 16 coefficients c_g (at most 15 bits) times the 16-sums of x. */
static ALWAYS_INLINE struct int_lanes pair_sums(int16x8_t c_low, int16x8_t c_high,
                                                const int16_t *bsums) {
    int16x8_t b_low = vld1q_s16(bsums), b_high = vld1q_s16(bsums + 8);
    int32x4_t p0 = vmull_s16(vget_low_s16(c_low), vget_low_s16(b_low));
    int32x4_t p1 = vmull_high_s16(c_low, b_low);
    int32x4_t p2 = vmull_s16(vget_low_s16(c_high), vget_low_s16(b_high));
    int32x4_t p3 = vmull_high_s16(c_high, b_high);
    return (struct int_lanes){vpaddq_s32(p0, p1), vpaddq_s32(p2, p3)};
}

/* The 2-bit fields of run r (elements 32r .. 32r + 31) of a Q2_K / Q3_K
 * super-block: bits 2 (r % 4) .. of the 32 bytes qs[32 (r / 4) ..], a
 * byte holding four elements 32 apart. */
static ALWAYS_INLINE void low_bits(uint8x16_t *q0, uint8x16_t *q1, const uint8_t *qs, int r) {
    const int8x16_t shift = vdupq_n_s8((int8_t)(-2 * (r % 4)));
    const uint8x16_t three = vdupq_n_u8(3);
    *q0 = vandq_u8(vshlq_u8(vld1q_u8(qs + 32 * (r / 4)), shift), three);
    *q1 = vandq_u8(vshlq_u8(vld1q_u8(qs + 32 * (r / 4) + 16), shift), three);
}

/* ---- Q2_K ---- */

static ALWAYS_INLINE float row_dot_q2_k(const void *w, const void *x, int n, dot4_fn dot4) {
    const struct tensor_block_q2_k *wb = w;
    const struct tensor_block_q8_k *xb = x;
    float32x4_t acc_low = vdupq_n_f32(0.0f), acc_high = vdupq_n_f32(0.0f);
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        const uint8_t *scales = wb[b].scales;
        struct int_lanes sums = {vdupq_n_s32(0), vdupq_n_s32(0)};
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            uint8x16_t q0, q1;
            low_bits(&q0, &q1, wb[b].qs, r);
            add_run(&sums, vreinterpretq_s8_u8(q0), vreinterpretq_s8_u8(q1), scales[2 * r] & 15,
                    scales[2 * r + 1] & 15, xb[b].qs + 32 * r, dot4);
        }
        /* the minimums: the high nibbles of the scales */
        uint8x16_t m = vshrq_n_u8(vld1q_u8(scales), 4);
        struct int_lanes mins = pair_sums(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(m))),
                                          vreinterpretq_s16_u16(vmovl_high_u8(m)), xb[b].bsums);
        float32x4_t d = vdupq_n_f32(xb[b].d * fp16_neon(wb[b].d));
        float32x4_t neg_dmin = vdupq_n_f32(-(xb[b].d * fp16_neon(wb[b].dmin)));
        acc_low = vfmaq_f32(acc_low, d, vcvtq_f32_s32(sums.low));
        acc_high = vfmaq_f32(acc_high, d, vcvtq_f32_s32(sums.high));
        acc_low = vfmaq_f32(acc_low, neg_dmin, vcvtq_f32_s32(mins.low));
        acc_high = vfmaq_f32(acc_high, neg_dmin, vcvtq_f32_s32(mins.high));
    }
    return sum_lanes_neon(acc_low, acc_high);
}

/* ---- Q3_K ---- */

/* The 16 group scales (-32..31) out of their 12 packed bytes: the low
 * four bits of scale j in byte j % 8 (low nibble for j < 8), the high
 * two in byte 8 + j % 4 at bit 2 (j / 4); stored plus 32. */
static ALWAYS_INLINE void q3_k_scales(int16_t *scales, const uint8_t *packed) {
    for (int j = 0; j < 16; j++) {
        int low = (packed[j % 8] >> (4 * (j / 8))) & 15;
        int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        scales[j] = (int16_t)((low | high << 4) - 32);
    }
}

static ALWAYS_INLINE float row_dot_q3_k(const void *w, const void *x, int n, dot4_fn dot4) {
    const struct tensor_block_q3_k *wb = w;
    const struct tensor_block_q8_k *xb = x;
    float32x4_t acc_low = vdupq_n_f32(0.0f), acc_high = vdupq_n_f32(0.0f);
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        int16_t scales[16];
        q3_k_scales(scales, wb[b].scales);
        uint8x16_t h0 = vld1q_u8(wb[b].hmask), h1 = vld1q_u8(wb[b].hmask + 16);
        struct int_lanes sums = {vdupq_n_s32(0), vdupq_n_s32(0)};
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            /* the quants plus 4 (0..7): run r's high bits are bit r of hmask */
            uint8x16_t q0, q1;
            low_bits(&q0, &q1, wb[b].qs, r);
            q0 = vorrq_u8(q0, bit_as(h0, r, 4));
            q1 = vorrq_u8(q1, bit_as(h1, r, 4));
            add_run(&sums, vreinterpretq_s8_u8(q0), vreinterpretq_s8_u8(q1), scales[2 * r],
                    scales[2 * r + 1], xb[b].qs + 32 * r, dot4);
        }
        /* the 4 the quants were raised by: 4 * scale_g * bsum_g, by lane */
        struct int_lanes bias = pair_sums(vld1q_s16(scales), vld1q_s16(scales + 8), xb[b].bsums);
        float32x4_t d = vdupq_n_f32(fp16_neon(wb[b].d) * xb[b].d);
        int32x4_t low = vsubq_s32(sums.low, vshlq_n_s32(bias.low, 2));
        int32x4_t high = vsubq_s32(sums.high, vshlq_n_s32(bias.high, 2));
        acc_low = vfmaq_f32(acc_low, d, vcvtq_f32_s32(low));
        acc_high = vfmaq_f32(acc_high, d, vcvtq_f32_s32(high));
    }
    return sum_lanes_neon(acc_low, acc_high);
}

/* ---- IQ4_XS ---- */

static ALWAYS_INLINE float row_dot_iq4_xs(const void *w, const void *x, int n, dot4_fn dot4) {
    const struct tensor_block_iq4_xs *wb = w;
    const struct tensor_block_q8_k *xb = x;
    const int8x16_t values = vld1q_s8(tensor_iq4_values);
    float32x4_t acc_low = vdupq_n_f32(0.0f), acc_high = vdupq_n_f32(0.0f);
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        struct int_lanes sums = {vdupq_n_s32(0), vdupq_n_s32(0)};
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            /* group g: 16 bytes, elements 0-15 in their low nibbles and
             * 16-31 in their high ones; its scale stored plus 32, low four
             * bits in a nibble of scales_l, high two in scales_h */
            uint8x16_t bytes = vld1q_u8(wb[b].qs + 16 * g);
            int8x16_t q0 = vqtbl1q_s8(values, vandq_u8(bytes, vdupq_n_u8(15)));
            int8x16_t q1 = vqtbl1q_s8(values, vshrq_n_u8(bytes, 4));
            int low = (wb[b].scales_l[g / 2] >> (4 * (g % 2))) & 15;
            int high = (wb[b].scales_h >> (2 * g)) & 3;
            int32_t scale = (low | high << 4) - 32;
            add_run(&sums, q0, q1, scale, scale, xb[b].qs + 32 * g, dot4);
        }
        float32x4_t d = vdupq_n_f32(fp16_neon(wb[b].d) * xb[b].d);
        acc_low = vfmaq_f32(acc_low, d, vcvtq_f32_s32(sums.low));
        acc_high = vfmaq_f32(acc_high, d, vcvtq_f32_s32(sums.high));
    }
    return sum_lanes_neon(acc_low, acc_high);
}

#endif
