/* quants_legacy_neon.h -- the Q4_1, Q5_0, Q5_1 and IQ4_NL row dots of the
 * NEON and dotprod tables, written once over a dot4_fn (quants_neon.h)
 * and instantiated by quants_legacy_neon.c and quants_legacy_dotprod.c.
 *
 * The order is the scalar reference's (quants_legacy.c): per block of 32,
 * 8 exact integer lane sums (lane l: elements 4l .. 4l + 3, so lanes 0-3
 * come from the low nibbles and 4-7 from the high ones), each fused times
 * the block's d_w * d_x into float lane l of the even or the odd blocks'
 * lanes; the two sets added lane by lane, then the lane tree. Q4_1 / Q5_1
 * add m_w * s_x into one more sum, a block pair at a time. */
#ifndef LOCKSTEP_TENSOR_QUANTS_LEGACY_NEON_H
#define LOCKSTEP_TENSOR_QUANTS_LEGACY_NEON_H

#include "quants_neon.h"

#include <string.h>

/* A block's 32 weights as signed bytes: elements 0-15 and 16-31. */
struct legacy_quants {
    int8x16_t low, high;
};

/* Unpacks the quants of block k of a row. */
typedef struct legacy_quants (*legacy_unpack_fn)(const void *w, int k);

/* The 32 nibbles of qs: byte j holds element j (low) and j + 16 (high). */
static ALWAYS_INLINE struct legacy_quants unpack_nibbles(const uint8_t *qs) {
    uint8x16_t bytes = vld1q_u8(qs);
    return (struct legacy_quants){vreinterpretq_s8_u8(vandq_u8(bytes, vdupq_n_u8(15))),
                                  vreinterpretq_s8_u8(vshrq_n_u8(bytes, 4))};
}

/* The nibbles plus the fifth bits of qh (bit i for element i, as 16). */
static ALWAYS_INLINE struct legacy_quants unpack_q5(const uint8_t *qs, const uint8_t *qh) {
    static const uint8_t bit_of[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bits = vld1q_u8(bit_of), sixteen = vdupq_n_u8(16);
    struct legacy_quants q = unpack_nibbles(qs);
    /* byte i of a vector takes qh byte i / 8 and tests bit i % 8 of it */
    uint8x16_t first = vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1]));
    uint8x16_t second = vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3]));
    q.low = vorrq_s8(q.low, vreinterpretq_s8_u8(vandq_u8(vtstq_u8(first, bits), sixteen)));
    q.high = vorrq_s8(q.high, vreinterpretq_s8_u8(vandq_u8(vtstq_u8(second, bits), sixteen)));
    return q;
}

/* The even and odd blocks' float lanes (struct legacy_lanes in
 * quants_legacy.c), lanes 0-3 and 4-7 of each. */
struct legacy_lanes {
    float32x4_t even_low, even_high, odd_low, odd_high;
};

/* Block k (quants q, activation quants x) fused times scale into its
 * lanes: add_block_lanes in quants_legacy.c. */
static ALWAYS_INLINE void add_block_lanes(struct legacy_lanes *lanes, int k, struct legacy_quants q,
                                          const int8_t *x, float scale, dot4_fn dot4) {
    float32x4_t s = vdupq_n_f32(scale);
    float32x4_t low = vcvtq_f32_s32(dot4(q.low, vld1q_s8(x)));
    float32x4_t high = vcvtq_f32_s32(dot4(q.high, vld1q_s8(x + 16)));
    if (k % 2) {
        lanes->odd_low = vfmaq_f32(lanes->odd_low, s, low);
        lanes->odd_high = vfmaq_f32(lanes->odd_high, s, high);
    } else {
        lanes->even_low = vfmaq_f32(lanes->even_low, s, low);
        lanes->even_high = vfmaq_f32(lanes->even_high, s, high);
    }
}

static ALWAYS_INLINE struct legacy_lanes legacy_lanes_zero(void) {
    float32x4_t zero = vdupq_n_f32(0.0f);
    return (struct legacy_lanes){zero, zero, zero, zero};
}

/* The even and odd lanes added lane by lane, then the lane tree. */
static ALWAYS_INLINE float legacy_lanes_total(const struct legacy_lanes *lanes) {
    return sum_lanes_neon(vaddq_f32(lanes->even_low, lanes->odd_low),
                          vaddq_f32(lanes->even_high, lanes->odd_high));
}

/* Q5_0 / IQ4_NL: weight blocks of block_bytes that start with an fp16
 * d_w, against Q8_0 activations. */
static ALWAYS_INLINE float row_dot_q8_0_input(const void *w, size_t block_bytes, const void *x,
                                              int n, legacy_unpack_fn unpack, dot4_fn dot4) {
    const struct tensor_block_q8_0 *b = x;
    struct legacy_lanes lanes = legacy_lanes_zero();
    for (int k = 0; k < n / TENSOR_QK; k++) {
        uint16_t d;
        memcpy(&d, (const char *)w + (size_t)k * block_bytes, sizeof(d));
        float scale = fp16_neon(d) * fp16_neon(b[k].d);
        add_block_lanes(&lanes, k, unpack(w, k), b[k].qs, scale, dot4);
    }
    return legacy_lanes_total(&lanes);
}

/* Q4_1 / Q5_1: weight blocks of block_bytes that start with fp16 d_w and
 * m_w, against Q8_1 activations; the minimums' sum takes m_w * s_x a
 * block pair at a time, sum + (m_k + m_k+1), and a last odd block alone
 * (dot_with_mins in quants_legacy.c). */
static ALWAYS_INLINE float row_dot_q8_1_input(const void *w, size_t block_bytes, const void *x,
                                              int n, legacy_unpack_fn unpack, dot4_fn dot4) {
    const struct tensor_block_q8_1 *b = x;
    struct legacy_lanes lanes = legacy_lanes_zero();
    float mins = 0.0f, pair = 0.0f;
    int blocks = n / TENSOR_QK;
    for (int k = 0; k < blocks; k++) {
        uint16_t dm[2];
        memcpy(dm, (const char *)w + (size_t)k * block_bytes, sizeof(dm));
        float d = fp16_neon(dm[0]) * fp16_neon(b[k].d);
        float m = fp16_neon(dm[1]) * fp16_neon(b[k].s);
        add_block_lanes(&lanes, k, unpack(w, k), b[k].qs, d, dot4);
        if (k % 2 == 0 && k + 1 < blocks)
            pair = m;
        else
            mins = mins + (k % 2 ? pair + m : m);
    }
    return legacy_lanes_total(&lanes) + mins;
}

static ALWAYS_INLINE struct legacy_quants unpack_q4_1_block(const void *w, int k) {
    return unpack_nibbles(((const struct tensor_block_q4_1 *)w)[k].qs);
}

static ALWAYS_INLINE struct legacy_quants unpack_q5_1_block(const void *w, int k) {
    const struct tensor_block_q5_1 *b = (const struct tensor_block_q5_1 *)w + k;
    return unpack_q5(b->qs, b->qh);
}

/* Q5_0's quants less 16 (-16..15). */
static ALWAYS_INLINE struct legacy_quants unpack_q5_0_block(const void *w, int k) {
    const struct tensor_block_q5_0 *b = (const struct tensor_block_q5_0 *)w + k;
    struct legacy_quants q = unpack_q5(b->qs, b->qh);
    return (struct legacy_quants){vsubq_s8(q.low, vdupq_n_s8(16)),
                                  vsubq_s8(q.high, vdupq_n_s8(16))};
}

/* IQ4_NL's nibbles looked up in the 16 values (tbl). */
static ALWAYS_INLINE struct legacy_quants unpack_iq4_nl_block(const void *w, int k) {
    const int8x16_t values = vld1q_s8(tensor_iq4_values);
    struct legacy_quants q = unpack_nibbles(((const struct tensor_block_iq4_nl *)w)[k].qs);
    return (struct legacy_quants){vqtbl1q_s8(values, vreinterpretq_u8_s8(q.low)),
                                  vqtbl1q_s8(values, vreinterpretq_u8_s8(q.high))};
}

static ALWAYS_INLINE float row_dot_q4_1(const void *w, const void *x, int n, dot4_fn dot4) {
    return row_dot_q8_1_input(w, sizeof(struct tensor_block_q4_1), x, n, unpack_q4_1_block, dot4);
}

static ALWAYS_INLINE float row_dot_q5_1(const void *w, const void *x, int n, dot4_fn dot4) {
    return row_dot_q8_1_input(w, sizeof(struct tensor_block_q5_1), x, n, unpack_q5_1_block, dot4);
}

static ALWAYS_INLINE float row_dot_q5_0(const void *w, const void *x, int n, dot4_fn dot4) {
    return row_dot_q8_0_input(w, sizeof(struct tensor_block_q5_0), x, n, unpack_q5_0_block, dot4);
}

static ALWAYS_INLINE float row_dot_iq4_nl(const void *w, const void *x, int n, dot4_fn dot4) {
    return row_dot_q8_0_input(w, sizeof(struct tensor_block_iq4_nl), x, n, unpack_iq4_nl_block,
                              dot4);
}

#endif
