/* gguf_writer.c -- GGUF v3 writer: collects metadata (each value already
 * serialized as it will appear in the file) and tensor infos whose data
 * stays with the caller, then gguf_writer_write streams header, kvs, infos,
 * padding and the tensor data to disk. Tensor data offsets are multiples of
 * general.alignment (32 unless the caller sets another power of two).
 *
 * Setters return nothing: the first failure (out of memory, a bad argument)
 * is remembered and reported by gguf_writer_write, so a caller can make all
 * its calls and check once. Setting a key twice replaces its value. */
#include "model/gguf_internal.h"

#include "base/base.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A growable byte buffer. */
struct gguf_buffer {
    uint8_t *data;
    size_t len;      /* bytes used */
    size_t capacity; /* bytes allocated */
    int failed;      /* 1 after an allocation failed; later puts do nothing */
};

/* One metadata entry. */
struct gguf_writer_kv {
    char *key;          /* NUL-terminated copy */
    uint8_t *value;     /* uint32 value type then the value, as in the file */
    size_t value_bytes; /* bytes of value */
};

/* One tensor; its data belongs to the caller. */
struct gguf_writer_tensor {
    char *name; /* NUL-terminated copy */
    enum tensor_type type;
    int n_dims;
    uint64_t dims[GGUF_MAX_DIMS];
    const void *data; /* size bytes */
    size_t size;
    uint64_t offset; /* in the data section; set by gguf_writer_write */
};

struct gguf_writer {
    struct gguf_writer_kv *kvs; /* (n_kv) in the order first set */
    size_t n_kv, kv_capacity;
    struct gguf_writer_tensor *tensors; /* (n_tensors) in the order added */
    size_t n_tensors, tensor_capacity;
    char error[256]; /* the first failure; empty if none */
};

/* Records a failure unless one is already recorded: the first is the cause. */
__attribute__((format(printf, 2, 3))) static void gguf_writer_fail(struct gguf_writer *writer,
                                                                   const char *format, ...) {
    if (writer->error[0] != '\0') return;
    va_list args;
    va_start(args, format);
    error_vformat_at(writer->error, sizeof(writer->error), NULL, format, args);
    va_end(args);
}

/* Makes room for one more of n items of item_size bytes in *items. */
static int gguf_grow(void **items, size_t *capacity, size_t n, size_t item_size) {
    if (n < *capacity) return 0;
    size_t grown = *capacity ? *capacity * 2 : 16;
    void *p = realloc(*items, grown * item_size);
    if (p == NULL) return -1;
    *items = p;
    *capacity = grown;
    return 0;
}

static void gguf_put(struct gguf_buffer *buffer, const void *p, size_t n) {
    if (buffer->failed || n == 0) return;
    if (n > buffer->capacity - buffer->len) {
        size_t capacity = buffer->capacity ? buffer->capacity : 64;
        while (capacity - buffer->len < n) {
            if (capacity > SIZE_MAX / 2) {
                buffer->failed = 1;
                return;
            }
            capacity *= 2;
        }
        uint8_t *data = realloc(buffer->data, capacity);
        if (data == NULL) {
            buffer->failed = 1;
            return;
        }
        buffer->data = data;
        buffer->capacity = capacity;
    }
    memcpy(buffer->data + buffer->len, p, n);
    buffer->len += n;
}

static void gguf_put_u32(struct gguf_buffer *buffer, uint32_t v) {
    gguf_put(buffer, &v, 4);
}

static void gguf_put_u64(struct gguf_buffer *buffer, uint64_t v) {
    gguf_put(buffer, &v, 8);
}

static void gguf_put_string(struct gguf_buffer *buffer, const char *s, uint64_t len) {
    gguf_put_u64(buffer, len);
    gguf_put(buffer, s, (size_t)len);
}

struct gguf_writer *gguf_writer_create(void) {
    return calloc(1, sizeof(struct gguf_writer));
}

void gguf_writer_free(struct gguf_writer *writer) {
    if (writer == NULL) return;
    for (size_t i = 0; i < writer->n_kv; i++) {
        free(writer->kvs[i].key);
        free(writer->kvs[i].value);
    }
    for (size_t i = 0; i < writer->n_tensors; i++) free(writer->tensors[i].name);
    free(writer->kvs);
    free(writer->tensors);
    free(writer);
}

/* Stores value (type and value bytes) under key, taking the buffer. */
static void gguf_writer_store(struct gguf_writer *writer, const char *key,
                              struct gguf_buffer *value) {
    if (value->failed) {
        gguf_writer_fail(writer, "metadata key '%s': out of memory", key);
        free(value->data);
        return;
    }
    for (size_t i = 0; i < writer->n_kv; i++) {
        if (strcmp(writer->kvs[i].key, key) == 0) {
            free(writer->kvs[i].value);
            writer->kvs[i].value = value->data;
            writer->kvs[i].value_bytes = value->len;
            return;
        }
    }
    char *copy = strdup(key);
    if (copy == NULL || gguf_grow((void **)&writer->kvs, &writer->kv_capacity, writer->n_kv,
                                  sizeof(*writer->kvs))) {
        gguf_writer_fail(writer, "metadata key '%s': out of memory", key);
        free(copy);
        free(value->data);
        return;
    }
    writer->kvs[writer->n_kv++] = (struct gguf_writer_kv){copy, value->data, value->len};
}

/* Common checks of every setter; 0 if the set can go ahead. */
static int gguf_writer_check(struct gguf_writer *writer, const char *key) {
    if (writer == NULL) return -1;
    if (key == NULL) {
        gguf_writer_fail(writer, "metadata key is NULL");
        return -1;
    }
    return 0;
}

static void gguf_writer_set_scalar(struct gguf_writer *writer, const char *key, enum gguf_type type,
                                   const void *value, size_t size) {
    if (gguf_writer_check(writer, key)) return;
    struct gguf_buffer buffer = {0};
    gguf_put_u32(&buffer, type);
    gguf_put(&buffer, value, size);
    gguf_writer_store(writer, key, &buffer);
}

void gguf_writer_set_u32(struct gguf_writer *writer, const char *key, uint32_t value) {
    gguf_writer_set_scalar(writer, key, GGUF_TYPE_UINT32, &value, 4);
}

void gguf_writer_set_i32(struct gguf_writer *writer, const char *key, int32_t value) {
    gguf_writer_set_scalar(writer, key, GGUF_TYPE_INT32, &value, 4);
}

void gguf_writer_set_f32(struct gguf_writer *writer, const char *key, float value) {
    gguf_writer_set_scalar(writer, key, GGUF_TYPE_FLOAT32, &value, 4);
}

void gguf_writer_set_bool(struct gguf_writer *writer, const char *key, int value) {
    uint8_t byte = value != 0;
    gguf_writer_set_scalar(writer, key, GGUF_TYPE_BOOL, &byte, 1);
}

void gguf_writer_set_string(struct gguf_writer *writer, const char *key, const char *value) {
    if (gguf_writer_check(writer, key)) return;
    if (value == NULL) {
        gguf_writer_fail(writer, "metadata key '%s': string value is NULL", key);
        return;
    }
    struct gguf_buffer buffer = {0};
    gguf_put_u32(&buffer, GGUF_TYPE_STRING);
    gguf_put_string(&buffer, value, strlen(value));
    gguf_writer_store(writer, key, &buffer);
}

void gguf_writer_set_array(struct gguf_writer *writer, const char *key, enum gguf_type type,
                           const void *values, uint64_t n) {
    if (gguf_writer_check(writer, key)) return;
    int size = gguf_type_size((uint32_t)type);
    if (size <= 0) {
        gguf_writer_fail(writer, "metadata key '%s': element type %d is not a scalar type", key,
                         (int)type);
        return;
    }
    if (n > SIZE_MAX / (size_t)size || (n > 0 && values == NULL)) {
        gguf_writer_fail(writer, "metadata key '%s': bad array of %" PRIu64 " elements", key, n);
        return;
    }
    struct gguf_buffer buffer = {0};
    gguf_put_u32(&buffer, GGUF_TYPE_ARRAY);
    gguf_put_u32(&buffer, type);
    gguf_put_u64(&buffer, n);
    gguf_put(&buffer, values, (size_t)n * (size_t)size);
    gguf_writer_store(writer, key, &buffer);
}

void gguf_writer_set_string_array(struct gguf_writer *writer, const char *key,
                                  const char *const *values, const uint64_t *lengths, uint64_t n) {
    if (gguf_writer_check(writer, key)) return;
    struct gguf_buffer buffer = {0};
    gguf_put_u32(&buffer, GGUF_TYPE_ARRAY);
    gguf_put_u32(&buffer, GGUF_TYPE_STRING);
    gguf_put_u64(&buffer, n);
    for (uint64_t i = 0; i < n; i++) {
        if (values == NULL || values[i] == NULL) {
            gguf_writer_fail(writer, "metadata key '%s': string %" PRIu64 " is NULL", key, i);
            free(buffer.data);
            return;
        }
        gguf_put_string(&buffer, values[i], lengths ? lengths[i] : strlen(values[i]));
    }
    gguf_writer_store(writer, key, &buffer);
}

/* Appends the bytes of value (without its type) to buffer; -1 with a message
 * in writer if the value cannot be written. */
static int gguf_serialize(struct gguf_writer *writer, const char *key, struct gguf_buffer *buffer,
                          const struct gguf_value *value, int depth) {
    uint8_t bytes[8];
    enum gguf_type type = value->type;
    switch (type) {
    case GGUF_TYPE_STRING:
        gguf_put_string(buffer, value->v.str.data, value->v.str.len);
        return 0;
    case GGUF_TYPE_ARRAY:
        break;
    case GGUF_TYPE_FLOAT32: {
        double d = value->v.f64;
        if (isfinite(d) && fabs(d) > FLT_MAX) { /* the conversion would be undefined */
            gguf_writer_fail(writer, "metadata key '%s': value %g does not fit in float32", key, d);
            return -1;
        }
        float f = (float)d;
        gguf_put(buffer, &f, 4);
        return 0;
    }
    case GGUF_TYPE_FLOAT64:
        gguf_put(buffer, &value->v.f64, 8);
        return 0;
    default: {
        int size = gguf_type_size((uint32_t)type);
        if (size <= 0) {
            gguf_writer_fail(writer, "metadata key '%s': value type %d is not a GGUF value type",
                             key, (int)type);
            return -1;
        }
        /* Integers: the low bytes of the two's complement value, little-endian. */
        uint64_t u = value->v.u64;
        for (int i = 0; i < size; i++) bytes[i] = (uint8_t)(u >> (8 * i));
        gguf_put(buffer, bytes, (size_t)size);
        return 0;
    }
    }
    if (depth >= GGUF_MAX_ARRAY_DEPTH) {
        gguf_writer_fail(writer, "metadata key '%s': arrays nested more than %d deep", key,
                         GGUF_MAX_ARRAY_DEPTH);
        return -1;
    }
    enum gguf_type element = value->v.arr.type;
    int size = gguf_type_size((uint32_t)element);
    if (size < 0) {
        gguf_writer_fail(writer, "metadata key '%s': element type %d is not a GGUF value type", key,
                         (int)element);
        return -1;
    }
    gguf_put_u32(buffer, element);
    gguf_put_u64(buffer, value->v.arr.n);
    if (size > 0) {
        if (value->v.arr.n > SIZE_MAX / (size_t)size) {
            gguf_writer_fail(writer, "metadata key '%s': array too large", key);
            return -1;
        }
        gguf_put(buffer, value->v.arr.data, (size_t)value->v.arr.n * (size_t)size);
        return 0;
    }
    for (uint64_t i = 0; i < value->v.arr.n && !buffer->failed; i++) {
        struct gguf_value item = gguf_array_element(value, i);
        if (gguf_serialize(writer, key, buffer, &item, depth + 1)) return -1;
    }
    return 0;
}

void gguf_writer_set_value(struct gguf_writer *writer, const char *key,
                           const struct gguf_value *value) {
    if (gguf_writer_check(writer, key)) return;
    struct gguf_buffer buffer = {0};
    gguf_put_u32(&buffer, value->type);
    if (gguf_serialize(writer, key, &buffer, value, 0)) {
        free(buffer.data);
        return;
    }
    gguf_writer_store(writer, key, &buffer);
}

/* Bytes a tensor of this type and shape takes, or 0 (with a message) if the
 * shape is not one a reader accepts. */
static size_t gguf_writer_tensor_bytes(struct gguf_writer *writer, const char *name,
                                       enum tensor_type type, int n_dims, const uint64_t *dims) {
    if (!tensor_type_is_valid((int)type)) {
        gguf_writer_fail(writer, "tensor '%s': type %d is not supported", name, (int)type);
        return 0;
    }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || dims == NULL) {
        gguf_writer_fail(writer, "tensor '%s': n_dims %d is not in 1..%d", name, n_dims,
                         GGUF_MAX_DIMS);
        return 0;
    }
    uint64_t n = 1;
    for (int d = 0; d < n_dims; d++) {
        if (dims[d] == 0 || dims[d] > (uint64_t)INT64_MAX / n) {
            gguf_writer_fail(writer, "tensor '%s': dimension %d (%" PRIu64 ") is 0 or too large",
                             name, d, dims[d]);
            return 0;
        }
        n *= dims[d];
    }
    uint64_t block = (uint64_t)tensor_type_block_elements(type);
    if (dims[0] % block != 0) {
        gguf_writer_fail(writer,
                         "tensor '%s': row length %" PRIu64 " is not a multiple of %" PRIu64, name,
                         dims[0], block);
        return 0;
    }
    uint64_t block_bytes = tensor_type_block_bytes(type);
    if (n / block > SIZE_MAX / block_bytes) {
        gguf_writer_fail(writer, "tensor '%s': too large", name);
        return 0;
    }
    return (size_t)(n / block * block_bytes);
}

void gguf_writer_add_tensor(struct gguf_writer *writer, const char *name, enum tensor_type type,
                            int n_dims, const uint64_t *dims, const void *data, size_t size) {
    if (writer == NULL) return;
    if (name == NULL || data == NULL) {
        gguf_writer_fail(writer, "tensor '%s': name or data is NULL", name ? name : "(null)");
        return;
    }
    size_t expected = gguf_writer_tensor_bytes(writer, name, type, n_dims, dims);
    if (expected == 0) return;
    if (size != expected) {
        gguf_writer_fail(writer, "tensor '%s': %zu bytes of data, its shape needs %zu", name, size,
                         expected);
        return;
    }
    for (size_t i = 0; i < writer->n_tensors; i++) {
        if (strcmp(writer->tensors[i].name, name) == 0) {
            gguf_writer_fail(writer, "tensor '%s' added twice", name);
            return;
        }
    }
    char *copy = strdup(name);
    if (copy == NULL || gguf_grow((void **)&writer->tensors, &writer->tensor_capacity,
                                  writer->n_tensors, sizeof(*writer->tensors))) {
        gguf_writer_fail(writer, "tensor '%s': out of memory", name);
        free(copy);
        return;
    }
    struct gguf_writer_tensor *tensor = &writer->tensors[writer->n_tensors++];
    memset(tensor, 0, sizeof(*tensor));
    tensor->name = copy;
    tensor->type = type;
    tensor->n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) tensor->dims[d] = d < n_dims ? dims[d] : 1;
    tensor->data = data;
    tensor->size = size;
}

/* ---- writing ---- */

/* The alignment a set general.alignment asks for (a uint32 power of two), or
 * the default; 0 if the set value is not usable. */
static uint64_t gguf_writer_alignment(const struct gguf_writer *writer) {
    for (size_t i = 0; i < writer->n_kv; i++) {
        const struct gguf_writer_kv *kv = &writer->kvs[i];
        if (strcmp(kv->key, "general.alignment") != 0) continue;
        uint32_t type, value;
        if (kv->value_bytes != 8) return 0;
        memcpy(&type, kv->value, 4);
        memcpy(&value, kv->value + 4, 4);
        if (type != GGUF_TYPE_UINT32 || value == 0 || (value & (value - 1)) != 0) return 0;
        return value;
    }
    return GGUF_DEFAULT_ALIGNMENT;
}

/* A file being written, counting the bytes so padding can be computed. */
struct gguf_output {
    FILE *file;
    uint64_t pos; /* bytes written so far */
    int failed;   /* 1 after a write failed */
};

static void gguf_emit(struct gguf_output *out, const void *p, size_t n) {
    if (out->failed || n == 0) return;
    if (fwrite(p, 1, n, out->file) != n) out->failed = 1;
    out->pos += n;
}

static void gguf_emit_u32(struct gguf_output *out, uint32_t v) {
    gguf_emit(out, &v, 4);
}

static void gguf_emit_u64(struct gguf_output *out, uint64_t v) {
    gguf_emit(out, &v, 8);
}

/* Writes zero bytes up to the file offset target. */
static void gguf_emit_padding(struct gguf_output *out, uint64_t target) {
    static const uint8_t zeros[64];
    while (out->pos < target && !out->failed) {
        uint64_t n = target - out->pos;
        gguf_emit(out, zeros, n < sizeof(zeros) ? (size_t)n : sizeof(zeros));
    }
}

static void gguf_emit_all(const struct gguf_writer *writer, struct gguf_output *out,
                          uint64_t alignment) {
    gguf_emit_u32(out, GGUF_MAGIC);
    gguf_emit_u32(out, 3);
    gguf_emit_u64(out, writer->n_tensors);
    gguf_emit_u64(out, writer->n_kv);
    for (size_t i = 0; i < writer->n_kv; i++) {
        const struct gguf_writer_kv *kv = &writer->kvs[i];
        size_t len = strlen(kv->key);
        gguf_emit_u64(out, len);
        gguf_emit(out, kv->key, len);
        gguf_emit(out, kv->value, kv->value_bytes);
    }
    for (size_t i = 0; i < writer->n_tensors; i++) {
        const struct gguf_writer_tensor *tensor = &writer->tensors[i];
        size_t len = strlen(tensor->name);
        gguf_emit_u64(out, len);
        gguf_emit(out, tensor->name, len);
        gguf_emit_u32(out, (uint32_t)tensor->n_dims);
        for (int d = 0; d < tensor->n_dims; d++) gguf_emit_u64(out, tensor->dims[d]);
        gguf_emit_u32(out, (uint32_t)tensor->type);
        gguf_emit_u64(out, tensor->offset);
    }
    if (writer->n_tensors == 0) return; /* no data section, so no padding */
    uint64_t data_offset = (out->pos + alignment - 1) / alignment * alignment;
    for (size_t i = 0; i < writer->n_tensors; i++) {
        gguf_emit_padding(out, data_offset + writer->tensors[i].offset);
        gguf_emit(out, writer->tensors[i].data, writer->tensors[i].size);
    }
}

int gguf_writer_write(struct gguf_writer *writer, const char *path, char *err, size_t errlen) {
    if (writer == NULL) {
        snprintf(err, errlen, "%s: out of memory (no writer)", path);
        return -1;
    }
    if (writer->error[0] != '\0') {
        snprintf(err, errlen, "%s: %s", path, writer->error);
        return -1;
    }
    uint64_t alignment = gguf_writer_alignment(writer);
    if (alignment == 0) {
        snprintf(err, errlen, "%s: metadata key 'general.alignment' must be a uint32 power of two",
                 path);
        return -1;
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < writer->n_tensors; i++) {
        offset = (offset + alignment - 1) / alignment * alignment;
        writer->tensors[i].offset = offset;
        offset += writer->tensors[i].size;
    }
    struct gguf_output out = {fopen(path, "wb"), 0, 0};
    if (out.file == NULL) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    gguf_emit_all(writer, &out, alignment);
    int saved_errno = errno;
    if (fclose(out.file) != 0 && !out.failed) {
        out.failed = 1;
        saved_errno = errno;
    }
    if (out.failed) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(saved_errno));
        unlink(path);
        return -1;
    }
    return 0;
}
