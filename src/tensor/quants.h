/* quants.h -- ggml's block layouts beyond Q8_0 / Q4_0, and the kernels of
 * each type that the type table (types.c) and the kernel tables (isa.c)
 * point to.
 *
 * Every struct is ggml's block byte for byte, so GGUF tensors are used in
 * place. A product of weights of type T with activations x quantizes x to
 * T's dot type first, as ggml does (Q8_0 for Q5_0 and IQ4_NL, Q8_1 for
 * Q4_1 and Q5_1, Q8_K for the k-quants and IQ4_XS, BF16 for BF16), then
 * takes each row's dot product with a row dot kernel:
 *
 *     float dot = tensor_row_dot_T(w_row, x_row, n);
 *
 * w_row holds n / block_elements blocks of T, x_row the same n elements in
 * the dot type. Each type has a scalar reference (quants_*.c) and versions
 * per instruction set (x86/, arm/); the tests compare them. Within one
 * instruction set a row dot is a fixed sequence of operations, so a product
 * does not depend on the batch or the thread. Nothing outside src/tensor
 * includes this header. */
#ifndef LOCKSTEP_TENSOR_QUANTS_H
#define LOCKSTEP_TENSOR_QUANTS_H

#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

#define TENSOR_QK_K 256 /* elements per k-quant / IQ4_XS / Q8_K super-block */

/* block_q4_1: value = d * q + m, q a nibble (layout of Q4_0). 20 bytes. */
struct tensor_block_q4_1 {
    uint16_t d, m;             /* scale and minimum, fp16 */
    uint8_t qs[TENSOR_QK / 2]; /* byte j: element j (low nibble), j + 16 (high) */
};

/* block_q5_0: value = d * (q - 16), q of 5 bits: the nibble as in Q4_0,
 * bit 4 from bit i of qh (little-endian u32) for element i. 22 bytes. */
struct tensor_block_q5_0 {
    uint16_t d;                /* scale, fp16 */
    uint8_t qh[4];             /* fifth bits */
    uint8_t qs[TENSOR_QK / 2]; /* low four bits */
};

/* block_q5_1: value = d * q + m, q of 5 bits as in Q5_0. 24 bytes. */
struct tensor_block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[TENSOR_QK / 2];
};

/* block_q8_1: the activations of Q4_1 / Q5_1 products. 36 bytes. */
struct tensor_block_q8_1 {
    uint16_t d; /* scale, fp16 */
    uint16_t s; /* d * sum of qs, fp16 */
    int8_t qs[TENSOR_QK];
};

/* block_iq4_nl: value = d * tensor_iq4_values[nibble], nibbles as Q4_0.
 * 18 bytes. */
struct tensor_block_iq4_nl {
    uint16_t d;
    uint8_t qs[TENSOR_QK / 2];
};

/* The 16 values an IQ4 nibble stands for (ggml's kvalues_iq4nl). */
extern const int8_t tensor_iq4_values[16];

/* block_q2_K: 16 groups of 16; value = d * (scale & 15) * q - dmin *
 * (scale >> 4), q of 2 bits. 84 bytes. */
struct tensor_block_q2_k {
    uint8_t scales[TENSOR_QK_K / 16]; /* group scale (low nibble) and min (high) */
    uint8_t qs[TENSOR_QK_K / 4];      /* 2-bit quants */
    uint16_t d, dmin;                 /* super-block scales, fp16 */
};

/* block_q3_K: 16 groups of 16; value = d * (scale - 32) * (q - 4 * !hbit),
 * q of 2 bits, 6-bit scales packed in 12 bytes. 110 bytes. */
struct tensor_block_q3_k {
    uint8_t hmask[TENSOR_QK_K / 8]; /* high bits */
    uint8_t qs[TENSOR_QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];             /* 16 6-bit scales */
    uint16_t d;                     /* super-block scale, fp16 */
};

/* block_q4_K: 8 groups of 32; value = d * scale * q - dmin * min, q a
 * nibble, 6-bit scales and mins packed in 12 bytes. 144 bytes. */
struct tensor_block_q4_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[TENSOR_QK_K / 2];
};

/* block_q5_K: as Q4_K with a fifth bit per quant. 176 bytes. */
struct tensor_block_q5_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[TENSOR_QK_K / 8];
    uint8_t qs[TENSOR_QK_K / 2];
};

/* block_q6_K: 16 groups of 16; value = d * scale * (q - 32), q of 6 bits.
 * 210 bytes. */
struct tensor_block_q6_k {
    uint8_t ql[TENSOR_QK_K / 2];     /* low 4 bits */
    uint8_t qh[TENSOR_QK_K / 4];     /* high 2 bits */
    int8_t scales[TENSOR_QK_K / 16]; /* group scales */
    uint16_t d;                      /* super-block scale, fp16 */
};

/* block_iq4_xs: 8 groups of 32; value = d * (scale - 32) *
 * tensor_iq4_values[nibble], 6-bit scales (4 low bits in scales_l, 2 high
 * bits in scales_h). 136 bytes. */
struct tensor_block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[TENSOR_QK_K / 64];
    uint8_t qs[TENSOR_QK_K / 2];
};

/* block_q8_K: the activations of k-quant and IQ4_XS products. 292 bytes. */
struct tensor_block_q8_k {
    float d;                         /* scale (a float, not fp16) */
    int8_t qs[TENSOR_QK_K];          /* quants */
    int16_t bsums[TENSOR_QK_K / 16]; /* sums of each 16 quants */
};

/* A row dot: weights w (n elements of the weight type) times activations x
 * (n elements of its dot type). */
typedef float (*tensor_row_dot_fn)(const void *w, const void *x, int n);
/* Input rows a multi-column row dot takes at once. */
#define TENSOR_DOT_COLUMNS 8
/* A multi-column row dot: out[c] = row dot of weights w with the
 * activation row at x + c * x_stride bytes, for c < TENSOR_DOT_COLUMNS,
 * each weight block unpacked once for all of them. Every out[c] has the
 * bits of the single row dot of the same instruction set, so a product
 * does not depend on how its batch is grouped. */
typedef void (*tensor_row_dots_fn)(float *out, const void *w, const void *x, size_t x_stride,
                                   int n);
/* Converts n elements of blocks to floats. */
typedef void (*tensor_dequantize_fn)(float *out, const void *blocks, int64_t n);
/* Quantizes n floats into blocks. */
typedef void (*tensor_quantize_fn)(void *out, const float *x, int64_t n);

/* ---- per type: dequantize, quantize, the scalar row dot ---- */

#define TENSOR_DECLARE_TYPE(t)                                                                     \
    void tensor_dequantize_##t(float *out, const void *blocks, int64_t n);                         \
    void tensor_quantize_##t(void *out, const float *x, int64_t n);                                \
    float tensor_row_dot_##t##_scalar(const void *w, const void *x, int n);

TENSOR_DECLARE_TYPE(q4_1)
TENSOR_DECLARE_TYPE(q5_0)
TENSOR_DECLARE_TYPE(q5_1)
TENSOR_DECLARE_TYPE(iq4_nl)
TENSOR_DECLARE_TYPE(q2_k)
TENSOR_DECLARE_TYPE(q3_k)
TENSOR_DECLARE_TYPE(q4_k)
TENSOR_DECLARE_TYPE(q5_k)
TENSOR_DECLARE_TYPE(q6_k)
TENSOR_DECLARE_TYPE(iq4_xs)
TENSOR_DECLARE_TYPE(bf16)

#undef TENSOR_DECLARE_TYPE

/* The activation formats: ggml's quantize_row_q8_1 / q8_K reference and
 * the round-to-nearest-even bf16 conversion. */
void tensor_quantize_q8_1(void *out, const float *x, int64_t n);
void tensor_quantize_q8_k(void *out, const float *x, int64_t n);
void tensor_dequantize_q8_1(float *out, const void *blocks, int64_t n);
void tensor_dequantize_q8_k(float *out, const void *blocks, int64_t n);

#endif
