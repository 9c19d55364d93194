/* quants_legacy.c -- Q4_1, Q5_0, Q5_1 and IQ4_NL weights: converters,
 * quantizers and the scalar row dots (the references the AVX2 row dots in
 * quants_legacy_avx2.c are tested against).
 *
 * All four have blocks of 32 elements whose byte j holds element j in its
 * low nibble and element j + 16 in its high one; Q5_0 / Q5_1 add a fifth
 * bit per element (bit i of qh for element i), and IQ4_NL's nibble indexes
 * a table of 16 non-uniform values.
 *
 * Quantizers: Q4_1, Q5_0 and Q5_1 are ggml's reference quantizers value for
 * value (llama-quantize without an importance matrix writes the same
 * blocks). IQ4_NL searches scales as llama.cpp does but minimises the plain
 * squared error of each block (llama.cpp weights each element's error by
 * its square), tries scales that map the block's largest magnitude to
 * either end of the table, and reassigns the nibbles once the scale has
 * been rounded to fp16.
 *
 * A row dot multiplies each block's quants by the activation quants (Q8_0
 * for Q5_0 / IQ4_NL, Q8_1 for Q4_1 / Q5_1) in the canonical order (canon.h,
 * quants_legacy_avx2.c's): per block, 8 exact integer lane sums (lane l:
 * elements 4l .. 4l + 3), each fused times the block's d_w * d_x into
 * float lane l of one of two sets of 8 lanes, even blocks in one and odd
 * blocks in the other; the two sets add lane by lane, then the lane tree.
 * Q4_1 / Q5_1 add the weight minimum times the activation block's stored
 * d * sum of quants, m_w * s_x, into one more sum, a block pair at a time:
 * sum + (m_0 + m_1), added to the lanes' total at the end. */
#include "canon.h"
#include "tensor_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- unpacking ---- */

/* The 32 nibbles of a block, in element order. */
static void unpack_nibbles(int8_t q[TENSOR_QK], const uint8_t qs[TENSOR_QK / 2]) {
    for (int j = 0; j < TENSOR_QK / 2; j++) {
        q[j] = (int8_t)(qs[j] & 0x0f);
        q[j + TENSOR_QK / 2] = (int8_t)(qs[j] >> 4);
    }
}

/* Adds the fifth bits (qh: bit i for element i, little-endian) to q. */
static void add_fifth_bits(int8_t q[TENSOR_QK], const uint8_t qh[4]) {
    uint32_t bits;
    memcpy(&bits, qh, sizeof(bits));
    for (int i = 0; i < TENSOR_QK; i++) q[i] = (int8_t)(q[i] | (((bits >> i) & 1u) << 4));
}

/* Packs 32 quants of 0..31: low nibbles into qs, fifth bits into qh. */
static void pack_quants(uint8_t qs[TENSOR_QK / 2], uint8_t qh[4], const uint8_t q[TENSOR_QK]) {
    uint32_t bits = 0;
    for (int j = 0; j < TENSOR_QK / 2; j++)
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + TENSOR_QK / 2] & 0x0f) << 4));
    for (int i = 0; i < TENSOR_QK; i++) bits |= (uint32_t)((q[i] >> 4) & 1) << i;
    if (qh) memcpy(qh, &bits, sizeof(bits));
}

/* The five-bit quants of a Q5_0 / Q5_1 block (0..31). */
static void unpack_q5(int8_t q[TENSOR_QK], const uint8_t qs[TENSOR_QK / 2], const uint8_t qh[4]) {
    unpack_nibbles(q, qs);
    add_fifth_bits(q, qh);
}

/* The exact integer dot product of two blocks of quants in 8 lanes:
 * lane l takes elements 4l .. 4l + 3 (vpmaddubsw then vpmaddwd). */
static void dot_block_lanes(int32_t lanes[CANON_LANES], const int8_t *a, const int8_t *b) {
    for (int l = 0; l < CANON_LANES; l++) {
        lanes[l] = 0;
        for (int i = 4 * l; i < 4 * l + 4; i++) lanes[l] += (int32_t)a[i] * (int32_t)b[i];
    }
}

/* The float lanes of a legacy row dot: even and odd blocks. */
struct legacy_lanes {
    float even[CANON_LANES], odd[CANON_LANES];
};

/* Adds block k (quants q, activation quants x) times scale to its lanes. */
static void add_block_lanes(struct legacy_lanes *lanes, int k, const int8_t *q, const int8_t *x,
                            float scale) {
    int32_t sums[CANON_LANES];
    float *acc = k % 2 ? lanes->odd : lanes->even;
    dot_block_lanes(sums, q, x);
    for (int l = 0; l < CANON_LANES; l++) acc[l] = fmaf(scale, (float)sums[l], acc[l]);
}

/* The even and odd lanes added lane by lane, then the lane tree. */
static float legacy_lanes_total(const struct legacy_lanes *lanes) {
    float v[CANON_LANES];
    for (int l = 0; l < CANON_LANES; l++) v[l] = lanes->even[l] + lanes->odd[l];
    return canon_sum_lanes(v);
}

/* ---- dequantize ---- */

void tensor_dequantize_q4_1(float *out, const void *blocks, int64_t n) {
    const struct tensor_block_q4_1 *b = blocks;
    int8_t q[TENSOR_QK];
    for (int64_t k = 0; k < n / TENSOR_QK; k++) {
        float d = tensor_fp16_to_fp32(b[k].d), m = tensor_fp16_to_fp32(b[k].m);
        unpack_nibbles(q, b[k].qs);
        for (int i = 0; i < TENSOR_QK; i++) out[k * TENSOR_QK + i] = (float)q[i] * d + m;
    }
}

void tensor_dequantize_q5_0(float *out, const void *blocks, int64_t n) {
    const struct tensor_block_q5_0 *b = blocks;
    int8_t q[TENSOR_QK];
    for (int64_t k = 0; k < n / TENSOR_QK; k++) {
        float d = tensor_fp16_to_fp32(b[k].d);
        unpack_q5(q, b[k].qs, b[k].qh);
        for (int i = 0; i < TENSOR_QK; i++) out[k * TENSOR_QK + i] = (float)(q[i] - 16) * d;
    }
}

void tensor_dequantize_q5_1(float *out, const void *blocks, int64_t n) {
    const struct tensor_block_q5_1 *b = blocks;
    int8_t q[TENSOR_QK];
    for (int64_t k = 0; k < n / TENSOR_QK; k++) {
        float d = tensor_fp16_to_fp32(b[k].d), m = tensor_fp16_to_fp32(b[k].m);
        unpack_q5(q, b[k].qs, b[k].qh);
        for (int i = 0; i < TENSOR_QK; i++) out[k * TENSOR_QK + i] = (float)q[i] * d + m;
    }
}

void tensor_dequantize_iq4_nl(float *out, const void *blocks, int64_t n) {
    const struct tensor_block_iq4_nl *b = blocks;
    int8_t q[TENSOR_QK];
    for (int64_t k = 0; k < n / TENSOR_QK; k++) {
        float d = tensor_fp16_to_fp32(b[k].d);
        unpack_nibbles(q, b[k].qs);
        for (int i = 0; i < TENSOR_QK; i++)
            out[k * TENSOR_QK + i] = d * (float)tensor_iq4_values[q[i]];
    }
}

/* ---- quantize: ggml's reference quantizers ---- */

/* Smallest and largest element of a block. */
static void block_range(const float *v, float *min, float *max) {
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < TENSOR_QK; j++) {
        if (v[j] < *min) *min = v[j];
        if (v[j] > *max) *max = v[j];
    }
}

/* The element of largest magnitude (the first of equals), with its sign. */
static float block_extreme(const float *v) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < TENSOR_QK; j++) {
        if (amax < fabsf(v[j])) {
            amax = fabsf(v[j]);
            max = v[j];
        }
    }
    return max;
}

/* Q4_1 / Q5_1: q = (v - min) / d rounded half up (truncation of + 0.5),
 * d = (max - min) / levels, levels = 2^bits - 1. (ggml clamps only the
 * 4-bit quants; a 5-bit one cannot pass 31.) */
static void quantize_min_scale(uint8_t q[TENSOR_QK], uint16_t *dh, uint16_t *mh, const float *v,
                               int levels) {
    float min, max;
    block_range(v, &min, &max);
    float d = (max - min) / (float)levels;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    *dh = tensor_fp32_to_fp16(d);
    *mh = tensor_fp32_to_fp16(min);
    for (int j = 0; j < TENSOR_QK; j++) {
        int qi = (int)((v[j] - min) * id + 0.5f);
        q[j] = (uint8_t)(qi > levels ? levels : qi);
    }
}

void tensor_quantize_q4_1(void *out, const float *x, int64_t n) {
    struct tensor_block_q4_1 *b = out;
    uint8_t q[TENSOR_QK];
    for (int64_t k = 0; k < n / TENSOR_QK; k++) {
        quantize_min_scale(q, &b[k].d, &b[k].m, x + k * TENSOR_QK, 15);
        pack_quants(b[k].qs, NULL, q);
    }
}

void tensor_quantize_q5_1(void *out, const float *x, int64_t n) {
    struct tensor_block_q5_1 *b = out;
    uint8_t q[TENSOR_QK];
    for (int64_t k = 0; k < n / TENSOR_QK; k++) {
        quantize_min_scale(q, &b[k].d, &b[k].m, x + k * TENSOR_QK, 31);
        pack_quants(b[k].qs, b[k].qh, q);
    }
}

/* Q5_0: d = extreme / -16, q = v / d + 16 truncated after + 0.5, at most
 * 31 (the extreme itself lands on 0, the most negative quant). */
void tensor_quantize_q5_0(void *out, const float *x, int64_t n) {
    struct tensor_block_q5_0 *b = out;
    uint8_t q[TENSOR_QK];
    for (int64_t k = 0; k < n / TENSOR_QK; k++) {
        const float *v = x + k * TENSOR_QK;
        float d = block_extreme(v) / -16.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[k].d = tensor_fp32_to_fp16(d);
        for (int j = 0; j < TENSOR_QK; j++) {
            int qi = (int)(v[j] * id + 16.5f);
            q[j] = (uint8_t)(qi > 31 ? 31 : qi);
        }
        pack_quants(b[k].qs, b[k].qh, q);
    }
}

/* ---- IQ4_NL quantizer: best-scale search ---- */

/* Index of the table value nearest v (binary search on the sorted table). */
static int iq4_nearest(float v) {
    if (v <= tensor_iq4_values[0]) return 0;
    if (v >= tensor_iq4_values[15]) return 15;
    int lo = 0, hi = 15; /* values[lo] < v < values[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < tensor_iq4_values[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - tensor_iq4_values[lo] < tensor_iq4_values[hi] - v ? lo : hi;
}

/* Nibbles for v at inverse scale id; returns the least-squares scale for
 * them and its squared error through *err. */
static float iq4_fit(uint8_t q[TENSOR_QK], const float *v, float id, float *err) {
    float sum_xq = 0.0f, sum_qq = 0.0f, sum_xx = 0.0f;
    for (int j = 0; j < TENSOR_QK; j++) {
        q[j] = (uint8_t)iq4_nearest(v[j] * id);
        float t = (float)tensor_iq4_values[q[j]];
        sum_xq += v[j] * t;
        sum_qq += t * t;
        sum_xx += v[j] * v[j];
    }
    float d = sum_qq > 0.0f ? sum_xq / sum_qq : 0.0f;
    *err = sum_xx - d * sum_xq;
    return d;
}

/* Candidate scales: the extreme maps to a table end (either sign), moved
 * by up to IQ4_TRIES steps of one quant unit. */
#define IQ4_TRIES 7

static void quantize_iq4_block(struct tensor_block_iq4_nl *b, const float *v) {
    float max = block_extreme(v);
    uint8_t q[TENSOR_QK];
    float best_d = 0.0f, best_err = FLT_MAX;
    static const int ends[2] = {-127, 113};
    for (int e = 0; e < 2 && max != 0.0f; e++) {
        for (int t = -IQ4_TRIES; t <= IQ4_TRIES; t++) {
            float err, d = iq4_fit(q, v, (float)(ends[e] + t) / max, &err);
            if (err < best_err) {
                best_err = err;
                best_d = d;
            }
        }
    }
    b->d = tensor_fp32_to_fp16(best_d);
    float d = tensor_fp16_to_fp32(b->d);
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    /* nibbles for the scale as stored (any nibble gives 0 when d is 0) */
    for (int j = 0; j < TENSOR_QK; j++) q[j] = (uint8_t)iq4_nearest(v[j] * id);
    pack_quants(b->qs, NULL, q);
}

void tensor_quantize_iq4_nl(void *out, const float *x, int64_t n) {
    struct tensor_block_iq4_nl *b = out;
    for (int64_t k = 0; k < n / TENSOR_QK; k++) quantize_iq4_block(&b[k], x + k * TENSOR_QK);
}

/* ---- scalar row dots ---- */

/* Q4_1 / Q5_1: block k's quants (unpack), d_w * d_x to its lanes and
 * m_w * s_x to the minimums' sum, a block pair at a time. */
static float dot_with_mins(const void *w, size_t block_bytes, const struct tensor_block_q8_1 *x,
                           int blocks, void (*unpack)(int8_t *q, const void *block)) {
    struct legacy_lanes lanes = {{0}, {0}};
    float mins = 0.0f, pair = 0.0f;
    int8_t q[TENSOR_QK];
    for (int k = 0; k < blocks; k++) {
        const void *block = (const char *)w + (size_t)k * block_bytes;
        uint16_t dm[2]; /* the block's d and m: Q4_1 and Q5_1 start with them */
        memcpy(dm, block, sizeof(dm));
        unpack(q, block);
        float d = tensor_fp16_to_fp32(dm[0]) * tensor_fp16_to_fp32(x[k].d);
        float m = tensor_fp16_to_fp32(dm[1]) * tensor_fp16_to_fp32(x[k].s);
        add_block_lanes(&lanes, k, q, x[k].qs, d);
        if (k % 2 == 0 && k + 1 < blocks)
            pair = m;
        else
            mins = mins + (k % 2 ? pair + m : m);
    }
    return legacy_lanes_total(&lanes) + mins;
}

static void unpack_q4_1(int8_t *q, const void *block) {
    unpack_nibbles(q, ((const struct tensor_block_q4_1 *)block)->qs);
}

static void unpack_q5_1(int8_t *q, const void *block) {
    const struct tensor_block_q5_1 *b = block;
    unpack_q5(q, b->qs, b->qh);
}

float tensor_row_dot_q4_1_scalar(const void *w, const void *x, int n) {
    return dot_with_mins(w, sizeof(struct tensor_block_q4_1), x, n / TENSOR_QK, unpack_q4_1);
}

float tensor_row_dot_q5_1_scalar(const void *w, const void *x, int n) {
    return dot_with_mins(w, sizeof(struct tensor_block_q5_1), x, n / TENSOR_QK, unpack_q5_1);
}

float tensor_row_dot_q5_0_scalar(const void *w, const void *x, int n) {
    const struct tensor_block_q5_0 *a = w;
    const struct tensor_block_q8_0 *b = x;
    struct legacy_lanes lanes = {{0}, {0}};
    int8_t q[TENSOR_QK];
    for (int k = 0; k < n / TENSOR_QK; k++) {
        unpack_q5(q, a[k].qs, a[k].qh);
        for (int i = 0; i < TENSOR_QK; i++) q[i] = (int8_t)(q[i] - 16);
        float scale = tensor_fp16_to_fp32(a[k].d) * tensor_fp16_to_fp32(b[k].d);
        add_block_lanes(&lanes, k, q, b[k].qs, scale);
    }
    return legacy_lanes_total(&lanes);
}

float tensor_row_dot_iq4_nl_scalar(const void *w, const void *x, int n) {
    const struct tensor_block_iq4_nl *a = w;
    const struct tensor_block_q8_0 *b = x;
    struct legacy_lanes lanes = {{0}, {0}};
    int8_t q[TENSOR_QK];
    for (int k = 0; k < n / TENSOR_QK; k++) {
        unpack_nibbles(q, a[k].qs);
        for (int i = 0; i < TENSOR_QK; i++) q[i] = tensor_iq4_values[q[i]];
        float scale = tensor_fp16_to_fp32(a[k].d) * tensor_fp16_to_fp32(b[k].d);
        add_block_lanes(&lanes, k, q, b[k].qs, scale);
    }
    return legacy_lanes_total(&lanes);
}
