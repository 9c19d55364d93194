/* tables.c -- the NEON, dotprod and i8mm kernel tables: per op, then one
 * row per weight type. What a set leaves out it takes from its parent
 * (TENSOR_ISA_LIST: i8mm from dotprod, dotprod from NEON, NEON from the
 * scalar reference). */
#include "arm.h"

#include <stddef.h>

static const struct tensor_kernels neon = {
    .isa = TENSOR_ISA_NEON,
    .types =
        {
            [TENSOR_Q8_0] = {.matmul = tensor_matmul_q8_0_neon, .input = TENSOR_INPUT_BLOCKS},
            [TENSOR_Q4_0] = {.matmul = tensor_matmul_q4_0_neon, .input = TENSOR_INPUT_BLOCKS},
        },
};

static const struct tensor_kernels dotprod = {
    .isa = TENSOR_ISA_DOTPROD,
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
