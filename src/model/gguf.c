/* gguf.c -- GGUF v2/v3 reader: maps a file read-only (or takes a caller's
 * buffer), parses its header, metadata and tensor infos, and checks every
 * count, length, type, shape and offset against the file size before using
 * it. Tensor data stays in the mapping; struct gguf_tensor points at it.
 *
 * Layout (little-endian): "GGUF", uint32 version, uint64 tensor count,
 * uint64 kv count; the kvs (string key, uint32 value type, value); the tensor
 * infos (string name, uint32 n_dims, uint64 dims[n_dims], uint32 type,
 * uint64 offset); padding to general.alignment; the data section, where each
 * tensor's offset is a multiple of the alignment. A string is a uint64 length
 * and that many bytes. Values are parsed in gguf_value.c. */
#include "model/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The parsed file plus what only the reader needs. The public part comes
 * first, so the struct gguf_file * handed out is also the start of this. */
struct gguf_file_impl {
    struct gguf_file file;
    struct gguf_arena_chunk *arena;       /* offset tables of string and nested arrays */
    const struct gguf_kv **kv_by_key;     /* (n_kv) sorted by key, for lookup */
    const struct gguf_tensor **by_name;   /* (n_tensors) sorted by name, for lookup */
    const struct gguf_tensor **by_offset; /* (n_tensors) sorted by data offset */
};

static int gguf_string_compare(struct gguf_string a, struct gguf_string b) {
    size_t n = a.len < b.len ? (size_t)a.len : (size_t)b.len;
    int c = n > 0 ? memcmp(a.data, b.data, n) : 0;
    if (c != 0) return c;
    return (a.len > b.len) - (a.len < b.len);
}

static int gguf_compare_kv(const void *a, const void *b) {
    const struct gguf_kv *x = *(const struct gguf_kv *const *)a;
    const struct gguf_kv *y = *(const struct gguf_kv *const *)b;
    return gguf_string_compare(x->key, y->key);
}

static int gguf_compare_name(const void *a, const void *b) {
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    return gguf_string_compare(x->name, y->name);
}

static int gguf_compare_offset(const void *a, const void *b) {
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Sets the context of messages to "<what> '<name>'". */
static void gguf_set_context(struct gguf_reader *reader, const char *what,
                             struct gguf_string name) {
    char printable[96];
    snprintf(reader->context, sizeof(reader->context), "%s '%s'", what,
             gguf_printable(printable, sizeof(printable), name));
}

/* ---- header and metadata ---- */

static int gguf_parse_header(struct gguf_file *file, struct gguf_reader *reader) {
    uint32_t magic;
    snprintf(reader->context, sizeof(reader->context), "header");
    if (gguf_read_u32(reader, &magic, "magic")) return -1;
    if (magic != GGUF_MAGIC)
        return gguf_fail(reader, "bad magic 0x%08" PRIx32 " (a GGUF file starts with \"GGUF\")",
                         magic);
    if (gguf_read_u32(reader, &file->version, "version")) return -1;
    if (file->version == 1)
        return gguf_fail(reader, "GGUF version 1 is not supported (only versions 2 and 3)");
    if (file->version == 0x02000000u || file->version == 0x03000000u)
        return gguf_fail(reader, "version 0x%08" PRIx32 ": big-endian GGUF is not supported",
                         file->version);
    if (file->version != 2 && file->version != 3)
        return gguf_fail(reader, "unsupported GGUF version %" PRIu32 " (only 2 and 3)",
                         file->version);
    if (gguf_read_u64(reader, &file->n_tensors, "tensor count")) return -1;
    if (gguf_read_u64(reader, &file->n_kv, "metadata kv count")) return -1;
    size_t remaining = reader->size - reader->pos;
    if (file->n_kv > remaining / GGUF_MIN_KV_BYTES)
        return gguf_fail(reader,
                         "metadata kv count %" PRIu64 " cannot fit in the file (size %zu; a kv "
                         "takes at least %d bytes)",
                         file->n_kv, reader->size, GGUF_MIN_KV_BYTES);
    remaining -= (size_t)file->n_kv * GGUF_MIN_KV_BYTES;
    if (file->n_tensors > remaining / GGUF_MIN_TENSOR_INFO_BYTES)
        return gguf_fail(reader,
                         "tensor count %" PRIu64 " cannot fit in the file (size %zu; a tensor "
                         "info takes at least %d bytes)",
                         file->n_tensors, reader->size, GGUF_MIN_TENSOR_INFO_BYTES);
    return 0;
}

static int gguf_parse_kvs(struct gguf_file_impl *impl, struct gguf_reader *reader) {
    struct gguf_file *file = &impl->file;
    size_t n = (size_t)file->n_kv;
    file->kv = calloc(n > 0 ? n : 1, sizeof(*file->kv));
    impl->kv_by_key = calloc(n > 0 ? n : 1, sizeof(const struct gguf_kv *));
    if (file->kv == NULL || impl->kv_by_key == NULL)
        return gguf_fail(reader, "out of memory for %zu metadata kvs", n);
    for (size_t i = 0; i < n; i++) {
        struct gguf_kv *kv = &file->kv[i];
        uint32_t type;
        snprintf(reader->context, sizeof(reader->context), "metadata kv %zu", i);
        if (gguf_read_string(reader, &kv->key, "key")) return -1;
        gguf_set_context(reader, "metadata key", kv->key);
        if (gguf_read_u32(reader, &type, "value type")) return -1;
        if (type >= GGUF_TYPE_COUNT)
            return gguf_fail(reader, "value type %" PRIu32 " is not a GGUF value type", type);
        if (gguf_read_value(reader, (enum gguf_type)type, &kv->value)) return -1;
        impl->kv_by_key[i] = kv;
    }
    qsort(impl->kv_by_key, n, sizeof(const struct gguf_kv *), gguf_compare_kv);
    for (size_t i = 1; i < n; i++) {
        if (gguf_string_compare(impl->kv_by_key[i - 1]->key, impl->kv_by_key[i]->key) == 0) {
            gguf_set_context(reader, "metadata key", impl->kv_by_key[i]->key);
            return gguf_fail(reader, "key appears more than once");
        }
    }
    return 0;
}

/* general.alignment, if present, must be a nonzero power of two. */
static int gguf_parse_alignment(struct gguf_file *file, struct gguf_reader *reader) {
    file->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *kv = gguf_find(file, "general.alignment");
    if (kv == NULL) return 0;
    snprintf(reader->context, sizeof(reader->context), "metadata key 'general.alignment'");
    enum gguf_type type = kv->value.type;
    if (type == GGUF_TYPE_INT8 || type == GGUF_TYPE_INT16 || type == GGUF_TYPE_INT32 ||
        type == GGUF_TYPE_INT64) {
        if (kv->value.v.i64 <= 0)
            return gguf_fail(reader, "value %" PRId64 " is not a power of two", kv->value.v.i64);
    } else if (type > GGUF_TYPE_UINT32 && type != GGUF_TYPE_UINT64) {
        return gguf_fail(reader, "has type %s, expected uint32", gguf_value_type_name((int)type));
    }
    uint64_t alignment = kv->value.v.u64;
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        return gguf_fail(reader, "value %" PRIu64 " is not a power of two", alignment);
    file->alignment = alignment;
    return 0;
}

/* ---- tensor infos ---- */

/* " (name)" of the ggml types that real files often hold but lockstep does
 * not read, so the message says what the file is; "" for other ids. */
static const char *gguf_ggml_type_hint(uint32_t type) {
    static const char *const hints[] = {
        [9] = " (q8_1)",     [15] = " (q8_K)",  [16] = " (iq2_xxs)", [17] = " (iq2_xs)",
        [18] = " (iq3_xxs)", [19] = " (iq1_s)", [21] = " (iq3_s)",   [22] = " (iq2_s)",
        [24] = " (i8)",      [25] = " (i16)",   [26] = " (i32)",     [27] = " (i64)",
        [28] = " (f64)",     [29] = " (iq1_m)", [34] = " (tq1_0)",   [35] = " (tq2_0)",
        [39] = " (mxfp4)",
    };
    if (type >= sizeof(hints) / sizeof(hints[0]) || hints[type] == NULL) return "";
    return hints[type];
}

/* "f32, f16, q4_0, ...": the types lockstep reads, into buf. */
static const char *gguf_supported_types(char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int type = 0; type < TENSOR_TYPE_COUNT && used < size; type++)
        if (tensor_type_is_valid(type))
            used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "",
                                     tensor_type_name(type));
    return buf;
}

/* Checks a tensor's type and shape and works out its element count and size. */
static int gguf_check_shape(struct gguf_tensor *tensor, uint32_t type, struct gguf_reader *reader) {
    uint64_t n = 1;
    for (int d = 0; d < tensor->n_dims; d++) {
        uint64_t dim = tensor->dims[d];
        if (dim == 0) return gguf_fail(reader, "dimension %d is 0", d);
        if (dim > (uint64_t)INT64_MAX / n)
            return gguf_fail(reader,
                             "element count overflows at dimension %d (dims %" PRIu64 " x %" PRIu64
                             " x %" PRIu64 " x %" PRIu64 ")",
                             d, tensor->dims[0], tensor->dims[1], tensor->dims[2], tensor->dims[3]);
        n *= dim;
    }
    char supported[256];
    if (!tensor_type_is_valid((int)type))
        return gguf_fail(reader, "tensor type %" PRIu32 "%s is not supported (lockstep reads %s)",
                         type, gguf_ggml_type_hint(type),
                         gguf_supported_types(supported, sizeof(supported)));
    tensor->type = (enum tensor_type)type;
    tensor->n_elements = n;
    uint64_t block = (uint64_t)tensor_type_block_elements(tensor->type);
    uint64_t block_bytes = tensor_type_block_bytes(tensor->type);
    if (tensor->dims[0] % block != 0)
        return gguf_fail(reader,
                         "row length %" PRIu64 " is not a multiple of the %s block size %" PRIu64,
                         tensor->dims[0], tensor_type_name(tensor->type), block);
    uint64_t blocks = n / block;
    if (blocks > reader->size / block_bytes)
        return gguf_fail(reader, "%" PRIu64 " elements of %s cannot fit in the file (size %zu)", n,
                         tensor_type_name(tensor->type), reader->size);
    tensor->size = (size_t)(blocks * block_bytes);
    return 0;
}

static int gguf_parse_tensor_info(struct gguf_tensor *tensor, size_t index,
                                  struct gguf_reader *reader) {
    uint32_t n_dims, type;
    snprintf(reader->context, sizeof(reader->context), "tensor %zu", index);
    if (gguf_read_string(reader, &tensor->name, "name")) return -1;
    gguf_set_context(reader, "tensor", tensor->name);
    if (gguf_read_u32(reader, &n_dims, "n_dims")) return -1;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return gguf_fail(reader, "n_dims %" PRIu32 " is not in 1..%d", n_dims, GGUF_MAX_DIMS);
    tensor->n_dims = (int)n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) tensor->dims[d] = 1;
    for (int d = 0; d < tensor->n_dims; d++)
        if (gguf_read_u64(reader, &tensor->dims[d], "dimension")) return -1;
    if (gguf_read_u32(reader, &type, "type")) return -1;
    if (gguf_read_u64(reader, &tensor->offset, "data offset")) return -1;
    return gguf_check_shape(tensor, type, reader);
}

/* Places a tensor's data in the data section: aligned and inside the file. */
static int gguf_place_tensor(struct gguf_file *file, struct gguf_tensor *tensor,
                             struct gguf_reader *reader) {
    gguf_set_context(reader, "tensor", tensor->name);
    if (tensor->offset % file->alignment != 0)
        return gguf_fail(reader,
                         "data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                         tensor->offset, file->alignment);
    uint64_t room = file->data_offset <= file->size ? file->size - file->data_offset : 0;
    if (tensor->offset > room || tensor->size > room - tensor->offset) {
        if (tensor->offset > UINT64_MAX - file->data_offset)
            return gguf_fail(reader,
                             "data [data section offset %" PRIu64 ", %zu bytes] extends past end "
                             "of file (size %zu)",
                             tensor->offset, tensor->size, file->size);
        return gguf_fail(reader,
                         "data [offset %" PRIu64 ", %zu bytes] extends past end of file (size %zu)",
                         file->data_offset + tensor->offset, tensor->size, file->size);
    }
    tensor->data = file->base + file->data_offset + tensor->offset;
    return 0;
}

static int gguf_parse_tensors(struct gguf_file_impl *impl, struct gguf_reader *reader) {
    struct gguf_file *file = &impl->file;
    size_t n = (size_t)file->n_tensors;
    file->tensors = calloc(n > 0 ? n : 1, sizeof(*file->tensors));
    impl->by_name = calloc(n > 0 ? n : 1, sizeof(const struct gguf_tensor *));
    impl->by_offset = calloc(n > 0 ? n : 1, sizeof(const struct gguf_tensor *));
    if (file->tensors == NULL || impl->by_name == NULL || impl->by_offset == NULL)
        return gguf_fail(reader, "out of memory for %zu tensors", n);
    for (size_t i = 0; i < n; i++) {
        if (gguf_parse_tensor_info(&file->tensors[i], i, reader)) return -1;
        impl->by_name[i] = impl->by_offset[i] = &file->tensors[i];
    }
    /* The data section starts at the first aligned offset after the infos. */
    uint64_t misalignment = reader->pos % file->alignment;
    file->data_offset = reader->pos + (misalignment ? file->alignment - misalignment : 0);
    for (size_t i = 0; i < n; i++)
        if (gguf_place_tensor(file, &file->tensors[i], reader)) return -1;

    qsort(impl->by_name, n, sizeof(const struct gguf_tensor *), gguf_compare_name);
    for (size_t i = 1; i < n; i++) {
        if (gguf_string_compare(impl->by_name[i - 1]->name, impl->by_name[i]->name) == 0) {
            gguf_set_context(reader, "tensor", impl->by_name[i]->name);
            return gguf_fail(reader, "name appears more than once");
        }
    }
    qsort(impl->by_offset, n, sizeof(const struct gguf_tensor *), gguf_compare_offset);
    for (size_t i = 1; i < n; i++) {
        const struct gguf_tensor *a = impl->by_offset[i - 1], *b = impl->by_offset[i];
        if (b->offset - a->offset < a->size) {
            char name[96];
            gguf_set_context(reader, "tensor", b->name);
            return gguf_fail(reader,
                             "data [data section offset %" PRIu64 "] overlaps tensor '%s' [data "
                             "section offset %" PRIu64 ", %zu bytes]",
                             b->offset, gguf_printable(name, sizeof(name), a->name), a->offset,
                             a->size);
        }
    }
    return 0;
}

/* ---- open and close ---- */

static int gguf_parse_image(struct gguf_file **out, const void *data, size_t size, const char *name,
                            char *err, size_t errlen) {
    *out = NULL;
    struct gguf_file_impl *impl = calloc(1, sizeof(*impl));
    char *path = strdup(name);
    if (impl == NULL || path == NULL) {
        snprintf(err, errlen, "%s: out of memory", name);
        free(impl);
        free(path);
        return -1;
    }
    struct gguf_file *file = &impl->file;
    file->path = path;
    file->base = data;
    file->size = size;
    struct gguf_reader reader = {
        .base = data,
        .size = size,
        .name = path,
        .err = err,
        .errlen = errlen,
        .arena = &impl->arena,
    };
    if (gguf_parse_header(file, &reader) || gguf_parse_kvs(impl, &reader) ||
        gguf_parse_alignment(file, &reader) || gguf_parse_tensors(impl, &reader)) {
        gguf_close(file);
        return -1;
    }
    *out = file;
    return 0;
}

int gguf_open_memory(struct gguf_file **out, const void *data, size_t size, const char *name,
                     char *err, size_t errlen) {
    return gguf_parse_image(out, size > 0 ? data : NULL, size, name ? name : "<memory>", err,
                            errlen);
}

int gguf_open(struct gguf_file **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    void *mapping = NULL;
    if (size > 0) {
        mapping = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (mapping == MAP_FAILED) {
            snprintf(err, errlen, "%s: cannot map %zu bytes: %s", path, size, strerror(errno));
            close(fd);
            return -1;
        }
    }
    close(fd);
    if (gguf_parse_image(out, mapping, size, path, err, errlen)) {
        if (mapping != NULL) munmap(mapping, size);
        return -1;
    }
    (*out)->owns_mapping = mapping != NULL;
    return 0;
}

void gguf_close(struct gguf_file *file) {
    if (file == NULL) return;
    struct gguf_file_impl *impl = (struct gguf_file_impl *)file;
    if (file->owns_mapping) munmap((void *)file->base, file->size);
    gguf_arena_free(impl->arena);
    free(impl->kv_by_key);
    free(impl->by_name);
    free(impl->by_offset);
    free(file->kv);
    free(file->tensors);
    free(file->path);
    free(impl);
}

/* ---- lookup ---- */

const struct gguf_kv *gguf_find(const struct gguf_file *file, const char *key) {
    const struct gguf_file_impl *impl = (const struct gguf_file_impl *)file;
    struct gguf_string wanted = {key, strlen(key)};
    size_t lo = 0, hi = (size_t)file->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = gguf_string_compare(impl->kv_by_key[mid]->key, wanted);
        if (c == 0) return impl->kv_by_key[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *file, const char *name) {
    const struct gguf_file_impl *impl = (const struct gguf_file_impl *)file;
    struct gguf_string wanted = {name, strlen(name)};
    size_t lo = 0, hi = (size_t)file->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = gguf_string_compare(impl->by_name[mid]->name, wanted);
        if (c == 0) return impl->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
