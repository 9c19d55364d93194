/* weights.c -- the engine's own copy of the products' weights, in memory
 * of its own and packed for the kernels in use.
 *
 * Every layer matrix, and the classifier unless it is the embedding (whose
 * rows are looked up), is copied out of the file's mapping into anonymous
 * memory, where huge pages are asked for: generation streams all of it
 * every step, and from a large file's mapping it streamed at a third of
 * the rate (measured: Q4_K GEMV over 4.7 GB, 6-10 GB/s from the page cache
 * of an 8B-shaped file against 34-36 GB/s from anonymous memory, 2 threads,
 * alternated; 29 against 37 GB/s over 830 MB). When the instruction set
 * multiplies a type faster from panels (tensor.h), its matrices are packed
 * on the way; the others are copied row by row. The engine then runs on a
 * copy of the model that points there, and releases the file's pages. A
 * rank copies only its shard. The values do not change, so neither do the
 * logits. */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int packable(const struct tensor_matrix *w) {
    return tensor_panels_preferred(w->type) && tensor_panels_bytes(w) > 0;
}

/* 1 if w is copied: a matrix of rows, with rows. */
static int copied(const struct tensor_matrix *w) {
    return w->layout == TENSOR_LAYOUT_ROWS && w->data && w->rows > 0;
}

/* 1 if the classifier is a matrix of its own (not the embedding's rows). */
static int classifier_copied(const struct model *m) {
    return m->output.data != m->token_embd.data && copied(&m->output);
}

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* 1 if tensor t is a matrix every token of a block multiplies by. */
static int layer_product(const struct model_tensor_info *t) {
    return t->in_block && t->per_token;
}

/* Bytes of w in the engine's memory: its panels, or its rows side by side. */
static size_t copied_bytes(const struct tensor_matrix *w) {
    if (packable(w)) return tensor_panels_bytes(w);
    return (size_t)w->rows * tensor_row_bytes(w->type, w->cols);
}

/* Bytes of every matrix to copy, each 64-byte aligned. */
static size_t copied_size(const struct model *m) {
    size_t total = classifier_copied(m) ? align64(copied_bytes(&m->output)) : 0;
    for (int l = 0; l < m->config.n_layers; l++)
        for (int i = 0; i < model_tensor_count; i++) {
            if (!layer_product(&model_tensors[i])) continue;
            const struct tensor_matrix *w = model_tensor_matrix_of(m, &model_tensors[i], l);
            if (copied(w)) total += align64(copied_bytes(w));
        }
    return total;
}

/* Copies w to *next, packed if it should be, and moves *next past it; the
 * file's pages of w are released (the engine does not read them again). */
static void copy_into(const struct model *model, struct tensor_matrix *w, char **next) {
    if (!copied(w)) return;
    size_t bytes = copied_bytes(w);
    struct tensor_matrix rows = *w;
    if (packable(w)) {
        *w = tensor_pack_panels(*next, w);
    } else {
        size_t row_bytes = tensor_row_bytes(w->type, w->cols);
        for (int r = 0; r < w->rows; r++)
            memcpy(*next + (size_t)r * row_bytes, (const char *)w->data + (size_t)r * w->row_stride,
                   row_bytes);
        *w = tensor_matrix_make(*next, w->type, w->rows, w->cols);
    }
    *next += align64(bytes);
    model_release_pages(model, &rows);
}

int engine_pack_weights(struct engine *engine, const struct model *model, char *err,
                        size_t errlen) {
    size_t bytes = copied_size(model);
    if (bytes == 0) return 0;
    void *memory = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    size_t layers_bytes = (size_t)model->config.n_layers * sizeof(struct model_layer);
    struct model_layer *layers = malloc(layers_bytes);
    if (memory == MAP_FAILED || !layers) {
        snprintf(err, errlen, "engine: cannot allocate %zu bytes for the weights", bytes);
        if (memory != MAP_FAILED) munmap(memory, bytes);
        free(layers);
        return -1;
    }
    madvise(memory, bytes, MADV_HUGEPAGE);
    memcpy(layers, model->layers, layers_bytes);
    engine->packed_model = *model;
    engine->packed_model.layers = layers;
    char *next = memory;
    for (int l = 0; l < model->config.n_layers; l++)
        for (int i = 0; i < model_tensor_count; i++)
            if (layer_product(&model_tensors[i]))
                copy_into(model, model_tensor_matrix(&engine->packed_model, &model_tensors[i], l),
                          &next);
    if (classifier_copied(model)) copy_into(model, &engine->packed_model.output, &next);
    engine->packed_weights = memory;
    engine->packed_bytes = bytes;
    engine->model = &engine->packed_model;
    return 0;
}

void engine_free_weights(struct engine *engine) {
    if (engine->packed_weights) munmap(engine->packed_weights, engine->packed_bytes);
    if (engine->model == &engine->packed_model) free(engine->packed_model.layers);
    engine->packed_weights = NULL;
    engine->packed_bytes = 0;
}
