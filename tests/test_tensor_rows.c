/* test_tensor_rows.c -- the many-row forms of dot and axpy that attention
 * uses, on every instruction set this CPU has:
 *  - tensor_dot_rows gives bit for bit what one tensor_dot call per row
 *    gives;
 *  - tensor_weighted_sum gives bit for bit what zeroing the output and one
 *    tensor_axpy call per row in order gives, and is within 1e-5 of the sum
 *    of |terms| of a double-precision reference;
 * for row lengths that exercise every vector tail (1 .. 130), row counts
 * from 0 to 70, rows scattered through memory at unaligned addresses, and
 * weights that include zeros and negative values. */
#include "tensor/tensor.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x853c49e6748fea9bULL;

static float random_float(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)(rng_state >> 40) / 8388608.0f - 1.0f; /* [-1, 1) */
}

static const int lengths[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 80, 128, 130};
static const int row_counts[] = {0, 1, 2, 5, 17, 70};
#define LENGTHS    (int)(sizeof(lengths) / sizeof(lengths[0]))
#define ROW_COUNTS (int)(sizeof(row_counts) / sizeof(row_counts[0]))
#define MAX_ROWS   70
#define MAX_N      130
#define STRIDE     (3 * MAX_N + 5) /* floats between rows: not a multiple of a vector */

/* Row pointers into pool, in a shuffled order, each starting one float past
 * a multiple of STRIDE (unaligned). */
static void make_rows(const float **rows, const float *pool, int n_rows) {
    for (int p = 0; p < n_rows; p++) rows[p] = pool + (size_t)((p * 37) % MAX_ROWS) * STRIDE + 1;
}

static void check_dot_rows(const float *q, const float *const *rows, int n_rows, int n,
                           const char *isa) {
    float got[MAX_ROWS], want[MAX_ROWS];
    tensor_dot_rows(got, q, rows, n_rows, n);
    for (int p = 0; p < n_rows; p++) want[p] = tensor_dot(q, rows[p], n);
    CHECK_MSG(test_same_bits(got, want, (size_t)n_rows),
              "%s: dot_rows n=%d rows=%d differs from dot", isa, n, n_rows);
}

static void check_weighted_sum(const float *weights, const float *const *rows, int n_rows, int n,
                               const char *isa) {
    float got[MAX_N + 1], want[MAX_N];
    got[n] = 12345.0f; /* past the end: must stay */
    tensor_weighted_sum(got, weights, rows, n_rows, n);
    memset(want, 0, sizeof(want));
    for (int p = 0; p < n_rows; p++) tensor_axpy(want, weights[p], rows[p], n);
    CHECK_MSG(test_same_bits(got, want, (size_t)n),
              "%s: weighted_sum n=%d rows=%d differs from axpy", isa, n, n_rows);
    CHECK_MSG(got[n] == 12345.0f, "%s: weighted_sum n=%d wrote past the end", isa, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double value = 0, magnitude = 0;
        for (int p = 0; p < n_rows; p++) {
            value += (double)weights[p] * rows[p][i];
            magnitude += fabs((double)weights[p] * rows[p][i]);
        }
        if (fabs(got[i] - value) > 1e-5 * magnitude + 1e-30) bad++;
    }
    CHECK_MSG(bad == 0, "%s: weighted_sum n=%d rows=%d: %d elements off the reference", isa, n,
              n_rows, bad);
}

int main(void) {
    float *pool = malloc(sizeof(float) * (size_t)MAX_ROWS * STRIDE);
    float q[MAX_N], weights[MAX_ROWS];
    const float *rows[MAX_ROWS];
    CHECK(pool != NULL);
    if (!pool) return test_status("test_tensor_rows");
    for (size_t i = 0; i < (size_t)MAX_ROWS * STRIDE; i++) pool[i] = random_float();
    for (int i = 0; i < MAX_N; i++) q[i] = random_float();
    for (int p = 0; p < MAX_ROWS; p++) weights[p] = p % 7 == 3 ? 0.0f : random_float();
    make_rows(rows, pool, MAX_ROWS);

    enum tensor_isa best = tensor_isa_best();
    for (int isa = TENSOR_ISA_SCALAR; isa <= (int)best; isa++) {
        if (tensor_isa_select((enum tensor_isa)isa) != 0) continue;
        const char *name = tensor_isa_name((enum tensor_isa)isa);
        for (int l = 0; l < LENGTHS; l++) {
            for (int r = 0; r < ROW_COUNTS; r++) {
                check_dot_rows(q, rows, row_counts[r], lengths[l], name);
                check_weighted_sum(weights, rows, row_counts[r], lengths[l], name);
            }
        }
    }
    CHECK(tensor_isa_select(best) == 0);
    free(pool);
    return test_status("test_tensor_rows");
}
