/* quants_bf16.c -- BF16 weights: the upper 16 bits of an IEEE single.
 *
 * A product with BF16 weights rounds its input to BF16 too (ggml's dot type
 * for BF16), then adds the products of the two in single precision, in
 * the canonical order (canon.h: quants_bf16_avx2.c's). */
#include "canon.h"
#include "tensor_internal.h"

#include <string.h>

float tensor_bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

uint16_t tensor_fp32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    if ((bits & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)((bits >> 16) | 0x40u);
    /* round to nearest, ties to even, on the 16 bits dropped */
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

void tensor_dequantize_bf16(float *out, const void *blocks, int64_t n) {
    const uint16_t *h = blocks;
    for (int64_t i = 0; i < n; i++) out[i] = tensor_bf16_to_fp32(h[i]);
}

void tensor_quantize_bf16(void *out, const float *x, int64_t n) {
    uint16_t *h = out;
    for (int64_t i = 0; i < n; i++) h[i] = tensor_fp32_to_bf16(x[i]);
}

/* Four sums of 8 lanes: rounds of 32 elements put element i + 8k + l in
 * sum k, lane l, and the whole vectors of 8 left go to sums 0, 1, 2 in
 * turn, fused in order of i; the sums add as (0 + 1) + (2 + 3) lane by
 * lane, then the lane tree; the last n % 8 products are added to that
 * one by one, unfused. */
float tensor_row_dot_bf16_scalar(const void *w, const void *x, int n) {
    const uint16_t *a = w, *b = x;
    float acc[4][CANON_LANES] = {{0}};
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < CANON_LANES; l++)
                acc[k][l] = fmaf(tensor_bf16_to_fp32(a[i + 8 * k + l]),
                                 tensor_bf16_to_fp32(b[i + 8 * k + l]), acc[k][l]);
    for (int k = 0; i + 8 <= n; i += 8, k++)
        for (int l = 0; l < CANON_LANES; l++)
            acc[k][l] =
                fmaf(tensor_bf16_to_fp32(a[i + l]), tensor_bf16_to_fp32(b[i + l]), acc[k][l]);
    float lanes[CANON_LANES];
    for (int l = 0; l < CANON_LANES; l++)
        lanes[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
    float sum = canon_sum_lanes(lanes);
    for (; i < n; i++) sum = sum + tensor_bf16_to_fp32(a[i]) * tensor_bf16_to_fp32(b[i]);
    return sum;
}
