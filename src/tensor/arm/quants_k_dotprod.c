/* quants_k_dotprod.c -- the Q4_K, Q5_K and Q6_K row dots of the dotprod
 * table: quants_k_neon.h's kernels with sdot as their dot4. The scalar
 * reference's bits. */
#include "quants_k_neon.h"

float tensor_row_dot_q4_k_dotprod(const void *w, const void *x, int n) {
    return row_dot_k(w, x, n, 0, dot4_dotprod);
}

float tensor_row_dot_q5_k_dotprod(const void *w, const void *x, int n) {
    return row_dot_k(w, x, n, 1, dot4_dotprod);
}

float tensor_row_dot_q6_k_dotprod(const void *w, const void *x, int n) {
    return row_dot_q6_k(w, x, n, dot4_dotprod);
}

void tensor_row_dots_q4_k_dotprod(float *out, const void *w, const void *x, size_t x_stride,
                                  int n) {
    row_dots_k(out, w, x, x_stride, n, 0, dot4_dotprod);
}

void tensor_row_dots_q5_k_dotprod(float *out, const void *w, const void *x, size_t x_stride,
                                  int n) {
    row_dots_k(out, w, x, x_stride, n, 1, dot4_dotprod);
}

void tensor_row_dots_q6_k_dotprod(float *out, const void *w, const void *x, size_t x_stride,
                                  int n) {
    row_dots_q6_k(out, w, x, x_stride, n, dot4_dotprod);
}
