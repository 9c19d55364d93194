/* prefix.c -- the prefix cache: full KV blocks kept after their sequences
 * end, found again by the tokens that made them.
 *
 * A block of block_size computed positions is named by a hash chain: the
 * hash of the chain before it, then its own tokens. Two sequences whose
 * first n * block_size tokens agree therefore name their first n blocks
 * alike, and those blocks hold the same keys and values bit for bit,
 * since a position's keys and values depend only on the tokens up to it
 * (the engine's chunking and batch invariance, tests/test_batch_invariance).
 * A new sequence takes the longest run of cached blocks that starts its
 * tokens and computes only the rest, so a shared system prompt or an
 * earlier turn of a conversation is computed once.
 *
 * The cache is a hash table of block ids (chained through bucket_next)
 * and a least-recently-used list of the cached blocks no sequence holds;
 * those are the ones a reserve may evict (kvcache.c takes free blocks
 * first). A match is confirmed on the block's own tokens and the hash of
 * the chain before it, so a wrong block would need two 64-bit hashes to
 * collide at once. */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

struct kv_prefix_cache {
    uint64_t seed;         /* the chain's start: the cache's element type and shape */
    uint64_t *hash;        /* (n_blocks) a cached block's chain hash */
    uint64_t *parent_hash; /* (n_blocks) the chain's hash before it */
    int *tokens;           /* (n_blocks, block_size) a cached block's tokens */
    uint8_t *cached;       /* (n_blocks) 1: in the table */
    int *buckets;          /* (n_buckets) first block of each bucket, -1: empty */
    int *bucket_next;      /* (n_blocks) next block of the same bucket, -1: last */
    int n_buckets;         /* a power of two, at least n_blocks */
    int n_cached;          /* blocks in the table */
    int *lru_prev;         /* (n_blocks) evictable list: the block used before, -1 first */
    int *lru_next;         /* (n_blocks) ... the block used after, -1 last */
    int lru_first;         /* least recently used evictable block, -1: none */
    int lru_last;          /* most recently used one */
    int n_evictable;       /* blocks in the list */
};

/* splitmix64's finalizer: every input bit moves every output bit. */
static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The chain's hash after one more block of tokens. */
static uint64_t chain(uint64_t parent, const int *tokens, int n) {
    uint64_t h = parent;
    for (int i = 0; i < n; i++)
        h = mix(h ^ ((uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull));
    return h;
}

int kv_prefix_init(struct kv_cache *kv) {
    struct kv_prefix_cache *p = calloc(1, sizeof(*p));
    if (!p) return -1;
    kv->prefix = p;
    size_t n = (size_t)kv->n_blocks;
    p->n_buckets = 1;
    while (p->n_buckets < kv->n_blocks) p->n_buckets *= 2;
    p->hash = malloc(n * sizeof(uint64_t));
    p->parent_hash = malloc(n * sizeof(uint64_t));
    p->tokens = malloc(n * (size_t)kv->block_size * sizeof(int));
    p->cached = calloc(n, 1);
    p->buckets = malloc((size_t)p->n_buckets * sizeof(int));
    p->bucket_next = malloc(n * sizeof(int));
    p->lru_prev = malloc(n * sizeof(int));
    p->lru_next = malloc(n * sizeof(int));
    if (!p->hash || !p->parent_hash || !p->tokens || !p->cached || !p->buckets || !p->bucket_next ||
        !p->lru_prev || !p->lru_next)
        return -1;
    for (int b = 0; b < p->n_buckets; b++) p->buckets[b] = -1;
    p->lru_first = p->lru_last = -1;
    /* blocks of another element type or layout hold other bytes */
    int shape[] = {(int)kv->type, kv->n_layers, kv->n_kv_heads, kv->head_dim, kv->block_size};
    p->seed = chain(0x6c6f636b73746570ull, shape, (int)(sizeof(shape) / sizeof(shape[0])));
    return 0;
}

void kv_prefix_free(struct kv_cache *kv) {
    struct kv_prefix_cache *p = kv->prefix;
    if (!p) return;
    free(p->hash);
    free(p->parent_hash);
    free(p->tokens);
    free(p->cached);
    free(p->buckets);
    free(p->bucket_next);
    free(p->lru_prev);
    free(p->lru_next);
    free(p);
    kv->prefix = NULL;
}

int kv_prefix_evictable(const struct kv_cache *kv) {
    return kv->prefix->n_evictable;
}

int kv_blocks_cached(const struct kv_cache *kv) {
    return kv->prefix->n_cached;
}

/* ---- the evictable list ---- */

static void lru_append(struct kv_prefix_cache *p, int block) {
    p->lru_prev[block] = p->lru_last;
    p->lru_next[block] = -1;
    if (p->lru_last >= 0)
        p->lru_next[p->lru_last] = block;
    else
        p->lru_first = block;
    p->lru_last = block;
    p->n_evictable++;
}

static void lru_remove(struct kv_prefix_cache *p, int block) {
    int before = p->lru_prev[block], after = p->lru_next[block];
    if (before >= 0)
        p->lru_next[before] = after;
    else
        p->lru_first = after;
    if (after >= 0)
        p->lru_prev[after] = before;
    else
        p->lru_last = before;
    p->n_evictable--;
}

/* ---- the table ---- */

static int bucket_of(const struct kv_prefix_cache *p, uint64_t hash) {
    return (int)(hash & (uint64_t)(p->n_buckets - 1));
}

/* The cached block that continues the chain parent with these tokens, or
 * -1. */
static int find(const struct kv_cache *kv, uint64_t parent, uint64_t hash, const int *tokens) {
    const struct kv_prefix_cache *p = kv->prefix;
    size_t bytes = (size_t)kv->block_size * sizeof(int);
    for (int b = p->buckets[bucket_of(p, hash)]; b >= 0; b = p->bucket_next[b])
        if (p->hash[b] == hash && p->parent_hash[b] == parent &&
            !memcmp(p->tokens + (size_t)b * kv->block_size, tokens, bytes))
            return b;
    return -1;
}

static void insert(struct kv_cache *kv, int block, uint64_t parent, uint64_t hash,
                   const int *tokens) {
    struct kv_prefix_cache *p = kv->prefix;
    int bucket = bucket_of(p, hash);
    p->hash[block] = hash;
    p->parent_hash[block] = parent;
    memcpy(p->tokens + (size_t)block * kv->block_size, tokens,
           (size_t)kv->block_size * sizeof(int));
    p->bucket_next[block] = p->buckets[bucket];
    p->buckets[bucket] = block;
    p->cached[block] = 1;
    p->n_cached++;
}

static void erase(struct kv_prefix_cache *p, int block) {
    int *link = &p->buckets[bucket_of(p, p->hash[block])];
    while (*link != block) link = &p->bucket_next[*link];
    *link = p->bucket_next[block];
    p->cached[block] = 0;
    p->n_cached--;
}

int kv_prefix_evict(struct kv_cache *kv) {
    struct kv_prefix_cache *p = kv->prefix;
    int block = p->lru_first;
    if (block < 0) return -1;
    lru_remove(p, block);
    erase(p, block);
    return block;
}

int kv_prefix_keep(struct kv_cache *kv, int block) {
    struct kv_prefix_cache *p = kv->prefix;
    if (!p->cached[block]) return 0;
    lru_append(p, block);
    return 1;
}

/* ---- sequences ---- */

/* Makes room for n block ids in seq; -1 if out of memory. */
static int grow(struct kv_sequence *seq, int n) {
    if (n <= seq->capacity) return 0;
    int *grown = realloc(seq->blocks, (size_t)n * sizeof(int));
    if (!grown) return -1;
    seq->blocks = grown;
    seq->capacity = n;
    return 0;
}

int kv_sequence_share(struct kv_cache *kv, struct kv_sequence *seq, const int *tokens,
                      int n_tokens) {
    struct kv_prefix_cache *p = kv->prefix;
    int bs = kv->block_size, most = (n_tokens - 1) / bs; /* the last token is computed */
    uint64_t parent = p->seed;
    if (seq->n_blocks != 0 || most < 1 || grow(seq, most)) return 0;
    while (seq->n_blocks < most) {
        const int *own = tokens + (size_t)seq->n_blocks * bs;
        uint64_t hash = chain(parent, own, bs);
        int block = find(kv, parent, hash, own);
        if (block < 0) break;
        if (kv->references[block]++ == 0) lru_remove(p, block);
        seq->blocks[seq->n_blocks++] = block;
        parent = hash;
    }
    seq->n_hashed = seq->n_blocks;
    seq->chain_hash = parent;
    return seq->n_blocks * bs;
}

void kv_sequence_publish(struct kv_cache *kv, struct kv_sequence *seq, const int *tokens,
                         int n_computed) {
    int bs = kv->block_size, full = n_computed / bs;
    if (seq->n_hashed == 0) seq->chain_hash = kv->prefix->seed;
    for (; seq->n_hashed < full && seq->n_hashed < seq->n_blocks; seq->n_hashed++) {
        const int *own = tokens + (size_t)seq->n_hashed * bs;
        uint64_t parent = seq->chain_hash, hash = chain(parent, own, bs);
        int block = seq->blocks[seq->n_hashed];
        if (!kv->prefix->cached[block] && find(kv, parent, hash, own) < 0)
            insert(kv, block, parent, hash, own);
        seq->chain_hash = hash;
    }
}
