/* test_model_write.c -- model_write_gguf: the real kjv2m checkpoint written
 * as F32 loads back with bitwise-equal weights, config and vocabulary (and
 * tokenizes as llama.cpp's conversion does); written as Q8_0 and Q4_0 its
 * tensors are byte for byte those llama.cpp's quantizer wrote; random models
 * of each architecture (biases, q/k norms, a width that is not whole blocks)
 * round-trip through every weight type; bad arguments are refused with the
 * path named. */
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const void *matrix_row(const struct tensor_matrix *w, int r) {
    return (const char *)w->data + (size_t)r * w->row_stride;
}

/* got and want are the same matrix byte for byte; if not, says how many
 * blocks differ and by how much their values differ. */
static void check_same_matrix(const char *what, const struct tensor_matrix *got,
                              const struct tensor_matrix *want) {
    CHECK_MSG(got->type == want->type && got->rows == want->rows && got->cols == want->cols,
              "%s: got %s (%d, %d), want %s (%d, %d)", what, tensor_type_name(got->type), got->rows,
              got->cols, tensor_type_name(want->type), want->rows, want->cols);
    if (got->type != want->type || got->rows != want->rows || got->cols != want->cols) return;
    size_t block_bytes = tensor_type_block_bytes(got->type);
    int blocks = got->cols / tensor_type_block_elements(got->type);
    float *a = malloc((size_t)got->cols * sizeof(float));
    float *b = malloc((size_t)got->cols * sizeof(float));
    long differ = 0;
    float max_diff = 0.0f;
    for (int r = 0; a && b && r < got->rows; r++) {
        const char *ga = matrix_row(got, r), *wa = matrix_row(want, r);
        long before = differ;
        for (int j = 0; j < blocks; j++)
            differ += memcmp(ga + j * block_bytes, wa + j * block_bytes, block_bytes) != 0;
        if (differ == before) continue;
        tensor_dequantize_row(a, ga, got->type, got->cols);
        tensor_dequantize_row(b, wa, want->type, want->cols);
        max_diff = fmaxf(max_diff, test_max_abs_diff(a, b, got->cols));
    }
    CHECK_MSG(differ == 0, "%s: %ld of %ld %s blocks differ, values by up to %g", what, differ,
              (long)blocks * got->rows, tensor_type_name(got->type), (double)max_diff);
    free(a);
    free(b);
}

static void check_same_vector(const char *what, const float *got, const float *want, int n) {
    CHECK_MSG(got && want, "%s: missing (%p, %p)", what, (const void *)got, (const void *)want);
    if (got && want)
        CHECK_MSG(memcmp(got, want, (size_t)n * sizeof(float)) == 0, "%s: values differ", what);
}

static void check_same_config(const struct model_config *a, const struct model_config *b) {
    CHECK(a->arch == b->arch && a->dim == b->dim && a->hidden_dim == b->hidden_dim);
    CHECK(a->n_layers == b->n_layers && a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads);
    CHECK(a->head_dim == b->head_dim && a->vocab_size == b->vocab_size);
    CHECK_MSG(a->context_length == b->context_length, "context_length %d vs %d", a->context_length,
              b->context_length);
    CHECK(a->rope_dim == b->rope_dim && a->rope_style == b->rope_style);
    CHECK(a->rope_base == b->rope_base && a->norm_eps == b->norm_eps);
}

/* The matrices of block l, with their llama.cpp names. */
static void layer_matrices(const struct model_layer *w, const struct tensor_matrix *out[7],
                           const char *names[7]) {
    static const char *const suffixes[7] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                            "ffn_gate", "ffn_up", "ffn_down"};
    const struct tensor_matrix *m[7] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                        &w->w_gate, &w->w_up, &w->w_down};
    for (int i = 0; i < 7; i++) {
        out[i] = m[i];
        names[i] = suffixes[i];
    }
}

/* The vectors of got (norms, biases, q/k norms) are want's bit for bit. */
static void check_same_vectors(const char *what, const struct model *got,
                               const struct model *want) {
    char name[128];
    const struct model_config *c = &got->config;
    int q_rows = c->n_heads * c->head_dim, kv_rows = c->n_kv_heads * c->head_dim;
    snprintf(name, sizeof(name), "%s output_norm", what);
    check_same_vector(name, got->output_norm, want->output_norm, c->dim);
    for (int l = 0; l < c->n_layers && l < want->config.n_layers; l++) {
        const struct model_layer *g = &got->layers[l], *w = &want->layers[l];
        snprintf(name, sizeof(name), "%s blk.%d vectors", what, l);
        check_same_vector(name, g->attn_norm, w->attn_norm, c->dim);
        check_same_vector(name, g->ffn_norm, w->ffn_norm, c->dim);
        CHECK_MSG(!g->bq == !w->bq && !g->q_norm == !w->q_norm, "%s", name);
        if (g->bq && w->bq) {
            check_same_vector(name, g->bq, w->bq, q_rows);
            check_same_vector(name, g->bk, w->bk, kv_rows);
            check_same_vector(name, g->bv, w->bv, kv_rows);
        }
        if (g->q_norm && w->q_norm) {
            check_same_vector(name, g->q_norm, w->q_norm, c->head_dim);
            check_same_vector(name, g->k_norm, w->k_norm, c->head_dim);
        }
    }
}

/* Every tensor of got equals want's; output.weight too unless skip_output. */
static void check_same_model(const char *what, const struct model *got, const struct model *want,
                             int skip_output) {
    char name[128];
    check_same_config(&got->config, &want->config);
    check_same_vectors(what, got, want);
    snprintf(name, sizeof(name), "%s token_embd", what);
    check_same_matrix(name, &got->token_embd, &want->token_embd);
    snprintf(name, sizeof(name), "%s output", what);
    if (!skip_output) check_same_matrix(name, &got->output, &want->output);
    for (int l = 0; l < got->config.n_layers && l < want->config.n_layers; l++) {
        const struct tensor_matrix *gm[7], *wm[7];
        const char *names[7];
        layer_matrices(&got->layers[l], gm, names);
        layer_matrices(&want->layers[l], wm, names);
        for (int i = 0; i < 7; i++) {
            snprintf(name, sizeof(name), "%s blk.%d.%s", what, l, names[i]);
            check_same_matrix(name, gm[i], wm[i]);
        }
    }
}

static struct model *load(const char *path) {
    struct model *m = NULL;
    char err[512] = "";
    CHECK_MSG(model_load(&m, path, err, sizeof(err)) == 0, "%s", err);
    return m;
}

/* ------------------------------------------------------------- kjv2m */

/* A vocabulary's arrays for model_write_gguf (free with test_vocab_free). */
struct test_vocab {
    struct model_vocab vocab;
    char (*storage)[16]; /* made-up token texts, or NULL */
    const char **texts;
    uint64_t *lengths;
    float *scores;
    int32_t *types;
};

/* Allocates the arrays of n tokens (types only if with_types); -1 if out of
 * memory. */
static int test_vocab_alloc(struct test_vocab *v, int n, int with_types) {
    memset(v, 0, sizeof(*v));
    v->texts = calloc((size_t)n, sizeof(*v->texts));
    v->lengths = calloc((size_t)n, sizeof(*v->lengths));
    v->scores = calloc((size_t)n, sizeof(*v->scores));
    v->types = with_types ? calloc((size_t)n, sizeof(*v->types)) : NULL;
    return v->texts && v->lengths && v->scores && (v->types || !with_types) ? 0 : -1;
}

static void test_vocab_free(struct test_vocab *v) {
    free(v->storage);
    free(v->texts);
    free(v->lengths);
    free(v->scores);
    free(v->types);
}

/* The vocabulary of a llama2.c tokenizer; texts point into tok. */
static int vocab_from_tokenizer(struct test_vocab *v, const struct tokenizer *tok) {
    int n = tokenizer_vocab_size(tok);
    if (test_vocab_alloc(v, n, 1) != 0) return -1;
    struct tokenizer_entry e;
    for (int id = 0; id < n && tokenizer_token_entry(tok, id, &e) == 0; id++) {
        v->texts[id] = e.text;
        v->lengths[id] = e.text_len;
        v->scores[id] = e.score;
        v->types[id] = e.type;
    }
    v->vocab = (struct model_vocab){"llama",   n,        v->texts,           v->lengths,
                                    v->scores, v->types, tokenizer_bos(tok), tokenizer_eos(tok),
                                    0,         1};
    return 0;
}

/* A vocabulary of n made-up tokens without types: <unk>, <s>, </s>, then
 * "t3", "t4", ...; no unknown id, no BOS added. */
static int vocab_made_up(struct test_vocab *v, int n) {
    static const char *const specials[3] = {"<unk>", "<s>", "</s>"};
    if (test_vocab_alloc(v, n, 0) != 0 || !(v->storage = calloc((size_t)n, sizeof(*v->storage))))
        return -1;
    for (int i = 0; i < n; i++) {
        if (i < 3)
            snprintf(v->storage[i], sizeof(v->storage[i]), "%s", specials[i]);
        else
            snprintf(v->storage[i], sizeof(v->storage[i]), "t%d", i);
        v->texts[i] = v->storage[i];
        v->lengths[i] = strlen(v->storage[i]);
        v->scores[i] = -(float)i;
    }
    v->vocab = (struct model_vocab){"llama", n, v->texts, v->lengths, v->scores, NULL, 1, 2, -1, 0};
    return 0;
}

/* The ids of text under the vocabulary of the GGUF file at path. */
static int encode_with(const char *path, const char *text, int *ids, int max_ids) {
    struct gguf_file *f = NULL;
    struct tokenizer *tok = NULL;
    char err[512] = "";
    int n = -1;
    CHECK_MSG(gguf_open(&f, path, err, sizeof(err)) == 0, "%s", err);
    if (f) CHECK_MSG(tokenizer_load_gguf(&tok, f, err, sizeof(err)) == 0, "%s: %s", path, err);
    if (tok)
        CHECK_MSG(
            tokenizer_encode(tok, text, strlen(text), 1, ids, max_ids, &n, err, sizeof(err)) == 0,
            "%s", err);
    tokenizer_free(tok);
    gguf_close(f);
    return n;
}

/* The vocabulary keys of the file at path are v's. */
static void check_vocab_keys(const char *path, const struct model_vocab *v) {
    struct gguf_file *f = NULL;
    char err[512] = "";
    CHECK_MSG(gguf_open(&f, path, err, sizeof(err)) == 0, "%s", err);
    if (!f) return;
    struct gguf_string s;
    uint32_t u;
    CHECK(gguf_get_string(f, "tokenizer.ggml.model", &s, err, sizeof(err)) == 0 &&
          gguf_string_equals(s, v->model));
    CHECK(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u, err, sizeof(err)) == 0 &&
          (int)u == v->bos);
    CHECK(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u, err, sizeof(err)) == 0 &&
          (int)u == v->eos);
    CHECK((gguf_get_u32(f, "tokenizer.ggml.unknown_token_id", &u, err, sizeof(err)) == 0) ==
          (v->unk >= 0));
    const struct gguf_kv *add_bos = gguf_find(f, "tokenizer.ggml.add_bos_token");
    CHECK(add_bos && add_bos->value.type == GGUF_TYPE_BOOL &&
          add_bos->value.v.u64 == (uint64_t)v->add_bos);
    const struct gguf_kv *tokens = gguf_find(f, "tokenizer.ggml.tokens");
    const struct gguf_kv *scores = gguf_find(f, "tokenizer.ggml.scores");
    const struct gguf_kv *types = gguf_find(f, "tokenizer.ggml.token_type");
    CHECK(tokens && tokens->value.v.arr.n == (uint64_t)v->n_tokens);
    CHECK(!scores == !v->scores && !types == !v->types);
    for (int i = 0; tokens && i < v->n_tokens; i++) {
        struct gguf_string t = gguf_array_string(&tokens->value, (uint64_t)i);
        CHECK_MSG(t.len == v->lengths[i] && memcmp(t.data, v->texts[i], t.len) == 0, "token %d", i);
        if (scores && v->scores)
            CHECK(gguf_array_element(&scores->value, (uint64_t)i).v.f64 == v->scores[i]);
        if (types && v->types)
            CHECK(gguf_array_element(&types->value, (uint64_t)i).v.i64 == v->types[i]);
    }
    gguf_close(f);
}

/* kjv2m written as type must equal llama.cpp's file reference (which holds
 * output.weight as a copy of the tied embedding; in the Q4_0 file it is Q8_0
 * so it is not compared). */
static void check_against_llama_cpp(const struct model *kjv, const struct model_vocab *vocab,
                                    enum tensor_type type, const char *reference) {
    char name[64], path[512], ref_path[512], err[512] = "";
    snprintf(name, sizeof(name), "kjv2m-%s.gguf", tensor_type_name(type));
    test_tmp_path(path, sizeof(path), name);
    test_shared_path(ref_path, sizeof(ref_path), reference);
    CHECK_MSG(model_write_gguf(kjv, type, MODEL_MIX_NONE, vocab, "kjv2m", path, err, sizeof(err)) ==
                  0,
              "%s", err);
    struct model *got = load(path), *want = load(ref_path);
    if (got && want) {
        CHECK(got->output.data == got->token_embd.data); /* still tied */
        check_same_model(reference, got, want, 1);
        if (type == TENSOR_Q8_0) {
            struct tensor_matrix classifier = want->output;
            check_same_matrix("llama.cpp's output.weight", &got->token_embd, &classifier);
        }
    }
    model_free(got);
    model_free(want);
    remove(path);
}

static void test_kjv2m(void) {
    char bin[512], tok_path[512], f32_ref[512], path[512], err[512] = "";
    test_shared_path(bin, sizeof(bin), "models/kjv2m.bin");
    test_shared_path(tok_path, sizeof(tok_path), "models/tok1024.bin");
    test_shared_path(f32_ref, sizeof(f32_ref), "models/kjv2m-f32.gguf");
    struct model *kjv = load(bin);
    struct tokenizer *tok = NULL;
    struct test_vocab v;
    if (!kjv) return;
    CHECK_MSG(tokenizer_load_llama2c(&tok, tok_path, kjv->config.vocab_size, err, sizeof(err)) == 0,
              "%s", err);
    int have_vocab = tok && vocab_from_tokenizer(&v, tok) == 0;
    CHECK(have_vocab);
    if (!have_vocab) {
        if (tok) test_vocab_free(&v);
        tokenizer_free(tok);
        model_free(kjv);
        return;
    }

    /* F32: the same weights, config and vocabulary */
    test_tmp_path(path, sizeof(path), "kjv2m-f32.gguf");
    CHECK_MSG(model_write_gguf(kjv, TENSOR_F32, MODEL_MIX_NONE, &v.vocab, "kjv2m", path, err,
                               sizeof(err)) == 0,
              "%s", err);
    struct model *f32 = load(path);
    if (f32) {
        check_same_model("f32", f32, kjv, 0);
        CHECK(f32->output.data == f32->token_embd.data);
        CHECK(f32->weight_bytes == kjv->weight_bytes);
    }
    model_free(f32);
    check_vocab_keys(path, &v.vocab);
    int ids[64], want_ids[64];
    int n = encode_with(path, "In the beginning", ids, 64);
    int want_n = encode_with(f32_ref, "In the beginning", want_ids, 64);
    CHECK_MSG(n > 1 && n == want_n && memcmp(ids, want_ids, (size_t)n * sizeof(int)) == 0,
              "%d ids vs llama.cpp's %d", n, want_n);
    remove(path);

    check_against_llama_cpp(kjv, &v.vocab, TENSOR_Q8_0, "models/kjv2m-q8_0.gguf");
    check_against_llama_cpp(kjv, &v.vocab, TENSOR_Q4_0, "models/kjv2m-q4_0.gguf");
    test_vocab_free(&v);
    tokenizer_free(tok);
    model_free(kjv);
}

/* ------------------------------------------------------------ random */

/* got (written as type from source) holds source's values converted:
 * F32 equal to the dequantized values, F16 their half rounding, a
 * quantized type the blocks its quantizer makes of them row by row (the
 * writer quantizes large matrices in chunks of rows on every core, which
 * must give the same bytes); F32 kept for a row that is not whole blocks,
 * and a k-quant's fallback type for one that is not whole super-blocks. */
static void check_converted(const char *what, const struct tensor_matrix *got,
                            const struct tensor_matrix *source, enum tensor_type type) {
    if (tensor_type_block_elements(type) > 1 && source->cols % 32 != 0) type = TENSOR_F32;
    if (source->cols % tensor_type_block_elements(type) != 0 && got->type != TENSOR_F32 &&
        tensor_type_block_elements(got->type) == 32)
        type = got->type;
    CHECK_MSG(got->type == type && got->rows == source->rows && got->cols == source->cols,
              "%s: type %s, expected %s", what, tensor_type_name(got->type),
              tensor_type_name(type));
    if (got->type != type || got->rows != source->rows || got->cols != source->cols) return;
    int cols = source->cols, bad_rows = 0;
    float *x = malloc((size_t)cols * sizeof(float));
    void *want = malloc(tensor_row_bytes(type, cols));
    for (int r = 0; x && want && r < source->rows; r++) {
        tensor_dequantize_row(x, matrix_row(source, r), source->type, cols);
        if (type == TENSOR_F32)
            memcpy(want, x, (size_t)cols * sizeof(float));
        else
            tensor_quantize_row(type, want, x, cols);
        bad_rows += memcmp(matrix_row(got, r), want, tensor_row_bytes(type, cols)) != 0;
    }
    CHECK_MSG(bad_rows == 0, "%s: %d of %d rows differ", what, bad_rows, source->rows);
    free(x);
    free(want);
}

/* A random model of arch and type, written again as out_type: config,
 * vectors and converted matrices match. */
static void check_random_round_trip(enum model_arch arch, int dim, enum tensor_type type,
                                    enum tensor_type out_type) {
    struct model_random_params p = {arch, dim, 64, 2, 4, 2, 300, 128, type, 11, MODEL_MIX_NONE};
    char src_path[512], path[512], what[128], err[512] = "";
    snprintf(what, sizeof(what), "%s dim %d %s->%s", model_arch_name(arch), dim,
             tensor_type_name(type), tensor_type_name(out_type));
    test_tmp_path(src_path, sizeof(src_path), "random-src.gguf");
    test_tmp_path(path, sizeof(path), "random-out.gguf");
    CHECK_MSG(model_write_random(&p, src_path, err, sizeof(err)) == 0, "%s", err);
    struct model *src = load(src_path), *got = NULL;
    struct test_vocab v;
    if (src && vocab_made_up(&v, p.vocab_size) == 0) {
        CHECK_MSG(model_write_gguf(src, out_type, MODEL_MIX_NONE, &v.vocab, "round trip", path, err,
                                   sizeof(err)) == 0,
                  "%s: %s", what, err);
        got = load(path);
        check_vocab_keys(path, &v.vocab);
    }
    if (src) test_vocab_free(&v);
    if (src && got) {
        check_same_config(&got->config, &src->config);
        check_converted(what, &got->token_embd, &src->token_embd, out_type);
        check_converted(what, &got->output, &src->output, out_type);
        CHECK(got->output.data != got->token_embd.data);
        check_same_vector(what, got->output_norm, src->output_norm, dim);
        for (int l = 0; l < p.n_layers; l++) {
            const struct tensor_matrix *gm[7], *sm[7];
            const char *names[7];
            layer_matrices(&got->layers[l], gm, names);
            layer_matrices(&src->layers[l], sm, names);
            for (int i = 0; i < 7; i++) check_converted(what, gm[i], sm[i], out_type);
        }
        check_same_vectors(what, got, src);
    }
    model_free(got);
    model_free(src);
    remove(src_path);
    remove(path);
}

/* Bad arguments are refused with the path named; a NULL vocabulary writes
 * a file that loads as a model, with the GGUF source's tokenizer keys. */
static void test_errors(void) {
    struct model_random_params p = {MODEL_ARCH_LLAMA, 32, 64, 1, 2, 2, 260, 16, TENSOR_F32, 1,
                                    MODEL_MIX_NONE};
    char src_path[512], path[512], err[512] = "";
    struct test_vocab v;
    test_tmp_path(src_path, sizeof(src_path), "errors-src.gguf");
    test_tmp_path(path, sizeof(path), "errors-out.gguf");
    CHECK_MSG(model_write_random(&p, src_path, err, sizeof(err)) == 0, "%s", err);
    struct model *src = load(src_path);
    int have_vocab = src && vocab_made_up(&v, 5) == 0;
    if (!have_vocab) {
        if (src) test_vocab_free(&v);
        model_free(src);
        return;
    }
    CHECK(model_write_gguf(src, TENSOR_Q8_0, MODEL_MIX_NONE, &v.vocab, "x", path, err,
                           sizeof(err)) == -1);
    CHECK_MSG(strstr(err, path) && strstr(err, "the vocabulary has 5 tokens") &&
                  strstr(err, "vocab_size is 260"),
              "%s", err);
    CHECK(model_write_gguf(src, (enum tensor_type)5, MODEL_MIX_NONE, NULL, "x", path, err,
                           sizeof(err)) == -1);
    CHECK_MSG(strstr(err, path) && strstr(err, "unsupported weight type 5"), "%s", err);
    const char *missing = "/nonexistent-dir/x.gguf";
    CHECK(model_write_gguf(src, TENSOR_F32, MODEL_MIX_NONE, NULL, "x", missing, err, sizeof(err)) ==
          -1);
    CHECK_MSG(strstr(err, missing) && strstr(err, "cannot create"), "%s", err);
    test_vocab_free(&v);

    CHECK_MSG(
        model_write_gguf(src, TENSOR_F16, MODEL_MIX_NONE, NULL, NULL, path, err, sizeof(err)) == 0,
        "%s", err);
    struct model *got = load(path);
    if (got) check_converted("no vocab", &got->layers[0].wq, &src->layers[0].wq, TENSOR_F16);
    model_free(got);
    struct gguf_file *f = NULL;
    CHECK_MSG(gguf_open(&f, path, err, sizeof(err)) == 0, "%s", err);
    struct gguf_string s = {0};
    if (f) {
        /* a GGUF source's own tokenizer keys are carried over */
        const struct gguf_kv *tokens = gguf_find(f, "tokenizer.ggml.tokens");
        CHECK(tokens && tokens->value.type == GGUF_TYPE_ARRAY && tokens->value.v.arr.n == 260);
        CHECK(gguf_find(f, "tokenizer.ggml.merges") != NULL);
        CHECK(gguf_get_string(f, "general.name", &s, err, sizeof(err)) == 0 &&
              gguf_string_equals(s, "llama"));
    }
    gguf_close(f);
    model_free(src);
    remove(src_path);
    remove(path);
}

int main(void) {
    const enum model_arch archs[] = {MODEL_ARCH_LLAMA, MODEL_ARCH_QWEN2, MODEL_ARCH_QWEN3};
    for (int a = 0; a < 3; a++) check_random_round_trip(archs[a], 64, TENSOR_F32, TENSOR_Q8_0);
    /* dim 48: matrices reading dim stay F32, ffn_down (64 columns) is quantized */
    check_random_round_trip(MODEL_ARCH_LLAMA, 48, TENSOR_F32, TENSOR_Q4_0);
    check_random_round_trip(MODEL_ARCH_QWEN2, 64, TENSOR_Q8_0, TENSOR_F32);
    check_random_round_trip(MODEL_ARCH_QWEN3, 64, TENSOR_Q4_0, TENSOR_F16);
    check_random_round_trip(MODEL_ARCH_LLAMA, 64, TENSOR_F16, TENSOR_Q8_0);
    check_random_round_trip(MODEL_ARCH_LLAMA, 64, TENSOR_Q8_0, TENSOR_Q8_0);
    check_random_round_trip(MODEL_ARCH_LLAMA, 256, TENSOR_F32, TENSOR_Q4_K);
    check_random_round_trip(MODEL_ARCH_QWEN2, 256, TENSOR_F16, TENSOR_IQ4_XS);
    test_errors();

    char probe[512];
    const char *needed[] = {"models/kjv2m.bin", "models/tok1024.bin", "models/kjv2m-f32.gguf",
                            "models/kjv2m-q8_0.gguf", "models/kjv2m-q4_0.gguf"};
    int have_models = 1;
    for (size_t i = 0; have_models && i < sizeof(needed) / sizeof(needed[0]); i++)
        have_models = test_require_file(test_shared_path(probe, sizeof(probe), needed[i]));
    if (have_models) test_kjv2m();
    return test_status("test_model_write");
}
