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

#endif
