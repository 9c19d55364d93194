/* test_model_errors.c -- model_load on files made here: llama2.c checkpoints
 * whose floats number their own position (so the binding of every tensor
 * can be checked), with a shared or a separate classifier, then truncated,
 * padded or with bad headers; and GGUF files written with gguf_writer that
 * lack a tensor or a key, or have a wrong shape, type, architecture or
 * hyperparameter. Every failure must return -1 with the file and the field
 * named in the message. */
#include "model/model.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------- llama2.c */

/* dim 64, hidden 96, 2 layers, 4 heads of 16, 2 kv heads, vocab 300, seq 16 */
static const struct llama2c_header tiny = {64, 96, 2, 4, 2, 300, 16};

/* Float count after the header for tiny (wcls if separate). */
static size_t tiny_floats(int separate) {
    size_t dim = 64, hidden = 96, layers = 2, kv_dim = 32, vocab = 300;
    return vocab * dim + layers * dim + layers * dim * dim * 2 + layers * kv_dim * dim * 2 +
           layers * dim + layers * hidden * dim * 3 + dim + 16 * 16 + (separate ? vocab * dim : 0);
}

/* Writes header h then n floats whose value is their index, minus cut bytes
 * (negative cut appends bytes). */
static void write_bin(const char *path, const struct llama2c_header *h, size_t n, long cut) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fwrite(h, sizeof(*h), 1, f);
    for (size_t i = 0; i + 1 < n; i++) {
        float v = (float)i;
        fwrite(&v, sizeof(v), 1, f);
    }
    /* the last float, cut short or padded */
    float last = (float)(n - 1);
    unsigned char bytes[8] = {0};
    memcpy(bytes, &last, 4);
    fwrite(bytes, 1, (size_t)(4 - cut), f);
    fclose(f);
}

static void expect_failure(const char *path, const char *expected) {
    struct model *m = (struct model *)1;
    char err[512] = "";
    CHECK(model_load(&m, path, err, sizeof(err)) == -1);
    CHECK(m == NULL);
    CHECK_MSG(strstr(err, expected) != NULL, "'%s' lacks '%s'", err, expected);
    CHECK_MSG(strstr(err, path) != NULL, "'%s' does not name the file", err);
}

/* Value (= float index) of the first element of a bound tensor. */
static float first(const void *p) {
    return *(const float *)p;
}

static void test_llama2c(void) {
    char path[512], err[512] = "";
    test_tmp_path(path, sizeof(path), "tiny.bin");
    write_bin(path, &tiny, tiny_floats(0), 0);
    struct model *m = NULL;
    CHECK_MSG(model_load(&m, path, err, sizeof(err)) == 0, "%s", err);
    if (m) {
        const struct model_config *c = &m->config;
        CHECK(c->dim == 64 && c->hidden_dim == 96 && c->n_layers == 2 && c->n_heads == 4);
        CHECK(c->n_kv_heads == 2 && c->head_dim == 16 && c->vocab_size == 300);
        CHECK(c->context_length == 16 && c->rope_dim == 16 && c->rope_base == 10000.0f);
        CHECK(c->arch == MODEL_ARCH_LLAMA && c->rope_style == TENSOR_ROPE_NORM);
        /* run.c's order: embedding 19200, rms_att 128, wq 8192, wk 4096,
         * wv 4096, wo 8192, rms_ffn 128, w1 12288, w2 12288, w3 12288 */
        CHECK(first(m->token_embd.data) == 0.0f);
        CHECK(first(m->layers[0].attn_norm) == 19200.0f);
        CHECK(first(m->layers[1].attn_norm) == 19264.0f);
        CHECK(first(m->layers[0].wq.data) == 19328.0f);
        CHECK(first(m->layers[1].wq.data) == 19328.0f + 4096.0f);
        CHECK(first(m->layers[0].wk.data) == 27520.0f);
        CHECK(first(m->layers[1].wk.data) == 27520.0f + 2048.0f);
        CHECK(first(m->layers[0].wv.data) == 31616.0f);
        CHECK(first(m->layers[0].wo.data) == 35712.0f);
        CHECK(first(m->layers[1].ffn_norm) == 43904.0f + 64.0f);
        CHECK(first(m->layers[0].w_gate.data) == 44032.0f);
        CHECK(first(m->layers[1].w_down.data) == 56320.0f + 6144.0f);
        CHECK(first(m->layers[1].w_up.data) == 68608.0f + 6144.0f);
        CHECK(first(m->output_norm) == 80896.0f);
        CHECK(m->output.data == m->token_embd.data);
        CHECK(m->layers[0].wk.rows == 32 && m->layers[0].wk.cols == 64);
        CHECK(m->layers[0].w_down.rows == 64 && m->layers[0].w_down.cols == 96);
        CHECK(m->weight_bytes == 4 * (2 * (4096 * 2 + 2048 * 2 + 6144 * 3) + 19200));
        model_free(m);
    }

    /* negative vocab_size: wcls follows the rope tables */
    struct llama2c_header h = tiny;
    h.vocab_size = -300;
    write_bin(path, &h, tiny_floats(1), 0);
    m = NULL;
    CHECK_MSG(model_load(&m, path, err, sizeof(err)) == 0, "%s", err);
    if (m) {
        CHECK(m->config.vocab_size == 300);
        CHECK(m->output.data != m->token_embd.data);
        CHECK(first(m->output.data) == 80960.0f + 256.0f);
        CHECK(m->output.rows == 300 && m->output.cols == 64);
        model_free(m);
    }

    /* sizes: one byte short, one byte over, missing classifier */
    char expected[128];
    write_bin(path, &tiny, tiny_floats(0), 1);
    snprintf(expected, sizeof(expected), "file is %zu bytes, expected %zu",
             28 + 4 * tiny_floats(0) - 1, 28 + 4 * tiny_floats(0));
    expect_failure(path, expected);
    write_bin(path, &tiny, tiny_floats(0), -1);
    snprintf(expected, sizeof(expected), "file is %zu bytes, expected %zu",
             28 + 4 * tiny_floats(0) + 1, 28 + 4 * tiny_floats(0));
    expect_failure(path, expected);
    write_bin(path, &h, tiny_floats(0), 0);
    expect_failure(path, "vocab_size -300");

    /* bad headers */
    h = tiny;
    h.n_heads = 5;
    write_bin(path, &h, tiny_floats(0), 0);
    expect_failure(path, "header field n_heads 5 does not divide dim 64");
    h = tiny;
    h.n_kv_heads = 3;
    write_bin(path, &h, tiny_floats(0), 0);
    expect_failure(path, "header field n_kv_heads 3 does not divide n_heads 4");
    h = tiny;
    h.dim = 0;
    write_bin(path, &h, tiny_floats(0), 0);
    expect_failure(path, "header field dim is 0");
    h = tiny;
    h.n_layers = 1 << 30;
    write_bin(path, &h, tiny_floats(0), 0);
    expect_failure(path, "header field n_layers is 1073741824");
    h = tiny;
    h.vocab_size = INT32_MIN;
    write_bin(path, &h, tiny_floats(0), 0);
    expect_failure(path, "header field vocab_size is 2147483648");
    h = tiny;
    h.dim = 60; /* head size 15 */
    h.n_heads = 4;
    write_bin(path, &h, tiny_floats(0), 0);
    expect_failure(path, "head size dim / n_heads = 60 / 4 is odd");

    /* too small to be anything, and absent */
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite("0123456789", 1, 10, f);
        fclose(f);
    }
    expect_failure(path, "file is 10 bytes, too small");
    remove(path);
    expect_failure(path, "cannot open");
}

/* ---------------------------------------------------------- GGUF */

/* How to spoil a small GGUF model (dim 64, hidden 128, 2 layers, 4 heads). */
struct spoil {
    const char *arch;         /* general.architecture ("llama" if NULL) */
    const char *drop_tensor;  /* tensor left out */
    const char *bad_shape;    /* tensor whose last dim is 12 short */
    const char *f16_tensor;   /* tensor stored as F16 */
    const char *drop_key;     /* <arch>.<key> left out */
    const char *string_key;   /* <arch>.<key> written as a string */
    int head_count_kv;        /* 0: 2 */
    int embedding_length;     /* 0: 64 */
    int with_biases;          /* add q/k/v biases */
    int with_qk_norm;         /* add attn_q_norm/attn_k_norm */
    const char *rope_scaling; /* llama.rope.scaling.type, or NULL */
    float rope_factor;        /* llama.rope.scaling.factor (0: none) */
    int rope_original;        /* llama.rope.scaling.original_context_length (0: none) */
    int rope_freqs;           /* pairs of a rope_freqs.weight tensor of 2.0s (0: none) */
};

static float twos[64] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};

static float zeros[300 * 64];

static void add(struct gguf_writer *w, const struct spoil *s, const char *name, int n_dims,
                uint64_t d0, uint64_t d1) {
    if (s->drop_tensor && strcmp(name, s->drop_tensor) == 0) return;
    uint64_t dims[2] = {d0, d1};
    if (s->bad_shape && strcmp(name, s->bad_shape) == 0) dims[n_dims - 1] -= 12;
    enum tensor_type type = TENSOR_F32;
    if (s->f16_tensor && strcmp(name, s->f16_tensor) == 0) type = TENSOR_F16;
    size_t n = (size_t)dims[0] * (n_dims == 2 ? (size_t)dims[1] : 1);
    gguf_writer_add_tensor(w, name, type, n_dims, dims, zeros, n * (type == TENSOR_F32 ? 4 : 2));
}

static void add_key(struct gguf_writer *w, const struct spoil *s, const char *arch,
                    const char *suffix, uint32_t value) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    if (s->drop_key && strcmp(suffix, s->drop_key) == 0) return;
    if (s->string_key && strcmp(suffix, s->string_key) == 0)
        gguf_writer_set_string(w, key, "64");
    else
        gguf_writer_set_u32(w, key, value);
}

static int write_gguf(const char *path, const struct spoil *s) {
    const char *arch = s->arch ? s->arch : "llama";
    int kv = s->head_count_kv ? s->head_count_kv : 2;
    char name[64], err[256];
    struct gguf_writer *w = gguf_writer_create();
    gguf_writer_set_string(w, "general.architecture", arch);
    add_key(w, s, arch, "embedding_length", s->embedding_length ? s->embedding_length : 64);
    add_key(w, s, arch, "feed_forward_length", 128);
    add_key(w, s, arch, "block_count", 2);
    add_key(w, s, arch, "attention.head_count", 4);
    add_key(w, s, arch, "attention.head_count_kv", (uint32_t)kv);
    add_key(w, s, arch, "context_length", 32);
    if (s->rope_scaling) gguf_writer_set_string(w, "llama.rope.scaling.type", s->rope_scaling);
    if (s->rope_factor > 0) gguf_writer_set_f32(w, "llama.rope.scaling.factor", s->rope_factor);
    if (s->rope_original > 0)
        gguf_writer_set_u32(w, "llama.rope.scaling.original_context_length",
                            (uint32_t)s->rope_original);
    if (s->rope_freqs > 0) {
        uint64_t pairs = (uint64_t)s->rope_freqs;
        gguf_writer_add_tensor(w, "rope_freqs.weight", TENSOR_F32, 1, &pairs, twos,
                               pairs * sizeof(float));
    }
    /* no vocab_size and no tokenizer: the vocabulary is token_embd's rows */
    add(w, s, "token_embd.weight", 2, 64, 300);
    add(w, s, "output_norm.weight", 1, 64, 0);
    for (int l = 0; l < 2; l++) {
        const struct {
            const char *suffix;
            int n_dims;
            uint64_t d0, d1;
        } tensors[] = {
            {"attn_norm.weight", 1, 64, 0},    {"attn_q.weight", 2, 64, 64},
            {"attn_k.weight", 2, 64, 32},      {"attn_v.weight", 2, 64, 32},
            {"attn_output.weight", 2, 64, 64}, {"ffn_norm.weight", 1, 64, 0},
            {"ffn_gate.weight", 2, 64, 128},   {"ffn_up.weight", 2, 64, 128},
            {"ffn_down.weight", 2, 128, 64},   {"attn_q.bias", 1, 64, 0},
            {"attn_k.bias", 1, 32, 0},         {"attn_v.bias", 1, 32, 0},
            {"attn_q_norm.weight", 1, 16, 0},  {"attn_k_norm.weight", 1, 16, 0},
        };
        for (size_t i = 0; i < sizeof(tensors) / sizeof(tensors[0]); i++) {
            if (i >= 9 && i < 12 && !s->with_biases) continue;
            if (i >= 12 && !s->with_qk_norm) continue;
            snprintf(name, sizeof(name), "blk.%d.%s", l, tensors[i].suffix);
            add(w, s, name, tensors[i].n_dims, tensors[i].d0, tensors[i].d1);
        }
    }
    int rc = gguf_writer_write(w, path, err, sizeof(err));
    CHECK_MSG(rc == 0, "%s", err);
    gguf_writer_free(w);
    return rc;
}

static void expect_gguf_failure(const struct spoil *s, const char *expected) {
    char path[512];
    test_tmp_path(path, sizeof(path), "spoilt.gguf");
    if (write_gguf(path, s) == 0) expect_failure(path, expected);
    remove(path);
}

static void test_gguf(void) {
    char path[512], err[512] = "";
    test_tmp_path(path, sizeof(path), "fine.gguf");
    struct spoil fine = {0};
    struct model *m = NULL;
    if (write_gguf(path, &fine) == 0) {
        CHECK_MSG(model_load(&m, path, err, sizeof(err)) == 0, "%s", err);
        if (m) {
            const struct model_config *c = &m->config;
            CHECK(c->vocab_size == 300 && c->dim == 64 && c->head_dim == 16);
            CHECK(c->rope_dim == 16 && c->rope_base == 10000.0f && c->norm_eps == 1e-5f);
            CHECK(m->output.data == m->token_embd.data); /* no output.weight: tied */
            CHECK(m->layers[1].bq == NULL && m->layers[1].q_norm == NULL);
            model_free(m);
        }
    }
    remove(path);

    struct spoil s = {.drop_tensor = "blk.1.ffn_up.weight"};
    expect_gguf_failure(&s, "tensor 'blk.1.ffn_up.weight' is missing");
    s = (struct spoil){.bad_shape = "blk.1.ffn_up.weight"};
    expect_gguf_failure(&s, "tensor 'blk.1.ffn_up.weight' has shape [64, 116], expected [64, 128]");
    s = (struct spoil){.bad_shape = "blk.0.attn_norm.weight"};
    expect_gguf_failure(&s, "tensor 'blk.0.attn_norm.weight' has shape [52], expected [64]");
    s = (struct spoil){.f16_tensor = "output_norm.weight"};
    expect_gguf_failure(&s, "tensor 'output_norm.weight' has type f16, expected f32");
    s = (struct spoil){.arch = "gpt2"};
    expect_gguf_failure(&s, "architecture 'gpt2' is not supported");
    s = (struct spoil){.head_count_kv = 3};
    expect_gguf_failure(&s, "llama.attention.head_count_kv 3 does not divide head_count 4");
    s = (struct spoil){.embedding_length = 66};
    expect_gguf_failure(&s, "llama.embedding_length 66 is not a multiple of head_count 4");
    s = (struct spoil){.drop_key = "block_count"};
    expect_gguf_failure(&s, "key 'llama.block_count' is missing");
    s = (struct spoil){.string_key = "feed_forward_length"};
    expect_gguf_failure(&s, "key 'llama.feed_forward_length' has type string, expected an integer");
    s = (struct spoil){.arch = "qwen2"};
    expect_gguf_failure(&s, "tensor 'blk.0.attn_q.bias' is missing");
    s = (struct spoil){.arch = "qwen3"};
    expect_gguf_failure(&s, "tensor 'blk.0.attn_q_norm.weight' is missing");
    s = (struct spoil){.arch = "qwen2", .with_biases = 1, .bad_shape = "blk.1.attn_v.bias"};
    expect_gguf_failure(&s, "tensor 'blk.1.attn_v.bias' has shape [20], expected [32]");

    /* the complete qwen2 and qwen3 variants load */
    s = (struct spoil){.arch = "qwen2", .with_biases = 1};
    test_tmp_path(path, sizeof(path), "qwen.gguf");
    if (write_gguf(path, &s) == 0) {
        CHECK_MSG(model_load(&m, path, err, sizeof(err)) == 0, "%s", err);
        if (m) CHECK(m->layers[1].bv != NULL && m->config.rope_style == TENSOR_ROPE_NEOX);
        model_free(m);
    }
    s = (struct spoil){.arch = "qwen3", .with_qk_norm = 1};
    if (write_gguf(path, &s) == 0) {
        CHECK_MSG(model_load(&m, path, err, sizeof(err)) == 0, "%s", err);
        if (m) CHECK(m->layers[1].k_norm != NULL && m->layers[1].bq == NULL);
        model_free(m);
    }
    remove(path);
}

/* Loads the model s describes and writes its rotary frequencies (8 pairs:
 * head_dim 16) into out; 0, or -1 after a failed check. */
static int rope_frequencies(const struct spoil *s, float *out, struct model_config *config) {
    char path[512], err[512] = "";
    struct model *m = NULL;
    test_tmp_path(path, sizeof(path), "rope.gguf");
    int rc = write_gguf(path, s);
    if (rc == 0) {
        rc = model_load(&m, path, err, sizeof(err));
        CHECK_MSG(rc == 0, "%s", err);
    }
    if (m) {
        *config = m->config;
        model_rope_frequencies(m, out);
        model_free(m);
    }
    remove(path);
    return rc;
}

/* Rotary frequency scaling: linear divides every frequency by the factor;
 * llama3 keeps short wavelengths, divides long ones, and ramps between
 * (Meta's rule, computed here in double); rope_freqs.weight divides by
 * its factors; YaRN and a rope_freqs.weight of the wrong length are
 * refused by name. */
static void test_rope_scaling(void) {
    float plain[8], got[8];
    struct model_config c;
    struct spoil s = {0};
    if (rope_frequencies(&s, plain, &c)) return;
    CHECK(c.rope_scaling == MODEL_ROPE_SCALING_NONE && c.rope_factor == 1.0f);
    for (int j = 0; j < 8; j++)
        CHECK_MSG(fabs(plain[j] - pow(10000.0, -2.0 * j / 16)) < 1e-6 * plain[j], "pair %d", j);
    s = (struct spoil){.rope_scaling = "linear", .rope_factor = 4};
    if (rope_frequencies(&s, got, &c) == 0) {
        CHECK(c.rope_scaling == MODEL_ROPE_SCALING_LINEAR && c.rope_factor == 4.0f);
        for (int j = 0; j < 8; j++) CHECK(got[j] == plain[j] / 4.0f);
    }
    /* original context 64: wavelengths below 16 kept, above 64 divided by 8 */
    s = (struct spoil){.rope_scaling = "llama3", .rope_factor = 8, .rope_original = 64};
    if (rope_frequencies(&s, got, &c) == 0) {
        CHECK(c.rope_scaling == MODEL_ROPE_SCALING_LLAMA3 && c.rope_original_context == 64);
        int kept = 0, divided = 0, ramped = 0;
        for (int j = 0; j < 8; j++) {
            double f = pow(10000.0, -2.0 * j / 16), wavelength = 2 * M_PI / f, want;
            if (wavelength < 64 / 4.0) {
                want = f, kept++;
            } else if (wavelength > 64 / 1.0) {
                want = f / 8, divided++;
            } else {
                double smooth = (64 / wavelength - 1) / (4 - 1);
                want = (1 - smooth) * f / 8 + smooth * f, ramped++;
            }
            CHECK_MSG(fabs(got[j] - want) <= 1e-5 * want, "llama3 pair %d: %g, want %g", j, got[j],
                      want);
        }
        CHECK_MSG(kept > 0 && divided > 0 && ramped > 0, "kept %d divided %d ramped %d", kept,
                  divided, ramped);
    }
    s = (struct spoil){.rope_scaling = "llama3", .rope_factor = 8, .rope_freqs = 8};
    if (rope_frequencies(&s, got, &c) == 0)
        for (int j = 0; j < 8; j++) CHECK(got[j] == plain[j] / 2.0f);
    s = (struct spoil){.rope_freqs = 6};
    expect_gguf_failure(&s, "tensor 'rope_freqs.weight' has shape [6], expected [8]");
    s = (struct spoil){.rope_scaling = "yarn", .rope_factor = 4};
    expect_gguf_failure(&s, "key 'llama.rope.scaling.type' is 'yarn': only none, linear and "
                            "llama3 are supported");
}

int main(void) {
    test_rope_scaling();
    test_llama2c();
    test_gguf();
    return test_status("test_model_errors");
}
