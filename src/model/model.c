/* model.c -- struct model from a file.
 *
 * model_load tells the two formats apart by magic: a llama2.c checkpoint
 * goes to llama2c.c, a GGUF file is read here. For GGUF, the architecture
 * (llama, qwen2 or qwen3) picks the key prefix and the tensors that must be
 * present; every hyperparameter is range-checked, and every tensor's type
 * and shape is checked against the config before its data is used, so the
 * forward pass can trust struct model without further checks. Weights point
 * into the file mapping and are never copied. */
#include "base/base.h"
#include "model_internal.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* What the GGUF loader keeps at hand while it reads one file. */
struct model_gguf_loader {
    const struct gguf_file *file; /* the open file */
    const char *path;             /* for messages */
    const char *arch;             /* key prefix: "llama", "qwen2" or "qwen3" */
    char *err;                    /* message buffer (errlen bytes) */
    size_t errlen;
};

static const char *const model_arch_names[] = {"llama", "qwen2", "qwen3"};

const char *model_arch_name(enum model_arch arch) {
    if ((int)arch < 0 || (size_t)arch >= sizeof(model_arch_names) / sizeof(model_arch_names[0]))
        return "unknown";
    return model_arch_names[arch];
}

int model_is_gguf(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char magic[4];
    size_t n = fread(magic, 1, sizeof(magic), f);
    fclose(f);
    return n == sizeof(magic) && memcmp(magic, "GGUF", sizeof(magic)) == 0;
}

/* "<path>: " and the formatted message into err. */
static int model_vfail(char *err, size_t errlen, const char *path, const char *fmt, va_list ap) {
    return error_vformat_at(err, errlen, path, fmt, ap);
}

int model_fail(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    model_vfail(err, errlen, path, fmt, ap);
    va_end(ap);
    return -1;
}

/* model_fail into the loader's error buffer. */
__attribute__((format(printf, 2, 3))) static int loader_fail(const struct model_gguf_loader *ld,
                                                             const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    model_vfail(ld->err, ld->errlen, ld->path, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *loader_type_name(enum gguf_type type) {
    const char *name = gguf_value_type_name((int)type);
    return name ? name : "unknown";
}

/* The value of an integer-typed metadata value as int64 (huge unsigned
 * values saturate so that range checks reject them); -1 if not an integer. */
static int value_as_int(const struct gguf_value *value, int64_t *out) {
    switch (value->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64:
        *out = value->v.u64 > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)value->v.u64;
        return 0;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64:
        *out = value->v.i64;
        return 0;
    default:
        return -1;
    }
}

/* Reads the integer key <arch>.<suffix> into out, which must lie in
 * 1..max. An absent key takes default_value, or is an error if that is 0. */
static int loader_int(const struct model_gguf_loader *ld, const char *suffix, int default_value,
                      int max, int *out) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", ld->arch, suffix);
    const struct gguf_kv *kv = gguf_find(ld->file, key);
    if (!kv) {
        if (default_value == 0) return loader_fail(ld, "key '%s' is missing", key);
        *out = default_value;
        return 0;
    }
    int64_t v;
    if (value_as_int(&kv->value, &v) != 0)
        return loader_fail(ld, "key '%s' has type %s, expected an integer", key,
                           loader_type_name(kv->value.type));
    if (v < 1 || v > max)
        return loader_fail(ld, "key '%s' is %lld, expected 1..%d", key, (long long)v, max);
    *out = (int)v;
    return 0;
}

/* Reads the number key <arch>.<suffix> (absent: default_value) into out,
 * which must be finite and within (0, max). */
static int loader_float(const struct model_gguf_loader *ld, const char *suffix, float default_value,
                        double max, float *out) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", ld->arch, suffix);
    const struct gguf_kv *kv = gguf_find(ld->file, key);
    if (!kv) {
        *out = default_value;
        return 0;
    }
    double v;
    int64_t i;
    if (kv->value.type == GGUF_TYPE_FLOAT32 || kv->value.type == GGUF_TYPE_FLOAT64)
        v = kv->value.v.f64;
    else if (value_as_int(&kv->value, &i) == 0)
        v = (double)i;
    else
        return loader_fail(ld, "key '%s' has type %s, expected a number", key,
                           loader_type_name(kv->value.type));
    if (!(v > 0.0 && v < max))
        return loader_fail(ld, "key '%s' is %g, expected a number in (0, %g)", key, v, max);
    *out = (float)v;
    return 0;
}

/* general.architecture: one of the supported architectures. */
static int loader_arch(const struct model_gguf_loader *ld, enum model_arch *out) {
    const struct gguf_kv *kv = gguf_find(ld->file, "general.architecture");
    if (!kv) return loader_fail(ld, "key 'general.architecture' is missing");
    if (kv->value.type != GGUF_TYPE_STRING)
        return loader_fail(ld, "key 'general.architecture' has type %s, expected string",
                           loader_type_name(kv->value.type));
    for (size_t a = 0; a < sizeof(model_arch_names) / sizeof(model_arch_names[0]); a++) {
        if (gguf_string_equals(kv->value.v.str, model_arch_names[a])) {
            *out = (enum model_arch)a;
            return 0;
        }
    }
    struct gguf_string s = kv->value.v.str;
    int shown = s.len > 64 ? 64 : (int)s.len;
    return loader_fail(ld, "architecture '%.*s' is not supported (expected llama, qwen2 or qwen3)",
                       shown, s.data);
}

/* The vocabulary size: <arch>.vocab_size, else the length of
 * tokenizer.ggml.tokens, else the rows of token_embd.weight. */
static int loader_vocab(const struct model_gguf_loader *ld, int *out) {
    char key[128];
    snprintf(key, sizeof(key), "%s.vocab_size", ld->arch);
    if (gguf_find(ld->file, key)) return loader_int(ld, "vocab_size", 0, MODEL_MAX_VOCAB, out);
    const struct gguf_kv *tokens = gguf_find(ld->file, "tokenizer.ggml.tokens");
    if (tokens) {
        if (tokens->value.type != GGUF_TYPE_ARRAY)
            return loader_fail(ld, "key 'tokenizer.ggml.tokens' has type %s, expected array",
                               loader_type_name(tokens->value.type));
        uint64_t n = tokens->value.v.arr.n;
        if (n < 1 || n > MODEL_MAX_VOCAB)
            return loader_fail(ld, "key 'tokenizer.ggml.tokens' has %llu tokens, expected 1..%d",
                               (unsigned long long)n, MODEL_MAX_VOCAB);
        *out = (int)n;
        return 0;
    }
    const struct gguf_tensor *embd = gguf_find_tensor(ld->file, "token_embd.weight");
    if (embd && embd->n_dims == 2 && embd->dims[1] >= 1 && embd->dims[1] <= MODEL_MAX_VOCAB) {
        *out = (int)embd->dims[1];
        return 0;
    }
    return loader_fail(ld,
                       "cannot tell the vocabulary size: no key '%s', no "
                       "'tokenizer.ggml.tokens' and no usable 'token_embd.weight'",
                       key);
}

/* Relations between hyperparameters that the tensor shapes rely on. */
static int loader_check_config(const struct model_gguf_loader *ld, const struct model_config *c) {
    const char *a = ld->arch;
    if (c->n_heads % c->n_kv_heads != 0)
        return loader_fail(ld, "%s.attention.head_count_kv %d does not divide head_count %d", a,
                           c->n_kv_heads, c->n_heads);
    if ((int64_t)c->n_heads * c->head_dim > MODEL_MAX_WIDTH)
        return loader_fail(ld, "%s.attention.head_count %d times key_length %d exceeds %d", a,
                           c->n_heads, c->head_dim, MODEL_MAX_WIDTH);
    if (c->rope_dim > c->head_dim || c->rope_dim % 2 != 0)
        return loader_fail(ld, "%s.rope.dimension_count is %d, expected an even number <= %d", a,
                           c->rope_dim, c->head_dim);
    return 0;
}

/* Reads the hyperparameters of the <arch> keys. */
static int loader_config(const struct model_gguf_loader *ld, struct model_config *c) {
    const char *a = ld->arch;
    if (loader_int(ld, "embedding_length", 0, MODEL_MAX_WIDTH, &c->dim) ||
        loader_int(ld, "feed_forward_length", 0, MODEL_MAX_WIDTH, &c->hidden_dim) ||
        loader_int(ld, "block_count", 0, MODEL_MAX_LAYERS, &c->n_layers) ||
        loader_int(ld, "attention.head_count", 0, MODEL_MAX_WIDTH, &c->n_heads) ||
        loader_int(ld, "attention.head_count_kv", c->n_heads, MODEL_MAX_WIDTH, &c->n_kv_heads) ||
        loader_int(ld, "context_length", 0, MODEL_MAX_CONTEXT, &c->context_length))
        return -1;
    char key[128];
    snprintf(key, sizeof(key), "%s.attention.key_length", a);
    int heads_divide = c->n_heads > 0 && c->dim % c->n_heads == 0;
    if (!gguf_find(ld->file, key) && !heads_divide)
        return loader_fail(ld, "%s.embedding_length %d is not a multiple of head_count %d", a,
                           c->dim, c->n_heads);
    if (loader_int(ld, "attention.key_length", heads_divide ? c->dim / c->n_heads : 0,
                   MODEL_MAX_WIDTH, &c->head_dim) ||
        loader_int(ld, "rope.dimension_count", c->head_dim, MODEL_MAX_WIDTH, &c->rope_dim) ||
        loader_float(ld, "rope.freq_base", 10000.0f, 1e30, &c->rope_base) ||
        loader_float(ld, "attention.layer_norm_rms_epsilon", 1e-5f, 1.0, &c->norm_eps) ||
        loader_vocab(ld, &c->vocab_size))
        return -1;
    c->rope_style = c->arch == MODEL_ARCH_LLAMA ? TENSOR_ROPE_NORM : TENSOR_ROPE_NEOX;
    return loader_check_config(ld, c);
}

/* "[d0, d1, ...]" of a tensor's dims into buf. */
static void format_dims(char *buf, size_t size, int n_dims, const uint64_t *dims) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n_dims && i < GGUF_MAX_DIMS && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%llu", i ? ", " : "",
                                 (unsigned long long)dims[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

/* Looks up tensor name: 0 with *out NULL if it is absent and not required. */
static int loader_find(const struct model_gguf_loader *ld, const char *name, int required,
                       const struct gguf_tensor **out) {
    *out = gguf_find_tensor(ld->file, name);
    if (!*out && required) return loader_fail(ld, "tensor '%s' is missing", name);
    return 0;
}

/* Checks that tensor t (called name) has exactly the dims want[0..n_dims). */
static int loader_check_shape(const struct model_gguf_loader *ld, const char *name,
                              const struct gguf_tensor *t, int n_dims, const uint64_t *want) {
    int same = t->n_dims == n_dims;
    for (int i = 0; same && i < n_dims; i++) same = t->dims[i] == want[i];
    if (same) return 0;
    char got[128], expected[128];
    format_dims(got, sizeof(got), t->n_dims, t->dims);
    format_dims(expected, sizeof(expected), n_dims, want);
    return loader_fail(ld, "tensor '%s' has shape %s, expected %s", name, got, expected);
}

/* Binds a 1-D F32 tensor of n elements (a norm weight or a bias). */
static int loader_vector(const struct model_gguf_loader *ld, const char *name, int n, int required,
                         const float **out) {
    const struct gguf_tensor *t;
    *out = NULL;
    if (loader_find(ld, name, required, &t)) return -1;
    if (!t) return 0;
    uint64_t want = (uint64_t)n;
    if (loader_check_shape(ld, name, t, 1, &want)) return -1;
    if (t->type != TENSOR_F32) {
        const char *type = tensor_type_name(t->type);
        return loader_fail(ld, "tensor '%s' has type %s, expected f32", name,
                           type ? type : "unknown");
    }
    if (t->size != (size_t)n * sizeof(float) || !t->data)
        return loader_fail(ld, "tensor '%s' holds %zu bytes, expected %zu", name, t->size,
                           (size_t)n * sizeof(float));
    *out = t->data;
    return 0;
}

/* Binds a 2-D weight matrix of shape (rows, cols), GGUF dims [cols, rows]. */
static int loader_matrix(const struct model_gguf_loader *ld, const char *name, int rows, int cols,
                         int required, struct tensor_matrix *out) {
    const struct gguf_tensor *t;
    memset(out, 0, sizeof(*out));
    if (loader_find(ld, name, required, &t)) return -1;
    if (!t) return 0;
    uint64_t want[2] = {(uint64_t)cols, (uint64_t)rows};
    if (loader_check_shape(ld, name, t, 2, want)) return -1;
    if (!tensor_type_is_valid(t->type))
        return loader_fail(ld, "tensor '%s' has type %d, which is not supported", name,
                           (int)t->type);
    if (cols % tensor_type_block_elements(t->type) != 0)
        return loader_fail(ld, "tensor '%s' is %s with %d columns, not a multiple of %d", name,
                           tensor_type_name(t->type), cols, tensor_type_block_elements(t->type));
    size_t bytes = (size_t)rows * tensor_row_bytes(t->type, cols);
    if (t->size != bytes || !t->data)
        return loader_fail(ld, "tensor '%s' holds %zu bytes, expected %zu", name, t->size, bytes);
    *out = tensor_matrix_make(t->data, t->type, rows, cols);
    return 0;
}

/* Reads the <arch>.rope.scaling.* keys (and the older rope.scale_linear):
 * none, linear and llama3 are supported; YaRN and others are refused. */
static int loader_rope_scaling(const struct model_gguf_loader *ld, struct model *m) {
    struct model_config *c = &m->config;
    char key[128];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", ld->arch);
    const struct gguf_kv *kv = gguf_find(ld->file, key);
    c->rope_scaling = MODEL_ROPE_SCALING_NONE;
    if (kv && kv->value.type != GGUF_TYPE_STRING)
        return loader_fail(ld, "key '%s' has type %s, expected string", key,
                           loader_type_name(kv->value.type));
    if (kv && gguf_string_equals(kv->value.v.str, "linear"))
        c->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
    else if (kv && gguf_string_equals(kv->value.v.str, "llama3"))
        c->rope_scaling = MODEL_ROPE_SCALING_LLAMA3;
    else if (kv && !gguf_string_equals(kv->value.v.str, "none")) {
        int shown = kv->value.v.str.len > 32 ? 32 : (int)kv->value.v.str.len;
        return loader_fail(ld, "key '%s' is '%.*s': only none, linear and llama3 are supported",
                           key, shown, kv->value.v.str.data);
    }
    snprintf(key, sizeof(key), "%s.rope.scale_linear", ld->arch);
    if (!kv && gguf_find(ld->file, key)) c->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
    const char *factor_key = kv ? "rope.scaling.factor" : "rope.scale_linear";
    if (loader_float(ld, factor_key, 1.0f, 1e6, &c->rope_factor) ||
        loader_int(ld, "rope.scaling.original_context_length", c->context_length, MODEL_MAX_CONTEXT,
                   &c->rope_original_context))
        return -1;
    if (c->rope_scaling == MODEL_ROPE_SCALING_NONE) c->rope_factor = 1.0f;
    return 0;
}

/* Binds tensor t (of block layer) if the architecture has it. */
static int loader_tensor(const struct model_gguf_loader *ld, struct model *m,
                         const struct model_tensor_info *t, int layer) {
    const struct model_config *c = &m->config;
    enum model_need need = model_tensor_need(c->arch, t->group);
    if (need == MODEL_NEED_ABSENT) return 0;
    char name[96];
    model_tensor_name(name, sizeof(name), t, layer);
    int required = need == MODEL_NEED_REQUIRED;
    int rows = model_width_of(c, t->rows), cols = model_width_of(c, t->cols);
    if (t->kind == MODEL_TENSOR_MATRIX)
        return loader_matrix(ld, name, rows, cols, required, model_tensor_matrix(m, t, layer));
    return loader_vector(ld, name, cols, required, model_tensor_vector(m, t, layer));
}

/* Reads the config and binds every tensor of an open GGUF file, as the
 * descriptor table lists them. */
static int model_bind_gguf(struct model *m, const struct model_gguf_loader *ld) {
    struct model_config *c = &m->config;
    if (loader_config(ld, c)) return -1;
    m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers));
    if (!m->layers) return loader_fail(ld, "cannot allocate %d layers", c->n_layers);
    for (int i = 0; i < model_tensor_count; i++) {
        const struct model_tensor_info *t = &model_tensors[i];
        for (int l = 0; l < (t->in_block ? c->n_layers : 1); l++)
            if (loader_tensor(ld, m, t, l)) return -1;
    }
    if (!m->output.data) m->output = m->token_embd; /* tied classifier */
    return loader_rope_scaling(ld, m);
}

static int model_load_gguf(struct model *m, const char *path, char *err, size_t errlen) {
    struct gguf_file *file = NULL;
    if (gguf_open(&file, path, err, errlen)) return -1;
    m->gguf = file;
    struct model_gguf_loader ld = {m->gguf, path, NULL, err, errlen};
    if (loader_arch(&ld, &m->config.arch)) return -1;
    ld.arch = model_arch_names[m->config.arch];
    return model_bind_gguf(m, &ld);
}

static size_t matrix_bytes(const struct tensor_matrix *w) {
    return (size_t)w->rows * tensor_row_bytes(w->type, w->cols);
}

/* Bytes of every matrix a generated token reads: the table's per-token
 * matrices (the one embedding row looked up is negligible). */
size_t model_count_weight_bytes(const struct model *m) {
    size_t total = 0;
    for (int i = 0; i < model_tensor_count; i++) {
        const struct model_tensor_info *t = &model_tensors[i];
        if (!t->per_token) continue;
        for (int l = 0; l < (t->in_block ? m->config.n_layers : 1); l++)
            total += matrix_bytes(model_tensor_matrix_of(m, t, l));
    }
    return total;
}

int model_load(struct model **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    struct model *m = calloc(1, sizeof(*m));
    if (!m || !(m->path = strdup(path))) {
        snprintf(err, errlen, "%s: out of memory", path);
        free(m);
        return -1;
    }
    int rc = model_is_gguf(path) ? model_load_gguf(m, path, err, errlen)
                                 : llama2c_load(m, path, err, errlen);
    if (rc != 0) {
        model_free(m);
        return -1;
    }
    m->weight_bytes = model_count_weight_bytes(m);
    m->shard_count = 1;
    m->reduce_parts = model_reduction_parts(m);
    *out = m;
    return 0;
}

void model_release_pages(const struct model *model, const struct tensor_matrix *w) {
    int file_mapped = model->mapping || (model->gguf && model->gguf->owns_mapping);
    if (!file_mapped || w->layout != TENSOR_LAYOUT_ROWS || w->rows <= 0) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t begin = (uintptr_t)w->data;
    uintptr_t end =
        begin + (size_t)(w->rows - 1) * w->row_stride + tensor_row_bytes(w->type, w->cols);
    begin = (begin + page - 1) / page * page;
    end = end / page * page;
    /* the mapping is private and read-only: dropped pages are read again
     * from the file, never lost */
    if (begin < end) madvise((void *)begin, end - begin, MADV_DONTNEED);
}

void model_free(struct model *model) {
    if (!model) return;
    if (model->gguf) gguf_close(model->gguf);
    if (model->mapping) munmap(model->mapping, model->mapping_size);
    free(model->layers);
    free(model->path);
    free(model);
}
