/* quants_neon.h -- what the arm64 row dots of the quantized types share
 * (quants_k_neon.h, quants_k_low_neon.h, quants_legacy_neon.h): the exact
 * integer dot of 16 byte pairs in four 32-bit lanes, one per set, the
 * fp16 scales, and the float lanes' tree.
 *
 * The row dots are written once, in those headers, over a dot4_fn; each
 * *_neon.c / *_dotprod.c instantiates them with its set's dot4 (the
 * function is always inlined, so each file's copy uses its own
 * instructions). Integer sums are exact however they are formed, so both
 * sets make the scalar reference's sums; the float steps that follow are
 * the scalar reference's, in its order. Included only by files compiled
 * for arm64. */
#ifndef LOCKSTEP_TENSOR_QUANTS_NEON_H
#define LOCKSTEP_TENSOR_QUANTS_NEON_H

#include "arm.h"

#include <arm_neon.h>

#ifndef ALWAYS_INLINE
#define ALWAYS_INLINE inline __attribute__((always_inline))
#endif

/* Lane l of the result: the sum of a[i] * b[i] for i in 4l .. 4l + 3,
 * exact (the 4-element lanes of every row dot's canonical order). */
typedef int32x4_t (*dot4_fn)(int8x16_t a, int8x16_t b);

/* dot4 with baseline NEON: widening products, then pairs added in 16
 * bits (no weight quant exceeds 127 in magnitude, so a pair is at most
 * 2 * 127 * 128 < 32768) and pairs of pairs widened into 32 bits. */
static ALWAYS_INLINE int32x4_t dot4_neon(int8x16_t a, int8x16_t b) {
    int16x8_t low = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    int16x8_t high = vmull_high_s8(a, b);
    return vpaddlq_s16(vpaddq_s16(low, high));
}

#ifdef __ARM_FEATURE_DOTPROD
/* dot4 with the armv8.2-a dot product: sdot is exactly this. */
static ALWAYS_INLINE int32x4_t dot4_dotprod(int8x16_t a, int8x16_t b) {
    return vdotq_s32(vdupq_n_s32(0), a, b);
}
#endif

/* An fp16 value as a float (fcvt, exact). */
static ALWAYS_INLINE float fp16_neon(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* The canonical tree of 8 float lanes (canon_sum_lanes), lanes 0-3 in
 * low and 4-7 in high: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). */
static ALWAYS_INLINE float sum_lanes_neon(float32x4_t low, float32x4_t high) {
    float32x4_t s = vaddq_f32(low, high);
    float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
    return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}

/* The 16 bytes of v whose bit `bit` is set as `value`, the others 0. */
static ALWAYS_INLINE uint8x16_t bit_as(uint8x16_t v, int bit, uint8_t value) {
    return vandq_u8(vtstq_u8(v, vdupq_n_u8((uint8_t)(1u << bit))), vdupq_n_u8(value));
}

#endif
