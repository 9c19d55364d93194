/* tensors.c -- the descriptor table of a llama-family model's tensors
 * (model.h): one row per tensor, which the loader (model.c), the writers
 * (model_writer.c), sharding (shard.c), the engine's packing and the byte
 * count walk instead of lists of their own. */
#include "model/model.h"

#include <stddef.h>
#include <stdio.h>

#define MODEL_FIELD(name) offsetof(struct model, name)
#define LAYER_FIELD(name) offsetof(struct model_layer, name)

/* clang-format off */
const struct model_tensor_info model_tensors[] = {
    /* suffix                in_block kind                rows                cols                group                   shard                  per_token field */
    {"token_embd.weight",    0, MODEL_TENSOR_MATRIX,  MODEL_WIDTH_VOCAB,  MODEL_WIDTH_DIM,    MODEL_GROUP_ALWAYS,     MODEL_SHARD_REPLICATED, 0, MODEL_FIELD(token_embd)},
    {"rope_freqs.weight",    0, MODEL_TENSOR_FACTORS, MODEL_WIDTH_ONE,    MODEL_WIDTH_PAIRS,  MODEL_GROUP_ROPE_FREQS, MODEL_SHARD_REPLICATED, 0, MODEL_FIELD(rope_freqs)},
    {"output_norm.weight",   0, MODEL_TENSOR_NORM,    MODEL_WIDTH_ONE,    MODEL_WIDTH_DIM,    MODEL_GROUP_ALWAYS,     MODEL_SHARD_REPLICATED, 0, MODEL_FIELD(output_norm)},
    {"output.weight",        0, MODEL_TENSOR_MATRIX,  MODEL_WIDTH_VOCAB,  MODEL_WIDTH_DIM,    MODEL_GROUP_OUTPUT,     MODEL_SHARD_VOCAB,      1, MODEL_FIELD(output)},
    {"attn_norm.weight",     1, MODEL_TENSOR_NORM,    MODEL_WIDTH_ONE,    MODEL_WIDTH_DIM,    MODEL_GROUP_ALWAYS,     MODEL_SHARD_REPLICATED, 0, LAYER_FIELD(attn_norm)},
    {"attn_q.weight",        1, MODEL_TENSOR_MATRIX,  MODEL_WIDTH_Q,      MODEL_WIDTH_DIM,    MODEL_GROUP_ALWAYS,     MODEL_SHARD_ROWS,       1, LAYER_FIELD(wq)},
    {"attn_k.weight",        1, MODEL_TENSOR_MATRIX,  MODEL_WIDTH_KV,     MODEL_WIDTH_DIM,    MODEL_GROUP_ALWAYS,     MODEL_SHARD_ROWS,       1, LAYER_FIELD(wk)},
    {"attn_v.weight",        1, MODEL_TENSOR_MATRIX,  MODEL_WIDTH_KV,     MODEL_WIDTH_DIM,    MODEL_GROUP_ALWAYS,     MODEL_SHARD_ROWS,       1, LAYER_FIELD(wv)},
    {"attn_q.bias",          1, MODEL_TENSOR_BIAS,    MODEL_WIDTH_ONE,    MODEL_WIDTH_Q,      MODEL_GROUP_BIASES,     MODEL_SHARD_ROWS,       0, LAYER_FIELD(bq)},
    {"attn_k.bias",          1, MODEL_TENSOR_BIAS,    MODEL_WIDTH_ONE,    MODEL_WIDTH_KV,     MODEL_GROUP_BIASES,     MODEL_SHARD_ROWS,       0, LAYER_FIELD(bk)},
    {"attn_v.bias",          1, MODEL_TENSOR_BIAS,    MODEL_WIDTH_ONE,    MODEL_WIDTH_KV,     MODEL_GROUP_BIASES,     MODEL_SHARD_ROWS,       0, LAYER_FIELD(bv)},
    {"attn_q_norm.weight",   1, MODEL_TENSOR_NORM,    MODEL_WIDTH_ONE,    MODEL_WIDTH_HEAD,   MODEL_GROUP_QK_NORM,    MODEL_SHARD_REPLICATED, 0, LAYER_FIELD(q_norm)},
    {"attn_k_norm.weight",   1, MODEL_TENSOR_NORM,    MODEL_WIDTH_ONE,    MODEL_WIDTH_HEAD,   MODEL_GROUP_QK_NORM,    MODEL_SHARD_REPLICATED, 0, LAYER_FIELD(k_norm)},
    {"attn_output.weight",   1, MODEL_TENSOR_MATRIX,  MODEL_WIDTH_DIM,    MODEL_WIDTH_Q,      MODEL_GROUP_ALWAYS,     MODEL_SHARD_COLUMNS,    1, LAYER_FIELD(wo)},
    {"ffn_norm.weight",      1, MODEL_TENSOR_NORM,    MODEL_WIDTH_ONE,    MODEL_WIDTH_DIM,    MODEL_GROUP_ALWAYS,     MODEL_SHARD_REPLICATED, 0, LAYER_FIELD(ffn_norm)},
    {"ffn_gate.weight",      1, MODEL_TENSOR_MATRIX,  MODEL_WIDTH_HIDDEN, MODEL_WIDTH_DIM,    MODEL_GROUP_ALWAYS,     MODEL_SHARD_ROWS,       1, LAYER_FIELD(w_gate)},
    {"ffn_up.weight",        1, MODEL_TENSOR_MATRIX,  MODEL_WIDTH_HIDDEN, MODEL_WIDTH_DIM,    MODEL_GROUP_ALWAYS,     MODEL_SHARD_ROWS,       1, LAYER_FIELD(w_up)},
    {"ffn_down.weight",      1, MODEL_TENSOR_MATRIX,  MODEL_WIDTH_DIM,    MODEL_WIDTH_HIDDEN, MODEL_GROUP_ALWAYS,     MODEL_SHARD_COLUMNS,    1, LAYER_FIELD(w_down)},
};
/* clang-format on */

const int model_tensor_count = (int)(sizeof(model_tensors) / sizeof(model_tensors[0]));

/* The groups each architecture has: qwen2's biases are part of the
 * architecture, llama files may carry them; only qwen3 normalizes q and k
 * per head; rope frequency factors are Llama 3.1's. */
enum model_need model_tensor_need(enum model_arch arch, enum model_tensor_group group) {
    switch (group) {
    case MODEL_GROUP_ALWAYS:
        return MODEL_NEED_REQUIRED;
    case MODEL_GROUP_OUTPUT:
        return MODEL_NEED_OPTIONAL;
    case MODEL_GROUP_BIASES:
        return arch == MODEL_ARCH_QWEN2   ? MODEL_NEED_REQUIRED
               : arch == MODEL_ARCH_LLAMA ? MODEL_NEED_OPTIONAL
                                          : MODEL_NEED_ABSENT;
    case MODEL_GROUP_QK_NORM:
        return arch == MODEL_ARCH_QWEN3 ? MODEL_NEED_REQUIRED : MODEL_NEED_ABSENT;
    case MODEL_GROUP_ROPE_FREQS:
        return arch == MODEL_ARCH_LLAMA ? MODEL_NEED_OPTIONAL : MODEL_NEED_ABSENT;
    }
    return MODEL_NEED_ABSENT;
}

int model_width_of(const struct model_config *c, enum model_width width) {
    switch (width) {
    case MODEL_WIDTH_ONE:
        return 1;
    case MODEL_WIDTH_DIM:
        return c->dim;
    case MODEL_WIDTH_HIDDEN:
        return c->hidden_dim;
    case MODEL_WIDTH_Q:
        return c->n_heads * c->head_dim;
    case MODEL_WIDTH_KV:
        return c->n_kv_heads * c->head_dim;
    case MODEL_WIDTH_HEAD:
        return c->head_dim;
    case MODEL_WIDTH_VOCAB:
        return c->vocab_size;
    case MODEL_WIDTH_PAIRS:
        return c->rope_dim / 2;
    }
    return 1;
}

/* The struct the tensor's field is in: the model or block layer. */
static char *tensor_base(struct model *m, const struct model_tensor_info *t, int layer) {
    return t->in_block ? (char *)&m->layers[layer] : (char *)m;
}

struct tensor_matrix *model_tensor_matrix(struct model *m, const struct model_tensor_info *t,
                                          int layer) {
    return (struct tensor_matrix *)(void *)(tensor_base(m, t, layer) + t->field);
}

const struct tensor_matrix *model_tensor_matrix_of(const struct model *m,
                                                   const struct model_tensor_info *t, int layer) {
    const char *base = t->in_block ? (const char *)&m->layers[layer] : (const char *)m;
    return (const struct tensor_matrix *)(const void *)(base + t->field);
}

const float **model_tensor_vector(struct model *m, const struct model_tensor_info *t, int layer) {
    return (const float **)(void *)(tensor_base(m, t, layer) + t->field);
}

void model_tensor_name(char *buf, size_t size, const struct model_tensor_info *t, int layer) {
    if (t->in_block)
        snprintf(buf, size, "blk.%d.%s", layer, t->suffix);
    else
        snprintf(buf, size, "%s", t->suffix);
}
