/* weights.c -- the engine's own copy of the products' weights, packed for
 * the kernels in use.
 *
 * When the instruction set multiplies a type faster from panels (tensor.h),
 * the engine packs every layer matrix of that type, and the classifier
 * unless it is the embedding (whose rows are looked up), into memory of its
 * own, and runs on a copy of the model that points there. A rank packs
 * only its shard. The values do not change, so neither do the logits. */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int packable(const struct tensor_matrix *w) {
    return tensor_panels_preferred(w->type) && tensor_panels_bytes(w) > 0;
}

static int classifier_packable(const struct model *m) {
    return m->output.data != m->token_embd.data && packable(&m->output);
}

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* 1 if tensor t is a matrix every token of a block multiplies by. */
static int layer_product(const struct model_tensor_info *t) {
    return t->in_block && t->per_token;
}

/* Bytes of every matrix to pack, each 64-byte aligned. */
static size_t packed_size(const struct model *m) {
    size_t total = classifier_packable(m) ? align64(tensor_panels_bytes(&m->output)) : 0;
    for (int l = 0; l < m->config.n_layers; l++)
        for (int i = 0; i < model_tensor_count; i++) {
            if (!layer_product(&model_tensors[i])) continue;
            const struct tensor_matrix *w = model_tensor_matrix_of(m, &model_tensors[i], l);
            if (packable(w)) total += align64(tensor_panels_bytes(w));
        }
    return total;
}

/* Packs w at *next if it should be, and moves *next past it; the file's
 * pages of w are released (the engine does not read them again). */
static void pack_into(const struct model *model, struct tensor_matrix *w, char **next) {
    if (!packable(w)) return;
    size_t bytes = tensor_panels_bytes(w);
    struct tensor_matrix rows = *w;
    *w = tensor_pack_panels(*next, w);
    *next += align64(bytes);
    model_release_pages(model, &rows);
}

int engine_pack_weights(struct engine *engine, const struct model *model, char *err,
                        size_t errlen) {
    size_t bytes = packed_size(model);
    if (bytes == 0) return 0;
    /* huge pages where granted: generation streams all of it every step */
    void *memory = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    size_t layers_bytes = (size_t)model->config.n_layers * sizeof(struct model_layer);
    struct model_layer *layers = malloc(layers_bytes);
    if (memory == MAP_FAILED || !layers) {
        snprintf(err, errlen, "engine: cannot allocate %zu bytes for the packed weights", bytes);
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
                pack_into(model, model_tensor_matrix(&engine->packed_model, &model_tensors[i], l),
                          &next);
    if (classifier_packable(model)) pack_into(model, &engine->packed_model.output, &next);
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
