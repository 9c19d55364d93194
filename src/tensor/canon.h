/* canon.h -- the pieces of the canonical float order that the scalar
 * reference kernels share (ops.c, matmul_scalar.c, types.c, quants_*.c).
 *
 * The scalar kernels define one floating-point reduction order, that of
 * the AVX2 kernels, written out lane by lane in plain C: 8 lanes where
 * AVX2 keeps a vector of 8 sums, fmaf where AVX2 fuses, a separate
 * multiply and add where it does not, and the same fixed tree to add the
 * lanes. Any instruction set that performs these operations in this order
 * (any SIMD kernel tested bit-equal to the scalar one) gives the bits an
 * x86 host gives. The build passes -ffp-contract=off, so the compiler
 * fuses nothing the source does not. Nothing outside src/tensor includes
 * this header. */
#ifndef LOCKSTEP_TENSOR_CANON_H
#define LOCKSTEP_TENSOR_CANON_H

#include <math.h>
#include <stdint.h>

#include "tensor_internal.h"

/* Float lanes of one AVX2 vector. */
#define CANON_LANES 8

/* The sum of 8 lanes by AVX2's fixed tree: (l, l + 4), then (l, l + 2),
 * then (0, 1), i.e. ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). */
static inline float canon_sum_lanes(const float v[CANON_LANES]) {
    float s0 = v[0] + v[4], s1 = v[1] + v[5], s2 = v[2] + v[6], s3 = v[3] + v[7];
    return (s0 + s2) + (s1 + s3);
}

/* x86's maxps / minps on one lane: a if a > b (a < b), else b; so b when
 * either is a NaN, and b when both are zeros of either sign. */
static inline float canon_max(float a, float b) {
    return a > b ? a : b;
}
static inline float canon_min(float a, float b) {
    return a < b ? a : b;
}

/* The maximum of 8 lanes by the same tree as canon_sum_lanes. */
static inline float canon_max_lanes(const float v[CANON_LANES]) {
    float m0 = canon_max(v[0], v[4]), m1 = canon_max(v[1], v[5]);
    float m2 = canon_max(v[2], v[6]), m3 = canon_max(v[3], v[7]);
    return canon_max(canon_max(m0, m2), canon_max(m1, m3));
}

/* x86's truncating conversion of a float to int32 (cvttps2dq): INT32_MIN
 * for NaN and for values out of range, where C leaves it undefined. */
static inline int32_t canon_truncate(float v) {
    if (v >= -2147483648.0f && v < 2147483648.0f) return (int32_t)v;
    return INT32_MIN;
}

/* One Q8_0 block of 32 floats as every quantizer of activations makes it
 * (the AVX2 order, tensor_quantize_x_avx2): the largest magnitude by
 * lanes (element i in lane i % 8, canon_max, then the lane tree), scale =
 * max / 127, quants roundf(x * (1 / scale)) (0 for a zero scale) truncated
 * as cvttps2dq does and saturated to int8 as the packs do. Gives the
 * fp32 scale (before its rounding to fp16), and the sum of the quants
 * before saturation (wrapping, as vpaddd does). Defined in types.c. */
float tensor_canon_quantize_block_q8_0(int8_t qs[TENSOR_QK], int32_t *sum, const float *x);

#endif
