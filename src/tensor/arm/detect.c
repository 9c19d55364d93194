/* detect.c -- which arm64 instruction sets this CPU supports, as Linux
 * reports them in the auxiliary vector (getauxval's AT_HWCAP and
 * AT_HWCAP2 bits, the same the kernel prints as cpuinfo's features):
 * asimd (NEON, on every arm64 CPU), asimddp (dotprod), i8mm. SVE is
 * reported too but has no kernels yet. */
#include "arm.h"

#include <sys/auxv.h>

/* The bits of <asm/hwcap.h>, for a libc without the newest names. */
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif

enum tensor_isa tensor_arch_detect(void) {
    unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
    if (!(hwcap & HWCAP_ASIMD)) return TENSOR_ISA_SCALAR;
    if (!(hwcap & HWCAP_ASIMDDP)) return TENSOR_ISA_NEON;
    if (!(hwcap2 & HWCAP2_I8MM)) return TENSOR_ISA_DOTPROD;
    return TENSOR_ISA_I8MM;
}

const char *tensor_arch_name(void) {
    return "aarch64";
}
