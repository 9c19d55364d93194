/* fuzz_gguf.c -- libFuzzer harness for the GGUF reader: parses the input with
 * gguf_open_memory and, if it is accepted, touches everything a caller could
 * reach: every key, every value and every array element at every nesting
 * level, every lookup and getter, and the first and last byte of every
 * tensor. A refusal must come with a message that names the input. Built by
 * tests/fuzz/CMakeLists.txt when LOCKSTEP_FUZZ=ON. */
#include "model/model.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the walk read, kept so the reads are not optimised away. */
static volatile uint64_t fuzz_sink;

static uint64_t walk_value(const struct gguf_value *value, int depth) {
    uint64_t sum = (uint64_t)value->type;
    switch (value->type) {
    case GGUF_TYPE_STRING:
        for (uint64_t i = 0; i < value->v.str.len; i++) sum += (unsigned char)value->v.str.data[i];
        return sum;
    case GGUF_TYPE_ARRAY:
        if (depth > 64) abort(); /* the reader bounds nesting far below this */
        for (uint64_t i = 0; i < value->v.arr.n; i++) {
            struct gguf_value element = gguf_array_element(value, i);
            if (element.type != value->v.arr.type) abort();
            sum += walk_value(&element, depth + 1);
        }
        return sum;
    default:
        return sum + value->v.u64;
    }
}

/* A NUL-terminated copy of s in buf, or NULL if s holds a NUL or is too long. */
static const char *c_string(char *buf, size_t size, struct gguf_string s) {
    if (s.len >= size || memchr(s.data, '\0', (size_t)s.len) != NULL) return NULL;
    memcpy(buf, s.data, (size_t)s.len);
    buf[s.len] = '\0';
    return buf;
}

static uint64_t walk_file(const struct gguf_file *file) {
    char name[512], err[512];
    uint64_t sum = 0;
    for (uint64_t i = 0; i < file->n_kv; i++) {
        const struct gguf_kv *kv = &file->kv[i];
        sum += walk_value(&kv->value, 0);
        const char *key = c_string(name, sizeof(name), kv->key);
        if (key == NULL) continue;
        if (gguf_find(file, key) != kv) abort(); /* keys are unique */
        uint32_t u;
        float f;
        struct gguf_string s;
        sum += (uint64_t)gguf_get_u32(file, key, &u, err, sizeof(err));
        sum += (uint64_t)gguf_get_f32(file, key, &f, err, sizeof(err));
        sum += (uint64_t)gguf_get_string(file, key, &s, err, sizeof(err));
    }
    for (uint64_t i = 0; i < file->n_tensors; i++) {
        const struct gguf_tensor *t = &file->tensors[i];
        const uint8_t *p = t->data;
        if (t->size == 0 || p < file->base || (size_t)(p - file->base) > file->size ||
            t->size > file->size - (size_t)(p - file->base) || t->offset % file->alignment != 0)
            abort();
        sum += p[0] + p[t->size - 1];
        const char *tensor_name = c_string(name, sizeof(name), t->name);
        if (tensor_name != NULL && gguf_find_tensor(file, tensor_name) != t) abort();
    }
    return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "";
    struct gguf_file *file = NULL;
    if (gguf_open_memory(&file, data, size, "fuzz", err, sizeof(err)) != 0) {
        if (file != NULL || strncmp(err, "fuzz: ", 6) != 0 || strchr(err, '\n') != NULL) abort();
        return 0;
    }
    fuzz_sink = walk_file(file);
    gguf_close(file);
    return 0;
}
