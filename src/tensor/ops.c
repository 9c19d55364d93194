/* ops.c -- the element-wise and per-row kernels of a forward pass: RMS norm,
 * rotary embedding, softmax, SwiGLU, dot and axpy, their many-row forms for
 * attention (dot_columns over F32 or F16 keys, dot_q8_0_keys over Q8_0 keys
 * with a quantized query, weighted_sum over F32, F16 or Q8_0 values), and
 * the rounding to F16 or Q8_0 of the key/value cache's stores.
 *
 * The public functions dispatch to the instruction set in use (isa.c); the
 * scalar versions here are the reference the SIMD ones (ops_avx2.c,
 * ops_avx512.c) are tested against, and they perform ops_avx2.c's float
 * operations in its order, lane by lane (canon.h), so they give its bits.
 * The rotary angles are scalar only: a position's are computed once a step
 * and shared by every head and layer; the turn by them has vector
 * versions. */
#include "canon.h"
#include "tensor_internal.h"

#include <math.h>
#include <string.h>

/* e^x by the steps of the vector kernels' exp_ps (ops_avx2.c,
 * ops_avx512.c), each a correctly rounded IEEE operation, so the bits are
 * theirs: canon_min and canon_max are minps and maxps (a NaN becomes the
 * bound), nearbyintf rounds to nearest even as they do, and fmaf fuses as
 * they do. */
static float exp_steps(float x) {
    const float high = 88.0f, low = -87.33f;
    int overflow = x > high, underflow = x < low;
    x = canon_max(canon_min(x, high), low);
    float n = nearbyintf(x * 1.44269504f);
    float r = fmaf(-n, 0.693359375f, x);
    r = fmaf(-n, -2.12194440e-4f, r);
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* 2^n: n is in [-126, 127] */
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    if (overflow) return __builtin_inff();
    return underflow ? 0.0f : p * scale;
}

/* The sum of squares in 8 lanes (element i fused into lane i % 8), the
 * lane tree, then each element scaled as tensor_rmsnorm_avx2 does. */
void tensor_rmsnorm_scalar(float *out, const float *x, const float *weight, int n, float eps) {
    float lanes[CANON_LANES] = {0};
    for (int i = 0; i < n; i++) lanes[i % CANON_LANES] = fmaf(x[i], x[i], lanes[i % CANON_LANES]);
    float scale = 1.0f / sqrtf(canon_sum_lanes(lanes) / (float)n + eps);
    for (int i = 0; i < n; i++) out[i] = weight[i] * (scale * x[i]);
}

/* tensor_softmax_avx2's order: the maximum of the whole vectors by lanes
 * (maxps) and the lane tree, then of the tail in order; exp_steps of each
 * x - max, summed in 8 lanes (the tail's masked lanes add nothing) and
 * the lane tree; each element times the sum's inverse. */
void tensor_softmax_scalar(float *x, int n) {
    if (n <= 0) return;
    float lanes[CANON_LANES];
    for (int l = 0; l < CANON_LANES; l++) lanes[l] = -__builtin_inff();
    int whole = n - n % CANON_LANES;
    for (int i = 0; i < whole; i++)
        lanes[i % CANON_LANES] = canon_max(lanes[i % CANON_LANES], x[i]);
    float max = canon_max_lanes(lanes);
    for (int i = whole; i < n; i++)
        if (x[i] > max) max = x[i];
    for (int l = 0; l < CANON_LANES; l++) lanes[l] = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = exp_steps(x[i] - max);
        lanes[i % CANON_LANES] = lanes[i % CANON_LANES] + x[i];
    }
    float inverse = 1.0f / canon_sum_lanes(lanes);
    for (int i = 0; i < n; i++) x[i] *= inverse;
}

/* silu(g) * up as tensor_swiglu_avx2 computes it: e = exp_steps(0 - g),
 * then (g / (1 + e)) * up. */
void tensor_swiglu_scalar(float *out, const float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + exp_steps(0.0f - g)) * up[i];
    }
}

void tensor_exp_weights_scalar(float *out, const float *x, int n, float shift, float divisor,
                               float floor) {
    for (int i = 0; i < n; i++) out[i] = x[i] >= floor ? exp_steps((x[i] - shift) / divisor) : 0.0f;
}

/* tensor_dot_avx2's order: four sums of 8 lanes; rounds of 32 elements
 * put element i + 8k + l into sum k, lane l; then whole vectors of 8 go
 * to sum 0 and the tail to sum 1 (fused, in order of i); the sums add as
 * (0 + 1) + (2 + 3) lane by lane, then the lane tree. */
float tensor_dot_scalar(const float *a, const float *b, int n) {
    float acc[4][CANON_LANES] = {{0}};
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < CANON_LANES; l++)
                acc[k][l] = fmaf(a[i + 8 * k + l], b[i + 8 * k + l], acc[k][l]);
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < CANON_LANES; l++) acc[0][l] = fmaf(a[i + l], b[i + l], acc[0][l]);
    for (int l = 0; i + l < n; l++) acc[1][l] = fmaf(a[i + l], b[i + l], acc[1][l]);
    float lanes[CANON_LANES];
    for (int l = 0; l < CANON_LANES; l++)
        lanes[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
    return canon_sum_lanes(lanes);
}

/* y[i] = y[i] + a * x[i], fused as every vector lane does it. */
void tensor_axpy_scalar(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

/* x[i] = x[i] * a: one rounded product, as every vector lane makes it. */
void tensor_scale_scalar(float *x, float a, int n) {
    for (int i = 0; i < n; i++) x[i] *= a;
}

/* Element i of rows (F32 or F16, counted across rows) as a float. */
static float row_element(const void *rows, enum tensor_type type, size_t i) {
    if (type == TENSOR_F16) return tensor_fp16_to_fp32(((const uint16_t *)rows)[i]);
    return ((const float *)rows)[i];
}

/* Column r is one vector lane: four sums over i mod 4, fused in order of
 * i, added as (0 + 1) + (2 + 3). */
void tensor_dot_columns_scalar(float *out, const float *q, const void *columns,
                               enum tensor_type type, int n_rows, int n, int stride) {
    for (int r = 0; r < n_rows; r++) {
        float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int i = 0; i < n; i++)
            sums[i % 4] =
                fmaf(q[i], row_element(columns, type, (size_t)i * (size_t)stride + (size_t)r),
                     sums[i % 4]);
        out[r] = (sums[0] + sums[1]) + (sums[2] + sums[3]);
    }
}

/* Where dimension i of key r lies in a block of Q8_0 keys (tensor.h), and
 * where its scales start. */
static size_t key_quant_index(int i, int r, int stride) {
    return ((size_t)(i / 4) * (size_t)stride + (size_t)r) * 4 + (size_t)(i % 4);
}
static size_t key_scales_offset(int n, int stride) {
    return (size_t)n * (size_t)stride;
}

void tensor_dot_q8_0_keys_scalar(float *out, const struct tensor_q8_0_query *query,
                                 const void *keys, int n_rows, int n, int stride) {
    const int8_t *quants = keys;
    const uint16_t *scales = (const void *)((const char *)keys + key_scales_offset(n, stride));
    for (int r = 0; r < n_rows; r++) {
        float acc = 0.0f;
        for (int j = 0; j < n / TENSOR_QK; j++) {
            int32_t dot = 0;
            for (int i = j * TENSOR_QK; i < (j + 1) * TENSOR_QK; i++)
                dot += quants[key_quant_index(i, r, stride)] * query->quants[i];
            acc = tensor_add_block(acc, dot, tensor_fp16_to_fp32(scales[j * stride + r]),
                                   query->scales[j]);
        }
        out[r] = acc;
    }
}

/* Each element takes one fused multiply-add per row, rows in order (the
 * vector kernels keep the element in a lane across the rows); Q8_0: the
 * row's weight times its block's scale, rounded, times the quant. */
void tensor_weighted_sum_scalar(float *out, const float *weights, const void *rows,
                                enum tensor_type type, int n_rows, int n) {
    for (int p = 0; p < n_rows; p++) {
        size_t row = (size_t)p * (size_t)n;
        if (type != TENSOR_Q8_0) {
            for (int i = 0; i < n; i++)
                out[i] = fmaf(weights[p], row_element(rows, type, row + (size_t)i), out[i]);
            continue;
        }
        const struct tensor_block_q8_0 *blocks =
            (const struct tensor_block_q8_0 *)rows + row / TENSOR_QK;
        for (int i = 0; i < n; i++) {
            const struct tensor_block_q8_0 *block = blocks + i / TENSOR_QK;
            float scaled = weights[p] * tensor_fp16_to_fp32(block->d);
            out[i] = fmaf(scaled, (float)block->qs[i % TENSOR_QK], out[i]);
        }
    }
}

void tensor_fp16_from_fp32_scalar(uint16_t *out, const float *x, int n) {
    for (int i = 0; i < n; i++) out[i] = tensor_fp32_to_fp16(x[i]);
}

void tensor_rmsnorm(float *out, const float *x, const float *weight, int n, float eps) {
    if (n > 0) tensor_kernels_current()->rmsnorm(out, x, weight, n, eps);
}

void tensor_exp_weights(float *out, const float *x, int n, float shift, float divisor,
                        float floor) {
    if (n > 0) tensor_kernels_current()->exp_weights(out, x, n, shift, divisor, floor);
}

void tensor_softmax(float *x, int n) {
    if (n > 0) tensor_kernels_current()->softmax(x, n);
}

void tensor_swiglu(float *out, const float *gate, const float *up, int n) {
    if (n > 0) tensor_kernels_current()->swiglu(out, gate, up, n);
}

/* Each head: the pairs that fill whole vectors by the instruction set in
 * use, the rest by the scalar turn (the same bits, see ops_avx512.c). */
void tensor_rope_turn(float *x, int n_heads, int head_dim, int pairs, const float *cosines,
                      const float *sines, enum tensor_rope_style style) {
    const struct tensor_kernels *k = tensor_kernels_current();
    for (int h = 0; h < n_heads; h++) {
        float *head = x + (size_t)h * head_dim;
        int done = pairs > 0 ? k->rope_turn_vectors(head, pairs, cosines, sines, style) : 0;
        tensor_rope_turn_head(head, done, pairs, cosines, sines, style);
    }
}

float tensor_dot(const float *a, const float *b, int n) {
    return n > 0 ? tensor_kernels_current()->dot(a, b, n) : 0.0f;
}

void tensor_scale(float *x, float a, int n) {
    if (n > 0) tensor_kernels_current()->scale(x, a, n);
}

void tensor_axpy(float *y, float a, const float *x, int n) {
    if (n > 0) tensor_kernels_current()->axpy(y, a, x, n);
}

void tensor_dot_columns(float *out, const float *q, const void *columns, enum tensor_type type,
                        int n_rows, int n, int stride) {
    if (n_rows > 0) tensor_kernels_current()->dot_columns(out, q, columns, type, n_rows, n, stride);
}

void tensor_dot_columns_tile(const struct tensor_tile *tile, const void *columns,
                             enum tensor_type type, int n_rows, int n, int stride) {
    const struct tensor_kernels *k = tensor_kernels_current();
    if (n_rows <= 0) return;
    if (k->dot_columns_tile) {
        k->dot_columns_tile(tile, columns, type, n_rows, n, stride);
        return;
    }
    for (int t = 0; t < tile->n; t++)
        k->dot_columns(tile->out + (size_t)t * tile->out_stride,
                       tile->in + (size_t)t * tile->in_stride, columns, type, n_rows, n, stride);
}

void tensor_quantize_query(const struct tensor_q8_0_query *query, const float *q, int n) {
    if (n > 0)
        tensor_kernels_current()->quantize_x(query->quants, query->scales, query->bias, q, n, 128);
}

void tensor_dot_q8_0_keys(float *out, const struct tensor_q8_0_query *query, const void *keys,
                          int n_rows, int n, int stride) {
    if (n_rows > 0) tensor_kernels_current()->dot_q8_0_keys(out, query, keys, n_rows, n, stride);
}

void tensor_dot_q8_0_keys_tile(float *out, size_t out_stride,
                               const struct tensor_q8_0_query *queries, int n_queries,
                               const void *keys, int n_rows, int n, int stride) {
    const struct tensor_kernels *k = tensor_kernels_current();
    if (n_rows <= 0) return;
    if (k->dot_q8_0_keys_tile) {
        k->dot_q8_0_keys_tile(out, out_stride, queries, n_queries, keys, n_rows, n, stride);
        return;
    }
    for (int t = 0; t < n_queries; t++)
        k->dot_q8_0_keys(out + (size_t)t * out_stride, &queries[t], keys, n_rows, n, stride);
}

void tensor_weighted_sum(float *out, const float *weights, const void *rows, enum tensor_type type,
                         int n_rows, int n) {
    if (n > 0) tensor_kernels_current()->weighted_sum(out, weights, rows, type, n_rows, n);
}

void tensor_weighted_sum_tile(const struct tensor_tile *tile, const void *rows,
                              enum tensor_type type, int n_rows, int n) {
    const struct tensor_kernels *k = tensor_kernels_current();
    if (n <= 0) return;
    if (k->weighted_sum_tile) {
        k->weighted_sum_tile(tile, rows, type, n_rows, n);
        return;
    }
    for (int t = 0; t < tile->n; t++)
        k->weighted_sum(tile->out + (size_t)t * tile->out_stride,
                        tile->in + (size_t)t * tile->in_stride, rows, type, n_rows, n);
}

void tensor_fp16_from_fp32(uint16_t *out, const float *x, int n) {
    if (n > 0) tensor_kernels_current()->fp16_from_fp32(out, x, n);
}

/* The activation quantizer of the matmuls (quants and fp16-rounded scales,
 * tensor_quantize_q8_0's values), a chunk at a time, packed into blocks. */
#define QUANTIZE_CHUNK 256

void tensor_quantize_row_q8_0(struct tensor_block_q8_0 *out, const float *x, int n) {
    const struct tensor_kernels *k = tensor_kernels_current();
    int8_t qs[QUANTIZE_CHUNK];
    float d[QUANTIZE_CHUNK / TENSOR_QK];
    int32_t sums[QUANTIZE_CHUNK / TENSOR_QK];
    for (int start = 0; start + TENSOR_QK <= n; start += QUANTIZE_CHUNK) {
        int chunk =
            n - start < QUANTIZE_CHUNK ? (n - start) / TENSOR_QK * TENSOR_QK : QUANTIZE_CHUNK;
        k->quantize_x(qs, d, sums, x + start, chunk, 0);
        for (int j = 0; j < chunk / TENSOR_QK; j++) {
            struct tensor_block_q8_0 *block = out + start / TENSOR_QK + j;
            block->d = tensor_fp32_to_fp16(d[j]); /* exact: d is fp16-rounded */
            memcpy(block->qs, qs + j * TENSOR_QK, TENSOR_QK);
        }
    }
}

void tensor_store_q8_0_key(void *keys, int r, const float *key, int n, int stride) {
    int8_t *quants = keys;
    uint16_t *scales = (void *)((char *)keys + key_scales_offset(n, stride));
    struct tensor_block_q8_0 blocks[QUANTIZE_CHUNK / TENSOR_QK] = {{0}};
    for (int start = 0; start + TENSOR_QK <= n; start += QUANTIZE_CHUNK) {
        int count = (n - start < QUANTIZE_CHUNK ? n - start : QUANTIZE_CHUNK) / TENSOR_QK;
        tensor_quantize_row_q8_0(blocks, key + start, count * TENSOR_QK);
        for (int j = 0; j < count; j++) {
            int first = start + j * TENSOR_QK;
            scales[(size_t)(first / TENSOR_QK) * (size_t)stride + (size_t)r] = blocks[j].d;
            /* four dimensions of one key lie together: one 4-byte copy each */
            for (int i = 0; i < TENSOR_QK; i += 4)
                memcpy(quants + key_quant_index(first + i, r, stride), blocks[j].qs + i, 4);
        }
    }
}

int tensor_rope_pairs(int head_dim, int rope_dim) {
    return (rope_dim > head_dim ? head_dim : rope_dim) / 2;
}

void tensor_rope_frequencies(float *frequencies, int pairs, int rope_dim, float theta_base) {
    for (int j = 0; j < pairs; j++)
        frequencies[j] = powf(theta_base, -2.0f * (float)j / (float)rope_dim);
}

void tensor_rope_angles(float *cosines, float *sines, int pairs, const float *frequencies,
                        int pos) {
    for (int j = 0; j < pairs; j++) {
        float angle = (float)pos * frequencies[j];
        cosines[j] = cosf(angle);
        sines[j] = sinf(angle);
    }
}

void tensor_rope_turn_head(float *head, int first_pair, int pairs, const float *cosines,
                           const float *sines, enum tensor_rope_style style) {
    /* two products, then their difference or sum, unfused, as the vector
     * turns do (the NORM turn's negated sine in the first lane gives
     * a * c + b * -s, the same bits as a * c - b * s) */
    for (int j = first_pair; j < pairs; j++) {
        /* NORM rotates (2j, 2j+1); NEOX rotates (j, j + rope_dim/2) */
        int first = style == TENSOR_ROPE_NEOX ? j : 2 * j;
        int second = style == TENSOR_ROPE_NEOX ? j + pairs : 2 * j + 1;
        float a = head[first], b = head[second];
        head[first] = a * cosines[j] - b * sines[j];
        head[second] = a * sines[j] + b * cosines[j];
    }
}

int tensor_rope_turn_vectors_none(float *head, int pairs, const float *cosines, const float *sines,
                                  enum tensor_rope_style style) {
    (void)head, (void)pairs, (void)cosines, (void)sines, (void)style;
    return 0;
}
