/* test_tensor_rows.c -- the many-row forms of dot and axpy that attention
 * uses, and the rounding to half precision of the key/value cache's
 * stores, on every instruction set this CPU has:
 *  - tensor_dot_columns, over F32 and F16 blocks stored dimension by
 *    dimension, gives bit for bit its documented order of sums (four
 *    running sums over i mod 4 of fused multiply-adds, on every
 *    instruction set) from column r alone, within 1e-5 of the sum of
 *    |terms| of a double-precision reference, for any column count up to
 *    the stride; it writes nothing past the columns asked for and reads
 *    nothing past the block (which ends where a page no access is allowed
 *    to begins, so such a read faults);
 *  - tensor_store_q8_0_key lays out tensor_quantize_q8_0's quants and
 *    scales where tensor.h says, tensor_quantize_query gives
 *    tensor_quantize_q8_0's quants and scales and -128 times their sums,
 *    and tensor_dot_q8_0_keys gives bit for bit the matmul's block sequence
 *    over them, within 1e-5 of the sum of |terms| of the quantized values
 *    in double precision, for 32 to 128 dimensions and any key count up to
 *    the stride, writing nothing past the keys asked for and reading
 *    nothing past the block;
 *  - tensor_weighted_sum adds to its output bit for bit what one tensor_axpy
 *    call per row in order adds (F32, F16; Q8_0: its documented order, a
 *    weight times scale per block, then fused multiply-adds),
 *    and is within 1e-5 of the sum of |terms| of a double-precision
 *    reference;
 *  - tensor_fp16_from_fp32 rounds as tensor_fp32_to_fp16 does, bit for bit,
 *    on ties, subnormals, overflow, infinities and NaN;
 *  - tensor_quantize_row_q8_0 gives tensor_quantize_q8_0's blocks, bit for
 *    bit, for rows of 32 to 544 elements (more than one chunk);
 * for row lengths that exercise every vector tail (1 .. 130), row counts
 * from 0 to 70, rows at unaligned addresses, and weights that include zeros
 * and negative values. */
#include "tensor/tensor.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t rng_state = 0x853c49e6748fea9bULL;

static const int lengths[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 80, 128, 130};
static const int row_counts[] = {0, 1, 2, 5, 16, 17, 70};
#define LENGTHS    (int)(sizeof(lengths) / sizeof(lengths[0]))
#define ROW_COUNTS (int)(sizeof(row_counts) / sizeof(row_counts[0]))
#define MAX_ROWS   70
#define MAX_N      130

/* Memory of `bytes` bytes that ends where a page no access is allowed to begins:
 * a kernel that reads past them faults, masked vector loads included
 * (which AddressSanitizer does not see). NULL if it cannot be had; free
 * with release_guarded. */
static void *guarded(size_t bytes, size_t *mapped) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    *mapped = (bytes + page - 1) / page * page + page;
    char *base = mmap(NULL, *mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    if (mprotect(base + *mapped - page, page, PROT_NONE) != 0) {
        munmap(base, *mapped);
        return NULL;
    }
    return base + *mapped - page - bytes;
}

static void release_guarded(void *p, size_t bytes, size_t mapped) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    munmap((char *)p + bytes + page - mapped, mapped);
}

/* The rows under test: n_rows rows of n elements of type, one element past
 * an aligned address (Q8_0: 2 bytes past, the alignment of its blocks), and
 * the same values as floats (exact for F16 and Q8_0). */
struct rows {
    enum tensor_type type;
    const void *data;
    float values[MAX_ROWS * MAX_N];
};

static void make_rows(struct rows *r, enum tensor_type type, void *pool, int n_rows, int n) {
    r->type = type;
    if (type == TENSOR_Q8_0) {
        float x[MAX_ROWS * MAX_N];
        struct tensor_block_q8_0 *blocks = (void *)((char *)pool + 2);
        for (int i = 0; i < n_rows * n; i++) x[i] = test_random_float(&rng_state);
        tensor_quantize_q8_0(blocks, x, (int64_t)n_rows * n);
        tensor_dequantize_row(r->values, blocks, TENSOR_Q8_0, n_rows * n);
        r->data = blocks;
    } else if (type == TENSOR_F16) {
        uint16_t *h = (uint16_t *)pool + 1;
        for (int i = 0; i < n_rows * n; i++) {
            h[i] = tensor_fp32_to_fp16(test_random_float(&rng_state));
            r->values[i] = tensor_fp16_to_fp32(h[i]);
        }
        r->data = h;
    } else {
        float *f = (float *)pool + 1;
        for (int i = 0; i < n_rows * n; i++) f[i] = r->values[i] = test_random_float(&rng_state);
        r->data = f;
    }
}

/* The quantized query of q (n elements): its quants, scales and bias
 * against tensor_quantize_q8_0's blocks. */
static void check_query(struct tensor_q8_0_query *query, const struct tensor_block_q8_0 *blocks,
                        const float *q, int n, const char *isa) {
    tensor_quantize_query(query, q, n);
    int bad = 0;
    for (int j = 0; j < n / 32; j++) {
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) {
            sum += blocks[j].qs[i];
            bad += query->quants[j * 32 + i] != blocks[j].qs[i];
        }
        bad += query->scales[j] != tensor_fp16_to_fp32(blocks[j].d) || query->bias[j] != -128 * sum;
    }
    CHECK_MSG(bad == 0, "%s: quantize_query n=%d: %d values differ", isa, n, bad);
}

/* The layout of key r's blocks (of n dimensions) in a block of stride keys. */
static int key_misplaced(const void *keys, const struct tensor_block_q8_0 *blocks, int r, int n,
                         int stride) {
    const int8_t *quants = keys;
    const uint16_t *scales = (const void *)(quants + (size_t)n * stride);
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += quants[((i / 4) * stride + r) * 4 + i % 4] != blocks[i / 32].qs[i % 32];
    for (int j = 0; j < n / 32; j++) bad += scales[j * stride + r] != blocks[j].d;
    return bad;
}

#define MAX_KEYS 33

static void check_q8_0_keys(int n, int stride, const char *isa) {
    float x[MAX_KEYS * MAX_N], q[MAX_N], scales[MAX_N / 32], got[MAX_KEYS + 1];
    struct tensor_block_q8_0 key_blocks[MAX_KEYS * MAX_N / 32] = {{0}}, query_blocks[MAX_N / 32];
    int8_t quants[MAX_N];
    int32_t bias[MAX_N / 32];
    struct tensor_q8_0_query query = {quants, scales, bias};
    size_t bytes = (size_t)stride * tensor_row_bytes(TENSOR_Q8_0, n), mapped;
    void *keys = guarded(bytes, &mapped);
    CHECK(keys != NULL);
    if (!keys) return;
    int misplaced = 0, blocks = n / 32;
    for (int i = 0; i < stride * n; i++) x[i] = test_random_float(&rng_state) * (1 + i % 5);
    for (int r = 0; r < stride; r++) {
        tensor_store_q8_0_key(keys, r, x + r * n, n, stride);
        tensor_quantize_q8_0(key_blocks + r * blocks, x + r * n, n);
    }
    for (int r = 0; r < stride; r++)
        misplaced += key_misplaced(keys, key_blocks + r * blocks, r, n, stride);
    CHECK_MSG(misplaced == 0, "%s: store_q8_0_key n=%d stride=%d: %d values misplaced", isa, n,
              stride, misplaced);
    for (int i = 0; i < n; i++) q[i] = test_random_float(&rng_state);
    tensor_quantize_q8_0(query_blocks, q, n);
    check_query(&query, query_blocks, q, n, isa);
    int counts[] = {stride, stride - 1, stride < 5 ? stride : 5};
    for (int c = 0; c < 3; c++) {
        int n_keys = counts[c], bad_order = 0, bad_value = 0;
        got[n_keys] = 12345.0f; /* past the end: must stay */
        tensor_dot_q8_0_keys(got, &query, keys, n_keys, n, stride);
        for (int r = 0; r < n_keys; r++) {
            const struct tensor_block_q8_0 *key = key_blocks + r * blocks;
            float want = 0.0f;
            double value = 0.0, magnitude = 0.0;
            for (int j = 0; j < blocks; j++) {
                int32_t dot = 0;
                for (int i = 0; i < 32; i++) dot += key[j].qs[i] * query_blocks[j].qs[i];
                float d_key = tensor_fp16_to_fp32(key[j].d),
                      d_query = tensor_fp16_to_fp32(query_blocks[j].d);
                float scale = d_key * d_query;
                float term = (float)dot * scale;
                want = want + term;
                value += (double)dot * d_key * d_query;
                for (int i = 0; i < 32; i++)
                    magnitude +=
                        fabs((double)key[j].qs[i] * query_blocks[j].qs[i] * d_key * d_query);
            }
            bad_order += !test_same_bits(&got[r], &want, 1);
            bad_value += fabs(got[r] - value) > 1e-5 * magnitude + 1e-30;
        }
        CHECK_MSG(bad_order == 0, "%s: dot_q8_0_keys n=%d keys=%d stride=%d: %d off the order", isa,
                  n, n_keys, stride, bad_order);
        CHECK_MSG(bad_value == 0, "%s: dot_q8_0_keys n=%d keys=%d stride=%d: %d off the reference",
                  isa, n, n_keys, stride, bad_value);
        CHECK_MSG(got[n_keys] == 12345.0f, "%s: dot_q8_0_keys wrote past %d keys", isa, n_keys);
    }
    release_guarded(keys, bytes, mapped);
}

/* r holds n dimensions of stride columns (row i: dimension i); block is
 * a copy of r's data in guarded memory (guarded), so that a read past
 * the block faults. */
static void check_dot_columns(const float *q, const struct rows *r, const void *block,
                              int n_columns, int n, int stride, const char *isa) {
    float got[MAX_N + 1];
    const char *type = tensor_type_name(r->type);
    got[n_columns] = 12345.0f; /* past the end: must stay */
    tensor_dot_columns(got, q, block, r->type, n_columns, n, stride);
    CHECK_MSG(got[n_columns] == 12345.0f, "%s: dot_columns %s wrote past %d columns", isa, type,
              n_columns);
    int bad_order = 0, bad_value = 0;
    for (int c = 0; c < n_columns; c++) {
        float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        double value = 0.0, magnitude = 0.0;
        for (int i = 0; i < n; i++) {
            float x = r->values[(size_t)i * stride + c];
            sums[i % 4] = fmaf(q[i], x, sums[i % 4]);
            value += (double)q[i] * x;
            magnitude += fabs((double)q[i] * x);
        }
        float want = (sums[0] + sums[1]) + (sums[2] + sums[3]);
        bad_order += !test_same_bits(&got[c], &want, 1);
        bad_value += fabs(got[c] - value) > 1e-5 * magnitude + 1e-30;
    }
    CHECK_MSG(bad_order == 0, "%s: dot_columns %s n=%d columns=%d stride=%d: %d off the order", isa,
              type, n, n_columns, stride, bad_order);
    CHECK_MSG(bad_value == 0, "%s: dot_columns %s n=%d columns=%d stride=%d: %d off the reference",
              isa, type, n, n_columns, stride, bad_value);
}

/* Dimension-major blocks: n dimensions (at most MAX_ROWS) of stride
 * columns (at most MAX_N), all of them or fewer. */
static void check_dot_columns_shapes(const float *q, struct rows *rows, void *pool,
                                     const char *isa) {
    static const int dims[] = {1, 3, 4, 5, 7, 24, 64, 70};
    static const int strides[] = {1, 8, 15, 16, 17, 33, 130};
    static const enum tensor_type types[] = {TENSOR_F32, TENSOR_F16};
    for (int t = 0; t < 2; t++)
        for (int d = 0; d < (int)(sizeof(dims) / sizeof(dims[0])); d++)
            for (int s = 0; s < (int)(sizeof(strides) / sizeof(strides[0])); s++) {
                make_rows(rows, types[t], pool, dims[d], strides[s]);
                size_t bytes = tensor_row_bytes(types[t], dims[d] * strides[s]);
                size_t mapped;
                void *block = guarded(bytes, &mapped);
                CHECK(block != NULL);
                if (!block) return;
                memcpy(block, rows->data, bytes);
                int columns[] = {strides[s], strides[s] - 1, strides[s] < 5 ? strides[s] : 5};
                for (int c = 0; c < 3; c++)
                    check_dot_columns(q, rows, block, columns[c], dims[d], strides[s], isa);
                release_guarded(block, bytes, mapped);
            }
}

/* What tensor_weighted_sum adds over Q8_0 rows, in its documented order. */
static void weighted_sum_q8_0(float *out, const float *weights, const struct rows *r, int n_rows,
                              int n) {
    const struct tensor_block_q8_0 *blocks = r->data;
    for (int p = 0; p < n_rows; p++)
        for (int i = 0; i < n; i++) {
            const struct tensor_block_q8_0 *block = blocks + (p * n + i) / 32;
            float scaled = weights[p] * tensor_fp16_to_fp32(block->d), quant = block->qs[i % 32];
            out[i] = fmaf(scaled, quant, out[i]);
        }
}

static void check_weighted_sum(const float *weights, const struct rows *r, int n_rows, int n,
                               const char *isa) {
    float start[MAX_N], got[MAX_N + 1], want[MAX_N];
    for (int i = 0; i < n; i++) start[i] = i % 3 == 0 ? 0.0f : test_random_float(&rng_state);
    memcpy(got, start, sizeof(float) * (size_t)n);
    memcpy(want, start, sizeof(float) * (size_t)n);
    got[n] = 12345.0f; /* past the end: must stay */
    tensor_weighted_sum(got, weights, r->data, r->type, n_rows, n);
    if (r->type == TENSOR_Q8_0)
        weighted_sum_q8_0(want, weights, r, n_rows, n);
    else
        for (int p = 0; p < n_rows; p++)
            tensor_axpy(want, weights[p], r->values + (size_t)p * n, n);
    const char *type = tensor_type_name(r->type);
    CHECK_MSG(test_same_bits(got, want, (size_t)n),
              "%s: weighted_sum %s n=%d rows=%d differs from its order", isa, type, n, n_rows);
    CHECK_MSG(got[n] == 12345.0f, "%s: weighted_sum n=%d wrote past the end", isa, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double value = start[i], magnitude = fabs((double)start[i]);
        for (int p = 0; p < n_rows; p++) {
            double term = (double)weights[p] * r->values[(size_t)p * n + i];
            value += term;
            magnitude += fabs(term);
        }
        if (fabs(got[i] - value) > 1e-5 * magnitude + 1e-30) bad++;
    }
    CHECK_MSG(bad == 0, "%s: weighted_sum %s n=%d rows=%d: %d elements off the reference", isa,
              type, n, n_rows, bad);
}

/* Values whose rounding to half is a corner: ties to even, the subnormal
 * range and its underflow, the overflow threshold, infinities and NaN. */
static void check_fp16_rounding(const char *isa) {
    float x[MAX_N];
    uint16_t got[MAX_N + 1], want[MAX_N];
    static const float corners[] = {
        0.0f,       -0.0f,    1.0f,        1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 65504.0f,
        65519.0f,   65520.0f, -70000.0f,   0x1p-14f,        0x1p-24f,        0x1p-25f,
        0x1.8p-25f, 0x1p-26f, -0x1.4p-20f, 1e-30f,          3.14159265f,     -2.71828f};
    int n_corners = (int)(sizeof(corners) / sizeof(corners[0]));
    for (int n = 1; n <= MAX_N; n += n < 20 ? 1 : 37) {
        for (int i = 0; i < n; i++) {
            int k = i % (n_corners + 3);
            x[i] = k < n_corners ? corners[k] : test_random_float(&rng_state) * 1000.0f;
        }
        x[0] = n % 2 ? __builtin_inff() : -__builtin_inff();
        if (n > 2) x[2] = __builtin_nanf("");
        got[n] = 0x1234; /* past the end: must stay */
        tensor_fp16_from_fp32(got, x, n);
        for (int i = 0; i < n; i++) want[i] = tensor_fp32_to_fp16(x[i]);
        CHECK_MSG(memcmp(got, want, sizeof(uint16_t) * (size_t)n) == 0,
                  "%s: fp16_from_fp32 n=%d differs from tensor_fp32_to_fp16", isa, n);
        CHECK_MSG(got[n] == 0x1234, "%s: fp16_from_fp32 n=%d wrote past the end", isa, n);
    }
}

static void check_quantize_row(const char *isa) {
    float x[544];
    struct tensor_block_q8_0 got[544 / 32 + 1], want[544 / 32];
    for (int i = 0; i < 544; i++) x[i] = i % 41 == 0 ? 0.0f : test_random_float(&rng_state) * 3.0f;
    for (int i = 64; i < 96; i++) x[i] = 0.0f; /* an all-zero block: scale 0 */
    for (int n = 32; n <= 544; n += 32) {
        memset(got, 0x5a, sizeof(got));
        tensor_quantize_row_q8_0(got, x, n);
        tensor_quantize_q8_0(want, x, n);
        CHECK_MSG(memcmp(got, want, sizeof(want[0]) * (size_t)(n / 32)) == 0,
                  "%s: quantize_row_q8_0 n=%d differs from tensor_quantize_q8_0", isa, n);
        CHECK_MSG(got[n / 32].d == 0x5a5a, "%s: quantize_row_q8_0 n=%d wrote past the end", isa, n);
    }
}

int main(void) {
    float *pool = malloc(sizeof(float) * ((size_t)MAX_ROWS * MAX_N + 16));
    static struct rows rows;
    float q[MAX_N], weights[MAX_ROWS];
    CHECK(pool != NULL);
    if (!pool) return test_status("test_tensor_rows");
    for (int i = 0; i < MAX_N; i++) q[i] = test_random_float(&rng_state);
    for (int p = 0; p < MAX_ROWS; p++)
        weights[p] = p % 7 == 3 ? 0.0f : test_random_float(&rng_state);

    static const enum tensor_type types[] = {TENSOR_F32, TENSOR_F16, TENSOR_Q8_0};
    enum tensor_isa best = tensor_isa_best();
    for (int isa = TENSOR_ISA_SCALAR; isa < TENSOR_ISA_COUNT; isa++) {
        if (tensor_isa_select((enum tensor_isa)isa) != 0) continue;
        const char *name = tensor_isa_name((enum tensor_isa)isa);
        check_fp16_rounding(name);
        check_quantize_row(name);
        check_dot_columns_shapes(q, &rows, pool, name);
        static const int key_strides[] = {1, 8, 15, 16, 17, 33};
        for (int n = 32; n <= 128; n += 32)
            for (int s = 0; s < (int)(sizeof(key_strides) / sizeof(key_strides[0])); s++)
                check_q8_0_keys(n, key_strides[s], name);
        for (int t = 0; t < 3; t++)
            for (int l = 0; l < LENGTHS; l++)
                for (int r = 0; r < ROW_COUNTS; r++) {
                    if (types[t] == TENSOR_Q8_0 && lengths[l] % 32 != 0) continue;
                    make_rows(&rows, types[t], pool, row_counts[r], lengths[l]);
                    check_weighted_sum(weights, &rows, row_counts[r], lengths[l], name);
                }
    }
    CHECK(tensor_isa_select(best) == 0);
    free(pool);
    return test_status("test_tensor_rows");
}
