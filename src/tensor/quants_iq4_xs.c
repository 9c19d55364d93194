/* quants_iq4_xs.c -- IQ4_XS weights: 4.25 bits a weight, a nibble that
 * picks one of the 16 non-uniform values tensor_iq4_values, times a 6-bit
 * scale per group of 32 and an fp16 scale per super-block of 256.
 * Conversions to and from floats and the scalar row dot (the reference the
 * AVX2 one of quants_k_low_avx2.c is tested against).
 *
 * Group g of a super-block: its scale, stored plus 32, has its low four
 * bits in nibble g % 2 of scales_l[g / 2] and its high two bits at bit
 * 2 * g of scales_h; its 32 nibbles lie in qs[16 * g ..]: byte j holds
 * element j (low nibble) and j + 16 (high). The row dot keeps the
 * canonical order (canon.h, quants_k_low_avx2.c's): per super-block, 8
 * exact integer lane sums, lane l the sum over the groups of the group
 * scale times the dot of elements 4l .. 4l + 3 of the group; each lane
 * fused times d_w * d_x into float lane l; at the end, the lane tree.
 *
 * The quantizer differs from llama.cpp's (without an importance matrix):
 * that one fits each group minimising the x^2-weighted squared error with
 * 15 trial scales that put the value of largest magnitude near -127; this
 * one minimises the plain squared error, what the relative RMS error
 * measures, also tries scales that put it near +113, refits the best a few
 * times, and after rounding a group's scale to the super-block's grid it
 * tries the neighbouring grid points too, keeping the one of least error. */
#include "canon.h"
#include "tensor_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define GROUP  32 /* weights a group scale covers */
#define GROUPS (TENSOR_QK_K / GROUP)
#define REFITS 2 /* rounds of re-rounding and refitting a group's best fit */

static int clamp_int(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* Scale of group g, -32..31. */
static int group_scale(const struct tensor_block_iq4_xs *block, int g) {
    int low = (block->scales_l[g / 2] >> (4 * (g % 2))) & 15;
    int high = (block->scales_h >> (2 * g)) & 3;
    return (low | high << 4) - 32;
}

/* Nibble of element j (0..31) of group g. */
static int group_nibble(const struct tensor_block_iq4_xs *block, int g, int j) {
    return (block->qs[16 * g + j % 16] >> (4 * (j / 16))) & 15;
}

/* The index of the value nearest v (tensor_iq4_values is sorted). */
static int nearest_index(float v) {
    const int8_t *values = tensor_iq4_values;
    int lo = 0, hi = 15;
    if (v <= values[lo]) return lo;
    if (v >= values[hi]) return hi;
    while (hi - lo > 1) { /* values[lo] < v < values[hi] */
        int mid = (lo + hi) / 2;
        if (v < values[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - values[lo] < values[hi] - v ? lo : hi;
}

/* Squared error of x (one group) as scale times the nearest values; their
 * indices go to idx. */
static float group_error(const float *x, float scale, uint8_t *idx) {
    float inverse = scale != 0.0f ? 1.0f / scale : 0.0f, error = 0.0f;
    for (int j = 0; j < GROUP; j++) {
        int k = nearest_index(x[j] * inverse);
        float diff = scale * (float)tensor_iq4_values[k] - x[j];
        idx[j] = (uint8_t)k;
        error += diff * diff;
    }
    return error;
}

/* The least-squares scale for the value indices idx. */
static float group_fit(const float *x, const uint8_t *idx) {
    float sxv = 0.0f, sv2 = 0.0f;
    for (int j = 0; j < GROUP; j++) {
        float v = (float)tensor_iq4_values[idx[j]];
        sxv += x[j] * v;
        sv2 += v * v;
    }
    return sxv / sv2; /* no value is 0, so sv2 > 0 */
}

/* A group's scale before rounding to the super-block's grid. */
static float fit_group(const float *x) {
    float peak = 0.0f;
    for (int j = 0; j < GROUP; j++)
        if (fabsf(x[j]) > fabsf(peak)) peak = x[j];
    if (peak == 0.0f) return 0.0f;
    uint8_t idx[GROUP];
    float best_scale = 0.0f, best = FLT_MAX;
    for (int step = -7; step <= 7; step++)
        for (int side = 0; side < 2; side++) {
            float target = (float)tensor_iq4_values[side ? 15 : 0] + (float)step;
            float iscale = target / peak;
            for (int j = 0; j < GROUP; j++) idx[j] = (uint8_t)nearest_index(iscale * x[j]);
            float scale = group_fit(x, idx), error = group_error(x, scale, idx);
            if (error < best) {
                best = error;
                best_scale = scale;
            }
        }
    for (int round = 0; round < REFITS; round++) {
        group_error(x, best_scale, idx);
        float scale = group_fit(x, idx), error = group_error(x, scale, idx);
        if (error >= best) break;
        best = error;
        best_scale = scale;
    }
    return best_scale;
}

/* The group's scale on the grid of d: the nearest grid point or a
 * neighbour, whichever gives the least error; its indices go to idx. */
static int grid_group(const float *x, float scale, float d, uint8_t *idx) {
    int ls = d != 0.0f ? clamp_int((int)nearbyintf(scale / d), -32, 31) : 0, best_ls = ls;
    float best = FLT_MAX;
    for (int s = ls - 1; s <= ls + 1; s++) {
        if (s < -32 || s > 31) continue;
        float error = group_error(x, d * (float)s, idx);
        if (error < best) {
            best = error;
            best_ls = s;
        }
    }
    group_error(x, d * (float)best_ls, idx);
    return best_ls;
}

static void quantize_block(struct tensor_block_iq4_xs *y, const float *x) {
    float scales[GROUPS], peak = 0.0f;
    for (int g = 0; g < GROUPS; g++) {
        scales[g] = fit_group(x + GROUP * g);
        if (fabsf(scales[g]) > fabsf(peak)) peak = scales[g];
    }
    /* the largest scale becomes -32, the end of the grid with room */
    y->d = tensor_fp32_to_fp16(peak / -32.0f);
    float d = tensor_fp16_to_fp32(y->d);
    y->scales_h = 0;
    memset(y->scales_l, 0, sizeof(y->scales_l));
    for (int g = 0; g < GROUPS; g++) {
        uint8_t idx[GROUP];
        int stored = grid_group(x + GROUP * g, scales[g], d, idx) + 32;
        y->scales_l[g / 2] |= (uint8_t)((stored & 15) << (4 * (g % 2)));
        y->scales_h |= (uint16_t)((stored >> 4) << (2 * g));
        for (int j = 0; j < 16; j++) y->qs[16 * g + j] = (uint8_t)(idx[j] | idx[j + 16] << 4);
    }
}

void tensor_quantize_iq4_xs(void *out, const float *x, int64_t n) {
    struct tensor_block_iq4_xs *blocks = out;
    for (int64_t b = 0; b < n / TENSOR_QK_K; b++) quantize_block(&blocks[b], x + b * TENSOR_QK_K);
}

void tensor_dequantize_iq4_xs(float *out, const void *row, int64_t n) {
    const struct tensor_block_iq4_xs *blocks = row;
    for (int64_t b = 0; b < n / TENSOR_QK_K; b++, out += TENSOR_QK_K) {
        float d = tensor_fp16_to_fp32(blocks[b].d);
        for (int g = 0; g < GROUPS; g++) {
            float scale = d * (float)group_scale(&blocks[b], g);
            for (int j = 0; j < GROUP; j++)
                out[GROUP * g + j] =
                    scale * (float)tensor_iq4_values[group_nibble(&blocks[b], g, j)];
        }
    }
}

float tensor_row_dot_iq4_xs_scalar(const void *w, const void *x, int n) {
    const struct tensor_block_iq4_xs *wb = w;
    const struct tensor_block_q8_k *xb = x;
    float acc[CANON_LANES] = {0};
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        int32_t sums[CANON_LANES] = {0};
        for (int g = 0; g < GROUPS; g++) {
            int scale = group_scale(&wb[b], g);
            for (int l = 0; l < CANON_LANES; l++) {
                int32_t dot = 0;
                for (int j = 4 * l; j < 4 * l + 4; j++)
                    dot += tensor_iq4_values[group_nibble(&wb[b], g, j)] * xb[b].qs[GROUP * g + j];
                sums[l] += scale * dot;
            }
        }
        float d = tensor_fp16_to_fp32(wb[b].d) * xb[b].d;
        for (int l = 0; l < CANON_LANES; l++) acc[l] = fmaf(d, (float)sums[l], acc[l]);
    }
    return canon_sum_lanes(acc);
}
