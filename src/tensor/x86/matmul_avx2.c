/* matmul_avx2.c -- AVX2 (+FMA, F16C) matmul kernels.
 *
 * The same designs as matmul_avx512.c at half the width, for CPUs without
 * AVX-512. Float weights keep 8 lane sums per output (lane l takes elements
 * i = l mod 8 with fused multiply-adds, tail masked to zeros) added by one
 * fixed tree. Quantized weights compute the exact integer dot per block with
 * vpmaddubsw (unsigned x signed bytes, pairs to 16 bits) and vpmaddwd: Q4_0
 * nibbles are unsigned already and the activation bias -8 * sum(x) fixes
 * the sign; Q8_0 uses |w| against x carrying w's sign (pairs stay below
 * 2^15, so nothing saturates). The float step per block is the scalar one,
 * over 8 rows at a time; GEMV reads rows as stored, GEMM repacks panels of
 * 8 rows so that one load holds 4 weights of each row. */
#include "x86.h"

#include <immintrin.h>
#include <limits.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* ---- float weights ---- */

#define GEMV_ROWS         8
#define GEMM_ROWS         4
#define GEMM_COLS         3
#define FLOAT_BLOCK_BYTES (256 * 1024)

/* The fixed lane tree: (l, l+4), then (l, l+2), (l, l+1). */
static ALWAYS_INLINE float sum_lanes(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

static ALWAYS_INLINE __m256 load_weights(const char *row, int i, int f16) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * (size_t)i)));
    return _mm256_loadu_ps((const void *)(row + 4 * (size_t)i));
}

/* The last n < 8 elements from i, zero-filled. */
static ALWAYS_INLINE __m256 load_weights_tail(const char *row, int i, int n, int f16) {
    if (f16) {
        uint16_t halves[8] = {0};
        memcpy(halves, row + 2 * (size_t)i, 2 * (size_t)n);
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)halves));
    }
    float floats[8] = {0};
    memcpy(floats, row + 4 * (size_t)i, 4 * (size_t)n);
    return _mm256_loadu_ps(floats);
}

static ALWAYS_INLINE __m256 load_x_tail(const float *x, int n) {
    float floats[8] = {0};
    memcpy(floats, x, 4 * (size_t)n);
    return _mm256_loadu_ps(floats);
}

/* out[b0 + c][r0 + m] for m < nr, c < nc (rows past nr repeat the last). */
static ALWAYS_INLINE void float_tile(const struct tensor_matmul_job *job, int r0, int nr, int b0,
                                     const int NR, const int nc, const int f16) {
    const struct tensor_matrix *w = job->w;
    const int cols = w->cols;
    const char *rows[GEMV_ROWS];
    const float *xs[GEMM_COLS];
    __m256 acc[GEMV_ROWS][GEMM_COLS];
#pragma GCC unroll 8
    for (int m = 0; m < NR; m++)
        rows[m] = (const char *)w->data + (size_t)(r0 + (m < nr ? m : nr - 1)) * w->row_stride;
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) xs[c] = job->x + (size_t)(b0 + c) * cols;
#pragma GCC unroll 8
    for (int m = 0; m < NR; m++)
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) acc[m][c] = _mm256_setzero_ps();
    /* GEMV streams the weights once: fetch the next tile's rows ahead */
    const char *next = (const char *)w->data + (size_t)(r0 + NR) * w->row_stride;
    const size_t element_bytes = f16 ? 2 : 4;
    int i = 0;
    for (; i + 8 <= cols; i += 8) {
        __m256 xv[GEMM_COLS];
        if (nc == 1)
#pragma GCC unroll 8
            for (int m = 0; m < NR; m++)
                _mm_prefetch(next + m * w->row_stride + i * element_bytes, _MM_HINT_T1);
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) xv[c] = _mm256_loadu_ps(xs[c] + i);
#pragma GCC unroll 8
        for (int m = 0; m < NR; m++) {
            __m256 wv = load_weights(rows[m], i, f16);
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) acc[m][c] = _mm256_fmadd_ps(wv, xv[c], acc[m][c]);
        }
    }
    if (i < cols) {
        __m256 xv[GEMM_COLS];
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) xv[c] = load_x_tail(xs[c] + i, cols - i);
#pragma GCC unroll 8
        for (int m = 0; m < NR; m++) {
            __m256 wv = load_weights_tail(rows[m], i, cols - i, f16);
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) acc[m][c] = _mm256_fmadd_ps(wv, xv[c], acc[m][c]);
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < NR; m++)
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++)
            if (m < nr) job->out[(size_t)(b0 + c) * w->rows + r0 + m] = sum_lanes(acc[m][c]);
}

static ALWAYS_INLINE void matmul_float(const struct tensor_matmul_job *job, int row_begin,
                                       int row_end, const int f16) {
    if (job->batch == 1) {
        for (int r = row_begin; r < row_end; r += GEMV_ROWS) {
            int nr = row_end - r < GEMV_ROWS ? row_end - r : GEMV_ROWS;
            float_tile(job, r, nr, 0, GEMV_ROWS, 1, f16);
        }
        return;
    }
    size_t row_bytes = (size_t)job->w->cols * sizeof(float);
    int block = (int)(FLOAT_BLOCK_BYTES / row_bytes) / GEMM_COLS * GEMM_COLS;
    if (block < GEMM_COLS) block = GEMM_COLS;
    for (int b0 = 0; b0 < job->batch; b0 += block) {
        int b_end = b0 + block < job->batch ? b0 + block : job->batch;
        for (int r = row_begin; r < row_end; r += GEMM_ROWS) {
            int nr = row_end - r < GEMM_ROWS ? row_end - r : GEMM_ROWS;
            for (int b = b0; b < b_end; b += GEMM_COLS) {
                int nc = b_end - b;
                if (nc >= GEMM_COLS)
                    float_tile(job, r, nr, b, GEMM_ROWS, GEMM_COLS, f16);
                else if (nc == 2)
                    float_tile(job, r, nr, b, GEMM_ROWS, 2, f16);
                else
                    float_tile(job, r, nr, b, GEMM_ROWS, 1, f16);
            }
        }
    }
}

void tensor_matmul_f32_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                            void *scratch) {
    (void)scratch;
    matmul_float(job, row_begin, row_end, 0);
}

void tensor_matmul_f16_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                            void *scratch) {
    (void)scratch;
    matmul_float(job, row_begin, row_end, 1);
}

/* ---- quantized weights ---- */

#define Q_ROWS           8   /* rows per vector of results */
#define Q_GEMM_MIN_BATCH 4   /* smaller batches use the GEMV shape */
#define Q_GEMM_COLS      4   /* batch columns per GEMM micro-kernel */
#define Q_BATCH_BLOCK    256 /* batch columns per repacked panel use */
/* Panel bytes per block: 8 groups of 8 rows x 4 weights (Q8_0: |w|, then w
 * for its signs, another 256 bytes), then 8 float scales. */
#define Q_GROUP_BYTES       32
#define Q_SIGNS_OFFSET      (8 * Q_GROUP_BYTES)
#define Q_SCALES_OFFSET(q4) ((q4) ? 8 * Q_GROUP_BYTES : 16 * Q_GROUP_BYTES)
#define Q_PANEL_BLOCK(q4)   (Q_SCALES_OFFSET(q4) + Q_ROWS * (int)sizeof(float))

static ALWAYS_INLINE __m256 add_blocks(__m256 acc, __m256i dot, __m256 d_w, float d_x) {
    __m256 scale = _mm256_mul_ps(d_w, _mm256_set1_ps(d_x));
    __m256 term = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), scale);
    return _mm256_add_ps(acc, term);
}

/* The fp16 scales at byte offset within 8 rows. */
static ALWAYS_INLINE __m256 gather_scales(const char *row0, __m256i row_offsets, size_t offset) {
    __m256i words = _mm256_i32gather_epi32((const int *)(row0 + offset), row_offsets, 1);
    words = _mm256_and_si256(words, _mm256_set1_epi32(0xffff));
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(words, words), 0x08);
    return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
}

/* 16-bit pair sums of unsigned a times signed b, widened to 8 int32 sums. */
static ALWAYS_INLINE __m256i dot_bytes(__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

static ALWAYS_INLINE __m256i q8_0_row_dot(const char *quants, __m256i x) {
    __m256i w = _mm256_loadu_si256((const __m256i *)quants);
    return dot_bytes(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}

/* The 32 nibbles of a Q4_0 block in element order (low nibbles, then high). */
static ALWAYS_INLINE __m256i q4_0_unpack(const char *quants) {
    __m128i packed = _mm_loadu_si128((const __m128i *)quants);
    __m128i nibble = _mm_set1_epi8(0x0f);
    __m128i low = _mm_and_si128(packed, nibble);
    __m128i high = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(low), high, 1);
}

/* Eight rows' 8-lane sums to one vector of the 8 row sums, in row order. */
static ALWAYS_INLINE __m256i sum_rows(const __m256i *s) {
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

static ALWAYS_INLINE __m256i row_pointers(const struct tensor_matrix *w, int r0, int nr,
                                          const char **rows) {
    int offsets[Q_ROWS];
    for (int m = 0; m < Q_ROWS; m++) {
        int row = m < nr ? m : nr - 1;
        offsets[m] = (int)((size_t)row * w->row_stride);
        rows[m] = (const char *)w->data + (size_t)(r0 + row) * w->row_stride;
    }
    return _mm256_loadu_si256((const __m256i *)offsets);
}

/* GEMV shape: 8 rows from r0 for batch column b. */
static ALWAYS_INLINE void quant_gemv_tile(const struct tensor_matmul_job *job, int r0, int nr,
                                          int b, const int q4) {
    const struct tensor_matrix *w = job->w;
    const struct tensor_xq *xq = job->xq;
    const int blocks = w->cols / TENSOR_QK;
    const size_t block_bytes =
        q4 ? sizeof(struct tensor_block_q4_0) : sizeof(struct tensor_block_q8_0);
    const char *rows[Q_ROWS];
    __m256i offsets = row_pointers(w, r0, nr, rows);
    const char *next = rows[0] + (size_t)Q_ROWS * w->row_stride;
    __m256 acc = _mm256_setzero_ps();
    for (int j = 0; j < blocks; j++) {
        size_t offset = (size_t)j * block_bytes, xb = (size_t)b * blocks + j;
        for (int m = 0; m < Q_ROWS; m++)
            _mm_prefetch(next + m * w->row_stride + offset, _MM_HINT_T1);
        __m256i x = _mm256_loadu_si256((const __m256i *)(xq->qs + xb * TENSOR_QK));
        __m256i s[Q_ROWS];
#pragma GCC unroll 8
        for (int m = 0; m < Q_ROWS; m++)
            s[m] = q4 ? dot_bytes(q4_0_unpack(rows[m] + offset + 2), x)
                      : q8_0_row_dot(rows[m] + offset + 2, x);
        __m256i dot = _mm256_add_epi32(sum_rows(s), _mm256_set1_epi32(xq->bias[xb]));
        acc = add_blocks(acc, dot, gather_scales(rows[0], offsets, offset), xq->d[xb]);
    }
    if (nr == Q_ROWS) {
        _mm256_storeu_ps(job->out + (size_t)b * w->rows + r0, acc);
    } else {
        float lanes[Q_ROWS];
        _mm256_storeu_ps(lanes, acc);
        memcpy(job->out + (size_t)b * w->rows + r0, lanes, sizeof(float) * (size_t)nr);
    }
}

/* Repacks 8 rows from r0: per block, group g = weights 4g..4g+3 of each row
 * (Q4_0 nibbles; Q8_0 |w|, then w again for the signs), then the scales. */
static ALWAYS_INLINE void repack_panel(const struct tensor_matrix *w, int r0, int nr, char *panel,
                                       const int q4) {
    const int blocks = w->cols / TENSOR_QK;
    const char *rows[Q_ROWS];
    __m256i offsets = row_pointers(w, r0, nr, rows);
    const char *row0 = rows[0];
    for (int j = 0; j < blocks; j++) {
        char *out = panel + (size_t)j * Q_PANEL_BLOCK(q4);
        if (q4) {
            size_t block = (size_t)j * sizeof(struct tensor_block_q4_0);
            const __m256i nibble = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                __m256i packed =
                    _mm256_i32gather_epi32((const int *)(row0 + block + 2 + 4 * g), offsets, 1);
                _mm256_store_si256((__m256i *)(out + Q_GROUP_BYTES * g),
                                   _mm256_and_si256(packed, nibble));
                _mm256_store_si256((__m256i *)(out + Q_GROUP_BYTES * (g + 4)),
                                   _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble));
            }
            _mm256_store_ps((void *)(out + Q_SCALES_OFFSET(1)),
                            gather_scales(row0, offsets, block));
        } else {
            size_t block = (size_t)j * sizeof(struct tensor_block_q8_0);
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                __m256i quants =
                    _mm256_i32gather_epi32((const int *)(row0 + block + 2 + 4 * g), offsets, 1);
                _mm256_store_si256((__m256i *)(out + Q_GROUP_BYTES * g), _mm256_abs_epi8(quants));
                _mm256_store_si256((__m256i *)(out + Q_SIGNS_OFFSET + Q_GROUP_BYTES * g), quants);
            }
            _mm256_store_ps((void *)(out + Q_SCALES_OFFSET(0)),
                            gather_scales(row0, offsets, block));
        }
    }
}

static ALWAYS_INLINE void quant_gemm_tile(const struct tensor_matmul_job *job, const char *panel,
                                          int r0, int nr, int b0, const int nc, const int q4) {
    const struct tensor_matrix *w = job->w;
    const struct tensor_xq *xq = job->xq;
    const int blocks = w->cols / TENSOR_QK;
    const int8_t *xs[Q_GEMM_COLS];
    __m256 acc[Q_GEMM_COLS];
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) {
        xs[c] = xq->qs + (size_t)(b0 + c) * w->cols;
        acc[c] = _mm256_setzero_ps();
    }
    for (int j = 0; j < blocks; j++) {
        const char *pj = panel + (size_t)j * Q_PANEL_BLOCK(q4);
        __m256i dot[Q_GEMM_COLS];
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++)
            dot[c] = _mm256_set1_epi32(xq->bias[(size_t)(b0 + c) * blocks + j]);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m256i weights = _mm256_load_si256((const __m256i *)(pj + Q_GROUP_BYTES * g));
            __m256i signs =
                q4 ? weights
                   : _mm256_load_si256((const __m256i *)(pj + Q_SIGNS_OFFSET + Q_GROUP_BYTES * g));
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) {
                int32_t x4;
                memcpy(&x4, xs[c] + (size_t)j * TENSOR_QK + 4 * g, sizeof(x4));
                __m256i x = _mm256_set1_epi32(x4);
                if (!q4) x = _mm256_sign_epi8(x, signs);
                dot[c] = _mm256_add_epi32(dot[c], dot_bytes(weights, x));
            }
        }
        __m256 d_w = _mm256_load_ps((const void *)(pj + Q_SCALES_OFFSET(q4)));
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++)
            acc[c] = add_blocks(acc[c], dot[c], d_w, xq->d[(size_t)(b0 + c) * blocks + j]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) {
        float *out = job->out + (size_t)(b0 + c) * w->rows + r0;
        if (nr == Q_ROWS) {
            _mm256_storeu_ps(out, acc[c]);
        } else {
            float lanes[Q_ROWS];
            _mm256_storeu_ps(lanes, acc[c]);
            memcpy(out, lanes, sizeof(float) * (size_t)nr);
        }
    }
}

static ALWAYS_INLINE void quant_matmul(const struct tensor_matmul_job *job, int row_begin,
                                       int row_end, char *panel, const int q4) {
    if (job->batch < Q_GEMM_MIN_BATCH) {
        for (int r = row_begin; r < row_end; r += Q_ROWS) {
            int nr = row_end - r < Q_ROWS ? row_end - r : Q_ROWS;
            for (int b = 0; b < job->batch; b++) quant_gemv_tile(job, r, nr, b, q4);
        }
        return;
    }
    for (int b0 = 0; b0 < job->batch; b0 += Q_BATCH_BLOCK) {
        int b_end = b0 + Q_BATCH_BLOCK < job->batch ? b0 + Q_BATCH_BLOCK : job->batch;
        for (int r = row_begin; r < row_end; r += Q_ROWS) {
            int nr = row_end - r < Q_ROWS ? row_end - r : Q_ROWS;
            repack_panel(job->w, r, nr, panel, q4);
            for (int b = b0; b < b_end; b += Q_GEMM_COLS) {
                switch (b_end - b) {
                case 1:
                    quant_gemm_tile(job, panel, r, nr, b, 1, q4);
                    break;
                case 2:
                    quant_gemm_tile(job, panel, r, nr, b, 2, q4);
                    break;
                case 3:
                    quant_gemm_tile(job, panel, r, nr, b, 3, q4);
                    break;
                default:
                    quant_gemm_tile(job, panel, r, nr, b, Q_GEMM_COLS, q4);
                    break;
                }
            }
        }
    }
}

static int strides_fit_gathers(const struct tensor_matrix *w) {
    return w->row_stride <= (size_t)INT_MAX / Q_ROWS;
}

void tensor_matmul_q8_0_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch) {
    if (!strides_fit_gathers(job->w))
        tensor_matmul_q8_0_scalar(job, row_begin, row_end, scratch);
    else
        quant_matmul(job, row_begin, row_end, scratch, 0);
}

void tensor_matmul_q4_0_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch) {
    if (!strides_fit_gathers(job->w))
        tensor_matmul_q4_0_scalar(job, row_begin, row_end, scratch);
    else
        quant_matmul(job, row_begin, row_end, scratch, 1);
}

size_t tensor_matmul_scratch_avx2(enum tensor_type type, int cols, int batch) {
    if ((type == TENSOR_Q8_0 || type == TENSOR_Q4_0) && batch >= Q_GEMM_MIN_BATCH)
        return (size_t)(cols / TENSOR_QK) * Q_PANEL_BLOCK(type == TENSOR_Q4_0);
    return 0;
}

/* ---- activation quantization ---- */

/* roundf (nearest, ties away from zero) of 8 floats, exactly. */
static ALWAYS_INLINE __m256 round_away(__m256 v) {
    const __m256 sign_bit = _mm256_castsi256_ps(_mm256_set1_epi32(INT_MIN));
    __m256 whole = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 fraction = _mm256_andnot_ps(sign_bit, _mm256_sub_ps(v, whole)); /* exact */
    __m256 up = _mm256_cmp_ps(fraction, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign_bit));
    return _mm256_add_ps(whole, _mm256_and_ps(up, one));
}

void tensor_quantize_x_avx2(int8_t *qs, float *d, int32_t *bias, const float *x, int n,
                            int32_t offset) {
    const __m256 sign_bit = _mm256_castsi256_ps(_mm256_set1_epi32(INT_MIN));
    for (int j = 0; j < n / TENSOR_QK; j++) {
        __m256 v[4];
        __m256 amax = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + j * TENSOR_QK + 8 * k);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[k]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        float max = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
        float scale = max / 127.0f;
        float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
        d[j] = _cvtsh_ss(_cvtss_sh(scale, _MM_FROUND_TO_NEAREST_INT));
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[k], _mm256_set1_ps(inverse))));
        __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m256i bytes =
            _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        /* the packs interleave 128-bit lanes: dwords 0 4 1 5 2 6 3 7 */
        bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(qs + j * TENSOR_QK), bytes);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        bias[j] = (int32_t)((uint32_t)-offset * (uint32_t)_mm_cvtsi128_si32(s4)); /* wraps */
    }
}
