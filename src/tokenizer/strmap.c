/* strmap.c -- the tokenizer's string hash map: open addressing with linear
 * probing over a power-of-two table sized once for a known key count.
 *
 * Vocabularies hold 1k-150k tokens and merges as many; the map answers
 * "which id has this text" in the inner loops of both encoders, so a lookup
 * hashes once (FNV-1a) and compares bytes only when the full hash matches.
 * Keys are not copied: they live in the tokenizer's arenas. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

static uint32_t hash_bytes(const char *key, size_t len) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)key[i];
        h *= 16777619u;
    }
    return h;
}

int tokenizer_map_init(struct tokenizer_map *map, size_t count) {
    size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    map->slots = calloc(capacity, sizeof(*map->slots));
    map->capacity = map->slots ? capacity : 0;
    return map->slots ? 0 : -1;
}

void tokenizer_map_free(struct tokenizer_map *map) {
    free(map->slots);
    map->slots = NULL;
    map->capacity = 0;
}

/* The slot holding key, or the empty slot where it would go. */
static struct tokenizer_map_slot *find_slot(const struct tokenizer_map *map, const char *key,
                                            size_t len, uint32_t hash) {
    size_t mask = map->capacity - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        struct tokenizer_map_slot *slot = &map->slots[i];
        if (!slot->key) return slot;
        if (slot->hash == hash && slot->len == len && memcmp(slot->key, key, len) == 0) return slot;
    }
}

void tokenizer_map_put(struct tokenizer_map *map, const char *key, size_t len, int value) {
    uint32_t hash = hash_bytes(key, len);
    struct tokenizer_map_slot *slot = find_slot(map, key, len, hash);
    slot->key = key;
    slot->len = (uint32_t)len;
    slot->hash = hash;
    slot->value = value;
}

int tokenizer_map_get(const struct tokenizer_map *map, const char *key, size_t len) {
    if (map->capacity == 0) return -1;
    const struct tokenizer_map_slot *slot = find_slot(map, key, len, hash_bytes(key, len));
    return slot->key ? slot->value : -1;
}
