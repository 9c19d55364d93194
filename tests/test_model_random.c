/* test_model_random.c -- model_write_random: small models of every
 * architecture and weight type are written, loaded back with model_load and
 * checked (config, tensor types and shapes, value ranges); the vocabulary is
 * read back with the GGUF reader and checked (GPT-2 byte tokens, merges
 * whose parts and results are tokens, unique tokens, the end-of-text
 * control token); the same seed gives the same bytes, another seed other
 * bytes; bad parameters are refused with the field named. */
#include "model/model.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static struct model_random_params small_params(enum model_arch arch, enum tensor_type type) {
    struct model_random_params p = {
        .arch = arch,
        .dim = 64,
        .hidden_dim = 96,
        .n_layers = 2,
        .n_heads = 4,
        .n_kv_heads = 2,
        .vocab_size = 300,
        .context_length = 64,
        .type = type,
        .seed = 7,
    };
    return p;
}

static size_t matrix_bytes(const struct tensor_matrix *w) {
    return (size_t)w->rows * tensor_row_bytes(w->type, w->cols);
}

/* A loaded random model matches its parameters. */
static void check_model(const struct model *m, const struct model_random_params *p) {
    const struct model_config *c = &m->config;
    const char *what = m->path;
    int head_dim = p->dim / p->n_heads, kv_rows = p->n_kv_heads * head_dim;
    CHECK_MSG(c->arch == p->arch, "%s", what);
    CHECK(c->dim == p->dim && c->hidden_dim == p->hidden_dim && c->n_layers == p->n_layers);
    CHECK(c->n_heads == p->n_heads && c->n_kv_heads == p->n_kv_heads && c->head_dim == head_dim);
    CHECK(c->vocab_size == p->vocab_size && c->context_length == p->context_length);
    CHECK(c->rope_dim == head_dim);
    int llama = p->arch == MODEL_ARCH_LLAMA;
    CHECK(c->rope_style == (llama ? TENSOR_ROPE_NORM : TENSOR_ROPE_NEOX));
    CHECK(c->rope_base == (llama ? 10000.0f : 1000000.0f));
    CHECK(c->norm_eps == (llama ? 1e-5f : 1e-6f));

    int quantized = tensor_type_block_elements(p->type) > 1;
    enum tensor_type dim_type = quantized && p->dim % 32 ? TENSOR_F32 : p->type;
    enum tensor_type hidden_type = quantized && p->hidden_dim % 32 ? TENSOR_F32 : p->type;
    CHECK_MSG(m->token_embd.type == dim_type, "%s: token_embd type %d", what,
              (int)m->token_embd.type);
    CHECK(m->output.type == dim_type && m->output.data != m->token_embd.data);
    CHECK(m->token_embd.rows == p->vocab_size && m->token_embd.cols == p->dim);
    CHECK(m->output.rows == p->vocab_size && m->output.cols == p->dim);
    size_t bytes = matrix_bytes(&m->output);
    for (int l = 0; l < p->n_layers; l++) {
        const struct model_layer *w = &m->layers[l];
        CHECK(w->wq.type == dim_type && w->wq.rows == p->dim && w->wq.cols == p->dim);
        CHECK(w->wk.type == dim_type && w->wk.rows == kv_rows && w->wk.cols == p->dim);
        CHECK(w->wv.type == dim_type && w->wv.rows == kv_rows && w->wv.cols == p->dim);
        CHECK(w->wo.type == dim_type && w->wo.rows == p->dim && w->wo.cols == p->dim);
        CHECK(w->w_gate.type == dim_type && w->w_gate.rows == p->hidden_dim);
        CHECK(w->w_up.type == dim_type && w->w_up.rows == p->hidden_dim);
        CHECK_MSG(w->w_down.type == hidden_type && w->w_down.rows == p->dim &&
                      w->w_down.cols == p->hidden_dim,
                  "%s: w_down type %d", what, (int)w->w_down.type);
        CHECK((w->bq && w->bk && w->bv) == (p->arch == MODEL_ARCH_QWEN2));
        CHECK(!w->bq == !w->bk && !w->bk == !w->bv);
        CHECK((w->q_norm && w->k_norm) == (p->arch == MODEL_ARCH_QWEN3));
        CHECK(!w->q_norm == !w->k_norm);
        for (int i = 0; i < p->dim; i++)
            CHECK(w->attn_norm[i] >= 0.9f && w->attn_norm[i] <= 1.1f && w->ffn_norm[i] >= 0.9f &&
                  w->ffn_norm[i] <= 1.1f);
        bytes += matrix_bytes(&w->wq) + matrix_bytes(&w->wk) + matrix_bytes(&w->wv) +
                 matrix_bytes(&w->wo) + matrix_bytes(&w->w_gate) + matrix_bytes(&w->w_up) +
                 matrix_bytes(&w->w_down);
    }
    CHECK_MSG(m->weight_bytes == bytes, "%s: weight_bytes %zu, expected %zu", what, m->weight_bytes,
              bytes);

    /* values: wq of layer 0 lies in +-sqrt(3 / dim) (plus quantization
     * rounding) and is not constant */
    float *row = malloc((size_t)p->dim * sizeof(float));
    if (!row) return;
    float limit = sqrtf(3.0f / (float)p->dim) * 1.01f, lo = 1.0f, hi = -1.0f;
    for (int r = 0; r < p->dim; r++) {
        tensor_dequantize_row(row,
                              (const char *)m->layers[0].wq.data + r * m->layers[0].wq.row_stride,
                              m->layers[0].wq.type, p->dim);
        for (int i = 0; i < p->dim; i++) {
            lo = fminf(lo, row[i]);
            hi = fmaxf(hi, row[i]);
        }
    }
    CHECK_MSG(lo >= -limit && hi <= limit && hi - lo > limit, "%s: wq in [%g, %g], limit %g", what,
              lo, hi, limit);
    free(row);
}

/* Text of token i of the tokenizer.ggml.tokens array, NUL-terminated. */
static const char *token_text(const struct gguf_value *tokens, uint64_t i, char *buf, size_t size) {
    struct gguf_string s = gguf_array_string(tokens, i);
    snprintf(buf, size, "%.*s", (int)s.len, s.data);
    return buf;
}

static int find_token(const struct gguf_value *tokens, const char *text) {
    for (uint64_t i = 0; i < tokens->v.arr.n; i++)
        if (gguf_string_equals(gguf_array_string(tokens, i), text)) return (int)i;
    return -1;
}

/* The byte-level BPE vocabulary of a written file. */
static void check_vocab(const char *path, int vocab_size) {
    struct gguf_file *f = NULL;
    char err[512] = "", buf[256];
    CHECK_MSG(gguf_open(&f, path, err, sizeof(err)) == 0, "%s", err);
    if (!f) return;
    struct gguf_string s;
    uint32_t u;
    CHECK(gguf_get_string(f, "tokenizer.ggml.model", &s, err, sizeof(err)) == 0 &&
          gguf_string_equals(s, "gpt2"));
    CHECK(gguf_get_string(f, "tokenizer.ggml.pre", &s, err, sizeof(err)) == 0 &&
          gguf_string_equals(s, "gpt-2"));
    CHECK(gguf_get_u32(f, "general.alignment", &u, err, sizeof(err)) == 0 && u == 32);
    CHECK(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u, err, sizeof(err)) == 0 &&
          u == (uint32_t)vocab_size - 1);
    CHECK(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u, err, sizeof(err)) == 0 &&
          u == (uint32_t)vocab_size - 1);
    const struct gguf_kv *tokens = gguf_find(f, "tokenizer.ggml.tokens");
    const struct gguf_kv *types = gguf_find(f, "tokenizer.ggml.token_type");
    const struct gguf_kv *merges = gguf_find(f, "tokenizer.ggml.merges");
    CHECK(tokens && types && merges);
    if (!tokens || !types || !merges) {
        gguf_close(f);
        return;
    }
    const struct gguf_value *t = &tokens->value;
    CHECK(t->v.arr.type == GGUF_TYPE_STRING && t->v.arr.n == (uint64_t)vocab_size);
    CHECK(types->value.v.arr.type == GGUF_TYPE_INT32 && types->value.v.arr.n == t->v.arr.n);
    /* GPT-2's byte-to-unicode map: id b is byte b */
    CHECK(strcmp(token_text(t, 'a', buf, sizeof(buf)), "a") == 0);
    CHECK(strcmp(token_text(t, '!', buf, sizeof(buf)), "!") == 0);
    CHECK(strcmp(token_text(t, 0, buf, sizeof(buf)), "\xc4\x80") == 0);    /* U+0100 */
    CHECK(strcmp(token_text(t, ' ', buf, sizeof(buf)), "\xc4\xa0") == 0);  /* U+0120 Ġ */
    CHECK(strcmp(token_text(t, '\n', buf, sizeof(buf)), "\xc4\x8a") == 0); /* U+010A Ċ */
    CHECK(strcmp(token_text(t, 0xad, buf, sizeof(buf)), "\xc5\x83") == 0); /* U+0143 */
    CHECK(strcmp(token_text(t, 0xff, buf, sizeof(buf)), "\xc3\xbf") == 0); /* ÿ */
    CHECK(strcmp(token_text(t, (uint64_t)vocab_size - 1, buf, sizeof(buf)), "<|endoftext|>") == 0);
    int32_t last_type, first_type;
    memcpy(&last_type, types->value.v.arr.data + 4 * (size_t)(vocab_size - 1), 4);
    memcpy(&first_type, types->value.v.arr.data, 4);
    CHECK(last_type == 3 && first_type == 1);
    /* tokens are unique and have no spaces */
    for (int i = 0; i < vocab_size; i++) {
        token_text(t, (uint64_t)i, buf, sizeof(buf));
        CHECK_MSG(strchr(buf, ' ') == NULL, "token %d '%s'", i, buf);
        CHECK_MSG(find_token(t, buf) == i, "token %d '%s' is not unique", i, buf);
    }
    /* every merge "a b": a, b and ab are tokens, and ab comes after a and b */
    const struct gguf_value *mv = &merges->value;
    CHECK(mv->v.arr.type == GGUF_TYPE_STRING && mv->v.arr.n >= (uint64_t)vocab_size - 257);
    for (uint64_t i = 0; i < mv->v.arr.n; i++) {
        char merge[256], joined[256];
        token_text(mv, i, merge, sizeof(merge));
        char *space = strchr(merge, ' ');
        CHECK_MSG(space && !strchr(space + 1, ' '), "merge %d '%s'", (int)i, merge);
        if (!space) continue;
        *space = 0;
        snprintf(joined, sizeof(joined), "%s%s", merge, space + 1);
        int a = find_token(t, merge), b = find_token(t, space + 1), ab = find_token(t, joined);
        CHECK_MSG(a >= 0 && b >= 0 && ab > a && ab > b, "merge %d: '%s' + '%s'", (int)i, merge,
                  space + 1);
    }
    if (vocab_size >= 400) {
        /* learned from the embedded English text */
        CHECK(find_token(t, "\xc4\xa0the") > 0);
        CHECK(find_token(t, "he") > 0);
    }
    gguf_close(f);
}

static int read_file(const char *path, unsigned char **data, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc(*size ? *size : 1);
    int ok = *data && fread(*data, 1, *size, f) == *size;
    fclose(f);
    return ok ? 0 : -1;
}

/* 1 if the two files have identical bytes. */
static int same_file(const char *a, const char *b) {
    unsigned char *da = NULL, *db = NULL;
    size_t na = 0, nb = 0;
    int same = read_file(a, &da, &na) == 0 && read_file(b, &db, &nb) == 0 && na == nb &&
               memcmp(da, db, na) == 0;
    free(da);
    free(db);
    return same;
}

static void write_and_check(const struct model_random_params *p, const char *name) {
    char path[512], err[512] = "";
    test_tmp_path(path, sizeof(path), name);
    int rc = model_write_random(p, path, err, sizeof(err));
    CHECK_MSG(rc == 0, "%s: %s", name, err);
    struct model *m = NULL;
    if (rc == 0) CHECK_MSG(model_load(&m, path, err, sizeof(err)) == 0, "%s: %s", name, err);
    if (m) check_model(m, p);
    model_free(m);
    if (rc == 0 && p->arch == MODEL_ARCH_LLAMA) check_vocab(path, p->vocab_size);
    remove(path);
}

static void check_refused(struct model_random_params p, const char *expected) {
    char path[512], err[512] = "";
    test_tmp_path(path, sizeof(path), "refused.gguf");
    CHECK(model_write_random(&p, path, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, expected) != NULL, "'%s' lacks '%s'", err, expected);
    remove(path);
}

int main(void) {
    const enum model_arch archs[] = {MODEL_ARCH_LLAMA, MODEL_ARCH_QWEN2, MODEL_ARCH_QWEN3};
    const enum tensor_type types[] = {TENSOR_F32, TENSOR_F16, TENSOR_Q8_0, TENSOR_Q4_0};
    char name[64];
    for (int a = 0; a < 3; a++) {
        for (int t = 0; t < 4; t++) {
            struct model_random_params p = small_params(archs[a], types[t]);
            snprintf(name, sizeof(name), "%s-%s.gguf", model_arch_name(archs[a]),
                     tensor_type_name(types[t]));
            write_and_check(&p, name);
        }
    }

    /* dim 48 is not a multiple of 32: q8_0 falls back to f32 for the
     * matrices that read dim, w_down (hidden 64) stays q8_0 */
    struct model_random_params odd = small_params(MODEL_ARCH_LLAMA, TENSOR_Q8_0);
    odd.dim = 48;
    odd.hidden_dim = 64;
    write_and_check(&odd, "odd-q8_0.gguf");

    /* the smallest vocabulary, and one large enough to need filler merges */
    struct model_random_params v = small_params(MODEL_ARCH_LLAMA, TENSOR_F32);
    v.dim = 32;
    v.hidden_dim = 32;
    v.n_heads = 2;
    v.n_kv_heads = 1;
    v.vocab_size = 260;
    write_and_check(&v, "vocab260.gguf");
    v.vocab_size = 3000;
    write_and_check(&v, "vocab3000.gguf");

    /* determinism */
    char a[512], b[512], c[512], err[512] = "";
    struct model_random_params p = small_params(MODEL_ARCH_QWEN2, TENSOR_Q4_0);
    test_tmp_path(a, sizeof(a), "seed-a.gguf");
    test_tmp_path(b, sizeof(b), "seed-b.gguf");
    test_tmp_path(c, sizeof(c), "seed-c.gguf");
    CHECK(model_write_random(&p, a, err, sizeof(err)) == 0);
    CHECK(model_write_random(&p, b, err, sizeof(err)) == 0);
    p.seed = 8;
    CHECK(model_write_random(&p, c, err, sizeof(err)) == 0);
    CHECK(same_file(a, b));
    CHECK(!same_file(a, c));
    remove(a);
    remove(b);
    remove(c);

    struct model_random_params bad = small_params(MODEL_ARCH_LLAMA, TENSOR_F32);
    bad.vocab_size = 259;
    check_refused(bad, "vocab_size is 259, expected 260..");
    bad = small_params(MODEL_ARCH_LLAMA, TENSOR_F32);
    bad.n_heads = 5;
    check_refused(bad, "n_heads 5 does not divide dim 64");
    bad = small_params(MODEL_ARCH_LLAMA, TENSOR_F32);
    bad.n_kv_heads = 3;
    check_refused(bad, "n_kv_heads 3 does not divide n_heads 4");
    bad = small_params(MODEL_ARCH_LLAMA, TENSOR_F32);
    bad.n_layers = 0;
    check_refused(bad, "n_layers is 0");
    bad = small_params(MODEL_ARCH_LLAMA, TENSOR_F32);
    bad.type = (enum tensor_type)5;
    check_refused(bad, "unsupported weight type 5");
    return test_status("test_model_random");
}
