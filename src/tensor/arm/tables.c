/* tables.c -- the NEON, dotprod and i8mm kernel tables: per op, then one
 * row per weight type. What a set leaves out it takes from its parent
 * (TENSOR_ISA_LIST: i8mm from dotprod, dotprod from NEON, NEON from the
 * scalar reference). */
#include "arm.h"

#include <stddef.h>

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
        },
};

static const struct tensor_kernels i8mm = {
    .isa = TENSOR_ISA_I8MM,
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
        return isa == TENSOR_ISA_SCALAR ? &tensor_kernels_scalar : NULL;
    }
}
