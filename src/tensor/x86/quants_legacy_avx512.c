/* quants_legacy_avx512.c -- the Q4_1, Q5_0, Q5_1 and IQ4_NL row dots with
 * AVX-512 (BW and VNNI): one 512-bit vector holds a pair of blocks, the
 * even block's 32 quants in its low half and the odd block's in its high
 * half, and vpdpbusd multiplies them with the activations and adds each 4
 * products into an i32 lane in one step (AVX2 needs _mm256_maddubs_epi16
 * and _mm256_madd_epi16). The fifth bits of Q5_0 / Q5_1 are a mask
 * register as they are stored, one bit per byte lane.
 *
 * The lanes are those of quants_legacy_avx2.c: lane i of a block holds the
 * exact sum of its products 4i .. 4i + 3, the low half of the accumulator
 * is AVX2's even accumulator and the high half its odd one, and the float
 * steps (scales, fused multiply-adds, the final tree) are the same, so
 * these dots give the AVX2 dots' bits. */
#include "x86.h"

#include <immintrin.h>
#include <string.h>

/* Bytes 0-15 and 16-31: the low then high nibbles of the 16 bytes at qs0
 * (an even block's elements in order), bytes 32-63 the same of qs1. */
static inline __m512i unpack_nibble_pair(const uint8_t *qs0, const uint8_t *qs1) {
    __m512i both = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs0))),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs1)), 1);
    /* each 64-bit lane of a second copy moves down a nibble */
    const __m512i shift = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi64(both, shift), _mm512_set1_epi8(0x0f));
}

/* Bit i: the fifth bit of element i of the even block (qh0), bit 32 + i of
 * the odd one (qh1). */
static inline __mmask64 fifth_bit_pair(const uint8_t *qh0, const uint8_t *qh1) {
    uint32_t even, odd;
    memcpy(&even, qh0, sizeof(even));
    memcpy(&odd, qh1, sizeof(odd));
    return _cvtu64_mask64((uint64_t)odd << 32 | even);
}

/* The 32 activation quants of two blocks, in the weights' halves. */
static inline __m512i load_quant_pair(const int8_t *qs0, const int8_t *qs1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)qs0)),
                              _mm256_loadu_si256((const __m256i *)qs1), 1);
}

/* Lane i: the exact sum of products 4i .. 4i + 3 of unsigned u and signed
 * s (vpdpbusd does not saturate). */
static inline __m512i dot_unsigned(__m512i u, __m512i s) {
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
}

/* The same sums for the signed weights u - bias (u, bias unsigned bytes):
 * the products with bias are taken away in the same lanes, so each lane's
 * integer equals AVX2's sign-trick sum. */
static inline __m512i dot_biased(__m512i u, __m512i s, char bias) {
    return _mm512_sub_epi32(dot_unsigned(u, s), dot_unsigned(_mm512_set1_epi8(bias), s));
}

/* Lanes 0 and 2 of s, each in 8 lanes: the scales of an even and an odd
 * block, one per half. */
static inline __m512 halves_of(__m128 s) {
    const __m512i pick = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(s));
}

/* The low 8 lanes plus the high 8, added as AVX2's sum_lanes adds its even
 * and odd accumulators. */
static inline float sum_lanes(__m512 acc) {
    __m256 v = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* acc + scale * sums in the low (even block) half only: a last lone block. */
static inline __m512 add_even(__m512 acc, float scale, __m512i sums) {
    return _mm512_mask3_fmadd_ps(_mm512_set1_ps(scale), _mm512_cvtepi32_ps(sums), acc, 0x00ff);
}

/* ---- Q4_1 and Q5_1 (activations Q8_1) ---- */

/* The fp16 pairs two blocks start with (weights: d, m; Q8_1: d, d * sum),
 * converted at once: d0, m0, d1, m1. */
static inline __m128 scale_pairs(const void *b0, const void *b1) {
    uint32_t first, second;
    memcpy(&first, b0, sizeof(first));
    memcpy(&second, b1, sizeof(second));
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)((uint64_t)second << 32 | first)));
}

/* The integer sums of the weight blocks at w0, w1 with activations x0, x1
 * (a lone block: w1 = w0, x1 = x0, the high half unused). */
typedef __m512i (*pair_sums_q8_1_fn)(const char *w0, const char *w1,
                                     const struct tensor_block_q8_1 *x0,
                                     const struct tensor_block_q8_1 *x1);

/* dot_with_mins of quants_legacy_avx2.c: lane 0 of a block's scale pair
 * product scales its sums, lane 1 (m_w * d_x * sum x) is added up apart,
 * a block pair's two first. */
static inline float dot_with_mins(const char *w, size_t block_bytes,
                                  const struct tensor_block_q8_1 *x, int blocks,
                                  pair_sums_q8_1_fn sums) {
    __m512 acc = _mm512_setzero_ps();
    __m128 mins = _mm_setzero_ps();
    int k = 0;
    for (; k + 2 <= blocks; k += 2) {
        const char *w0 = w + (size_t)k * block_bytes, *w1 = w0 + block_bytes;
        __m128 s = _mm_mul_ps(scale_pairs(w0, w1), scale_pairs(&x[k], &x[k + 1]));
        acc =
            _mm512_fmadd_ps(halves_of(s), _mm512_cvtepi32_ps(sums(w0, w1, &x[k], &x[k + 1])), acc);
        mins = _mm_add_ps(mins, _mm_add_ps(s, _mm_movehl_ps(s, s)));
    }
    if (k < blocks) {
        const char *w0 = w + (size_t)k * block_bytes;
        __m128 s = _mm_mul_ps(scale_pairs(w0, w0), scale_pairs(&x[k], &x[k]));
        acc = add_even(acc, _mm_cvtss_f32(s), sums(w0, w0, &x[k], &x[k]));
        mins = _mm_add_ps(mins, s);
    }
    return sum_lanes(acc) + _mm_cvtss_f32(_mm_movehdup_ps(mins));
}

static inline __m512i q4_1_sums(const char *w0, const char *w1, const struct tensor_block_q8_1 *x0,
                                const struct tensor_block_q8_1 *x1) {
    const struct tensor_block_q4_1 *a0 = (const void *)w0, *a1 = (const void *)w1;
    return dot_unsigned(unpack_nibble_pair(a0->qs, a1->qs), load_quant_pair(x0->qs, x1->qs));
}

float tensor_row_dot_q4_1_avx512(const void *w, const void *x, int n) {
    return dot_with_mins(w, sizeof(struct tensor_block_q4_1), x, n / TENSOR_QK, q4_1_sums);
}

static inline __m512i q5_1_sums(const char *w0, const char *w1, const struct tensor_block_q8_1 *x0,
                                const struct tensor_block_q8_1 *x1) {
    const struct tensor_block_q5_1 *a0 = (const void *)w0, *a1 = (const void *)w1;
    __m512i q = unpack_nibble_pair(a0->qs, a1->qs);
    q = _mm512_mask_add_epi8(q, fifth_bit_pair(a0->qh, a1->qh), q, _mm512_set1_epi8(0x10));
    return dot_unsigned(q, load_quant_pair(x0->qs, x1->qs));
}

float tensor_row_dot_q5_1_avx512(const void *w, const void *x, int n) {
    return dot_with_mins(w, sizeof(struct tensor_block_q5_1), x, n / TENSOR_QK, q5_1_sums);
}

/* ---- Q5_0 and IQ4_NL (activations Q8_0) ---- */

/* The fp16 scale a block starts with, as bits. */
static inline uint64_t scale_bits(const void *block) {
    uint16_t h;
    memcpy(&h, block, sizeof(h));
    return h;
}

/* d_w * d_x of blocks w0, w1 with x[0], x[1] in lanes 0 and 1, as
 * scales_of_pair of quants_legacy_avx2.c, then spread to lanes 0 and 2. */
static inline __m128 scales_of_pair(const char *w0, const char *w1,
                                    const struct tensor_block_q8_0 *x) {
    uint64_t bits =
        scale_bits(w0) | scale_bits(w1) << 16 | scale_bits(&x[0]) << 32 | scale_bits(&x[1]) << 48;
    __m128 s = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)bits));
    return _mm_unpacklo_ps(_mm_mul_ps(s, _mm_movehl_ps(s, s)), _mm_setzero_ps());
}

/* The integer sums of the weight blocks at w0, w1 with activations x0, x1
 * (a lone block: w1 = w0, x1 = x0, the high half unused). */
typedef __m512i (*pair_sums_q8_0_fn)(const char *w0, const char *w1,
                                     const struct tensor_block_q8_0 *x0,
                                     const struct tensor_block_q8_0 *x1);

/* dot_with_q8_0 of quants_legacy_avx2.c. */
static inline float dot_with_q8_0(const char *w, size_t block_bytes,
                                  const struct tensor_block_q8_0 *x, int blocks,
                                  pair_sums_q8_0_fn sums) {
    __m512 acc = _mm512_setzero_ps();
    int k = 0;
    for (; k + 2 <= blocks; k += 2) {
        const char *w0 = w + (size_t)k * block_bytes, *w1 = w0 + block_bytes;
        __m128 s = scales_of_pair(w0, w1, &x[k]);
        acc =
            _mm512_fmadd_ps(halves_of(s), _mm512_cvtepi32_ps(sums(w0, w1, &x[k], &x[k + 1])), acc);
    }
    if (k < blocks) {
        const char *w0 = w + (size_t)k * block_bytes;
        float scale = _cvtsh_ss((uint16_t)scale_bits(w0)) * _cvtsh_ss(x[k].d);
        acc = add_even(acc, scale, sums(w0, w0, &x[k], &x[k]));
    }
    return sum_lanes(acc);
}

static inline __m512i q5_0_sums(const char *w0, const char *w1, const struct tensor_block_q8_0 *x0,
                                const struct tensor_block_q8_0 *x1) {
    const struct tensor_block_q5_0 *a0 = (const void *)w0, *a1 = (const void *)w1;
    __m512i q = unpack_nibble_pair(a0->qs, a1->qs);
    q = _mm512_mask_add_epi8(q, fifth_bit_pair(a0->qh, a1->qh), q, _mm512_set1_epi8(0x10));
    return dot_biased(q, load_quant_pair(x0->qs, x1->qs), 16);
}

float tensor_row_dot_q5_0_avx512(const void *w, const void *x, int n) {
    return dot_with_q8_0(w, sizeof(struct tensor_block_q5_0), x, n / TENSOR_QK, q5_0_sums);
}

/* tensor_iq4_values + 128 (1 .. 241), in every 128-bit lane: a byte
 * shuffle looks the nibbles up as unsigned bytes for vpdpbusd. */
static inline __m512i iq4_table_biased(void) {
    __m128i table = _mm_loadu_si128((const __m128i *)tensor_iq4_values);
    return _mm512_broadcast_i32x4(_mm_xor_si128(table, _mm_set1_epi8((char)0x80)));
}

static inline __m512i iq4_nl_sums(const char *w0, const char *w1,
                                  const struct tensor_block_q8_0 *x0,
                                  const struct tensor_block_q8_0 *x1) {
    const struct tensor_block_iq4_nl *a0 = (const void *)w0, *a1 = (const void *)w1;
    __m512i q = _mm512_shuffle_epi8(iq4_table_biased(), unpack_nibble_pair(a0->qs, a1->qs));
    return dot_biased(q, load_quant_pair(x0->qs, x1->qs), (char)0x80);
}

float tensor_row_dot_iq4_nl_avx512(const void *w, const void *x, int n) {
    return dot_with_q8_0(w, sizeof(struct tensor_block_iq4_nl), x, n / TENSOR_QK, iq4_nl_sums);
}
