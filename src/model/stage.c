/* stage.c -- the layers one pipeline stage runs.
 *
 * Pipeline parallelism cuts a model (or a tensor-parallel slice of it) into
 * consecutive layer ranges, one per stage. A stage's model is a view like a
 * slice's: its own array of the range's layer records, pointing into the
 * same weights, so the engine runs it unchanged (its KV cache, packed
 * weights and products cover only those layers). The first stage keeps the
 * token embeddings, the last the final norm and the classifier; the other
 * stages hold neither, so they never touch those pages. */
#include "model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int model_stage_layers(int n_layers, int n_stages, const int *given, int *counts, char *err,
                       size_t errlen) {
    if (n_stages < 1 || n_stages > n_layers) {
        snprintf(err, errlen, "%d pipeline stages for %d layers: each stage needs a layer",
                 n_stages, n_layers);
        return -1;
    }
    int total = 0;
    for (int s = 0; s < n_stages; s++) {
        counts[s] =
            given
                ? given[s]
                : (int)((int64_t)n_layers * (s + 1) / n_stages - (int64_t)n_layers * s / n_stages);
        if (counts[s] < 1) {
            snprintf(err, errlen, "stage %d of the layer split has %d layers (at least 1)", s,
                     counts[s]);
            return -1;
        }
        total += counts[s];
    }
    if (total != n_layers) {
        snprintf(err, errlen, "the layer split adds up to %d layers, the model has %d", total,
                 n_layers);
        return -1;
    }
    return 0;
}

int model_stage(const struct model *m, int first, int count, struct model **out, char *err,
                size_t errlen) {
    *out = NULL;
    if (first < 0 || count < 1 || first + count > m->config.n_layers) {
        snprintf(err, errlen, "%s: layers %d..%d are not a range of its %d layers", m->path, first,
                 first + count - 1, m->config.n_layers);
        return -1;
    }
    struct model *stage = calloc(1, sizeof(*stage));
    if (stage) *stage = *m;
    if (!stage || !(stage->layers = malloc((size_t)count * sizeof(*stage->layers))) ||
        !(stage->path = strdup(m->path))) {
        snprintf(err, errlen, "%s: out of memory", m->path);
        if (stage && stage->layers != m->layers) free(stage->layers);
        free(stage);
        return -1;
    }
    stage->gguf = NULL; /* m owns the file */
    stage->mapping = NULL;
    stage->mapping_size = 0;
    memcpy(stage->layers, m->layers + first, (size_t)count * sizeof(*stage->layers));
    stage->config.n_layers = count;
    stage->first_layer = m->first_layer + first;
    stage->skips_embedding = m->skips_embedding || first > 0;
    stage->skips_classifier = m->skips_classifier || first + count < m->config.n_layers;
    if (stage->skips_embedding) memset(&stage->token_embd, 0, sizeof(stage->token_embd));
    if (stage->skips_classifier) {
        memset(&stage->output, 0, sizeof(stage->output));
        stage->output_norm = NULL;
    }
    stage->weight_bytes = model_count_weight_bytes(stage);
    *out = stage;
    return 0;
}
