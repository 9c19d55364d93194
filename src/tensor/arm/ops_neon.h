/* ops_neon.h -- the vector pieces the arm64 float kernels share (ops_neon.c,
 * ops_dotprod.c, matmul_float_neon.c): the canonical 8 lanes (canon.h) as
 * two registers, lanes 0-3 and 4-7, with the lane tree, x86's maxps and
 * minps, zero-filled tails, exp by exp_steps' operations, and the Q8_0 key
 * dot written once over the integer dot each instruction set gives.
 * Included only by files compiled for arm64. */
#ifndef LOCKSTEP_TENSOR_OPS_NEON_H
#define LOCKSTEP_TENSOR_OPS_NEON_H

#include "quants_neon.h"

#include <string.h>

/* Eight lane sums of the canonical order: lanes 0-3 and 4-7. */
struct lanes {
    float32x4_t low, high;
};

static ALWAYS_INLINE struct lanes lanes_zero(void) {
    return (struct lanes){vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
}

/* The canonical lane tree: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
static ALWAYS_INLINE float sum_lanes(struct lanes v) {
    return sum_lanes_neon(v.low, v.high);
}

/* canon_max and canon_min lane by lane (x86's maxps, minps: b when either
 * is a NaN or both are zeros), which NEON's fmax and fmin are not. */
static ALWAYS_INLINE float32x4_t canon_max4(float32x4_t a, float32x4_t b) {
    return vbslq_f32(vcgtq_f32(a, b), a, b);
}
static ALWAYS_INLINE float32x4_t canon_min4(float32x4_t a, float32x4_t b) {
    return vbslq_f32(vcltq_f32(a, b), a, b);
}
static ALWAYS_INLINE float32x2_t canon_max2(float32x2_t a, float32x2_t b) {
    return vbsl_f32(vcgt_f32(a, b), a, b);
}

/* canon_max_lanes: the maximum of 8 lanes by the lane tree. */
static ALWAYS_INLINE float max_lanes(struct lanes v) {
    float32x4_t m = canon_max4(v.low, v.high);
    float32x2_t t = canon_max2(vget_low_f32(m), vget_high_f32(m));
    float32x2_t top = canon_max2(t, vdup_lane_f32(t, 1));
    return vget_lane_f32(top, 0);
}

static ALWAYS_INLINE struct lanes load_lanes(const float *p) {
    return (struct lanes){vld1q_f32(p), vld1q_f32(p + 4)};
}

/* The n < 8 floats at p, zero-filled to 8 lanes. */
static ALWAYS_INLINE struct lanes load_lanes_tail(const float *p, int n) {
    float lanes[8] = {0};
    memcpy(lanes, p, sizeof(float) * (size_t)n);
    return load_lanes(lanes);
}

/* 8 halves at p as exact floats, and the n < 8 of a tail, zero-filled. */
static ALWAYS_INLINE struct lanes load_halves(const uint16_t *p) {
    float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
    return (struct lanes){vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};
}
static ALWAYS_INLINE struct lanes load_halves_tail(const uint16_t *p, int n) {
    uint16_t halves[8] = {0};
    memcpy(halves, p, sizeof(uint16_t) * (size_t)n);
    return load_halves(halves);
}

static ALWAYS_INLINE void store_lanes(float *p, struct lanes v) {
    vst1q_f32(p, v.low);
    vst1q_f32(p + 4, v.high);
}
static ALWAYS_INLINE void store_lanes_tail(float *p, struct lanes v, int n) {
    float lanes[8];
    store_lanes(lanes, v);
    memcpy(p, lanes, sizeof(float) * (size_t)n);
}

/* sum + a * b, fused, lane by lane. */
static ALWAYS_INLINE struct lanes fma_lanes(struct lanes sum, struct lanes a, struct lanes b) {
    return (struct lanes){vfmaq_f32(sum.low, a.low, b.low), vfmaq_f32(sum.high, a.high, b.high)};
}

static ALWAYS_INLINE struct lanes add_lanes(struct lanes a, struct lanes b) {
    return (struct lanes){vaddq_f32(a.low, b.low), vaddq_f32(a.high, b.high)};
}

/* e^x of 4 floats by exp_steps' operations (ops.c), so its bits: clamp by
 * x86's min and max (a NaN becomes the bound), round to nearest even,
 * fuse where it fuses; +inf above 88, 0 below -87.33. */
static ALWAYS_INLINE float32x4_t exp4(float32x4_t x) {
    const float32x4_t high = vdupq_n_f32(88.0f), low = vdupq_n_f32(-87.33f);
    uint32x4_t overflow = vcgtq_f32(x, high), underflow = vcltq_f32(x, low);
    x = canon_max4(canon_min4(x, high), low);
    float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504f)));
    /* fmaf(-n, c, x) is x - n * c rounded once: fmls */
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.0f / 5040.0f);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 720.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    /* 2^n from its exponent bits: n is in [-126, 127] after the clamp */
    int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    float32x4_t result = vmulq_f32(p, vreinterpretq_f32_s32(bits));
    result = vbslq_f32(overflow, vdupq_n_f32(__builtin_inff()), result);
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(result), underflow));
}

/* ---- Q8_0 keys (tensor.h's layout) ---- */

/* The exact integer dots of 4 keys with one 32-dimension block of the
 * query: groups[g] holds dimensions [4g, 4g + 4) of each key, one key a
 * 32-bit lane; lane k of the result is key k's dot. */
typedef int32x4_t (*key_dots_fn)(const int8x16_t groups[8], const int8_t *query);

/* tensor_dot_q8_0_keys_scalar's values: one key a lane, four at a time,
 * each block's integer dots by dots, then the matmul's float step. Keys
 * past n_rows are zeros, so a block's last keys never read past it. */
static ALWAYS_INLINE void dot_q8_0_keys(float *out, const struct tensor_q8_0_query *query,
                                        const void *keys, int n_rows, int n, int stride,
                                        key_dots_fn dots) {
    const int8_t *quants = keys;
    const uint16_t *scales = (const void *)(quants + (size_t)n * (size_t)stride);
    for (int r = 0; r < n_rows; r += 4) {
        int width = n_rows - r < 4 ? n_rows - r : 4;
        float32x4_t acc = vdupq_n_f32(0.0f);
        for (int j = 0; j < n / TENSOR_QK; j++) {
            int8x16_t groups[8];
            for (int g = 0; g < 8; g++) {
                const int8_t *from =
                    quants + ((size_t)(8 * j + g) * (size_t)stride + (size_t)r) * 4;
                if (width == 4) {
                    groups[g] = vld1q_s8(from);
                    continue;
                }
                int8_t bytes[16] = {0};
                memcpy(bytes, from, 4 * (size_t)width);
                groups[g] = vld1q_s8(bytes);
            }
            uint16_t halves[4] = {0};
            memcpy(halves, scales + (size_t)j * (size_t)stride + (size_t)r,
                   sizeof(uint16_t) * (size_t)width);
            float32x4_t d_w = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(halves)));
            float32x4_t scale = vmulq_f32(d_w, vdupq_n_f32(query->scales[j]));
            int32x4_t dot = dots(groups, query->quants + j * TENSOR_QK);
            acc = vaddq_f32(acc, vmulq_f32(vcvtq_f32_s32(dot), scale));
        }
        float lanes[4];
        vst1q_f32(lanes, acc);
        memcpy(out + r, lanes, sizeof(float) * (size_t)width);
    }
}

#endif
