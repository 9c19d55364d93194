/* quants_k_low_avx2.c -- the Q2_K, Q3_K and IQ4_XS row dots with AVX2.
 *
 * Each takes 32 weights at a time as bytes against 32 activation quants:
 * _mm256_maddubs_epi16 multiplies unsigned weight bytes by signed quants
 * and adds pairs (exact: no pair passes 16 bits), _mm256_madd_epi16 then
 * multiplies the pair sums by the group scale and adds pairs again into 8
 * exact 32-bit lane sums per super-block. The lanes are converted and
 * multiplied by the super-block's float scale into 8 float sums, added with
 * a fixed tree at the end: the scalar reference (quants_k_low.c) takes
 * the same steps, so the bits are the same.
 *
 * Q3_K takes its quants biased by 4 (low bits plus 4 times the high bit,
 * 0..7, unsigned as maddubs wants them) and subtracts 4 times each group's
 * sum of activation quants afterwards, from the Q8_K block's sums: one
 * multiply instead of ggml's two. IQ4_XS looks its values up with
 * _mm256_shuffle_epi8 and, the values being signed, moves their signs onto
 * the activations first; its multi-column dot looks them up once for
 * every activation row of a batch. */
#include "quants_k_low_x86.h"

static inline float sum_lanes(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- Q2_K and Q3_K: groups of 16 ---- */

/* 32 weights of shift k (0..3) of one half of a super-block are groups
 * 2k (low 128-bit lane) and 2k + 1 (high lane) of that half; select[k]
 * picks their 16-bit scales out of the half's 8 (repeated in both lanes). */
struct scale_select {
    __m256i select[4];
};

static inline struct scale_select scale_select_make(void) {
    struct scale_select s;
    for (int k = 0; k < 4; k++) {
        short low = (short)((4 * k + 1) << 8 | (4 * k)),
              high = (short)((4 * k + 3) << 8 | (4 * k + 2));
        s.select[k] = _mm256_setr_m128i(_mm_set1_epi16(low), _mm_set1_epi16(high));
    }
    return s;
}

/* The 16 group scales (bytes) as two vectors of 16-bit values: half h's 8
 * scales in both 128-bit lanes of halves[h]. */
static inline void spread_scales(__m256i *halves, __m128i scales, int is_signed) {
    __m128i low = _mm_unpacklo_epi64(scales, scales), high = _mm_unpackhi_epi64(scales, scales);
    halves[0] = is_signed ? _mm256_cvtepi8_epi16(low) : _mm256_cvtepu8_epi16(low);
    halves[1] = is_signed ? _mm256_cvtepi8_epi16(high) : _mm256_cvtepu8_epi16(high);
}

/* One half (128 weights) of a super-block: the 4 x 32 weight bytes q
 * against its activation quants q8, times the half's group scales: 8 lane
 * sums. */
static inline __m256i half_dot(const __m256i *q, const int8_t *q8, __m256i scales,
                               const struct scale_select *sel) {
    __m256i p[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m256i pairs =
            _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)(q8 + 32 * k)));
        p[k] = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, sel->select[k]), pairs);
    }
    return _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3]));
}

float tensor_row_dot_q2_k_avx2(const void *w, const void *x, int n) {
    const struct tensor_block_q2_k *wb = w;
    const struct tensor_block_q8_k *xb = x;
    const struct scale_select sel = scale_select_make();
    const __m256i three = _mm256_set1_epi8(3);
    const __m128i nibble = _mm_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        __m128i packed = _mm_loadu_si128((const __m128i *)wb[b].scales);
        __m128i mins = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);
        __m256i min_sums = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mins),
                                             _mm256_loadu_si256((const __m256i *)xb[b].bsums));
        __m256i halves[2], sums[2];
        spread_scales(halves, _mm_and_si128(packed, nibble), 0);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(wb[b].qs + 32 * h)), q[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), three);
            sums[h] = half_dot(q, xb[b].qs + 128 * h, halves[h], &sel);
        }
        float d = xb[b].d * _cvtsh_ss(wb[b].d), dmin = xb[b].d * _cvtsh_ss(wb[b].dmin);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d),
                              _mm256_cvtepi32_ps(_mm256_add_epi32(sums[0], sums[1])), acc);
        acc = _mm256_fnmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(min_sums), acc);
    }
    return sum_lanes(acc);
}

/* Bit `bit` of every byte of v moved to bit 2 (the value 4), others 0. */
static inline __m256i bit_to_four(__m256i v, int bit) {
    __m256i moved = bit < 2 ? _mm256_slli_epi16(v, 2 - bit) : _mm256_srli_epi16(v, bit - 2);
    return _mm256_and_si256(moved, _mm256_set1_epi8(4));
}

float tensor_row_dot_q3_k_avx2(const void *w, const void *x, int n) {
    const struct tensor_block_q3_k *wb = w;
    const struct tensor_block_q8_k *xb = x;
    const struct scale_select sel = scale_select_make();
    const __m256i three = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        __m128i scales8 = q3_scales(wb[b].scales);
        /* the bias: 4 times each group's scale times its activation sum */
        __m256i bias = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scales8),
                                         _mm256_loadu_si256((const __m256i *)xb[b].bsums));
        __m256i halves[2], sums[2];
        spread_scales(halves, scales8, 1);
        __m256i high = _mm256_loadu_si256((const __m256i *)wb[b].hmask);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(wb[b].qs + 32 * h)), q[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), three),
                                       bit_to_four(high, 4 * h + k));
            sums[h] = half_dot(q, xb[b].qs + 128 * h, halves[h], &sel);
        }
        __m256i total =
            _mm256_sub_epi32(_mm256_add_epi32(sums[0], sums[1]), _mm256_slli_epi32(bias, 2));
        float d = _cvtsh_ss(wb[b].d) * xb[b].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(total), acc);
    }
    return sum_lanes(acc);
}

/* ---- IQ4_XS: groups of 32 ---- */

/* An IQ4_XS super-block unpacked, once for every activation row it meets:
 * group g's 32 values as signed bytes and their magnitudes (maddubs wants
 * unsigned weights, so each value's sign moves onto its activation), and
 * its scale in every i16 lane. */
struct iq4_xs_unpacked {
    __m256i value[8], magnitude[8], scale[8];
};

/* Group g's 32 values (from its 16 nibble bytes) as signed bytes. */
static inline __m256i iq4_lookup(__m256i values, const uint8_t *qs) {
    __m128i packed = _mm_loadu_si128((const __m128i *)qs);
    /* elements 0..15 in the low nibbles, 16..31 in the high ones */
    __m256i idx = _mm256_and_si256(_mm256_setr_m128i(packed, _mm_srli_epi16(packed, 4)),
                                   _mm256_set1_epi8(15));
    return _mm256_shuffle_epi8(values, idx);
}

/* Group g's 6-bit scale, less 32. */
static inline short iq4_xs_scale(const struct tensor_block_iq4_xs *b, int g) {
    unsigned low = b->scales_l[g / 2] >> 4 * (g % 2) & 15, high = b->scales_h >> 2 * g & 3;
    return (short)((low | high << 4) - 32);
}

static inline void unpack_iq4_xs(struct iq4_xs_unpacked *u, const struct tensor_block_iq4_xs *b,
                                 __m256i values) {
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        u->value[g] = iq4_lookup(values, b->qs + 16 * g);
        u->magnitude[g] = _mm256_sign_epi8(u->value[g], u->value[g]);
        u->scale[g] = _mm256_set1_epi16(iq4_xs_scale(b, g));
    }
}

/* The 8 exact lane sums of an unpacked super-block with the 256
 * activation quants at x: per group, 16 pair sums, weighed by the scale
 * and added in pairs into 8 lanes. */
static inline __m256i iq4_xs_sums(const struct iq4_xs_unpacked *u, const int8_t *x) {
    __m256i sums = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(x + 32 * g));
        __m256i pairs = _mm256_maddubs_epi16(u->magnitude[g], _mm256_sign_epi8(a, u->value[g]));
        sums = _mm256_add_epi32(sums, _mm256_madd_epi16(u->scale[g], pairs));
    }
    return sums;
}

/* Row dots of w with 8 activation rows x_stride bytes apart, each the
 * single dot's steps (below): the super-block's d_w * d_x times its lane
 * sums, fused into the lanes, and the lanes' tree at the end. */
void tensor_row_dots_iq4_xs_avx2(float *out, const void *w, const void *x, size_t x_stride, int n) {
    const struct tensor_block_iq4_xs *wb = w;
    const __m256i values =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tensor_iq4_values));
    __m256 acc[TENSOR_DOT_COLUMNS];
    for (int c = 0; c < TENSOR_DOT_COLUMNS; c++) acc[c] = _mm256_setzero_ps();
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        struct iq4_xs_unpacked u;
        unpack_iq4_xs(&u, &wb[b], values);
        float d_w = _cvtsh_ss(wb[b].d);
        for (int c = 0; c < TENSOR_DOT_COLUMNS; c++) {
            const struct tensor_block_q8_k *xb =
                (const struct tensor_block_q8_k *)((const char *)x + (size_t)c * x_stride) + b;
            float d = d_w * xb->d;
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(iq4_xs_sums(&u, xb->qs)),
                                     acc[c]);
        }
    }
    for (int c = 0; c < TENSOR_DOT_COLUMNS; c++) out[c] = sum_lanes(acc[c]);
}

/* Group g's 32 values times its activation quants: 16 pair sums. */
static inline __m256i iq4_pairs(__m256i values, const uint8_t *qs, const int8_t *q8) {
    __m256i v = iq4_lookup(values, qs);
    __m256i a = _mm256_loadu_si256((const __m256i *)q8);
    return _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(a, v));
}

/* The single dot looks each group up as it uses it: unpacking a whole
 * super-block first, as the multi-column dot does for its 8 rows, spills
 * registers (measured: GEMV 8-45% slower, 2 rounds). The lane sums and the float
 * steps are the same. */
float tensor_row_dot_iq4_xs_avx2(const void *w, const void *x, int n) {
    const struct tensor_block_iq4_xs *wb = w;
    const struct tensor_block_q8_k *xb = x;
    const __m256i values =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tensor_iq4_values));
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int g = 0; g < 8; g += 2) {
            short s0 = iq4_xs_scale(&wb[b], g), s1 = iq4_xs_scale(&wb[b], g + 1);
            __m256i p0 = iq4_pairs(values, wb[b].qs + 16 * g, xb[b].qs + 32 * g);
            __m256i p1 = iq4_pairs(values, wb[b].qs + 16 * g + 16, xb[b].qs + 32 * g + 32);
            even = _mm256_add_epi32(even, _mm256_madd_epi16(_mm256_set1_epi16(s0), p0));
            odd = _mm256_add_epi32(odd, _mm256_madd_epi16(_mm256_set1_epi16(s1), p1));
        }
        float d = _cvtsh_ss(wb[b].d) * xb[b].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_add_epi32(even, odd)),
                              acc);
    }
    return sum_lanes(acc);
}
