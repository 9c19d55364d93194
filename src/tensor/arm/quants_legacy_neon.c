/* quants_legacy_neon.c -- the Q4_1, Q5_0, Q5_1 and IQ4_NL row dots of the
 * NEON table: quants_legacy_neon.h's kernels with baseline NEON's dot4
 * (widening multiplies and pairwise adds). The scalar reference's bits. */
#include "quants_legacy_neon.h"

float tensor_row_dot_q4_1_neon(const void *w, const void *x, int n) {
    return row_dot_q4_1(w, x, n, dot4_neon);
}

float tensor_row_dot_q5_0_neon(const void *w, const void *x, int n) {
    return row_dot_q5_0(w, x, n, dot4_neon);
}

float tensor_row_dot_q5_1_neon(const void *w, const void *x, int n) {
    return row_dot_q5_1(w, x, n, dot4_neon);
}

float tensor_row_dot_iq4_nl_neon(const void *w, const void *x, int n) {
    return row_dot_iq4_nl(w, x, n, dot4_neon);
}
