/* test_gguf_malformed.c -- the GGUF reader refuses bad files with a one-line
 * message naming the file, the field and the bad value, and never reads out
 * of bounds (run it under ASan/UBSan). Bad files are made from one good image
 * written by the writer: truncated at every byte, every byte overwritten,
 * and targeted patches of each field (magic, version, counts, lengths, value
 * types, alignment, tensor types, shapes and offsets). */
#include "model/model.h"
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static unsigned char *good;    /* the good image */
static size_t good_size;       /* its bytes */
static unsigned char *patched; /* a copy to patch (good_size bytes) */

/* Writes the good image: metadata of several types and three tensors, the
 * last one ending the file. */
static int make_good(void) {
    char path[512], err[512] = "";
    static float a[8], c[8];
    static struct tensor_block_q8_0 b[1];
    const uint64_t da[] = {8}, db[] = {32, 1}, dc[] = {8, 1};
    const int16_t nums[] = {-1, 2, 3};
    const char *list[] = {"ab", "c"};
    struct gguf_writer *w = gguf_writer_create();
    gguf_writer_set_string(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "general.alignment", 32);
    gguf_writer_set_u32(w, "dup.a", 1);
    gguf_writer_set_u32(w, "dup.b", 2);
    gguf_writer_set_string_array(w, "list", list, NULL, 2);
    gguf_writer_set_array(w, "nums", GGUF_TYPE_INT16, nums, 3);
    gguf_writer_add_tensor(w, "t.a", TENSOR_F32, 1, da, a, sizeof(a));
    gguf_writer_add_tensor(w, "t.b", TENSOR_Q8_0, 2, db, b, sizeof(b));
    gguf_writer_add_tensor(w, "t.c", TENSOR_F32, 2, dc, c, sizeof(c));
    test_tmp_path(path, sizeof(path), "good.gguf");
    int rc = gguf_writer_write(w, path, err, sizeof(err));
    gguf_writer_free(w);
    CHECK_MSG(rc == 0, "%s", err);
    FILE *f = fopen(path, "rb");
    if (rc != 0 || f == NULL) return -1;
    good = malloc(4096);
    good_size = good ? fread(good, 1, 4096, f) : 0;
    fclose(f);
    remove(path);
    if (good_size == 0) return -1;
    patched = malloc(good_size);
    return patched != NULL ? 0 : -1;
}

/* Offset of the first byte after the string s in the good image. */
static size_t after(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= good_size; i++)
        if (memcmp(good + i, s, n) == 0) return i + n;
    CHECK_MSG(0, "'%s' not in the image", s);
    return 0;
}

static void reset(void) {
    memcpy(patched, good, good_size);
}

static void set_u32(size_t offset, uint32_t v) {
    memcpy(patched + offset, &v, 4);
}

static void set_u64(size_t offset, uint64_t v) {
    memcpy(patched + offset, &v, 8);
}

static uint64_t get_u64(size_t offset) {
    uint64_t v;
    memcpy(&v, good + offset, 8);
    return v;
}

/* Every element of every value, and every tensor's bytes, can be touched. */
static unsigned walk_value(const struct gguf_value *v, int depth) {
    unsigned sum = (unsigned)v->type;
    if (v->type == GGUF_TYPE_STRING && v->v.str.len > 0)
        sum += (unsigned char)v->v.str.data[v->v.str.len - 1];
    if (v->type != GGUF_TYPE_ARRAY || depth > 16) return sum;
    for (uint64_t i = 0; i < v->v.arr.n; i++) {
        struct gguf_value e = gguf_array_element(v, i);
        sum += walk_value(&e, depth + 1);
    }
    return sum;
}

static unsigned walk(const struct gguf_file *file) {
    unsigned sum = 0;
    for (uint64_t i = 0; i < file->n_kv; i++) sum += walk_value(&file->kv[i].value, 0);
    for (uint64_t i = 0; i < file->n_tensors; i++) {
        const unsigned char *p = file->tensors[i].data;
        sum += p[0] + p[file->tensors[i].size - 1];
    }
    return sum;
}

/* The patched image (size bytes) is refused with a message containing expected. */
static void expect_refused(size_t size, const char *expected) {
    char err[512] = "";
    static struct gguf_file sentinel;
    struct gguf_file *file = &sentinel;                /* must be reset to NULL */
    unsigned char *copy = malloc(size > 0 ? size : 1); /* exact size, so ASan sees overreads */
    if (copy == NULL) return;
    memcpy(copy, patched, size);
    int rc = gguf_open_memory(&file, copy, size, "bad.gguf", err, sizeof(err));
    CHECK_MSG(rc == -1 && file == NULL, "accepted; expected '%s'", expected);
    CHECK_MSG(strncmp(err, "bad.gguf: ", 10) == 0 && strchr(err, '\n') == NULL, "%s", err);
    CHECK_MSG(strstr(err, expected) != NULL, "'%s' lacks '%s'", err, expected);
    if (rc == 0) gguf_close(file);
    free(copy);
}

static void test_truncation(void) {
    char err[512];
    int accepted = 0, unclear = 0;
    for (size_t len = 0; len < good_size; len++) {
        unsigned char *copy = malloc(len > 0 ? len : 1);
        if (copy == NULL) return;
        memcpy(copy, good, len);
        struct gguf_file *file = NULL;
        err[0] = '\0';
        if (gguf_open_memory(&file, copy, len, "cut.gguf", err, sizeof(err)) == 0) {
            if (accepted++ == 0) fprintf(stderr, "truncated at %zu: accepted\n", len);
            gguf_close(file);
        } else if (strncmp(err, "cut.gguf: ", 10) != 0 ||
                   (!strstr(err, "extends past end of file") && !strstr(err, "cannot fit"))) {
            if (unclear++ == 0) fprintf(stderr, "truncated at %zu: '%s'\n", len, err);
        }
        free(copy);
    }
    CHECK(accepted == 0);
    CHECK(unclear == 0);
    reset();
    expect_refused(0, "bad.gguf: header: magic [offset 0, 4 bytes] extends past end of file "
                      "(size 0)");
    expect_refused(20, "header: metadata kv count [offset 16, 8 bytes] extends past end of file "
                       "(size 20)");
    expect_refused(good_size - 1, "tensor 't.c': data [offset");
}

/* Overwrites every byte with a few values: the reader must accept or refuse,
 * never crash; what it accepts can be walked completely. */
static void test_every_byte(void) {
    static const unsigned char values[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    char err[512];
    int refused = 0, silent = 0;
    for (size_t i = 0; i < good_size; i++) {
        for (size_t v = 0; v < sizeof(values); v++) {
            unsigned char *copy = malloc(good_size);
            if (copy == NULL) return;
            memcpy(copy, good, good_size);
            copy[i] = values[v];
            struct gguf_file *file = NULL;
            err[0] = '\0';
            if (gguf_open_memory(&file, copy, good_size, "flip.gguf", err, sizeof(err)) == 0) {
                CHECK(walk(file) > 0);
                gguf_close(file);
            } else {
                refused++;
                if (strncmp(err, "flip.gguf: ", 11) != 0 || strlen(err) < 20) silent++;
            }
            free(copy);
        }
    }
    CHECK(refused > 0);
    CHECK_MSG(silent == 0, "%d refusals without a proper message", silent);
}

static void test_header(void) {
    reset();
    patched[0] = 'F';
    expect_refused(good_size, "bad.gguf: header: bad magic 0x46554746");
    reset();
    set_u32(4, 1);
    expect_refused(good_size, "header: GGUF version 1 is not supported (only versions 2 and 3)");
    reset();
    set_u32(4, 4);
    expect_refused(good_size, "header: unsupported GGUF version 4");
    reset();
    set_u32(4, 0x03000000u);
    expect_refused(good_size, "big-endian GGUF is not supported");
    reset();
    set_u64(16, 1ull << 40);
    expect_refused(good_size, "header: metadata kv count 1099511627776 cannot fit in the file");
    reset();
    set_u64(16, UINT64_MAX);
    expect_refused(good_size, "metadata kv count 18446744073709551615 cannot fit");
    reset();
    set_u64(8, UINT64_MAX);
    expect_refused(good_size, "header: tensor count 18446744073709551615 cannot fit in the file");
    reset();
    set_u64(8, 1ull << 62);
    expect_refused(good_size, "tensor count 4611686018427387904 cannot fit");
}

static void test_metadata(void) {
    char expected[256];
    reset();
    set_u64(24, UINT64_MAX);
    snprintf(expected, sizeof(expected),
             "bad.gguf: metadata kv 0: key [offset 32, 18446744073709551615 bytes] extends past "
             "end of file (size %zu)",
             good_size);
    expect_refused(good_size, expected);
    reset();
    set_u32(after("dup.a"), 13);
    expect_refused(good_size, "metadata key 'dup.a': value type 13 is not a GGUF value type");
    reset();
    patched[after("dup.b") - 2] = '\n';
    set_u32(after("dup.b"), 0xdeadbeef);
    expect_refused(good_size, "metadata key 'dup?b': value type 3735928559 is not a GGUF value");
    reset();
    set_u32(after("nums") + 4, 99);
    expect_refused(good_size,
                   "metadata key 'nums': array element type 99 is not a GGUF value type");
    reset();
    set_u64(after("nums") + 8, UINT64_MAX);
    expect_refused(good_size, "metadata key 'nums': array of 18446744073709551615 int16 elements");
    reset();
    set_u32(after("nums") + 4, GGUF_TYPE_STRING);
    set_u64(after("nums") + 8, 1ull << 61);
    expect_refused(good_size, "'nums': array of 2305843009213693952 string elements at offset");
    reset();
    set_u32(after("nums") + 4, GGUF_TYPE_ARRAY);
    set_u64(after("nums") + 8, 1ull << 61);
    expect_refused(good_size, "'nums': array of 2305843009213693952 array elements at offset");
    reset();
    set_u64(after("ab"), UINT64_MAX); /* the length of "c" */
    expect_refused(good_size, "metadata key 'list': string element 1 of the array");
    reset();
    set_u64(after("general.architecture") + 4, 1ull << 63);
    expect_refused(good_size, "metadata key 'general.architecture': string value [offset");
    reset();
    patched[after("dup.b") - 1] = 'a'; /* "dup.b" becomes "dup.a" */
    expect_refused(good_size, "bad.gguf: metadata key 'dup.a': key appears more than once");
}

static void test_alignment(void) {
    size_t value = after("general.alignment") + 4;
    reset();
    set_u32(value, 0);
    expect_refused(good_size, "metadata key 'general.alignment': value 0 is not a power of two");
    reset();
    set_u32(value, 3);
    expect_refused(good_size, "metadata key 'general.alignment': value 3 is not a power of two");
    reset();
    set_u32(value - 4, GGUF_TYPE_INT32);
    set_u32(value, 0xffffffffu);
    expect_refused(good_size, "'general.alignment': value -1 is not a power of two");
    reset();
    set_u32(value - 4, GGUF_TYPE_FLOAT32);
    expect_refused(good_size, "'general.alignment': has type float32, expected uint32");
    reset();
    set_u32(value, 64); /* t.b sits at 32 */
    expect_refused(good_size, "tensor 't.b': data offset 32 is not a multiple of the alignment 64");
}

static void test_tensors(void) {
    char expected[256];
    size_t a = after("t.a"), b = after("t.b"), c = after("t.c");
    size_t c_offset = c + 4 + 2 * 8 + 4;
    uint64_t data_offset = good_size - 32 - get_u64(c_offset);
    reset();
    set_u32(a, 0);
    expect_refused(good_size, "bad.gguf: tensor 't.a': n_dims 0 is not in 1..4");
    reset();
    set_u32(a, 5);
    expect_refused(good_size, "tensor 't.a': n_dims 5 is not in 1..4");
    reset();
    set_u64(c + 4 + 8, 0);
    expect_refused(good_size, "tensor 't.c': dimension 1 is 0");
    reset();
    set_u64(c + 4, 1ull << 32);
    set_u64(c + 4 + 8, 1ull << 32);
    expect_refused(good_size, "tensor 't.c': element count overflows at dimension 1 (dims "
                              "4294967296 x 4294967296 x 1 x 1)");
    reset();
    set_u64(c + 4 + 8, 1ull << 40);
    expect_refused(good_size, "tensor 't.c': 8796093022208 elements of f32 cannot fit in the file");
    reset();
    set_u32(b + 4 + 16, 16);
    expect_refused(good_size, "tensor 't.b': tensor type 16 (iq2_xxs) is not supported (lockstep "
                              "reads f32, f16, q4_0, ");
    reset();
    set_u32(b + 4 + 16, 15);
    expect_refused(good_size, "tensor 't.b': tensor type 15 (q8_K) is not supported");
    reset();
    set_u32(b + 4 + 16, 99);
    expect_refused(good_size, "tensor 't.b': tensor type 99 is not supported");
    reset();
    set_u64(b + 4, 16);
    expect_refused(good_size, "tensor 't.b': row length 16 is not a multiple of the q8_0 block "
                              "size 32");
    reset();
    set_u64(c_offset, get_u64(c_offset) + 4);
    expect_refused(good_size,
                   "tensor 't.c': data offset 100 is not a multiple of the alignment 32");
    reset();
    set_u64(c_offset, get_u64(c_offset) + 32);
    snprintf(expected, sizeof(expected),
             "bad.gguf: tensor 't.c': data [offset %zu, 32 bytes] extends past end of file (size "
             "%zu)",
             good_size, good_size);
    expect_refused(good_size, expected);
    reset();
    set_u64(c_offset, UINT64_MAX - 31);
    expect_refused(good_size, "tensor 't.c': data [data section offset 18446744073709551584, 32 "
                              "bytes] extends past end of file");
    reset();
    set_u64(c_offset, 64);
    expect_refused(good_size, "tensor 't.c': data [data section offset 64] overlaps tensor 't.b' "
                              "[data section offset 32, 34 bytes]");
    reset();
    set_u64(c_offset, 0);
    expect_refused(good_size, "] overlaps tensor 't.");
    reset();
    patched[c - 1] = 'a';
    expect_refused(good_size, "bad.gguf: tensor 't.a': name appears more than once");
    CHECK(data_offset % 32 == 0);
}

static void test_files(void) {
    char err[512] = "", path[512];
    struct gguf_file *file = NULL;
    CHECK(gguf_open(&file, "/nonexistent/x.gguf", err, sizeof(err)) == -1 && file == NULL);
    CHECK_MSG(strstr(err, "/nonexistent/x.gguf: cannot open: No such file"), "%s", err);
    CHECK(gguf_open(&file, LOCKSTEP_TEST_TMP, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "not a regular file"), "%s", err);
    test_tmp_path(path, sizeof(path), "short.gguf");
    for (size_t len = 0; len < good_size; len += good_size / 3) {
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL && (len == 0 || fwrite(good, 1, len, f) == len));
        if (f) fclose(f);
        CHECK(gguf_open(&file, path, err, sizeof(err)) == -1 && file == NULL);
        CHECK_MSG(strncmp(err, path, strlen(path)) == 0 &&
                      (strstr(err, "past end of file") || strstr(err, "cannot fit")),
                  "%s", err);
    }
    remove(path);
    /* a short buffer truncates the message, never overflows it */
    char tiny[8] = "xxxxxxx";
    reset();
    patched[0] = 'X';
    CHECK(gguf_open_memory(&file, patched, good_size, "bad.gguf", tiny, 5) == -1);
    CHECK(strcmp(tiny, "bad.") == 0 && tiny[5] == 'x');
    CHECK(gguf_open_memory(&file, patched, good_size, "bad.gguf", NULL, 0) == -1);
}

int main(void) {
    if (make_good() != 0) return test_status("test_gguf_malformed");
    struct gguf_file *file = NULL;
    char err[512] = "";
    CHECK_MSG(gguf_open_memory(&file, good, good_size, "good", err, sizeof(err)) == 0, "%s", err);
    if (file != NULL) {
        CHECK(file->n_tensors == 3 && file->tensors[2].size == 32);
        CHECK(file->data_offset + file->tensors[2].offset + 32 == good_size);
        gguf_close(file);
    }
    test_truncation();
    test_every_byte();
    test_header();
    test_metadata();
    test_alignment();
    test_tensors();
    test_files();
    free(good);
    free(patched);
    return test_status("test_gguf_malformed");
}
