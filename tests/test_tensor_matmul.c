/* test_tensor_matmul.c -- tensor_matmul for every weight type and every
 * instruction set this CPU has:
 *  - the scalar kernel against a double-precision reference computed here
 *    (float types: within 1e-5 of the sum of |w*x|; quantized: the same
 *    block formula, within 1e-5 relative);
 *  - each SIMD path against the scalar one (quantized: bit for bit, the
 *    integer block sums are exact and the float steps are the same; float
 *    types: within 1e-5 of the sum of |w*x|);
 *  - batch invariance: a batch of B rows equals B single-row calls bit for
 *    bit, with 1, 2 and 3 threads, for batch sizes 1..17 and larger;
 *  - column slices (row_stride larger than the row) equal a contiguous copy. */
#include "tensor/tensor.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static int is_quantized(enum tensor_type type) {
    return type == TENSOR_Q8_0 || type == TENSOR_Q4_0;
}

/* Double-precision reference for out[b][r] and the sum of |terms| (the
 * scale of its rounding error). Quantized: x quantized as ggml does. */
static void reference(const struct tensor_matrix *w, const float *x, int b, int r, double *value,
                      double *magnitude) {
    float *wrow = malloc(sizeof(float) * (size_t)w->cols);
    float *xrow = malloc(sizeof(float) * (size_t)w->cols);
    tensor_dequantize_row(wrow, (const char *)w->data + (size_t)r * w->row_stride, w->type,
                          w->cols);
    memcpy(xrow, x + (size_t)b * w->cols, sizeof(float) * (size_t)w->cols);
    if (is_quantized(w->type)) {
        struct tensor_block_q8_0 *blocks = malloc(sizeof(*blocks) * (size_t)(w->cols / 32));
        tensor_quantize_q8_0(blocks, xrow, w->cols);
        tensor_dequantize_row(xrow, blocks, TENSOR_Q8_0, w->cols);
        free(blocks);
    }
    *value = 0.0;
    *magnitude = 0.0;
    for (int i = 0; i < w->cols; i++) {
        *value += (double)wrow[i] * xrow[i];
        *magnitude += fabs((double)wrow[i] * xrow[i]);
    }
    free(wrow);
    free(xrow);
}

static const char *case_name(const struct tensor_matrix *w, int batch) {
    static char name[128];
    snprintf(name, sizeof(name), "%s %s rows %d cols %d batch %d",
             tensor_isa_name(tensor_isa_current()), tensor_type_name(w->type), w->rows, w->cols,
             batch);
    return name;
}

static void check_against_reference(struct tensor_pool *pool, const struct tensor_matrix *w,
                                    int batch) {
    float *x = test_random_floats((batch) * (w->cols), &rng_state);
    float *out = malloc(sizeof(float) * (size_t)batch * w->rows);
    CHECK(tensor_matmul(pool, out, w, x, batch) == 0);
    int bad = 0;
    for (int b = 0; b < batch; b++) {
        for (int r = 0; r < w->rows; r++) {
            double value, magnitude;
            reference(w, x, b, r, &value, &magnitude);
            double error = fabs(out[(size_t)b * w->rows + r] - value);
            if (!(error <= 1e-5 * magnitude + 1e-30) && bad++ < 3)
                CHECK_MSG(0, "%s: out[%d][%d] = %.9g, reference %.9g", case_name(w, batch), b, r,
                          out[(size_t)b * w->rows + r], value);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d elements off the reference", case_name(w, batch), bad);
    free(x);
    free(out);
}

/* The selected SIMD path against the scalar path on the same inputs. */
static void check_against_scalar(struct tensor_pool *pool, const struct tensor_matrix *w, int batch,
                                 enum tensor_isa isa) {
    float *x = test_random_floats((batch) * (w->cols), &rng_state);
    float *simd = malloc(sizeof(float) * (size_t)batch * w->rows);
    float *scalar = malloc(sizeof(float) * (size_t)batch * w->rows);
    CHECK(tensor_isa_select(TENSOR_ISA_SCALAR) == 0);
    CHECK(tensor_matmul(pool, scalar, w, x, batch) == 0);
    CHECK(tensor_isa_select(isa) == 0);
    CHECK(tensor_matmul(pool, simd, w, x, batch) == 0);
    int bad = 0;
    for (int b = 0; b < batch; b++) {
        for (int r = 0; r < w->rows; r++) {
            float got = simd[(size_t)b * w->rows + r], want = scalar[(size_t)b * w->rows + r];
            int ok;
            if (is_quantized(w->type)) {
                ok = test_same_bits(&got, &want, 1);
            } else {
                double value, magnitude;
                reference(w, x, b, r, &value, &magnitude);
                ok = fabs((double)got - want) <= 1e-5 * magnitude + 1e-30;
            }
            if (!ok && bad++ < 3)
                CHECK_MSG(0, "%s: out[%d][%d] simd %.9g scalar %.9g", case_name(w, batch), b, r,
                          got, want);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d elements differ from scalar", case_name(w, batch), bad);
    free(x);
    free(simd);
    free(scalar);
}

/* A batch computed at once equals the rows computed one by one, bit for bit,
 * whatever the pool size. */
static void check_batch_invariance(struct tensor_pool **pools, int n_pools,
                                   const struct tensor_matrix *w, int batch) {
    float *x = test_random_floats((batch) * (w->cols), &rng_state);
    size_t n = (size_t)batch * w->rows;
    float *single = malloc(sizeof(float) * n);
    float *together = malloc(sizeof(float) * n);
    for (int b = 0; b < batch; b++)
        CHECK(tensor_matmul(pools[0], single + (size_t)b * w->rows, w, x + (size_t)b * w->cols,
                            1) == 0);
    for (int p = 0; p < n_pools; p++) {
        memset(together, 0xff, sizeof(float) * n);
        CHECK(tensor_matmul(pools[p], together, w, x, batch) == 0);
        CHECK_MSG(test_same_bits(single, together, n),
                  "%s: batch differs from single rows with %d threads", case_name(w, batch),
                  tensor_pool_size(pools[p]));
    }
    free(x);
    free(single);
    free(together);
}

/* A column slice viewed through row_stride equals the same columns copied out. */
static void check_column_slice(struct tensor_pool *pool, enum tensor_type type) {
    int rows = 37, cols = 256, first = 64, width = 128;
    struct tensor_matrix full = test_random_weights(type, rows, cols, &rng_state);
    size_t offset = tensor_row_bytes(type, first), width_bytes = tensor_row_bytes(type, width);
    struct tensor_matrix slice = full;
    slice.data = (const char *)full.data + offset;
    slice.cols = width;
    char *copy = malloc(width_bytes * rows);
    for (int r = 0; r < rows; r++)
        memcpy(copy + r * width_bytes, (const char *)slice.data + r * full.row_stride, width_bytes);
    struct tensor_matrix contiguous = tensor_matrix_make(copy, type, rows, width);
    int batch = 9;
    float *x = test_random_floats((batch) * (width), &rng_state);
    float *a = malloc(sizeof(float) * (size_t)batch * rows);
    float *b = malloc(sizeof(float) * (size_t)batch * rows);
    CHECK(tensor_matmul(pool, a, &slice, x, batch) == 0);
    CHECK(tensor_matmul(pool, b, &contiguous, x, batch) == 0);
    CHECK_MSG(test_same_bits(a, b, (size_t)batch * rows),
              "%s %s: column slice differs from its copy", tensor_isa_name(tensor_isa_current()),
              tensor_type_name(type));
    free((void *)full.data);
    free(copy);
    free(x);
    free(a);
    free(b);
}

static const enum tensor_type types[] = {TENSOR_F32, TENSOR_F16, TENSOR_Q8_0, TENSOR_Q4_0};
static const int shapes[][2] = {{16, 32}, {33, 64},  {50, 768}, {19, 2048},
                                {1, 32},  {128, 96}, {7, 41}};

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

int main(void) {
    struct tensor_pool *pools[3] = {tensor_pool_create(1), tensor_pool_create(2),
                                    tensor_pool_create(3)};
    CHECK(pools[0] && pools[1] && pools[2]);
    enum tensor_isa best = tensor_isa_best();
    printf("best instruction set: %s\n", tensor_isa_name(best));

    /* the scalar path against double precision */
    CHECK(tensor_isa_select(TENSOR_ISA_SCALAR) == 0);
    for (int t = 0; t < COUNT(types); t++) {
        for (int s = 0; s < COUNT(shapes); s++) {
            if (is_quantized(types[t]) && shapes[s][1] % 32 != 0) continue;
            struct tensor_matrix w =
                test_random_weights(types[t], shapes[s][0], shapes[s][1], &rng_state);
            check_against_reference(pools[1], &w, 3);
            free((void *)w.data);
        }
    }

    for (int isa = TENSOR_ISA_SCALAR; isa < TENSOR_ISA_COUNT; isa++) {
        if (!tensor_isa_available((enum tensor_isa)isa)) continue;
        for (int t = 0; t < COUNT(types); t++) {
            for (int s = 0; s < COUNT(shapes); s++) {
                if (is_quantized(types[t]) && shapes[s][1] % 32 != 0) continue;
                struct tensor_matrix w =
                    test_random_weights(types[t], shapes[s][0], shapes[s][1], &rng_state);
                if (isa != TENSOR_ISA_SCALAR) {
                    check_against_scalar(pools[1], &w, 1, (enum tensor_isa)isa);
                    check_against_scalar(pools[1], &w, 13, (enum tensor_isa)isa);
                    check_against_scalar(pools[2], &w, 70, (enum tensor_isa)isa);
                }
                CHECK(tensor_isa_select((enum tensor_isa)isa) == 0);
                for (int batch = 1; batch <= 17; batch += (shapes[s][1] > 512 ? 4 : 1))
                    check_batch_invariance(pools, 3, &w, batch);
                check_batch_invariance(pools, 3, &w, 100);
                free((void *)w.data);
            }
            CHECK(tensor_isa_select((enum tensor_isa)isa) == 0);
            check_column_slice(pools[1], types[t]);
        }
    }

    /* tensor_isa_select refuses what the CPU lacks; a NULL pool works */
    for (int isa = TENSOR_ISA_SCALAR; isa < TENSOR_ISA_COUNT; isa++)
        if (!tensor_isa_available((enum tensor_isa)isa))
            CHECK(tensor_isa_select((enum tensor_isa)isa) == -1);
    CHECK(tensor_isa_select(TENSOR_ISA_COUNT) == -1);
    CHECK(tensor_isa_select(best) == 0);
    CHECK(tensor_isa_current() == best);
    struct tensor_matrix w = test_random_weights(TENSOR_Q8_0, 5, 64, &rng_state);
    float x[64], out_pool[5], out_none[5];
    for (int i = 0; i < 64; i++) x[i] = test_random_float(&rng_state);
    CHECK(tensor_matmul(pools[0], out_pool, &w, x, 1) == 0);
    CHECK(tensor_matmul(NULL, out_none, &w, x, 1) == 0);
    CHECK(test_same_bits(out_pool, out_none, 5));
    /* quantized weights need whole blocks */
    struct tensor_matrix odd = w;
    odd.cols = 48;
    CHECK(tensor_matmul(pools[0], out_pool, &odd, x, 1) == -1);
    free((void *)w.data);

    for (int p = 0; p < 3; p++) tensor_pool_free(pools[p]);
    return test_status("test_tensor_matmul");
}
