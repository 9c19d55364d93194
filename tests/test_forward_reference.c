/* test_forward_reference.c -- the engine against a naive forward pass
 * written here from the math alone, on seeded random F32 models of every
 * architecture (llama; qwen2 with q/k/v biases; qwen3 with per-head q/k
 * RMSNorm; both qwen with NEOX rotary layout) with grouped-query attention.
 *
 * The reference processes one token at a time in plain loops (llama2.c's
 * run.c style), so it shares no code with the engine but the model loader;
 * logits must agree at every position of a 20-token sequence that the
 * engine runs as one prefill pass: within 1e-4 with an F32 key/value
 * cache, within the stated bounds with F16 and Q8_0 caches (which round
 * what they keep; the reference keeps floats). A Q8_0 cache is refused,
 * with a message, for a head dimension that is not a multiple of 32. */
#include "engine/engine.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_TOKENS 20

/* Dequantized copies of a model's weights (all F32 here, read directly). */
struct reference {
    const struct model *m;
    float *key_cache;   /* (n_layers, N_TOKENS, kv_dim) */
    float *value_cache; /* (n_layers, N_TOKENS, kv_dim) */
};

static const float *row(const struct tensor_matrix *w, int r) {
    return (const float *)((const char *)w->data + (size_t)r * w->row_stride);
}

static void matvec(float *out, const struct tensor_matrix *w, const float *x) {
    for (int r = 0; r < w->rows; r++) {
        double sum = 0;
        for (int i = 0; i < w->cols; i++) sum += (double)row(w, r)[i] * x[i];
        out[r] = (float)sum;
    }
}

static void rmsnorm(float *out, const float *x, const float *weight, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * weight[i];
}

/* Rotates one head: pairs (2j, 2j+1) for NORM, (j, j + rope_dim/2) for NEOX. */
static void rotate(float *head, int rope_dim, int pos, float base, enum tensor_rope_style style) {
    for (int j = 0; j < rope_dim / 2; j++) {
        double angle = pos * pow(base, -2.0 * j / rope_dim);
        int a = style == TENSOR_ROPE_NORM ? 2 * j : j;
        int b = style == TENSOR_ROPE_NORM ? 2 * j + 1 : j + rope_dim / 2;
        double x0 = head[a], x1 = head[b];
        head[a] = (float)(x0 * cos(angle) - x1 * sin(angle));
        head[b] = (float)(x0 * sin(angle) + x1 * cos(angle));
    }
}

/* One token through the model at pos; logits out (vocab). */
static void reference_step(struct reference *ref, int token, int pos, float *logits) {
    const struct model_config *c = &ref->m->config;
    int d = c->head_dim, q_dim = c->n_heads * d, kv_dim = c->n_kv_heads * d;
    float *x = malloc(sizeof(float) * c->dim), *xb = malloc(sizeof(float) * c->dim);
    float *q = malloc(sizeof(float) * q_dim), *att = malloc(sizeof(float) * q_dim);
    float *h1 = malloc(sizeof(float) * c->hidden_dim), *h3 = malloc(sizeof(float) * c->hidden_dim);
    float *o = malloc(sizeof(float) * c->dim), scores[N_TOKENS];
    memcpy(x, row(&ref->m->token_embd, token), sizeof(float) * c->dim);
    for (int l = 0; l < c->n_layers; l++) {
        const struct model_layer *w = &ref->m->layers[l];
        float *k = ref->key_cache + ((size_t)l * N_TOKENS + pos) * kv_dim;
        float *v = ref->value_cache + ((size_t)l * N_TOKENS + pos) * kv_dim;
        rmsnorm(xb, x, w->attn_norm, c->dim, c->norm_eps);
        matvec(q, &w->wq, xb);
        matvec(k, &w->wk, xb);
        matvec(v, &w->wv, xb);
        for (int i = 0; w->bq && i < q_dim; i++) q[i] += w->bq[i];
        for (int i = 0; w->bk && i < kv_dim; i++) k[i] += w->bk[i], v[i] += w->bv[i];
        for (int h = 0; h < c->n_heads; h++) {
            if (w->q_norm) rmsnorm(q + h * d, q + h * d, w->q_norm, d, c->norm_eps);
            rotate(q + h * d, c->rope_dim, pos, c->rope_base, c->rope_style);
        }
        for (int h = 0; h < c->n_kv_heads; h++) {
            if (w->k_norm) rmsnorm(k + h * d, k + h * d, w->k_norm, d, c->norm_eps);
            rotate(k + h * d, c->rope_dim, pos, c->rope_base, c->rope_style);
        }
        for (int h = 0; h < c->n_heads; h++) {
            int kvh = h / (c->n_heads / c->n_kv_heads);
            double max = -1e30, sum = 0;
            for (int p = 0; p <= pos; p++) {
                const float *kp = ref->key_cache + ((size_t)l * N_TOKENS + p) * kv_dim + kvh * d;
                double dot = 0;
                for (int i = 0; i < d; i++) dot += (double)q[h * d + i] * kp[i];
                scores[p] = (float)(dot / sqrt(d));
                if (scores[p] > max) max = scores[p];
            }
            for (int p = 0; p <= pos; p++) sum += exp(scores[p] - max);
            for (int i = 0; i < d; i++) {
                double acc = 0;
                for (int p = 0; p <= pos; p++)
                    acc += exp(scores[p] - max) / sum *
                           ref->value_cache[((size_t)l * N_TOKENS + p) * kv_dim + kvh * d + i];
                att[h * d + i] = (float)acc;
            }
        }
        matvec(o, &w->wo, att);
        for (int i = 0; i < c->dim; i++) x[i] += o[i];
        rmsnorm(xb, x, w->ffn_norm, c->dim, c->norm_eps);
        matvec(h1, &w->w_gate, xb);
        matvec(h3, &w->w_up, xb);
        for (int i = 0; i < c->hidden_dim; i++) h1[i] = h1[i] / (1.0f + expf(-h1[i])) * h3[i];
        matvec(o, &w->w_down, h1);
        for (int i = 0; i < c->dim; i++) x[i] += o[i];
    }
    rmsnorm(xb, x, ref->m->output_norm, c->dim, c->norm_eps);
    matvec(logits, &ref->m->output, xb);
    free(x), free(xb), free(q), free(att), free(h1), free(h3), free(o);
}

/* The engine's logits for tokens in one pass, with a key/value cache of
 * kv_type, against the reference's (expected), within tolerance. */
static void check_engine(const struct model *model, const int *tokens, const float *expected,
                         enum tensor_type kv_type, float tolerance) {
    const struct model_config *c = &model->config;
    const char *arch = model_arch_name(c->arch), *type = tensor_type_name(kv_type);
    char err[512];
    struct engine engine;
    struct engine_params ep = {.n_threads = 2,
                               .max_tokens = N_TOKENS,
                               .kv_block_size = 16,
                               .kv_blocks = 8,
                               .kv_type = kv_type};
    struct kv_sequence seq = {0}, *seqs[N_TOKENS];
    int positions[N_TOKENS];
    uint8_t want[N_TOKENS];
    if (kv_type == TENSOR_Q8_0 && c->head_dim % 32 != 0) {
        CHECK_MSG(engine_init(&engine, model, &ep, err, sizeof(err)) != 0 &&
                      strstr(err, "q8_0 needs a head dimension divisible by 32") != NULL,
                  "%s: a q8_0 cache with head dimension %d: '%s'", arch, c->head_dim, err);
        return;
    }
    CHECK_MSG(engine_init(&engine, model, &ep, err, sizeof(err)) == 0, "%s", err);
    CHECK(kv_sequence_reserve(&engine.kv, &seq, N_TOKENS) == 0);
    for (int t = 0; t < N_TOKENS; t++) positions[t] = t, seqs[t] = &seq, want[t] = 1;
    struct engine_batch batch = {N_TOKENS, tokens, positions, seqs, want};
    CHECK(engine_forward(&engine, &batch, err, sizeof(err)) == N_TOKENS);
    float diff = test_max_abs_diff(engine.logits, expected, N_TOKENS * c->vocab_size);
    printf("%-6s heads %d/%d of %d, %-4s cache: max |engine - reference| over %d positions = "
           "%.3g\n",
           arch, c->n_heads, c->n_kv_heads, c->head_dim, type, N_TOKENS, diff);
    CHECK_MSG(diff <= tolerance, "%s, %s cache: logits differ by %g (bound %g)", arch, type, diff,
              tolerance);
    kv_sequence_release(&engine.kv, &seq);
    engine_free(&engine);
}

static void check_arch(enum model_arch arch, int dim, int n_heads, int n_kv_heads) {
    char path[512], err[512];
    struct model_random_params params = {arch, dim, 160,        2,  n_heads,       n_kv_heads,
                                         280,  64,  TENSOR_F32, 11, MODEL_MIX_NONE};
    struct model *model;
    test_tmp_path(path, sizeof(path), "reference.gguf");
    CHECK(model_write_random(&params, path, err, sizeof(err)) == 0);
    if (model_load(&model, path, err, sizeof(err))) {
        CHECK_MSG(0, "load: %s", err);
        return;
    }
    const struct model_config *c = &model->config;
    int kv_dim = c->n_kv_heads * c->head_dim, tokens[N_TOKENS];
    struct reference ref = {model, calloc((size_t)c->n_layers * N_TOKENS * kv_dim, sizeof(float)),
                            calloc((size_t)c->n_layers * N_TOKENS * kv_dim, sizeof(float))};
    float *expected = malloc(sizeof(float) * N_TOKENS * c->vocab_size);
    for (int t = 0; t < N_TOKENS; t++) {
        tokens[t] = (t * 97 + 13) % c->vocab_size;
        reference_step(&ref, tokens[t], t, expected + (size_t)t * c->vocab_size);
    }
    /* the engine: all positions in one pass, logits for every one */
    static const enum tensor_type kv_types[] = {TENSOR_F32, TENSOR_F16, TENSOR_Q8_0};
    /* F16 rounds each kept element by up to 2^-11 of itself, Q8_0 by up to
     * 1/254 of its block's largest, and a Q8_0 cache's scores take the
     * query quantized the same way (measured here: 1.3-2.0e-3 and
     * 0.040-0.047) */
    static const float tolerances[] = {1e-4f, 5e-3f, 0.1f};
    for (int k = 0; k < 3; k++) check_engine(model, tokens, expected, kv_types[k], tolerances[k]);
    free(ref.key_cache);
    free(ref.value_cache);
    free(expected);
    model_free(model);
    remove(path);
}

int main(void) {
    check_arch(MODEL_ARCH_LLAMA, 96, 4, 2);
    check_arch(MODEL_ARCH_QWEN2, 96, 4, 1);
    check_arch(MODEL_ARCH_QWEN3, 96, 6, 2);
    check_arch(MODEL_ARCH_LLAMA, 128, 4, 2); /* head dimension 32: a Q8_0 cache too */
    check_arch(MODEL_ARCH_QWEN3, 256, 4, 2); /* 64 */
    return test_status("test_forward_reference");
}
