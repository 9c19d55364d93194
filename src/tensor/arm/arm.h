/* arm.h -- the arm64 kernels (NEON in *_neon.c, dotprod in *_dotprod.c,
 * i8mm in *_i8mm.c) that tables.c puts in the NEON, dotprod and i8mm
 * tables. Each file is compiled for its own level of the architecture
 * (CMake), so nothing here runs unless detect.c found the CPU has it.
 * Every kernel gives the scalar reference's bits (tensor_internal.h): the
 * float steps of an x86 kernel, eight lanes as two NEON registers. Only
 * src/tensor/arm includes this header. */
#ifndef LOCKSTEP_TENSOR_ARM_H
#define LOCKSTEP_TENSOR_ARM_H

#include "tensor/tensor_internal.h"

/* ---- float ops, the activation quantizer, F32/F16 products ---- */

/* The per-row ops of ops.c and the activation quantizer (ops_neon.c). */
void tensor_quantize_x_neon(int8_t *qs, float *d, int32_t *bias, const float *x, int n,
                            int32_t offset);
void tensor_rmsnorm_neon(float *out, const float *x, const float *weight, int n, float eps);
void tensor_softmax_neon(float *x, int n);
void tensor_exp_weights_neon(float *out, const float *x, int n, float shift, float divisor,
                             float floor);
void tensor_swiglu_neon(float *out, const float *gate, const float *up, int n);
int tensor_rope_turn_vectors_neon(float *head, int pairs, const float *cosines, const float *sines,
                                  enum tensor_rope_style style);
float tensor_dot_neon(const float *a, const float *b, int n);
void tensor_axpy_neon(float *y, float a, const float *x, int n);
void tensor_scale_neon(float *x, float a, int n);
void tensor_dot_columns_neon(float *out, const float *q, const void *columns, enum tensor_type type,
                             int n_rows, int n, int stride);
void tensor_dot_q8_0_keys_neon(float *out, const struct tensor_q8_0_query *query, const void *keys,
                               int n_rows, int n, int stride);
void tensor_weighted_sum_neon(float *out, const float *weights, const void *rows,
                              enum tensor_type type, int n_rows, int n);
void tensor_fp16_from_fp32_neon(uint16_t *out, const float *x, int n);

/* The Q8_0 key dot with sdot (ops_dotprod.c). */
void tensor_dot_q8_0_keys_dotprod(float *out, const struct tensor_q8_0_query *query,
                                  const void *keys, int n_rows, int n, int stride);

/* F32 and F16 products, rows layout (matmul_float_neon.c). */
void tensor_matmul_f32_neon(const struct tensor_matmul_job *job, int row_begin, int row_end,
                            void *scratch);
void tensor_matmul_f16_neon(const struct tensor_matmul_job *job, int row_begin, int row_end,
                            void *scratch);

/* ---- quantized products ---- */

/* Q8_0 and Q4_0 products (matmul_neon.c, matmul_dotprod.c). */
void tensor_matmul_q8_0_neon(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch);
void tensor_matmul_q4_0_neon(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch);
void tensor_matmul_q8_0_dotprod(const struct tensor_matmul_job *job, int row_begin, int row_end,
                                void *scratch);
void tensor_matmul_q4_0_dotprod(const struct tensor_matmul_job *job, int row_begin, int row_end,
                                void *scratch);

/* ... for batches, with smmla (matmul_i8mm.c); a batch of one takes the
 * dotprod kernel. */
void tensor_matmul_q8_0_i8mm(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch);
void tensor_matmul_q4_0_i8mm(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch);

/* ---- row dots of the quantized types (quants_*_neon.c, *_dotprod.c) ---- */

/* Q4_K, Q5_K, Q6_K: single and multi-column (quants_k_neon.h). */
#define TENSOR_ARM_DECLARE_K_DOTS(isa)                                                             \
    float tensor_row_dot_q4_k_##isa(const void *w, const void *x, int n);                          \
    float tensor_row_dot_q5_k_##isa(const void *w, const void *x, int n);                          \
    float tensor_row_dot_q6_k_##isa(const void *w, const void *x, int n);                          \
    void tensor_row_dots_q4_k_##isa(float *out, const void *w, const void *x, size_t x_stride,     \
                                    int n);                                                        \
    void tensor_row_dots_q5_k_##isa(float *out, const void *w, const void *x, size_t x_stride,     \
                                    int n);                                                        \
    void tensor_row_dots_q6_k_##isa(float *out, const void *w, const void *x, size_t x_stride,     \
                                    int n);
TENSOR_ARM_DECLARE_K_DOTS(neon)
TENSOR_ARM_DECLARE_K_DOTS(dotprod)
#undef TENSOR_ARM_DECLARE_K_DOTS

/* Q4_1, Q5_0, Q5_1, IQ4_NL (quants_legacy_neon.h). */
#define TENSOR_ARM_DECLARE_LEGACY_DOTS(isa)                                                        \
    float tensor_row_dot_q4_1_##isa(const void *w, const void *x, int n);                          \
    float tensor_row_dot_q5_0_##isa(const void *w, const void *x, int n);                          \
    float tensor_row_dot_q5_1_##isa(const void *w, const void *x, int n);                          \
    float tensor_row_dot_iq4_nl_##isa(const void *w, const void *x, int n);
TENSOR_ARM_DECLARE_LEGACY_DOTS(neon)
TENSOR_ARM_DECLARE_LEGACY_DOTS(dotprod)
#undef TENSOR_ARM_DECLARE_LEGACY_DOTS

/* Q2_K, Q3_K, IQ4_XS (quants_k_low_neon.h). */
#define TENSOR_ARM_DECLARE_K_LOW_DOTS(isa)                                                         \
    float tensor_row_dot_q2_k_##isa(const void *w, const void *x, int n);                          \
    float tensor_row_dot_q3_k_##isa(const void *w, const void *x, int n);                          \
    float tensor_row_dot_iq4_xs_##isa(const void *w, const void *x, int n);
TENSOR_ARM_DECLARE_K_LOW_DOTS(neon)
TENSOR_ARM_DECLARE_K_LOW_DOTS(dotprod)
#undef TENSOR_ARM_DECLARE_K_LOW_DOTS

/* BF16 (quants_bf16_neon.c). */
float tensor_row_dot_bf16_neon(const void *w, const void *x, int n);

#endif
