/* test_tensor_quants_legacy.c -- Q4_1, Q5_0, Q5_1 and IQ4_NL weights:
 *  - hand-built blocks dequantize to ggml's formulas (fifth bits, minimums,
 *    the IQ4 table);
 *  - llama.cpp's own files (../shared/fixtures/quant) dequantize to their
 *    F32 sources within each type's error, and this quantizer comes within
 *    1.3x of llama.cpp's error on the same rows (Q4_1 / Q5_0 / Q5_1 write
 *    the very blocks llama-quantize wrote);
 *  - scalar row dots equal the dot of the dequantized operands within
 *    float rounding, AVX2 row dots have the scalar ones' bits (the scalar
 *    dots spell out the AVX2 lanes, the canonical order), and AVX-512 row
 *    dots have the AVX2 ones' bits;
 *  - tensor_matmul with these weights is batch invariant, equals the row
 *    dots, and its column parts add up to the whole. */
#include "model/model.h"
#include "tensor/quants.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct legacy_type {
    enum tensor_type type;
    enum tensor_type dot_type; /* TENSOR_Q8_0 or TENSOR_Q8_1 */
    tensor_row_dot_fn scalar, avx2, avx512;
    float file_error;   /* bound on the relative RMS error of llama.cpp's files */
    int ggml_quantizer; /* 1: tensor_quantize_row writes llama-quantize's blocks */
};

/* File bounds: ~1.5x the worst tensor measured (Q4_1 0.0791, Q5_0 0.0434,
 * Q5_1 0.0382, IQ4_NL 0.0643); a layout error gives ~1. */
static const struct legacy_type types[] = {
    {TENSOR_Q4_1, TENSOR_Q8_1, tensor_row_dot_q4_1_scalar, tensor_row_dot_q4_1_avx2,
     tensor_row_dot_q4_1_avx512, 0.12f, 1},
    {TENSOR_Q5_0, TENSOR_Q8_0, tensor_row_dot_q5_0_scalar, tensor_row_dot_q5_0_avx2,
     tensor_row_dot_q5_0_avx512, 0.065f, 1},
    {TENSOR_Q5_1, TENSOR_Q8_1, tensor_row_dot_q5_1_scalar, tensor_row_dot_q5_1_avx2,
     tensor_row_dot_q5_1_avx512, 0.057f, 1},
    {TENSOR_IQ4_NL, TENSOR_Q8_0, tensor_row_dot_iq4_nl_scalar, tensor_row_dot_iq4_nl_avx2,
     tensor_row_dot_iq4_nl_avx512, 0.096f, 0},
};
#define N_TYPES (int)(sizeof(types) / sizeof(types[0]))

static const struct legacy_type *find_type(enum tensor_type type) {
    for (int t = 0; t < N_TYPES; t++)
        if (types[t].type == type) return &types[t];
    return NULL;
}

/* ---- 1. known answers ---- */

static void set_qh(uint8_t qh[4], uint32_t bits) {
    memcpy(qh, &bits, sizeof(bits));
}

static void test_known_q4_1(void) {
    struct tensor_block_q4_1 b;
    b.d = tensor_fp32_to_fp16(0.5f);
    b.m = tensor_fp32_to_fp16(-1.25f);
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float out[32];
    tensor_dequantize_row(out, &b, TENSOR_Q4_1, 32);
    /* element j: low nibble j; element j + 16: high nibble 15 - j */
    static const int elements[] = {0, 3, 15, 16, 20, 31};
    for (int e = 0; e < 6; e++) {
        int i = elements[e];
        int q = i < 16 ? i : 15 - (i - 16);
        CHECK_MSG(out[i] == 0.5f * (float)q - 1.25f, "q4_1 element %d: %g", i, out[i]);
    }
}

static void test_known_q5(void) {
    struct tensor_block_q5_0 b0;
    struct tensor_block_q5_1 b1;
    b0.d = b1.d = tensor_fp32_to_fp16(0.25f);
    b1.m = tensor_fp32_to_fp16(3.0f);
    /* fifth bits of elements 0, 15, 16, 17 and 31 */
    uint32_t bits = 1u | 1u << 15 | 1u << 16 | 1u << 17 | 1u << 31;
    set_qh(b0.qh, bits);
    set_qh(b1.qh, bits);
    for (int j = 0; j < 16; j++) b0.qs[j] = b1.qs[j] = (uint8_t)(((j * 7) & 15) | ((j ^ 9) << 4));
    float out0[32], out1[32];
    tensor_dequantize_row(out0, &b0, TENSOR_Q5_0, 32);
    tensor_dequantize_row(out1, &b1, TENSOR_Q5_1, 32);
    static const int elements[] = {0, 1, 15, 16, 17, 18, 30, 31};
    for (int e = 0; e < 8; e++) {
        int i = elements[e];
        int nibble = i < 16 ? (i * 7) & 15 : (i - 16) ^ 9;
        int q = nibble | (int)((bits >> i) & 1) << 4;
        CHECK_MSG(out0[i] == 0.25f * (float)(q - 16), "q5_0 element %d: %g", i, out0[i]);
        CHECK_MSG(out1[i] == 0.25f * (float)q + 3.0f, "q5_1 element %d: %g", i, out1[i]);
    }
    CHECK(out0[31] == 0.25f * (float)((15 ^ 9) + 16 - 16)); /* bit 31: the top of qh */
    CHECK(out0[2] == 0.25f * (float)(14 - 16));             /* no fifth bit */
}

static void test_known_iq4_nl(void) {
    /* ggml's kvalues_iq4nl */
    static const int8_t expected[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};
    CHECK(memcmp(tensor_iq4_values, expected, 16) == 0);
    struct tensor_block_iq4_nl b;
    b.d = tensor_fp32_to_fp16(-0.125f);
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float out[32];
    tensor_dequantize_row(out, &b, TENSOR_IQ4_NL, 32);
    CHECK(out[0] == -0.125f * -127.0f && out[15] == -0.125f * 113.0f);
    CHECK(out[16] == -0.125f * 113.0f && out[31] == -0.125f * -127.0f);
    CHECK(out[8] == -0.125f * 1.0f && out[24] == -0.125f * -10.0f);
}

static void test_quantizer_known(void) {
    /* Q5_0: the extreme -8 gives d = 0.5 and lands on quant 0; 7.5 on 31 */
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) * 0.5f;
    x[0] = -8.0f;
    struct tensor_block_q5_0 b0;
    tensor_quantize_row(TENSOR_Q5_0, &b0, x, 32);
    float back[32];
    tensor_dequantize_row(back, &b0, TENSOR_Q5_0, 32);
    CHECK(b0.d == tensor_fp32_to_fp16(0.5f));
    CHECK_MSG(memcmp(back, x, sizeof(x)) == 0, "q5_0 of a grid of its own steps is exact");
    /* Q5_1 / Q4_1: a grid of 31 (15) steps from the minimum is exact */
    struct tensor_block_q5_1 b1;
    for (int i = 0; i < 32; i++) x[i] = -2.0f + 0.25f * (float)i;
    tensor_quantize_row(TENSOR_Q5_1, &b1, x, 32);
    tensor_dequantize_row(back, &b1, TENSOR_Q5_1, 32);
    CHECK(b1.d == tensor_fp32_to_fp16(0.25f) && b1.m == tensor_fp32_to_fp16(-2.0f));
    CHECK_MSG(memcmp(back, x, sizeof(x)) == 0, "q5_1 of a grid of its own steps is exact");
    struct tensor_block_q4_1 b4;
    for (int i = 0; i < 32; i++) x[i] = -2.0f + 0.5f * (float)((i * 3) % 16);
    tensor_quantize_row(TENSOR_Q4_1, &b4, x, 32);
    tensor_dequantize_row(back, &b4, TENSOR_Q4_1, 32);
    CHECK(b4.d == tensor_fp32_to_fp16(0.5f) && b4.m == tensor_fp32_to_fp16(-2.0f));
    CHECK_MSG(memcmp(back, x, sizeof(x)) == 0, "q4_1 of a grid of its own steps is exact");
    /* IQ4_NL: values on the table at scale 1/64 come back exactly */
    struct tensor_block_iq4_nl bi;
    for (int i = 0; i < 32; i++) x[i] = (float)tensor_iq4_values[(i * 5) % 16] / 64.0f;
    tensor_quantize_row(TENSOR_IQ4_NL, &bi, x, 32);
    tensor_dequantize_row(back, &bi, TENSOR_IQ4_NL, 32);
    CHECK_MSG(memcmp(back, x, sizeof(x)) == 0, "iq4_nl of table values: d %g",
              tensor_fp16_to_fp32(bi.d));
    /* all zeros */
    memset(x, 0, sizeof(x));
    tensor_quantize_row(TENSOR_IQ4_NL, &bi, x, 32);
    tensor_dequantize_row(back, &bi, TENSOR_IQ4_NL, 32);
    CHECK(back[0] == 0.0f && back[31] == 0.0f);
}

/* ---- 2, 3. llama.cpp's files ---- */

/* Relative RMS error of n values against the reference. */
static double relative_rms(const float *values, const float *reference, size_t n) {
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)values[i] - reference[i];
        err += d * d;
        norm += (double)reference[i] * reference[i];
    }
    return norm > 0 ? sqrt(err / norm) : sqrt(err);
}

struct file_stats {
    int tensors;
    double worst_file, worst_ratio;
    double sum_file, sum_mine; /* for the mean errors */
    size_t blocks, same_blocks;
};

/* Compares one tensor of a legacy type with its F32 source. */
static void check_tensor(const struct gguf_tensor *q, const struct gguf_tensor *src,
                         const struct legacy_type *lt, struct file_stats *stats) {
    size_t n = (size_t)q->n_elements;
    float *source = malloc(n * sizeof(float)), *values = malloc(n * sizeof(float));
    tensor_dequantize_row(source, src->data, src->type, (int64_t)n);
    tensor_dequantize_row(values, q->data, q->type, (int64_t)n);
    double file_error = relative_rms(values, source, n);

    size_t bytes = tensor_row_bytes(q->type, (int64_t)n);
    char *mine = malloc(bytes);
    tensor_quantize_row(q->type, mine, source, (int64_t)n);
    tensor_dequantize_row(values, mine, q->type, (int64_t)n);
    double my_error = relative_rms(values, source, n);

    size_t block_bytes = tensor_type_block_bytes(q->type);
    for (size_t off = 0; off < bytes; off += block_bytes)
        stats->same_blocks += memcmp(mine + off, (const char *)q->data + off, block_bytes) == 0;
    stats->blocks += bytes / block_bytes;
    stats->tensors++;
    stats->sum_file += file_error;
    stats->sum_mine += my_error;
    if (file_error > stats->worst_file) stats->worst_file = file_error;
    if (my_error / file_error > stats->worst_ratio) stats->worst_ratio = my_error / file_error;

    CHECK_MSG(file_error < lt->file_error, "%.*s (%s): llama.cpp file error %.4f", (int)q->name.len,
              q->name.data, tensor_type_name(q->type), file_error);
    CHECK_MSG(my_error <= 1.3 * file_error, "%.*s (%s): error %.4f, llama.cpp's %.4f",
              (int)q->name.len, q->name.data, tensor_type_name(q->type), my_error, file_error);
    free(source);
    free(values);
    free(mine);
}

/* 1 if this build reads the k-quants that llama-quantize mixes into its
 * files (Q6_K outputs, Q4_K / Q5_K in the _k_m mixes). */
static int kquants_supported(void) {
    return tensor_type_is_valid(TENSOR_Q4_K) && tensor_type_is_valid(TENSOR_Q5_K) &&
           tensor_type_is_valid(TENSOR_Q6_K);
}

static int check_file(const char *quant_name, const char *source_name) {
    char qpath[512], spath[512], err[256];
    test_shared_path(qpath, sizeof(qpath), quant_name);
    test_shared_path(spath, sizeof(spath), source_name);
    if (!test_require_file(qpath) || !test_require_file(spath)) return 0;
    struct gguf_file *qf = NULL, *sf = NULL;
    if (gguf_open(&qf, qpath, err, sizeof(err)) != 0 && !kquants_supported()) {
        printf("%s: not read (it mixes in k-quants, which this build lacks): %s\n", quant_name,
               err);
        return 1;
    }
    if (!qf || gguf_open(&sf, spath, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s", err);
        if (qf) gguf_close(qf);
        return 1;
    }
    struct file_stats stats[N_TYPES];
    memset(stats, 0, sizeof(stats));
    for (uint64_t t = 0; t < qf->n_tensors; t++) {
        const struct gguf_tensor *q = &qf->tensors[t];
        const struct legacy_type *lt = find_type(q->type);
        if (!lt) continue;
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)q->name.len, q->name.data);
        const struct gguf_tensor *src = gguf_find_tensor(sf, name);
        CHECK_MSG(src && src->n_elements == q->n_elements, "%s: no source tensor %s", quant_name,
                  name);
        if (src && src->n_elements == q->n_elements) check_tensor(q, src, lt, &stats[lt - types]);
    }
    for (int t = 0; t < N_TYPES; t++) {
        if (!stats[t].tensors) continue;
        const struct file_stats *st = &stats[t];
        printf("%s %s, %d tensors: mean error llama.cpp %.4f, mine %.4f; worst llama.cpp %.4f, "
               "worst ratio %.3f; %zu of %zu blocks identical\n",
               quant_name, tensor_type_name(types[t].type), st->tensors, st->sum_file / st->tensors,
               st->sum_mine / st->tensors, st->worst_file, st->worst_ratio, st->same_blocks,
               st->blocks);
        /* ggml's reference quantizer: only float-contraction ties may differ */
        if (types[t].ggml_quantizer)
            CHECK_MSG(stats[t].same_blocks >= stats[t].blocks - stats[t].blocks / 1000,
                      "%s: %zu of %zu blocks differ from llama-quantize's", quant_name,
                      stats[t].blocks - stats[t].same_blocks, stats[t].blocks);
    }
    gguf_close(qf);
    gguf_close(sf);
    return 1;
}

static int test_files(void) {
    static const char *const kjv[] = {"q4_1", "q5_0", "q5_1", "q4_k_m", "q5_k_m"};
    static const char *const rand[] = {"q4_1", "q5_0", "q5_1", "iq4_nl"};
    char name[128];
    for (size_t i = 0; i < sizeof(kjv) / sizeof(kjv[0]); i++) {
        snprintf(name, sizeof(name), "fixtures/quant/kjv2m-%s.gguf", kjv[i]);
        if (!check_file(name, "models/kjv2m-f32.gguf")) return 0;
    }
    for (size_t i = 0; i < sizeof(rand) / sizeof(rand[0]); i++) {
        snprintf(name, sizeof(name), "fixtures/quant/rand3m-%s.gguf", rand[i]);
        if (!check_file(name, "fixtures/quant/rand3m-f32.gguf")) return 0;
    }
    return 1;
}

/* ---- 4. row dots ---- */

/* n floats quantized to the dot type, and those quants as floats. */
static void *quantize_activations(enum tensor_type dot_type, const float *x, float *back, int n) {
    void *q = malloc(tensor_row_bytes(dot_type, n));
    if (dot_type == TENSOR_Q8_1) {
        tensor_quantize_q8_1(q, x, n);
        tensor_dequantize_q8_1(back, q, n);
    } else {
        tensor_quantize_q8_0(q, x, n);
        tensor_dequantize_row(back, q, TENSOR_Q8_0, n);
    }
    return q;
}

static void check_row_dot(const struct legacy_type *lt, int n, uint64_t *state) {
    float *w = test_random_floats(n, state), *x = test_random_floats(n, state);
    /* weights offset per row, so minimums matter */
    for (int i = 0; i < n; i++) w[i] = w[i] * 0.3f + 0.1f;
    float *wf = malloc(sizeof(float) * (size_t)n), *xf = malloc(sizeof(float) * (size_t)n);
    void *wq = malloc(tensor_row_bytes(lt->type, n));
    tensor_quantize_row(lt->type, wq, w, n);
    tensor_dequantize_row(wf, wq, lt->type, n);
    void *xq = quantize_activations(lt->dot_type, x, xf, n);
    double exact = 0, magnitude = 0;
    for (int i = 0; i < n; i++) {
        exact += (double)wf[i] * xf[i];
        magnitude += fabs((double)wf[i] * xf[i]);
    }
    float scalar = lt->scalar(wq, xq, n);
    CHECK_MSG(fabs(scalar - exact) <= 1e-4 * magnitude, "%s n %d: scalar %.7g, exact %.7g (%.2g)",
              tensor_type_name(lt->type), n, scalar, exact, fabs(scalar - exact) / magnitude);
    if (tensor_isa_best() >= TENSOR_ISA_AVX2) {
        float avx2 = lt->avx2(wq, xq, n);
        CHECK_MSG(test_same_bits(&avx2, &scalar, 1), "%s n %d: avx2 %a, scalar %a",
                  tensor_type_name(lt->type), n, avx2, scalar);
        if (tensor_isa_best() >= TENSOR_ISA_AVX512) {
            /* the same lanes and float steps (quants_legacy_avx512.c) */
            float avx512 = lt->avx512(wq, xq, n);
            CHECK_MSG(test_same_bits(&avx512, &avx2, 1), "%s n %d: avx512 %a, avx2 %a",
                      tensor_type_name(lt->type), n, avx512, avx2);
        }
    }
    free(w);
    free(x);
    free(wf);
    free(xf);
    free(wq);
    free(xq);
}

static void test_row_dots(void) {
    uint64_t state = 99;
    /* 96: an odd number of blocks, the SIMD loops' tail */
    static const int sizes[] = {96, 256, 512, 4096};
    for (int t = 0; t < N_TYPES; t++)
        for (int s = 0; s < 4; s++)
            for (int rep = 0; rep < 4; rep++) check_row_dot(&types[t], sizes[s], &state);
}

/* ---- 5. products ---- */

#define ROWS  24
#define COLS  512
#define BATCH 5

static void check_matmul(struct tensor_pool *pool, const struct legacy_type *lt, const void *wq,
                         const float *x) {
    struct tensor_matrix w = tensor_matrix_make(wq, lt->type, ROWS, COLS);
    float out[BATCH * ROWS], one[ROWS], parts[2 * BATCH * ROWS];
    const char *isa = tensor_isa_name(tensor_isa_current());
    tensor_row_dot_fn row_dot = tensor_isa_current() == TENSOR_ISA_SCALAR ? lt->scalar
                                : tensor_isa_current() == TENSOR_ISA_AVX2 ? lt->avx2
                                                                          : lt->avx512;
    CHECK(tensor_matmul(pool, out, &w, x, BATCH) == 0);
    float xf[COLS];
    for (int b = 0; b < BATCH; b++) {
        CHECK(tensor_matmul(pool, one, &w, x + b * COLS, 1) == 0);
        CHECK_MSG(memcmp(one, out + b * ROWS, sizeof(one)) == 0, "%s %s: batch row %d differs", isa,
                  tensor_type_name(lt->type), b);
        void *xq = quantize_activations(lt->dot_type, x + b * COLS, xf, COLS);
        for (int r = 0; r < ROWS; r++) {
            float expected = row_dot((const char *)wq + r * w.row_stride, xq, COLS);
            CHECK_MSG(memcmp(&expected, &out[b * ROWS + r], sizeof(float)) == 0,
                      "%s %s: out[%d][%d] %g, row dot %g", isa, tensor_type_name(lt->type), b, r,
                      out[b * ROWS + r], expected);
        }
        free(xq);
    }
    CHECK(tensor_matmul_parts(pool, parts, &w, x, BATCH, 2) == 0);
    for (int i = 0; i < BATCH * ROWS; i++) {
        float sum = parts[i] + parts[BATCH * ROWS + i];
        CHECK_MSG(fabsf(sum - out[i]) <= 1e-4f * (1 + fabsf(out[i])),
                  "%s %s: parts add to %g, whole %g", isa, tensor_type_name(lt->type), sum, out[i]);
    }
}

static void test_matmul(void) {
    struct tensor_pool *pool = tensor_pool_create(2);
    uint64_t state = 7;
    float *x = test_random_floats(BATCH * COLS, &state);
    float *wf = test_random_floats(ROWS * COLS, &state);
    for (int t = 0; t < N_TYPES; t++) {
        char *wq = malloc(tensor_row_bytes(types[t].type, COLS) * ROWS);
        CHECK(tensor_quantize_row(types[t].type, wq, wf, (int64_t)ROWS * COLS) == 0);
        for (int isa = TENSOR_ISA_SCALAR; isa <= (int)tensor_isa_best(); isa++)
            if (tensor_isa_select((enum tensor_isa)isa) == 0) check_matmul(pool, &types[t], wq, x);
        free(wq);
    }
    tensor_isa_select(tensor_isa_best());
    free(x);
    free(wf);
    tensor_pool_free(pool);
}

int main(void) {
    test_known_q4_1();
    test_known_q5();
    test_known_iq4_nl();
    test_quantizer_known();
    test_row_dots();
    test_matmul();
    int have_files = test_files();
    int status = test_status("test_tensor_quants_legacy");
    if (status == 0 && !have_files) return TEST_SKIP_CODE;
    return status;
}
