/* quants_k_low.c -- Q2_K and Q3_K, the k-quants of 2 and 3 bits a weight:
 * conversions to and from floats and the scalar row dots (the reference the
 * AVX2 row dots of quants_k_low_avx2.c are tested against).
 *
 * Both cut a super-block of 256 weights into 16 groups of 16 consecutive
 * weights, each with a small integer scale (Q2_K: and minimum) that the
 * super-block's fp16 scale multiplies. The quant of element e (0..255) lies
 * where ggml puts it: its two low bits in qs[32 * (e / 128) + e % 32] at
 * bit 2 * (e % 128 / 32) (a byte holds four elements 32 apart), Q3_K's
 * third bit in bit e / 32 of hmask[e % 32].
 *
 * A row dot keeps the canonical order (canon.h, quants_k_low_avx2.c's):
 * per super-block, 8 exact integer lane sums, lane l taking the elements e
 * with e % 32 in 4l .. 4l + 3 (each times its group scale), and each lane
 * fused times d = d_x * d_w into float lane l; at the end, the lane tree.
 * Q2_K's minimums go in 8 more integer lanes, lane l the minimums of
 * groups 2l and 2l + 1 times their Q8_K sums of 16 quants, taken off each
 * float lane by a fused negative multiply-add with dmin = d_x * dmin_w.
 * Q3_K's lanes take its quants plus 4 (0..7) and, from lane l, 4 times
 * the scales of groups 2l and 2l + 1 times their sums of 16 quants.
 *
 * The quantizers differ from llama.cpp's reference ones (which it uses
 * without an importance matrix): those fit each group minimising the
 * |x|-weighted absolute error (Q2_K) or the x^2-weighted squared error
 * (Q3_K), then round the group scales to the super-block's grid. These
 * minimise the plain squared error, what the relative RMS error measures:
 * a sweep of trial scales, each giving quants whose least-squares scale
 * (and minimum) is then taken, a few rounds of re-rounding and refitting
 * the best; and after rounding a group's scale (and minimum) to the
 * super-block's grid, the neighbouring grid points are tried as well, the
 * quants rounded anew for each, and the one of least error kept. */
#include "canon.h"
#include "tensor_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define GROUP  16 /* weights a group scale covers */
#define GROUPS (TENSOR_QK_K / GROUP)
#define REFITS 2 /* rounds of re-rounding and refitting a group's best fit */

static int nearest(float v) {
    return (int)nearbyintf(v);
}

static int clamp_int(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- the 2-bit fields both types share ---- */

/* The 256 2-bit fields of qs in element order. */
static void unpack_low_bits(uint8_t *q, const uint8_t *qs) {
    for (int e = 0; e < TENSOR_QK_K; e++)
        q[e] = (uint8_t)((qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3);
}

static void pack_low_bits(uint8_t *qs, const uint8_t *q) {
    memset(qs, 0, TENSOR_QK_K / 4);
    for (int e = 0; e < TENSOR_QK_K; e++)
        qs[32 * (e / 128) + e % 32] |= (uint8_t)((q[e] & 3) << (2 * (e % 128 / 32)));
}

/* ---- Q2_K: value = d * scale * q - dmin * min, q in 0..3 ---- */

/* Squared error of x (one group) as scale * q - min, with each q the
 * nearest; the quants go to q. */
static float q2_error(const float *x, float scale, float min, uint8_t *q) {
    float error = 0.0f;
    for (int j = 0; j < GROUP; j++) {
        int l = scale > 0.0f ? clamp_int(nearest((x[j] + min) / scale), 0, 3) : 0;
        float diff = scale * (float)l - min - x[j];
        q[j] = (uint8_t)l;
        error += diff * diff;
    }
    return error;
}

/* The scale and minimum (min >= 0) of least squared error for the quants l;
 * 0 if there is none (all quants equal). */
static int q2_fit(const float *x, const uint8_t *l, float *scale, float *min) {
    float sl = 0.0f, sl2 = 0.0f, sx = 0.0f, sxl = 0.0f;
    for (int j = 0; j < GROUP; j++) {
        sl += (float)l[j];
        sl2 += (float)(l[j] * l[j]);
        sx += x[j];
        sxl += x[j] * (float)l[j];
    }
    float det = (float)GROUP * sl2 - sl * sl;
    if (det <= 0.0f) return 0;
    float s = ((float)GROUP * sxl - sx * sl) / det, offset = (sl2 * sx - sl * sxl) / det;
    if (offset > 0.0f) { /* a positive offset is no minimum: fit the scale alone */
        offset = 0.0f;
        s = sxl / sl2;
    }
    if (s <= 0.0f) return 0;
    *scale = s;
    *min = -offset;
    return 1;
}

/* A group's scale and minimum before rounding to the super-block's grid. */
static void q2_fit_group(const float *x, float *scale, float *min) {
    float lo = 0.0f, hi = x[0];
    for (int j = 0; j < GROUP; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    uint8_t l[GROUP];
    *scale = 0.0f;
    *min = -lo;
    float best = q2_error(x, 0.0f, -lo, l);
    if (hi <= lo) return;
    /* trial steps from 2.5 to 4.5 quanta over the range: the first clips the
     * ends for a finer step, the last leaves room */
    for (int step = 0; step <= 20; step++) {
        float iscale = (2.5f + 0.1f * (float)step) / (hi - lo), s, m;
        for (int j = 0; j < GROUP; j++)
            l[j] = (uint8_t)clamp_int(nearest(iscale * (x[j] - lo)), 0, 3);
        if (!q2_fit(x, l, &s, &m)) continue;
        float error = q2_error(x, s, m, l);
        if (error < best) {
            best = error;
            *scale = s;
            *min = m;
        }
    }
    for (int round = 0; round<REFITS && * scale> 0.0f; round++) {
        float s, m;
        q2_error(x, *scale, *min, l);
        if (!q2_fit(x, l, &s, &m)) break;
        float error = q2_error(x, s, m, l);
        if (error >= best) break;
        best = error;
        *scale = s;
        *min = m;
    }
}

/* The group's packed scale and minimum on the grid of d and dmin: of the
 * nearest grid points and their neighbours, the pair of least error; its
 * quants go to q. */
static uint8_t q2_grid_group(const float *x, float scale, float min, float d, float dmin,
                             uint8_t *q) {
    int ls = d > 0.0f ? clamp_int(nearest(scale / d), 0, 15) : 0;
    int lm = dmin > 0.0f ? clamp_int(nearest(min / dmin), 0, 15) : 0;
    int best_ls = ls, best_lm = lm;
    float best = FLT_MAX;
    for (int s = ls - 1; s <= ls + 1; s++)
        for (int m = lm - 1; m <= lm + 1; m++) {
            if (s < 0 || s > 15 || m < 0 || m > 15) continue;
            float error = q2_error(x, d * (float)s, dmin * (float)m, q);
            if (error < best) {
                best = error;
                best_ls = s;
                best_lm = m;
            }
        }
    q2_error(x, d * (float)best_ls, dmin * (float)best_lm, q);
    return (uint8_t)(best_ls | best_lm << 4);
}

static void q2_quantize_block(struct tensor_block_q2_k *y, const float *x) {
    float scales[GROUPS], mins[GROUPS], max_scale = 0.0f, max_min = 0.0f;
    for (int g = 0; g < GROUPS; g++) {
        q2_fit_group(x + GROUP * g, &scales[g], &mins[g]);
        max_scale = fmaxf(max_scale, scales[g]);
        max_min = fmaxf(max_min, mins[g]);
    }
    y->d = tensor_fp32_to_fp16(max_scale / 15.0f);
    y->dmin = tensor_fp32_to_fp16(max_min / 15.0f);
    float d = tensor_fp16_to_fp32(y->d), dmin = tensor_fp16_to_fp32(y->dmin);
    uint8_t q[TENSOR_QK_K];
    for (int g = 0; g < GROUPS; g++)
        y->scales[g] = q2_grid_group(x + GROUP * g, scales[g], mins[g], d, dmin, q + GROUP * g);
    pack_low_bits(y->qs, q);
}

void tensor_quantize_q2_k(void *out, const float *x, int64_t n) {
    struct tensor_block_q2_k *blocks = out;
    for (int64_t b = 0; b < n / TENSOR_QK_K; b++)
        q2_quantize_block(&blocks[b], x + b * TENSOR_QK_K);
}

void tensor_dequantize_q2_k(float *out, const void *row, int64_t n) {
    const struct tensor_block_q2_k *blocks = row;
    uint8_t q[TENSOR_QK_K];
    for (int64_t b = 0; b < n / TENSOR_QK_K; b++, out += TENSOR_QK_K) {
        float d = tensor_fp16_to_fp32(blocks[b].d), dmin = tensor_fp16_to_fp32(blocks[b].dmin);
        unpack_low_bits(q, blocks[b].qs);
        for (int g = 0; g < GROUPS; g++) {
            float scale = d * (float)(blocks[b].scales[g] & 15);
            float min = dmin * (float)(blocks[b].scales[g] >> 4);
            for (int j = 0; j < GROUP; j++)
                out[GROUP * g + j] = scale * (float)q[GROUP * g + j] - min;
        }
    }
}

/* A super-block's 8 integer lane sums (see the file comment): element e
 * goes to lane e % 32 / 4, its quant q[e] times activation quant x[e]
 * times the scale of e's group. */
static void lane_sums(int32_t sums[CANON_LANES], const uint8_t *q, const int8_t *x,
                      const int *scales) {
    for (int l = 0; l < CANON_LANES; l++) sums[l] = 0;
    for (int e = 0; e < TENSOR_QK_K; e++) sums[e % 32 / 4] += scales[e / GROUP] * q[e] * x[e];
}

float tensor_row_dot_q2_k_scalar(const void *w, const void *x, int n) {
    const struct tensor_block_q2_k *wb = w;
    const struct tensor_block_q8_k *xb = x;
    uint8_t q[TENSOR_QK_K];
    float acc[CANON_LANES] = {0};
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        int scales[GROUPS];
        int32_t sums[CANON_LANES];
        for (int g = 0; g < GROUPS; g++) scales[g] = wb[b].scales[g] & 15;
        unpack_low_bits(q, wb[b].qs);
        lane_sums(sums, q, xb[b].qs, scales);
        float d = xb[b].d * tensor_fp16_to_fp32(wb[b].d);
        float dmin = xb[b].d * tensor_fp16_to_fp32(wb[b].dmin);
        for (int l = 0; l < CANON_LANES; l++) {
            int32_t mins = (wb[b].scales[2 * l] >> 4) * xb[b].bsums[2 * l] +
                           (wb[b].scales[2 * l + 1] >> 4) * xb[b].bsums[2 * l + 1];
            acc[l] = fmaf(d, (float)sums[l], acc[l]);
            acc[l] = fmaf(-dmin, (float)mins, acc[l]);
        }
    }
    return canon_sum_lanes(acc);
}

/* ---- Q3_K: value = d * scale * q, q in -4..3, scale in -32..31 ---- */

/* The 16 group scales packed in 12 bytes: low four bits of scale j in
 * byte j % 8 (low nibble for j < 8, high for the rest), high two bits in
 * byte 8 + j % 4 at bit 2 * (j / 4); stored plus 32. */
static void q3_unpack_scales(int8_t *scales, const uint8_t *packed) {
    for (int j = 0; j < GROUPS; j++) {
        int low = (packed[j % 8] >> (4 * (j / 8))) & 15;
        int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        scales[j] = (int8_t)((low | high << 4) - 32);
    }
}

static void q3_pack_scales(uint8_t *packed, const int8_t *scales) {
    memset(packed, 0, 12);
    for (int j = 0; j < GROUPS; j++) {
        int v = scales[j] + 32;
        packed[j % 8] |= (uint8_t)((v & 15) << (4 * (j / 8)));
        packed[8 + j % 4] |= (uint8_t)((v >> 4) << (2 * (j / 4)));
    }
}

/* The block's 256 quants in element order: the low bits, minus 4 where
 * the high bit is clear. */
static void q3_unpack_quants(int8_t *q, const struct tensor_block_q3_k *block) {
    uint8_t low[TENSOR_QK_K];
    unpack_low_bits(low, block->qs);
    for (int e = 0; e < TENSOR_QK_K; e++)
        q[e] = (int8_t)(low[e] - ((block->hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4));
}

static void q3_pack_quants(struct tensor_block_q3_k *block, const int8_t *q) {
    uint8_t low[TENSOR_QK_K];
    memset(block->hmask, 0, sizeof(block->hmask));
    for (int e = 0; e < TENSOR_QK_K; e++) {
        int biased = q[e] + 4;
        low[e] = (uint8_t)(biased & 3);
        block->hmask[e % 32] |= (uint8_t)((biased >> 2) << (e / 32));
    }
    pack_low_bits(block->qs, low);
}

/* Squared error of x (one group) as scale * q, each q the nearest. */
static float q3_error(const float *x, float scale, int8_t *q) {
    float error = 0.0f;
    for (int j = 0; j < GROUP; j++) {
        int l = scale != 0.0f ? clamp_int(nearest(x[j] / scale), -4, 3) : 0;
        float diff = scale * (float)l - x[j];
        q[j] = (int8_t)l;
        error += diff * diff;
    }
    return error;
}

/* The least-squares scale for the quants l (0 if they are all 0). */
static float q3_fit(const float *x, const int8_t *l) {
    float sxl = 0.0f, sl2 = 0.0f;
    for (int j = 0; j < GROUP; j++) {
        sxl += x[j] * (float)l[j];
        sl2 += (float)(l[j] * l[j]);
    }
    return sl2 > 0.0f ? sxl / sl2 : 0.0f;
}

/* A group's scale before rounding to the super-block's grid: trial scales
 * that put the value of largest magnitude near -4 and near 3. */
static float q3_fit_group(const float *x) {
    float peak = 0.0f;
    for (int j = 0; j < GROUP; j++)
        if (fabsf(x[j]) > fabsf(peak)) peak = x[j];
    if (peak == 0.0f) return 0.0f;
    int8_t l[GROUP];
    float best_scale = 0.0f, best = q3_error(x, 0.0f, l);
    for (int step = -9; step <= 9; step++)
        for (int side = 0; side < 2; side++) {
            float target = (side ? 3.0f : -4.0f) + 0.1f * (float)step;
            float iscale = target / peak;
            for (int j = 0; j < GROUP; j++) l[j] = (int8_t)clamp_int(nearest(iscale * x[j]), -4, 3);
            float scale = q3_fit(x, l), error = q3_error(x, scale, l);
            if (error < best) {
                best = error;
                best_scale = scale;
            }
        }
    for (int round = 0; round < REFITS; round++) {
        q3_error(x, best_scale, l);
        float scale = q3_fit(x, l), error = q3_error(x, scale, l);
        if (error >= best) break;
        best = error;
        best_scale = scale;
    }
    return best_scale;
}

/* The group's scale on the grid of d: the nearest grid point or a
 * neighbour, whichever gives the least error; its quants go to q. */
static int8_t q3_grid_group(const float *x, float scale, float d, int8_t *q) {
    int ls = d != 0.0f ? clamp_int(nearest(scale / d), -32, 31) : 0, best_ls = ls;
    float best = FLT_MAX;
    for (int s = ls - 1; s <= ls + 1; s++) {
        if (s < -32 || s > 31) continue;
        float error = q3_error(x, d * (float)s, q);
        if (error < best) {
            best = error;
            best_ls = s;
        }
    }
    q3_error(x, d * (float)best_ls, q);
    return (int8_t)best_ls;
}

static void q3_quantize_block(struct tensor_block_q3_k *y, const float *x) {
    float scales[GROUPS], peak = 0.0f;
    for (int g = 0; g < GROUPS; g++) {
        scales[g] = q3_fit_group(x + GROUP * g);
        if (fabsf(scales[g]) > fabsf(peak)) peak = scales[g];
    }
    /* the largest scale becomes -32, the end of the grid with room */
    y->d = tensor_fp32_to_fp16(peak / -32.0f);
    float d = tensor_fp16_to_fp32(y->d);
    int8_t grid[GROUPS], q[TENSOR_QK_K];
    for (int g = 0; g < GROUPS; g++)
        grid[g] = q3_grid_group(x + GROUP * g, scales[g], d, q + GROUP * g);
    q3_pack_scales(y->scales, grid);
    q3_pack_quants(y, q);
}

void tensor_quantize_q3_k(void *out, const float *x, int64_t n) {
    struct tensor_block_q3_k *blocks = out;
    for (int64_t b = 0; b < n / TENSOR_QK_K; b++)
        q3_quantize_block(&blocks[b], x + b * TENSOR_QK_K);
}

void tensor_dequantize_q3_k(float *out, const void *row, int64_t n) {
    const struct tensor_block_q3_k *blocks = row;
    int8_t scales[GROUPS], q[TENSOR_QK_K];
    for (int64_t b = 0; b < n / TENSOR_QK_K; b++, out += TENSOR_QK_K) {
        float d = tensor_fp16_to_fp32(blocks[b].d);
        q3_unpack_scales(scales, blocks[b].scales);
        q3_unpack_quants(q, &blocks[b]);
        for (int g = 0; g < GROUPS; g++) {
            float scale = d * (float)scales[g];
            for (int j = 0; j < GROUP; j++) out[GROUP * g + j] = scale * (float)q[GROUP * g + j];
        }
    }
}

float tensor_row_dot_q3_k_scalar(const void *w, const void *x, int n) {
    const struct tensor_block_q3_k *wb = w;
    const struct tensor_block_q8_k *xb = x;
    uint8_t q[TENSOR_QK_K];
    float acc[CANON_LANES] = {0};
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        int8_t packed[GROUPS];
        int scales[GROUPS];
        int32_t sums[CANON_LANES];
        q3_unpack_scales(packed, wb[b].scales);
        for (int g = 0; g < GROUPS; g++) scales[g] = (int)packed[g]; /* -32 .. 31, signed */
        /* the quants plus 4: the low bits, plus 4 where the high bit is set */
        unpack_low_bits(q, wb[b].qs);
        for (int e = 0; e < TENSOR_QK_K; e++)
            q[e] = (uint8_t)(q[e] | ((wb[b].hmask[e % 32] >> (e / 32)) & 1) << 2);
        lane_sums(sums, q, xb[b].qs, scales);
        float d = tensor_fp16_to_fp32(wb[b].d) * xb[b].d;
        for (int l = 0; l < CANON_LANES; l++) {
            int32_t bias =
                scales[2 * l] * xb[b].bsums[2 * l] + scales[2 * l + 1] * xb[b].bsums[2 * l + 1];
            acc[l] = fmaf(d, (float)(sums[l] - 4 * bias), acc[l]);
        }
    }
    return canon_sum_lanes(acc);
}
