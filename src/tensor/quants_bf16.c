/* quants_bf16.c -- BF16 weights: the upper 16 bits of an IEEE single.
 *
 * A product with BF16 weights rounds its input to BF16 too (ggml's dot type
 * for BF16), then adds the products of the two in single precision. The
 * scalar row dot adds in order of the elements; the AVX2 one
 * (quants_bf16_avx2.c) keeps 8 lane sums. */
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

float tensor_row_dot_bf16_scalar(const void *w, const void *x, int n) {
    const uint16_t *a = w, *b = x;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += tensor_bf16_to_fp32(a[i]) * tensor_bf16_to_fp32(b[i]);
    return sum;
}
