/* ops_neon.c -- NEON (armv8-a) versions of the per-row kernels in ops.c
 * and of the activation quantizer.
 *
 * Each performs the scalar reference's float operations in its order
 * (canon.h), so it gives the bits of ops.c and of the x86 kernels: the
 * reductions keep the canonical 8 lane sums as two registers and add them
 * by the lane tree; element-wise ops (exp, SwiGLU, the rope turns, axpy,
 * conversions) go 4 elements a register, their order being per element.
 * A tail shorter than a vector takes the scalar reference's step per
 * element, or zero-filled lanes where that adds nothing. */
#include "ops_neon.h"

#include <math.h>

void tensor_rmsnorm_neon(float *out, const float *x, const float *weight, int n, float eps) {
    struct lanes acc = lanes_zero();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        struct lanes v = load_lanes(x + i);
        acc = fma_lanes(acc, v, v);
    }
    if (i < n) {
        /* zero-filled lanes add +0 to sums that are never -0: nothing */
        struct lanes v = load_lanes_tail(x + i, n - i);
        acc = fma_lanes(acc, v, v);
    }
    float scale = 1.0f / sqrtf(sum_lanes(acc) / (float)n + eps);
    float32x4_t vscale = vdupq_n_f32(scale);
    for (i = 0; i + 4 <= n; i += 4)
        vst1q_f32(out + i, vmulq_f32(vld1q_f32(weight + i), vmulq_f32(vscale, vld1q_f32(x + i))));
    for (; i < n; i++) out[i] = weight[i] * (scale * x[i]);
}

/* v with the lanes past the first n (< 8) zeroed: a tail's share of a sum. */
static ALWAYS_INLINE struct lanes tail_only(struct lanes v, int n) {
    static const uint32_t index[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    uint32x4_t count = vdupq_n_u32((uint32_t)n);
    uint32x4_t low = vcltq_u32(vld1q_u32(index), count);
    uint32x4_t high = vcltq_u32(vld1q_u32(index + 4), count);
    return (struct lanes){vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v.low), low)),
                          vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v.high), high))};
}

void tensor_softmax_neon(float *x, int n) {
    struct lanes lanes_max = {vdupq_n_f32(-__builtin_inff()), vdupq_n_f32(-__builtin_inff())};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        struct lanes v = load_lanes(x + i);
        lanes_max =
            (struct lanes){canon_max4(lanes_max.low, v.low), canon_max4(lanes_max.high, v.high)};
    }
    float max = max_lanes(lanes_max);
    for (; i < n; i++)
        if (x[i] > max) max = x[i];
    float32x4_t vmax = vdupq_n_f32(max);
    struct lanes sum = lanes_zero();
    for (i = 0; i + 8 <= n; i += 8) {
        struct lanes v = load_lanes(x + i);
        struct lanes e = {exp4(vsubq_f32(v.low, vmax)), exp4(vsubq_f32(v.high, vmax))};
        store_lanes(x + i, e);
        sum = add_lanes(sum, e);
    }
    if (i < n) {
        /* zero-filled lanes would add exp(-max): only the tail's lanes add */
        struct lanes v = load_lanes_tail(x + i, n - i);
        struct lanes e = {exp4(vsubq_f32(v.low, vmax)), exp4(vsubq_f32(v.high, vmax))};
        store_lanes_tail(x + i, e, n - i);
        sum = add_lanes(sum, tail_only(e, n - i));
    }
    float inverse = 1.0f / sum_lanes(sum);
    float32x4_t vinverse = vdupq_n_f32(inverse);
    for (i = 0; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_f32(vld1q_f32(x + i), vinverse));
    for (; i < n; i++) x[i] *= inverse;
}

/* The weights of 4 elements (tensor_exp_weights): 0 below the floor. */
static ALWAYS_INLINE float32x4_t weights_of(float32x4_t x, float32x4_t shift, float32x4_t divisor,
                                            float32x4_t floor) {
    uint32x4_t kept = vcgeq_f32(x, floor);
    float32x4_t e = exp4(vdivq_f32(vsubq_f32(x, shift), divisor));
    return vreinterpretq_f32_u32(vandq_u32(kept, vreinterpretq_u32_f32(e)));
}

void tensor_exp_weights_neon(float *out, const float *x, int n, float shift, float divisor,
                             float floor) {
    float32x4_t vshift = vdupq_n_f32(shift), vdivisor = vdupq_n_f32(divisor);
    float32x4_t vfloor = vdupq_n_f32(floor);
    int i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(out + i, weights_of(vld1q_f32(x + i), vshift, vdivisor, vfloor));
    if (i < n) {
        float lanes[4] = {0};
        memcpy(lanes, x + i, sizeof(float) * (size_t)(n - i));
        vst1q_f32(lanes, weights_of(vld1q_f32(lanes), vshift, vdivisor, vfloor));
        memcpy(out + i, lanes, sizeof(float) * (size_t)(n - i));
    }
}

/* silu(gate) * up: (g / (1 + exp(0 - g))) * up. */
static ALWAYS_INLINE float32x4_t swiglu4(float32x4_t gate, float32x4_t up) {
    float32x4_t e = exp4(vsubq_f32(vdupq_n_f32(0.0f), gate));
    return vmulq_f32(vdivq_f32(gate, vaddq_f32(vdupq_n_f32(1.0f), e)), up);
}

void tensor_swiglu_neon(float *out, const float *gate, const float *up, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, swiglu4(vld1q_f32(gate + i), vld1q_f32(up + i)));
    if (i < n) {
        float g[4] = {0}, u[4] = {0};
        memcpy(g, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u, up + i, sizeof(float) * (size_t)(n - i));
        vst1q_f32(g, swiglu4(vld1q_f32(g), vld1q_f32(u)));
        memcpy(out + i, g, sizeof(float) * (size_t)(n - i));
    }
}

/* The turn of 4 pairs (a, b) by their angles: a * c - b * s and
 * a * s + b * c, two products then their difference or sum, unfused, as
 * tensor_rope_turn_head does. */
static ALWAYS_INLINE float32x4x2_t turn4(float32x4_t a, float32x4_t b, float32x4_t c,
                                         float32x4_t s) {
    float32x4x2_t turned = {
        {vsubq_f32(vmulq_f32(a, c), vmulq_f32(b, s)), vaddq_f32(vmulq_f32(a, s), vmulq_f32(b, c))}};
    return turned;
}

/* 4 pairs a round: NEOX's halves are two loads; NORM's neighbours are
 * split and joined again by the interleaving loads and stores (ld2, st2).
 * Returns the first pair left for the scalar tail. */
int tensor_rope_turn_vectors_neon(float *head, int pairs, const float *cosines, const float *sines,
                                  enum tensor_rope_style style) {
    int j = 0;
    for (; j + 4 <= pairs; j += 4) {
        float32x4_t c = vld1q_f32(cosines + j), s = vld1q_f32(sines + j);
        if (style == TENSOR_ROPE_NEOX) {
            float32x4x2_t turned = turn4(vld1q_f32(head + j), vld1q_f32(head + j + pairs), c, s);
            vst1q_f32(head + j, turned.val[0]);
            vst1q_f32(head + j + pairs, turned.val[1]);
        } else {
            float32x4x2_t v = vld2q_f32(head + 2 * j);
            vst2q_f32(head + 2 * j, turn4(v.val[0], v.val[1], c, s));
        }
    }
    return j;
}

/* tensor_dot_scalar's order: four sums of 8 lanes, 32 elements a round,
 * then 8 into sum 0 and the zero-filled tail into sum 1, added as
 * (0 + 1) + (2 + 3), then the lane tree. */
float tensor_dot_neon(const float *a, const float *b, int n) {
    struct lanes acc[4] = {lanes_zero(), lanes_zero(), lanes_zero(), lanes_zero()};
    int i = 0;
    for (; i + 32 <= n; i += 32)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            acc[k] = fma_lanes(acc[k], load_lanes(a + i + 8 * k), load_lanes(b + i + 8 * k));
    for (; i + 8 <= n; i += 8) acc[0] = fma_lanes(acc[0], load_lanes(a + i), load_lanes(b + i));
    if (i < n)
        acc[1] = fma_lanes(acc[1], load_lanes_tail(a + i, n - i), load_lanes_tail(b + i, n - i));
    return sum_lanes(add_lanes(add_lanes(acc[0], acc[1]), add_lanes(acc[2], acc[3])));
}

void tensor_axpy_neon(float *y, float a, const float *x, int n) {
    float32x4_t va = vdupq_n_f32(a);
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, vld1q_f32(x + i)));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

void tensor_scale_neon(float *x, float a, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_n_f32(vld1q_f32(x + i), a));
    for (; i < n; i++) x[i] *= a;
}

/* 8 columns of a dimension-major block from offset at, as floats; the
 * first n and zeros for a block's last columns, never reading past them. */
static ALWAYS_INLINE struct lanes load_columns(const void *columns, enum tensor_type type,
                                               size_t at, int n) {
    if (type == TENSOR_F16) {
        const uint16_t *from = (const uint16_t *)columns + at;
        return n == 8 ? load_halves(from) : load_halves_tail(from, n);
    }
    const float *from = (const float *)columns + at;
    return n == 8 ? load_lanes(from) : load_lanes_tail(from, n);
}

/* sum + q[i] * dimension i of the width (<= 8) columns from r. */
static ALWAYS_INLINE struct lanes add_dimension(struct lanes sum, const float *q,
                                                const void *columns, enum tensor_type type, int i,
                                                int stride, int r, int width) {
    float32x4_t qi = vdupq_n_f32(q[i]);
    struct lanes v = load_columns(columns, type, (size_t)i * (size_t)stride + (size_t)r, width);
    return (struct lanes){vfmaq_f32(sum.low, qi, v.low), vfmaq_f32(sum.high, qi, v.high)};
}

/* One column a lane, eight at a time; the four sums over i mod 4 are four
 * pairs of registers. */
static ALWAYS_INLINE void dot_columns(float *out, const float *q, const void *columns,
                                      enum tensor_type type, int n_rows, int n, int stride) {
    for (int r = 0; r < n_rows; r += 8) {
        int width = n_rows - r < 8 ? n_rows - r : 8;
        struct lanes sums[4] = {lanes_zero(), lanes_zero(), lanes_zero(), lanes_zero()};
        int i = 0;
        for (; i + 4 <= n; i += 4)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                sums[k] = add_dimension(sums[k], q, columns, type, i + k, stride, r, width);
        for (int k = 0; i + k < n; k++)
            sums[k] = add_dimension(sums[k], q, columns, type, i + k, stride, r, width);
        struct lanes total = add_lanes(add_lanes(sums[0], sums[1]), add_lanes(sums[2], sums[3]));
        if (width == 8)
            store_lanes(out + r, total);
        else
            store_lanes_tail(out + r, total, width);
    }
}

void tensor_dot_columns_neon(float *out, const float *q, const void *columns, enum tensor_type type,
                             int n_rows, int n, int stride) {
    if (type == TENSOR_F16)
        dot_columns(out, q, columns, TENSOR_F16, n_rows, n, stride);
    else
        dot_columns(out, q, columns, TENSOR_F32, n_rows, n, stride);
}

/* Key dots by widening multiplies (smull: 16-bit products, exact), pairs
 * added into 32-bit lanes (sadalp): two lanes a key, joined at the end. */
static ALWAYS_INLINE int32x4_t key_dots(const int8x16_t groups[8], const int8_t *query) {
    int32x4_t low = vdupq_n_s32(0), high = vdupq_n_s32(0);
    for (int g = 0; g < 8; g++) {
        int32_t query4;
        memcpy(&query4, query + 4 * g, sizeof(query4));
        int8x16_t q = vreinterpretq_s8_s32(vdupq_n_s32(query4));
        low = vpadalq_s16(low, vmull_s8(vget_low_s8(groups[g]), vget_low_s8(q)));
        high = vpadalq_s16(high, vmull_high_s8(groups[g], q));
    }
    return vpaddq_s32(low, high);
}

void tensor_dot_q8_0_keys_neon(float *out, const struct tensor_q8_0_query *query, const void *keys,
                               int n_rows, int n, int stride) {
    dot_q8_0_keys(out, query, keys, n_rows, n, stride, key_dots);
}

/* Q8_0 rows, one block of 32 columns from i: per row, the weight times
 * the block's scale, then a fused multiply-add per quant (as a float). */
static ALWAYS_INLINE void weighted_sum_q8_0(float *out, const float *weights, const void *rows,
                                            size_t stride, int n_rows, int i) {
    float32x4_t acc[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) acc[k] = vld1q_f32(out + i + 4 * k);
    for (int p = 0; p < n_rows; p++) {
        const struct tensor_block_q8_0 *block =
            tensor_q8_0_block((const char *)rows + (size_t)p * stride, i);
        float32x4_t scaled = vdupq_n_f32(weights[p] * tensor_fp16_to_fp32(block->d));
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            int8x16_t quants = vld1q_s8(block->qs + 16 * h);
            int16x8_t low = vmovl_s8(vget_low_s8(quants)), high = vmovl_high_s8(quants);
            int32x4_t q[4] = {vmovl_s16(vget_low_s16(low)), vmovl_high_s16(low),
                              vmovl_s16(vget_low_s16(high)), vmovl_high_s16(high)};
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                acc[4 * h + k] = vfmaq_f32(acc[4 * h + k], scaled, vcvtq_f32_s32(q[k]));
        }
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) vst1q_f32(out + i + 4 * k, acc[k]);
}

/* 4 elements of an F32 or F16 row from element i, as floats. */
static ALWAYS_INLINE float32x4_t load_row4(const void *row, enum tensor_type type, int i) {
    if (type == TENSOR_F16)
        return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)row + i)));
    return vld1q_f32((const float *)row + i);
}

/* F32 and F16 rows: every element takes one fused multiply-add per row,
 * rows in order, from out's value; 16 columns stay in registers across
 * the rows, then 4, then single elements. */
static ALWAYS_INLINE void weighted_sum(float *out, const float *weights, const void *rows,
                                       enum tensor_type type, int n_rows, int n) {
    size_t stride = tensor_row_bytes(type, n);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        float32x4_t acc[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) acc[k] = vld1q_f32(out + i + 4 * k);
        for (int p = 0; p < n_rows; p++) {
            float32x4_t w = vdupq_n_f32(weights[p]);
            const void *row = (const char *)rows + (size_t)p * stride;
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                acc[k] = vfmaq_f32(acc[k], w, load_row4(row, type, i + 4 * k));
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) vst1q_f32(out + i + 4 * k, acc[k]);
    }
    for (; i + 4 <= n; i += 4) {
        float32x4_t acc = vld1q_f32(out + i);
        for (int p = 0; p < n_rows; p++)
            acc = vfmaq_f32(acc, vdupq_n_f32(weights[p]),
                            load_row4((const char *)rows + (size_t)p * stride, type, i));
        vst1q_f32(out + i, acc);
    }
    for (; i < n; i++)
        for (int p = 0; p < n_rows; p++) {
            const void *row = (const char *)rows + (size_t)p * stride;
            float v = type == TENSOR_F16 ? tensor_fp16_to_fp32(((const uint16_t *)row)[i])
                                         : ((const float *)row)[i];
            out[i] = fmaf(weights[p], v, out[i]);
        }
}

void tensor_weighted_sum_neon(float *out, const float *weights, const void *rows,
                              enum tensor_type type, int n_rows, int n) {
    if (type == TENSOR_Q8_0) {
        size_t stride = tensor_row_bytes(TENSOR_Q8_0, n);
        for (int i = 0; i < n; i += TENSOR_QK)
            weighted_sum_q8_0(out, weights, rows, stride, n_rows, i);
    } else if (type == TENSOR_F16) {
        weighted_sum(out, weights, rows, TENSOR_F16, n_rows, n);
    } else {
        weighted_sum(out, weights, rows, TENSOR_F32, n_rows, n);
    }
}

/* fcvtn rounds to nearest even, overflows to infinity, keeps NaNs quiet
 * with their top payload bits: tensor_fp32_to_fp16's halves. */
void tensor_fp16_from_fp32_neon(uint16_t *out, const float *x, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4)
        vst1_u16(out + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; i++) out[i] = tensor_fp32_to_fp16(x[i]);
}

/* canon_truncate of 4 floats: fcvtzs, but INT32_MIN for NaN and out of
 * range (where fcvtzs gives 0 or saturates). */
static ALWAYS_INLINE int32x4_t truncate4(float32x4_t v) {
    uint32x4_t in_range = vandq_u32(vcgeq_f32(v, vdupq_n_f32(-2147483648.0f)),
                                    vcltq_f32(v, vdupq_n_f32(2147483648.0f)));
    return vbslq_s32(in_range, vcvtq_s32_f32(v), vdupq_n_s32(INT32_MIN));
}

/* tensor_canon_quantize_block_q8_0 a block at a time: the largest
 * magnitude by the 8 lanes and their tree, quants roundf (frinta) of
 * x * (1 / scale) truncated as x86 does and saturated to int8 (sqxtn),
 * the sum of the unsaturated quants wrapping. */
void tensor_quantize_x_neon(int8_t *qs, float *d, int32_t *bias, const float *x, int n,
                            int32_t offset) {
    for (int j = 0; j < n / TENSOR_QK; j++) {
        float32x4_t v[8];
        struct lanes amax = lanes_zero();
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            v[2 * k] = vld1q_f32(x + j * TENSOR_QK + 8 * k);
            v[2 * k + 1] = vld1q_f32(x + j * TENSOR_QK + 8 * k + 4);
            amax.low = canon_max4(amax.low, vabsq_f32(v[2 * k]));
            amax.high = canon_max4(amax.high, vabsq_f32(v[2 * k + 1]));
        }
        float scale = max_lanes(amax) / 127.0f;
        float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
        d[j] = tensor_fp16_to_fp32(tensor_fp32_to_fp16(scale));
        float32x4_t vinverse = vdupq_n_f32(inverse);
        int32x4_t q[8];
        uint32x4_t sum = vdupq_n_u32(0);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            q[k] = truncate4(vrndaq_f32(vmulq_f32(v[k], vinverse)));
            sum = vaddq_u32(sum, vreinterpretq_u32_s32(q[k]));
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            int16x8_t low = vcombine_s16(vqmovn_s32(q[4 * h]), vqmovn_s32(q[4 * h + 1]));
            int16x8_t high = vcombine_s16(vqmovn_s32(q[4 * h + 2]), vqmovn_s32(q[4 * h + 3]));
            vst1q_s8(qs + j * TENSOR_QK + 16 * h, vcombine_s8(vqmovn_s16(low), vqmovn_s16(high)));
        }
        bias[j] = (int32_t)((uint32_t)-offset * vaddvq_u32(sum)); /* wraps, as the scalar one */
    }
}
