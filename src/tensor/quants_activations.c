/* quants_activations.c -- the formats a product quantizes its input to
 * before the row dots of Q4_1 / Q5_1 (Q8_1) and of the k-quants and IQ4_XS
 * (Q8_K): ggml's reference quantizers, value for value, so the products
 * see what llama.cpp's see. (Q8_0, the input of the other legacy types, is
 * in types.c.) */
#include "tensor_internal.h"

#include <math.h>
#include <string.h>

/* Q8_1: the Q8_0 quants and scale, plus d times the sum of the quants (the
 * term a weight's minimum multiplies). Values are scaled by 127 / amax and
 * rounded to nearest even, as ggml's x86 build does (its reference code
 * multiplies by 1 / d and rounds half away from zero, which moves a few
 * quants by one): Q4_1 and Q5_1 continuations then follow llama.cpp's
 * further on the fixtures. */
void tensor_quantize_q8_1(void *out, const float *x, int64_t n) {
    struct tensor_block_q8_1 *blocks = out;
    for (int64_t block = 0; block < n / TENSOR_QK; block++) {
        const float *v = x + block * TENSOR_QK;
        float amax = 0.0f;
        for (int j = 0; j < TENSOR_QK; j++) amax = fmaxf(amax, fabsf(v[j]));
        float d = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < TENSOR_QK; j++) {
            blocks[block].qs[j] = (int8_t)nearbyintf(v[j] * id);
            sum += blocks[block].qs[j];
        }
        blocks[block].d = tensor_fp32_to_fp16(d);
        blocks[block].s = tensor_fp32_to_fp16((float)sum * d);
    }
}

void tensor_dequantize_q8_1(float *out, const void *row, int64_t n) {
    const struct tensor_block_q8_1 *blocks = row;
    for (int64_t block = 0; block < n / TENSOR_QK; block++) {
        float d = tensor_fp16_to_fp32(blocks[block].d);
        for (int j = 0; j < TENSOR_QK; j++)
            out[block * TENSOR_QK + j] = d * (float)blocks[block].qs[j];
    }
}

/* Q8_K: one float scale per 256 values, chosen so that the value of
 * largest magnitude (the first of them, by its sign) becomes -127 (ggml's
 * choice, which keeps every quant within [-127, 127]), rounded to nearest
 * even, and cut to its low byte after the minimum with 127 (what a NaN's
 * or an infinity's INT_MIN becomes); and the sums of each 16 quants, which
 * the k-quants' minimums multiply. The reference of the vector versions
 * (tensor_kernels.quantize_q8_k, which the products use), which give its
 * bytes. */
void tensor_quantize_q8_k(void *out, const float *x, int64_t n) {
    struct tensor_block_q8_k *blocks = out;
    for (int64_t block = 0; block < n / TENSOR_QK_K; block++) {
        const float *v = x + block * TENSOR_QK_K;
        struct tensor_block_q8_k *y = &blocks[block];
        float amax = 0.0f, max = 0.0f; /* largest magnitude, and that element with its sign */
        for (int j = 0; j < TENSOR_QK_K; j++) {
            if (fabsf(v[j]) > amax) {
                amax = fabsf(v[j]);
                max = v[j];
            }
        }
        memset(y, 0, sizeof(*y));
        if (amax == 0.0f) continue;
        float iscale = -127.0f / max;
        for (int j = 0; j < TENSOR_QK_K; j++) {
            int q = (int)nearbyintf(iscale * v[j]);
            y->qs[j] = (int8_t)(q < 127 ? q : 127);
        }
        for (int g = 0; g < TENSOR_QK_K / 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y->qs[g * 16 + i];
            y->bsums[g] = (int16_t)sum;
        }
        y->d = 1.0f / iscale;
    }
}

void tensor_dequantize_q8_k(float *out, const void *row, int64_t n) {
    const struct tensor_block_q8_k *blocks = row;
    for (int64_t block = 0; block < n / TENSOR_QK_K; block++)
        for (int j = 0; j < TENSOR_QK_K; j++)
            out[block * TENSOR_QK_K + j] = blocks[block].d * (float)blocks[block].qs[j];
}
