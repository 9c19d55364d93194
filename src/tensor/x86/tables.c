/* tables.c -- the AVX2 and AVX-512 kernel tables: per op, then one row per
 * weight type. What a set leaves out it takes from its parent
 * (TENSOR_ISA_LIST: AVX-512 from AVX2, AVX2 from the scalar reference). */
#include "x86.h"

#include <stddef.h>

/* A type whose products take a row dot per output element. */
#define ROW_DOT(t, isa)                                                                            \
    { .row_dot = tensor_row_dot_##t##_##isa }
/* ... and a multi-column one for batches. */
#define ROW_DOTS(t, isa)                                                                           \
    { .row_dot = tensor_row_dot_##t##_##isa, .row_dots = tensor_row_dots_##t##_##isa }

static const struct tensor_kernels avx2 = {
    .isa = TENSOR_ISA_AVX2,
    .quantize_x = tensor_quantize_x_avx2,
    .rmsnorm = tensor_rmsnorm_avx2,
    .softmax = tensor_softmax_avx2,
    .exp_weights = tensor_exp_weights_avx2,
    .swiglu = tensor_swiglu_avx2,
    .rope_turn_vectors = tensor_rope_turn_vectors_avx2,
    .dot = tensor_dot_avx2,
    .axpy = tensor_axpy_avx2,
    .scale = tensor_scale_avx2,
    .quantize_q8_k = tensor_quantize_q8_k_avx2,
    .dot_columns = tensor_dot_columns_avx2,
    .dot_q8_0_keys = tensor_dot_q8_0_keys_avx2,
    .weighted_sum = tensor_weighted_sum_avx2,
    .dot_columns_tile = tensor_dot_columns_tile_avx2,
    .weighted_sum_tile = tensor_weighted_sum_tile_avx2,
    .fp16_from_fp32 = tensor_fp16_from_fp32_avx2,
    .types =
        {
            [TENSOR_F32] = {.matmul = tensor_matmul_f32_avx2, .input = TENSOR_INPUT_FLOAT},
            [TENSOR_F16] = {.matmul = tensor_matmul_f16_avx2, .input = TENSOR_INPUT_FLOAT},
            [TENSOR_Q8_0] = {.matmul = tensor_matmul_q8_0_avx2,
                             .input = TENSOR_INPUT_BLOCKS,
                             .scratch = tensor_matmul_scratch_avx2,
                             .matmul_panels = tensor_matmul_q8_0_panels_avx2,
                             .matmul_panels_parts = tensor_matmul_q8_0_panels_parts_avx2,
                             .panels_preferred = 1,
                             .panels_interleaved = 1},
            [TENSOR_Q4_0] = {.matmul = tensor_matmul_q4_0_avx2,
                             .input = TENSOR_INPUT_BLOCKS,
                             .input_offset = 8,
                             .scratch = tensor_matmul_scratch_avx2,
                             .matmul_panels = tensor_matmul_q4_0_panels_avx2,
                             .panels_preferred = 1,
                             .panels_interleaved = 1,
                             .panels_offset = 8},
            [TENSOR_Q4_1] = ROW_DOT(q4_1, avx2),
            [TENSOR_Q5_0] = ROW_DOT(q5_0, avx2),
            [TENSOR_Q5_1] = ROW_DOT(q5_1, avx2),
            [TENSOR_IQ4_NL] = ROW_DOT(iq4_nl, avx2),
            [TENSOR_Q2_K] = ROW_DOT(q2_k, avx2),
            [TENSOR_Q3_K] = ROW_DOT(q3_k, avx2),
            [TENSOR_Q4_K] = ROW_DOTS(q4_k, avx2),
            [TENSOR_Q5_K] = ROW_DOTS(q5_k, avx2),
            [TENSOR_Q6_K] = ROW_DOTS(q6_k, avx2),
            [TENSOR_IQ4_XS] = ROW_DOTS(iq4_xs, avx2),
            [TENSOR_BF16] = ROW_DOT(bf16, avx2),
        },
};

/* Q4_0 panels have no AVX-512 kernel: the AVX-512 row kernel (with its
 * GEMV for small batches) is faster than packing, so its panel group is
 * the scalar one, never preferred. BF16 takes the AVX2 row dot: a 16-lane
 * one would add in another order, and so give other bits. */
static const struct tensor_kernels avx512 = {
    .isa = TENSOR_ISA_AVX512,
    .exp_weights = tensor_exp_weights_avx512,
    .swiglu = tensor_swiglu_avx512,
    .rope_turn_vectors = tensor_rope_turn_vectors_avx512,
    .axpy = tensor_axpy_avx512,
    .scale = tensor_scale_avx512,
    .softmax = tensor_softmax_avx512,
    .quantize_q8_k = tensor_quantize_q8_k_avx512,
    .dot_columns = tensor_dot_columns_avx512,
    .dot_q8_0_keys = tensor_dot_q8_0_keys_avx512,
    .weighted_sum = tensor_weighted_sum_avx512,
    .dot_columns_tile = tensor_dot_columns_tile_avx512,
    .dot_q8_0_keys_tile = tensor_dot_q8_0_keys_tile_avx512,
    .weighted_sum_tile = tensor_weighted_sum_tile_avx512,
    .fp16_from_fp32 = tensor_fp16_from_fp32_avx512,
    .types =
        {
            [TENSOR_Q8_0] = {.matmul = tensor_matmul_q8_0_avx512,
                             .input = TENSOR_INPUT_BLOCKS,
                             .input_offset = 128,
                             .scratch = tensor_matmul_scratch_avx512,
                             .matmul_panels = tensor_matmul_q8_0_panels_avx512,
                             .matmul_panels_parts = tensor_matmul_q8_0_panels_parts_avx512,
                             .panels_preferred = 1,
                             .panels_interleaved = 1,
                             .panels_offset = 128},
            [TENSOR_Q4_0] = {.matmul = tensor_matmul_q4_0_avx512,
                             .input = TENSOR_INPUT_BLOCKS,
                             .input_offset = 8,
                             .scratch = tensor_matmul_scratch_avx512,
                             .matmul_panels = tensor_matmul_q4_0_panels_scalar,
                             .panels_interleaved = 1,
                             .panels_offset = 8},
            [TENSOR_Q4_1] = ROW_DOT(q4_1, avx512),
            [TENSOR_Q5_0] = ROW_DOT(q5_0, avx512),
            [TENSOR_Q5_1] = ROW_DOT(q5_1, avx512),
            [TENSOR_IQ4_NL] = ROW_DOT(iq4_nl, avx512),
            [TENSOR_Q4_K] = ROW_DOTS(q4_k, avx512),
            [TENSOR_Q5_K] = ROW_DOTS(q5_k, avx512),
            [TENSOR_Q6_K] = ROW_DOTS(q6_k, avx512),
        },
};

const struct tensor_kernels *tensor_arch_kernels(enum tensor_isa isa) {
    switch (isa) {
    case TENSOR_ISA_AVX2:
        return &avx2;
    case TENSOR_ISA_AVX512:
        return &avx512;
    default:
        return NULL;
    }
}
