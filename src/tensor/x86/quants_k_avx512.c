/* quants_k_avx512.c -- the Q4_K, Q5_K and Q6_K row dots, single and
 * multi-column, with AVX-512 (BW and VNNI): 64 values per vector, and
 * vpdpwssd weighs each pair sum of _mm512_maddubs_epi16 with its group's
 * scale and adds it in one step (AVX2 needs a multiply and an add).
 *
 * The lanes are laid out so that the exact integer sums end as those of
 * the scalar reference (quants_k.c): a Q4_K vector holds the low nibbles
 * of a 32-byte chunk (group 2c) in its low half and the high nibbles
 * (group 2c + 1) in its high half, so adding the halves gives lane l's
 * S_l; Q6_K takes one integer sum per super-block, exact in any order. The
 * float steps are then those of quants_k.c, so these dots give the bits of
 * the scalar and AVX2 ones, and each multi-column result is the single
 * dot's. */
#include "quants_k_x86.h"

/* ---- Q4_K / Q5_K ---- */

/* A Q4_K super-block unpacked: vector r holds values 64r .. 64r + 63
 * (groups 2r, 2r + 1) and their scales in the matching i16 lanes. */
struct q4_k_unpacked {
    __m512i q[4], scale[4];
};

/* Widening shuffle control for vector r's scales: byte 2r of each 128-bit
 * lane into every i16 lane of the low half, byte 2r + 1 of the high half. */
#define SCALE_PICK(r)                                                                              \
    _mm512_inserti64x4(_mm512_set1_epi16(2 * (r) | 0xff00),                                        \
                       _mm256_set1_epi16((2 * (r) + 1) | 0xff00), 1)

/* Port-light unpacking, the unpacking being what bounds a decode's dot
 * (the weights stream once, the activations stay in cache): the 32 quant
 * bytes of a chunk are loaded into both halves by the load unit and the
 * high half shifted by a variable shift (no insert), and each vector's
 * scales come from one in-lane shuffle of the scales in every lane (not a
 * shuffle per group and an insert). */
static inline void unpack_q4_k(struct q4_k_unpacked *u, const uint8_t *qs, __m256i scales) {
    const __m512i low4 = _mm512_set1_epi8(15);
    const __m512i nibble = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    __m512i every = _mm512_broadcast_i32x4(_mm256_castsi256_si128(scales));
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * r)));
        u->q[r] = _mm512_and_si512(_mm512_srlv_epi16(bits, nibble), low4);
        u->scale[r] = _mm512_shuffle_epi8(every, SCALE_PICK(r));
    }
}

/* The lane sums S_l of an unpacked super-block with 256 activations, in
 * two chains of products (integers: any order gives the same sums, and
 * two halve the latency a decode's dot waits on). */
static inline __m256i q4_k_sums(const struct q4_k_unpacked *u, const int8_t *x) {
    __m512i sums[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m512i a = _mm512_loadu_si512((const void *)(x + 64 * r));
        sums[r & 1] =
            _mm512_dpwssd_epi32(sums[r & 1], _mm512_maddubs_epi16(u->q[r], a), u->scale[r]);
    }
    __m512i both = _mm512_add_epi32(sums[0], sums[1]);
    return _mm256_add_epi32(_mm512_castsi512_si256(both), _mm512_extracti64x4_epi64(both, 1));
}

/* Adds super-block k (its scales, unpacked in u) to the lanes of
 * `columns` activation rows x_stride bytes apart, as add_k_block does. */
static inline __attribute__((always_inline)) void
add_k_columns(struct k_lanes *lanes, const struct q4_k_unpacked *u, __m256i scales,
              const void *block, const void *x, size_t x_stride, int k, int columns) {
    struct k_block_scales dw = k_block_scales(block);
    for (int c = 0; c < columns; c++) {
        const struct tensor_block_q8_k *a = column_block(x, x_stride, c, k);
        add_k_block(&lanes[c], a->d, dw, q4_k_sums(u, a->qs), mins_times_sums(scales, a->bsums));
    }
}

static inline void k_lanes_zero(struct k_lanes *lanes, int columns) {
    for (int c = 0; c < columns; c++)
        lanes[c] = (struct k_lanes){_mm256_setzero_ps(), _mm256_setzero_ps()};
}

/* Row dots of w with `columns` activation rows x_stride bytes apart. */
static inline __attribute__((always_inline)) void
q4_k_dots(float *out, const void *w, const void *x, size_t x_stride, int n, int columns) {
    const struct tensor_block_q4_k *b = w;
    struct k_lanes lanes[COLUMNS];
    k_lanes_zero(lanes, columns);
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        struct q4_k_unpacked u;
        __m256i scales = unpack_scales_mins(b[k].scales);
        unpack_q4_k(&u, b[k].qs, scales);
        add_k_columns(lanes, &u, scales, &b[k], x, x_stride, k, columns);
    }
    for (int c = 0; c < columns; c++) out[c] = k_lanes_total(lanes[c]);
}

float tensor_row_dot_q4_k_avx512(const void *w, const void *x, int n) {
    float out;
    q4_k_dots(&out, w, x, 0, n, 1);
    return out;
}

void tensor_row_dots_q4_k_avx512(float *out, const void *w, const void *x, size_t x_stride, int n) {
    q4_k_dots(out, w, x, x_stride, n, COLUMNS);
}

/* Sets bit 4 (the fifth bit) of the Q4_K-unpacked quants from the 32 qh
 * bytes: vector r's group 2r (low half) takes bit 2r of each byte, group
 * 2r + 1 (high half) bit 2r + 1; a byte test makes the mask in one step
 * and a masked add of 16 sets the bit (the nibbles are below 16). */
static inline void add_fifth_bits(struct q4_k_unpacked *u, const uint8_t *qh) {
    const __m512i sixteen = _mm512_set1_epi8(16);
    __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << 2 * r)),
                                         _mm256_set1_epi8((char)(1 << (2 * r + 1))), 1);
        u->q[r] = _mm512_mask_add_epi8(u->q[r], _mm512_test_epi8_mask(h, bit), u->q[r], sixteen);
    }
}

static inline __attribute__((always_inline)) void
q5_k_dots(float *out, const void *w, const void *x, size_t x_stride, int n, int columns) {
    const struct tensor_block_q5_k *b = w;
    struct k_lanes lanes[COLUMNS];
    k_lanes_zero(lanes, columns);
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        struct q4_k_unpacked u;
        __m256i scales = unpack_scales_mins(b[k].scales);
        unpack_q4_k(&u, b[k].qs, scales);
        add_fifth_bits(&u, b[k].qh);
        add_k_columns(lanes, &u, scales, &b[k], x, x_stride, k, columns);
    }
    for (int c = 0; c < columns; c++) out[c] = k_lanes_total(lanes[c]);
}

float tensor_row_dot_q5_k_avx512(const void *w, const void *x, int n) {
    float out;
    q5_k_dots(&out, w, x, 0, n, 1);
    return out;
}

void tensor_row_dots_q5_k_avx512(float *out, const void *w, const void *x, size_t x_stride, int n) {
    q5_k_dots(out, w, x, x_stride, n, COLUMNS);
}

/* ---- Q6_K ---- */

/* A Q6_K super-block unpacked: vector m holds quants 64m .. 64m + 63 and
 * the scales of their 4 groups of 16, one per 128-bit lane; offset holds
 * -32 times the 16 group scales, for the activations' 16-sums (the quants
 * are stored as q + 32). */
struct q6_k_unpacked {
    __m512i q[4], scale[4], offset;
};

/* Half h's quants: the low nibbles of its 64 ql bytes with qh bits 0-1
 * (first 32 bytes) or 2-3 (next 32), then the high nibbles with bits 4-5
 * or 6-7, each moved to bits 4-5. */
static inline void unpack_q6_k_half(__m512i *q, const uint8_t *ql, const uint8_t *qh) {
    const __m512i low4 = _mm512_set1_epi8(15), top2 = _mm512_set1_epi8(48);
    const __m512i left = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i right = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    __m512i l = _mm512_loadu_si512((const void *)ql);
    __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
    q[0] = _mm512_or_si512(_mm512_and_si512(l, low4),
                           _mm512_and_si512(_mm512_sllv_epi16(h, left), top2));
    q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4),
                           _mm512_and_si512(_mm512_srlv_epi16(h, right), top2));
}

static inline void unpack_q6_k(struct q6_k_unpacked *u, const struct tensor_block_q6_k *b) {
    __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    __m512i wide = _mm512_castsi256_si512(scales);
    unpack_q6_k_half(u->q, b->ql, b->qh);
    unpack_q6_k_half(u->q + 2, b->ql + 64, b->qh + 32);
    /* i16 lane i of vector m: the scale of group 4m + i / 8 */
    const __m512i lane_group =
        _mm512_set_epi64(0x0003000300030003LL, 0x0003000300030003LL, 0x0002000200020002LL,
                         0x0002000200020002LL, 0x0001000100010001LL, 0x0001000100010001LL, 0, 0);
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++)
        u->scale[m] = _mm512_permutexvar_epi16(
            _mm512_add_epi16(lane_group, _mm512_set1_epi16((short)(4 * m))), wide);
    u->offset = _mm512_zextsi256_si512(_mm256_mullo_epi16(scales, _mm256_set1_epi16(-32)));
}

/* The super-block's exact integer lane sums with the activation block a,
 * folded to 8 lanes: their total is sum_g scale_g * (dot_g - 32 bsum_g). */
static inline __m256i q6_k_sums(const struct q6_k_unpacked *u, const struct tensor_block_q8_k *a) {
    __m512i bsums = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)a->bsums));
    __m512i sums = _mm512_dpwssd_epi32(_mm512_setzero_si512(), bsums, u->offset);
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        __m512i x = _mm512_loadu_si512((const void *)(a->qs + 64 * m));
        sums = _mm512_dpwssd_epi32(sums, _mm512_maddubs_epi16(u->q[m], x), u->scale[m]);
    }
    return _mm256_add_epi32(_mm512_castsi512_si256(sums), _mm512_extracti64x4_epi64(sums, 1));
}

/* The float steps of tensor_row_dot_q6_k_scalar: acc + (d_x * d_w) * total
 * per super-block; all columns' totals at once in the multi-column dot. */
float tensor_row_dot_q6_k_avx512(const void *w, const void *x, int n) {
    const struct tensor_block_q6_k *b = w;
    const struct tensor_block_q8_k *a = x;
    float acc = 0.0f;
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        struct q6_k_unpacked u;
        unpack_q6_k(&u, &b[k]);
        float scale = a[k].d * _cvtsh_ss(b[k].d);
        float term = scale * (float)sum_lanes(q6_k_sums(&u, &a[k]));
        acc = acc + term;
    }
    return acc;
}

void tensor_row_dots_q6_k_avx512(float *out, const void *w, const void *x, size_t x_stride, int n) {
    const struct tensor_block_q6_k *b = w;
    __m256 acc = _mm256_setzero_ps();
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        struct q6_k_unpacked u;
        unpack_q6_k(&u, &b[k]);
        __m256i sums[COLUMNS];
#pragma GCC unroll 8
        for (int c = 0; c < COLUMNS; c++) sums[c] = q6_k_sums(&u, column_block(x, x_stride, c, k));
        acc = add_q6_k_totals(acc, column_totals(sums), _cvtsh_ss(b[k].d), x, x_stride, k);
    }
    _mm256_storeu_ps(out, acc);
}

/* ---- Q8_K activations ---- */

/* tensor_quantize_q8_k_scalar's bytes, sixteen values a vector: the
 * largest magnitude by maxps with the running maximum second (a NaN is
 * passed over, as the scalar comparison passes it), the first element of
 * that magnitude by a compare, then the scalar's product, rounded to
 * nearest even (vcvtps2dq under the default rounding, as nearbyintf), the
 * minimum with 127 and the low byte (vpmovdb truncates, as the scalar
 * cast does). */
void tensor_quantize_q8_k_avx512(void *out, const float *x, int64_t n) {
    struct tensor_block_q8_k *blocks = out;
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t block = 0; block < n / TENSOR_QK_K; block++) {
        const float *v = x + block * TENSOR_QK_K;
        struct tensor_block_q8_k *y = &blocks[block];
        __m512 magnitudes = _mm512_setzero_ps();
        for (int j = 0; j < TENSOR_QK_K; j += 16)
            magnitudes = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(v + j)), magnitudes);
        float amax = _mm512_reduce_max_ps(magnitudes), max = 0.0f;
        memset(y, 0, sizeof(*y));
        if (amax == 0.0f) continue;
        for (int j = 0; j < TENSOR_QK_K; j += 16) {
            __mmask16 at = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(v + j)),
                                              _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (at) {
                max = v[j + __builtin_ctz(at)];
                break;
            }
        }
        float iscale = -127.0f / max;
        const __m512 scale = _mm512_set1_ps(iscale);
        for (int g = 0; g < TENSOR_QK_K / 16; g++) {
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(scale, _mm512_loadu_ps(v + 16 * g)));
            __m128i quants = _mm512_cvtepi32_epi8(_mm512_min_epi32(q, _mm512_set1_epi32(127)));
            _mm_storeu_si128((__m128i *)(y->qs + 16 * g), quants);
            y->bsums[g] = (int16_t)_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(quants));
        }
        y->d = 1.0f / iscale;
    }
}
