/* kvcache.c -- paged key/value cache.
 *
 * Keys and values of every layer live in one pool of fixed-size blocks; a
 * sequence holds a list of block ids (struct kv_sequence) and grows a block
 * at a time. The scheduler admits a prompt only when its blocks fit, so the
 * forward pass never allocates. Within a block, each head's positions are
 * contiguous: attention over a head then streams whole blocks, instead of
 * picking one head's slice out of every position's row. A head's keys lie
 * one position a vector lane for the scores (F16 and F32 dimension by
 * dimension for tensor_dot_columns, Q8_0 four dimensions at a time for
 * tensor_dot_q8_0_keys); its values lie position by position for the
 * weighted sum. Elements are half precision by default: a decode step of
 * many sequences reads every cached key and value once, so halving them
 * halves that traffic (runner_bench, 16 sequences on the 85M Q8_0 model:
 * 2322 against 2017 tokens/s with floats, medians of 3 alternating runs). */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

size_t kv_cache_bytes(enum tensor_type type, int n_layers, int kv_dim, int block_size,
                      int n_blocks) {
    return 2 * (size_t)n_layers * (size_t)n_blocks * (size_t)block_size *
           tensor_row_bytes(type, kv_dim);
}

/* Keys or values of the whole pool, in memory of their own. Huge pages
 * where the kernel grants them: a decode step of many sequences reads
 * scattered blocks of a large pool. Measured in runner_bench against one
 * row of all heads per position in malloc'd memory, this layout with huge
 * pages gave the higher aggregate in most alternating runs, most at 64
 * sequences; the pool is then committed 2 MiB at a time, within its size.
 * NULL if the memory cannot be had. */
static void *map_side(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, bytes, MADV_HUGEPAGE); /* a hint: without huge pages it still works */
    return p;
}

int kv_cache_type_supported(int type) {
    return type == TENSOR_F16 || type == TENSOR_F32 || type == TENSOR_Q8_0;
}

int kv_cache_init(struct kv_cache *kv, enum tensor_type type, int n_layers, int n_kv_heads,
                  int head_dim, int block_size, int n_blocks, char *err, size_t errlen) {
    int kv_dim = n_kv_heads * head_dim;
    memset(kv, 0, sizeof(*kv));
    if (!kv_cache_type_supported(type)) {
        snprintf(err, errlen, "kv cache: element type %d is not f16, f32 or q8_0", (int)type);
        return -1;
    }
    if (type == TENSOR_Q8_0 && head_dim % TENSOR_QK != 0) {
        snprintf(err, errlen,
                 "kv cache: q8_0 needs a head dimension divisible by %d; this model's is %d "
                 "(use f16)",
                 TENSOR_QK, head_dim);
        return -1;
    }
    kv->type = type;
    kv->row_bytes = tensor_row_bytes(type, head_dim);
    kv->n_layers = n_layers;
    kv->n_kv_heads = n_kv_heads;
    kv->head_dim = head_dim;
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;
    kv->side_bytes = (size_t)n_layers * n_blocks * block_size * n_kv_heads * kv->row_bytes;
    kv->keys = map_side(kv->side_bytes);
    kv->values = map_side(kv->side_bytes);
    kv->free_list = malloc((size_t)n_blocks * sizeof(int));
    kv->references = calloc((size_t)n_blocks, sizeof(int));
    if (!kv->keys || !kv->values || !kv->free_list || !kv->references || kv_prefix_init(kv)) {
        snprintf(err, errlen, "kv cache: cannot allocate %zu bytes for %d blocks",
                 kv_cache_bytes(type, n_layers, kv_dim, block_size, n_blocks), n_blocks);
        kv_cache_free(kv);
        return -1;
    }
    /* Stack order: block 0 is handed out first. */
    for (int i = 0; i < n_blocks; i++) kv->free_list[i] = n_blocks - 1 - i;
    kv->n_free = n_blocks;
    return 0;
}

void kv_cache_free(struct kv_cache *kv) {
    if (kv->keys) munmap(kv->keys, kv->side_bytes);
    if (kv->values) munmap(kv->values, kv->side_bytes);
    free(kv->free_list);
    free(kv->references);
    kv_prefix_free(kv);
    kv->keys = kv->values = NULL;
    kv->free_list = NULL;
    kv->references = NULL;
    kv->n_free = 0;
}

int kv_blocks_for(const struct kv_cache *kv, int n_positions) {
    return (n_positions + kv->block_size - 1) / kv->block_size;
}

int kv_available(const struct kv_cache *kv) {
    return kv->n_free + kv_prefix_evictable(kv);
}

int kv_blocks_held(const struct kv_cache *kv) {
    return kv->n_blocks - kv_available(kv);
}

/* A block for a sequence to write: a free one, else the cached block used
 * least recently. */
static int take_block(struct kv_cache *kv) {
    int block = kv->n_free > 0 ? kv->free_list[--kv->n_free] : kv_prefix_evict(kv);
    kv->references[block] = 1;
    return block;
}

int kv_sequence_reserve(struct kv_cache *kv, struct kv_sequence *seq, int n_positions) {
    int needed = kv_blocks_for(kv, n_positions);
    if (needed <= seq->n_blocks) return 0;
    if (needed - seq->n_blocks > kv_available(kv)) return -1;
    if (needed > seq->capacity) {
        int *grown = realloc(seq->blocks, (size_t)needed * sizeof(int));
        if (!grown) return -1;
        seq->blocks = grown;
        seq->capacity = needed;
    }
    while (seq->n_blocks < needed) seq->blocks[seq->n_blocks++] = take_block(kv);
    return 0;
}

void kv_sequence_release(struct kv_cache *kv, struct kv_sequence *seq) {
    /* last block first: a chain's later blocks are evicted before its
     * earlier ones, which more prompts share */
    for (int i = seq->n_blocks - 1; i >= 0; i--) {
        int block = seq->blocks[i];
        if (--kv->references[block] == 0 && !kv_prefix_keep(kv, block))
            kv->free_list[kv->n_free++] = block;
    }
    free(seq->blocks);
    memset(seq, 0, sizeof(*seq));
}

/* Offset, in bytes, of head's rows in block `index` of seq, within keys
 * or values. */
static size_t kv_offset(const struct kv_cache *kv, const struct kv_sequence *seq, int layer,
                        int index, int head) {
    size_t block = (size_t)layer * kv->n_blocks + (size_t)seq->blocks[index];
    size_t head_slab = block * kv->n_kv_heads + (size_t)head;
    return head_slab * kv->block_size * kv->row_bytes;
}

const void *kv_block_keys(const struct kv_cache *kv, const struct kv_sequence *seq, int layer,
                          int index, int head) {
    return (const char *)kv->keys + kv_offset(kv, seq, layer, index, head);
}

const void *kv_block_values(const struct kv_cache *kv, const struct kv_sequence *seq, int layer,
                            int index, int head) {
    return (const char *)kv->values + kv_offset(kv, seq, layer, index, head);
}

/* Stores n floats as a row (a value) of the cache's type at to. */
static void store_row(const struct kv_cache *kv, char *to, const float *x, int n) {
    if (kv->type == TENSOR_F16)
        tensor_fp16_from_fp32((void *)to, x, n);
    else if (kv->type == TENSOR_Q8_0)
        tensor_quantize_row_q8_0((void *)to, x, n);
    else
        memcpy(to, x, (size_t)n * sizeof(float));
}

/* Stores n floats as key r of a block of keys at to: F16 or F32, element
 * i at i * block_size + r, rounded a vector at a time, then put in place;
 * Q8_0 as tensor_store_q8_0_key lays it out. */
#define COLUMN_CHUNK 64

static void store_key(const struct kv_cache *kv, void *to, int r, const float *x, int n) {
    size_t stride = (size_t)kv->block_size;
    if (kv->type == TENSOR_Q8_0) {
        tensor_store_q8_0_key(to, r, x, n, kv->block_size);
        return;
    }
    if (kv->type == TENSOR_F32) {
        float *floats = to;
        for (int i = 0; i < n; i++) floats[(size_t)i * stride + (size_t)r] = x[i];
        return;
    }
    uint16_t *column = to, halves[COLUMN_CHUNK];
    for (int i0 = 0; i0 < n; i0 += COLUMN_CHUNK) {
        int count = n - i0 < COLUMN_CHUNK ? n - i0 : COLUMN_CHUNK;
        tensor_fp16_from_fp32(halves, x + i0, count);
        for (int i = 0; i < count; i++) column[(size_t)(i0 + i) * stride + (size_t)r] = halves[i];
    }
}

void kv_store(struct kv_cache *kv, const struct kv_sequence *seq, int layer, int position,
              const float *key, const float *value) {
    int r = position % kv->block_size;
    size_t row = (size_t)r * kv->row_bytes;
    for (int h = 0; h < kv->n_kv_heads; h++) {
        size_t slab = kv_offset(kv, seq, layer, position / kv->block_size, h);
        const float *head_key = key + (size_t)h * kv->head_dim;
        store_key(kv, (char *)kv->keys + slab, r, head_key, kv->head_dim);
        store_row(kv, (char *)kv->values + slab + row, value + (size_t)h * kv->head_dim,
                  kv->head_dim);
    }
}
