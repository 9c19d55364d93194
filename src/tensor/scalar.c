/* scalar.c -- the scalar reference's kernel table: every op and every
 * weight type's products in portable C. It is the table every instruction
 * set falls back to for what it has no kernel of its own for, and the one
 * whose bits all of them give (tensor_internal.h). */
#include "tensor_internal.h"

/* A type whose products take a row dot per output element. */
#define ROW_DOT(t)                                                                                 \
    { .row_dot = tensor_row_dot_##t##_scalar }

const struct tensor_kernels tensor_kernels_scalar = {
    .isa = TENSOR_ISA_SCALAR,
    .quantize_x = tensor_quantize_x_scalar,
    .rmsnorm = tensor_rmsnorm_scalar,
    .softmax = tensor_softmax_scalar,
    .exp_weights = tensor_exp_weights_scalar,
    .swiglu = tensor_swiglu_scalar,
    .rope_turn_vectors = tensor_rope_turn_vectors_none,
    .dot = tensor_dot_scalar,
    .axpy = tensor_axpy_scalar,
    .scale = tensor_scale_scalar,
    .quantize_q8_k = tensor_quantize_q8_k,
    .dot_columns = tensor_dot_columns_scalar,
    .dot_q8_0_keys = tensor_dot_q8_0_keys_scalar,
    .weighted_sum = tensor_weighted_sum_scalar,
    .fp16_from_fp32 = tensor_fp16_from_fp32_scalar,
    .types =
        {
            [TENSOR_F32] = {.matmul = tensor_matmul_f32_scalar, .input = TENSOR_INPUT_FLOAT},
            [TENSOR_F16] = {.matmul = tensor_matmul_f16_scalar,
                            .input = TENSOR_INPUT_FLOAT,
                            .scratch = tensor_matmul_scratch_f16_scalar},
            [TENSOR_Q8_0] = {.matmul = tensor_matmul_q8_0_scalar,
                             .input = TENSOR_INPUT_BLOCKS,
                             .matmul_panels = tensor_matmul_q8_0_panels_scalar},
            [TENSOR_Q4_0] = {.matmul = tensor_matmul_q4_0_scalar,
                             .input = TENSOR_INPUT_BLOCKS,
                             .matmul_panels = tensor_matmul_q4_0_panels_scalar},
            [TENSOR_Q4_1] = ROW_DOT(q4_1),
            [TENSOR_Q5_0] = ROW_DOT(q5_0),
            [TENSOR_Q5_1] = ROW_DOT(q5_1),
            [TENSOR_IQ4_NL] = ROW_DOT(iq4_nl),
            [TENSOR_Q2_K] = ROW_DOT(q2_k),
            [TENSOR_Q3_K] = ROW_DOT(q3_k),
            [TENSOR_Q4_K] = ROW_DOT(q4_k),
            [TENSOR_Q5_K] = ROW_DOT(q5_k),
            [TENSOR_Q6_K] = ROW_DOT(q6_k),
            [TENSOR_IQ4_XS] = ROW_DOT(iq4_xs),
            [TENSOR_BF16] = ROW_DOT(bf16),
        },
};
