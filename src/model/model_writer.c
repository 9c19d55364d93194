/* model_writer.c -- writing llama-family GGUF files: model_write_gguf, and
 * the machinery it shares with model_write_random (random.c).
 *
 * A struct model_writer is a gguf_writer plus the buffers its tensors point
 * at. model_writer_add_tensors walks one table of a model's tensors, in the
 * order and with the names llama.cpp uses, and asks a filler for the float
 * values of each: model_write_gguf's filler dequantizes the loaded weights,
 * random.c's draws them from its seeded stream. The values are then stored
 * as the file asks (matrices converted to the requested type, vectors F32),
 * so both writers name, shape and convert tensors the same way. */
#include "model/model_internal.h"

#include "base/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------- buffers */

/* Records "<message>" as the failure unless one is recorded already. */
__attribute__((format(printf, 2, 3))) static void model_writer_fail(struct model_writer *writer,
                                                                    const char *fmt, ...) {
    if (writer->error[0] != '\0') return;
    va_list ap;
    va_start(ap, fmt);
    error_vformat_at(writer->error, sizeof(writer->error), NULL, fmt, ap);
    va_end(ap);
}

int model_writer_init(struct model_writer *writer, enum tensor_type type, enum model_mix mix) {
    memset(writer, 0, sizeof(*writer));
    writer->type = type;
    writer->mix = mix;
    writer->gguf = gguf_writer_create();
    return writer->gguf ? 0 : -1;
}

void model_writer_free(struct model_writer *writer) {
    for (int i = 0; i < writer->n_buffers; i++) free(writer->buffers[i]);
    free(writer->buffers);
    gguf_writer_free(writer->gguf);
    if (writer->pool) tensor_pool_free(writer->pool);
    memset(writer, 0, sizeof(*writer));
}

void *model_writer_keep(struct model_writer *writer, size_t bytes) {
    if (writer->error[0] != '\0') return NULL;
    if (writer->n_buffers == writer->buffer_capacity) {
        int capacity = writer->buffer_capacity ? 2 * writer->buffer_capacity : 64;
        void **grown = realloc(writer->buffers, (size_t)capacity * sizeof(*grown));
        if (!grown) {
            model_writer_fail(writer, "out of memory");
            return NULL;
        }
        writer->buffers = grown;
        writer->buffer_capacity = capacity;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        model_writer_fail(writer, "out of memory (%zu bytes)", bytes);
        return NULL;
    }
    writer->buffers[writer->n_buffers++] = p;
    return p;
}

/* ------------------------------------------------------------- metadata */

/* llama.cpp's general.file_type for a weight type (LLAMA_FTYPE_*): the
 * k-quants written with one type throughout are its "_S" variants. */
static uint32_t model_file_type(enum tensor_type type, enum model_mix mix) {
    if (mix == MODEL_MIX_M) return type == TENSOR_Q5_K ? 17 : 15;
    static const uint32_t file_types[TENSOR_TYPE_COUNT] = {
        [TENSOR_F16] = 1,     [TENSOR_Q4_0] = 2,  [TENSOR_Q4_1] = 3,  [TENSOR_Q8_0] = 7,
        [TENSOR_Q5_0] = 8,    [TENSOR_Q5_1] = 9,  [TENSOR_Q2_K] = 10, [TENSOR_Q3_K] = 11,
        [TENSOR_Q4_K] = 14,   [TENSOR_Q5_K] = 16, [TENSOR_Q6_K] = 18, [TENSOR_IQ4_NL] = 25,
        [TENSOR_IQ4_XS] = 30, [TENSOR_BF16] = 32,
    };
    return (int)type >= 0 && (int)type < TENSOR_TYPE_COUNT ? file_types[type] : 0;
}

void model_writer_set_config(struct model_writer *writer, const struct model_config *c,
                             const char *name) {
    struct gguf_writer *w = writer->gguf;
    const char *arch = model_arch_name(c->arch);
    char key[128];
    gguf_writer_set_string(w, "general.architecture", arch);
    gguf_writer_set_string(w, "general.name", name);
    gguf_writer_set_u32(w, "general.file_type", model_file_type(writer->type, writer->mix));
    gguf_writer_set_u32(w, "general.alignment", 32);
    const struct {
        const char *suffix;
        int value;
    } ints[] = {
        {"context_length", c->context_length},  {"embedding_length", c->dim},
        {"feed_forward_length", c->hidden_dim}, {"block_count", c->n_layers},
        {"attention.head_count", c->n_heads},   {"attention.head_count_kv", c->n_kv_heads},
        {"attention.key_length", c->head_dim},  {"attention.value_length", c->head_dim},
        {"rope.dimension_count", c->rope_dim},  {"vocab_size", c->vocab_size},
    };
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        snprintf(key, sizeof(key), "%s.%s", arch, ints[i].suffix);
        gguf_writer_set_u32(w, key, (uint32_t)ints[i].value);
    }
    snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", arch);
    gguf_writer_set_f32(w, key, c->norm_eps);
    snprintf(key, sizeof(key), "%s.rope.freq_base", arch);
    gguf_writer_set_f32(w, key, c->rope_base);
    if (c->rope_scaling == MODEL_ROPE_SCALING_NONE) return;
    snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
    gguf_writer_set_string(w, key,
                           c->rope_scaling == MODEL_ROPE_SCALING_LINEAR ? "linear" : "llama3");
    snprintf(key, sizeof(key), "%s.rope.scaling.factor", arch);
    gguf_writer_set_f32(w, key, c->rope_factor);
    snprintf(key, sizeof(key), "%s.rope.scaling.original_context_length", arch);
    gguf_writer_set_u32(w, key, (uint32_t)c->rope_original_context);
}

/* -------------------------------------------------------------- tensors */

/* The spec of tensor t in block layer (-1: a global tensor); 0 if the
 * file does not hold it. */
static int model_tensor_spec_of(const struct model_file_layout *layout,
                                const struct model_tensor_info *t, int layer,
                                struct model_tensor_spec *spec) {
    *spec = (struct model_tensor_spec){layer,
                                       t->suffix,
                                       t->kind,
                                       model_width_of(layout->config, t->rows),
                                       model_width_of(layout->config, t->cols),
                                       NULL,
                                       NULL};
    const struct model *m = layout->source;
    if (!m) {
        return t->group == MODEL_GROUP_ALWAYS ||
               (t->group == MODEL_GROUP_OUTPUT && layout->has_output) ||
               (t->group == MODEL_GROUP_BIASES && layout->has_biases) ||
               (t->group == MODEL_GROUP_QK_NORM && layout->has_qk_norm);
    }
    if (t->group == MODEL_GROUP_OUTPUT && m->output.data == m->token_embd.data) return 0;
    if (t->kind == MODEL_TENSOR_MATRIX) {
        spec->matrix = model_tensor_matrix_of(m, t, layer < 0 ? 0 : layer);
        return spec->matrix->data != NULL;
    }
    const char *base = t->in_block ? (const char *)&m->layers[layer] : (const char *)m;
    memcpy(&spec->vector, base + t->field, sizeof(spec->vector));
    return spec->vector != NULL;
}

/* The type a matrix of cols columns is stored in when the file's type is
 * type: as llama.cpp's quantizer falls back, a row that is not whole
 * 256-element super-blocks takes a 32-element type of about the same
 * size, and one that is not whole 32-element blocks stays F32. */
static enum tensor_type model_fallback_type(enum tensor_type type, int cols) {
    if (cols % tensor_type_block_elements(type) != 0) {
        switch (type) {
        case TENSOR_Q2_K:
        case TENSOR_Q3_K:
        case TENSOR_IQ4_XS:
            type = TENSOR_IQ4_NL;
            break;
        case TENSOR_Q4_K:
            type = TENSOR_Q5_0;
            break;
        case TENSOR_Q5_K:
            type = TENSOR_Q5_1;
            break;
        case TENSOR_Q6_K:
            type = TENSOR_Q8_0;
            break;
        default:
            break;
        }
    }
    return cols % tensor_type_block_elements(type) != 0 ? TENSOR_F32 : type;
}

/* llama.cpp's choice of the blocks whose attn_v and ffn_down get more
 * bits in an "_M" mix: the first and last eighth, and every third. */
static int model_more_bits(int layer, int n_layers) {
    return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

/* The type matrix spec is stored in. */
static enum tensor_type model_matrix_type(const struct model_writer *writer,
                                          const struct model_tensor_spec *spec) {
    enum tensor_type type = writer->type;
    if (writer->mix == MODEL_MIX_M) {
        int more =
            spec->layer >= 0 && model_more_bits(spec->layer, writer->n_layers) &&
            (!strcmp(spec->suffix, "attn_v.weight") || !strcmp(spec->suffix, "ffn_down.weight"));
        if (more || !strcmp(spec->suffix, "output.weight")) type = TENSOR_Q6_K;
    }
    return model_fallback_type(type, spec->cols);
}

int model_file_type_from_name(const char *name, enum tensor_type *type, enum model_mix *mix) {
    static const struct {
        const char *name;
        enum tensor_type base;
    } mixes[] = {{"q4_k_m", TENSOR_Q4_K}, {"q5_k_m", TENSOR_Q5_K}};
    for (size_t i = 0; name && i < sizeof(mixes) / sizeof(mixes[0]); i++)
        if (!strcmp(name, mixes[i].name)) {
            *type = mixes[i].base;
            *mix = MODEL_MIX_M;
            return 0;
        }
    int id = tensor_type_from_name(name);
    if (!tensor_type_is_valid(id)) return -1;
    *type = (enum tensor_type)id;
    *mix = MODEL_MIX_NONE;
    return 0;
}

/* A matrix quantized in chunks of rows. Quantizing is the slow part of
 * writing a k-quant file (each block's scales are searched for), and
 * blocks are quantized one by one, so the chunks may go to every core and
 * the bytes are those of one pass over the whole matrix. */
#define QUANTIZE_CHUNK_ROWS 64

struct quantize_job {
    enum tensor_type type;
    char *out;           /* (rows) rows of row_bytes */
    const float *values; /* (rows, cols) */
    size_t row_bytes;
    int rows, cols;
};

static void quantize_chunk(void *arg, int chunk, int thread) {
    const struct quantize_job *job = arg;
    int first = chunk * QUANTIZE_CHUNK_ROWS;
    int n = job->rows - first < QUANTIZE_CHUNK_ROWS ? job->rows - first : QUANTIZE_CHUNK_ROWS;
    (void)thread;
    tensor_quantize_row(job->type, job->out + (size_t)first * job->row_bytes,
                        job->values + (size_t)first * (size_t)job->cols, (int64_t)n * job->cols);
}

static void model_writer_quantize(struct model_writer *writer, enum tensor_type type, void *out,
                                  const float *values, int rows, int cols) {
    struct quantize_job job = {type, out, values, tensor_row_bytes(type, cols), rows, cols};
    int chunks = (rows + QUANTIZE_CHUNK_ROWS - 1) / QUANTIZE_CHUNK_ROWS;
    if (!writer->pool && chunks > 1) { /* the threads start with the first matrix to share */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (cores > 1) writer->pool = tensor_pool_create(cores < 64 ? (int)cores : 64);
    }
    if (writer->pool && chunks > 1)
        tensor_pool_run_chunks(writer->pool, quantize_chunk, &job, chunks);
    else
        tensor_quantize_row(type, out, values, (int64_t)rows * cols);
}

/* Fills, converts and adds the tensor spec; -1 after a failure. */
static int model_writer_add(struct model_writer *writer, const struct model_tensor_spec *spec,
                            model_tensor_fill_fn fill, void *context) {
    char name[96], message[128];
    if (spec->layer < 0)
        snprintf(name, sizeof(name), "%s", spec->suffix);
    else
        snprintf(name, sizeof(name), "blk.%d.%s", spec->layer, spec->suffix);
    enum tensor_type type =
        spec->kind == MODEL_TENSOR_MATRIX ? model_matrix_type(writer, spec) : TENSOR_F32;
    size_t n = (size_t)spec->rows * (size_t)spec->cols;
    size_t bytes = (size_t)spec->rows * tensor_row_bytes(type, spec->cols);
    void *data = model_writer_keep(writer, bytes);
    if (!data) return -1;
    float *values = type == TENSOR_F32 ? data : malloc(n * sizeof(float));
    int rc = 0;
    if (!values) {
        model_writer_fail(writer, "tensor '%s': out of memory", name);
        rc = -1;
    } else if (fill(context, spec, values, message, sizeof(message)) != 0) {
        model_writer_fail(writer, "tensor '%s': %s", name, message);
        rc = -1;
    } else {
        if (type != TENSOR_F32)
            model_writer_quantize(writer, type, data, values, spec->rows, spec->cols);
        uint64_t dims[2] = {(uint64_t)spec->cols, (uint64_t)spec->rows};
        int n_dims = spec->kind == MODEL_TENSOR_MATRIX ? 2 : 1;
        gguf_writer_add_tensor(writer->gguf, name, type, n_dims, dims, data, bytes);
    }
    if ((void *)values != data) free(values);
    return rc;
}

/* Adds the tensors of the descriptor table that are in block layer (or,
 * for layer -1, the global ones) and present in the file. */
static int model_writer_add_layer(struct model_writer *writer,
                                  const struct model_file_layout *layout, int layer,
                                  model_tensor_fill_fn fill, void *context) {
    struct model_tensor_spec spec;
    for (int i = 0; i < model_tensor_count; i++) {
        const struct model_tensor_info *t = &model_tensors[i];
        if (t->in_block != (layer >= 0)) continue;
        if (model_tensor_spec_of(layout, t, layer, &spec) &&
            model_writer_add(writer, &spec, fill, context) != 0)
            return -1;
    }
    return 0;
}

void model_writer_add_tensors(struct model_writer *writer, const struct model_file_layout *layout,
                              model_tensor_fill_fn fill, void *context) {
    writer->n_layers = layout->config->n_layers;
    for (int l = -1; l < layout->config->n_layers; l++)
        if (model_writer_add_layer(writer, layout, l, fill, context)) return;
}

int model_writer_write(struct model_writer *writer, const char *path, char *err, size_t errlen) {
    if (writer->error[0] != '\0') {
        snprintf(err, errlen, "%s: %s", path, writer->error);
        return -1;
    }
    return gguf_writer_write(writer->gguf, path, err, errlen);
}

/* ------------------------------------------------------ model_write_gguf */

/* The tokenizer.ggml.* keys of vocab. */
static void model_writer_set_vocab(struct model_writer *writer, const struct model_vocab *v) {
    struct gguf_writer *w = writer->gguf;
    uint64_t n = (uint64_t)v->n_tokens;
    gguf_writer_set_string(w, "tokenizer.ggml.model", v->model);
    gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", v->texts, v->lengths, n);
    if (v->scores)
        gguf_writer_set_array(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->scores, n);
    if (v->types)
        gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types, n);
    if (v->bos >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->eos >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (v->unk >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)v->unk);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
}

/* Every tokenizer.* key of a GGUF source, as it is (merges, chat template
 * and token types included). */
static void model_writer_copy_tokenizer(struct model_writer *writer, const struct gguf_file *file) {
    char key[256];
    for (uint64_t i = 0; i < file->n_kv; i++) {
        const struct gguf_kv *kv = &file->kv[i];
        if (kv->key.len >= sizeof(key) || kv->key.len < 10 ||
            memcmp(kv->key.data, "tokenizer.", 10) != 0)
            continue;
        memcpy(key, kv->key.data, kv->key.len);
        key[kv->key.len] = '\0';
        gguf_writer_set_value(writer->gguf, key, &kv->value);
    }
}

/* The values of a tensor of the loaded model: a matrix dequantized row by
 * row, a vector copied. */
static int model_source_fill(void *context, const struct model_tensor_spec *spec, float *values,
                             char *err, size_t errlen) {
    (void)context;
    const struct tensor_matrix *w = spec->matrix;
    if (!w) {
        memcpy(values, spec->vector, (size_t)spec->cols * sizeof(float));
        return 0;
    }
    if (w->rows != spec->rows || w->cols != spec->cols || !tensor_type_is_valid((int)w->type)) {
        snprintf(err, errlen, "the model holds (%d, %d) of type %d, the config says (%d, %d)",
                 w->rows, w->cols, (int)w->type, spec->rows, spec->cols);
        return -1;
    }
    for (int r = 0; r < w->rows; r++)
        tensor_dequantize_row(values + (size_t)r * (size_t)w->cols,
                              (const char *)w->data + (size_t)r * w->row_stride, w->type, w->cols);
    return 0;
}

/* Checks what the file would need from its arguments; 0 or -1 with a message. */
static int model_check_write(const struct model *model, enum tensor_type type,
                             const struct model_vocab *v, const char *path, char *err,
                             size_t errlen) {
    if (!tensor_type_is_valid((int)type)) {
        snprintf(err, errlen, "%s: unsupported weight type %d", path, (int)type);
        return -1;
    }
    if (!v) return 0;
    if (!v->model || !v->texts || !v->lengths || v->n_tokens != model->config.vocab_size) {
        snprintf(err, errlen,
                 "%s: the vocabulary has %d tokens (model '%s'), the model's vocab_size is %d",
                 path, v->n_tokens, v->model ? v->model : "(none)", model->config.vocab_size);
        return -1;
    }
    const struct {
        const char *name;
        int id;
    } specials[] = {{"bos", v->bos}, {"eos", v->eos}, {"unk", v->unk}};
    for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++) {
        if (specials[i].id < -1 || specials[i].id >= v->n_tokens) {
            snprintf(err, errlen, "%s: %s token id %d is not in -1..%d", path, specials[i].name,
                     specials[i].id, v->n_tokens - 1);
            return -1;
        }
    }
    return 0;
}

/* A NULL vocab copies a GGUF model's tokenizer.* keys; for a llama2.c
 * model it writes none (the file then loads as a model but not as a
 * tokenizer). */
int model_write_gguf(const struct model *model, enum tensor_type type, enum model_mix mix,
                     const struct model_vocab *vocab, const char *name, const char *path, char *err,
                     size_t errlen) {
    if (model_check_write(model, type, vocab, path, err, errlen)) return -1;
    struct model_writer writer;
    if (model_writer_init(&writer, type, mix) != 0) {
        model_writer_free(&writer);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    model_writer_set_config(&writer, &model->config,
                            name ? name : model_arch_name(model->config.arch));
    if (vocab)
        model_writer_set_vocab(&writer, vocab);
    else if (model->gguf)
        model_writer_copy_tokenizer(&writer, model->gguf);
    struct model_file_layout layout = {&model->config, model, 0, 0, 0};
    model_writer_add_tensors(&writer, &layout, model_source_fill, NULL);
    int rc = model_writer_write(&writer, path, err, errlen);
    model_writer_free(&writer);
    return rc;
}
