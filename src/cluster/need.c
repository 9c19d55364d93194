/* need.c -- how much memory one rank of a model needs at a tensor-parallel
 * degree, known from the file before any weight is read, so placement can
 * decide before a runner starts.
 *
 * The figures walk the model module's tensor table with its split rules (a
 * split tensor's slice, a replicated tensor whole, the classifier's largest
 * vocabulary slice) and size the KV cache with the engine's own formula, so
 * a new tensor or cache type changes them in one place. A classifier tied
 * to the embedding costs nothing extra: its slice points into the
 * embedding, which every rank holds. */
#include "cluster_internal.h"
#include "engine/engine.h"
#include "model/model.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Bytes rank's slice of matrix w takes under split rule shard over tp ranks
 * (the largest slice where they differ). */
static int64_t matrix_share(const struct tensor_matrix *w, enum model_shard shard, int tp) {
    int64_t rows = w->rows;
    int cols = w->cols;
    if (shard == MODEL_SHARD_ROWS) rows /= tp;
    if (shard == MODEL_SHARD_VOCAB) rows = (rows + tp - 1) / tp;
    if (shard == MODEL_SHARD_COLUMNS) cols /= tp;
    return rows * (int64_t)tensor_row_bytes(w->type, cols);
}

/* The vector tensor t (in block layer) of m, or NULL if m has none. */
static const float *vector_of(const struct model *m, const struct model_tensor_info *t, int layer) {
    const char *base = t->in_block ? (const char *)&m->layers[layer] : (const char *)m;
    const float *v;
    memcpy(&v, base + t->field, sizeof(v));
    return v;
}

/* Bytes of tensor t (in block layer) on one rank of tp. */
static int64_t tensor_share(const struct model *m, const struct model_tensor_info *t, int layer,
                            int tp) {
    if (t->kind != MODEL_TENSOR_MATRIX) {
        /* vectors are F32; a NULL one is absent from this model */
        if (!vector_of(m, t, layer)) return 0;
        int64_t n = model_width_of(&m->config, t->cols);
        return (t->shard == MODEL_SHARD_ROWS ? n / tp : n) * (int64_t)sizeof(float);
    }
    const struct tensor_matrix *w = model_tensor_matrix_of(m, t, layer);
    if (!w->data) return 0;
    if (w == &m->output && m->output.data == m->token_embd.data) return 0; /* tied */
    return matrix_share(w, t->shard, tp);
}

/* Weight bytes one of tp ranks holds. */
static int64_t weight_share(const struct model *m, int tp) {
    int64_t total = 0;
    for (int i = 0; i < model_tensor_count; i++) {
        const struct model_tensor_info *t = &model_tensors[i];
        int layers = t->in_block ? m->config.n_layers : 1;
        for (int l = 0; l < layers; l++) total += tensor_share(m, t, l, tp);
    }
    return total;
}

int cluster_degree_check(const struct model *m, int tp, char *why, size_t whylen) {
    return model_check_degree(m, tp, why, whylen);
}

int cluster_model_need_kv(const struct model *m, int tp, int64_t kv_positions, int kv_type,
                          struct cluster_need *out, char *err, size_t errlen) {
    if (!kv_cache_type_supported(kv_type)) {
        snprintf(err, errlen, "%s: the KV cache does not keep elements of type %d (f16, f32, q8_0)",
                 m->path, kv_type);
        return -1;
    }
    if (m->config.head_dim % tensor_type_block_elements((enum tensor_type)kv_type) != 0) {
        snprintf(err, errlen,
                 "%s: a %s KV cache needs a head dimension that is a multiple of %d, "
                 "not %d",
                 m->path, tensor_type_name(kv_type),
                 tensor_type_block_elements((enum tensor_type)kv_type), m->config.head_dim);
        return -1;
    }
    if (kv_positions < 0 || kv_positions > INT_MAX) {
        snprintf(err, errlen, "%s: %lld KV positions is out of range (0 to %d)", m->path,
                 (long long)kv_positions, INT_MAX);
        return -1;
    }
    if (cluster_degree_check(m, tp, err, errlen)) return -1;
    int kv_dim = m->config.n_kv_heads / tp * m->config.head_dim;
    out->tp = tp;
    out->weight_bytes = weight_share(m, tp);
    out->kv_bytes = (int64_t)kv_cache_bytes((enum tensor_type)kv_type, m->config.n_layers, kv_dim,
                                            1, (int)kv_positions);
    out->total_bytes = out->weight_bytes + out->kv_bytes + CLUSTER_OVERHEAD_BYTES;
    return 0;
}

int cluster_model_need(const struct model *m, int tp, int64_t kv_positions,
                       struct cluster_need *out, char *err, size_t errlen) {
    return cluster_model_need_kv(m, tp, kv_positions, TENSOR_F16, out, err, errlen);
}

int cluster_model_stage_need(const struct model *m, int tp, int64_t kv_positions, int kv_type,
                             struct cluster_stage_need *out, char *err, size_t errlen) {
    struct cluster_need whole;
    if (cluster_model_need_kv(m, tp, kv_positions, kv_type, &whole, err, errlen)) return -1;
    memset(out, 0, sizeof(*out));
    for (int l = 0; l < m->config.n_layers; l++) {
        int64_t layer = 0;
        for (int i = 0; i < model_tensor_count; i++)
            if (model_tensors[i].in_block) layer += tensor_share(m, &model_tensors[i], l, tp);
        if (layer > out->layer_bytes) out->layer_bytes = layer;
    }
    int kv_dim = m->config.n_kv_heads / tp * m->config.head_dim;
    out->layer_bytes +=
        (int64_t)kv_cache_bytes((enum tensor_type)kv_type, 1, kv_dim, 1, (int)kv_positions);
    for (int i = 0; i < model_tensor_count; i++) {
        const struct model_tensor_info *t = &model_tensors[i];
        if (t->in_block) continue;
        int64_t bytes = tensor_share(m, t, 0, tp);
        int embedding =
            t->kind == MODEL_TENSOR_MATRIX && model_tensor_matrix_of(m, t, 0) == &m->token_embd;
        if (embedding) {
            out->first_bytes += bytes;
            /* a tied classifier reads the embedding: the last stage holds it too */
            if (m->output.data == m->token_embd.data)
                out->last_bytes += matrix_share(&m->token_embd, MODEL_SHARD_VOCAB, tp);
        } else if (t->kind == MODEL_TENSOR_FACTORS) {
            out->stage_bytes += bytes;
        } else {
            out->last_bytes += bytes;
        }
    }
    out->stage_bytes += CLUSTER_OVERHEAD_BYTES;
    return 0;
}
