/* gguf_value.c -- GGUF metadata values: the bounds-checked field readers the
 * whole parser uses, the parser of one value (scalars, strings, arrays nested
 * up to GGUF_MAX_ARRAY_DEPTH levels), element access and the typed getters.
 *
 * Scalars are decoded; strings and arrays point into the image. A string
 * array or an array of arrays has variable-sized elements, so while parsing
 * it gets a table of element offsets, carved from an arena the file owns.
 * For an array of arrays the table holds n offsets followed by n pointers,
 * the offset tables of the inner arrays, so gguf_array_nested can hand out
 * an inner array that can itself be indexed. */
#include "base/base.h"
#include "model/gguf_internal.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(const uint64_t *) <= sizeof(uint64_t), "a pointer fits in a table word");

#define GGUF_ARENA_CHUNK_WORDS 8192 /* 64 KiB: most vocabularies need a few chunks */

static const struct {
    const char *name;
    int size; /* bytes of one value; 0 if variable */
} gguf_types[GGUF_TYPE_COUNT] = {
    {"uint8", 1},  {"int8", 1},    {"uint16", 2},  {"int16", 2},  {"uint32", 4},
    {"int32", 4},  {"float32", 4}, {"bool", 1},    {"string", 0}, {"array", 0},
    {"uint64", 8}, {"int64", 8},   {"float64", 8},
};

const char *gguf_value_type_name(int type) {
    if (type < 0 || type >= GGUF_TYPE_COUNT) return NULL;
    return gguf_types[type].name;
}

int gguf_type_size(uint32_t type) {
    if (type >= GGUF_TYPE_COUNT) return -1;
    return gguf_types[type].size;
}

int gguf_fail(struct gguf_reader *reader, const char *format, ...) {
    char where[512];
    snprintf(where, sizeof(where), "%s: %s", reader->name, reader->context);
    va_list args;
    va_start(args, format);
    error_vformat_at(reader->err, reader->errlen, where, format, args);
    va_end(args);
    return -1;
}

const char *gguf_printable(char *buf, size_t size, struct gguf_string s) {
    if (size == 0) return buf;
    size_t keep = s.len < size - 1 ? (size_t)s.len : size - 1;
    int cut = keep < s.len;
    if (cut && keep >= 3) keep -= 3; /* room for "..." */
    for (size_t i = 0; i < keep; i++) {
        unsigned char c = (unsigned char)s.data[i];
        buf[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (cut && size >= 4) {
        memcpy(buf + keep, "...", 3);
        keep += 3;
    }
    buf[keep] = '\0';
    return buf;
}

/* Fails unless bytes more bytes can be read at the current position. */
static int gguf_need(struct gguf_reader *reader, uint64_t bytes, const char *what) {
    if (bytes <= reader->size - reader->pos) return 0;
    return gguf_fail(reader,
                     "%s [offset %zu, %" PRIu64 " bytes] extends past end of file (size %zu)", what,
                     reader->pos, bytes, reader->size);
}

int gguf_read_u32(struct gguf_reader *reader, uint32_t *out, const char *what) {
    if (gguf_need(reader, 4, what)) return -1;
    memcpy(out, reader->base + reader->pos, 4);
    reader->pos += 4;
    return 0;
}

int gguf_read_u64(struct gguf_reader *reader, uint64_t *out, const char *what) {
    if (gguf_need(reader, 8, what)) return -1;
    memcpy(out, reader->base + reader->pos, 8);
    reader->pos += 8;
    return 0;
}

int gguf_read_string(struct gguf_reader *reader, struct gguf_string *out, const char *what) {
    uint64_t len;
    if (gguf_read_u64(reader, &len, what)) return -1;
    if (gguf_need(reader, len, what)) return -1;
    out->data = (const char *)reader->base + reader->pos;
    out->len = len;
    reader->pos += (size_t)len;
    return 0;
}

void gguf_decode_scalar(enum gguf_type type, const uint8_t *p, struct gguf_value *out) {
    uint16_t u16;
    uint32_t u32;
    float f32;
    out->type = type;
    memset(&out->v, 0, sizeof(out->v));
    switch (type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_BOOL:
        out->v.u64 = p[0];
        break;
    case GGUF_TYPE_INT8:
        out->v.i64 = (int64_t)p[0] - (p[0] >= 0x80 ? 0x100 : 0);
        break;
    case GGUF_TYPE_UINT16:
        memcpy(&u16, p, 2);
        out->v.u64 = u16;
        break;
    case GGUF_TYPE_INT16:
        memcpy(&u16, p, 2);
        out->v.i64 = (int16_t)u16;
        break;
    case GGUF_TYPE_UINT32:
        memcpy(&u32, p, 4);
        out->v.u64 = u32;
        break;
    case GGUF_TYPE_INT32:
        memcpy(&u32, p, 4);
        out->v.i64 = (int32_t)u32;
        break;
    case GGUF_TYPE_FLOAT32:
        memcpy(&f32, p, 4);
        out->v.f64 = f32;
        break;
    case GGUF_TYPE_UINT64:
        memcpy(&out->v.u64, p, 8);
        break;
    case GGUF_TYPE_INT64:
        memcpy(&out->v.i64, p, 8);
        break;
    case GGUF_TYPE_FLOAT64:
        memcpy(&out->v.f64, p, 8);
        break;
    default:
        break; /* STRING and ARRAY are not scalars */
    }
}

/* ---- the arena of offset tables ---- */

static uint64_t *gguf_arena_alloc(struct gguf_arena_chunk **arena, size_t words) {
    struct gguf_arena_chunk *chunk = *arena;
    if (chunk == NULL || chunk->capacity - chunk->used < words) {
        size_t capacity = words > GGUF_ARENA_CHUNK_WORDS ? words : GGUF_ARENA_CHUNK_WORDS;
        if (capacity > (SIZE_MAX - sizeof(*chunk)) / sizeof(uint64_t)) return NULL;
        chunk = malloc(sizeof(*chunk) + capacity * sizeof(uint64_t));
        if (chunk == NULL) return NULL;
        chunk->next = *arena;
        chunk->used = 0;
        chunk->capacity = capacity;
        *arena = chunk;
    }
    uint64_t *table = chunk->data + chunk->used;
    chunk->used += words;
    return table;
}

void gguf_arena_free(struct gguf_arena_chunk *arena) {
    while (arena != NULL) {
        struct gguf_arena_chunk *next = arena->next;
        free(arena);
        arena = next;
    }
}

/* ---- parsing ---- */

static int gguf_read_array(struct gguf_reader *reader, struct gguf_value *out, int depth);

/* Reads the variable-sized elements of an array whose header is parsed. */
static int gguf_read_elements(struct gguf_reader *reader, struct gguf_value *out, int depth) {
    uint64_t n = out->v.arr.n;
    int nested = out->v.arr.type == GGUF_TYPE_ARRAY;
    uint64_t *table = gguf_arena_alloc(reader->arena, nested ? 2 * (size_t)n : (size_t)n);
    if (table == NULL)
        return gguf_fail(reader, "out of memory for an array of %" PRIu64 " elements", n);
    size_t start = reader->pos;
    for (uint64_t i = 0; i < n; i++) {
        table[i] = reader->pos - start;
        if (!nested) {
            uint64_t len = 0;
            if (reader->size - reader->pos >= 8) memcpy(&len, reader->base + reader->pos, 8);
            if (reader->size - reader->pos < 8 || len > reader->size - reader->pos - 8)
                return gguf_fail(reader,
                                 "string element %" PRIu64 " of the array [offset %zu, %" PRIu64
                                 " bytes after its length] extends past end of file (size %zu)",
                                 i, reader->pos, len, reader->size);
            reader->pos += 8 + (size_t)len;
            continue;
        }
        struct gguf_value inner = {0};
        if (gguf_read_array(reader, &inner, depth + 1)) return -1;
        const uint64_t *inner_table = inner.v.arr.offsets;
        memcpy(&table[n + i], &inner_table, sizeof(inner_table));
    }
    out->v.arr.offsets = table;
    return 0;
}

static int gguf_read_array(struct gguf_reader *reader, struct gguf_value *out, int depth) {
    uint32_t type;
    uint64_t n;
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return gguf_fail(reader, "arrays nested more than %d deep at offset %zu",
                         GGUF_MAX_ARRAY_DEPTH, reader->pos);
    if (gguf_read_u32(reader, &type, "array element type")) return -1;
    if (type >= GGUF_TYPE_COUNT)
        return gguf_fail(reader, "array element type %" PRIu32 " is not a GGUF value type", type);
    if (gguf_read_u64(reader, &n, "array length")) return -1;
    out->type = GGUF_TYPE_ARRAY;
    out->v.arr.type = (enum gguf_type)type;
    out->v.arr.n = n;
    out->v.arr.data = reader->base + reader->pos;
    out->v.arr.offsets = NULL;
    int size = gguf_type_size(type);
    /* The smallest an element can be bounds n before anything is allocated. */
    int min_size = size > 0 ? size : type == GGUF_TYPE_STRING ? 8 : GGUF_MIN_NESTED_BYTES;
    size_t remaining = reader->size - reader->pos;
    if (n > remaining / (size_t)min_size)
        return gguf_fail(reader,
                         "array of %" PRIu64 " %s elements at offset %zu extends past end of "
                         "file (size %zu)",
                         n, gguf_types[type].name, reader->pos, reader->size);
    if (size > 0) {
        reader->pos += (size_t)n * (size_t)size;
        return 0;
    }
    if (n == 0) return 0;
    return gguf_read_elements(reader, out, depth);
}

int gguf_read_value(struct gguf_reader *reader, enum gguf_type type, struct gguf_value *out) {
    out->type = type;
    if (type == GGUF_TYPE_STRING) return gguf_read_string(reader, &out->v.str, "string value");
    if (type == GGUF_TYPE_ARRAY) return gguf_read_array(reader, out, 0);
    int size = gguf_type_size(type);
    if (size <= 0) return gguf_fail(reader, "value type %d is not a GGUF value type", (int)type);
    if (gguf_need(reader, (uint64_t)size, "value")) return -1;
    gguf_decode_scalar(type, reader->base + reader->pos, out);
    reader->pos += (size_t)size;
    return 0;
}

/* ---- element access ---- */

struct gguf_string gguf_array_string(const struct gguf_value *array, uint64_t i) {
    const uint8_t *p = array->v.arr.data + array->v.arr.offsets[i];
    struct gguf_string s;
    memcpy(&s.len, p, 8);
    s.data = (const char *)p + 8;
    return s;
}

struct gguf_value gguf_array_nested(const struct gguf_value *array, uint64_t i) {
    const uint8_t *p = array->v.arr.data + array->v.arr.offsets[i];
    struct gguf_value value;
    uint32_t type;
    memcpy(&type, p, 4);
    value.type = GGUF_TYPE_ARRAY;
    value.v.arr.type = (enum gguf_type)type;
    memcpy(&value.v.arr.n, p + 4, 8);
    value.v.arr.data = p + 12;
    memcpy(&value.v.arr.offsets, &array->v.arr.offsets[array->v.arr.n + i],
           sizeof(value.v.arr.offsets));
    return value;
}

struct gguf_value gguf_array_element(const struct gguf_value *array, uint64_t i) {
    struct gguf_value value;
    enum gguf_type type = array->v.arr.type;
    if (type == GGUF_TYPE_ARRAY) return gguf_array_nested(array, i);
    if (type == GGUF_TYPE_STRING) {
        value.type = GGUF_TYPE_STRING;
        value.v.str = gguf_array_string(array, i);
        return value;
    }
    gguf_decode_scalar(type, array->v.arr.data + i * (uint64_t)gguf_type_size(type), &value);
    return value;
}

int gguf_string_equals(struct gguf_string s, const char *c) {
    size_t len = strlen(c);
    return s.len == len && (len == 0 || memcmp(s.data, c, len) == 0);
}

/* ---- typed getters ---- */

static int gguf_is_integer(enum gguf_type type) {
    return type <= GGUF_TYPE_INT32 || type == GGUF_TYPE_UINT64 || type == GGUF_TYPE_INT64;
}

static int gguf_is_signed(enum gguf_type type) {
    return type == GGUF_TYPE_INT8 || type == GGUF_TYPE_INT16 || type == GGUF_TYPE_INT32 ||
           type == GGUF_TYPE_INT64;
}

/* Finds key with the expected kind of value, or fails naming what is wrong. */
static const struct gguf_kv *gguf_lookup(const struct gguf_file *file, const char *key,
                                         int (*accept)(enum gguf_type), const char *expected,
                                         char *err, size_t errlen) {
    const struct gguf_kv *kv = gguf_find(file, key);
    if (kv == NULL) {
        snprintf(err, errlen, "%s: metadata key '%s' is missing", file->path, key);
        return NULL;
    }
    if (!accept(kv->value.type)) {
        snprintf(err, errlen, "%s: metadata key '%s' has type %s, expected %s", file->path, key,
                 gguf_types[kv->value.type].name, expected);
        return NULL;
    }
    return kv;
}

int gguf_get_u32(const struct gguf_file *file, const char *key, uint32_t *out, char *err,
                 size_t errlen) {
    const struct gguf_kv *kv = gguf_lookup(file, key, gguf_is_integer, "an integer", err, errlen);
    if (kv == NULL) return -1;
    if (gguf_is_signed(kv->value.type) ? kv->value.v.i64 < 0 || kv->value.v.i64 > UINT32_MAX
                                       : kv->value.v.u64 > UINT32_MAX) {
        if (gguf_is_signed(kv->value.type))
            snprintf(err, errlen, "%s: metadata key '%s': value %" PRId64 " does not fit in uint32",
                     file->path, key, kv->value.v.i64);
        else
            snprintf(err, errlen, "%s: metadata key '%s': value %" PRIu64 " does not fit in uint32",
                     file->path, key, kv->value.v.u64);
        return -1;
    }
    *out = gguf_is_signed(kv->value.type) ? (uint32_t)kv->value.v.i64 : (uint32_t)kv->value.v.u64;
    return 0;
}

static int gguf_is_float(enum gguf_type type) {
    return type == GGUF_TYPE_FLOAT32 || type == GGUF_TYPE_FLOAT64;
}

int gguf_get_f32(const struct gguf_file *file, const char *key, float *out, char *err,
                 size_t errlen) {
    const struct gguf_kv *kv = gguf_lookup(file, key, gguf_is_float, "a float", err, errlen);
    if (kv == NULL) return -1;
    double value = kv->value.v.f64;
    if (isfinite(value) && fabs(value) > FLT_MAX) { /* converting it would be undefined */
        snprintf(err, errlen, "%s: metadata key '%s': value %g does not fit in float32", file->path,
                 key, value);
        return -1;
    }
    *out = (float)value;
    return 0;
}

static int gguf_is_string(enum gguf_type type) {
    return type == GGUF_TYPE_STRING;
}

int gguf_get_string(const struct gguf_file *file, const char *key, struct gguf_string *out,
                    char *err, size_t errlen) {
    const struct gguf_kv *kv = gguf_lookup(file, key, gguf_is_string, "a string", err, errlen);
    if (kv == NULL) return -1;
    *out = kv->value.v.str;
    return 0;
}
