/* test_gguf_writer.c -- GGUF writer and reader round trips: every one of the
 * 13 value types as scalars and arrays, string arrays, arrays of arrays
 * (built by hand, read, copied by gguf_writer_set_value and read back),
 * tensors of every type, custom alignment, byte-identical copying of a whole
 * file, and the writer's refusals. */
#include "model/model.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a hand-built image, for what the writer's scalar API cannot express ---- */

struct image {
    unsigned char bytes[4096];
    size_t len;
};

static void put(struct image *im, const void *p, size_t n) {
    if (im->len + n <= sizeof(im->bytes)) memcpy(im->bytes + im->len, p, n);
    im->len += n;
}

static void put_u32(struct image *im, uint32_t v) {
    put(im, &v, 4);
}

static void put_u64(struct image *im, uint64_t v) {
    put(im, &v, 8);
}

static void put_str(struct image *im, const char *s) {
    put_u64(im, strlen(s));
    put(im, s, strlen(s));
}

static void put_header(struct image *im, uint64_t n_kv) {
    put(im, "GGUF", 4);
    put_u32(im, 3);
    put_u64(im, 0);
    put_u64(im, n_kv);
}

/* kv "nested": [[1, 2, 3] (uint32), [] (int8), ["a", "bc"], [[7], [8, 9]] (int64)] */
static void build_nested(struct image *im) {
    put_header(im, 1);
    put_str(im, "nested");
    put_u32(im, GGUF_TYPE_ARRAY);
    put_u32(im, GGUF_TYPE_ARRAY);
    put_u64(im, 4);
    put_u32(im, GGUF_TYPE_UINT32);
    put_u64(im, 3);
    for (uint32_t v = 1; v <= 3; v++) put_u32(im, v);
    put_u32(im, GGUF_TYPE_INT8);
    put_u64(im, 0);
    put_u32(im, GGUF_TYPE_STRING);
    put_u64(im, 2);
    put_str(im, "a");
    put_str(im, "bc");
    put_u32(im, GGUF_TYPE_ARRAY);
    put_u64(im, 2);
    put_u32(im, GGUF_TYPE_INT64);
    put_u64(im, 1);
    put_u64(im, 7);
    put_u32(im, GGUF_TYPE_INT64);
    put_u64(im, 2);
    put_u64(im, 8);
    put_u64(im, 9);
}

/* kv "deep": an array nested depth levels deep around one uint8. */
static void build_deep(struct image *im, int depth) {
    put_header(im, 1);
    put_str(im, "deep");
    put_u32(im, GGUF_TYPE_ARRAY);
    for (int d = 1; d < depth; d++) {
        put_u32(im, GGUF_TYPE_ARRAY);
        put_u64(im, 1);
    }
    put_u32(im, GGUF_TYPE_UINT8);
    put_u64(im, 1);
    put(im, "\x2a", 1);
}

static void check_nested_value(const struct gguf_value *v) {
    CHECK(v->type == GGUF_TYPE_ARRAY && v->v.arr.type == GGUF_TYPE_ARRAY && v->v.arr.n == 4);
    if (v->v.arr.n != 4) return;
    struct gguf_value a = gguf_array_nested(v, 0), b = gguf_array_nested(v, 1);
    struct gguf_value c = gguf_array_nested(v, 2), d = gguf_array_element(v, 3);
    CHECK(a.v.arr.type == GGUF_TYPE_UINT32 && a.v.arr.n == 3);
    CHECK(gguf_array_element(&a, 0).v.u64 == 1 && gguf_array_element(&a, 2).v.u64 == 3);
    CHECK(b.v.arr.type == GGUF_TYPE_INT8 && b.v.arr.n == 0);
    CHECK(c.v.arr.type == GGUF_TYPE_STRING && c.v.arr.n == 2);
    if (c.v.arr.n == 2) {
        CHECK(gguf_string_equals(gguf_array_string(&c, 0), "a"));
        CHECK(gguf_string_equals(gguf_array_string(&c, 1), "bc"));
    }
    CHECK(d.type == GGUF_TYPE_ARRAY && d.v.arr.type == GGUF_TYPE_ARRAY && d.v.arr.n == 2);
    if (d.v.arr.n == 2) {
        struct gguf_value d0 = gguf_array_nested(&d, 0), d1 = gguf_array_nested(&d, 1);
        CHECK(d0.v.arr.type == GGUF_TYPE_INT64 && d0.v.arr.n == 1);
        CHECK(gguf_array_element(&d0, 0).v.i64 == 7);
        CHECK(d1.v.arr.n == 2 && gguf_array_element(&d1, 1).v.i64 == 9);
    }
}

static void test_nested(void) {
    char err[512] = "", path[512];
    struct image im = {0};
    build_nested(&im);
    struct gguf_file *file = NULL;
    CHECK_MSG(gguf_open_memory(&file, im.bytes, im.len, "nested", err, sizeof(err)) == 0, "%s",
              err);
    if (file == NULL) return;
    check_nested_value(&file->kv[0].value);

    /* copy it into a writer, write, read back */
    struct gguf_writer *writer = gguf_writer_create();
    gguf_writer_set_value(writer, "copy", &file->kv[0].value);
    test_tmp_path(path, sizeof(path), "nested.gguf");
    CHECK_MSG(gguf_writer_write(writer, path, err, sizeof(err)) == 0, "%s", err);
    gguf_writer_free(writer);
    gguf_close(file);
    if (gguf_open(&file, path, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s", err);
        return;
    }
    const struct gguf_kv *kv = gguf_find(file, "copy");
    CHECK(kv != NULL);
    if (kv != NULL) check_nested_value(&kv->value);
    gguf_close(file);
    remove(path);

    /* GGUF_MAX depth: 8 levels are read, 9 are refused */
    struct image deep = {0};
    build_deep(&deep, 8);
    CHECK_MSG(gguf_open_memory(&file, deep.bytes, deep.len, "deep8", err, sizeof(err)) == 0, "%s",
              err);
    if (file != NULL) {
        struct gguf_value v = file->kv[0].value;
        for (int d = 1; d < 8; d++) v = gguf_array_nested(&v, 0);
        CHECK(v.v.arr.type == GGUF_TYPE_UINT8 && gguf_array_element(&v, 0).v.u64 == 42);
        gguf_close(file);
    }
    struct image deeper = {0};
    build_deep(&deeper, 9);
    CHECK(gguf_open_memory(&file, deeper.bytes, deeper.len, "deep9", err, sizeof(err)) == -1);
    CHECK(file == NULL);
    CHECK_MSG(strstr(err, "deep9: metadata key 'deep': arrays nested more than 8 deep"), "%s", err);
}

/* ---- scalars and arrays of every type ---- */

static const struct gguf_kv *expect_kv(const struct gguf_file *file, const char *key,
                                       enum gguf_type type) {
    const struct gguf_kv *kv = gguf_find(file, key);
    CHECK_MSG(kv != NULL && kv->value.type == type, "key %s", key);
    return kv != NULL && kv->value.type == type ? kv : NULL;
}

static void test_values(void) {
    char err[512] = "", path[512];
    struct gguf_writer *writer = gguf_writer_create();
    CHECK(writer != NULL);
    gguf_writer_set_u32(writer, "u32", 4000000000u);
    gguf_writer_set_i32(writer, "i32", -2000000000);
    gguf_writer_set_f32(writer, "f32", -0.375f);
    gguf_writer_set_bool(writer, "bool", 5);
    gguf_writer_set_string(writer, "string", "caf\xc3\xa9");
    gguf_writer_set_string(writer, "empty", "");
    const struct gguf_value scalars[] = {
        {.type = GGUF_TYPE_UINT8, .v.u64 = 255},
        {.type = GGUF_TYPE_INT8, .v.i64 = -128},
        {.type = GGUF_TYPE_UINT16, .v.u64 = 65535},
        {.type = GGUF_TYPE_INT16, .v.i64 = -32768},
        {.type = GGUF_TYPE_UINT64, .v.u64 = UINT64_MAX},
        {.type = GGUF_TYPE_INT64, .v.i64 = INT64_MIN},
        {.type = GGUF_TYPE_FLOAT64, .v.f64 = 3.141592653589793},
    };
    const char *scalar_keys[] = {"u8", "i8", "u16", "i16", "u64", "i64", "f64"};
    for (int i = 0; i < 7; i++) gguf_writer_set_value(writer, scalar_keys[i], &scalars[i]);

    const uint8_t u8s[] = {0, 1, 255};
    const int8_t i8s[] = {-128, 0, 127};
    const uint16_t u16s[] = {0, 65535};
    const int16_t i16s[] = {-32768, 32767};
    const uint32_t u32s[] = {0, 4294967295u};
    const int32_t i32s[] = {INT32_MIN, -1, INT32_MAX};
    const float f32s[] = {1.5f, -0.0f, INFINITY};
    const uint8_t bools[] = {0, 1, 1, 0};
    const uint64_t u64s[] = {0, UINT64_MAX};
    const int64_t i64s[] = {INT64_MIN, INT64_MAX};
    const double f64s[] = {1e-300, -2.5};
    gguf_writer_set_array(writer, "a.u8", GGUF_TYPE_UINT8, u8s, 3);
    gguf_writer_set_array(writer, "a.i8", GGUF_TYPE_INT8, i8s, 3);
    gguf_writer_set_array(writer, "a.u16", GGUF_TYPE_UINT16, u16s, 2);
    gguf_writer_set_array(writer, "a.i16", GGUF_TYPE_INT16, i16s, 2);
    gguf_writer_set_array(writer, "a.u32", GGUF_TYPE_UINT32, u32s, 2);
    gguf_writer_set_array(writer, "a.i32", GGUF_TYPE_INT32, i32s, 3);
    gguf_writer_set_array(writer, "a.f32", GGUF_TYPE_FLOAT32, f32s, 3);
    gguf_writer_set_array(writer, "a.bool", GGUF_TYPE_BOOL, bools, 4);
    gguf_writer_set_array(writer, "a.u64", GGUF_TYPE_UINT64, u64s, 2);
    gguf_writer_set_array(writer, "a.i64", GGUF_TYPE_INT64, i64s, 2);
    gguf_writer_set_array(writer, "a.f64", GGUF_TYPE_FLOAT64, f64s, 2);
    gguf_writer_set_array(writer, "a.none", GGUF_TYPE_INT32, NULL, 0);
    const char *strings[] = {"x", "", "a\0b", "\xe2\x96\x81the"};
    const uint64_t lengths[] = {1, 0, 3, 6};
    gguf_writer_set_string_array(writer, "a.string", strings, lengths, 4);
    gguf_writer_set_string_array(writer, "a.cstring", strings, NULL, 2);
    gguf_writer_set_u32(writer, "replaced", 1);
    gguf_writer_set_string(writer, "replaced", "now a string");
    test_tmp_path(path, sizeof(path), "values.gguf");
    CHECK_MSG(gguf_writer_write(writer, path, err, sizeof(err)) == 0, "%s", err);
    gguf_writer_free(writer);

    struct gguf_file *file = NULL;
    if (gguf_open(&file, path, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s", err);
        return;
    }
    CHECK(file->version == 3 && file->n_tensors == 0 && file->n_kv == 6 + 7 + 14 + 1);
    const struct gguf_kv *kv;
    if ((kv = expect_kv(file, "u32", GGUF_TYPE_UINT32))) CHECK(kv->value.v.u64 == 4000000000u);
    if ((kv = expect_kv(file, "i32", GGUF_TYPE_INT32))) CHECK(kv->value.v.i64 == -2000000000);
    if ((kv = expect_kv(file, "f32", GGUF_TYPE_FLOAT32))) CHECK(kv->value.v.f64 == -0.375);
    if ((kv = expect_kv(file, "bool", GGUF_TYPE_BOOL))) CHECK(kv->value.v.u64 == 1);
    if ((kv = expect_kv(file, "string", GGUF_TYPE_STRING)))
        CHECK(gguf_string_equals(kv->value.v.str, "caf\xc3\xa9"));
    if ((kv = expect_kv(file, "empty", GGUF_TYPE_STRING))) CHECK(kv->value.v.str.len == 0);
    if ((kv = expect_kv(file, "replaced", GGUF_TYPE_STRING)))
        CHECK(gguf_string_equals(kv->value.v.str, "now a string"));
    for (int i = 0; i < 7; i++) {
        if (!(kv = expect_kv(file, scalar_keys[i], scalars[i].type))) continue;
        CHECK_MSG(memcmp(&kv->value.v, &scalars[i].v, 8) == 0, "scalar %s", scalar_keys[i]);
    }

    struct {
        const char *key;
        enum gguf_type type;
        const void *values;
        uint64_t n, size;
    } arrays[] = {
        {"a.u8", GGUF_TYPE_UINT8, u8s, 3, 1},     {"a.i8", GGUF_TYPE_INT8, i8s, 3, 1},
        {"a.u16", GGUF_TYPE_UINT16, u16s, 2, 2},  {"a.i16", GGUF_TYPE_INT16, i16s, 2, 2},
        {"a.u32", GGUF_TYPE_UINT32, u32s, 2, 4},  {"a.i32", GGUF_TYPE_INT32, i32s, 3, 4},
        {"a.f32", GGUF_TYPE_FLOAT32, f32s, 3, 4}, {"a.bool", GGUF_TYPE_BOOL, bools, 4, 1},
        {"a.u64", GGUF_TYPE_UINT64, u64s, 2, 8},  {"a.i64", GGUF_TYPE_INT64, i64s, 2, 8},
        {"a.f64", GGUF_TYPE_FLOAT64, f64s, 2, 8}, {"a.none", GGUF_TYPE_INT32, NULL, 0, 4},
    };
    for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++) {
        if (!(kv = expect_kv(file, arrays[i].key, GGUF_TYPE_ARRAY))) continue;
        CHECK_MSG(kv->value.v.arr.type == arrays[i].type && kv->value.v.arr.n == arrays[i].n,
                  "array %s", arrays[i].key);
        CHECK(kv->value.v.arr.offsets == NULL);
        if (arrays[i].n > 0)
            CHECK_MSG(
                memcmp(kv->value.v.arr.data, arrays[i].values, arrays[i].n * arrays[i].size) == 0,
                "array %s", arrays[i].key);
    }
    if ((kv = expect_kv(file, "a.i8", GGUF_TYPE_ARRAY)))
        CHECK(gguf_array_element(&kv->value, 0).v.i64 == -128);
    if ((kv = expect_kv(file, "a.i16", GGUF_TYPE_ARRAY)))
        CHECK(gguf_array_element(&kv->value, 0).v.i64 == -32768);
    if ((kv = expect_kv(file, "a.u16", GGUF_TYPE_ARRAY)))
        CHECK(gguf_array_element(&kv->value, 1).v.u64 == 65535);
    if ((kv = expect_kv(file, "a.f32", GGUF_TYPE_ARRAY)))
        CHECK(isinf(gguf_array_element(&kv->value, 2).v.f64));
    if ((kv = expect_kv(file, "a.f64", GGUF_TYPE_ARRAY)))
        CHECK(gguf_array_element(&kv->value, 1).v.f64 == -2.5);
    if ((kv = expect_kv(file, "a.i64", GGUF_TYPE_ARRAY)))
        CHECK(gguf_array_element(&kv->value, 0).v.i64 == INT64_MIN);
    if ((kv = expect_kv(file, "a.string", GGUF_TYPE_ARRAY))) {
        CHECK(kv->value.v.arr.type == GGUF_TYPE_STRING && kv->value.v.arr.n == 4);
        for (uint64_t i = 0; i < 4 && i < kv->value.v.arr.n; i++) {
            struct gguf_string s = gguf_array_string(&kv->value, i);
            CHECK(s.len == lengths[i] && memcmp(s.data, strings[i], s.len) == 0);
        }
    }
    if ((kv = expect_kv(file, "a.cstring", GGUF_TYPE_ARRAY))) {
        CHECK(kv->value.v.arr.n == 2);
        CHECK(gguf_string_equals(gguf_array_string(&kv->value, 1), ""));
    }
    gguf_close(file);
    remove(path);
}

/* ---- tensors ---- */

static void test_tensors(uint32_t alignment) {
    char err[512] = "", path[512];
    static float f32[3] = {1.0f, -2.0f, 0.5f};
    static uint16_t f16[2 * 5];
    static struct tensor_block_q8_0 q8[2 * 3 * 2];
    static struct tensor_block_q4_0 q4[1 * 2 * 3 * 4];
    for (size_t i = 0; i < sizeof(f16) / 2; i++) f16[i] = tensor_fp32_to_fp16((float)i);
    for (size_t i = 0; i < sizeof(q8); i++) ((unsigned char *)q8)[i] = (unsigned char)(i * 7);
    for (size_t i = 0; i < sizeof(q4); i++) ((unsigned char *)q4)[i] = (unsigned char)(i * 13);
    const uint64_t d1[] = {3}, d2[] = {2, 5}, d3[] = {64, 3, 2}, d4[] = {32, 2, 3, 4};

    struct gguf_writer *writer = gguf_writer_create();
    if (alignment != 32) gguf_writer_set_u32(writer, "general.alignment", alignment);
    gguf_writer_set_string(writer, "general.architecture", "llama");
    gguf_writer_add_tensor(writer, "f32", TENSOR_F32, 1, d1, f32, sizeof(f32));
    gguf_writer_add_tensor(writer, "f16", TENSOR_F16, 2, d2, f16, sizeof(f16));
    gguf_writer_add_tensor(writer, "q8_0", TENSOR_Q8_0, 3, d3, q8, sizeof(q8));
    gguf_writer_add_tensor(writer, "q4_0", TENSOR_Q4_0, 4, d4, q4, sizeof(q4));
    test_tmp_path(path, sizeof(path), "tensors.gguf");
    CHECK_MSG(gguf_writer_write(writer, path, err, sizeof(err)) == 0, "%s", err);
    gguf_writer_free(writer);

    struct gguf_file *file = NULL;
    if (gguf_open(&file, path, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s", err);
        return;
    }
    CHECK(file->alignment == alignment && file->data_offset % alignment == 0);
    CHECK(file->n_tensors == 4);
    const struct {
        const char *name;
        enum tensor_type type;
        int n_dims;
        const uint64_t *dims;
        const void *data;
        size_t size;
        uint64_t n_elements;
    } want[] = {
        {"f32", TENSOR_F32, 1, d1, f32, sizeof(f32), 3},
        {"f16", TENSOR_F16, 2, d2, f16, sizeof(f16), 10},
        {"q8_0", TENSOR_Q8_0, 3, d3, q8, sizeof(q8), 384},
        {"q4_0", TENSOR_Q4_0, 4, d4, q4, sizeof(q4), 768},
    };
    const unsigned char *end = file->base;
    for (int i = 0; i < 4; i++) {
        const struct gguf_tensor *t = gguf_find_tensor(file, want[i].name);
        CHECK_MSG(t == &file->tensors[i], "tensor %s", want[i].name);
        if (t == NULL) continue;
        CHECK(t->type == want[i].type && t->n_dims == want[i].n_dims);
        for (int d = 0; d < 4; d++) CHECK(t->dims[d] == (d < want[i].n_dims ? want[i].dims[d] : 1));
        CHECK(t->n_elements == want[i].n_elements && t->size == want[i].size);
        CHECK(t->offset % alignment == 0 && (uintptr_t)t->data % alignment == 0);
        CHECK(memcmp(t->data, want[i].data, want[i].size) == 0);
        CHECK((const unsigned char *)t->data >= end); /* in order, no overlap */
        end = (const unsigned char *)t->data + t->size;
    }
    /* no padding after the last tensor */
    CHECK(end == file->base + file->size);
    gguf_close(file);
    remove(path);
}

/* A file read and written again through the writer comes out byte for byte. */
static void test_copy_is_identical(void) {
    char err[512] = "", src[512], dst[512];
    char shared[512];
    test_shared_path(shared, sizeof(shared), "models/kjv2m-q4_0.gguf");
    int have_model = access(shared, R_OK) == 0;
    if (!have_model) test_tmp_path(src, sizeof(src), "copy-src.gguf");
    const char *source = have_model ? shared : src;
    if (!have_model) {
        struct image im = {0};
        build_nested(&im);
        FILE *f = fopen(src, "wb");
        CHECK(f != NULL && fwrite(im.bytes, 1, im.len, f) == im.len);
        if (f) fclose(f);
    }
    struct gguf_file *in = NULL;
    if (gguf_open(&in, source, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s", err);
        return;
    }
    struct gguf_writer *writer = gguf_writer_create();
    for (uint64_t i = 0; i < in->n_kv; i++) {
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)in->kv[i].key.len, in->kv[i].key.data);
        gguf_writer_set_value(writer, key, &in->kv[i].value);
    }
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const struct gguf_tensor *t = &in->tensors[i];
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.data);
        gguf_writer_add_tensor(writer, name, t->type, t->n_dims, t->dims, t->data, t->size);
    }
    test_tmp_path(dst, sizeof(dst), "copy-dst.gguf");
    CHECK_MSG(gguf_writer_write(writer, dst, err, sizeof(err)) == 0, "%s", err);
    gguf_writer_free(writer);
    struct gguf_file *out = NULL;
    CHECK_MSG(gguf_open(&out, dst, err, sizeof(err)) == 0, "%s", err);
    if (out != NULL) {
        /* llama.cpp pads after the last tensor too; the rest is identical */
        CHECK(out->size <= in->size && in->size - out->size < 32);
        CHECK(memcmp(out->base, in->base, out->size) == 0);
        gguf_close(out);
    }
    gguf_close(in);
    remove(dst);
    if (!have_model) remove(src);
}

/* ---- refusals ---- */

/* Runs one writer misuse and checks the write fails naming what was wrong. */
static void expect_write_error(struct gguf_writer *writer, const char *expected) {
    char err[512] = "", path[512];
    test_tmp_path(path, sizeof(path), "refused.gguf");
    CHECK(gguf_writer_write(writer, path, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, path) != NULL && strstr(err, expected) != NULL, "'%s' lacks '%s'", err,
              expected);
    CHECK(access(path, F_OK) != 0);
    gguf_writer_free(writer);
}

static void test_refusals(void) {
    static float data[64];
    const uint64_t dims[] = {32, 2}, odd[] = {16, 2}, zero[] = {32, 0};
    struct gguf_writer *w;

    w = gguf_writer_create();
    gguf_writer_add_tensor(w, "short", TENSOR_F32, 2, dims, data, 100);
    expect_write_error(w, "tensor 'short': 100 bytes of data, its shape needs 256");
    w = gguf_writer_create();
    /* id 4 (Q4_2) is one ggml dropped */
    gguf_writer_add_tensor(w, "q4_2", (enum tensor_type)4, 2, dims, data, 256);
    expect_write_error(w, "tensor 'q4_2': type 4 is not supported");
    w = gguf_writer_create();
    gguf_writer_add_tensor(w, "flat", TENSOR_F32, 0, dims, data, 256);
    expect_write_error(w, "tensor 'flat': n_dims 0 is not in 1..4");
    w = gguf_writer_create();
    gguf_writer_add_tensor(w, "wide", TENSOR_F32, 5, dims, data, 256);
    expect_write_error(w, "tensor 'wide': n_dims 5");
    w = gguf_writer_create();
    gguf_writer_add_tensor(w, "empty", TENSOR_F32, 2, zero, data, 0);
    expect_write_error(w, "tensor 'empty': dimension 1 (0) is 0 or too large");
    w = gguf_writer_create();
    gguf_writer_add_tensor(w, "ragged", TENSOR_Q8_0, 2, odd, data, 34);
    expect_write_error(w, "tensor 'ragged': row length 16 is not a multiple of 32");
    w = gguf_writer_create();
    gguf_writer_add_tensor(w, "twice", TENSOR_F32, 2, dims, data, 256);
    gguf_writer_add_tensor(w, "twice", TENSOR_F32, 2, dims, data, 256);
    expect_write_error(w, "tensor 'twice' added twice");
    w = gguf_writer_create();
    gguf_writer_set_array(w, "strings", GGUF_TYPE_STRING, data, 1);
    gguf_writer_set_u32(w, NULL, 1); /* a later failure does not replace the first */
    expect_write_error(w, "metadata key 'strings': element type 8 is not a scalar type");
    w = gguf_writer_create();
    gguf_writer_set_u32(w, NULL, 1);
    expect_write_error(w, "metadata key is NULL");
    w = gguf_writer_create();
    gguf_writer_set_string(w, "name", NULL);
    expect_write_error(w, "metadata key 'name': string value is NULL");
    w = gguf_writer_create();
    const char *strings[] = {"a", NULL};
    gguf_writer_set_string_array(w, "list", strings, NULL, 2);
    expect_write_error(w, "metadata key 'list': string 1 is NULL");
    w = gguf_writer_create();
    struct gguf_value bad = {.type = (enum gguf_type)13};
    gguf_writer_set_value(w, "bad", &bad);
    expect_write_error(w, "metadata key 'bad': value type 13 is not a GGUF value type");
    w = gguf_writer_create();
    struct gguf_value huge = {.type = GGUF_TYPE_FLOAT32, .v.f64 = 1e39};
    gguf_writer_set_value(w, "huge", &huge);
    expect_write_error(w, "metadata key 'huge': value 1e+39 does not fit in float32");
    w = gguf_writer_create();
    gguf_writer_set_u32(w, "general.alignment", 3);
    expect_write_error(w, "'general.alignment' must be a uint32 power of two");
    w = gguf_writer_create();
    gguf_writer_set_string(w, "general.alignment", "32");
    expect_write_error(w, "'general.alignment' must be a uint32 power of two");

    w = gguf_writer_create(); /* a buffer that cannot grow that far fails cleanly */
    gguf_writer_set_array(w, "huge", GGUF_TYPE_UINT8, data, UINT64_MAX);
    expect_write_error(w, "metadata key 'huge': out of memory");

    char err[512] = "";
    w = gguf_writer_create();
    CHECK(gguf_writer_write(w, "/nonexistent-dir/x.gguf", err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "/nonexistent-dir/x.gguf: cannot create: "), "%s", err);
    gguf_writer_free(w);

    /* a NULL writer (creation failed) is tolerated and reported at write */
    gguf_writer_set_u32(NULL, "k", 1);
    gguf_writer_add_tensor(NULL, "t", TENSOR_F32, 2, dims, data, 256);
    CHECK(gguf_writer_write(NULL, "x.gguf", err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "x.gguf: out of memory"), "%s", err);
    gguf_writer_free(NULL);
}

/* An empty file is a 24-byte header; as version 2 it reads the same. */
static void test_empty_and_v2(void) {
    char err[512] = "", path[512];
    struct gguf_writer *w = gguf_writer_create();
    test_tmp_path(path, sizeof(path), "empty.gguf");
    CHECK_MSG(gguf_writer_write(w, path, err, sizeof(err)) == 0, "%s", err);
    gguf_writer_free(w);
    struct gguf_file *file = NULL;
    CHECK_MSG(gguf_open(&file, path, err, sizeof(err)) == 0, "%s", err);
    if (file != NULL) {
        CHECK(file->size == 24 && file->n_kv == 0 && file->n_tensors == 0);
        CHECK(gguf_find(file, "general.architecture") == NULL);
        gguf_close(file);
    }
    remove(path);

    struct image im = {0};
    build_nested(&im);
    im.bytes[4] = 2;
    CHECK_MSG(gguf_open_memory(&file, im.bytes, im.len, "v2", err, sizeof(err)) == 0, "%s", err);
    if (file != NULL) {
        CHECK(file->version == 2 && file->owns_mapping == 0);
        check_nested_value(&file->kv[0].value);
        gguf_close(file);
    }
}

int main(void) {
    test_nested();
    test_values();
    test_tensors(32);
    test_tensors(64);
    test_tensors(4096);
    test_copy_is_identical();
    test_refusals();
    test_empty_and_v2();
    return test_status("test_gguf_writer");
}
