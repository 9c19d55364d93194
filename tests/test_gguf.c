/* test_gguf.c -- the GGUF reader on real files: the kjv2m model at three
 * precisions (values from ../shared/models/README.md, weights compared with
 * the llama2.c checkpoint they were converted from) and llama.cpp's GPT-2
 * vocabulary; then the typed getters and their error messages. */
#include "model/model.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct gguf_kv *find_kv(const struct gguf_file *file, const char *key) {
    const struct gguf_kv *kv = gguf_find(file, key);
    CHECK_MSG(kv != NULL, "%s: key %s missing", file->path, key);
    return kv;
}

static uint32_t get_u32(const struct gguf_file *file, const char *key) {
    char err[256] = "";
    uint32_t value = 0;
    CHECK_MSG(gguf_get_u32(file, key, &value, err, sizeof(err)) == 0, "%s", err);
    return value;
}

static int string_is(const struct gguf_file *file, const char *key, const char *expected) {
    char err[256] = "";
    struct gguf_string s = {0};
    if (gguf_get_string(file, key, &s, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 0;
    }
    return gguf_string_equals(s, expected);
}

/* Reads the whole file at path into memory; NULL if it cannot. */
static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = n > 0 ? malloc((size_t)n) : NULL;
    if (data != NULL && fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    *size = data ? (size_t)n : 0;
    return data;
}

/* Is this tensor a 1-D norm weight (kept F32 by the quantizer)? */
static int is_norm(const struct gguf_tensor *t) {
    return t->n_dims == 1;
}

/* Quantized token_embd rows are close to the f32 weights of the llama2.c
 * checkpoint: within half a step for Q8_0, within one step for Q4_0 (whose
 * clamp at 15 can cost a whole step), plus fp16 rounding of the scale. */
static void check_quantized_embedding(const struct gguf_tensor *t, const float *reference) {
    float row[192];
    float worst = 0.0f;
    int bad_blocks = 0;
    float tolerance = t->type == TENSOR_Q8_0 ? 0.6f : 1.01f;
    for (int r = 0; r < 1024; r++) {
        const char *data = (const char *)t->data + (size_t)r * (t->size / 1024);
        tensor_dequantize_row(row, data, t->type, 192);
        for (int b = 0; b < 192 / 32; b++) {
            const float *x = reference + (size_t)r * 192 + b * 32;
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
            float step = t->type == TENSOR_Q8_0 ? amax / 127.0f : amax / 8.0f;
            for (int i = 0; i < 32; i++) {
                float d = fabsf(row[b * 32 + i] - x[i]);
                worst = fmaxf(worst, d);
                if (d > tolerance * step + 1e-7f) bad_blocks++;
            }
        }
    }
    CHECK_MSG(bad_blocks == 0, "%s: %d elements off by more than %g step (worst %g)",
              tensor_type_name(t->type), bad_blocks, tolerance, worst);
}

static void check_kjv(const char *name, enum tensor_type matrix_type, const float *embedding) {
    char path[512], err[512] = "";
    test_shared_path(path, sizeof(path), name);
    struct gguf_file *file = NULL;
    if (gguf_open(&file, path, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s", err);
        return;
    }
    CHECK(file->version == 3);
    CHECK(file->owns_mapping == 1);
    CHECK(file->alignment == 32);
    CHECK(file->data_offset % 32 == 0);
    CHECK(string_is(file, "general.architecture", "llama"));
    CHECK(string_is(file, "general.name", "llama"));
    CHECK(string_is(file, "tokenizer.ggml.model", "llama"));
    CHECK(get_u32(file, "llama.embedding_length") == 192);
    CHECK(get_u32(file, "llama.feed_forward_length") == 512);
    CHECK(get_u32(file, "llama.block_count") == 4);
    CHECK(get_u32(file, "llama.attention.head_count") == 8);
    CHECK(get_u32(file, "llama.attention.head_count_kv") == 4);
    CHECK(get_u32(file, "llama.context_length") == 256);
    CHECK(get_u32(file, "llama.rope.dimension_count") == 24);
    CHECK(get_u32(file, "tokenizer.ggml.bos_token_id") == 1);
    CHECK(get_u32(file, "tokenizer.ggml.eos_token_id") == 2);
    CHECK(get_u32(file, "tokenizer.ggml.padding_token_id") == 0xFFFFFFFFu);
    CHECK(gguf_find(file, "llama.rope.freq_base") == NULL);
    float eps = 0.0f;
    CHECK(gguf_get_f32(file, "llama.attention.layer_norm_rms_epsilon", &eps, err, sizeof(err)) ==
          0);
    CHECK(eps == 1e-5f);
    if (matrix_type != TENSOR_F32) {
        CHECK(get_u32(file, "general.file_type") == (matrix_type == TENSOR_Q8_0 ? 7u : 2u));
    } else {
        CHECK(gguf_find(file, "general.file_type") == NULL);
    }

    const struct gguf_kv *tokens = find_kv(file, "tokenizer.ggml.tokens");
    if (tokens != NULL) {
        CHECK(tokens->value.type == GGUF_TYPE_ARRAY);
        CHECK(tokens->value.v.arr.type == GGUF_TYPE_STRING);
        CHECK(tokens->value.v.arr.n == 1024);
        CHECK(gguf_string_equals(gguf_array_string(&tokens->value, 0), "<unk>"));
        CHECK(gguf_string_equals(gguf_array_string(&tokens->value, 1), "<s>"));
        CHECK(gguf_string_equals(gguf_array_string(&tokens->value, 13), "<0x0A>"));
        CHECK(gguf_string_equals(gguf_array_string(&tokens->value, 962), "\xe2\x96\x81"));
        struct gguf_value token = gguf_array_element(&tokens->value, 962);
        CHECK(token.type == GGUF_TYPE_STRING && gguf_string_equals(token.v.str, "\xe2\x96\x81"));
    }
    const struct gguf_kv *scores = find_kv(file, "tokenizer.ggml.scores");
    const struct gguf_kv *types = find_kv(file, "tokenizer.ggml.token_type");
    if (scores != NULL && types != NULL) {
        CHECK(scores->value.v.arr.type == GGUF_TYPE_FLOAT32 && scores->value.v.arr.n == 1024);
        CHECK(types->value.v.arr.type == GGUF_TYPE_INT32 && types->value.v.arr.n == 1024);
        CHECK(scores->value.v.arr.offsets == NULL);
        /* ids 1/2 are CONTROL (3), byte tokens BYTE (6), pieces NORMAL (1) */
        CHECK(gguf_array_element(&types->value, 1).v.i64 == 3);
        CHECK(gguf_array_element(&types->value, 3 + 0x0A).v.i64 == 6);
        CHECK(gguf_array_element(&types->value, 962).v.i64 == 1);
        CHECK(gguf_array_element(&scores->value, 962).type == GGUF_TYPE_FLOAT32);
    }

    CHECK(file->n_tensors == 39);
    int matrices = 0, norms = 0;
    for (uint64_t i = 0; i < file->n_tensors; i++) {
        const struct gguf_tensor *t = &file->tensors[i];
        CHECK(t->offset % 32 == 0);
        CHECK((const unsigned char *)t->data == file->base + file->data_offset + t->offset);
        CHECK((size_t)((const unsigned char *)t->data - file->base) + t->size <= file->size);
        CHECK(t->n_elements == t->dims[0] * t->dims[1] * t->dims[2] * t->dims[3]);
        if (is_norm(t)) {
            norms++;
            CHECK(t->type == TENSOR_F32 && t->dims[0] == 192);
        } else {
            matrices++;
            int is_output = gguf_string_equals(t->name, "output.weight");
            enum tensor_type want =
                matrix_type == TENSOR_Q4_0 && is_output ? TENSOR_Q8_0 : matrix_type;
            CHECK_MSG(t->type == want, "%s: %.*s has type %d, want %d", name, (int)t->name.len,
                      t->name.data, (int)t->type, (int)want);
        }
    }
    CHECK(matrices == 1 + 1 + 4 * 7 && norms == 1 + 4 * 2);

    const struct gguf_tensor *wq = gguf_find_tensor(file, "blk.3.attn_k.weight");
    CHECK(wq != NULL && wq->n_dims == 2 && wq->dims[0] == 192 && wq->dims[1] == 96);
    CHECK(gguf_find_tensor(file, "blk.4.attn_k.weight") == NULL);
    CHECK(gguf_find_tensor(file, "") == NULL);
    const struct gguf_tensor *embd = gguf_find_tensor(file, "token_embd.weight");
    CHECK(embd != NULL && embd->dims[0] == 192 && embd->dims[1] == 1024);
    if (embd != NULL && embedding != NULL) {
        if (matrix_type == TENSOR_F32) {
            CHECK(embd->size == 1024 * 192 * 4);
            CHECK(memcmp(embd->data, embedding, embd->size) == 0);
        } else {
            CHECK(embd->size == 1024 * 192 / 32 * (matrix_type == TENSOR_Q8_0 ? 34 : 18));
            check_quantized_embedding(embd, embedding);
        }
    }
    gguf_close(file);
}

static void check_gpt2_vocab(void) {
    char path[512], err[512] = "";
    test_shared_path(path, sizeof(path), "fixtures/tokenizer/ggml-vocab-gpt-2.gguf");
    if (!test_require_file(path)) return;
    struct gguf_file *file = NULL;
    if (gguf_open(&file, path, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s", err);
        return;
    }
    CHECK(file->n_tensors == 0);
    CHECK(string_is(file, "general.architecture", "gpt2"));
    CHECK(string_is(file, "tokenizer.ggml.model", "gpt2"));
    CHECK(string_is(file, "tokenizer.ggml.pre", "gpt-2"));
    CHECK(get_u32(file, "tokenizer.ggml.bos_token_id") == 50256);
    CHECK(get_u32(file, "tokenizer.ggml.eos_token_id") == 50256);
    const struct gguf_kv *tokens = find_kv(file, "tokenizer.ggml.tokens");
    const struct gguf_kv *merges = find_kv(file, "tokenizer.ggml.merges");
    if (tokens != NULL && merges != NULL) {
        CHECK(tokens->value.v.arr.n == 50257);
        CHECK(merges->value.v.arr.n == 50000);
        CHECK(gguf_string_equals(gguf_array_string(&tokens->value, 0), "!"));
        CHECK(gguf_string_equals(gguf_array_string(&tokens->value, 220), "\xc4\xa0")); /* Ġ */
        CHECK(gguf_string_equals(gguf_array_string(&tokens->value, 50256), "<|endoftext|>"));
        CHECK(gguf_string_equals(gguf_array_string(&merges->value, 0), "\xc4\xa0 t"));
        CHECK(gguf_string_equals(gguf_array_string(&merges->value, 2), "h e"));
    }
    gguf_close(file);
}

/* The getters' conversions and their error messages. */
static void check_getters(void) {
    char path[512], err[512] = "";
    test_tmp_path(path, sizeof(path), "getters.gguf");
    struct gguf_writer *writer = gguf_writer_create();
    gguf_writer_set_i32(writer, "neg", -1);
    gguf_writer_set_i32(writer, "pos", 7);
    gguf_writer_set_string(writer, "text", "hi");
    struct gguf_value big = {.type = GGUF_TYPE_UINT64, .v.u64 = 1ull << 32};
    gguf_writer_set_value(writer, "big", &big);
    struct gguf_value wide = {.type = GGUF_TYPE_FLOAT64, .v.f64 = 0.25};
    gguf_writer_set_value(writer, "wide", &wide);
    struct gguf_value huge = {.type = GGUF_TYPE_FLOAT64, .v.f64 = 1e300};
    gguf_writer_set_value(writer, "huge", &huge);
    gguf_writer_set_bool(writer, "flag", 1);
    CHECK_MSG(gguf_writer_write(writer, path, err, sizeof(err)) == 0, "%s", err);
    gguf_writer_free(writer);

    struct gguf_file *file = NULL;
    if (gguf_open(&file, path, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "%s", err);
        return;
    }
    uint32_t u = 0;
    float f = 0.0f;
    struct gguf_string s = {0};
    CHECK(gguf_get_u32(file, "pos", &u, err, sizeof(err)) == 0 && u == 7);
    CHECK(gguf_get_u32(file, "neg", &u, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "'neg'") && strstr(err, "-1 does not fit"), "%s", err);
    CHECK(gguf_get_u32(file, "big", &u, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "4294967296 does not fit"), "%s", err);
    CHECK(gguf_get_u32(file, "text", &u, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "'text' has type string, expected an integer"), "%s", err);
    CHECK(gguf_get_u32(file, "flag", &u, err, sizeof(err)) == -1);
    CHECK(gguf_get_u32(file, "absent", &u, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, path) && strstr(err, "'absent' is missing"), "%s", err);
    CHECK(gguf_get_f32(file, "wide", &f, err, sizeof(err)) == 0 && f == 0.25f);
    CHECK(gguf_get_f32(file, "huge", &f, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "'huge'") && strstr(err, "does not fit in float32"), "%s", err);
    CHECK(gguf_get_f32(file, "pos", &f, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "expected a float"), "%s", err);
    CHECK(gguf_get_string(file, "text", &s, err, sizeof(err)) == 0 && gguf_string_equals(s, "hi"));
    CHECK(gguf_get_string(file, "pos", &s, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "'pos' has type int32, expected a string"), "%s", err);
    CHECK(!gguf_string_equals(s, "h") && !gguf_string_equals(s, "hii"));
    gguf_close(file);
    remove(path);
}

int main(void) {
    check_getters();

    char path[512];
    test_shared_path(path, sizeof(path), "models/kjv2m-f32.gguf");
    if (!test_require_file(path)) return test_failures ? test_status("test_gguf") : TEST_SKIP_CODE;
    /* token_embedding follows the 7-int header of the llama2.c checkpoint. */
    size_t bin_size = 0;
    unsigned char *bin =
        read_file(test_shared_path(path, sizeof(path), "models/kjv2m.bin"), &bin_size);
    CHECK(bin != NULL && bin_size == 7306012);
    const float *embedding = NULL;
    float *embedding_copy = NULL;
    if (bin != NULL && bin_size >= 28 + 1024 * 192 * 4) {
        embedding_copy = malloc(1024 * 192 * sizeof(float));
        if (embedding_copy != NULL) memcpy(embedding_copy, bin + 28, 1024 * 192 * sizeof(float));
        embedding = embedding_copy;
    }
    check_kjv("models/kjv2m-f32.gguf", TENSOR_F32, embedding);
    check_kjv("models/kjv2m-q8_0.gguf", TENSOR_Q8_0, embedding);
    check_kjv("models/kjv2m-q4_0.gguf", TENSOR_Q4_0, embedding);
    check_gpt2_vocab();
    free(embedding_copy);
    free(bin);
    return test_status("test_gguf");
}
