/* ops_dotprod.c -- the Q8_0 key dot of attention with the armv8.2-a dot
 * product: one sdot per four dimensions of four keys adds each key's four
 * byte products into its 32-bit lane. Exact integers, then the float step
 * of ops_neon.h, so the scalar reference's bits. */
#include "ops_neon.h"

static ALWAYS_INLINE int32x4_t key_dots(const int8x16_t groups[8], const int8_t *query) {
    int32x4_t dot = vdupq_n_s32(0);
    for (int g = 0; g < 8; g++) {
        int32_t query4;
        memcpy(&query4, query + 4 * g, sizeof(query4));
        dot = vdotq_s32(dot, groups[g], vreinterpretq_s8_s32(vdupq_n_s32(query4)));
    }
    return dot;
}

void tensor_dot_q8_0_keys_dotprod(float *out, const struct tensor_q8_0_query *query,
                                  const void *keys, int n_rows, int n, int stride) {
    dot_q8_0_keys(out, query, keys, n_rows, n, stride, key_dots);
}
