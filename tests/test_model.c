/* test_model.c -- loads the real kjv2m model (../shared/models): the llama2.c
 * checkpoint and its f32, q8_0 and q4_0 GGUF conversions. Checks the config
 * of each, the tensor types the README lists, that the llama2.c weights and
 * the f32 GGUF weights are bitwise the same trained numbers, the tied
 * classifier, weight_bytes, and that the quantized embedding is within
 * quantization error of the f32 one. Skips (77) without ../shared. */
#include "model/model.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KJV_DIM    192
#define KJV_HIDDEN 512
#define KJV_LAYERS 4
#define KJV_KV_DIM 96
#define KJV_VOCAB  1024

static void check_config(const struct model *m) {
    const struct model_config *c = &m->config;
    CHECK_MSG(c->arch == MODEL_ARCH_LLAMA, "%s: arch %d", m->path, (int)c->arch);
    CHECK_MSG(c->dim == KJV_DIM, "%s: dim %d", m->path, c->dim);
    CHECK(c->hidden_dim == KJV_HIDDEN);
    CHECK(c->n_layers == KJV_LAYERS);
    CHECK(c->n_heads == 8);
    CHECK(c->n_kv_heads == 4);
    CHECK(c->head_dim == 24);
    CHECK(c->vocab_size == KJV_VOCAB);
    CHECK_MSG(c->context_length == 256, "%s: context %d", m->path, c->context_length);
    CHECK(c->rope_dim == 24);
    CHECK(c->rope_base == 10000.0f);
    CHECK(c->rope_style == TENSOR_ROPE_NORM);
    CHECK(c->norm_eps == 1e-5f);
    CHECK(m->layers != NULL && m->output_norm != NULL);
    CHECK(m->token_embd.rows == KJV_VOCAB && m->token_embd.cols == KJV_DIM);
    CHECK(m->output.rows == KJV_VOCAB && m->output.cols == KJV_DIM);
}

/* Every layer matrix of m has type and the shapes of kjv2m. */
static void check_layers(const struct model *m, enum tensor_type type) {
    CHECK(m->layers != NULL);
    if (!m->layers) return;
    for (int l = 0; l < KJV_LAYERS; l++) {
        const struct model_layer *w = &m->layers[l];
        const struct tensor_matrix *mats[] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                              &w->w_gate, &w->w_up, &w->w_down};
        const int rows[] = {KJV_DIM,    KJV_KV_DIM, KJV_KV_DIM, KJV_DIM,
                            KJV_HIDDEN, KJV_HIDDEN, KJV_DIM};
        const int cols[] = {KJV_DIM, KJV_DIM, KJV_DIM, KJV_DIM, KJV_DIM, KJV_DIM, KJV_HIDDEN};
        for (int i = 0; i < 7; i++) {
            CHECK_MSG(mats[i]->type == type, "%s layer %d matrix %d: type %d", m->path, l, i,
                      (int)mats[i]->type);
            CHECK_MSG(mats[i]->rows == rows[i] && mats[i]->cols == cols[i],
                      "%s layer %d matrix %d: (%d, %d)", m->path, l, i, mats[i]->rows,
                      mats[i]->cols);
        }
        CHECK(w->attn_norm && w->ffn_norm);
        CHECK(!w->bq && !w->bk && !w->bv && !w->q_norm && !w->k_norm);
    }
}

static int same_floats(const void *a, const void *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* The f32 GGUF holds exactly the llama2.c checkpoint's numbers. */
static void check_same_weights(const struct model *bin, const struct model *gguf) {
    CHECK(same_floats(bin->token_embd.data, gguf->token_embd.data, KJV_DIM)); /* row 0 */
    CHECK(same_floats(bin->layers[0].wq.data, gguf->layers[0].wq.data, KJV_DIM * KJV_DIM));
    CHECK(same_floats(bin->token_embd.data, gguf->token_embd.data, (size_t)KJV_VOCAB * KJV_DIM));
    CHECK(same_floats(bin->output_norm, gguf->output_norm, KJV_DIM));
    /* the converter writes output.weight as a copy of the embedding */
    CHECK(same_floats(gguf->output.data, bin->token_embd.data, (size_t)KJV_VOCAB * KJV_DIM));
    for (int l = 0; l < KJV_LAYERS; l++) {
        const struct model_layer *a = &bin->layers[l], *b = &gguf->layers[l];
        CHECK_MSG(same_floats(a->attn_norm, b->attn_norm, KJV_DIM), "layer %d", l);
        CHECK_MSG(same_floats(a->ffn_norm, b->ffn_norm, KJV_DIM), "layer %d", l);
        CHECK_MSG(same_floats(a->wq.data, b->wq.data, KJV_DIM * KJV_DIM), "layer %d", l);
        CHECK_MSG(same_floats(a->wk.data, b->wk.data, KJV_KV_DIM * KJV_DIM), "layer %d", l);
        CHECK_MSG(same_floats(a->wv.data, b->wv.data, KJV_KV_DIM * KJV_DIM), "layer %d", l);
        CHECK_MSG(same_floats(a->wo.data, b->wo.data, KJV_DIM * KJV_DIM), "layer %d", l);
        CHECK_MSG(same_floats(a->w_gate.data, b->w_gate.data, KJV_HIDDEN * KJV_DIM), "layer %d", l);
        CHECK_MSG(same_floats(a->w_up.data, b->w_up.data, KJV_HIDDEN * KJV_DIM), "layer %d", l);
        CHECK_MSG(same_floats(a->w_down.data, b->w_down.data, KJV_HIDDEN * KJV_DIM), "layer %d", l);
    }
}

/* The llama2.c file read independently: the header and the first weights
 * sit where run.c puts them. */
static void check_bin_layout(const struct model *bin) {
    FILE *f = fopen(bin->path, "rb");
    CHECK(f != NULL);
    if (!f) return;
    int header[7];
    float embd0[KJV_DIM], wq0[KJV_DIM];
    size_t skip = (size_t)KJV_VOCAB * KJV_DIM + (size_t)KJV_LAYERS * KJV_DIM; /* embd, rms_att */
    CHECK(fread(header, sizeof(int), 7, f) == 7);
    CHECK(fread(embd0, sizeof(float), KJV_DIM, f) == KJV_DIM);
    CHECK(fseek(f, 28 + (long)(skip * sizeof(float)), SEEK_SET) == 0);
    CHECK(fread(wq0, sizeof(float), KJV_DIM, f) == KJV_DIM);
    fclose(f);
    CHECK(header[0] == 192 && header[1] == 512 && header[2] == 4 && header[3] == 8 &&
          header[4] == 4 && header[5] == 1024 && header[6] == 256);
    CHECK(same_floats(embd0, bin->token_embd.data, KJV_DIM));
    CHECK(same_floats(wq0, bin->layers[0].wq.data, KJV_DIM));
}

/* Row 0 of a quantized embedding is within fraction * max|x| of the f32 row,
 * per 32-block. Q8_0: half a step d = max|x| / 127, plus up to 127 times the
 * fp16 rounding of d (2^-11 d), so 0.57 d. Q4_0: one step max|x| / 8, as its
 * top level is clamped. */
static void check_quantized_row(const struct model *q, const struct model *f32, float fraction) {
    float row[KJV_DIM];
    const float *ref = f32->token_embd.data;
    tensor_dequantize_row(row, q->token_embd.data, q->token_embd.type, KJV_DIM);
    for (int b = 0; b < KJV_DIM / 32; b++) {
        float amax = 0.0f, worst = 0.0f;
        for (int i = b * 32; i < b * 32 + 32; i++) amax = fmaxf(amax, fabsf(ref[i]));
        for (int i = b * 32; i < b * 32 + 32; i++) worst = fmaxf(worst, fabsf(row[i] - ref[i]));
        CHECK_MSG(worst <= amax * fraction * 1.01f + 1e-7f, "%s block %d: error %g, amax %g",
                  q->path, b, worst, amax);
    }
}

static struct model *load(const char *name) {
    char path[512], err[512] = "";
    struct model *m = NULL;
    test_shared_path(path, sizeof(path), name);
    int rc = model_load(&m, path, err, sizeof(err));
    CHECK_MSG(rc == 0 && m != NULL, "%s: %s", path, err);
    if (m) CHECK(strcmp(m->path, path) == 0);
    return m;
}

int main(void) {
    char path[512];
    if (!test_require_file(test_shared_path(path, sizeof(path), "models/kjv2m.bin")) ||
        !test_require_file(test_shared_path(path, sizeof(path), "models/kjv2m-f32.gguf")) ||
        !test_require_file(test_shared_path(path, sizeof(path), "models/kjv2m-q8_0.gguf")) ||
        !test_require_file(test_shared_path(path, sizeof(path), "models/kjv2m-q4_0.gguf")))
        return TEST_SKIP_CODE;

    CHECK(strcmp(model_arch_name(MODEL_ARCH_LLAMA), "llama") == 0);
    CHECK(strcmp(model_arch_name(MODEL_ARCH_QWEN2), "qwen2") == 0);
    CHECK(strcmp(model_arch_name(MODEL_ARCH_QWEN3), "qwen3") == 0);
    CHECK(model_is_gguf(test_shared_path(path, sizeof(path), "models/kjv2m-f32.gguf")) == 1);
    CHECK(model_is_gguf(test_shared_path(path, sizeof(path), "models/kjv2m.bin")) == 0);
    CHECK(model_is_gguf(test_shared_path(path, sizeof(path), "models/no-such-file")) == 0);

    struct model *bin = load("models/kjv2m.bin");
    struct model *f32 = load("models/kjv2m-f32.gguf");
    struct model *q8 = load("models/kjv2m-q8_0.gguf");
    struct model *q4 = load("models/kjv2m-q4_0.gguf");
    if (!bin || !f32 || !q8 || !q4) return test_status("test_model");

    /* llama2.c: mapped, tied classifier, all F32 */
    check_config(bin);
    check_layers(bin, TENSOR_F32);
    check_bin_layout(bin);
    CHECK(bin->gguf == NULL && bin->mapping != NULL && bin->mapping_size == 7306012);
    CHECK(bin->output.data == bin->token_embd.data && bin->output.type == TENSOR_F32);
    CHECK(bin->token_embd.type == TENSOR_F32 && bin->token_embd.row_stride == KJV_DIM * 4);
    /* 4 layers x 405,504 matrix floats + the 196,608-float classifier */
    CHECK_MSG(bin->weight_bytes == 7274496, "weight_bytes %zu", bin->weight_bytes);

    /* f32 GGUF: same numbers, explicit output.weight */
    check_config(f32);
    check_layers(f32, TENSOR_F32);
    CHECK(f32->gguf != NULL && f32->mapping == NULL);
    CHECK(f32->output.data != f32->token_embd.data && f32->output.type == TENSOR_F32);
    CHECK_MSG(f32->weight_bytes == 7274496, "weight_bytes %zu", f32->weight_bytes);
    check_same_weights(bin, f32);

    /* q8_0: every matrix Q8_0 (34-byte blocks) */
    check_config(q8);
    check_layers(q8, TENSOR_Q8_0);
    CHECK(q8->token_embd.type == TENSOR_Q8_0 && q8->output.type == TENSOR_Q8_0);
    CHECK(q8->token_embd.row_stride == 6 * 34);
    /* per layer 2*192*204 + 2*96*204 + 2*512*204 + 192*544, plus 1024*204 */
    CHECK_MSG(q8->weight_bytes == 1932288, "weight_bytes %zu", q8->weight_bytes);
    check_quantized_row(q8, f32, 0.57f / 127.0f);

    /* q4_0: matrices Q4_0 except the Q8_0 classifier */
    check_config(q4);
    check_layers(q4, TENSOR_Q4_0);
    CHECK(q4->token_embd.type == TENSOR_Q4_0 && q4->output.type == TENSOR_Q8_0);
    CHECK(q4->token_embd.row_stride == 6 * 18);
    CHECK_MSG(q4->weight_bytes == 1121280, "weight_bytes %zu", q4->weight_bytes);
    check_quantized_row(q4, f32, 1.0f / 8.0f);

    model_free(bin);
    model_free(f32);
    model_free(q8);
    model_free(q4);
    model_free(NULL);
    return test_status("test_model");
}
