/* quants_legacy_avx2.c -- the Q4_1, Q5_0, Q5_1 and IQ4_NL row dots with
 * AVX2: a block's 32 weight quants are unpacked into one register of
 * bytes, multiplied with the 32 activation quants by 8-bit multiply-adds
 * (_mm256_maddubs_epi16, then _mm256_madd_epi16 into 8 exact int32 sums),
 * and the sums, converted to float, are added times the block's two scales
 * into lane accumulators. Even and odd blocks go to two accumulators so
 * that consecutive blocks do not wait on each other's additions; the lanes
 * are added by a fixed tree at the end. The fp16 scales of a block pair
 * are converted by one instruction (their scalar conversions, not the
 * multiply-adds, were what bounded a loop of one block at a time). Integer
 * parts are exact, and the scalar reference (quants_legacy.c) takes the
 * same float steps in the same order: the same bits. */
#include "x86.h"

#include <immintrin.h>
#include <string.h>

/* Byte j: element j of the block (low nibble of qs[j]), byte j + 16:
 * element j + 16 (its high nibble). */
static inline __m256i unpack_nibbles(const uint8_t *qs) {
    __m128i packed = _mm_loadu_si128((const __m128i *)qs);
    __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

/* Byte i: 0xff if bit i of the little-endian qh is set, else 0. */
static inline __m256i fifth_bits(const uint8_t *qh) {
    uint32_t bits;
    memcpy(&bits, qh, sizeof(bits));
    /* byte i takes byte i / 8 of qh, then keeps bit i % 8 */
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                             0x0101010101010101, 0x0000000000000000);
    const __m256i select = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, select), select);
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

static inline float sum_lanes(__m256 a, __m256 b) {
    __m256 v = _mm256_add_ps(a, b);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- Q4_1 and Q5_1 (activations Q8_1) ---- */

/* The two fp16 numbers a block starts with (weights: d and m; Q8_1: d and
 * d * sum) in the two low lanes. */
static inline __m128 scale_pair(const void *block) {
    uint32_t bits;
    memcpy(&bits, block, sizeof(bits));
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)bits));
}

/* The integer sums of one weight block (at w) with its activation block. */
typedef __m256i (*sums_with_q8_1_fn)(const char *w, const struct tensor_block_q8_1 *x);

/* The row dot of weights with a minimum: lane 0 of a scale pair product is
 * d_w * d_x, which scales the block's sums; lane 1, m_w * (d_x * sum x),
 * is added up separately (block pairs first, as the scalar sum of two
 * terms would be). */
static inline float dot_with_mins(const char *w, size_t block_bytes,
                                  const struct tensor_block_q8_1 *x, int blocks,
                                  sums_with_q8_1_fn sums) {
    __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
    __m128 mins = _mm_setzero_ps();
    int k = 0;
    for (; k + 2 <= blocks; k += 2) {
        const char *w0 = w + (size_t)k * block_bytes, *w1 = w0 + block_bytes;
        __m128 s0 = _mm_mul_ps(scale_pair(w0), scale_pair(&x[k]));
        __m128 s1 = _mm_mul_ps(scale_pair(w1), scale_pair(&x[k + 1]));
        even =
            _mm256_fmadd_ps(_mm256_broadcastss_ps(s0), _mm256_cvtepi32_ps(sums(w0, &x[k])), even);
        odd = _mm256_fmadd_ps(_mm256_broadcastss_ps(s1), _mm256_cvtepi32_ps(sums(w1, &x[k + 1])),
                              odd);
        mins = _mm_add_ps(mins, _mm_add_ps(s0, s1));
    }
    if (k < blocks) {
        const char *w0 = w + (size_t)k * block_bytes;
        __m128 s0 = _mm_mul_ps(scale_pair(w0), scale_pair(&x[k]));
        even =
            _mm256_fmadd_ps(_mm256_broadcastss_ps(s0), _mm256_cvtepi32_ps(sums(w0, &x[k])), even);
        mins = _mm_add_ps(mins, s0);
    }
    return sum_lanes(even, odd) + _mm_cvtss_f32(_mm_movehdup_ps(mins));
}

static inline __m256i q4_1_sums(const char *w, const struct tensor_block_q8_1 *x) {
    const struct tensor_block_q4_1 *a = (const struct tensor_block_q4_1 *)w;
    return dot_unsigned(unpack_nibbles(a->qs), load_quants(x->qs));
}

float tensor_row_dot_q4_1_avx2(const void *w, const void *x, int n) {
    return dot_with_mins(w, sizeof(struct tensor_block_q4_1), x, n / TENSOR_QK, q4_1_sums);
}

static inline __m256i q5_1_sums(const char *w, const struct tensor_block_q8_1 *x) {
    const struct tensor_block_q5_1 *a = (const struct tensor_block_q5_1 *)w;
    __m256i high = _mm256_and_si256(fifth_bits(a->qh), _mm256_set1_epi8(0x10));
    return dot_unsigned(_mm256_or_si256(unpack_nibbles(a->qs), high), load_quants(x->qs));
}

float tensor_row_dot_q5_1_avx2(const void *w, const void *x, int n) {
    return dot_with_mins(w, sizeof(struct tensor_block_q5_1), x, n / TENSOR_QK, q5_1_sums);
}

/* ---- Q5_0 and IQ4_NL (activations Q8_0) ---- */

/* The fp16 scale a block starts with, as bits. */
static inline uint64_t scale_bits(const void *block) {
    uint16_t h;
    memcpy(&h, block, sizeof(h));
    return h;
}

/* d_w * d_x of two consecutive blocks (weights at w0 and w1, activations
 * x[0] and x[1]) in lanes 0 and 1: the four fp16 scales converted at once. */
static inline __m128 scales_of_pair(const char *w0, const char *w1,
                                    const struct tensor_block_q8_0 *x) {
    uint64_t bits =
        scale_bits(w0) | scale_bits(w1) << 16 | scale_bits(&x[0]) << 32 | scale_bits(&x[1]) << 48;
    __m128 s = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)bits));
    return _mm_mul_ps(s, _mm_movehl_ps(s, s));
}

/* The integer sums of one weight block (at w) with its activation block. */
typedef __m256i (*sums_with_q8_0_fn)(const char *w, const struct tensor_block_q8_0 *x);

/* The row dot of weights whose blocks start with their fp16 scale. */
static inline float dot_with_q8_0(const char *w, size_t block_bytes,
                                  const struct tensor_block_q8_0 *x, int blocks,
                                  sums_with_q8_0_fn sums) {
    __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
    int k = 0;
    for (; k + 2 <= blocks; k += 2) {
        const char *w0 = w + (size_t)k * block_bytes, *w1 = w0 + block_bytes;
        __m128 s = scales_of_pair(w0, w1, &x[k]);
        even = _mm256_fmadd_ps(_mm256_broadcastss_ps(s), _mm256_cvtepi32_ps(sums(w0, &x[k])), even);
        odd = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(s)),
                              _mm256_cvtepi32_ps(sums(w1, &x[k + 1])), odd);
    }
    if (k < blocks) {
        const char *w0 = w + (size_t)k * block_bytes;
        float scale = half((uint16_t)scale_bits(w0)) * half(x[k].d);
        even = _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(sums(w0, &x[k])), even);
    }
    return sum_lanes(even, odd);
}

static inline __m256i q5_0_sums(const char *w, const struct tensor_block_q8_0 *x) {
    const struct tensor_block_q5_0 *a = (const struct tensor_block_q5_0 *)w;
    /* q - 16 as a signed byte: the nibble, less 16 where the fifth bit is
     * clear (its top four bits set) */
    __m256i low = _mm256_andnot_si256(fifth_bits(a->qh), _mm256_set1_epi8((char)0xf0));
    return dot_signed(_mm256_or_si256(unpack_nibbles(a->qs), low), load_quants(x->qs));
}

float tensor_row_dot_q5_0_avx2(const void *w, const void *x, int n) {
    return dot_with_q8_0(w, sizeof(struct tensor_block_q5_0), x, n / TENSOR_QK, q5_0_sums);
}

static inline __m256i iq4_nl_sums(const char *w, const struct tensor_block_q8_0 *x) {
    const struct tensor_block_iq4_nl *a = (const struct tensor_block_iq4_nl *)w;
    /* the table in both halves: a byte shuffle looks the nibbles up */
    const __m256i table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tensor_iq4_values));
    __m256i q = _mm256_shuffle_epi8(table, unpack_nibbles(a->qs));
    return dot_signed(q, load_quants(x->qs));
}

float tensor_row_dot_iq4_nl_avx2(const void *w, const void *x, int n) {
    return dot_with_q8_0(w, sizeof(struct tensor_block_iq4_nl), x, n / TENSOR_QK, iq4_nl_sums);
}
