/* detect.c -- which x86-64 instruction sets this CPU and its operating
 * system support: cpuid for the CPU's features, xgetbv for the registers
 * the OS saves on a context switch (a CPU with AVX-512 under an OS that
 * does not save its state cannot use it). */
#include "x86.h"

#include <cpuid.h>

/* XCR0 bits: the OS saves SSE+AVX state (1, 2) and AVX-512 state (5, 6, 7). */
#define XCR0_AVX    0x06u
#define XCR0_AVX512 0xe6u

static unsigned long long read_xcr0(void) {
    unsigned int low, high;
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    return ((unsigned long long)high << 32) | low;
}

enum tensor_isa tensor_arch_detect(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return TENSOR_ISA_SCALAR;
    int osxsave = (ecx >> 27) & 1, fma = (ecx >> 12) & 1, f16c = (ecx >> 29) & 1;
    if (!osxsave || !fma || !f16c) return TENSOR_ISA_SCALAR;
    unsigned long long xcr0 = read_xcr0();
    if ((xcr0 & XCR0_AVX) != XCR0_AVX) return TENSOR_ISA_SCALAR;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return TENSOR_ISA_SCALAR;
    int avx2 = (ebx >> 5) & 1;
    if (!avx2) return TENSOR_ISA_SCALAR;
    int avx512f = (ebx >> 16) & 1, avx512dq = (ebx >> 17) & 1, avx512bw = (ebx >> 30) & 1;
    int avx512vl = (ebx >> 31) & 1, avx512vnni = (ecx >> 11) & 1;
    if (avx512f && avx512dq && avx512bw && avx512vl && avx512vnni &&
        (xcr0 & XCR0_AVX512) == XCR0_AVX512)
        return TENSOR_ISA_AVX512;
    return TENSOR_ISA_AVX2;
}

const char *tensor_arch_name(void) {
    return "x86_64";
}
