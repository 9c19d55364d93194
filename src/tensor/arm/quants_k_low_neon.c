/* quants_k_low_neon.c -- the Q2_K, Q3_K and IQ4_XS row dots of the NEON
 * table: quants_k_low_neon.h's kernels with baseline NEON's dot4
 * (widening multiplies and pairwise adds). The scalar reference's bits. */
#include "quants_k_low_neon.h"

float tensor_row_dot_q2_k_neon(const void *w, const void *x, int n) {
    return row_dot_q2_k(w, x, n, dot4_neon);
}

float tensor_row_dot_q3_k_neon(const void *w, const void *x, int n) {
    return row_dot_q3_k(w, x, n, dot4_neon);
}

float tensor_row_dot_iq4_xs_neon(const void *w, const void *x, int n) {
    return row_dot_iq4_xs(w, x, n, dot4_neon);
}
