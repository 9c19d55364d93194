/* quants_k_low_dotprod.c -- the Q2_K, Q3_K and IQ4_XS row dots of the
 * dotprod table: quants_k_low_neon.h's kernels with sdot as their dot4.
 * The scalar reference's bits. */
#include "quants_k_low_neon.h"

float tensor_row_dot_q2_k_dotprod(const void *w, const void *x, int n) {
    return row_dot_q2_k(w, x, n, dot4_dotprod);
}

float tensor_row_dot_q3_k_dotprod(const void *w, const void *x, int n) {
    return row_dot_q3_k(w, x, n, dot4_dotprod);
}

float tensor_row_dot_iq4_xs_dotprod(const void *w, const void *x, int n) {
    return row_dot_iq4_xs(w, x, n, dot4_dotprod);
}
