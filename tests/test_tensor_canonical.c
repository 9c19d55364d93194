/* test_tensor_canonical.c -- the scalar reference kernels give the AVX2
 * kernels' bits, for every op and every weight type: the scalar code is
 * the canonical float order (src/tensor/canon.h) that any instruction set
 * must reproduce, so a port tested bit-equal to it computes the logits an
 * x86 host computes. Every comparison is of the bytes (memcmp), never
 * within a tolerance:
 *  - rmsnorm, softmax (with -inf masks and large logits), exp_weights,
 *    swiglu (gates past exp's bounds), rope turns (NORM and NEOX, partial
 *    rotary dimensions), dot, axpy, scale, dot_columns (F32, F16),
 *    weighted_sum (F32, F16, Q8_0), their tiles and the Q8_0 keys' of 1 to
 *    13 queries (each query's row the one-query bits), fp16_from_fp32 (corners:
 *    ties, subnormals, overflow, infinities, NaN), the activation
 *    quantizers (quantize_row_q8_0 and quantize_query: quants, scales and
 *    biases, with zero, subnormal, infinite and NaN blocks; Q8_K, the
 *    k-quants' input, also with ties of magnitude and of rounding), Q8_0
 *    keys stored and dotted with a query; for lengths 1 .. 4099 that leave
 *    every tail of 8 and 32, and 3 seeds;
 *  - tensor_matmul for every type the type table has and tensor_matmul
 *    accepts (the others are skipped), 37 rows, widths that leave tails,
 *    batch sizes 1, 3, 16 and 17, in row layout and, where the type packs,
 *    in panel layout, with one thread and with a pool of 2.
 * Every instruction set the CPU runs is compared (x86: AVX2, AVX-512;
 * arm64: NEON, dotprod, i8mm). */
#include "tensor/quants.h"
#include "tensor/tensor.h"
#include "tensor_kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static const int lengths[] = {1,  2,  3,  5,   7,   8,   9,   15,  16,  17,  31,  32,   33,  40,
                              63, 64, 65, 100, 127, 128, 129, 255, 256, 257, 300, 1000, 4099};
#define LENGTHS (int)(sizeof(lengths) / sizeof(lengths[0]))
#define SEEDS   3
#define MAX_N   4099

/* The instruction set compared with the scalar reference. */
static enum tensor_isa other = TENSOR_ISA_SCALAR;

/* n bytes computed under scalar (a) and the other set (b) must be equal;
 * the message names the set. */
#define SAME(a, b, n, ...)                                                                         \
    do {                                                                                           \
        if (memcmp((a), (b), (n)) != 0) {                                                          \
            fprintf(stderr, "%s:%d: %s differs from scalar: ", __FILE__, __LINE__,                 \
                    tensor_isa_name(other));                                                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

/* Pass 0 runs the scalar kernels, pass 1 the other set's. */
static void use(int pass) {
    CHECK(tensor_isa_select(pass == 0 ? TENSOR_ISA_SCALAR : other) == 0);
}

/* n floats in [-scale, scale), every 11th zero and every 13th negated
 * zero when `zeros`. */
static void fill(float *x, int n, float scale, int zeros) {
    for (int i = 0; i < n; i++) {
        x[i] = test_random_float(&rng_state) * scale;
        if (zeros && i % 11 == 5) x[i] = 0.0f;
        if (zeros && i % 13 == 7) x[i] = -0.0f;
    }
}

static float *floats(int n) {
    return calloc((size_t)n + 1, sizeof(float));
}

/* ---- element-wise and per-row ops ---- */

static void check_rows_ops(int n) {
    float *x = floats(n), *weight = floats(n), *b = floats(n), *out[2], *y[2];
    for (int p = 0; p < 2; p++) out[p] = floats(n), y[p] = floats(n);
    fill(x, n, 3.0f, 1);
    fill(weight, n, 1.5f, 0);
    fill(b, n, 2.0f, 1);
    float eps = n % 2 ? 1e-5f : 1e-6f, a = test_random_float(&rng_state);
    float dots[2];
    for (int p = 0; p < 2; p++) {
        use(p);
        tensor_rmsnorm(out[p], x, weight, n, eps);
        dots[p] = tensor_dot(x, b, n);
        memcpy(y[p], b, sizeof(float) * (size_t)n);
        tensor_axpy(y[p], a, x, n);
    }
    SAME(out[0], out[1], sizeof(float) * (size_t)n, "rmsnorm n=%d", n);
    SAME(&dots[0], &dots[1], sizeof(float), "dot n=%d: %a vs %a", n, dots[0], dots[1]);
    SAME(y[0], y[1], sizeof(float) * (size_t)n, "axpy n=%d", n);
    for (int p = 0; p < 2; p++) {
        use(p);
        memcpy(y[p], x, sizeof(float) * (size_t)n);
        tensor_scale(y[p], a, n);
    }
    SAME(y[0], y[1], sizeof(float) * (size_t)n, "scale n=%d", n);

    /* softmax: logits of a wide range, some masked to -inf (not all) */
    for (int p = 0; p < 2; p++) {
        use(p);
        for (int i = 0; i < n; i++) out[p][i] = x[i] * 15.0f;
        for (int i = 1; i < n; i += 7) out[p][i] = -__builtin_inff();
        tensor_softmax(out[p], n);
    }
    SAME(out[0], out[1], sizeof(float) * (size_t)n, "softmax n=%d", n);
    /* and logits within a few nats (attention's): every term counts in the
     * sum, so a sum made in another order shows */
    for (int p = 0; p < 2; p++) {
        use(p);
        memcpy(out[p], x, sizeof(float) * (size_t)n);
        tensor_softmax(out[p], n);
    }
    SAME(out[0], out[1], sizeof(float) * (size_t)n, "softmax of close logits n=%d", n);

    /* exp_weights: a sampler's temperature, floor and shift */
    float shift = x[0] * 10.0f, divisor = 0.7f + (float)(n % 5) * 0.3f, floor = -12.0f;
    for (int p = 0; p < 2; p++) {
        use(p);
        for (int i = 0; i < n; i++) y[p][i] = x[i] * 40.0f;
        if (n > 3) y[p][3] = 200.0f, y[p][2] = -200.0f;
        tensor_exp_weights(out[p], y[p], n, shift, divisor, floor);
    }
    SAME(out[0], out[1], sizeof(float) * (size_t)n, "exp_weights n=%d", n);

    /* swiglu: gates past both of exp's bounds */
    for (int p = 0; p < 2; p++) {
        use(p);
        for (int i = 0; i < n; i++) y[p][i] = x[i] * (i % 4 == 0 ? 40.0f : 4.0f);
        tensor_swiglu(out[p], y[p], b, n);
    }
    SAME(out[0], out[1], sizeof(float) * (size_t)n, "swiglu n=%d", n);
    free(x), free(weight), free(b);
    for (int p = 0; p < 2; p++) free(out[p]), free(y[p]);
}

/* Both rope styles on 3 heads of head_dim with rope_dim of them turning. */
static void check_rope(int head_dim, int rope_dim) {
    enum { HEADS = 3 };
    int pairs = tensor_rope_pairs(head_dim, rope_dim);
    float frequencies[128], cosines[128], sines[128];
    float x[HEADS * 256], got[2][HEADS * 256];
    tensor_rope_frequencies(frequencies, pairs, rope_dim, 10000.0f);
    fill(x, HEADS * head_dim, 2.0f, 1);
    for (int style = TENSOR_ROPE_NORM; style <= TENSOR_ROPE_NEOX; style++) {
        for (int pos = 0; pos < 3000; pos += 997) {
            tensor_rope_angles(cosines, sines, pairs, frequencies, pos);
            for (int p = 0; p < 2; p++) {
                use(p);
                memcpy(got[p], x, sizeof(float) * HEADS * (size_t)head_dim);
                tensor_rope_turn(got[p], HEADS, head_dim, pairs, cosines, sines,
                                 (enum tensor_rope_style)style);
            }
            SAME(got[0], got[1], sizeof(float) * HEADS * (size_t)head_dim,
                 "rope style %d head_dim %d rope_dim %d pos %d", style, head_dim, rope_dim, pos);
        }
    }
}

/* ---- attention's many-row forms ---- */

static void check_dot_columns(int n, int n_rows) {
    int stride = n_rows + 3;
    float *q = floats(n), *columns = floats(n * stride), out[2][64];
    uint16_t *halves = calloc((size_t)n * (size_t)stride + 1, sizeof(uint16_t));
    fill(q, n, 1.0f, 1);
    fill(columns, n * stride, 2.0f, 1);
    tensor_fp16_from_fp32(halves, columns, n * stride);
    for (int type = TENSOR_F32; type <= TENSOR_F16; type++) {
        const void *data = type == TENSOR_F16 ? (const void *)halves : (const void *)columns;
        for (int p = 0; p < 2; p++) {
            use(p);
            tensor_dot_columns(out[p], q, data, (enum tensor_type)type, n_rows, n, stride);
        }
        SAME(out[0], out[1], sizeof(float) * (size_t)n_rows, "dot_columns %s n=%d rows=%d",
             tensor_type_name(type), n, n_rows);
    }
    free(q), free(columns), free(halves);
}

static void check_weighted_sum(int n, int n_rows) {
    float *values = floats(n * n_rows), *weights = floats(n_rows), *start = floats(n), *out[2];
    uint16_t *halves = calloc((size_t)n * (size_t)n_rows + 1, sizeof(uint16_t));
    struct tensor_block_q8_0 *blocks = calloc((size_t)(n * n_rows) / 32 + 1, sizeof(*blocks));
    for (int p = 0; p < 2; p++) out[p] = floats(n);
    fill(values, n * n_rows, 1.0f, 1);
    fill(weights, n_rows, 1.0f, 1);
    fill(start, n, 0.5f, 1);
    tensor_fp16_from_fp32(halves, values, n * n_rows);
    int q8 = n % 32 == 0;
    if (q8) tensor_quantize_q8_0(blocks, values, (int64_t)n * n_rows);
    for (int type = TENSOR_F32; type <= TENSOR_Q8_0; type++) {
        if (type != TENSOR_F32 && type != TENSOR_F16 && (type != TENSOR_Q8_0 || !q8)) continue;
        const void *rows = type == TENSOR_F32   ? (const void *)values
                           : type == TENSOR_F16 ? (const void *)halves
                                                : (const void *)blocks;
        for (int p = 0; p < 2; p++) {
            use(p);
            memcpy(out[p], start, sizeof(float) * (size_t)n);
            tensor_weighted_sum(out[p], weights, rows, (enum tensor_type)type, n_rows, n);
        }
        SAME(out[0], out[1], sizeof(float) * (size_t)n, "weighted_sum %s n=%d rows=%d",
             tensor_type_name(type), n, n_rows);
    }
    free(values), free(weights), free(start), free(halves), free(blocks);
    for (int p = 0; p < 2; p++) free(out[p]);
}

/* A tile of n_queries queries (out strided apart, as the engine's rows of
 * scores are) against one block of columns: the other set's tile gives,
 * row by row, the scalar reference's one-query bits. */
static void check_dot_columns_tile(int n, int n_rows, int n_queries) {
    int stride = n_rows + 1, q_stride = n + 2, out_stride = n_rows + 5;
    float *q = floats(n_queries * q_stride), *columns = floats(n * stride), *out[2];
    uint16_t *halves = calloc((size_t)n * (size_t)stride + 1, sizeof(uint16_t));
    for (int p = 0; p < 2; p++) out[p] = floats(n_queries * out_stride);
    fill(q, n_queries * q_stride, 1.0f, 1);
    fill(columns, n * stride, 2.0f, 1);
    tensor_fp16_from_fp32(halves, columns, n * stride);
    for (int type = TENSOR_F32; type <= TENSOR_F16; type++) {
        const void *data = type == TENSOR_F16 ? (const void *)halves : (const void *)columns;
        use(0);
        for (int t = 0; t < n_queries; t++)
            tensor_dot_columns(out[0] + t * out_stride, q + t * q_stride, data,
                               (enum tensor_type)type, n_rows, n, stride);
        use(1);
        struct tensor_tile tile = {n_queries, q, (size_t)q_stride, out[1], (size_t)out_stride};
        tensor_dot_columns_tile(&tile, data, (enum tensor_type)type, n_rows, n, stride);
        for (int t = 0; t < n_queries; t++)
            SAME(out[0] + t * out_stride, out[1] + t * out_stride, sizeof(float) * (size_t)n_rows,
                 "dot_columns_tile %s n=%d rows=%d query %d of %d", tensor_type_name(type), n,
                 n_rows, t, n_queries);
    }
    free(q), free(columns), free(halves);
    for (int p = 0; p < 2; p++) free(out[p]);
}

/* A tile of n_queries rows of weights over the same rows of values, each
 * output starting from its own values: row by row the scalar reference's
 * one-query bits. */
static void check_weighted_sum_tile(int n, int n_rows, int n_queries) {
    int w_stride = n_rows + 3, out_stride = n + 1;
    float *values = floats(n * n_rows), *weights = floats(n_queries * w_stride);
    float *start = floats(n_queries * out_stride), *out[2];
    uint16_t *halves = calloc((size_t)n * (size_t)n_rows + 1, sizeof(uint16_t));
    struct tensor_block_q8_0 *blocks = calloc((size_t)(n * n_rows) / 32 + 1, sizeof(*blocks));
    for (int p = 0; p < 2; p++) out[p] = floats(n_queries * out_stride);
    fill(values, n * n_rows, 1.0f, 1);
    fill(weights, n_queries * w_stride, 1.0f, 1);
    fill(start, n_queries * out_stride, 0.5f, 1);
    tensor_fp16_from_fp32(halves, values, n * n_rows);
    if (n % 32 == 0) tensor_quantize_q8_0(blocks, values, (int64_t)n * n_rows);
    for (int type = TENSOR_F32; type <= TENSOR_Q8_0; type++) {
        if (type != TENSOR_F32 && type != TENSOR_F16 && (type != TENSOR_Q8_0 || n % 32)) continue;
        const void *rows = type == TENSOR_F32   ? (const void *)values
                           : type == TENSOR_F16 ? (const void *)halves
                                                : (const void *)blocks;
        for (int p = 0; p < 2; p++)
            memcpy(out[p], start, sizeof(float) * (size_t)(n_queries * out_stride));
        use(0);
        for (int t = 0; t < n_queries; t++)
            tensor_weighted_sum(out[0] + t * out_stride, weights + t * w_stride, rows,
                                (enum tensor_type)type, n_rows, n);
        use(1);
        struct tensor_tile tile = {n_queries, weights, (size_t)w_stride, out[1],
                                   (size_t)out_stride};
        tensor_weighted_sum_tile(&tile, rows, (enum tensor_type)type, n_rows, n);
        SAME(out[0], out[1], sizeof(float) * (size_t)(n_queries * out_stride),
             "weighted_sum_tile %s n=%d rows=%d queries %d", tensor_type_name(type), n, n_rows,
             n_queries);
    }
    free(values), free(weights), free(start), free(halves), free(blocks);
    for (int p = 0; p < 2; p++) free(out[p]);
}

/* n_rows Q8_0 keys of n dimensions stored and dotted with a query, on each
 * set: the stored block, the quantized query and the dots. */
static void check_q8_0_keys(int n, int n_rows) {
    int stride = n_rows + 2;
    size_t bytes = (size_t)stride * tensor_row_bytes(TENSOR_Q8_0, n);
    float *keys = floats(n * n_rows), *q = floats(n), out[2][64];
    char *stored[2];
    int8_t quants[2][256];
    float scales[2][8];
    int32_t bias[2][8];
    fill(keys, n * n_rows, 3.0f, 1);
    fill(q, n, 2.0f, 1);
    for (int p = 0; p < 2; p++) {
        use(p);
        stored[p] = calloc(bytes, 1);
        for (int r = 0; r < n_rows; r++)
            tensor_store_q8_0_key(stored[p], r, keys + (size_t)r * n, n, stride);
        struct tensor_q8_0_query query = {quants[p], scales[p], bias[p]};
        tensor_quantize_query(&query, q, n);
        tensor_dot_q8_0_keys(out[p], &query, stored[p], n_rows, n, stride);
    }
    SAME(stored[0], stored[1], bytes, "store_q8_0_key n=%d rows=%d", n, n_rows);
    SAME(quants[0], quants[1], (size_t)n, "quantize_query quants n=%d", n);
    SAME(scales[0], scales[1], sizeof(float) * (size_t)(n / 32), "quantize_query scales n=%d", n);
    SAME(bias[0], bias[1], sizeof(int32_t) * (size_t)(n / 32), "quantize_query bias n=%d", n);
    SAME(out[0], out[1], sizeof(float) * (size_t)n_rows, "dot_q8_0_keys n=%d rows=%d", n, n_rows);
    free(keys), free(q), free(stored[0]), free(stored[1]);
}

/* Q8_K (a k-quant product's input), blocks of 256: random values, and
 * blocks of zeros, subnormals, huge values, an infinity, a NaN, the
 * largest magnitude twice with both signs (the first one's sign is the
 * scale's), and a scale of exactly 1 with halves (ties to even). */
static void check_quantize_q8_k(int blocks) {
    int n = TENSOR_QK_K * blocks;
    float *x = floats(n);
    fill(x, n, 4.0f, 1);
    for (int j = 0; j < blocks; j++) {
        float *block = x + TENSOR_QK_K * j;
        int at = (37 * j) % TENSOR_QK_K;
        switch (j % 8) {
        case 1:
            memset(block, 0, TENSOR_QK_K * sizeof(float));
            break;
        case 2:
            for (int i = 0; i < TENSOR_QK_K; i++) block[i] *= 1e-39f;
            break;
        case 3:
            for (int i = 0; i < TENSOR_QK_K; i++) block[i] *= 3e38f;
            break;
        case 4:
            block[at] = -__builtin_inff();
            break;
        case 5:
            block[at] = __builtin_nanf("");
            break;
        case 6:
            block[at] = 9.0f, block[(at + 100) % TENSOR_QK_K] = -9.0f;
            break;
        case 7:
            for (int i = 0; i < TENSOR_QK_K; i++) block[i] = (float)(i % 9) - 4.5f;
            block[at] = -127.0f;
            break;
        default:
            break;
        }
    }
    struct tensor_block_q8_k *rows[2];
    for (int p = 0; p < 2; p++) {
        use(p);
        rows[p] = calloc((size_t)blocks, sizeof(struct tensor_block_q8_k));
        tensor_kernels_for(p == 0 ? TENSOR_ISA_SCALAR : other)->quantize_q8_k(rows[p], x, n);
    }
    SAME(rows[0], rows[1], sizeof(struct tensor_block_q8_k) * (size_t)blocks,
         "quantize_q8_k blocks=%d", blocks);
    free(x), free(rows[0]), free(rows[1]);
}

/* A tile of n_queries quantized queries against one block of Q8_0 keys:
 * the other set's tile gives, row by row, the scalar one-query bits. */
static void check_q8_0_keys_tile(int n, int n_rows, int n_queries) {
    int stride = n_rows + 1, out_stride = n_rows + 3;
    float *keys = floats(n * n_rows), *q = floats(n * n_queries), *out[2];
    char *stored = calloc((size_t)stride * tensor_row_bytes(TENSOR_Q8_0, n), 1);
    int8_t *quants = calloc((size_t)(n * n_queries), 1);
    float *scales = floats(n * n_queries / 32);
    int32_t *bias = calloc((size_t)(n * n_queries / 32), sizeof(int32_t));
    struct tensor_q8_0_query queries[16];
    fill(keys, n * n_rows, 3.0f, 1);
    fill(q, n * n_queries, 2.0f, 1);
    use(0);
    for (int r = 0; r < n_rows; r++)
        tensor_store_q8_0_key(stored, r, keys + (size_t)r * n, n, stride);
    for (int t = 0; t < n_queries; t++) {
        queries[t] =
            (struct tensor_q8_0_query){quants + t * n, scales + t * n / 32, bias + t * n / 32};
        tensor_quantize_query(&queries[t], q + t * n, n);
    }
    for (int p = 0; p < 2; p++) out[p] = floats(n_queries * out_stride);
    for (int t = 0; t < n_queries; t++)
        tensor_dot_q8_0_keys(out[0] + t * out_stride, &queries[t], stored, n_rows, n, stride);
    use(1);
    tensor_dot_q8_0_keys_tile(out[1], (size_t)out_stride, queries, n_queries, stored, n_rows, n,
                              stride);
    SAME(out[0], out[1], sizeof(float) * (size_t)(n_queries * out_stride),
         "dot_q8_0_keys_tile n=%d rows=%d queries %d", n, n_rows, n_queries);
    free(keys), free(q), free(stored), free(quants), free(scales), free(bias);
    for (int p = 0; p < 2; p++) free(out[p]);
}

/* ---- conversions ---- */

static void check_fp16(int n) {
    static const float corners[] = {0.0f,
                                    -0.0f,
                                    1.0f + 0x1p-11f,
                                    1.0f + 0x3p-11f,
                                    65504.0f,
                                    65519.0f,
                                    65520.0f,
                                    -70000.0f,
                                    0x1p-14f,
                                    0x1p-24f,
                                    0x1p-25f,
                                    0x1.8p-25f,
                                    0x1p-26f,
                                    1e-30f,
                                    -0x1.4p-20f,
                                    __builtin_inff(),
                                    -__builtin_inff(),
                                    __builtin_nanf("")};
    int n_corners = (int)(sizeof(corners) / sizeof(corners[0]));
    float *x = floats(n);
    uint16_t *out[2];
    fill(x, n, 70000.0f, 0);
    for (int i = 0; i < n; i += 3) x[i] = corners[(i / 3) % n_corners];
    for (int p = 0; p < 2; p++) {
        use(p);
        out[p] = calloc((size_t)n + 1, sizeof(uint16_t));
        tensor_fp16_from_fp32(out[p], x, n);
    }
    SAME(out[0], out[1], sizeof(uint16_t) * (size_t)n, "fp16_from_fp32 n=%d", n);
    free(x), free(out[0]), free(out[1]);
}

/* The activation quantizer on rows of `blocks` blocks: random blocks, and
 * blocks of zeros, subnormals, huge values, an infinity and a NaN. */
static void check_quantize(int blocks) {
    int n = 32 * blocks;
    float *x = floats(n);
    fill(x, n, 4.0f, 1);
    for (int j = 0; j < blocks; j++) {
        float *block = x + 32 * j;
        switch (j % 8) {
        case 1:
            memset(block, 0, 32 * sizeof(float));
            break;
        case 2:
            for (int i = 0; i < 32; i++) block[i] *= 1e-39f; /* all subnormal */
            break;
        case 3:
            for (int i = 0; i < 32; i++) block[i] *= 3e38f;
            break;
        case 5:
            block[j % 32] = -__builtin_inff();
            break;
        case 6:
            block[(7 * j) % 32] = __builtin_nanf("");
            break;
        default:
            break;
        }
    }
    struct tensor_block_q8_0 *rows[2];
    int8_t *quants[2];
    float *scales[2];
    int32_t *bias[2];
    for (int p = 0; p < 2; p++) {
        use(p);
        rows[p] = calloc((size_t)blocks, sizeof(struct tensor_block_q8_0));
        quants[p] = calloc((size_t)n, 1);
        scales[p] = floats(blocks);
        bias[p] = calloc((size_t)blocks, sizeof(int32_t));
        tensor_quantize_row_q8_0(rows[p], x, n);
        struct tensor_q8_0_query query = {quants[p], scales[p], bias[p]};
        tensor_quantize_query(&query, x, n);
    }
    SAME(rows[0], rows[1], sizeof(struct tensor_block_q8_0) * (size_t)blocks,
         "quantize_row_q8_0 blocks=%d", blocks);
    SAME(quants[0], quants[1], (size_t)n, "quantize_query quants blocks=%d", blocks);
    SAME(scales[0], scales[1], sizeof(float) * (size_t)blocks, "quantize_query scales blocks=%d",
         blocks);
    SAME(bias[0], bias[1], sizeof(int32_t) * (size_t)blocks, "quantize_query bias blocks=%d",
         blocks);
    for (int p = 0; p < 2; p++) free(rows[p]), free(quants[p]), free(scales[p]), free(bias[p]);
    free(x);
}

/* ---- matmul ---- */

#define ROWS 37

/* w (rows or panels) times a batch of `batch` rows of x, scalar against
 * the other set, with pool (may be NULL). Returns 0 if tensor_matmul
 * refuses the matrix on the scalar set. */
static int check_product(struct tensor_pool *pool, const struct tensor_matrix *w, const float *x,
                         int batch, const char *layout) {
    size_t n = (size_t)batch * (size_t)w->rows;
    float *out[2];
    int status[2];
    for (int p = 0; p < 2; p++) {
        use(p);
        out[p] = calloc(n, sizeof(float));
        status[p] = tensor_matmul(pool, out[p], w, x, batch);
    }
    CHECK_MSG(status[0] == status[1], "%s: matmul accepted on one set only",
              tensor_type_name(w->type));
    if (status[0] == 0)
        SAME(out[0], out[1], sizeof(float) * n, "matmul %s %s cols %d batch %d threads %d",
             tensor_type_name(w->type), layout, w->cols, batch, pool ? tensor_pool_size(pool) : 1);
    free(out[0]), free(out[1]);
    return status[0] == 0;
}

/* Weights of type from floats of several magnitudes (rows of a wide
 * range, small rows, and a row of zeros), quantized by the type table. */
static int make_weights(struct tensor_matrix *w, enum tensor_type type, int cols) {
    size_t row_bytes = tensor_row_bytes(type, cols);
    char *data = aligned_alloc(64, (row_bytes * ROWS + 63) / 64 * 64);
    float *values = floats(cols);
    for (int r = 0; r < ROWS; r++) {
        float scale = r % 5 == 0 ? 40.0f : r % 5 == 1 ? 1e-3f : 1.0f;
        fill(values, cols, r == 7 ? 0.0f : scale, 1);
        for (int i = 0; i < cols; i += 9) values[i] *= values[i] * 10.0f; /* heavier tails */
        if (tensor_quantize_row(type, data + (size_t)r * row_bytes, values, cols) != 0) {
            free(values);
            free(data);
            return 0;
        }
    }
    free(values);
    *w = tensor_matrix_make(data, type, ROWS, cols);
    return 1;
}

static void check_matmul_type(struct tensor_pool *pool, enum tensor_type type, int *products) {
    static const int batches[] = {1, 3, 16, 17};
    static const int float_cols[] = {1, 7, 37, 100, 259};
    static const int block_counts[] = {1, 3, 9};
    int block = tensor_type_block_elements(type);
    int n_widths = block == 1 ? 5 : block == 32 ? 3 : 2;
    for (int c = 0; c < n_widths; c++) {
        int cols = block == 1 ? float_cols[c] : block * block_counts[c];
        struct tensor_matrix w;
        if (!make_weights(&w, type, cols)) return; /* no quantizer: an activation format */
        float *x = floats(17 * cols);
        fill(x, 17 * cols, 2.0f, 1);
        for (int i = 0; i < 17 * cols; i += 23) x[i] *= 30.0f;
        int accepted = 1;
        for (int b = 0; b < 4 && accepted; b++) {
            accepted = check_product(NULL, &w, x, batches[b], "rows");
            if (accepted) *products += 1;
        }
        if (accepted) check_product(pool, &w, x, 17, "rows");
        size_t bytes = accepted ? tensor_panels_bytes(&w) : 0;
        if (bytes > 0) {
            void *memory = aligned_alloc(64, (bytes + 63) / 64 * 64);
            struct tensor_matrix panels = tensor_pack_panels(memory, &w);
            for (int b = 0; b < 4; b++)
                *products += check_product(NULL, &panels, x, batches[b], "panels");
            check_product(pool, &panels, x, 16, "panels");
            free(memory);
        }
        free(x);
        free((void *)w.data);
        if (!accepted) return;
    }
}

static void check_matmul(void) {
    struct tensor_pool *pool = tensor_pool_create(2);
    CHECK(pool != NULL);
    int products = 0, types = 0;
    for (int type = 0; type < TENSOR_TYPE_COUNT; type++) {
        if (!tensor_type_name(type)) continue;
        int before = products;
        check_matmul_type(pool, (enum tensor_type)type, &products);
        if (products > before) types++;
    }
    printf("matmul: %d products of %d weight types compared\n", products, types);
    CHECK(types >= 15);
    tensor_pool_free(pool);
}

static void check_all(void) {
    for (int s = 0; s < SEEDS; s++)
        for (int i = 0; i < LENGTHS; i++) {
            int n = lengths[i];
            check_rows_ops(n);
            check_fp16(n);
            if (n <= 130) {
                check_dot_columns(n, 1 + (n * 7 + s) % 40);
                check_weighted_sum(n, 1 + (n * 5 + s) % 20);
                check_dot_columns_tile(n, 1 + (n * 3 + s) % 16, 1 + (n + s) % 13);
                check_weighted_sum_tile(n, 1 + (n * 5 + s) % 16, 1 + (n * 2 + s) % 13);
            }
            if (n % 32 == 0 && n <= 256) {
                check_q8_0_keys(n, 1 + (n + 11 * s) % 40);
                check_q8_0_keys_tile(n, 1 + (n + 5 * s) % 16, 1 + (n / 32 + 5 * s) % 13);
                check_weighted_sum_tile(n, 1 + (n + s) % 16, 1 + (n / 32 + 3 * s) % 13);
                check_weighted_sum(n, 3 + s);
            }
        }
    for (int blocks = 1; blocks <= 20; blocks++) check_quantize(blocks);
    for (int blocks = 1; blocks <= 17; blocks += 8) check_quantize_q8_k(blocks);
    static const int rope[][2] = {{2, 2},   {6, 6},     {16, 16},  {64, 64}, {64, 32},
                                  {80, 80}, {128, 128}, {128, 64}, {96, 24}};
    for (int i = 0; i < (int)(sizeof(rope) / sizeof(rope[0])); i++)
        check_rope(rope[i][0], rope[i][1]);
    check_matmul();
}

int main(void) {
    for (int isa = TENSOR_ISA_SCALAR + 1; isa < TENSOR_ISA_COUNT; isa++) {
        if (!tensor_isa_available((enum tensor_isa)isa)) continue;
        other = (enum tensor_isa)isa;
        check_all();
    }
    if (other == TENSOR_ISA_SCALAR)
        printf("only the scalar kernels run here: nothing to compare them with\n");
    CHECK(tensor_isa_select(tensor_isa_best()) == 0);
    return test_status("test_tensor_canonical");
}
