/* test_tensor_quants_k_low.c -- Q2_K, Q3_K and IQ4_XS weights:
 *  - known answers: hand-built blocks dequantize to ggml's formulas, element
 *    by element (group scales and minimums, Q3_K's 12 packed scale bytes
 *    and high bits, IQ4_XS's split 6-bit scales and nibbles), scales at the
 *    ends of their ranges included;
 *  - llama.cpp's own files (../shared/fixtures/quant, written by
 *    llama-quantize from rand3m-f32.gguf): every tensor of these types
 *    dequantizes to within a per-type relative RMS error of its F32 source
 *    (a layout bug gives about 1);
 *  - our quantizers on the same tensors: relative RMS error at most 1.3
 *    times that of llama.cpp's file (both printed);
 *  - row dots, for rows of 256, 512 and 4096 weights (quantized floats, and
 *    blocks of random bits) against activations quantized to Q8_K: the
 *    scalar row dot equals the double-precision dot of the dequantized rows
 *    within 1e-4 of the sum of |products|, the AVX2 one the scalar bit for
 *    bit (its lanes are the canonical order the scalar one spells out),
 *    the AVX-512 one (where the CPU has it) the scalar within 1e-5 (it
 *    keeps one float sum, not yet the canonical lanes);
 *  - tensor_matmul on each instruction set: each element is the kernel
 *    table's row dot bit for bit, rows of a batch of 5 equal the same rows
 *    alone, and two column parts add up to the whole within rounding.
 * With LOCKSTEP_TIME_ROW_DOTS set it also prints ns per row dot of 4096
 * weights, scalar, AVX2 and (where the CPU has it) AVX-512. */
#include "model/model.h"
#include "tensor/quants.h"
#include "tensor/tensor.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

/* ggml's kvalues_iq4nl, written out to check tensor_iq4_values too. */
static const int iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

struct type_case {
    enum tensor_type type;
    const char *name;
    tensor_row_dot_fn scalar, avx2, avx512;
    double file_bound; /* relative RMS error llama.cpp's files stay under */
};

/* Bounds ~1.5 times the worst tensor measured on rand3m (Q2_K 0.2336, Q3_K
 * 0.1258, IQ4_XS 0.0648). */
static const struct type_case cases[] = {
    {TENSOR_Q2_K, "Q2_K", tensor_row_dot_q2_k_scalar, tensor_row_dot_q2_k_avx2,
     tensor_row_dot_q2_k_avx512, 0.35},
    {TENSOR_Q3_K, "Q3_K", tensor_row_dot_q3_k_scalar, tensor_row_dot_q3_k_avx2,
     tensor_row_dot_q3_k_avx512, 0.19},
    {TENSOR_IQ4_XS, "IQ4_XS", tensor_row_dot_iq4_xs_scalar, tensor_row_dot_iq4_xs_avx2,
     tensor_row_dot_iq4_xs_avx512, 0.10},
};
#define N_CASES (int)(sizeof(cases) / sizeof(cases[0]))

/* ---- known answers ---- */

/* The 2-bit field of element e in a k-quant's qs (ggml's layout). */
static int low_bits(const uint8_t *qs, int e) {
    int byte = qs[32 * (e / 128) + e % 32];
    return (byte >> (2 * ((e % 128) / 32))) & 3;
}

static const int probe[] = {0, 5, 15, 16, 31, 32, 77, 100, 127, 128, 150, 161, 200, 223, 250, 255};
#define N_PROBE (int)(sizeof(probe) / sizeof(probe[0]))

static void known_q2_k(void) {
    struct tensor_block_q2_k b;
    b.d = tensor_fp32_to_fp16(0.5f);
    b.dmin = tensor_fp32_to_fp16(0.25f);
    for (int g = 0; g < 16; g++) b.scales[g] = (uint8_t)(g | (15 - g) << 4); /* scale g, min 15-g */
    for (int i = 0; i < 64; i++) b.qs[i] = (uint8_t)(i * 37 + 11);
    float out[256];
    tensor_dequantize_row(out, &b, TENSOR_Q2_K, 256);
    for (int p = 0; p < N_PROBE; p++) {
        int e = probe[p], g = e / 16;
        float want = 0.5f * (float)g * (float)low_bits(b.qs, e) - 0.25f * (float)(15 - g);
        CHECK_MSG(out[e] == want, "q2_K element %d: %g, want %g", e, out[e], want);
    }
    /* element 200: byte qs[40] = 211, bits 4..5 = 1, group 12: 6 - 0.75 */
    CHECK(out[200] == 5.25f);
}

static void known_q3_k(void) {
    struct tensor_block_q3_k b;
    static const uint8_t scales[12] = {0x00, 0xff, 0x12, 0x34, 0x56, 0x78,
                                       0x9a, 0xbc, 0x00, 0xff, 0x1b, 0xe4};
    b.d = tensor_fp32_to_fp16(0.25f);
    memcpy(b.scales, scales, 12);
    for (int i = 0; i < 32; i++) b.hmask[i] = (uint8_t)(i * 53 + 7);
    for (int i = 0; i < 64; i++) b.qs[i] = (uint8_t)(i * 29 + 3);
    float out[256];
    tensor_dequantize_row(out, &b, TENSOR_Q3_K, 256);
    for (int p = 0; p < N_PROBE; p++) {
        int e = probe[p], j = e / 16;
        int low = j < 8 ? scales[j] & 15 : scales[j - 8] >> 4;
        int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        int scale = (low | high << 4) - 32;
        int q = low_bits(b.qs, e) - ((b.hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4);
        float want = 0.25f * (float)scale * (float)q;
        CHECK_MSG(out[e] == want, "q3_K element %d: %g, want %g", e, out[e], want);
    }
    /* group 0 has scale -32 (all bits 0), group 1 scale 31 (all bits 1):
     * element 0: qs 3 -> 3, hmask 7 bit 0 set -> 3; element 16: qs[16] =
     * 211 -> 3, hmask[16] = 255 bit 0 set -> 3 */
    CHECK(out[0] == 0.25f * -32.0f * 3.0f);
    CHECK(out[16] == 0.25f * 31.0f * 3.0f);
}

static void known_iq4_xs(void) {
    for (int i = 0; i < 16; i++) CHECK(tensor_iq4_values[i] == iq4_values[i]);
    struct tensor_block_iq4_xs b;
    static const uint8_t scales_l[4] = {0x0f, 0xf0, 0x5a, 0x3c};
    b.d = tensor_fp32_to_fp16(0.125f);
    b.scales_h = 0xb1e4;
    memcpy(b.scales_l, scales_l, 4);
    for (int i = 0; i < 128; i++) b.qs[i] = (uint8_t)(i * 71 + 5);
    float out[256];
    tensor_dequantize_row(out, &b, TENSOR_IQ4_XS, 256);
    for (int p = 0; p < N_PROBE; p++) {
        int e = probe[p], g = e / 32, j = e % 32;
        int ls = ((scales_l[g / 2] >> (4 * (g % 2))) & 15) | ((0xb1e4 >> (2 * g)) & 3) << 4;
        int nibble = j < 16 ? b.qs[16 * g + j] & 15 : b.qs[16 * g + j - 16] >> 4;
        float want = 0.125f * (float)(ls - 32) * (float)iq4_values[nibble];
        CHECK_MSG(out[e] == want, "iq4_xs element %d: %g, want %g", e, out[e], want);
    }
    /* group 0: low 15, high 0 -> -17; element 0 nibble 5 -> -35 */
    CHECK(out[0] == 0.125f * -17.0f * -35.0f);
}

/* ---- llama.cpp's files ---- */

struct error_sums {
    double err2, ref2; /* sums of squared error and of squared source */
    double worst;      /* the largest relative RMS error of one tensor */
};

static void add_error(struct error_sums *s, const float *got, const float *ref, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double diff = (double)got[i] - ref[i];
        s->err2 += diff * diff;
        s->ref2 += (double)ref[i] * ref[i];
    }
}

static double relative_rms(const struct error_sums *s) {
    return s->ref2 > 0.0 ? sqrt(s->err2 / s->ref2) : 0.0;
}

static const struct type_case *case_of(enum tensor_type type) {
    for (int c = 0; c < N_CASES; c++)
        if (cases[c].type == type) return &cases[c];
    return NULL;
}

/* One tensor of a llama.cpp file against its F32 source: the file's error
 * within its type's bound, ours within 1.3 times the file's. */
static void check_file_tensor(const struct gguf_tensor *t, const struct gguf_file *source,
                              struct error_sums *file_sums, struct error_sums *our_sums,
                              const char *file) {
    const struct type_case *c = case_of(t->type);
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.data);
    const struct gguf_tensor *src = gguf_find_tensor(source, name);
    CHECK_MSG(src && src->type == TENSOR_F32 && src->n_elements == t->n_elements,
              "%s: %s has no F32 source of its shape", file, name);
    if (!src || src->type != TENSOR_F32 || src->n_elements != t->n_elements) return;
    size_t n = t->n_elements;
    float *got = malloc(sizeof(float) * n);
    void *ours = malloc(tensor_row_bytes(t->type, (int64_t)n));
    CHECK(got && ours);
    if (got && ours) {
        struct error_sums theirs = {0, 0, 0}, mine = {0, 0, 0};
        tensor_dequantize_row(got, t->data, t->type, (int64_t)n);
        add_error(&theirs, got, src->data, n);
        CHECK(tensor_quantize_row(t->type, ours, src->data, (int64_t)n) == 0);
        tensor_dequantize_row(got, ours, t->type, (int64_t)n);
        add_error(&mine, got, src->data, n);
        double e_theirs = relative_rms(&theirs), e_mine = relative_rms(&mine);
        CHECK_MSG(e_theirs < c->file_bound, "%s: %s (%s) relative RMS error %.4f, bound %.4f", file,
                  name, c->name, e_theirs, c->file_bound);
        CHECK_MSG(e_mine <= 1.3 * e_theirs, "%s: %s (%s) ours %.4f, llama.cpp's %.4f", file, name,
                  c->name, e_mine, e_theirs);
        file_sums->err2 += theirs.err2;
        file_sums->ref2 += theirs.ref2;
        file_sums->worst = fmax(file_sums->worst, e_theirs);
        our_sums->err2 += mine.err2;
        our_sums->ref2 += mine.ref2;
        our_sums->worst = fmax(our_sums->worst, e_mine);
    }
    free(got);
    free(ours);
}

/* Returns 0 if the fixtures are absent. */
static int check_files(void) {
    static const char *files[] = {"rand3m-q2_k.gguf", "rand3m-q3_k_m.gguf", "rand3m-iq4_xs.gguf"};
    char path[512], err[256];
    if (!test_require_file(test_shared_path(path, sizeof(path), "fixtures/quant/rand3m-f32.gguf")))
        return 0;
    struct gguf_file *source = NULL;
    CHECK_MSG(gguf_open(&source, path, err, sizeof(err)) == 0, "%s", err);
    if (!source) return 1;
    for (int f = 0; f < 3; f++) {
        struct gguf_file *file = NULL;
        test_shared_path(path, sizeof(path), "fixtures/quant/");
        strncat(path, files[f], sizeof(path) - strlen(path) - 1);
        if (gguf_open(&file, path, err, sizeof(err)) != 0) {
            /* the files mix in other types (Q6_K, Q4_K...) this build may lack */
            if (strstr(err, "is not supported"))
                printf("skip: %s\n", err);
            else
                CHECK_MSG(0, "%s", err);
            continue;
        }
        struct error_sums theirs[N_CASES] = {{0, 0, 0}}, mine[N_CASES] = {{0, 0, 0}};
        int counts[N_CASES] = {0};
        for (uint64_t i = 0; i < file->n_tensors; i++) {
            const struct type_case *c = case_of(file->tensors[i].type);
            if (!c) continue;
            int k = (int)(c - cases);
            counts[k]++;
            check_file_tensor(&file->tensors[i], source, &theirs[k], &mine[k], files[f]);
        }
        for (int k = 0; k < N_CASES; k++)
            if (counts[k])
                printf("%s: %d %s tensors, relative RMS error llama.cpp %.4f (worst tensor "
                       "%.4f), ours %.4f (worst %.4f)\n",
                       files[f], counts[k], cases[k].name, relative_rms(&theirs[k]),
                       theirs[k].worst, relative_rms(&mine[k]), mine[k].worst);
        CHECK_MSG(counts[f] > 0, "%s holds no %s tensor", files[f], cases[f].name);
        gguf_close(file);
    }
    gguf_close(source);
    return 1;
}

/* ---- row dots ---- */

/* n weights, roughly normal, of a random magnitude per call. */
static void random_weights(float *x, int n) {
    float scale = 0.01f + 2.0f * fabsf(test_random_float(&rng_state));
    for (int i = 0; i < n; i++)
        x[i] = scale * (test_random_float(&rng_state) + test_random_float(&rng_state) +
                        test_random_float(&rng_state));
}

/* Blocks of random bits with fp16 scales of moderate size (every scale,
 * minimum, high bit and nibble pattern occurs). */
static void random_blocks(void *blocks, enum tensor_type type, int n) {
    size_t bytes = tensor_row_bytes(type, n), block = tensor_type_block_bytes(type);
    uint8_t *p = blocks;
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)(int)((test_random_float(&rng_state) + 1.0f) * 128.0f);
    for (size_t off = 0; off < bytes; off += block) {
        uint16_t d = tensor_fp32_to_fp16(0.01f * test_random_float(&rng_state));
        uint16_t dmin = tensor_fp32_to_fp16(0.01f * test_random_float(&rng_state));
        if (type == TENSOR_Q2_K) {
            struct tensor_block_q2_k *b = (void *)(p + off);
            b->d = d;
            b->dmin = dmin;
        } else if (type == TENSOR_Q3_K) {
            ((struct tensor_block_q3_k *)(void *)(p + off))->d = d;
        } else {
            ((struct tensor_block_iq4_xs *)(void *)(p + off))->d = d;
        }
    }
}

static void check_row_dot(const struct type_case *c, const void *w, const float *x, int n, int avx2,
                          const char *kind) {
    float *wf = malloc(sizeof(float) * (size_t)n), *xf = malloc(sizeof(float) * (size_t)n);
    struct tensor_block_q8_k *xq = malloc(sizeof(*xq) * (size_t)(n / 256));
    CHECK(wf && xf && xq);
    if (wf && xf && xq) {
        tensor_quantize_q8_k(xq, x, n);
        tensor_dequantize_q8_k(xf, xq, n);
        tensor_dequantize_row(wf, w, c->type, n);
        double want = 0.0, magnitude = 0.0;
        for (int i = 0; i < n; i++) {
            want += (double)wf[i] * xf[i];
            magnitude += fabs((double)wf[i] * xf[i]);
        }
        float scalar = c->scalar(w, xq, n);
        CHECK_MSG(fabs(scalar - want) <= 1e-4 * magnitude + 1e-30,
                  "%s %s n=%d: scalar %.9g, double %.9g (sum |products| %.4g)", c->name, kind, n,
                  scalar, want, magnitude);
        if (avx2) {
            /* the scalar dot keeps the AVX2 lanes (the canonical order) */
            float vector = c->avx2(w, xq, n);
            CHECK_MSG(test_same_bits(&vector, &scalar, 1), "%s %s n=%d: avx2 %a, scalar %a",
                      c->name, kind, n, vector, scalar);
        }
        if (tensor_isa_best() >= TENSOR_ISA_AVX512) {
            /* one exact integer per super-block, then one float sum: not
             * yet the canonical lanes, so equal within rounding only */
            float wide = c->avx512(w, xq, n);
            CHECK_MSG(fabs(wide - scalar) <= 1e-5 * magnitude + 1e-30,
                      "%s %s n=%d: avx512 %.9g, scalar %.9g (sum |products| %.4g)", c->name, kind,
                      n, wide, scalar, magnitude);
        }
    }
    free(wf);
    free(xf);
    free(xq);
}

static void check_row_dots(const struct type_case *c, int avx2) {
    static const int lengths[] = {256, 512, 4096};
    float *w = malloc(sizeof(float) * 4096), *x = malloc(sizeof(float) * 4096);
    void *blocks = malloc(tensor_row_bytes(c->type, 4096));
    CHECK(w && x && blocks);
    for (int l = 0; l < 3 && w && x && blocks; l++)
        for (int trial = 0; trial < 4; trial++) {
            int n = lengths[l];
            random_weights(x, n);
            random_weights(w, n);
            tensor_quantize_row(c->type, blocks, w, n);
            check_row_dot(c, blocks, x, n, avx2, "quantized");
            random_blocks(blocks, c->type, n);
            check_row_dot(c, blocks, x, n, avx2, "random bits");
        }
    free(w);
    free(x);
    free(blocks);
}

/* ---- products ---- */

#define MM_ROWS  37
#define MM_COLS  512
#define MM_BATCH 5

/* The row dot tensor_matmul must use on isa. */
static tensor_row_dot_fn kernel_of(const struct type_case *c, enum tensor_isa isa) {
    return isa == TENSOR_ISA_SCALAR ? c->scalar : isa == TENSOR_ISA_AVX2 ? c->avx2 : c->avx512;
}

/* The products of a matrix: the weights as stored, and the sums of
 * |products| of its dequantized rows and the quantized inputs. */
struct product_case {
    struct tensor_matrix m;
    const float *x;                      /* (MM_BATCH, MM_COLS) inputs */
    struct tensor_block_q8_k *xq;        /* the inputs quantized to Q8_K */
    double magnitude[MM_BATCH][MM_ROWS]; /* sum |w * x| of each output */
};

static void check_matmul_isa(const struct type_case *c, struct tensor_pool *pool,
                             const struct product_case *p, enum tensor_isa isa) {
    const struct tensor_matrix *m = &p->m;
    const float *x = p->x;
    const struct tensor_block_q8_k *xq = p->xq;
    float whole[MM_BATCH * MM_ROWS], one[MM_ROWS], parts[2 * MM_BATCH * MM_ROWS];
    const char *isa_name = tensor_isa_name(isa);
    size_t row_bytes = tensor_row_bytes(c->type, MM_COLS), half_bytes = row_bytes / 2;
    CHECK(tensor_matmul(pool, whole, m, x, MM_BATCH) == 0);
    int off_kernel = 0, off_batch = 0, off_parts = 0, off_sum = 0;
    for (int b = 0; b < MM_BATCH; b++) {
        CHECK(tensor_matmul(pool, one, m, x + b * MM_COLS, 1) == 0);
        off_batch += !test_same_bits(one, whole + b * MM_ROWS, MM_ROWS);
    }
    CHECK(tensor_matmul_parts(pool, parts, m, x, MM_BATCH, 2) == 0);
    for (int b = 0; b < MM_BATCH; b++)
        for (int r = 0; r < MM_ROWS; r++) {
            const char *row = (const char *)m->data + (size_t)r * row_bytes;
            const struct tensor_block_q8_k *xb = xq + b * (MM_COLS / 256);
            float want = kernel_of(c, isa)(row, xb, MM_COLS);
            float p0 = kernel_of(c, isa)(row, xb, MM_COLS / 2);
            float p1 = kernel_of(c, isa)(row + half_bytes, xb + 1, MM_COLS / 2);
            float got0 = parts[b * MM_ROWS + r], got1 = parts[(MM_BATCH + b) * MM_ROWS + r];
            off_kernel += !test_same_bits(&whole[b * MM_ROWS + r], &want, 1);
            off_parts += !test_same_bits(&got0, &p0, 1) || !test_same_bits(&got1, &p1, 1);
            double sum = (double)got0 + got1, bound = 1e-5 * p->magnitude[b][r] + 1e-30;
            off_sum += fabs(sum - whole[b * MM_ROWS + r]) > bound;
        }
    CHECK_MSG(off_kernel == 0, "%s %s: %d products differ from the row dot", c->name, isa_name,
              off_kernel);
    CHECK_MSG(off_batch == 0, "%s %s: %d rows differ between batch 1 and 5", c->name, isa_name,
              off_batch);
    CHECK_MSG(off_parts == 0, "%s %s: %d parts differ from their columns' row dots", c->name,
              isa_name, off_parts);
    CHECK_MSG(off_sum == 0, "%s %s: %d part sums differ from the whole", c->name, isa_name,
              off_sum);
}

/* Sums of |products| of the dequantized weights and quantized inputs. */
static void product_magnitudes(struct product_case *p, const void *data, enum tensor_type type) {
    float w[MM_COLS], xf[MM_COLS];
    for (int b = 0; b < MM_BATCH; b++) {
        tensor_dequantize_q8_k(xf, p->xq + b * (MM_COLS / 256), MM_COLS);
        for (int r = 0; r < MM_ROWS; r++) {
            tensor_dequantize_row(w, (const char *)data + r * tensor_row_bytes(type, MM_COLS), type,
                                  MM_COLS);
            p->magnitude[b][r] = 0.0;
            for (int i = 0; i < MM_COLS; i++) p->magnitude[b][r] += fabs((double)w[i] * xf[i]);
        }
    }
}

static void check_matmul(const struct type_case *c, struct tensor_pool *pool) {
    static struct product_case p;
    static struct tensor_block_q8_k xq[MM_BATCH * MM_COLS / 256];
    float *w = malloc(sizeof(float) * MM_ROWS * MM_COLS);
    float *x = malloc(sizeof(float) * MM_BATCH * MM_COLS);
    void *data = malloc(tensor_row_bytes(c->type, MM_COLS) * MM_ROWS);
    CHECK(w && x && data);
    if (w && x && data) {
        random_weights(w, MM_ROWS * MM_COLS);
        random_weights(x, MM_BATCH * MM_COLS);
        tensor_quantize_row(c->type, data, w, MM_ROWS * MM_COLS);
        tensor_quantize_q8_k(xq, x, MM_BATCH * MM_COLS);
        p.m = tensor_matrix_make(data, c->type, MM_ROWS, MM_COLS);
        p.x = x;
        p.xq = xq;
        product_magnitudes(&p, data, c->type);
        enum tensor_isa best = tensor_isa_best();
        for (int isa = TENSOR_ISA_SCALAR; isa <= (int)best; isa++)
            if (tensor_isa_select((enum tensor_isa)isa) == 0)
                check_matmul_isa(c, pool, &p, (enum tensor_isa)isa);
        CHECK(tensor_isa_select(best) == 0);
    }
    free(w);
    free(x);
    free(data);
}

/* ---- timing (LOCKSTEP_TIME_ROW_DOTS) ---- */

static double ns_per_call(tensor_row_dot_fn dot, const void *w, const void *x, int n, int calls) {
    volatile float sink = 0.0f;
    double start = test_now();
    for (int i = 0; i < calls; i++) sink += dot(w, x, n);
    (void)sink;
    return (test_now() - start) * 1e9 / calls;
}

static void time_row_dots(void) {
    static float w[4096], x[4096];
    static struct tensor_block_iq4_xs blocks[16]; /* the largest of the three types */
    struct tensor_block_q8_k xq[16];
    random_weights(w, 4096);
    random_weights(x, 4096);
    tensor_quantize_q8_k(xq, x, 4096);
    for (int c = 0; c < N_CASES; c++) {
        tensor_quantize_row(cases[c].type, blocks, w, 4096);
        double scalar = ns_per_call(cases[c].scalar, blocks, xq, 4096, 2000);
        double avx2 = ns_per_call(cases[c].avx2, blocks, xq, 4096, 50000);
        printf("%s row dot n=4096: scalar %.0f ns, avx2 %.0f ns", cases[c].name, scalar, avx2);
        if (tensor_isa_best() >= TENSOR_ISA_AVX512)
            printf(", avx512 %.0f ns", ns_per_call(cases[c].avx512, blocks, xq, 4096, 50000));
        printf("\n");
    }
}

int main(void) {
    known_q2_k();
    known_q3_k();
    known_iq4_xs();
    int avx2 = tensor_isa_best() >= TENSOR_ISA_AVX2;
    if (!avx2) printf("no AVX2: skipping the AVX2 row dot comparisons\n");
    struct tensor_pool *pool = tensor_pool_create(2);
    CHECK(pool != NULL);
    for (int c = 0; c < N_CASES; c++) {
        check_row_dots(&cases[c], avx2);
        if (pool) check_matmul(&cases[c], pool);
    }
    if (pool) tensor_pool_free(pool);
    if (avx2 && getenv("LOCKSTEP_TIME_ROW_DOTS")) time_row_dots();
    int have_files = check_files();
    if (!have_files && test_failures == 0) return TEST_SKIP_CODE;
    return test_status("test_tensor_quants_k_low");
}
