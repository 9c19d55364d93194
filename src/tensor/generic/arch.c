/* arch.c -- an architecture with no kernels of its own: the scalar
 * reference alone (it gives every set's bits, so such a host still shares
 * instances with any other). */
#include "tensor/tensor_internal.h"

#include <stddef.h>

enum tensor_isa tensor_arch_detect(void) {
    return TENSOR_ISA_SCALAR;
}

const struct tensor_kernels *tensor_arch_kernels(enum tensor_isa isa) {
    (void)isa;
    return NULL;
}

/* CMake's name of the processor this build is for. */
const char *tensor_arch_name(void) {
    return LOCKSTEP_PROCESSOR;
}
