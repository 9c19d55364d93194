/* tensor_kernels.h -- what the tensor tests read of the kernel tables
 * (src/tensor/tensor_internal.h): a type's kernels in each instruction set,
 * from the resolved table, so a set with no kernel of its own for a type
 * gives the one it falls back to. Tests loop over every set with
 * TEST_EACH_ISA and skip those the CPU cannot run. */
#ifndef LOCKSTEP_TEST_TENSOR_KERNELS_H
#define LOCKSTEP_TEST_TENSOR_KERNELS_H

#include "tensor/tensor_internal.h"

/* Every instruction set this CPU can run, the scalar reference first. */
#define TEST_EACH_ISA(isa)                                                                         \
    for (enum tensor_isa isa = TENSOR_ISA_SCALAR; isa < TENSOR_ISA_COUNT;                          \
         isa = (enum tensor_isa)(isa + 1))                                                         \
        if (tensor_isa_available(isa))

static inline tensor_row_dot_fn test_row_dot(enum tensor_isa isa, enum tensor_type type) {
    return tensor_kernels_for(isa)->types[type].row_dot;
}

static inline tensor_row_dots_fn test_row_dots(enum tensor_isa isa, enum tensor_type type) {
    return tensor_kernels_for(isa)->types[type].row_dots;
}

#endif
