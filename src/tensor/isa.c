/* isa.c -- instruction-set detection and the kernel dispatch table.
 *
 * The SIMD kernels live in files compiled for their instruction set
 * (*_avx2.c, *_avx512.c); nothing calls them unless cpuid says the CPU and
 * the operating system support those registers. The table in use is chosen
 * on first use and can be forced by tensor_isa_select (tests compare paths)
 * or capped for the whole process by the environment variable LOCKSTEP_ISA
 * (scalar, avx2 or avx512), so one machine can run and measure every path
 * it has.
 * The public kernels in ops.c and matmul.c go through it. */
#include "tensor_internal.h"

#include <cpuid.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* XCR0 bits: the OS saves SSE+AVX state (1, 2) and AVX-512 state (5, 6, 7). */
#define XCR0_AVX    0x06u
#define XCR0_AVX512 0xe6u

static unsigned long long read_xcr0(void) {
    unsigned int low, high;
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    return ((unsigned long long)high << 32) | low;
}

static enum tensor_isa detect_isa(void) {
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

/* detect_isa capped by LOCKSTEP_ISA, when it names a set. */
static enum tensor_isa capped_isa(void) {
    enum tensor_isa isa = detect_isa();
    const char *cap = getenv("LOCKSTEP_ISA");
    for (int i = TENSOR_ISA_SCALAR; cap && i <= TENSOR_ISA_AVX512; i++)
        if (strcmp(cap, tensor_isa_name((enum tensor_isa)i)) == 0 && i < (int)isa)
            isa = (enum tensor_isa)i;
    return isa;
}

static const struct tensor_kernels *kernels_for(enum tensor_isa isa) {
    switch (isa) {
    case TENSOR_ISA_AVX512:
        return &tensor_kernels_avx512;
    case TENSOR_ISA_AVX2:
        return &tensor_kernels_avx2;
    case TENSOR_ISA_SCALAR:
        break;
    }
    return &tensor_kernels_scalar;
}

static _Atomic int best_isa = -1;                              /* cached capped_isa() */
static _Atomic(const struct tensor_kernels *) current_kernels; /* NULL until first use */

enum tensor_isa tensor_isa_best(void) {
    int isa = atomic_load_explicit(&best_isa, memory_order_relaxed);
    if (isa < 0) {
        isa = (int)capped_isa();
        atomic_store_explicit(&best_isa, isa, memory_order_relaxed);
    }
    return (enum tensor_isa)isa;
}

const struct tensor_kernels *tensor_kernels_current(void) {
    const struct tensor_kernels *k = atomic_load_explicit(&current_kernels, memory_order_acquire);
    if (!k) {
        k = kernels_for(tensor_isa_best());
        atomic_store_explicit(&current_kernels, k, memory_order_release);
    }
    return k;
}

int tensor_isa_select(enum tensor_isa isa) {
    if ((int)isa < (int)TENSOR_ISA_SCALAR || (int)isa > (int)tensor_isa_best()) return -1;
    atomic_store_explicit(&current_kernels, kernels_for(isa), memory_order_release);
    return 0;
}

enum tensor_isa tensor_isa_current(void) {
    return tensor_kernels_current()->isa;
}

const char *tensor_isa_name(enum tensor_isa isa) {
    switch (isa) {
    case TENSOR_ISA_SCALAR:
        return "scalar";
    case TENSOR_ISA_AVX2:
        return "avx2";
    case TENSOR_ISA_AVX512:
        return "avx512";
    }
    return "unknown";
}

/* The row dots (quants.h) of every type without a matmul kernel of its
 * own, in one instruction set's versions (tensor_row_dot_T_isa). */
#define ROW_DOTS(isa)                                                                              \
    {                                                                                              \
        [TENSOR_Q4_1] = tensor_row_dot_q4_1_##isa, [TENSOR_Q5_0] = tensor_row_dot_q5_0_##isa,      \
        [TENSOR_Q5_1] = tensor_row_dot_q5_1_##isa, [TENSOR_IQ4_NL] = tensor_row_dot_iq4_nl_##isa,  \
        [TENSOR_Q2_K] = tensor_row_dot_q2_k_##isa, [TENSOR_Q3_K] = tensor_row_dot_q3_k_##isa,      \
        [TENSOR_Q4_K] = tensor_row_dot_q4_k_##isa, [TENSOR_Q5_K] = tensor_row_dot_q5_k_##isa,      \
        [TENSOR_Q6_K] = tensor_row_dot_q6_k_##isa, [TENSOR_IQ4_XS] = tensor_row_dot_iq4_xs_##isa,  \
        [TENSOR_BF16] = tensor_row_dot_bf16_##isa,                                                 \
    }

/* The multi-column row dots (the k-quants'), as ROW_DOTS. */
#define ROW_DOTS_COLUMNS(isa)                                                                      \
    {                                                                                              \
        [TENSOR_Q4_K] = tensor_row_dots_q4_k_##isa, [TENSOR_Q5_K] = tensor_row_dots_q5_k_##isa,    \
        [TENSOR_Q6_K] = tensor_row_dots_q6_k_##isa,                                                \
    }

const struct tensor_kernels tensor_kernels_scalar = {
    .isa = TENSOR_ISA_SCALAR,
    .matmul_f32 = tensor_matmul_f32_scalar,
    .matmul_f16 = tensor_matmul_f16_scalar,
    .matmul_q8_0 = tensor_matmul_q8_0_scalar,
    .matmul_q4_0 = tensor_matmul_q4_0_scalar,
    .matmul_q8_0_panels = tensor_matmul_q8_0_panels_scalar,
    .matmul_q4_0_panels = tensor_matmul_q4_0_panels_scalar,
    .panels_preferred = 0,
    .panels_interleaved = 0,
    .matmul_scratch = tensor_matmul_scratch_none,
    .q8_0_offset = 0,
    .q4_0_offset = 0,
    .quantize_x = tensor_quantize_x_scalar,
    .rmsnorm = tensor_rmsnorm_scalar,
    .softmax = tensor_softmax_scalar,
    .exp_weights = tensor_exp_weights_scalar,
    .swiglu = tensor_swiglu_scalar,
    .rope_turn_vectors = tensor_rope_turn_vectors_none,
    .dot = tensor_dot_scalar,
    .axpy = tensor_axpy_scalar,
    .dot_columns = tensor_dot_columns_scalar,
    .dot_q8_0_keys = tensor_dot_q8_0_keys_scalar,
    .weighted_sum = tensor_weighted_sum_scalar,
    .fp16_from_fp32 = tensor_fp16_from_fp32_scalar,
    .row_dot = ROW_DOTS(scalar),
};

const struct tensor_kernels tensor_kernels_avx2 = {
    .isa = TENSOR_ISA_AVX2,
    .matmul_f32 = tensor_matmul_f32_avx2,
    .matmul_f16 = tensor_matmul_f16_avx2,
    .matmul_q8_0 = tensor_matmul_q8_0_avx2,
    .matmul_q4_0 = tensor_matmul_q4_0_avx2,
    .matmul_q8_0_panels = tensor_matmul_q8_0_panels_avx2,
    .matmul_q8_0_panels_parts = tensor_matmul_q8_0_panels_parts_avx2,
    .matmul_q4_0_panels = tensor_matmul_q4_0_panels_avx2,
    .panels_preferred = 1,
    .q4_0_panels_preferred = 1,
    .panels_interleaved = 1,
    .matmul_scratch = tensor_matmul_scratch_avx2,
    .q8_0_offset = 0,
    .q4_0_offset = 8,
    .quantize_x = tensor_quantize_x_avx2,
    .rmsnorm = tensor_rmsnorm_avx2,
    .softmax = tensor_softmax_avx2,
    .exp_weights = tensor_exp_weights_avx2,
    .swiglu = tensor_swiglu_avx2,
    .rope_turn_vectors = tensor_rope_turn_vectors_avx2,
    .dot = tensor_dot_avx2,
    .axpy = tensor_axpy_avx2,
    .dot_columns = tensor_dot_columns_avx2,
    .dot_q8_0_keys = tensor_dot_q8_0_keys_avx2,
    .weighted_sum = tensor_weighted_sum_avx2,
    .fp16_from_fp32 = tensor_fp16_from_fp32_avx2,
    .row_dot = ROW_DOTS(avx2),
    .row_dots = ROW_DOTS_COLUMNS(avx2),
};

const struct tensor_kernels tensor_kernels_avx512 = {
    .isa = TENSOR_ISA_AVX512,
    .matmul_f32 = tensor_matmul_f32_avx512,
    .matmul_f16 = tensor_matmul_f16_avx512,
    .matmul_q8_0 = tensor_matmul_q8_0_avx512,
    .matmul_q4_0 = tensor_matmul_q4_0_avx512,
    .matmul_q8_0_panels = tensor_matmul_q8_0_panels_avx512,
    .matmul_q8_0_panels_parts = tensor_matmul_q8_0_panels_parts_avx512,
    .matmul_q4_0_panels = tensor_matmul_q4_0_panels_scalar,
    .panels_preferred = 1,
    .panels_interleaved = 1,
    .matmul_scratch = tensor_matmul_scratch_avx512,
    .q8_0_offset = 128,
    .q4_0_offset = 8,
    .quantize_x = tensor_quantize_x_avx512,
    .rmsnorm = tensor_rmsnorm_avx512,
    .softmax = tensor_softmax_avx512,
    .exp_weights = tensor_exp_weights_avx512,
    .swiglu = tensor_swiglu_avx512,
    .rope_turn_vectors = tensor_rope_turn_vectors_avx512,
    .dot = tensor_dot_avx512,
    .axpy = tensor_axpy_avx512,
    .dot_columns = tensor_dot_columns_avx512,
    .dot_q8_0_keys = tensor_dot_q8_0_keys_avx512,
    .weighted_sum = tensor_weighted_sum_avx512,
    .fp16_from_fp32 = tensor_fp16_from_fp32_avx512,
    .row_dot = ROW_DOTS(avx512),
    .row_dots = ROW_DOTS_COLUMNS(avx512),
};
