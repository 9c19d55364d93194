/* test_tensor_quants_k.c -- Q4_K, Q5_K and Q6_K weights: hand-built blocks
 * against ggml's dequantization formulas; llama.cpp's own Q4_K_M / Q5_K_M
 * / Q6_K files against their F32 sources, and lockstep's quantizer against
 * llama.cpp's on the same rows; scalar row dots against double-precision
 * dots, every instruction set's bit for bit against scalar, multi-column
 * dots against single;
 * products of these weights batch invariant (every batch size gives each
 * row its bits alone), whole and split into column parts. Exits 77 (after
 * the other checks) if ../shared is absent. */
#include "model/model.h"
#include "tensor/quants.h"
#include "tensor/tensor.h"
#include "tensor_kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What the test needs of each type. */
struct ktype {
    enum tensor_type type;
    const char *name;
    double file_bound; /* relative RMS error a llama.cpp file stays below */
};

/* The bounds are about 1.5 times the largest error of one tensor measured
 * on the fixtures (Q4_K 0.0711 and Q5_K 0.0360 on kjv2m, Q6_K 0.0178); a
 * layout bug gives about 1. */
static const struct ktype types[] = {
    {TENSOR_Q4_K, "q4_k", 0.11},
    {TENSOR_Q5_K, "q5_k", 0.054},
    {TENSOR_Q6_K, "q6_k", 0.027},
};
#define N_TYPES ((int)(sizeof(types) / sizeof(types[0])))

/* ---- known answers: ggml's formulas, element by element ---- */

/* ggml's get_scale_min_k4. */
static void ggml_scale_min(const uint8_t *q, int j, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static const uint8_t packed_scales[12] = {0xC1, 0x45, 0x83, 0x07, 0x4A, 0xCB,
                                          0x0C, 0x8D, 0x3E, 0xF1, 0x52, 0xA7};

/* Bytes that differ from element to element. */
static void fill_pattern(uint8_t *p, int n, int mul, int add) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(i * mul + add);
}

static void test_known_q4_k_q5_k(void) {
    struct tensor_block_q4_k b4;
    struct tensor_block_q5_k b5;
    b4.d = b5.d = tensor_fp32_to_fp16(0.5f);
    b4.dmin = b5.dmin = tensor_fp32_to_fp16(0.25f);
    memcpy(b4.scales, packed_scales, 12);
    memcpy(b5.scales, packed_scales, 12);
    fill_pattern(b4.qs, 128, 37, 11);
    memcpy(b5.qs, b4.qs, 128);
    fill_pattern(b5.qh, 32, 73, 5);
    float out4[256], out5[256];
    tensor_dequantize_row(out4, &b4, TENSOR_Q4_K, 256);
    tensor_dequantize_row(out5, &b5, TENSOR_Q5_K, 256);
    /* ggml's loop: 64 values per step, two groups, low nibbles then high */
    int bad = 0;
    for (int j = 0; j < 4; j++) {
        for (int half = 0; half < 2; half++) {
            int sc, m;
            ggml_scale_min(packed_scales, 2 * j + half, &sc, &m);
            float d1 = 0.5f * (float)sc, m1 = 0.25f * (float)m;
            for (int l = 0; l < 32; l++) {
                int i = 64 * j + 32 * half + l;
                int nibble = half ? b4.qs[32 * j + l] >> 4 : b4.qs[32 * j + l] & 0xF;
                int fifth = (b5.qh[l] & (1 << (2 * j + half))) ? 16 : 0;
                if (out4[i] != d1 * (float)nibble - m1) bad++;
                if (out5[i] != d1 * (float)(nibble + fifth) - m1) bad++;
            }
        }
    }
    CHECK_MSG(bad == 0, "%d q4_k / q5_k values differ from ggml's formula", bad);
    /* group 5 (j >= 4: split 6-bit fields): scale (0xF1 & 15) | (0x45 >> 6) << 4 = 17, min
     * (0xF1 >> 4) | (0xCB >> 6) << 4 = 63; element 163 is the high nibble of qs[67] */
    CHECK(out4[163] == 0.5f * 17.0f * (float)(b4.qs[67] >> 4) - 0.25f * 63.0f);
    /* group 0: scale 0xC1 & 63 = 1, min 0x4A & 63 = 10; element 2 the low nibble of qs[2] */
    CHECK(out4[2] == 0.5f * (float)(b4.qs[2] & 15) - 2.5f);
    /* element 255: group 7, fifth bit = bit 7 of qh[31] */
    int sc7 = (0xA7 & 15) | (0x07 >> 6) << 4, m7 = (0xA7 >> 4) | (0x8D >> 6) << 4;
    int q255 = (b5.qs[127] >> 4) | ((b5.qh[31] >> 7) & 1) << 4;
    CHECK(out5[255] == 0.5f * (float)sc7 * (float)q255 - 0.25f * (float)m7);
}

static void test_known_q6_k(void) {
    struct tensor_block_q6_k b;
    fill_pattern(b.ql, 128, 29, 3);
    fill_pattern(b.qh, 64, 151, 77);
    for (int i = 0; i < 16; i++) b.scales[i] = (int8_t)(i * 17 - 128); /* -128 .. 127 */
    b.d = tensor_fp32_to_fp16(0.125f);
    float out[256];
    tensor_dequantize_row(out, &b, TENSOR_Q6_K, 256);
    /* ggml's loop: two halves of 128; in each, 32 steps of four values */
    int bad = 0;
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = b.ql + 64 * n, *qh = b.qh + 32 * n;
        const int8_t *sc = b.scales + 8 * n;
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            const float *y = out + 128 * n + l;
            if (y[0] != 0.125f * (float)sc[is] * (float)q1) bad++;
            if (y[32] != 0.125f * (float)sc[is + 2] * (float)q2) bad++;
            if (y[64] != 0.125f * (float)sc[is + 4] * (float)q3) bad++;
            if (y[96] != 0.125f * (float)sc[is + 6] * (float)q4) bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d q6_k values differ from ggml's formula", bad);
    /* element 255: high nibble of ql[127], bits 6-7 of qh[63], scale 15 = 127 */
    int q = ((b.ql[127] >> 4) | ((b.qh[63] >> 6) << 4)) - 32;
    CHECK(out[255] == 0.125f * 127.0f * (float)q);
    CHECK(out[0] == 0.125f * -128.0f * (float)(((b.ql[0] & 15) | (b.qh[0] & 3) << 4) - 32));
}

/* ---- llama.cpp's files ---- */

/* Sums of squared errors and of squared values of dequantized against
 * source; the relative RMS error is sqrt(err / ref). */
struct rms {
    double err, ref;
};

static void add_rms(struct rms *r, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double e = (double)got[i] - want[i];
        r->err += e * e;
        r->ref += (double)want[i] * want[i];
    }
}

static double rms_of(struct rms r) {
    return r.ref > 0 ? sqrt(r.err / r.ref) : 0.0;
}

static const struct ktype *ktype_of(enum tensor_type type) {
    for (int t = 0; t < N_TYPES; t++)
        if (types[t].type == type) return &types[t];
    return NULL;
}

/* Every tensor of a k-type in quantized against the same-named F32 tensor
 * of source: the file's error below the type's bound, and this quantizer's
 * within 1.3 times the file's. */
static void check_file(const char *quant_name, const char *source_name) {
    char qpath[512], spath[512], err[256];
    test_shared_path(qpath, sizeof(qpath), quant_name);
    test_shared_path(spath, sizeof(spath), source_name);
    struct gguf_file *qf = NULL, *sf = NULL;
    if (gguf_open(&qf, qpath, err, sizeof(err)) != 0) {
        /* the kjv2m K_M files mix in Q5_0 / Q5_1, which lockstep may not read yet */
        CHECK_MSG(strstr(err, "is not supported"), "%s", err);
        printf("skip %s: %s\n", quant_name, err);
        return;
    }
    CHECK_MSG(gguf_open(&sf, spath, err, sizeof(err)) == 0, "%s", err);
    if (!sf) goto done;
    struct rms file_total[N_TYPES] = {0}, mine_total[N_TYPES] = {0};
    int tensors[N_TYPES] = {0};
    double worst[N_TYPES] = {0}; /* the largest file error of one tensor */
    for (uint64_t i = 0; i < qf->n_tensors; i++) {
        const struct gguf_tensor *t = &qf->tensors[i];
        const struct ktype *kt = ktype_of(t->type);
        if (!kt) continue;
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.data);
        const struct gguf_tensor *s = gguf_find_tensor(sf, name);
        CHECK_MSG(s && s->type == TENSOR_F32 && s->n_elements == t->n_elements, "%s", name);
        if (!s || s->type != TENSOR_F32 || s->n_elements != t->n_elements) continue;
        size_t n = t->n_elements;
        float *back = malloc(n * sizeof(float));
        void *mine = malloc(tensor_row_bytes(t->type, (int64_t)n));
        tensor_dequantize_row(back, t->data, t->type, (int64_t)n);
        struct rms file = {0, 0}, own = {0, 0};
        add_rms(&file, back, s->data, n);
        CHECK(tensor_quantize_row(t->type, mine, s->data, (int64_t)n) == 0);
        tensor_dequantize_row(back, mine, t->type, (int64_t)n);
        add_rms(&own, back, s->data, n);
        int k = (int)(kt - types);
        CHECK_MSG(rms_of(file) < kt->file_bound, "%s %s: llama.cpp's error %.4f", quant_name, name,
                  rms_of(file));
        CHECK_MSG(rms_of(own) <= 1.3 * rms_of(file), "%s %s: error %.4f, llama.cpp's %.4f",
                  quant_name, name, rms_of(own), rms_of(file));
        file_total[k].err += file.err;
        file_total[k].ref += file.ref;
        mine_total[k].err += own.err;
        mine_total[k].ref += own.ref;
        tensors[k]++;
        worst[k] = fmax(worst[k], rms_of(file));
        free(back);
        free(mine);
    }
    for (int k = 0; k < N_TYPES; k++)
        if (tensors[k])
            printf("%-34s %s x%-2d relative RMS error: llama.cpp %.5f (worst tensor %.5f), "
                   "lockstep %.5f\n",
                   quant_name, types[k].name, tensors[k], rms_of(file_total[k]), worst[k],
                   rms_of(mine_total[k]));
done:
    if (qf) gguf_close(qf);
    if (sf) gguf_close(sf);
}

static int test_files(void) {
    char path[512];
    if (!test_require_file(test_shared_path(path, sizeof(path), "models/kjv2m-f32.gguf")) ||
        !test_require_file(test_shared_path(path, sizeof(path), "fixtures/quant/rand3m-f32.gguf")))
        return 0;
    static const char *const quants[] = {"q4_k_m", "q5_k_m", "q6_k"};
    for (int q = 0; q < 3; q++) {
        char name[128];
        snprintf(name, sizeof(name), "fixtures/quant/kjv2m-%s.gguf", quants[q]);
        check_file(name, "models/kjv2m-f32.gguf");
        snprintf(name, sizeof(name), "fixtures/quant/rand3m-%s.gguf", quants[q]);
        check_file(name, "fixtures/quant/rand3m-f32.gguf");
    }
    return 1;
}

/* ---- row dots ---- */

/* A row of n weights of type: quantized random floats, or (raw) random
 * bytes with sane fp16 scales, which reach every quant and scale code. */
static void *random_row(const struct ktype *kt, int n, int raw, uint64_t *state) {
    size_t bytes = tensor_row_bytes(kt->type, n);
    uint8_t *row = malloc(bytes);
    if (!raw) {
        float *x = test_random_floats(n, state);
        for (int i = 0; i < n; i++) x[i] *= 1.0f + (float)(i % 97) / 16.0f; /* uneven groups */
        tensor_quantize_row(kt->type, row, x, n);
        free(x);
        return row;
    }
    for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)(test_random_float(state) * 128.0f + 128);
    size_t block = tensor_type_block_bytes(kt->type);
    for (size_t b = 0; b < bytes / block; b++) {
        uint16_t d = tensor_fp32_to_fp16(0.01f + 0.01f * test_random_float(state));
        uint16_t dmin = tensor_fp32_to_fp16(0.02f * test_random_float(state));
        /* d (and dmin) lead Q4_K / Q5_K blocks, d closes Q6_K's */
        size_t at = kt->type == TENSOR_Q6_K ? block - 2 : 0;
        memcpy(row + b * block + at, &d, 2);
        if (kt->type != TENSOR_Q6_K) memcpy(row + b * block + 2, &dmin, 2);
    }
    return row;
}

static void check_row_dot(const struct ktype *kt, int n, int raw, uint64_t *state) {
    void *w = random_row(kt, n, raw, state);
    float *x = test_random_floats(n, state);
    struct tensor_block_q8_k *xq = malloc(tensor_row_bytes(TENSOR_Q8_K, n));
    tensor_quantize_q8_k(xq, x, n);
    float *wf = malloc((size_t)n * sizeof(float)), *xf = malloc((size_t)n * sizeof(float));
    tensor_dequantize_row(wf, w, kt->type, n);
    tensor_dequantize_q8_k(xf, xq, n);
    double want = 0, scale = 0;
    for (int i = 0; i < n; i++) {
        want += (double)wf[i] * xf[i];
        scale += fabs((double)wf[i] * xf[i]);
    }
    float scalar = test_row_dot(TENSOR_ISA_SCALAR, kt->type)(w, xq, n);
    CHECK_MSG(fabs(scalar - want) <= 1e-4 * scale, "%s n=%d raw=%d: scalar %.8g, double %.8g",
              kt->name, n, raw, scalar, want);
    /* the same integer sums and float steps (quants_k.c): the same bits */
    TEST_EACH_ISA(isa) {
        float dot = test_row_dot(isa, kt->type)(w, xq, n);
        CHECK_MSG(test_same_bits(&dot, &scalar, 1), "%s n=%d raw=%d: %s %a, scalar %a", kt->name, n,
                  raw, tensor_isa_name(isa), dot, scalar);
    }
    free(w);
    free(x);
    free(xq);
    free(wf);
    free(xf);
}

/* The multi-column dot against the single one, column by column. */
static void check_row_dot_columns(const struct ktype *kt, int n, int raw, uint64_t *state) {
    void *w = random_row(kt, n, raw, state);
    size_t stride = tensor_row_bytes(TENSOR_Q8_K, n);
    char *xq = malloc(stride * TENSOR_DOT_COLUMNS);
    for (int c = 0; c < TENSOR_DOT_COLUMNS; c++) {
        float *x = test_random_floats(n, state);
        tensor_quantize_q8_k(xq + c * stride, x, n);
        free(x);
    }
    float columns[TENSOR_DOT_COLUMNS];
    TEST_EACH_ISA(isa) {
        tensor_row_dots_fn row_dots = test_row_dots(isa, kt->type);
        if (!row_dots) continue;
        row_dots(columns, w, xq, stride, n);
        for (int c = 0; c < TENSOR_DOT_COLUMNS; c++) {
            float one = test_row_dot(isa, kt->type)(w, xq + c * stride, n);
            CHECK_MSG(test_same_bits(&columns[c], &one, 1),
                      "%s n=%d raw=%d %s column %d: %a, single %a", kt->name, n, raw,
                      tensor_isa_name(isa), c, columns[c], one);
        }
    }
    free(w);
    free(xq);
}

static void test_all_row_dots(void) {
    uint64_t state = 42;
    static const int sizes[] = {256, 512, 4096};
    for (int t = 0; t < N_TYPES; t++)
        for (int s = 0; s < 3; s++)
            for (int rep = 0; rep < 4; rep++) {
                check_row_dot(&types[t], sizes[s], rep % 2, &state);
                check_row_dot_columns(&types[t], sizes[s], rep % 2, &state);
            }
}

/* ---- products ---- */

static void check_matmul(const struct ktype *kt, enum tensor_isa isa, uint64_t *state) {
    enum { ROWS = 24, COLS = 512, BATCH = 5 };
    size_t row_bytes = tensor_row_bytes(kt->type, COLS);
    uint8_t *data = malloc(ROWS * row_bytes);
    for (int r = 0; r < ROWS; r++) {
        void *row = random_row(kt, COLS, r % 2, state);
        memcpy(data + r * row_bytes, row, row_bytes);
        free(row);
    }
    struct tensor_matrix w = tensor_matrix_make(data, kt->type, ROWS, COLS);
    float *x = test_random_floats(BATCH * COLS, state);
    float whole[BATCH * ROWS], one[ROWS], parts[2 * BATCH * ROWS];
    CHECK(tensor_matmul(NULL, whole, &w, x, BATCH) == 0);
    for (int b = 0; b < BATCH; b++) {
        CHECK(tensor_matmul(NULL, one, &w, x + b * COLS, 1) == 0);
        CHECK_MSG(test_same_bits(one, whole + b * ROWS, ROWS), "%s %s: row %d of batch 5", kt->name,
                  tensor_isa_name(isa), b);
    }
    /* each element against the row dot of the quantized input */
    struct tensor_block_q8_k xq[COLS / TENSOR_QK_K];
    tensor_quantize_q8_k(xq, x + COLS, COLS);
    tensor_row_dot_fn dot = test_row_dot(isa, kt->type);
    float direct = dot(data + 3 * row_bytes, xq, COLS);
    CHECK(test_same_bits(&direct, whole + ROWS + 3, 1));
    CHECK(tensor_matmul_parts(NULL, parts, &w, x, BATCH, 2) == 0);
    float wf[COLS];
    for (int r = 0; r < ROWS; r++) {
        tensor_dequantize_row(wf, data + r * row_bytes, kt->type, COLS);
        for (int b = 0; b < BATCH; b++) {
            double scale = 0;
            for (int i = 0; i < COLS; i++) scale += fabs((double)wf[i] * x[b * COLS + i]);
            float sum = parts[b * ROWS + r] + parts[(BATCH + b) * ROWS + r];
            CHECK_MSG(fabs(sum - whole[b * ROWS + r]) <= 1e-5 * scale, "%s %s: parts of (%d, %d)",
                      kt->name, tensor_isa_name(isa), b, r);
        }
    }
    free(data);
    free(x);
}

/* Every batch size gives each input row the bits it gets alone, whole and
 * in two column parts: the multi-column dots take whole groups of the
 * batch and single dots the rest. */
static void check_batches(const struct ktype *kt, enum tensor_isa isa, uint64_t *state) {
    enum { ROWS = 19, COLS = 512, MAX_BATCH = 37 };
    size_t row_bytes = tensor_row_bytes(kt->type, COLS);
    uint8_t *data = malloc(ROWS * row_bytes);
    for (int r = 0; r < ROWS; r++) {
        void *row = random_row(kt, COLS, r % 2, state);
        memcpy(data + r * row_bytes, row, row_bytes);
        free(row);
    }
    struct tensor_matrix w = tensor_matrix_make(data, kt->type, ROWS, COLS);
    float *x = test_random_floats(MAX_BATCH * COLS, state);
    float alone[MAX_BATCH][ROWS], alone_parts[MAX_BATCH][2 * ROWS];
    for (int b = 0; b < MAX_BATCH; b++) {
        CHECK(tensor_matmul(NULL, alone[b], &w, x + b * COLS, 1) == 0);
        CHECK(tensor_matmul_parts(NULL, alone_parts[b], &w, x + b * COLS, 1, 2) == 0);
    }
    static const int batches[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, MAX_BATCH};
    float *whole = malloc(sizeof(float) * MAX_BATCH * ROWS);
    float *parts = malloc(sizeof(float) * 2 * MAX_BATCH * ROWS);
    for (int i = 0; i < (int)(sizeof(batches) / sizeof(batches[0])); i++) {
        int batch = batches[i], bad = 0;
        CHECK(tensor_matmul(NULL, whole, &w, x, batch) == 0);
        CHECK(tensor_matmul_parts(NULL, parts, &w, x, batch, 2) == 0);
        for (int b = 0; b < batch; b++) {
            bad += !test_same_bits(whole + b * ROWS, alone[b], ROWS);
            for (int p = 0; p < 2; p++)
                bad += !test_same_bits(parts + (p * batch + b) * ROWS, alone_parts[b] + p * ROWS,
                                       ROWS);
        }
        CHECK_MSG(bad == 0, "%s %s batch %d: %d rows differ from the row alone", kt->name,
                  tensor_isa_name(isa), batch, bad);
    }
    free(whole);
    free(parts);
    free(data);
    free(x);
}

static void test_matmul(void) {
    uint64_t state = 7;
    TEST_EACH_ISA(isa) {
        CHECK(tensor_isa_select(isa) == 0);
        for (int t = 0; t < N_TYPES; t++) {
            check_matmul(&types[t], isa, &state);
            check_batches(&types[t], isa, &state);
        }
    }
    tensor_isa_select(tensor_isa_best());
}

int main(void) {
    test_known_q4_k_q5_k();
    test_known_q6_k();
    test_all_row_dots();
    test_matmul();
    int have_files = test_files();
    if (!have_files && test_failures == 0) return TEST_SKIP_CODE;
    return test_status("test_tensor_quants_k");
}
