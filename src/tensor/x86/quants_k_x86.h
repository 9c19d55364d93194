/* quants_k_x86.h -- the pieces the AVX2 and AVX-512 k-quant row dots
 * (quants_k_avx2.c, quants_k_avx512.c) share: unpacking Q4_K / Q5_K scales
 * and Q6_K group scales, the scaled group dot, and the float lanes both
 * follow (the order of quants_k.c), so both give the scalar reference's
 * bits. Included only by files compiled for AVX2 or more. */
#ifndef LOCKSTEP_TENSOR_QUANTS_K_X86_H
#define LOCKSTEP_TENSOR_QUANTS_K_X86_H

#include "x86.h"

#include <immintrin.h>
#include <string.h>

/* The sum of the 8 i32 lanes of v. */
static inline int32_t sum_lanes(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* The 8 group scales then the 8 minimums (bytes) out of ggml's 12-byte
 * packing (see unpack_scale_min in quants_k.c), in both 16-byte halves.
 * The unpacking is done four bytes at a time in general registers, which
 * this kernel leaves idle, sparing the vector ports. */
static inline __m256i unpack_scales_mins(const uint8_t *packed) {
    uint32_t w[3];
    memcpy(w, packed, sizeof(w));
    uint64_t scales = (w[0] & 0x3f3f3f3fu) |
                      (uint64_t)((w[2] & 0x0f0f0f0fu) | ((w[0] >> 6) & 0x03030303u) << 4) << 32;
    uint64_t mins = (w[1] & 0x3f3f3f3fu) |
                    (uint64_t)(((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 6) & 0x03030303u) << 4)
                        << 32;
    return _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)mins, (long long)scales));
}

/* Shuffle control bytes that widen byte b to an i16 lane (-1: a zero). */
#define WIDE(b)  (b), -1
#define WIDE8(b) WIDE(b), WIDE(b), WIDE(b), WIDE(b), WIDE(b), WIDE(b), WIDE(b), WIDE(b)

/* Group g's scale in every i16 lane. */
static inline __m256i group_scale(__m256i scales_mins, int g) {
    return _mm256_shuffle_epi8(scales_mins, _mm256_setr_epi8(WIDE8(g), WIDE8(g)));
}

/* min_g * (bsum_2g + bsum_2g+1) in i32 lane g, each minimum widened
 * twice to meet both 16-sums of its group. */
static inline __m256i mins_times_sums(__m256i scales_mins, const int16_t *bsums) {
    __m256i doubled = _mm256_shuffle_epi8(
        scales_mins, _mm256_setr_epi8(WIDE(8), WIDE(8), WIDE(9), WIDE(9), WIDE(10), WIDE(10),
                                      WIDE(11), WIDE(11), WIDE(12), WIDE(12), WIDE(13), WIDE(13),
                                      WIDE(14), WIDE(14), WIDE(15), WIDE(15)));
    return _mm256_madd_epi16(doubled, _mm256_loadu_si256((const __m256i *)bsums));
}

/* The scaled dot of 32 unsigned quants q with 32 activations at x. */
static inline __m256i group_dot(__m256i q, const int8_t *x, __m256i scale) {
    __m256i a = _mm256_loadu_si256((const __m256i *)x);
    return _mm256_madd_epi16(scale, _mm256_maddubs_epi16(q, a));
}

/* Lanes of a Q4_K / Q5_K row dot (struct k_lanes in quants_k.c). */
struct k_lanes {
    __m256 acc, mins;
};

/* A Q4_K / Q5_K super-block's d_w and dmin_w (its first 4 bytes, fp16),
 * each in every lane. */
struct k_block_scales {
    __m256 d, dmin;
};

static inline struct k_block_scales k_block_scales(const void *block) {
    uint32_t d_dmin;
    memcpy(&d_dmin, block, sizeof(d_dmin));
    __m256 wide = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi32_si128((int)d_dmin)));
    return (struct k_block_scales){_mm256_permutevar8x32_ps(wide, _mm256_setzero_si256()),
                                   _mm256_permutevar8x32_ps(wide, _mm256_set1_epi32(1))};
}

/* Adds one super-block's lane sums and minimum terms as add_k_block in
 * quants_k.c does, with d = d_x * d_w and dmin = d_x * dmin_w. */
static inline void add_k_block(struct k_lanes *lanes, float d_x, struct k_block_scales w,
                               __m256i sums, __m256i mins) {
    __m256 x = _mm256_set1_ps(d_x);
    __m256 d = _mm256_mul_ps(x, w.d), dmin = _mm256_mul_ps(x, w.dmin);
    lanes->acc = _mm256_add_ps(lanes->acc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sums)));
    lanes->mins = _mm256_add_ps(lanes->mins, _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(mins)));
}

/* k_lanes_total of quants_k.c: the same tree. */
static inline float k_lanes_total(struct k_lanes lanes) {
    __m256 t = _mm256_sub_ps(lanes.acc, lanes.mins);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* For the 32 values j of a half's chunk k (groups 2k, 2k + 1 of the half):
 * the i16 scale of group 2k in the low 16 bytes, of 2k + 1 in the high,
 * out of the half's 8 scales in both halves of scales. */
static inline __m256i chunk_scales(__m256i scales, int k) {
    short first = (short)(0x0100 + 0x0404 * k), second = (short)(first + 0x0202);
    __m256i pick = _mm256_setr_epi16(first, first, first, first, first, first, first, first, second,
                                     second, second, second, second, second, second, second);
    return _mm256_shuffle_epi8(scales, pick);
}

/* Block k of activation row c of a multi-column dot. */
static inline const struct tensor_block_q8_k *column_block(const void *x, size_t x_stride, int c,
                                                           int k) {
    return (const struct tensor_block_q8_k *)((const char *)x + (size_t)c * x_stride) + k;
}

#define COLUMNS TENSOR_DOT_COLUMNS

_Static_assert(COLUMNS == 8, "column_totals adds 8 columns' lanes");

/* The sums of the 8 i32 lanes of each column's v[c], in lane c: exact, so
 * the same integers as sum_lanes of each (a tree of horizontal adds). */
static inline __m256i column_totals(const __m256i *v) {
    __m256i h0123 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    __m256i h4567 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                            _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

/* Adds super-block k of a Q6_K row to the columns' sums acc (lane c:
 * column c), given each column's exact integer total: per lane the float
 * steps of tensor_row_dot_q6_k_scalar, acc + (d_x * d_w) * total. */
static inline __m256 add_q6_k_totals(__m256 acc, __m256i totals, float d_w, const void *x,
                                     size_t x_stride, int k) {
    float d_x[COLUMNS];
    for (int c = 0; c < COLUMNS; c++) d_x[c] = column_block(x, x_stride, c, k)->d;
    __m256 scale = _mm256_mul_ps(_mm256_loadu_ps(d_x), _mm256_set1_ps(d_w));
    return _mm256_add_ps(acc, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(totals)));
}

#endif
