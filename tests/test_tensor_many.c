/* test_tensor_many.c -- tensor_matmul_many (one input, several matrices: a
 * layer's q/k/v and gate/up) gives each matrix the bits of its own
 * tensor_matmul:
 *  - for every weight type, Q8_0 in both layouts, and every instruction
 *    set this CPU has;
 *  - for three matrices of different heights (not multiples of 16), batch
 *    sizes 1..17 and 33, with 1, 2 and 3 threads;
 *  - and for matrices of mixed types, which take one call each. */
#include "tensor/tensor.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define MAX_BATCH 33
#define COLS      160

static uint64_t rng_state = 0x13198a2e03707344ULL;

/* Panels of w in fresh memory; w's rows are freed. */
static struct tensor_matrix to_panels(struct tensor_matrix w) {
    size_t bytes = tensor_panels_bytes(&w);
    struct tensor_matrix packed = tensor_pack_panels(aligned_alloc(64, (bytes + 63) / 64 * 64), &w);
    free((void *)w.data);
    return packed;
}

/* Every output of tensor_matmul_many against tensor_matmul, bit for bit. */
static void check_many(struct tensor_pool *pool, struct tensor_matrix *w, int n, const float *x,
                       const char *what) {
    for (int batch = 1; batch <= MAX_BATCH; batch = batch < 17 ? batch + 1 : MAX_BATCH + 1) {
        float *outs[3], *alone[3];
        for (int i = 0; i < n; i++) {
            outs[i] = malloc(sizeof(float) * (size_t)batch * w[i].rows);
            alone[i] = malloc(sizeof(float) * (size_t)batch * w[i].rows);
            CHECK(tensor_matmul(pool, alone[i], &w[i], x, batch) == 0);
        }
        const struct tensor_matrix *ws[] = {&w[0], &w[1], &w[2]};
        CHECK(tensor_matmul_many(pool, outs, ws, n, x, batch) == 0);
        for (int i = 0; i < n; i++) {
            CHECK_MSG(memcmp(outs[i], alone[i], sizeof(float) * (size_t)batch * w[i].rows) == 0,
                      "%s: %s, matrix %d batch %d threads %d differs from tensor_matmul", what,
                      tensor_isa_name(tensor_isa_current()), i, batch, tensor_pool_size(pool));
            free(outs[i]);
            free(alone[i]);
        }
    }
}

int main(void) {
    static const int heights[3] = {48, 23, 37};
    static const enum tensor_type types[] = {TENSOR_F32, TENSOR_F16, TENSOR_Q8_0, TENSOR_Q4_0};
    float *x = malloc(sizeof(float) * MAX_BATCH * COLS);
    for (int i = 0; i < MAX_BATCH * COLS; i++) x[i] = test_random_float(&rng_state);
    struct tensor_pool *pools[3];
    for (int t = 0; t < 3; t++) CHECK((pools[t] = tensor_pool_create(t + 1)) != NULL);

    for (int k = 0; k < 5; k++) {
        enum tensor_type type = k < 4 ? types[k] : TENSOR_Q8_0;
        struct tensor_matrix w[3];
        for (int i = 0; i < 3; i++) {
            w[i] = test_random_weights(type, heights[i], COLS, &rng_state);
            if (k == 4) w[i] = to_panels(w[i]);
        }
        for (int isa = TENSOR_ISA_SCALAR; isa < TENSOR_ISA_COUNT; isa++) {
            if (tensor_isa_select((enum tensor_isa)isa) != 0) continue;
            for (int t = 0; t < 3; t++)
                check_many(pools[t], w, 3, x, k == 4 ? "q8_0 panels" : tensor_type_name(type));
        }
        CHECK(tensor_isa_select(tensor_isa_best()) == 0);
        for (int i = 0; i < 3; i++) free((void *)w[i].data);
    }

    struct tensor_matrix mixed[3] = {test_random_weights(TENSOR_Q8_0, 48, COLS, &rng_state),
                                     test_random_weights(TENSOR_F32, 23, COLS, &rng_state),
                                     test_random_weights(TENSOR_Q4_0, 37, COLS, &rng_state)};
    check_many(pools[1], mixed, 3, x, "mixed types");
    for (int i = 0; i < 3; i++) free((void *)mixed[i].data);

    for (int t = 0; t < 3; t++) tensor_pool_free(pools[t]);
    free(x);
    return test_status("test_tensor_many");
}
