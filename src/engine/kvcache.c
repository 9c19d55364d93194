/* kvcache.c -- paged key/value cache.
 *
 * Keys and values of every layer live in one pool of fixed-size blocks; a
 * sequence holds a list of block ids (struct kv_sequence) and grows a block
 * at a time. The scheduler admits a prompt only when its blocks fit, so the
 * forward pass never allocates. */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t kv_cache_bytes(int n_layers, int kv_dim, int block_size, int n_blocks) {
    return 2 * (size_t)n_layers * (size_t)n_blocks * (size_t)block_size * (size_t)kv_dim *
           sizeof(float);
}

int kv_cache_init(struct kv_cache *kv, int n_layers, int n_kv_heads, int head_dim, int block_size,
                  int n_blocks, char *err, size_t errlen) {
    int kv_dim = n_kv_heads * head_dim;
    size_t per_side = (size_t)n_layers * n_blocks * block_size * kv_dim;
    kv->n_layers = n_layers;
    kv->n_kv_heads = n_kv_heads;
    kv->head_dim = head_dim;
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;
    kv->keys = malloc(per_side * sizeof(float));
    kv->values = malloc(per_side * sizeof(float));
    kv->free_list = malloc((size_t)n_blocks * sizeof(int));
    if (!kv->keys || !kv->values || !kv->free_list) {
        snprintf(err, errlen, "kv cache: cannot allocate %zu bytes for %d blocks",
                 kv_cache_bytes(n_layers, kv_dim, block_size, n_blocks), n_blocks);
        kv_cache_free(kv);
        return -1;
    }
    /* Stack order: block 0 is handed out first. */
    for (int i = 0; i < n_blocks; i++) kv->free_list[i] = n_blocks - 1 - i;
    kv->n_free = n_blocks;
    return 0;
}

void kv_cache_free(struct kv_cache *kv) {
    free(kv->keys);
    free(kv->values);
    free(kv->free_list);
    kv->keys = kv->values = NULL;
    kv->free_list = NULL;
    kv->n_free = 0;
}

int kv_blocks_for(const struct kv_cache *kv, int n_positions) {
    return (n_positions + kv->block_size - 1) / kv->block_size;
}

int kv_sequence_reserve(struct kv_cache *kv, struct kv_sequence *seq, int n_positions) {
    int needed = kv_blocks_for(kv, n_positions);
    if (needed <= seq->n_blocks) return 0;
    if (needed - seq->n_blocks > kv->n_free) return -1;
    if (needed > seq->capacity) {
        int *grown = realloc(seq->blocks, (size_t)needed * sizeof(int));
        if (!grown) return -1;
        seq->blocks = grown;
        seq->capacity = needed;
    }
    while (seq->n_blocks < needed) seq->blocks[seq->n_blocks++] = kv->free_list[--kv->n_free];
    return 0;
}

void kv_sequence_release(struct kv_cache *kv, struct kv_sequence *seq) {
    for (int i = seq->n_blocks - 1; i >= 0; i--) kv->free_list[kv->n_free++] = seq->blocks[i];
    free(seq->blocks);
    seq->blocks = NULL;
    seq->n_blocks = 0;
    seq->capacity = 0;
}

/* Offset, in floats, of (layer, position) of seq within keys or values. */
static size_t kv_offset(const struct kv_cache *kv, const struct kv_sequence *seq, int layer,
                        int position) {
    int block = seq->blocks[position / kv->block_size];
    size_t slot = (size_t)block * kv->block_size + (size_t)(position % kv->block_size);
    size_t row = (size_t)layer * kv->n_blocks * kv->block_size + slot;
    return row * (size_t)kv->n_kv_heads * kv->head_dim;
}

const float *kv_key(const struct kv_cache *kv, const struct kv_sequence *seq, int layer,
                    int position, int head) {
    return kv->keys + kv_offset(kv, seq, layer, position) + (size_t)head * kv->head_dim;
}

const float *kv_value(const struct kv_cache *kv, const struct kv_sequence *seq, int layer,
                      int position, int head) {
    return kv->values + kv_offset(kv, seq, layer, position) + (size_t)head * kv->head_dim;
}

void kv_store(struct kv_cache *kv, const struct kv_sequence *seq, int layer, int position,
              const float *key, const float *value) {
    size_t offset = kv_offset(kv, seq, layer, position);
    size_t bytes = (size_t)kv->n_kv_heads * kv->head_dim * sizeof(float);
    memcpy(kv->keys + offset, key, bytes);
    memcpy(kv->values + offset, value, bytes);
}
