/* test_tensor_quants_bf16.c -- the BF16 row dots: for rows of lengths
 * around each kernel's steps (8, 32, 64 values) and 4096, of random
 * values, the scalar dot equals the double-precision dot of the same bf16
 * operands within 1e-5 of the sum of |products|, the AVX2 dot (where the
 * CPU has it) the scalar one bit for bit (the scalar dot spells out its
 * lanes, the canonical order), and the AVX-512 dot the scalar one within
 * 1e-5 (its float order differs). Each length starts at an odd element, so the
 * kernels take unaligned rows. With LOCKSTEP_TIME_ROW_DOTS set it also
 * prints ns per row dot of 4096 values. */
#include "tensor/quants.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_N 4099

/* n random values as bf16 at w and x, n <= MAX_N. */
static void random_rows(uint16_t *w, uint16_t *x, int n, uint64_t *state) {
    for (int i = 0; i < n; i++) {
        w[i] = tensor_fp32_to_bf16(test_random_float(state));
        x[i] = tensor_fp32_to_bf16(4.0f * test_random_float(state));
    }
}

static void check_length(int n, uint64_t *state) {
    uint16_t w[MAX_N + 1], x[MAX_N + 1];
    random_rows(w + 1, x + 1, n, state);
    double want = 0.0, magnitude = 0.0;
    for (int i = 1; i <= n; i++) {
        double p = (double)tensor_bf16_to_fp32(w[i]) * tensor_bf16_to_fp32(x[i]);
        want += p;
        magnitude += fabs(p);
    }
    float scalar = tensor_row_dot_bf16_scalar(w + 1, x + 1, n);
    CHECK_MSG(fabs(scalar - want) <= 1e-5 * magnitude, "n=%d: scalar %.9g, double %.9g", n, scalar,
              want);
    if (tensor_isa_best() >= TENSOR_ISA_AVX2) {
        float avx2 = tensor_row_dot_bf16_avx2(w + 1, x + 1, n);
        CHECK_MSG(test_same_bits(&avx2, &scalar, 1), "n=%d: avx2 %a, scalar %a", n, avx2, scalar);
    }
    if (tensor_isa_best() >= TENSOR_ISA_AVX512) {
        float avx512 = tensor_row_dot_bf16_avx512(w + 1, x + 1, n);
        CHECK_MSG(fabs(avx512 - scalar) <= 1e-5 * magnitude, "n=%d: avx512 %.9g, scalar %.9g", n,
                  avx512, scalar);
    }
}

static double ns_per_call(tensor_row_dot_fn dot, const void *w, const void *x, int n, int calls) {
    volatile float sink = 0.0f;
    double start = test_now();
    for (int i = 0; i < calls; i++) sink += dot(w, x, n);
    (void)sink;
    return (test_now() - start) * 1e9 / calls;
}

static void time_row_dots(uint64_t *state) {
    static uint16_t w[4096], x[4096];
    random_rows(w, x, 4096, state);
    printf("BF16 row dot n=4096: scalar %.0f ns",
           ns_per_call(tensor_row_dot_bf16_scalar, w, x, 4096, 2000));
    if (tensor_isa_best() >= TENSOR_ISA_AVX2)
        printf(", avx2 %.0f ns", ns_per_call(tensor_row_dot_bf16_avx2, w, x, 4096, 200000));
    if (tensor_isa_best() >= TENSOR_ISA_AVX512)
        printf(", avx512 %.0f ns", ns_per_call(tensor_row_dot_bf16_avx512, w, x, 4096, 200000));
    printf("\n");
}

int main(void) {
    static const int lengths[] = {1,  7,  8,  9,   31,  32,  33,  63,   64,
                                  65, 95, 96, 127, 128, 129, 200, 4096, MAX_N};
    uint64_t state = 7;
    for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++)
        for (int trial = 0; trial < 8; trial++) check_length(lengths[l], &state);
    if (getenv("LOCKSTEP_TIME_ROW_DOTS")) time_row_dots(&state);
    return test_status("test_tensor_quants_bf16");
}
