/* pooling.c -- how an embedding is made of a prompt's hidden states: which
 * positions' states a pooling needs, their sum, and the vector it gives.
 * `lockstep embed` pools one whole pass; the runner pools an embedding
 * request chunk by chunk as its prefill steps come back, summing in
 * position order, so that any chunking gives the same vector. */
#include "engine_internal.h"

#include <stdio.h>

enum engine_pooling engine_model_pooling(const struct model *model) {
    struct gguf_string arch;
    uint32_t type = 0;
    char key[96], err[128];
    if (!model->gguf ||
        gguf_get_string(model->gguf, "general.architecture", &arch, err, sizeof(err)))
        return ENGINE_POOLING_NONE;
    snprintf(key, sizeof(key), "%.*s.pooling_type", (int)arch.len, arch.data);
    if (!gguf_find(model->gguf, key) || gguf_get_u32(model->gguf, key, &type, err, sizeof(err)))
        return ENGINE_POOLING_NONE;
    return type >= ENGINE_POOLING_MEAN && type <= ENGINE_POOLING_LAST ? (enum engine_pooling)type
                                                                      : ENGINE_POOLING_NONE;
}

int engine_pooling_wants(enum engine_pooling pooling, int position, int n_tokens) {
    switch (pooling) {
    case ENGINE_POOLING_MEAN:
        return 1;
    case ENGINE_POOLING_CLS:
        return position == 0;
    case ENGINE_POOLING_LAST:
        return position == n_tokens - 1;
    case ENGINE_POOLING_NONE:
        break;
    }
    return 0;
}

void engine_pooling_add(double *sum, const float *hidden, int dim) {
    for (int d = 0; d < dim; d++) sum[d] += hidden[d];
}

void engine_pooling_finish(enum engine_pooling pooling, const double *sum, int n_tokens, int dim,
                           float *out) {
    /* mean divides the sum of every position; the others summed one row */
    double divisor = pooling == ENGINE_POOLING_MEAN ? n_tokens : 1;
    for (int d = 0; d < dim; d++) out[d] = (float)(sum[d] / divisor);
}
