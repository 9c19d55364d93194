/* quants_k.c -- the k-quants of Q4_K_M / Q5_K_M / Q6_K files: Q4_K, Q5_K
 * and Q6_K (super-blocks of 256 values, ggml's layouts in quants.h):
 * dequantizers, quantizers for `lockstep convert`, and the scalar row dots
 * against Q8_K activations that the AVX2 ones (quants_k_avx2.c) must
 * reproduce.
 *
 * Row dot order (the AVX2 kernels follow it, so both give the same bits).
 * Q4_K / Q5_K keep 8 single-precision lanes acc[l] and mins[l]. For each
 * super-block, in order, with d = d_x * d_w and dmin = d_x * dmin_w:
 * acc[l] = acc[l] + d * (float)S_l, where S_l = sum_g scale_g * (the dot
 * of quants and activations 4l .. 4l + 3 of group g), exact in 32 bits;
 * and mins[l] = mins[l] + dmin * (float)(min_l * (bsum_2l + bsum_2l+1)).
 * The result is the tree ((t0 + t4) + (t2 + t6)) + ((t1 + t5) + (t3 + t7))
 * of t_l = acc[l] - mins[l]. Q6_K adds, per super-block in order,
 * d * (float)(sum_g scale_g * dot_g) to one sum. The integer sums fit 32
 * bits (at most 256 * 63 * 31 * 127 for Q5_K, 256 * 128 * 32 * 127 for
 * Q6_K).
 *
 * Quantizers. llama.cpp's reference (make_qkx2_quants for Q4_K / Q5_K,
 * make_qx_quants for Q6_K) weights each value's error by |x| plus the
 * group's RMS and tries 20 or 19 inverse scales. Here the error is
 * unweighted, the group fit is a few candidate steps around the range
 * followed by least-squares refits, and once the super-block scales round
 * the 6-bit group scales and minimums, the neighbours of each rounded pair
 * are tried too (llama.cpp keeps the nearest). */
#include "tensor_internal.h"

#include <math.h>
#include <string.h>

/* ---- Q4_K / Q5_K: 8 groups of 32 with a 6-bit scale and minimum ---- */

#define GROUPS_K 8 /* groups of 32 in a Q4_K / Q5_K super-block */

/* Group j's scale and minimum out of ggml's 12-byte packing: groups 0-3
 * keep theirs in the low 6 bits of bytes j and j + 4; groups 4-7 keep the
 * low 4 bits in the nibbles of byte j + 4 and the top 2 bits in the spare
 * top bits of bytes j - 4 (scale) and j (minimum). */
static void unpack_scale_min(const uint8_t *packed, int j, int *scale, int *min) {
    if (j < 4) {
        *scale = packed[j] & 63;
        *min = packed[j + 4] & 63;
    } else {
        *scale = (packed[j + 4] & 15) | ((packed[j - 4] >> 6) << 4);
        *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
    }
}

/* The inverse of unpack_scale_min for all 8 groups (values 0..63). */
static void pack_scales_mins(uint8_t *packed, const uint8_t *scales, const uint8_t *mins) {
    for (int j = 0; j < 4; j++) {
        packed[j] = (uint8_t)(scales[j] | ((scales[j + 4] >> 4) << 6));
        packed[j + 4] = (uint8_t)(mins[j] | ((mins[j + 4] >> 4) << 6));
        packed[j + 8] = (uint8_t)((scales[j + 4] & 15) | ((mins[j + 4] & 15) << 4));
    }
}

/* Element i of a Q4_K / Q5_K super-block: in chunk i / 64, the low nibbles
 * of 32 bytes hold its first 32 values and the high nibbles the next 32;
 * a Q5_K fifth bit is bit (i / 32) of qh[i % 32]. */
static int q4_k_nibble(const uint8_t *qs, int i) {
    uint8_t byte = qs[(i / 64) * 32 + i % 32];
    return (i / 32) % 2 ? byte >> 4 : byte & 15;
}

static int q5_k_quant(const struct tensor_block_q5_k *b, int i) {
    return q4_k_nibble(b->qs, i) | (((b->qh[i % 32] >> (i / 32)) & 1) << 4);
}

/* Dequantizes one super-block whose quant i is quant(block, i). */
static void dequantize_k_block(float *out, uint16_t d16, uint16_t dmin16, const uint8_t *scales,
                               const void *block, int (*quant)(const void *, int)) {
    float d = tensor_fp16_to_fp32(d16), dmin = tensor_fp16_to_fp32(dmin16);
    for (int g = 0; g < GROUPS_K; g++) {
        int scale, min;
        unpack_scale_min(scales, g, &scale, &min);
        float step = d * (float)scale, offset = dmin * (float)min;
        for (int l = 0; l < 32; l++)
            out[32 * g + l] = step * (float)quant(block, 32 * g + l) - offset;
    }
}

static int q4_k_quant_of(const void *block, int i) {
    return q4_k_nibble(((const struct tensor_block_q4_k *)block)->qs, i);
}

static int q5_k_quant_of(const void *block, int i) {
    return q5_k_quant(block, i);
}

void tensor_dequantize_q4_k(float *out, const void *blocks, int64_t n) {
    const struct tensor_block_q4_k *b = blocks;
    for (int64_t k = 0; k < n / TENSOR_QK_K; k++)
        dequantize_k_block(out + k * TENSOR_QK_K, b[k].d, b[k].dmin, b[k].scales, &b[k],
                           q4_k_quant_of);
}

void tensor_dequantize_q5_k(float *out, const void *blocks, int64_t n) {
    const struct tensor_block_q5_k *b = blocks;
    for (int64_t k = 0; k < n / TENSOR_QK_K; k++)
        dequantize_k_block(out + k * TENSOR_QK_K, b[k].d, b[k].dmin, b[k].scales, &b[k],
                           q5_k_quant_of);
}

/* Squared error of n values x against step * L - offset with L the
 * nearest level in [0, nmax]; the levels go to L if not NULL. */
static float fit_error(const float *x, int n, int nmax, float step, float offset, uint8_t *L) {
    float err = 0.0f;
    for (int i = 0; i < n; i++) {
        int q = step > 0.0f ? (int)nearbyintf((x[i] + offset) / step) : 0;
        q = q < 0 ? 0 : q > nmax ? nmax : q;
        if (L) L[i] = (uint8_t)q;
        float e = step * (float)q - offset - x[i];
        err += e * e;
    }
    return err;
}

/* Least-squares step and offset (x ~ step * L - offset) for fixed levels,
 * with the offset kept >= 0 as the format stores it; 0 if the levels are
 * all equal. */
static int refit(const float *x, const uint8_t *L, int n, float *step, float *offset) {
    double sl = 0, sl2 = 0, sx = 0, slx = 0;
    for (int i = 0; i < n; i++) {
        sl += L[i];
        sl2 += (double)L[i] * L[i];
        sx += x[i];
        slx += (double)L[i] * x[i];
    }
    double det = n * sl2 - sl * sl;
    if (det <= 0) return 0;
    double a = (n * slx - sl * sx) / det, b = (sx * sl2 - sl * slx) / det;
    if (b > 0) { /* the offset may only lower the values: refit with none */
        b = 0;
        a = slx / sl2;
    }
    if (a <= 0) return 0;
    *step = (float)a;
    *offset = (float)-b;
    return 1;
}

/* Step and offset for one group of n values with levels 0..nmax: the range
 * (down to at most 0) divided into nmax plus a few fractions of a step,
 * each refitted by least squares until the levels settle; the best. */
static void fit_group(const float *x, int n, int nmax, float *best_step, float *best_offset) {
    float lo = 0.0f, hi = x[0];
    for (int i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    *best_step = 0.0f;
    *best_offset = -lo;
    if (hi <= lo) return;
    float best = fit_error(x, n, nmax, 0.0f, -lo, NULL);
    uint8_t L[32];
    for (int k = -4; k <= 4; k++) {
        float step = (hi - lo) / ((float)nmax + 0.25f * (float)k), offset = -lo;
        for (int round = 0; round < 4; round++) {
            float err = fit_error(x, n, nmax, step, offset, L);
            if (err < best) {
                best = err;
                *best_step = step;
                *best_offset = offset;
            }
            if (!refit(x, L, n, &step, &offset)) break;
        }
    }
}

/* The 6-bit code nearest v / unit, clamped. */
static int code6(float v, float unit) {
    int c = unit > 0.0f ? (int)nearbyintf(v / unit) : 0;
    return c < 0 ? 0 : c > 63 ? 63 : c;
}

/* Picks group g's 6-bit scale and minimum under the super-block units d
 * and dmin: the rounded pair and its neighbours, whichever fits best. */
static void choose_codes(const float *x, int nmax, float d, float dmin, float step, float offset,
                         uint8_t *scale, uint8_t *min) {
    int s0 = code6(step, d), m0 = code6(offset, dmin);
    float best = INFINITY;
    for (int s = s0 - 1; s <= s0 + 1; s++) {
        for (int m = m0 - 1; m <= m0 + 1; m++) {
            if (s < 0 || s > 63 || m < 0 || m > 63) continue;
            float err = fit_error(x, 32, nmax, d * (float)s, dmin * (float)m, NULL);
            if (err < best) {
                best = err;
                *scale = (uint8_t)s;
                *min = (uint8_t)m;
            }
        }
    }
}

/* One Q4_K / Q5_K super-block: levels L (0..nmax) of its 256 values,
 * fp16 d and dmin, and the packed group codes. */
static void quantize_k_block(const float *x, int nmax, uint8_t *L, uint16_t *d16, uint16_t *dmin16,
                             uint8_t *packed) {
    float steps[GROUPS_K], offsets[GROUPS_K], max_step = 0.0f, max_offset = 0.0f;
    for (int g = 0; g < GROUPS_K; g++) {
        fit_group(x + 32 * g, 32, nmax, &steps[g], &offsets[g]);
        max_step = fmaxf(max_step, steps[g]);
        max_offset = fmaxf(max_offset, offsets[g]);
    }
    *d16 = tensor_fp32_to_fp16(max_step / 63.0f);
    *dmin16 = tensor_fp32_to_fp16(max_offset / 63.0f);
    float d = tensor_fp16_to_fp32(*d16), dmin = tensor_fp16_to_fp32(*dmin16);
    uint8_t scales[GROUPS_K], mins[GROUPS_K];
    for (int g = 0; g < GROUPS_K; g++) {
        choose_codes(x + 32 * g, nmax, d, dmin, steps[g], offsets[g], &scales[g], &mins[g]);
        fit_error(x + 32 * g, 32, nmax, d * (float)scales[g], dmin * (float)mins[g], L + 32 * g);
    }
    pack_scales_mins(packed, scales, mins);
}

/* Packs levels 0..15 as q4_k_nibble reads them. */
static void pack_nibbles(uint8_t *qs, const uint8_t *L) {
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)((L[64 * c + l] & 15) | ((L[64 * c + 32 + l] & 15) << 4));
}

void tensor_quantize_q4_k(void *out, const float *x, int64_t n) {
    struct tensor_block_q4_k *b = out;
    for (int64_t k = 0; k < n / TENSOR_QK_K; k++) {
        uint8_t L[TENSOR_QK_K];
        quantize_k_block(x + k * TENSOR_QK_K, 15, L, &b[k].d, &b[k].dmin, b[k].scales);
        pack_nibbles(b[k].qs, L);
    }
}

void tensor_quantize_q5_k(void *out, const float *x, int64_t n) {
    struct tensor_block_q5_k *b = out;
    for (int64_t k = 0; k < n / TENSOR_QK_K; k++) {
        uint8_t L[TENSOR_QK_K];
        quantize_k_block(x + k * TENSOR_QK_K, 31, L, &b[k].d, &b[k].dmin, b[k].scales);
        pack_nibbles(b[k].qs, L);
        memset(b[k].qh, 0, sizeof(b[k].qh));
        for (int i = 0; i < TENSOR_QK_K; i++) b[k].qh[i % 32] |= (uint8_t)((L[i] >> 4) << (i / 32));
    }
}

/* Lanes of a Q4_K / Q5_K row dot (see the file comment). */
struct k_lanes {
    float acc[8], mins[8];
};

/* Adds one super-block whose quant i is quant(block, i) to the lanes. */
static void add_k_block(struct k_lanes *lanes, const uint8_t *scales, uint16_t d16, uint16_t dmin16,
                        const void *block, int (*quant)(const void *, int),
                        const struct tensor_block_q8_k *x) {
    float d = x->d * tensor_fp16_to_fp32(d16), dmin = x->d * tensor_fp16_to_fp32(dmin16);
    int32_t sums[8] = {0};
    for (int g = 0; g < GROUPS_K; g++) {
        int scale, min;
        unpack_scale_min(scales, g, &scale, &min);
        for (int l = 0; l < 8; l++) {
            int dot = 0;
            for (int i = 32 * g + 4 * l; i < 32 * g + 4 * l + 4; i++)
                dot += quant(block, i) * x->qs[i];
            sums[l] += scale * dot;
        }
        int32_t offset = min * (x->bsums[2 * g] + x->bsums[2 * g + 1]);
        lanes->mins[g] = lanes->mins[g] + dmin * (float)offset;
    }
    for (int l = 0; l < 8; l++) lanes->acc[l] = lanes->acc[l] + d * (float)sums[l];
}

/* The lanes' tree of the file comment. */
static float k_lanes_total(const struct k_lanes *lanes) {
    float t[8];
    for (int l = 0; l < 8; l++) t[l] = lanes->acc[l] - lanes->mins[l];
    return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

float tensor_row_dot_q4_k_scalar(const void *w, const void *x, int n) {
    const struct tensor_block_q4_k *b = w;
    const struct tensor_block_q8_k *a = x;
    struct k_lanes lanes = {{0}, {0}};
    for (int k = 0; k < n / TENSOR_QK_K; k++)
        add_k_block(&lanes, b[k].scales, b[k].d, b[k].dmin, &b[k], q4_k_quant_of, &a[k]);
    return k_lanes_total(&lanes);
}

float tensor_row_dot_q5_k_scalar(const void *w, const void *x, int n) {
    const struct tensor_block_q5_k *b = w;
    const struct tensor_block_q8_k *a = x;
    struct k_lanes lanes = {{0}, {0}};
    for (int k = 0; k < n / TENSOR_QK_K; k++)
        add_k_block(&lanes, b[k].scales, b[k].d, b[k].dmin, &b[k], q5_k_quant_of, &a[k]);
    return k_lanes_total(&lanes);
}

/* ---- Q6_K: 16 groups of 16 with an 8-bit scale, quants q - 32 ---- */

/* Element i's quant (0..63): within each half of 128, ql byte (i % 64)
 * holds element i's low 4 bits (low nibble for the first 64, high for the
 * rest) and qh byte (i % 32) its top 2 bits at bit 2 * ((i % 128) / 32). */
static int q6_k_quant(const struct tensor_block_q6_k *b, int i) {
    int half = i / 128, j = i % 128;
    uint8_t low = b->ql[64 * half + j % 64];
    int nibble = j < 64 ? low & 15 : low >> 4;
    int top = (b->qh[32 * half + j % 32] >> (2 * (j / 32))) & 3;
    return nibble | (top << 4);
}

void tensor_dequantize_q6_k(float *out, const void *blocks, int64_t n) {
    const struct tensor_block_q6_k *b = blocks;
    for (int64_t k = 0; k < n / TENSOR_QK_K; k++) {
        float d = tensor_fp16_to_fp32(b[k].d);
        for (int i = 0; i < TENSOR_QK_K; i++) {
            int group = i / 16;
            out[k * TENSOR_QK_K + i] =
                d * (float)b[k].scales[group] * (float)(q6_k_quant(&b[k], i) - 32);
        }
    }
}

/* Squared error of n values against step * q, q the nearest in
 * [-32, 31]; the quants plus 32 go to L if not NULL. */
static float symmetric_error(const float *x, int n, float step, uint8_t *L) {
    float err = 0.0f;
    for (int i = 0; i < n; i++) {
        int q = step != 0.0f ? (int)nearbyintf(x[i] / step) : 0;
        q = q < -32 ? -32 : q > 31 ? 31 : q;
        if (L) L[i] = (uint8_t)(q + 32);
        float e = step * (float)q - x[i];
        err += e * e;
    }
    return err;
}

/* A group's step: the value of largest magnitude onto -32 (so the
 * asymmetric range [-32, 31] covers it), or a few fractions of a step
 * more, each refitted by least squares; the best. */
static float fit_symmetric(const float *x, int n) {
    float max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(max)) max = x[i];
    if (max == 0.0f) return 0.0f;
    float best_step = -max / 32.0f, best = symmetric_error(x, n, best_step, NULL);
    uint8_t L[16];
    for (int k = -4; k <= 4; k++) {
        float step = -max / (32.0f + 0.25f * (float)k);
        symmetric_error(x, n, step, L);
        double sqx = 0, sq2 = 0;
        for (int i = 0; i < n; i++) {
            sqx += (double)(L[i] - 32) * x[i];
            sq2 += (double)(L[i] - 32) * (L[i] - 32);
        }
        float candidates[2] = {step, sq2 > 0 ? (float)(sqx / sq2) : step};
        for (int c = 0; c < 2; c++) {
            float err = symmetric_error(x, n, candidates[c], NULL);
            if (err < best) {
                best = err;
                best_step = candidates[c];
            }
        }
    }
    return best_step;
}

void tensor_quantize_q6_k(void *out, const float *x, int64_t n) {
    struct tensor_block_q6_k *b = out;
    for (int64_t k = 0; k < n / TENSOR_QK_K; k++) {
        const float *v = x + k * TENSOR_QK_K;
        float steps[16], max = 0.0f;
        for (int g = 0; g < 16; g++) {
            steps[g] = fit_symmetric(v + 16 * g, 16);
            if (fabsf(steps[g]) > fabsf(max)) max = steps[g];
        }
        /* the step of largest magnitude onto scale -128, the rest rounded */
        b[k].d = tensor_fp32_to_fp16(max / -128.0f);
        float d = tensor_fp16_to_fp32(b[k].d);
        uint8_t L[TENSOR_QK_K];
        for (int g = 0; g < 16; g++) {
            int s = d != 0.0f ? (int)nearbyintf(steps[g] / d) : 0;
            b[k].scales[g] = (int8_t)(s < -128 ? -128 : s > 127 ? 127 : s);
            symmetric_error(v + 16 * g, 16, d * (float)b[k].scales[g], L + 16 * g);
        }
        memset(b[k].qh, 0, sizeof(b[k].qh));
        for (int i = 0; i < TENSOR_QK_K; i++) {
            int half = i / 128, j = i % 128;
            uint8_t *low = &b[k].ql[64 * half + j % 64];
            *low = j < 64 ? (uint8_t)(L[i] & 15) : (uint8_t)(*low | (L[i] & 15) << 4);
            b[k].qh[32 * half + j % 32] |= (uint8_t)((L[i] >> 4) << (2 * (j / 32)));
        }
    }
}

float tensor_row_dot_q6_k_scalar(const void *w, const void *x, int n) {
    const struct tensor_block_q6_k *b = w;
    const struct tensor_block_q8_k *a = x;
    float acc = 0.0f;
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        int32_t sums = 0;
        for (int g = 0; g < 16; g++) {
            int dot = 0;
            for (int l = 0; l < 16; l++)
                dot += (q6_k_quant(&b[k], 16 * g + l) - 32) * a[k].qs[16 * g + l];
            sums += b[k].scales[g] * dot;
        }
        float scale = a[k].d * tensor_fp16_to_fp32(b[k].d);
        float term = scale * (float)sums;
        acc = acc + term;
    }
    return acc;
}
