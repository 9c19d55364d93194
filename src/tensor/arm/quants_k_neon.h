/* quants_k_neon.h -- the Q4_K, Q5_K and Q6_K row dots of the NEON and
 * dotprod tables, written once over a dot4_fn (quants_neon.h) and
 * instantiated by quants_k_neon.c and quants_k_dotprod.c.
 *
 * The order is the scalar reference's (quants_k.c): per super-block, the
 * exact integer lane sums (Q4_K / Q5_K: lane l the sum over the groups of
 * the group scale times the dot of its elements 4l .. 4l + 3, lanes 0-3
 * from each group's first 16 elements and 4-7 from its last 16; the
 * minimum terms in lane g; Q6_K: one sum), then the same unfused float
 * steps, the 8 float lanes as two float32x4_t.
 *
 * A super-block is unpacked once (struct k_unpacked, struct q6_k_unpacked)
 * and then taken with one activation row (the single dot) or with each
 * of TENSOR_DOT_COLUMNS rows in turn (the multi-column dot): the same code
 * per column, so each column has the single dot's bits. */
#ifndef LOCKSTEP_TENSOR_QUANTS_K_NEON_H
#define LOCKSTEP_TENSOR_QUANTS_K_NEON_H

#include "quants_neon.h"

#include <string.h>

#define COLUMNS TENSOR_DOT_COLUMNS

/* Block k of activation row c of a multi-column dot. */
static ALWAYS_INLINE const struct tensor_block_q8_k *column_block(const void *x, size_t x_stride,
                                                                  int c, int k) {
    return (const struct tensor_block_q8_k *)((const char *)x + (size_t)c * x_stride) + k;
}

/* ---- Q4_K / Q5_K ---- */

/* A Q4_K / Q5_K super-block: group g's 32 quants in q[2g] (its elements
 * 0-15) and q[2g + 1] (16-31), its scale, the 8 minimums (lanes 0-3 and
 * 4-7), d_w and dmin_w. */
struct k_unpacked {
    int8x16_t q[16];
    int32_t scales[8];
    int32x4_t mins_low, mins_high;
    float d, dmin;
};

/* The float lanes of a Q4_K / Q5_K row dot (struct k_lanes in quants_k.c). */
struct k_lanes {
    float32x4_t acc_low, acc_high, mins_low, mins_high;
};

/* Scales, minimums and super-block scales of a Q4_K / Q5_K block. The
 * 6-bit codes are unpacked four
 * bytes at a time in general registers (unpack_scale_min in quants_k.c):
 * scales of groups 0-3 in the low 6 bits of bytes 0-3, their minimums in
 * those of bytes 4-7; groups 4-7 keep 4 low bits in the nibbles of bytes
 * 8-11 and their top 2 bits in the spare top bits of bytes 0-7. */
static ALWAYS_INLINE void unpack_k_scales(struct k_unpacked *u, uint16_t d, uint16_t dmin,
                                          const uint8_t *packed) {
    uint32_t w[3];
    memcpy(w, packed, sizeof(w));
    uint64_t scales = (w[0] & 0x3f3f3f3fu) |
                      (uint64_t)((w[2] & 0x0f0f0f0fu) | ((w[0] >> 6) & 0x03030303u) << 4) << 32;
    uint64_t mins = (w[1] & 0x3f3f3f3fu) |
                    (uint64_t)(((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 6) & 0x03030303u) << 4)
                        << 32;
    for (int g = 0; g < 8; g++) u->scales[g] = (int32_t)((scales >> (8 * g)) & 0xff);
    uint16x8_t wide = vmovl_u8(vcreate_u8(mins));
    u->mins_low = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(wide)));
    u->mins_high = vreinterpretq_s32_u32(vmovl_u16(vget_high_u16(wide)));
    u->d = fp16_neon(d);
    u->dmin = fp16_neon(dmin);
}

/* A Q4_K super-block's nibbles: chunk c's 32 bytes hold group 2c in their
 * low nibbles and group 2c + 1 in their high ones. */
static ALWAYS_INLINE void unpack_q4_k_quants(struct k_unpacked *u, const uint8_t *qs) {
    const uint8x16_t low4 = vdupq_n_u8(15);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        uint8x16_t first = vld1q_u8(qs + 32 * c), second = vld1q_u8(qs + 32 * c + 16);
        u->q[4 * c] = vreinterpretq_s8_u8(vandq_u8(first, low4));
        u->q[4 * c + 1] = vreinterpretq_s8_u8(vandq_u8(second, low4));
        u->q[4 * c + 2] = vreinterpretq_s8_u8(vshrq_n_u8(first, 4));
        u->q[4 * c + 3] = vreinterpretq_s8_u8(vshrq_n_u8(second, 4));
    }
}

/* Adds Q5_K's fifth bits: group g's are bit g of the 32 qh bytes. */
static ALWAYS_INLINE void add_q5_k_bits(struct k_unpacked *u, const uint8_t *qh) {
    uint8x16_t first = vld1q_u8(qh), second = vld1q_u8(qh + 16);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        u->q[2 * g] = vorrq_s8(u->q[2 * g], vreinterpretq_s8_u8(bit_as(first, g, 16)));
        u->q[2 * g + 1] = vorrq_s8(u->q[2 * g + 1], vreinterpretq_s8_u8(bit_as(second, g, 16)));
    }
}

/* Adds an unpacked super-block with activations x to the lanes, as
 * add_k_block in quants_k.c: acc + d * S_l, mins + dmin * (min_g times
 * the group's two 16-sums), d and dmin d_x times the block's. */
static ALWAYS_INLINE void add_k_block(struct k_lanes *lanes, const struct k_unpacked *u,
                                      const struct tensor_block_q8_k *x, dot4_fn dot4) {
    int32x4_t low = vdupq_n_s32(0), high = vdupq_n_s32(0);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        low = vmlaq_n_s32(low, dot4(u->q[2 * g], vld1q_s8(x->qs + 32 * g)), u->scales[g]);
        high =
            vmlaq_n_s32(high, dot4(u->q[2 * g + 1], vld1q_s8(x->qs + 32 * g + 16)), u->scales[g]);
    }
    int32x4_t mins_low = vmulq_s32(u->mins_low, vpaddlq_s16(vld1q_s16(x->bsums)));
    int32x4_t mins_high = vmulq_s32(u->mins_high, vpaddlq_s16(vld1q_s16(x->bsums + 8)));
    float32x4_t d = vdupq_n_f32(x->d * u->d), dmin = vdupq_n_f32(x->d * u->dmin);
    lanes->acc_low = vaddq_f32(lanes->acc_low, vmulq_f32(d, vcvtq_f32_s32(low)));
    lanes->acc_high = vaddq_f32(lanes->acc_high, vmulq_f32(d, vcvtq_f32_s32(high)));
    lanes->mins_low = vaddq_f32(lanes->mins_low, vmulq_f32(dmin, vcvtq_f32_s32(mins_low)));
    lanes->mins_high = vaddq_f32(lanes->mins_high, vmulq_f32(dmin, vcvtq_f32_s32(mins_high)));
}

static ALWAYS_INLINE struct k_lanes k_lanes_zero(void) {
    float32x4_t zero = vdupq_n_f32(0.0f);
    return (struct k_lanes){zero, zero, zero, zero};
}

/* k_lanes_total of quants_k.c: t_l = acc_l - mins_l, then the lane tree. */
static ALWAYS_INLINE float k_lanes_total(const struct k_lanes *lanes) {
    return sum_lanes_neon(vsubq_f32(lanes->acc_low, lanes->mins_low),
                          vsubq_f32(lanes->acc_high, lanes->mins_high));
}

/* Super-block k of a Q4_K (q5 = 0) or Q5_K (q5 = 1) row, unpacked. */
static ALWAYS_INLINE void unpack_k_block(struct k_unpacked *u, const void *w, int k, int q5) {
    if (q5) {
        const struct tensor_block_q5_k *b = (const struct tensor_block_q5_k *)w + k;
        unpack_k_scales(u, b->d, b->dmin, b->scales);
        unpack_q4_k_quants(u, b->qs);
        add_q5_k_bits(u, b->qh);
    } else {
        const struct tensor_block_q4_k *b = (const struct tensor_block_q4_k *)w + k;
        unpack_k_scales(u, b->d, b->dmin, b->scales);
        unpack_q4_k_quants(u, b->qs);
    }
}

static ALWAYS_INLINE float row_dot_k(const void *w, const void *x, int n, int q5, dot4_fn dot4) {
    const struct tensor_block_q8_k *a = x;
    struct k_lanes lanes = k_lanes_zero();
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        struct k_unpacked u;
        unpack_k_block(&u, w, k, q5);
        add_k_block(&lanes, &u, &a[k], dot4);
    }
    return k_lanes_total(&lanes);
}

static ALWAYS_INLINE void row_dots_k(float *out, const void *w, const void *x, size_t x_stride,
                                     int n, int q5, dot4_fn dot4) {
    struct k_lanes lanes[COLUMNS];
    for (int c = 0; c < COLUMNS; c++) lanes[c] = k_lanes_zero();
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        struct k_unpacked u;
        unpack_k_block(&u, w, k, q5);
        for (int c = 0; c < COLUMNS; c++)
            add_k_block(&lanes[c], &u, column_block(x, x_stride, c, k), dot4);
    }
    for (int c = 0; c < COLUMNS; c++) out[c] = k_lanes_total(&lanes[c]);
}

/* ---- Q6_K ---- */

/* A Q6_K super-block: group g's 16 quants less 32 in q[g] (-32..31), its
 * scale, and d_w. */
struct q6_k_unpacked {
    int8x16_t q[16];
    int32_t scales[16];
    float d;
};

/* Half h of a Q6_K super-block (groups 8h .. 8h + 7): 64 ql bytes, whose
 * low nibbles are the half's elements 0-63 and high nibbles 64-127, and
 * 32 qh bytes, whose bit pairs 0-1, 2-3, 4-5, 6-7 are the top bits of
 * elements 0-31, 32-63, 64-95, 96-127. */
static ALWAYS_INLINE void unpack_q6_k_half(struct q6_k_unpacked *u, int h, const uint8_t *ql,
                                           const uint8_t *qh) {
    const uint8x16_t low4 = vdupq_n_u8(15), top2 = vdupq_n_u8(0x30);
    const int8x16_t offset = vdupq_n_s8(32);
    uint8x16_t l[4] = {vld1q_u8(ql), vld1q_u8(ql + 16), vld1q_u8(ql + 32), vld1q_u8(ql + 48)};
    uint8x16_t t[2] = {vld1q_u8(qh), vld1q_u8(qh + 16)};
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        /* elements 16i + (0..15) of each run of 32 */
        uint8x16_t q[4] = {
            vorrq_u8(vandq_u8(l[i], low4), vandq_u8(vshlq_n_u8(t[i], 4), top2)),
            vorrq_u8(vandq_u8(l[i + 2], low4), vandq_u8(vshlq_n_u8(t[i], 2), top2)),
            vorrq_u8(vshrq_n_u8(l[i], 4), vandq_u8(t[i], top2)),
            vorrq_u8(vshrq_n_u8(l[i + 2], 4), vandq_u8(vshrq_n_u8(t[i], 2), top2)),
        };
#pragma GCC unroll 4
        for (int run = 0; run < 4; run++)
            u->q[8 * h + 2 * run + i] = vsubq_s8(vreinterpretq_s8_u8(q[run]), offset);
    }
}

static ALWAYS_INLINE void unpack_q6_k(struct q6_k_unpacked *u, const struct tensor_block_q6_k *b) {
    unpack_q6_k_half(u, 0, b->ql, b->qh);
    unpack_q6_k_half(u, 1, b->ql + 64, b->qh + 32);
    for (int g = 0; g < 16; g++) u->scales[g] = (int32_t)b->scales[g]; /* signed scales */
    u->d = fp16_neon(b->d);
}

/* Adds an unpacked super-block with activations x to acc as
 * tensor_row_dot_q6_k_scalar does: acc + (d_x * d_w) * sum_g scale_g * dot_g. */
static ALWAYS_INLINE float add_q6_k_block(float acc, const struct q6_k_unpacked *u,
                                          const struct tensor_block_q8_k *x, dot4_fn dot4) {
    int32x4_t sums = vdupq_n_s32(0);
#pragma GCC unroll 16
    for (int g = 0; g < 16; g++)
        sums = vmlaq_n_s32(sums, dot4(u->q[g], vld1q_s8(x->qs + 16 * g)), u->scales[g]);
    float scale = x->d * u->d;
    float term = scale * (float)vaddvq_s32(sums);
    return acc + term;
}

static ALWAYS_INLINE float row_dot_q6_k(const void *w, const void *x, int n, dot4_fn dot4) {
    const struct tensor_block_q6_k *b = w;
    const struct tensor_block_q8_k *a = x;
    float acc = 0.0f;
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        struct q6_k_unpacked u;
        unpack_q6_k(&u, &b[k]);
        acc = add_q6_k_block(acc, &u, &a[k], dot4);
    }
    return acc;
}

static ALWAYS_INLINE void row_dots_q6_k(float *out, const void *w, const void *x, size_t x_stride,
                                        int n, dot4_fn dot4) {
    const struct tensor_block_q6_k *b = w;
    for (int c = 0; c < COLUMNS; c++) out[c] = 0.0f;
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        struct q6_k_unpacked u;
        unpack_q6_k(&u, &b[k]);
        for (int c = 0; c < COLUMNS; c++)
            out[c] = add_q6_k_block(out[c], &u, column_block(x, x_stride, c, k), dot4);
    }
}

#endif
