/* tables.c -- the NEON, dotprod and i8mm kernel tables: per op, then one
 * row per weight type. What a set leaves out it takes from its parent
 * (TENSOR_ISA_LIST: i8mm from dotprod, dotprod from NEON, NEON from the
 * scalar reference). */
#include "arm.h"

#include <stddef.h>

/* Row dots of the quantized types: a type's row dot, and with it the
 * multi-column one for batches. */
#define ROW_DOT(t, isa)                                                                            \
    { .row_dot = tensor_row_dot_##t##_##isa }
#define ROW_DOTS(t, isa)                                                                           \
    { .row_dot = tensor_row_dot_##t##_##isa, .row_dots = tensor_row_dots_##t##_##isa }

static const struct tensor_kernels neon = {
    .isa = TENSOR_ISA_NEON,
    /* float ops and the activation quantizer (ops_neon.c) */
    .quantize_x = tensor_quantize_x_neon,
    .rmsnorm = tensor_rmsnorm_neon,
    .softmax = tensor_softmax_neon,
    .exp_weights = tensor_exp_weights_neon,
    .swiglu = tensor_swiglu_neon,
    .rope_turn_vectors = tensor_rope_turn_vectors_neon,
    .dot = tensor_dot_neon,
    .axpy = tensor_axpy_neon,
    .scale = tensor_scale_neon,
    .dot_columns = tensor_dot_columns_neon,
    .dot_q8_0_keys = tensor_dot_q8_0_keys_neon,
    .weighted_sum = tensor_weighted_sum_neon,
    .fp16_from_fp32 = tensor_fp16_from_fp32_neon,
    .types =
        {
            /* F32 and F16 products (matmul_float_neon.c) */
            [TENSOR_F32] = {.matmul = tensor_matmul_f32_neon, .input = TENSOR_INPUT_FLOAT},
            [TENSOR_F16] = {.matmul = tensor_matmul_f16_neon, .input = TENSOR_INPUT_FLOAT},

            [TENSOR_Q8_0] = {.matmul = tensor_matmul_q8_0_neon, .input = TENSOR_INPUT_BLOCKS},
            [TENSOR_Q4_0] = {.matmul = tensor_matmul_q4_0_neon, .input = TENSOR_INPUT_BLOCKS},
            /* row dots of the quantized types */
            [TENSOR_Q4_K] = ROW_DOTS(q4_k, neon),
            [TENSOR_Q5_K] = ROW_DOTS(q5_k, neon),
            [TENSOR_Q6_K] = ROW_DOTS(q6_k, neon),
            [TENSOR_Q4_1] = ROW_DOT(q4_1, neon),
            [TENSOR_Q5_0] = ROW_DOT(q5_0, neon),
            [TENSOR_Q5_1] = ROW_DOT(q5_1, neon),
            [TENSOR_IQ4_NL] = ROW_DOT(iq4_nl, neon),
            [TENSOR_Q2_K] = ROW_DOT(q2_k, neon),
            [TENSOR_Q3_K] = ROW_DOT(q3_k, neon),
            [TENSOR_IQ4_XS] = ROW_DOT(iq4_xs, neon),
            [TENSOR_BF16] = ROW_DOT(bf16, neon),
        },
};

static const struct tensor_kernels dotprod = {
    .isa = TENSOR_ISA_DOTPROD,
    /* the Q8_0 key dot (ops_dotprod.c) */
    .dot_q8_0_keys = tensor_dot_q8_0_keys_dotprod,
    .types =
        {
            [TENSOR_Q8_0] = {.matmul = tensor_matmul_q8_0_dotprod, .input = TENSOR_INPUT_BLOCKS},
            [TENSOR_Q4_0] = {.matmul = tensor_matmul_q4_0_dotprod, .input = TENSOR_INPUT_BLOCKS},
            /* row dots of the quantized types */
            [TENSOR_Q4_K] = ROW_DOTS(q4_k, dotprod),
            [TENSOR_Q5_K] = ROW_DOTS(q5_k, dotprod),
            [TENSOR_Q6_K] = ROW_DOTS(q6_k, dotprod),
            [TENSOR_Q4_1] = ROW_DOT(q4_1, dotprod),
            [TENSOR_Q5_0] = ROW_DOT(q5_0, dotprod),
            [TENSOR_Q5_1] = ROW_DOT(q5_1, dotprod),
            [TENSOR_IQ4_NL] = ROW_DOT(iq4_nl, dotprod),
            [TENSOR_Q2_K] = ROW_DOT(q2_k, dotprod),
            [TENSOR_Q3_K] = ROW_DOT(q3_k, dotprod),
            [TENSOR_IQ4_XS] = ROW_DOT(iq4_xs, dotprod),
        },
};

static const struct tensor_kernels i8mm = {
    .isa = TENSOR_ISA_I8MM,
    .types =
        {
            [TENSOR_Q8_0] = {.matmul = tensor_matmul_q8_0_i8mm, .input = TENSOR_INPUT_BLOCKS},
            [TENSOR_Q4_0] = {.matmul = tensor_matmul_q4_0_i8mm, .input = TENSOR_INPUT_BLOCKS},
        },
};

const struct tensor_kernels *tensor_arch_kernels(enum tensor_isa isa) {
    switch (isa) {
    case TENSOR_ISA_NEON:
        return &neon;
    case TENSOR_ISA_DOTPROD:
        return &dotprod;
    case TENSOR_ISA_I8MM:
        return &i8mm;
    default:
        return NULL;
    }
}
