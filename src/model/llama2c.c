/* llama2c.c -- llama2.c checkpoints (run.c's legacy "version 0" .bin).
 *
 * The file is a header of 7 little-endian int32 (struct llama2c_header)
 * followed by float32 tensors in run.c's order: token_embedding, rms_att,
 * wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, the unused freq_cis_real
 * and freq_cis_imag tables, and the classifier wcls only when vocab_size is
 * negative. The file is mapped, its size must be exactly what the header
 * implies, and the weights point into the mapping. Such a model is always
 * llama: NORM rope over the whole head, theta 10000, eps 1e-5. */
#include "model_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLAMA2C_HEADER_BYTES 28 /* 7 int32 */

/* Checks every header field (vocab_size by magnitude) and the relations the
 * layout relies on; the message names the first bad field. */
static int llama2c_check_header(const struct llama2c_header *h, const char *path, char *err,
                                size_t errlen) {
    const struct {
        const char *name;
        int64_t value;
        int max;
    } fields[] = {
        {"dim", h->dim, MODEL_MAX_WIDTH},
        {"hidden_dim", h->hidden_dim, MODEL_MAX_WIDTH},
        {"n_layers", h->n_layers, MODEL_MAX_LAYERS},
        {"n_heads", h->n_heads, MODEL_MAX_WIDTH},
        {"n_kv_heads", h->n_kv_heads, MODEL_MAX_WIDTH},
        {"vocab_size", h->vocab_size < 0 ? -(int64_t)h->vocab_size : h->vocab_size,
         MODEL_MAX_VOCAB},
        {"seq_len", h->seq_len, MODEL_MAX_CONTEXT},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (fields[i].value < 1 || fields[i].value > fields[i].max)
            return model_fail(err, errlen, path, "header field %s is %lld, expected 1..%d",
                              fields[i].name, (long long)fields[i].value, fields[i].max);
    if (h->dim % h->n_heads != 0)
        return model_fail(err, errlen, path, "header field n_heads %d does not divide dim %d",
                          h->n_heads, h->dim);
    if (h->n_heads % h->n_kv_heads != 0)
        return model_fail(err, errlen, path,
                          "header field n_kv_heads %d does not divide n_heads %d", h->n_kv_heads,
                          h->n_heads);
    if ((h->dim / h->n_heads) % 2 != 0)
        return model_fail(err, errlen, path,
                          "head size dim / n_heads = %d / %d is odd; rope needs pairs", h->dim,
                          h->n_heads);
    return 0;
}

/* Floats after the header, in file order, of the tensors described by h. */
struct llama2c_layout {
    size_t token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq_cis, wcls;
};

/* Float counts of each tensor. The sizes cannot overflow: the header check
 * bounds every field by MODEL_MAX_*. */
static struct llama2c_layout llama2c_layout_of(const struct llama2c_header *h, int shared) {
    size_t dim = (size_t)h->dim, layers = (size_t)h->n_layers, hidden = (size_t)h->hidden_dim;
    size_t head_size = dim / (size_t)h->n_heads;
    size_t kv_dim = head_size * (size_t)h->n_kv_heads;
    size_t vocab = (size_t)(h->vocab_size < 0 ? -(int64_t)h->vocab_size : h->vocab_size);
    struct llama2c_layout n = {
        .token_embedding = vocab * dim,
        .rms_att = layers * dim,
        .wq = layers * dim * dim,
        .wk = layers * kv_dim * dim,
        .wv = layers * kv_dim * dim,
        .wo = layers * dim * dim,
        .rms_ffn = layers * dim,
        .w1 = layers * hidden * dim,
        .w2 = layers * dim * hidden,
        .w3 = layers * hidden * dim,
        .rms_final = dim,
        .freq_cis = (size_t)h->seq_len * head_size, /* real and imag, head_size/2 each */
        .wcls = shared ? 0 : vocab * dim,
    };
    return n;
}

static size_t llama2c_layout_floats(const struct llama2c_layout *n) {
    return n->token_embedding + n->rms_att + n->wq + n->wk + n->wv + n->wo + n->rms_ffn + n->w1 +
           n->w2 + n->w3 + n->rms_final + n->freq_cis + n->wcls;
}

/* Points model's weights at the tensors that follow the header. */
static void llama2c_bind(struct model *m, const float *p, const struct llama2c_layout *n) {
    const struct model_config *c = &m->config;
    size_t dim = (size_t)c->dim, hidden = (size_t)c->hidden_dim;
    size_t kv_dim = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    const float *embedding = p;
    const float *rms_att = embedding + n->token_embedding;
    const float *wq = rms_att + n->rms_att;
    const float *wk = wq + n->wq;
    const float *wv = wk + n->wk;
    const float *wo = wv + n->wv;
    const float *rms_ffn = wo + n->wo;
    const float *w1 = rms_ffn + n->rms_ffn;
    const float *w2 = w1 + n->w1;
    const float *w3 = w2 + n->w2;
    const float *rms_final = w3 + n->w3;
    const float *wcls = rms_final + n->rms_final + n->freq_cis;

    m->token_embd = tensor_matrix_make(embedding, TENSOR_F32, c->vocab_size, c->dim);
    m->output_norm = rms_final;
    m->output =
        n->wcls ? tensor_matrix_make(wcls, TENSOR_F32, c->vocab_size, c->dim) : m->token_embd;
    for (size_t l = 0; l < (size_t)c->n_layers; l++) {
        struct model_layer *w = &m->layers[l];
        w->attn_norm = rms_att + l * dim;
        w->wq = tensor_matrix_make(wq + l * dim * dim, TENSOR_F32, c->dim, c->dim);
        w->wk = tensor_matrix_make(wk + l * kv_dim * dim, TENSOR_F32, (int)kv_dim, c->dim);
        w->wv = tensor_matrix_make(wv + l * kv_dim * dim, TENSOR_F32, (int)kv_dim, c->dim);
        w->wo = tensor_matrix_make(wo + l * dim * dim, TENSOR_F32, c->dim, c->dim);
        w->ffn_norm = rms_ffn + l * dim;
        w->w_gate = tensor_matrix_make(w1 + l * hidden * dim, TENSOR_F32, c->hidden_dim, c->dim);
        w->w_down = tensor_matrix_make(w2 + l * dim * hidden, TENSOR_F32, c->dim, c->hidden_dim);
        w->w_up = tensor_matrix_make(w3 + l * hidden * dim, TENSOR_F32, c->hidden_dim, c->dim);
    }
}

/* The config of a llama2.c model with header h. */
static void llama2c_config(struct model_config *c, const struct llama2c_header *h) {
    memset(c, 0, sizeof(*c));
    c->arch = MODEL_ARCH_LLAMA;
    c->dim = h->dim;
    c->hidden_dim = h->hidden_dim;
    c->n_layers = h->n_layers;
    c->n_heads = h->n_heads;
    c->n_kv_heads = h->n_kv_heads;
    c->head_dim = h->dim / h->n_heads;
    c->vocab_size = h->vocab_size < 0 ? -h->vocab_size : h->vocab_size;
    c->context_length = h->seq_len;
    c->rope_dim = c->head_dim;
    c->rope_base = 10000.0f;
    c->rope_style = TENSOR_ROPE_NORM;
    c->norm_eps = 1e-5f;
}

/* Maps path read-only into model->mapping. */
static int llama2c_map(struct model *m, const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return model_fail(err, errlen, path, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return model_fail(err, errlen, path, "not a regular file");
    }
    if ((uint64_t)st.st_size < LLAMA2C_HEADER_BYTES) {
        close(fd);
        return model_fail(err, errlen, path,
                          "file is %lld bytes, too small for a llama2.c header (%d bytes) or "
                          "a GGUF file",
                          (long long)st.st_size, LLAMA2C_HEADER_BYTES);
    }
    void *base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int mmap_errno = errno;
    close(fd);
    if (base == MAP_FAILED)
        return model_fail(err, errlen, path, "cannot map: %s", strerror(mmap_errno));
    m->mapping = base;
    m->mapping_size = (size_t)st.st_size;
    return 0;
}

int llama2c_load(struct model *model, const char *path, char *err, size_t errlen) {
    if (llama2c_map(model, path, err, errlen)) return -1;
    struct llama2c_header h;
    memcpy(&h, model->mapping, sizeof(h));
    if (llama2c_check_header(&h, path, err, errlen)) return -1;

    int shared = h.vocab_size > 0;
    struct llama2c_layout n = llama2c_layout_of(&h, shared);
    size_t expected = LLAMA2C_HEADER_BYTES + sizeof(float) * llama2c_layout_floats(&n);
    if (model->mapping_size != expected)
        return model_fail(err, errlen, path,
                          "file is %zu bytes, expected %zu for the header (dim %d, hidden_dim "
                          "%d, n_layers %d, n_heads %d, n_kv_heads %d, vocab_size %d, "
                          "seq_len %d)",
                          model->mapping_size, expected, h.dim, h.hidden_dim, h.n_layers, h.n_heads,
                          h.n_kv_heads, h.vocab_size, h.seq_len);

    llama2c_config(&model->config, &h);
    model->layers = calloc((size_t)h.n_layers, sizeof(*model->layers));
    if (!model->layers)
        return model_fail(err, errlen, path, "cannot allocate %d layers", h.n_layers);
    llama2c_bind(model, (const float *)model->mapping + LLAMA2C_HEADER_BYTES / sizeof(float), &n);
    return 0;
}
