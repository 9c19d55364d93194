/* quants_k_avx2.c -- the Q4_K, Q5_K and Q6_K row dots with AVX2, in the
 * order of the scalar references (quants_k.c): the same exact integer
 * sums in the same lanes, then the same single-precision steps, so both
 * give the same bits.
 *
 * Weight quants are unsigned bytes (Q6_K's q - 32 too: the 32 comes off
 * afterwards as 32 * sum_g scale_g * bsum_g), so _mm256_maddubs_epi16
 * multiplies them by the int8 activations; _mm256_madd_epi16 then weighs
 * each pair sum with its group's scale into 32 bits. Q4_K / Q5_K minimums
 * meet the activations' 16-sums (bsums) only, never the quants.
 *
 * The multi-column dots (tensor_row_dots_*) unpack each weight super-block
 * once into registers (struct unpacked) and take it with each of their
 * TENSOR_DOT_COLUMNS activation rows in turn. Per column they make the
 * same exact integer lane sums (integer addition is exact, so how the sums
 * are grouped does not matter) and then the same float steps as the single
 * dots, so they give the same bits. */
#include "quants_k_x86.h"

/* ---- Q4_K / Q5_K ---- */

/* The scaled sums of chunk c (64 values) of a Q4_K super-block: 32 low
 * nibbles of group 2c, then 32 high nibbles of group 2c + 1. */
static inline __m256i q4_k_chunk(const uint8_t *qs, const int8_t *x, __m256i scales, int c) {
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    __m256i lo = _mm256_and_si256(bits, low4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), low4);
    __m256i p0 = group_dot(lo, x + 64 * c, group_scale(scales, 2 * c));
    __m256i p1 = group_dot(hi, x + 64 * c + 32, group_scale(scales, 2 * c + 1));
    return _mm256_add_epi32(p0, p1);
}

float tensor_row_dot_q4_k_avx2(const void *w, const void *x, int n) {
    const struct tensor_block_q4_k *b = w;
    const struct tensor_block_q8_k *a = x;
    struct k_lanes lanes = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        __m256i scales = unpack_scales_mins(b[k].scales);
        const uint8_t *qs = b[k].qs;
        const int8_t *xs = a[k].qs;
        __m256i sum = _mm256_add_epi32(
            _mm256_add_epi32(q4_k_chunk(qs, xs, scales, 0), q4_k_chunk(qs, xs, scales, 1)),
            _mm256_add_epi32(q4_k_chunk(qs, xs, scales, 2), q4_k_chunk(qs, xs, scales, 3)));
        add_k_block(&lanes, a[k].d, k_block_scales(&b[k]), sum,
                    mins_times_sums(scales, a[k].bsums));
    }
    return k_lanes_total(lanes);
}

/* Bit `bit` of every byte of h moved to bit 4 (the fifth bit of a Q5_K
 * quant). 16-bit shifts are safe: no bit crosses into the kept bit 4 of
 * the other byte for shifts of at most 4. */
static inline __m256i fifth_bit(__m256i h, int bit) {
    __m256i moved = bit < 4 ? _mm256_slli_epi16(h, 4 - bit) : _mm256_srli_epi16(h, bit - 4);
    return _mm256_and_si256(moved, _mm256_set1_epi8(16));
}

/* q4_k_chunk for Q5_K, with the fifth bits of high (bits 2c and 2c + 1 of
 * each byte). */
static inline __m256i q5_k_chunk(const uint8_t *qs, __m256i high, const int8_t *x, __m256i scales,
                                 int c) {
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, low4), fifth_bit(high, 2 * c));
    __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), low4),
                                 fifth_bit(high, 2 * c + 1));
    __m256i p0 = group_dot(lo, x + 64 * c, group_scale(scales, 2 * c));
    __m256i p1 = group_dot(hi, x + 64 * c + 32, group_scale(scales, 2 * c + 1));
    return _mm256_add_epi32(p0, p1);
}

float tensor_row_dot_q5_k_avx2(const void *w, const void *x, int n) {
    const struct tensor_block_q5_k *b = w;
    const struct tensor_block_q8_k *a = x;
    struct k_lanes lanes = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        __m256i scales = unpack_scales_mins(b[k].scales);
        __m256i high = _mm256_loadu_si256((const __m256i *)b[k].qh);
        const uint8_t *qs = b[k].qs;
        const int8_t *xs = a[k].qs;
        __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q5_k_chunk(qs, high, xs, scales, 0),
                                                        q5_k_chunk(qs, high, xs, scales, 1)),
                                       _mm256_add_epi32(q5_k_chunk(qs, high, xs, scales, 2),
                                                        q5_k_chunk(qs, high, xs, scales, 3)));
        add_k_block(&lanes, a[k].d, k_block_scales(&b[k]), sum,
                    mins_times_sums(scales, a[k].bsums));
    }
    return k_lanes_total(lanes);
}

/* ---- Q6_K ---- */

/* The integer sum of a 128-value half (quants 0..63): 64 ql bytes
 * (low nibbles: values 0-63, high: 64-127) and 32 qh bytes (2 bits for
 * each chunk of 32). */
static inline __m256i q6_k_half(const uint8_t *ql, const uint8_t *qh, const int8_t *x,
                                __m256i scales) {
    const __m256i low4 = _mm256_set1_epi8(15), top2 = _mm256_set1_epi8(48);
    __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
    __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    __m256i q[4] = {
        _mm256_or_si256(_mm256_and_si256(l0, low4),
                        _mm256_and_si256(_mm256_slli_epi16(h, 4), top2)),
        _mm256_or_si256(_mm256_and_si256(l1, low4),
                        _mm256_and_si256(_mm256_slli_epi16(h, 2), top2)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                        _mm256_and_si256(h, top2)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                        _mm256_and_si256(_mm256_srli_epi16(h, 2), top2)),
    };
    __m256i p0 = group_dot(q[0], x, chunk_scales(scales, 0));
    __m256i p1 = group_dot(q[1], x + 32, chunk_scales(scales, 1));
    __m256i p2 = group_dot(q[2], x + 64, chunk_scales(scales, 2));
    __m256i p3 = group_dot(q[3], x + 96, chunk_scales(scales, 3));
    return _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3));
}

float tensor_row_dot_q6_k_avx2(const void *w, const void *x, int n) {
    const struct tensor_block_q6_k *b = w;
    const struct tensor_block_q8_k *a = x;
    float acc = 0.0f;
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[k].scales));
        __m256i first = _mm256_permute2x128_si256(scales, scales, 0x00);
        __m256i second = _mm256_permute2x128_si256(scales, scales, 0x11);
        __m256i sum =
            _mm256_add_epi32(q6_k_half(b[k].ql, b[k].qh, a[k].qs, first),
                             q6_k_half(b[k].ql + 64, b[k].qh + 32, a[k].qs + 128, second));
        /* the quants' offset: 32 * sum_g scale_g * bsum_g */
        __m256i bsums = _mm256_loadu_si256((const __m256i *)a[k].bsums);
        __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(scales, bsums), 5);
        float scale = a[k].d * _cvtsh_ss(b[k].d);
        float term = scale * (float)sum_lanes(_mm256_sub_epi32(sum, offset));
        acc = acc + term;
    }
    return acc;
}

/* ---- multi-column row dots ---- */

/* One weight super-block unpacked for the columns of a multi-column dot:
 * the unsigned quants of each run of 32 values, and the scale of the run's
 * group (of each half: Q6_K's groups are 16 values) in its i16 lanes. */
struct unpacked {
    __m256i q[8], scale[8];
};

/* A Q4_K super-block's nibbles (q4_k_chunk's) and group scales. */
static inline void unpack_q4_k(struct unpacked *u, const uint8_t *qs, __m256i scales) {
    const __m256i low4 = _mm256_set1_epi8(15);
#pragma GCC unroll 8
    for (int c = 0; c < 4; c++) {
        __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        u->q[2 * c] = _mm256_and_si256(bits, low4);
        u->q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), low4);
        u->scale[2 * c] = group_scale(scales, 2 * c);
        u->scale[2 * c + 1] = group_scale(scales, 2 * c + 1);
    }
}

/* The lane sums of an unpacked super-block with the 256 activations of
 * block k of each column: those of the single dots. Runs go outer and
 * columns inner, each run's quants and scale loaded once; the empty asm
 * keeps the compiler from regrouping the (exact) sums into a tree that
 * needs every product at once and spills them. */
static inline void unpacked_dots(__m256i *sums, const struct unpacked *u, const void *x,
                                 size_t x_stride, int k) {
    const int8_t *xs[COLUMNS];
#pragma GCC unroll 8
    for (int c = 0; c < COLUMNS; c++) {
        xs[c] = column_block(x, x_stride, c, k)->qs;
        sums[c] = _mm256_setzero_si256();
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
#pragma GCC unroll 8
        for (int c = 0; c < COLUMNS; c++) {
            sums[c] = _mm256_add_epi32(sums[c], group_dot(u->q[j], xs[c] + 32 * j, u->scale[j]));
            __asm__("" : "+x"(sums[c]));
        }
    }
}

/* Adds super-block k of a Q4_K / Q5_K row (block, unpacked in u) to the
 * lanes of every column, as the single dots do. */
static inline void add_k_block_columns(struct k_lanes *lanes, const struct unpacked *u,
                                       __m256i scales, const void *block, const void *x,
                                       size_t x_stride, int k) {
    __m256i sums[COLUMNS];
    unpacked_dots(sums, u, x, x_stride, k);
    struct k_block_scales dw = k_block_scales(block);
#pragma GCC unroll 8
    for (int c = 0; c < COLUMNS; c++) {
        const struct tensor_block_q8_k *a = column_block(x, x_stride, c, k);
        add_k_block(&lanes[c], a->d, dw, sums[c], mins_times_sums(scales, a->bsums));
    }
}

/* The columns' results out of their lanes. */
static inline void k_lanes_totals(float *out, const struct k_lanes *lanes) {
#pragma GCC unroll 8
    for (int c = 0; c < COLUMNS; c++) out[c] = k_lanes_total(lanes[c]);
}

void tensor_row_dots_q4_k_avx2(float *out, const void *w, const void *x, size_t x_stride, int n) {
    const struct tensor_block_q4_k *b = w;
    struct k_lanes lanes[COLUMNS];
#pragma GCC unroll 8
    for (int c = 0; c < COLUMNS; c++)
        lanes[c] = (struct k_lanes){_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        struct unpacked u;
        __m256i scales = unpack_scales_mins(b[k].scales);
        unpack_q4_k(&u, b[k].qs, scales);
        add_k_block_columns(lanes, &u, scales, &b[k], x, x_stride, k);
    }
    k_lanes_totals(out, lanes);
}

void tensor_row_dots_q5_k_avx2(float *out, const void *w, const void *x, size_t x_stride, int n) {
    const struct tensor_block_q5_k *b = w;
    struct k_lanes lanes[COLUMNS];
#pragma GCC unroll 8
    for (int c = 0; c < COLUMNS; c++)
        lanes[c] = (struct k_lanes){_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        struct unpacked u;
        __m256i scales = unpack_scales_mins(b[k].scales);
        __m256i high = _mm256_loadu_si256((const __m256i *)b[k].qh);
        unpack_q4_k(&u, b[k].qs, scales);
        /* run j's fifth bits are bit j of the qh bytes (q5_k_chunk) */
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) u.q[j] = _mm256_or_si256(u.q[j], fifth_bit(high, j));
        add_k_block_columns(lanes, &u, scales, &b[k], x, x_stride, k);
    }
    k_lanes_totals(out, lanes);
}

/* Runs 4h .. 4h + 3 of a Q6_K super-block: half h's quants as q6_k_half
 * makes them, and its group scales (the half's 8 in both halves of
 * scales). */
static inline void unpack_q6_k_half(struct unpacked *u, int h, const uint8_t *ql, const uint8_t *qh,
                                    __m256i scales) {
    const __m256i low4 = _mm256_set1_epi8(15), top2 = _mm256_set1_epi8(48);
    __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
    __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
    /* cppcheck-suppress ctuuninitvar ; u is what this call fills in */
    __m256i *q = u->q + 4 * h;
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, low4),
                           _mm256_and_si256(_mm256_slli_epi16(hb, 4), top2));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, low4),
                           _mm256_and_si256(_mm256_slli_epi16(hb, 2), top2));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                           _mm256_and_si256(hb, top2));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                           _mm256_and_si256(_mm256_srli_epi16(hb, 2), top2));
#pragma GCC unroll 8
    for (int j = 0; j < 4; j++) u->scale[4 * h + j] = chunk_scales(scales, j);
}

void tensor_row_dots_q6_k_avx2(float *out, const void *w, const void *x, size_t x_stride, int n) {
    const struct tensor_block_q6_k *b = w;
    __m256 acc = _mm256_setzero_ps();
    for (int k = 0; k < n / TENSOR_QK_K; k++) {
        struct unpacked u;
        __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[k].scales));
        unpack_q6_k_half(&u, 0, b[k].ql, b[k].qh, _mm256_permute2x128_si256(scales, scales, 0x00));
        unpack_q6_k_half(&u, 1, b[k].ql + 64, b[k].qh + 32,
                         _mm256_permute2x128_si256(scales, scales, 0x11));
        __m256i sums[COLUMNS];
        unpacked_dots(sums, &u, x, x_stride, k);
#pragma GCC unroll 8
        for (int c = 0; c < COLUMNS; c++) {
            /* the quants' offset: 32 * sum_g scale_g * bsum_g */
            const struct tensor_block_q8_k *a = column_block(x, x_stride, c, k);
            __m256i bsums = _mm256_loadu_si256((const __m256i *)a->bsums);
            __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(scales, bsums), 5);
            sums[c] = _mm256_sub_epi32(sums[c], offset);
        }
        acc = add_q6_k_totals(acc, column_totals(sums), _cvtsh_ss(b[k].d), x, x_stride, k);
    }
    _mm256_storeu_ps(out, acc);
}

/* ---- Q8_K activations ---- */

/* The largest of the 8 lanes of v (none a NaN). */
static inline float max_lanes_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* The low byte of each i32 lane of q, in order, in the low 8 bytes. */
static inline __m128i low_bytes(__m256i q) {
    const __m256i pick =
        _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12,
                         -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i packed = _mm256_shuffle_epi8(q, pick);
    return _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1)));
}

/* tensor_quantize_q8_k_scalar's bytes, eight values a vector: the largest
 * magnitude by maxps with the running maximum second (a NaN is passed
 * over, as the scalar comparison passes it), the first element of that
 * magnitude by a compare, then the scalar's product, rounded to nearest
 * even (vcvtps2dq under the default rounding, as nearbyintf), the minimum
 * with 127 and the low byte (the scalar cast's truncation). */
void tensor_quantize_q8_k_avx2(void *out, const float *x, int64_t n) {
    struct tensor_block_q8_k *blocks = out;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t block = 0; block < n / TENSOR_QK_K; block++) {
        const float *v = x + block * TENSOR_QK_K;
        struct tensor_block_q8_k *y = &blocks[block];
        __m256 magnitudes = _mm256_setzero_ps();
        for (int j = 0; j < TENSOR_QK_K; j += 8)
            magnitudes = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v + j)), magnitudes);
        float amax = max_lanes_ps(magnitudes), max = 0.0f;
        memset(y, 0, sizeof(*y));
        if (amax == 0.0f) continue;
        for (int j = 0; j < TENSOR_QK_K; j += 8) {
            int at = _mm256_movemask_ps(_mm256_cmp_ps(
                _mm256_andnot_ps(sign, _mm256_loadu_ps(v + j)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (at) {
                max = v[j + __builtin_ctz((unsigned)at)];
                break;
            }
        }
        float iscale = -127.0f / max;
        const __m256 scale = _mm256_set1_ps(iscale);
        const __m256i top = _mm256_set1_epi32(127);
        for (int g = 0; g < TENSOR_QK_K / 16; g++) {
            const float *from = v + 16 * g;
            __m256i q0 = _mm256_min_epi32(
                _mm256_cvtps_epi32(_mm256_mul_ps(scale, _mm256_loadu_ps(from))), top);
            __m256i q1 = _mm256_min_epi32(
                _mm256_cvtps_epi32(_mm256_mul_ps(scale, _mm256_loadu_ps(from + 8))), top);
            __m128i quants = _mm_unpacklo_epi64(low_bytes(q0), low_bytes(q1));
            _mm_storeu_si128((__m128i *)(y->qs + 16 * g), quants);
            __m256i wide =
                _mm256_add_epi32(_mm256_cvtepi8_epi32(quants),
                                 _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(quants, quants)));
            y->bsums[g] = (int16_t)sum_lanes(wide);
        }
        y->d = 1.0f / iscale;
    }
}
