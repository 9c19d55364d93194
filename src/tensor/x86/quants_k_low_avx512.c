/* quants_k_low_avx512.c -- the Q2_K, Q3_K and IQ4_XS row dots with
 * AVX-512 (BW and VNNI), giving the bits of the scalar references
 * (quants_k_low.c, quants_iq4_xs.c).
 *
 * A vector holds 64 consecutive weights, so the activation quants load
 * straight from the Q8_K block. Each super-block's sum of scale * quant *
 * activation is made exactly in 32-bit lanes, whose order then does not
 * matter, and folded to the one integer the scalar reference makes; the
 * float steps after it are the reference's, in its order. (The AVX2 dots
 * keep 8 float lanes instead, and so differ from it by rounding.)
 *
 * Q2_K / Q3_K (groups of 16: one 128-bit lane each) multiply unsigned
 * quant bytes by the activations with _mm512_maddubs_epi16, and vpdpwssd
 * weighs each pair sum with its group's scale and adds it in one step.
 * Q3_K takes its quants biased by 4, as the AVX2 dot does. IQ4_XS values
 * are signed and AVX-512 has no byte sign instruction, so its values are
 * looked up biased by 128 (unsigned) for vpdpbusd, and 128 times each
 * group's activation sum comes off afterwards. */
#include "quants_k_low_x86.h"

/* The sum of the 8 i32 lanes of v. */
static inline int32_t sum_lanes(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* The i32 lanes of v added in pairs to 8 (exact: the same total). */
static inline __m256i fold(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* ---- Q2_K and Q3_K: groups of 16 ---- */

/* The 16 group scales (i16 lanes of scales) spread for vectors m = 0..3:
 * i16 lane i of scale[m] holds the scale of group 4m + i / 8, the group of
 * the quant byte pair it weighs. */
static inline void spread_scales(__m512i *scale, __m256i scales) {
    const __m512i lane_group =
        _mm512_set_epi64(0x0003000300030003LL, 0x0003000300030003LL, 0x0002000200020002LL,
                         0x0002000200020002LL, 0x0001000100010001LL, 0x0001000100010001LL, 0, 0);
    __m512i wide = _mm512_castsi256_si512(scales);
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++)
        scale[m] = _mm512_permutexvar_epi16(
            _mm512_add_epi16(lane_group, _mm512_set1_epi16((short)(4 * m))), wide);
}

/* The 2-bit quants of values 64m .. 64m + 63: in the 32 bytes of half
 * m / 2, bits 4 (m % 2) for the first 32 and the next two bits for the
 * rest (unpack_low_bits in quants_k_low.c). */
static inline __m512i low_bits(const uint8_t *qs, int m) {
    __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * (m / 2))));
    __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * (m % 2))),
                                       _mm256_set1_epi16((short)(4 * (m % 2) + 2)), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(bits, shift), _mm512_set1_epi8(3));
}

/* Lanes whose total is sum_g scale_g * sum_{j in g} q_j * x_j over a
 * super-block, exact. */
static inline __m512i groups16_dot(const __m512i *q, const __m512i *scale, const int8_t *x) {
    __m512i sums = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        __m512i a = _mm512_loadu_si512((const void *)(x + 64 * m));
        sums = _mm512_dpwssd_epi32(sums, _mm512_maddubs_epi16(q[m], a), scale[m]);
    }
    return sums;
}

/* The totals of the i32 lanes of a (in i32 lane 0) and of b (lane 1), in
 * one tree. */
static inline __m128i two_totals(__m512i a, __m256i b) {
    __m256i h = _mm256_hadd_epi32(fold(a), b);
    h = _mm256_hadd_epi32(h, h);
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

float tensor_row_dot_q2_k_avx512(const void *w, const void *x, int n) {
    const struct tensor_block_q2_k *wb = w;
    const struct tensor_block_q8_k *xb = x;
    float sum = 0.0f;
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        __m256i packed = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)wb[b].scales));
        __m256i bsums = _mm256_loadu_si256((const __m256i *)xb[b].bsums);
        __m256i mins = _mm256_madd_epi16(_mm256_srli_epi16(packed, 4), bsums);
        __m512i q[4], scale[4];
        spread_scales(scale, _mm256_and_si256(packed, _mm256_set1_epi16(15)));
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) q[m] = low_bits(wb[b].qs, m);
        /* the scalar steps d * dots - dmin * mins, d and dmin side by side */
        __m128 totals = _mm_cvtepi32_ps(two_totals(groups16_dot(q, scale, xb[b].qs), mins));
        uint32_t d_dmin;
        memcpy(&d_dmin, &wb[b].d, sizeof(d_dmin));
        __m128 d = _mm_mul_ps(_mm_set1_ps(xb[b].d), _mm_cvtph_ps(_mm_cvtsi32_si128((int)d_dmin)));
        __m128 terms = _mm_mul_ps(d, totals);
        sum += _mm_cvtss_f32(_mm_sub_ss(terms, _mm_movehdup_ps(terms)));
    }
    return sum;
}

/* low_bits of vector m plus 4 where the high bit is set: bit 2m of hmask
 * byte j for value 64m + j, bit 2m + 1 for 64m + 32 + j (high: the 32
 * hmask bytes in both halves). */
static inline __m512i q3_biased(const uint8_t *qs, __m512i high, int m) {
    __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << 2 * m)),
                                     _mm256_set1_epi8((char)(1 << (2 * m + 1))), 1);
    __m512i q = low_bits(qs, m);
    return _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(high, bit), q, _mm512_set1_epi8(4));
}

float tensor_row_dot_q3_k_avx512(const void *w, const void *x, int n) {
    const struct tensor_block_q3_k *wb = w;
    const struct tensor_block_q8_k *xb = x;
    float sum = 0.0f;
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        __m256i scales = _mm256_cvtepi8_epi16(q3_scales(wb[b].scales));
        /* the bias: 4 times each group's scale times its activation sum */
        __m256i bsums = _mm256_loadu_si256((const __m256i *)xb[b].bsums);
        __m256i bias = _mm256_madd_epi16(scales, bsums);
        __m512i high = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)wb[b].hmask));
        __m512i q[4], scale[4];
        spread_scales(scale, scales);
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) q[m] = q3_biased(wb[b].qs, high, m);
        int32_t dots = sum_lanes(
            _mm256_sub_epi32(fold(groups16_dot(q, scale, xb[b].qs)), _mm256_slli_epi32(bias, 2)));
        sum += _cvtsh_ss(wb[b].d) * xb[b].d * (float)dots;
    }
    return sum;
}

/* ---- IQ4_XS: groups of 32 ---- */

/* The 8 group scales (-32..31) of an IQ4_XS block in i32 lanes: 4 low bits
 * at bit 4g of scales_l, 2 high bits at bit 2g of scales_h. */
static inline __m256i iq4_xs_scales(const struct tensor_block_iq4_xs *block) {
    uint32_t low;
    memcpy(&low, block->scales_l, sizeof(low));
    __m256i l = _mm256_srlv_epi32(_mm256_set1_epi32((int)low),
                                  _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    __m256i h = _mm256_srlv_epi32(_mm256_set1_epi32(block->scales_h),
                                  _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    __m256i scales =
        _mm256_or_si256(_mm256_and_si256(l, _mm256_set1_epi32(15)),
                        _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(3)), 4));
    return _mm256_sub_epi32(scales, _mm256_set1_epi32(32));
}

/* The nibbles of groups 2m, 2m + 1 (32 bytes at qs) in value order: per
 * group the low nibbles of its 16 bytes, then the high ones. */
static inline __m512i iq4_indices(const uint8_t *qs) {
    __m512i bytes = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)qs));
    __m512i lanes = _mm512_shuffle_i64x2(bytes, bytes, _MM_SHUFFLE(1, 1, 0, 0));
    const long long four = 0x0004000400040004LL;
    __m512i shift = _mm512_set_epi64(four, four, 0, 0, four, four, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi16(lanes, shift), _mm512_set1_epi8(15));
}

/* sum_g scale_g * sum_{j in g} (value_j + 128) * x_j over a super-block:
 * vector m's low half is group 2m, its high half group 2m + 1. */
static inline __m512i iq4_biased_dots(const struct tensor_block_iq4_xs *block, const int8_t *x,
                                      __m256i scales, __m512i biased_values) {
    __m512i wide = _mm512_castsi256_si512(scales), sums = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        __m512i u = _mm512_shuffle_epi8(biased_values, iq4_indices(block->qs + 32 * m));
        __m512i a = _mm512_loadu_si512((const void *)(x + 64 * m));
        __m512i dots = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, a);
        __m512i scale = _mm512_permutexvar_epi32(
            _mm512_inserti64x4(_mm512_set1_epi32(2 * m), _mm256_set1_epi32(2 * m + 1), 1), wide);
        sums = _mm512_add_epi32(sums, _mm512_mullo_epi32(dots, scale));
    }
    return sums;
}

float tensor_row_dot_iq4_xs_avx512(const void *w, const void *x, int n) {
    const struct tensor_block_iq4_xs *wb = w;
    const struct tensor_block_q8_k *xb = x;
    const __m512i biased_values = _mm512_xor_si512(
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)tensor_iq4_values)),
        _mm512_set1_epi8((char)0x80));
    float sum = 0.0f;
    for (int b = 0; b < n / TENSOR_QK_K; b++) {
        __m256i scales = iq4_xs_scales(&wb[b]);
        /* each group's activation sum: its two 16-sums */
        __m256i group_sums = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb[b].bsums),
                                               _mm256_set1_epi16(1));
        __m256i bias = _mm256_slli_epi32(_mm256_mullo_epi32(scales, group_sums), 7);
        int32_t dots = sum_lanes(
            _mm256_sub_epi32(fold(iq4_biased_dots(&wb[b], xb[b].qs, scales, biased_values)), bias));
        sum += _cvtsh_ss(wb[b].d) * xb[b].d * (float)dots;
    }
    return sum;
}
