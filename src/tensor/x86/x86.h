/* x86.h -- the x86-64 kernels (AVX2 in *_avx2.c, AVX-512 in *_avx512.c) that
 * tables.c puts in the AVX2 and AVX-512 tables. Each file is compiled for
 * its own instruction set (CMake), so nothing here runs unless detect.c
 * found the CPU and the operating system support it. Only src/tensor/x86
 * includes this header. */
#ifndef LOCKSTEP_TENSOR_X86_H
#define LOCKSTEP_TENSOR_X86_H

#include "tensor/tensor_internal.h"

/* The AVX2 row dots of the types without a matmul kernel of their own. */
#define TENSOR_DECLARE_ROW_DOT_AVX2(t)                                                             \
    float tensor_row_dot_##t##_avx2(const void *w, const void *x, int n);
TENSOR_DECLARE_ROW_DOT_AVX2(q4_1)
TENSOR_DECLARE_ROW_DOT_AVX2(q5_0)
TENSOR_DECLARE_ROW_DOT_AVX2(q5_1)
TENSOR_DECLARE_ROW_DOT_AVX2(iq4_nl)
TENSOR_DECLARE_ROW_DOT_AVX2(q2_k)
TENSOR_DECLARE_ROW_DOT_AVX2(q3_k)
TENSOR_DECLARE_ROW_DOT_AVX2(q4_k)
TENSOR_DECLARE_ROW_DOT_AVX2(q5_k)
TENSOR_DECLARE_ROW_DOT_AVX2(q6_k)
TENSOR_DECLARE_ROW_DOT_AVX2(iq4_xs)
TENSOR_DECLARE_ROW_DOT_AVX2(bf16)
#undef TENSOR_DECLARE_ROW_DOT_AVX2

/* Multi-column row dots (AVX2) of the types of Q4_K_M / Q5_K_M / Q6_K
 * and IQ4_XS files. */
void tensor_row_dots_q4_k_avx2(float *out, const void *w, const void *x, size_t x_stride, int n);
void tensor_row_dots_q5_k_avx2(float *out, const void *w, const void *x, size_t x_stride, int n);
void tensor_row_dots_q6_k_avx2(float *out, const void *w, const void *x, size_t x_stride, int n);
void tensor_row_dots_iq4_xs_avx2(float *out, const void *w, const void *x, size_t x_stride, int n);
/* AVX-512 row dots of Q4_K, Q5_K and Q6_K, single and multi-column. */
float tensor_row_dot_q4_k_avx512(const void *w, const void *x, int n);
float tensor_row_dot_q5_k_avx512(const void *w, const void *x, int n);
float tensor_row_dot_q6_k_avx512(const void *w, const void *x, int n);
void tensor_row_dots_q4_k_avx512(float *out, const void *w, const void *x, size_t x_stride, int n);
void tensor_row_dots_q5_k_avx512(float *out, const void *w, const void *x, size_t x_stride, int n);
void tensor_row_dots_q6_k_avx512(float *out, const void *w, const void *x, size_t x_stride, int n);
/* AVX-512 row dots of Q4_1, Q5_0, Q5_1 and IQ4_NL (the AVX2 ones' bits). */
float tensor_row_dot_q4_1_avx512(const void *w, const void *x, int n);
float tensor_row_dot_q5_0_avx512(const void *w, const void *x, int n);
float tensor_row_dot_q5_1_avx512(const void *w, const void *x, int n);
float tensor_row_dot_iq4_nl_avx512(const void *w, const void *x, int n);

/* AVX2 kernels (matmul_avx2.c, ops_avx2.c). */
void tensor_matmul_f32_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                            void *scratch);
void tensor_matmul_f16_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                            void *scratch);
void tensor_matmul_q8_0_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch);
void tensor_matmul_q4_0_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch);
size_t tensor_matmul_scratch_avx2(enum tensor_type type, int cols, int batch);
/* Q8_0 in panel layout, every batch size (matmul_panels_avx2.c). */
void tensor_matmul_q8_0_panels_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                                    void *scratch);
void tensor_matmul_q8_0_panels_parts_avx2(const struct tensor_matmul_job *jobs, int n_parts,
                                          int row_begin, int row_end, void *scratch);
void tensor_matmul_q4_0_panels_avx2(const struct tensor_matmul_job *job, int row_begin, int row_end,
                                    void *scratch);
void tensor_quantize_x_avx2(int8_t *qs, float *d, int32_t *bias, const float *x, int n,
                            int32_t offset);
void tensor_rmsnorm_avx2(float *out, const float *x, const float *weight, int n, float eps);
void tensor_softmax_avx2(float *x, int n);
void tensor_exp_weights_avx2(float *out, const float *x, int n, float shift, float divisor,
                             float floor);
void tensor_swiglu_avx2(float *out, const float *gate, const float *up, int n);
int tensor_rope_turn_vectors_avx2(float *head, int pairs, const float *cosines, const float *sines,
                                  enum tensor_rope_style style);
float tensor_dot_avx2(const float *a, const float *b, int n);
void tensor_axpy_avx2(float *y, float a, const float *x, int n);
void tensor_scale_avx2(float *x, float a, int n);
void tensor_quantize_q8_k_avx2(void *out, const float *x, int64_t n);
void tensor_dot_columns_avx2(float *out, const float *q, const void *columns, enum tensor_type type,
                             int n_rows, int n, int stride);
void tensor_dot_q8_0_keys_avx2(float *out, const struct tensor_q8_0_query *query, const void *keys,
                               int n_rows, int n, int stride);
void tensor_weighted_sum_avx2(float *out, const float *weights, const void *rows,
                              enum tensor_type type, int n_rows, int n);
void tensor_dot_columns_tile_avx2(const struct tensor_tile *tile, const void *columns,
                                  enum tensor_type type, int n_rows, int n, int stride);
void tensor_weighted_sum_tile_avx2(const struct tensor_tile *tile, const void *rows,
                                   enum tensor_type type, int n_rows, int n);
void tensor_fp16_from_fp32_avx2(uint16_t *out, const float *x, int n);

/* AVX-512 kernels (matmul_avx512.c, ops_avx512.c). */
void tensor_matmul_q8_0_avx512(const struct tensor_matmul_job *job, int row_begin, int row_end,
                               void *scratch);
void tensor_matmul_q4_0_avx512(const struct tensor_matmul_job *job, int row_begin, int row_end,
                               void *scratch);
size_t tensor_matmul_scratch_avx512(enum tensor_type type, int cols, int batch);
/* Q4_0 GEMV for small batches (matmul_gemv_avx512.c); scratch holds
 * tensor_gemv_scratch_avx512 bytes (the activations laid out for it). */
void tensor_gemv_q4_0_avx512(const struct tensor_matmul_job *job, int row_begin, int row_end,
                             void *scratch);
size_t tensor_gemv_scratch_avx512(int cols, int batch);
/* Q8_0 in panel layout, every batch size (matmul_panels_avx512.c). */
void tensor_matmul_q8_0_panels_avx512(const struct tensor_matmul_job *job, int row_begin,
                                      int row_end, void *scratch);
void tensor_matmul_q8_0_panels_parts_avx512(const struct tensor_matmul_job *jobs, int n_parts,
                                            int row_begin, int row_end, void *scratch);
void tensor_exp_weights_avx512(float *out, const float *x, int n, float shift, float divisor,
                               float floor);
void tensor_swiglu_avx512(float *out, const float *gate, const float *up, int n);
int tensor_rope_turn_vectors_avx512(float *head, int pairs, const float *cosines,
                                    const float *sines, enum tensor_rope_style style);
void tensor_axpy_avx512(float *y, float a, const float *x, int n);
void tensor_scale_avx512(float *x, float a, int n);
void tensor_softmax_avx512(float *x, int n);
void tensor_quantize_q8_k_avx512(void *out, const float *x, int64_t n);
void tensor_dot_columns_avx512(float *out, const float *q, const void *columns,
                               enum tensor_type type, int n_rows, int n, int stride);
void tensor_dot_q8_0_keys_avx512(float *out, const struct tensor_q8_0_query *query,
                                 const void *keys, int n_rows, int n, int stride);
void tensor_weighted_sum_avx512(float *out, const float *weights, const void *rows,
                                enum tensor_type type, int n_rows, int n);
void tensor_dot_q8_0_keys_tile_avx512(float *out, size_t out_stride,
                                      const struct tensor_q8_0_query *queries, int n_queries,
                                      const void *keys, int n_rows, int n, int stride);
void tensor_dot_columns_tile_avx512(const struct tensor_tile *tile, const void *columns,
                                    enum tensor_type type, int n_rows, int n, int stride);
void tensor_weighted_sum_tile_avx512(const struct tensor_tile *tile, const void *rows,
                                     enum tensor_type type, int n_rows, int n);
void tensor_fp16_from_fp32_avx512(uint16_t *out, const float *x, int n);

#endif
