/* model_internal.h -- what the files of the model module share and the rest
 * of the program does not see: error messages that name the file, and for
 * the writers of model files (model_writer.c for model_write_gguf, random.c
 * for model_write_random) the GGUF file under construction with the
 * buffers it references, the list of a model's tensors in llama.cpp's order
 * and names, and the architecture's config keys. */
#ifndef LOCKSTEP_MODEL_INTERNAL_H
#define LOCKSTEP_MODEL_INTERNAL_H

#include <stddef.h>

#include "model/model.h"

/* A GGUF file being built: the writer and every buffer it references
 * (tensor data), which must live until the write. */
struct model_writer {
    struct gguf_writer *gguf; /* collects metadata and tensor infos */
    enum tensor_type type;    /* type of the 2-D weights (F32 fallback, see below) */
    enum model_mix mix;       /* MODEL_MIX_M: some of them in Q6_K (model.h) */
    int n_layers;             /* blocks of the model being written (for the mix) */
    void **buffers;           /* (buffer_capacity) owned allocations */
    int n_buffers;
    int buffer_capacity;
    char error[160];          /* the first failure, without the path; empty if none */
    struct tensor_pool *pool; /* one thread per core for quantizing, or NULL (none started yet) */
};

/* One tensor of the file, as the filler is asked for it. */
struct model_tensor_spec {
    int layer;          /* block index, or -1 for token_embd / output_norm / output */
    const char *suffix; /* llama.cpp's name, after "blk.<layer>." in a block */
    enum model_tensor_kind kind;
    int rows, cols; /* a matrix (rows, cols); a vector has rows 1 and cols elements */
    const struct tensor_matrix *matrix; /* the source's matrix, or NULL (no source) */
    const float *vector;                /* the source's vector, or NULL (no source) */
};

/* Writes the rows * cols values of the tensor spec as floats into values;
 * 0, or -1 with a message (without the path) in err. */
typedef int (*model_tensor_fill_fn)(void *context, const struct model_tensor_spec *spec,
                                    float *values, char *err, size_t errlen);

/* Which tensors the file holds: every tensor of a block present in source,
 * or, without a source, the ones the flags ask for. */
struct model_file_layout {
    const struct model_config *config;
    const struct model *source; /* weights being written, or NULL */
    int has_output;             /* no source: output.weight is its own tensor */
    int has_biases;             /* no source: attn_{q,k,v}.bias in every block */
    int has_qk_norm;            /* no source: attn_{q,k}_norm.weight in every block */
};

/* An empty file whose 2-D weights will be of type; -1 if out of memory. */
int model_writer_init(struct model_writer *writer, enum tensor_type type, enum model_mix mix);
void model_writer_free(struct model_writer *writer);
/* bytes that live until model_writer_free; NULL (and an error) if out of
 * memory. */
void *model_writer_keep(struct model_writer *writer, size_t bytes);

/* The general.* keys (architecture, name, file_type, alignment) and the
 * architecture's hyperparameter keys of config. */
void model_writer_set_config(struct model_writer *writer, const struct model_config *config,
                             const char *name);
/* Adds every tensor of layout in llama.cpp's order, asking fill for the
 * values of each: vectors stay F32, matrices become the writer's type, or F32
 * when that type is quantized and cols is not a multiple of 32 (as
 * llama.cpp's quantizer falls back). Stops at the first failure. */
void model_writer_add_tensors(struct model_writer *writer, const struct model_file_layout *layout,
                              model_tensor_fill_fn fill, void *context);
/* Writes the file; 0, or -1 with "<path>: <message>" in err. */
int model_writer_write(struct model_writer *writer, const char *path, char *err, size_t errlen);

/* Bytes of every matrix a generated token reads (model.weight_bytes). */
size_t model_count_weight_bytes(const struct model *m);

/* Writes "<path>: <message>" to err; returns -1, so that a check can end in
 * `return model_fail(...)`. */
__attribute__((format(printf, 4, 5))) int model_fail(char *err, size_t errlen, const char *path,
                                                     const char *fmt, ...);

/* G for a whole model (see model_shard): the largest of 4, 2, 1 that the
 * model can be split into. */
int model_reduction_parts(const struct model *whole);

#endif
