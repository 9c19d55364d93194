/* test_tensor_ahead.c -- products on activations quantized ahead
 * (tensor_ahead_*) give the bits of the scalar reference on the rows, which
 * quantizes its own input by rows:
 *  - for every instruction set this CPU has, Q8_0 rows, Q8_0 panels and
 *    Q4_0 rows, batch sizes 1..33 (whole and partial row groups), column
 *    parts 1, 2 and 4, and several matrices sharing the input;
 *  - whatever threads quantize the rows, in whatever order (rows given
 *    from a pool job on 3 threads, and one by one in reverse);
 * and that tensor_ahead_begin declines what it cannot lay out, and the
 * products refuse an ahead set laid out for something else.
 * ctest-labels: concurrency */
#include "tensor/tensor.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

/* w packed into panels in fresh memory; the caller frees .data. */
static struct tensor_matrix pack(const struct tensor_matrix *w) {
    size_t bytes = (tensor_panels_bytes(w) + 63) / 64 * 64;
    return tensor_pack_panels(aligned_alloc(64, bytes), w);
}

/* Rows of x given to an ahead set by a pool job: each thread a contiguous
 * range, as the forward pass gives them. */
struct rows_job {
    struct tensor_ahead *ahead;
    const float *x;
    int batch, cols;
};

static void give_rows(void *arg, int thread, int n_threads) {
    const struct rows_job *job = arg;
    int first = job->batch * thread / n_threads, end = job->batch * (thread + 1) / n_threads;
    for (int b = first; b < end; b++)
        tensor_ahead_row(job->ahead, b, job->x + (size_t)b * job->cols);
}

/* Quantizes the batch into ahead: from the pool's threads, or one row at a
 * time from the last. */
static void quantize_rows(struct tensor_pool *pool, struct tensor_ahead *ahead, const float *x,
                          int batch, int cols, int from_pool) {
    if (from_pool) {
        struct rows_job job = {ahead, x, batch, cols};
        tensor_pool_run(pool, give_rows, &job);
        return;
    }
    for (int b = batch - 1; b >= 0; b--) tensor_ahead_row(ahead, b, x + (size_t)b * cols);
}

/* The product of rows (w's rows before any packing) under the scalar
 * reference, which quantizes its input by rows, not interleaved. */
static void reference(float *out, const struct tensor_matrix *rows, const float *x, int batch,
                      int n_parts) {
    enum tensor_isa isa = tensor_isa_current();
    CHECK(tensor_isa_select(TENSOR_ISA_SCALAR) == 0);
    CHECK(tensor_matmul_parts(NULL, out, rows, x, batch, n_parts) == 0);
    CHECK(tensor_isa_select(isa) == 0);
}

/* tensor_matmul_parts_ahead of w against the reference, bit for bit. */
static void check_parts(struct tensor_pool *pool, struct tensor_ahead *ahead,
                        const struct tensor_matrix *w, const struct tensor_matrix *rows,
                        const float *x, int batch, int n_parts, int from_pool, const char *what) {
    size_t n = (size_t)n_parts * batch * w->rows;
    float *expected = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    reference(expected, rows, x, batch, n_parts);
    memset(got, 0xff, sizeof(float) * n);
    CHECK(tensor_ahead_begin(ahead, &w, 1, n_parts, batch) == 1);
    quantize_rows(pool, ahead, x, batch, w->cols, from_pool);
    CHECK(tensor_matmul_parts_ahead(pool, got, w, ahead) == 0);
    CHECK_MSG(test_same_bits(got, expected, n),
              "%s under %s: rows %d cols %d batch %d parts %d, rows given %s: differs", what,
              tensor_isa_name(tensor_isa_current()), w->rows, w->cols, batch, n_parts,
              from_pool ? "from the pool" : "in reverse");
    free(expected);
    free(got);
}

/* Every batch size and split of one matrix (made from rows), rows given
 * both ways. */
static void check_matrix(struct tensor_pool *pool, struct tensor_ahead *ahead,
                         const struct tensor_matrix *w, const struct tensor_matrix *rows,
                         const char *what) {
    static const int batches[] = {1, 2, 3, 5, 8, 9, 15, 16, 17, 33};
    float *x = test_random_floats(33 * w->cols, &rng_state);
    for (size_t b = 0; b < sizeof(batches) / sizeof(batches[0]); b++)
        for (int parts = 1; parts <= 4; parts *= 2)
            if ((w->cols / 32) % parts == 0)
                for (int from_pool = 0; from_pool < 2; from_pool++)
                    check_parts(pool, ahead, w, rows, x, batches[b], parts, from_pool, what);
    free(x);
}

/* q, k and v of different heights sharing one input, against the
 * reference on the rows they were made from. */
static void check_many(struct tensor_pool *pool, struct tensor_ahead *ahead,
                       const struct tensor_matrix *const *ws, const struct tensor_matrix *rows,
                       int batch, const char *what) {
    float *x = test_random_floats(batch * ws[0]->cols, &rng_state);
    float *expected[3], *got[3];
    for (int i = 0; i < 3; i++) {
        expected[i] = malloc(sizeof(float) * (size_t)batch * ws[i]->rows);
        got[i] = malloc(sizeof(float) * (size_t)batch * ws[i]->rows);
    }
    for (int i = 0; i < 3; i++) reference(expected[i], &rows[i], x, batch, 1);
    CHECK(tensor_ahead_begin(ahead, ws, 3, 1, batch) == 1);
    quantize_rows(pool, ahead, x, batch, ws[0]->cols, 1);
    CHECK(tensor_matmul_many_ahead(pool, got, ws, 3, ahead) == 0);
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(test_same_bits(got[i], expected[i], (size_t)batch * ws[i]->rows),
                  "%s under %s: matrix %d of 3, batch %d: differs", what,
                  tensor_isa_name(tensor_isa_current()), i, batch);
        free(expected[i]);
        free(got[i]);
    }
    free(x);
}

static void check_instruction_set(struct tensor_pool *pool, struct tensor_ahead *ahead) {
    static const int shapes[][2] = {{50, 768}, {19, 2048}, {33, 64}, {16, 96}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        struct tensor_matrix q8 =
            test_random_weights(TENSOR_Q8_0, shapes[s][0], shapes[s][1], &rng_state);
        struct tensor_matrix q4 =
            test_random_weights(TENSOR_Q4_0, shapes[s][0], shapes[s][1], &rng_state);
        struct tensor_matrix panels = pack(&q8);
        check_matrix(pool, ahead, &q8, &q8, "Q8_0 rows");
        check_matrix(pool, ahead, &panels, &q8, "Q8_0 panels");
        check_matrix(pool, ahead, &q4, &q4, "Q4_0 rows");
        free((void *)q8.data);
        free((void *)q4.data);
        free((void *)panels.data);
    }
    struct tensor_matrix rows[3] = {test_random_weights(TENSOR_Q8_0, 48, 256, &rng_state),
                                    test_random_weights(TENSOR_Q8_0, 16, 256, &rng_state),
                                    test_random_weights(TENSOR_Q8_0, 17, 256, &rng_state)};
    struct tensor_matrix panels[3];
    for (int i = 0; i < 3; i++) panels[i] = pack(&rows[i]);
    const struct tensor_matrix *const row_ws[] = {&rows[0], &rows[1], &rows[2]};
    const struct tensor_matrix *const panel_ws[] = {&panels[0], &panels[1], &panels[2]};
    for (int batch = 1; batch <= 17; batch += 8) {
        check_many(pool, ahead, row_ws, rows, batch, "q, k, v rows");
        check_many(pool, ahead, panel_ws, rows, batch, "q, k, v panels");
    }
    for (int i = 0; i < 3; i++) {
        free((void *)rows[i].data);
        free((void *)panels[i].data);
    }
}

/* What tensor_ahead_begin declines, and what the products refuse. */
static void check_refusals(struct tensor_pool *pool, struct tensor_ahead *ahead) {
    struct tensor_matrix q8 = test_random_weights(TENSOR_Q8_0, 16, 256, &rng_state);
    struct tensor_matrix wide = test_random_weights(TENSOR_Q8_0, 16, 512, &rng_state);
    struct tensor_matrix q4 = test_random_weights(TENSOR_Q4_0, 16, 256, &rng_state);
    float *f32_data = calloc(16 * 256, sizeof(float));
    struct tensor_matrix f32 = tensor_matrix_make(f32_data, TENSOR_F32, 16, 256);
    const struct tensor_matrix *one = &q8;
    const struct tensor_matrix *floats = &f32;
    const struct tensor_matrix *mixed_types[] = {&q8, &q4};
    const struct tensor_matrix *mixed_widths[] = {&q8, &wide};
    const struct tensor_matrix *pair[] = {&q8, &q8};
    CHECK_MSG(tensor_ahead_begin(ahead, &floats, 1, 1, 4) == 0, "float weights quantized ahead");
    CHECK_MSG(tensor_ahead_begin(ahead, mixed_types, 2, 1, 4) == 0, "Q8_0 and Q4_0 share input");
    CHECK_MSG(tensor_ahead_begin(ahead, mixed_widths, 2, 1, 4) == 0, "widths 256, 512 share");
    CHECK_MSG(tensor_ahead_begin(ahead, pair, 2, 2, 4) == 0, "several matrices in parts");
    CHECK_MSG(tensor_ahead_begin(ahead, &one, 1, 3, 4) == 0, "256 columns in 3 parts");
    CHECK_MSG(tensor_ahead_begin(ahead, &one, 1, 16, 4) == 0, "parts of 16 columns");
    CHECK_MSG(tensor_ahead_begin(ahead, &one, 1, 1, 0) == 0, "an empty batch");

    float *x = test_random_floats(4 * 512, &rng_state), *out = malloc(sizeof(float) * 4 * 16 * 4);
    CHECK(tensor_ahead_begin(ahead, &one, 1, 2, 4) == 1);
    quantize_rows(pool, ahead, x, 4, 256, 1);
    CHECK_MSG(tensor_matmul_parts_ahead(pool, out, &wide, ahead) == -1, "product of other width");
    CHECK_MSG(tensor_matmul_parts_ahead(pool, out, &q4, ahead) == -1, "product of other type");
    CHECK_MSG(tensor_matmul_many_ahead(pool, &out, &one, 1, ahead) == -1, "parts taken whole");
    CHECK(tensor_matmul_parts_ahead(pool, out, &q8, ahead) == 0);
    enum tensor_isa best = tensor_isa_best();
    if (best != TENSOR_ISA_SCALAR) {
        CHECK(tensor_isa_select(TENSOR_ISA_SCALAR) == 0);
        CHECK_MSG(tensor_matmul_parts_ahead(pool, out, &q8, ahead) == -1,
                  "a layout for %s used under scalar", tensor_isa_name(best));
        CHECK(tensor_isa_select(best) == 0);
    }
    free(x);
    free(out);
    free(f32_data);
    free((void *)q8.data);
    free((void *)wide.data);
    free((void *)q4.data);
}

int main(void) {
    struct tensor_pool *pool = tensor_pool_create(3);
    struct tensor_ahead *ahead = tensor_ahead_create();
    CHECK(pool != NULL && ahead != NULL);
    for (int isa = TENSOR_ISA_SCALAR; isa < TENSOR_ISA_COUNT; isa++)
        if (tensor_isa_select((enum tensor_isa)isa) == 0) check_instruction_set(pool, ahead);
    CHECK(tensor_isa_select(tensor_isa_best()) == 0);
    check_refusals(pool, ahead);
    tensor_ahead_free(ahead);
    tensor_pool_free(pool);
    return test_status("test_tensor_ahead");
}
