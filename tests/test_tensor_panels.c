/* test_tensor_panels.c -- Q8_0 and Q4_0 weights packed into panels
 * (tensor_pack_panels) give the same products as the rows they came from,
 * bit for bit:
 *  - for every instruction set this CPU has (AVX2 has kernels of its own
 *    for both types, AVX-512 for Q8_0; the others read panels with the
 *    scalar reference kernels);
 *  - for batch sizes 1..17 and larger, with 1, 2 and 3 threads;
 *  - for row counts that are not a multiple of 16 (padded panels) and odd
 *    block counts (panels padded to 64 bytes);
 *  - for column parts (tensor_matmul_parts views of panels, which the
 *    AVX-512 kernel computes all in one walk over the panels), and for a
 *    packed column slice, which is how a tensor-parallel rank packs its
 *    share of ffn_down;
 *  - with the original rows overwritten after packing, so the products can
 *    only have come from the panels;
 *  - for the largest products of 8-bit pairs (quants -128 and 127 against
 *    activations of 127 and -127), which AVX2's 16-bit pair sums must
 *    hold without saturating.
 * Also what may be packed, and that packing Q8_0 is preferred on AVX2 and
 * AVX-512, Q4_0 on AVX2. */
#include "tensor/tensor.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x243f6a8885a308d3ULL;

/* w packed into fresh aligned memory (the caller frees .data). */
static struct tensor_matrix pack(const struct tensor_matrix *w) {
    size_t bytes = tensor_panels_bytes(w);
    CHECK(bytes > 0);
    void *memory = aligned_alloc(64, (bytes + 63) / 64 * 64);
    return tensor_pack_panels(memory, w);
}

/* tensor_matmul_parts of both matrices, for batch and n_parts, on pool,
 * bit for bit. */
static void check_same(struct tensor_pool *pool, const struct tensor_matrix *rows_w,
                       const float *expected, const struct tensor_matrix *panels, const float *x,
                       int batch, int n_parts, const char *what) {
    size_t n = (size_t)n_parts * batch * rows_w->rows;
    float *got = malloc(sizeof(float) * n);
    CHECK(tensor_matmul_parts(pool, got, panels, x, batch, n_parts) == 0);
    CHECK_MSG(memcmp(got, expected, sizeof(float) * n) == 0,
              "%s: %s %s, rows %d cols %d batch %d parts %d threads %d differ from rows", what,
              tensor_type_name(rows_w->type), tensor_isa_name(tensor_isa_current()), rows_w->rows,
              rows_w->cols, batch, n_parts, tensor_pool_size(pool));
    free(got);
}

/* The product of the rows under the scalar reference, for each part count. */
static float *reference(const struct tensor_matrix *w, const float *x, int batch, int n_parts) {
    enum tensor_isa isa = tensor_isa_current();
    CHECK(tensor_isa_select(TENSOR_ISA_SCALAR) == 0);
    float *out = malloc(sizeof(float) * (size_t)n_parts * batch * w->rows);
    CHECK(tensor_matmul_parts(NULL, out, w, x, batch, n_parts) == 0);
    CHECK(tensor_isa_select(isa) == 0);
    return out;
}

static void check_shape(struct tensor_pool **pools, enum tensor_type type, int rows, int cols) {
    static const int batches[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33};
    struct tensor_matrix w = test_random_weights(type, rows, cols, &rng_state);
    struct tensor_matrix panels = pack(&w);
    int max_batch = 33, blocks = cols / 32;
    float *x = test_random_floats((max_batch) * (cols), &rng_state);
    /* references first, then the rows are destroyed */
    float *expected[12][3];
    for (int b = 0; b < 12; b++)
        for (int k = 0; k < 3; k++) {
            int parts = 1 << k;
            expected[b][k] = blocks % parts == 0 ? reference(&w, x, batches[b], parts) : NULL;
        }
    memset((void *)w.data, 0x55, tensor_row_bytes(type, cols) * (size_t)rows);
    for (int isa = TENSOR_ISA_SCALAR; isa < TENSOR_ISA_COUNT; isa++) {
        if (tensor_isa_select((enum tensor_isa)isa) != 0) continue;
        for (int t = 0; t < 3; t++)
            for (int b = 0; b < 12; b++)
                for (int k = 0; k < 3; k++)
                    if (expected[b][k])
                        check_same(pools[t], &w, expected[b][k], &panels, x, batches[b], 1 << k,
                                   "panels");
    }
    CHECK(tensor_isa_select(tensor_isa_best()) == 0);
    for (int b = 0; b < 12; b++)
        for (int k = 0; k < 3; k++) free(expected[b][k]);
    free((void *)w.data);
    free((void *)panels.data);
    free(x);
}

/* Columns [64, 64 + 96) of a (37, 256) matrix, packed as a view, against
 * the same columns under the row kernels. */
static void check_column_slice(struct tensor_pool *pool, enum tensor_type type) {
    struct tensor_matrix whole = test_random_weights(type, 37, 256, &rng_state);
    struct tensor_matrix slice = whole;
    slice.data = (const char *)whole.data + tensor_row_bytes(type, 64);
    slice.cols = 96;
    struct tensor_matrix panels = pack(&slice);
    float *x = test_random_floats((9) * (96), &rng_state);
    for (int batch = 1; batch <= 9; batch += 4) {
        float *expected = reference(&slice, x, batch, 1);
        check_same(pool, &slice, expected, &panels, x, batch, 1, "packed column slice");
        free(expected);
    }
    free((void *)whole.data);
    free((void *)panels.data);
    free(x);
}

/* Every pair of quants -128, 127 against activations quantized to 127 of
 * the same signs: the largest pair sums there are. */
static void check_extremes(struct tensor_pool *pool) {
    const int rows = 24, cols = 128, batch = 9;
    struct tensor_matrix w = test_random_weights(TENSOR_Q8_0, rows, cols, &rng_state);
    float *x = malloc(sizeof(float) * (size_t)batch * cols);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols / 32; j++) {
            struct tensor_block_q8_0 *block =
                (struct tensor_block_q8_0 *)((char *)w.data + (size_t)r * w.row_stride) + j;
            for (int i = 0; i < 32; i++) block->qs[i] = (int8_t)(i % 2 ? 127 : -128);
        }
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < cols; i++) x[(size_t)b * cols + i] = (i % 2 ? 1.0f : -1.0f) * (b + 1);
    struct tensor_matrix panels = pack(&w);
    float *expected = reference(&w, x, batch, 1);
    for (int isa = TENSOR_ISA_SCALAR; isa < TENSOR_ISA_COUNT; isa++) {
        if (tensor_isa_select((enum tensor_isa)isa) != 0) continue;
        for (int n = 1; n <= batch; n += 3)
            check_same(pool, &w, expected, &panels, x, n, 1, "extreme quants");
    }
    CHECK(tensor_isa_select(tensor_isa_best()) == 0);
    free(expected);
    free((void *)w.data);
    free((void *)panels.data);
    free(x);
}

static void check_what_packs(void) {
    struct tensor_matrix q8 = test_random_weights(TENSOR_Q8_0, 16, 64, &rng_state);
    CHECK(tensor_panels_bytes(&q8) == 16 * tensor_row_bytes(TENSOR_Q8_0, 64));
    struct tensor_matrix panels = pack(&q8);
    CHECK_MSG(tensor_panels_bytes(&panels) == 0, "a packed matrix packed again");
    struct tensor_matrix q4 = tensor_matrix_make(q8.data, TENSOR_Q4_0, 16, 64);
    struct tensor_matrix f32 = tensor_matrix_make(q8.data, TENSOR_F32, 16, 64);
    CHECK(tensor_panels_bytes(&q4) == 16 * tensor_row_bytes(TENSOR_Q4_0, 64));
    CHECK(tensor_panels_bytes(&f32) == 0);
    for (int isa = TENSOR_ISA_SCALAR; isa < TENSOR_ISA_COUNT; isa++) {
        if (tensor_isa_select((enum tensor_isa)isa) != 0) continue;
        /* the x86 panel kernels beat row layout; AVX-512's Q4_0 row kernel beats panels */
        int x86 = isa == TENSOR_ISA_AVX2 || isa == TENSOR_ISA_AVX512;
        CHECK(tensor_panels_preferred(TENSOR_Q8_0) == x86);
        CHECK(tensor_panels_preferred(TENSOR_Q4_0) == (isa == TENSOR_ISA_AVX2));
        CHECK(!tensor_panels_preferred(TENSOR_F32));
    }
    CHECK(tensor_isa_select(tensor_isa_best()) == 0);
    free((void *)q8.data);
    free((void *)panels.data);
}

int main(void) {
    static const int shapes[][2] = {{16, 32}, {33, 64}, {50, 768}, {19, 2048}, {1, 96}, {48, 160}};
    struct tensor_pool *pools[3];
    for (int t = 0; t < 3; t++) {
        pools[t] = tensor_pool_create(t + 1);
        CHECK(pools[t] != NULL);
    }
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        check_shape(pools, TENSOR_Q8_0, shapes[s][0], shapes[s][1]);
        check_shape(pools, TENSOR_Q4_0, shapes[s][0], shapes[s][1]);
    }
    check_column_slice(pools[1], TENSOR_Q8_0);
    check_column_slice(pools[1], TENSOR_Q4_0);
    check_extremes(pools[1]);
    check_what_packs();
    for (int t = 0; t < 3; t++) tensor_pool_free(pools[t]);
    return test_status("test_tensor_panels");
}
