/* quants_legacy_avx2.c -- the Q4_1, Q5_0, Q5_1 and IQ4_NL row dots with
 * AVX2: a block's 32 weight quants are unpacked into one register of
 * bytes, multiplied with the 32 activation quants by 8-bit multiply-adds
 * (_mm256_maddubs_epi16, then _mm256_madd_epi16 into 8 exact int32 sums),
 * and the sums, converted to float, are added times the block's two scales
 * into lane accumulators. Even and odd blocks go to two accumulators so
 * that consecutive blocks do not wait on each other's additions; the lanes
 * are added by a fixed tree at the end. Integer parts are exact, so a
 * result differs from the scalar reference (quants_legacy.c) by float
 * rounding only. */
#include "tensor_internal.h"

#include <immintrin.h>
#include <string.h>

/* Byte j: element j of the block (low nibble of qs[j]), byte j + 16:
 * element j + 16 (its high nibble). */
static inline __m256i unpack_nibbles(const uint8_t *qs) {
    __m128i packed = _mm_loadu_si128((const __m128i *)qs);
    __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

/* Byte i: 0x10 if bit i of the little-endian qh is set, else 0. */
static inline __m256i fifth_bits(const uint8_t *qh) {
    uint32_t bits;
    memcpy(&bits, qh, sizeof(bits));
    /* byte i takes byte i / 8 of qh, then keeps bit i % 8 */
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                             0x0101010101010101, 0x0000000000000000);
    const __m256i select = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, select), select);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

/* 8 int32 sums of products of unsigned bytes u (at most 127) and signed
 * bytes s: no 16-bit sum can saturate. */
static inline __m256i dot_unsigned(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* The same for two signed operands (a never -128): |a| times b with a's
 * sign. */
static inline __m256i dot_signed(__m256i a, __m256i b) {
    return dot_unsigned(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

static inline __m256i load_quants(const int8_t *qs) {
    return _mm256_loadu_si256((const __m256i *)qs);
}

static inline float half(uint16_t h) {
    return _cvtsh_ss(h);
}

/* acc + sums * scale. */
static inline __m256 add_block(__m256 acc, __m256i sums, float scale) {
    return _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(sums), acc);
}

static inline float sum_lanes(__m256 a, __m256 b) {
    __m256 v = _mm256_add_ps(a, b);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- Q4_1 and Q5_1 (activations Q8_1) ---- */

static inline __m256i q4_1_sums(const struct tensor_block_q4_1 *a,
                                const struct tensor_block_q8_1 *b) {
    return dot_unsigned(unpack_nibbles(a->qs), load_quants(b->qs));
}

float tensor_row_dot_q4_1_avx2(const void *w, const void *x, int n) {
    const struct tensor_block_q4_1 *a = w;
    const struct tensor_block_q8_1 *b = x;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    float mins = 0.0f; /* sum of weight minimum times activation d * sum */
    for (int k = 0; k < n / TENSOR_QK; k++) {
        acc[k & 1] = add_block(acc[k & 1], q4_1_sums(&a[k], &b[k]), half(a[k].d) * half(b[k].d));
        mins += half(a[k].m) * half(b[k].s);
    }
    return sum_lanes(acc[0], acc[1]) + mins;
}

static inline __m256i q5_1_sums(const struct tensor_block_q5_1 *a,
                                const struct tensor_block_q8_1 *b) {
    __m256i q = _mm256_or_si256(unpack_nibbles(a->qs), fifth_bits(a->qh));
    return dot_unsigned(q, load_quants(b->qs));
}

float tensor_row_dot_q5_1_avx2(const void *w, const void *x, int n) {
    const struct tensor_block_q5_1 *a = w;
    const struct tensor_block_q8_1 *b = x;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    float mins = 0.0f;
    for (int k = 0; k < n / TENSOR_QK; k++) {
        acc[k & 1] = add_block(acc[k & 1], q5_1_sums(&a[k], &b[k]), half(a[k].d) * half(b[k].d));
        mins += half(a[k].m) * half(b[k].s);
    }
    return sum_lanes(acc[0], acc[1]) + mins;
}

/* ---- Q5_0 and IQ4_NL (activations Q8_0) ---- */

static inline __m256i q5_0_sums(const struct tensor_block_q5_0 *a,
                                const struct tensor_block_q8_0 *b) {
    __m256i q = _mm256_or_si256(unpack_nibbles(a->qs), fifth_bits(a->qh));
    return dot_signed(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), load_quants(b->qs));
}

float tensor_row_dot_q5_0_avx2(const void *w, const void *x, int n) {
    const struct tensor_block_q5_0 *a = w;
    const struct tensor_block_q8_0 *b = x;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int k = 0; k < n / TENSOR_QK; k++)
        acc[k & 1] = add_block(acc[k & 1], q5_0_sums(&a[k], &b[k]), half(a[k].d) * half(b[k].d));
    return sum_lanes(acc[0], acc[1]);
}

float tensor_row_dot_iq4_nl_avx2(const void *w, const void *x, int n) {
    const struct tensor_block_iq4_nl *a = w;
    const struct tensor_block_q8_0 *b = x;
    /* the table in both halves: a byte shuffle looks the nibbles up */
    const __m256i table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tensor_iq4_values));
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int k = 0; k < n / TENSOR_QK; k++) {
        __m256i q = _mm256_shuffle_epi8(table, unpack_nibbles(a[k].qs));
        __m256i sums = dot_signed(q, load_quants(b[k].qs));
        acc[k & 1] = add_block(acc[k & 1], sums, half(a[k].d) * half(b[k].d));
    }
    return sum_lanes(acc[0], acc[1]);
}
