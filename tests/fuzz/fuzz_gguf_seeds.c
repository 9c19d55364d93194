/* fuzz_gguf_seeds.c -- writes the seed corpus for fuzz_gguf into the
 * directory given as argv[1]: small GGUF files made by the writer (every
 * value type, a vocabulary, tensors of every type, a custom alignment, an
 * empty file) and one hand-built file with nested arrays, which the writer's
 * scalar API cannot express. Run by CTest before the fuzzer, so no binary
 * seeds live in the repository. */
#include "model/model.h"

#include <stdio.h>
#include <string.h>

/* A hand-built image: one kv "nested" = [[1, 2] (uint16), ["x", ""], [[5]] (int8)]. */
static size_t build_nested(unsigned char *out, size_t capacity) {
    unsigned char buf[256];
    size_t len = 0;
#define PUT(p, n) (memcpy(buf + len, (p), (n)), len += (n))
#define PUT_U32(v)                                                                                 \
    do {                                                                                           \
        uint32_t x = (v);                                                                          \
        PUT(&x, 4);                                                                                \
    } while (0)
#define PUT_U64(v)                                                                                 \
    do {                                                                                           \
        uint64_t x = (v);                                                                          \
        PUT(&x, 8);                                                                                \
    } while (0)
    PUT("GGUF", 4);
    PUT_U32(3);
    PUT_U64(0);
    PUT_U64(1);
    PUT_U64(6);
    PUT("nested", 6);
    PUT_U32(GGUF_TYPE_ARRAY);
    PUT_U32(GGUF_TYPE_ARRAY);
    PUT_U64(3);
    PUT_U32(GGUF_TYPE_UINT16);
    PUT_U64(2);
    PUT("\x01\x00\x02\x00", 4);
    PUT_U32(GGUF_TYPE_STRING);
    PUT_U64(2);
    PUT_U64(1);
    PUT("x", 1);
    PUT_U64(0);
    PUT_U32(GGUF_TYPE_ARRAY);
    PUT_U64(1);
    PUT_U32(GGUF_TYPE_INT8);
    PUT_U64(1);
    PUT("\x05", 1);
#undef PUT
#undef PUT_U32
#undef PUT_U64
    if (len > capacity) return 0;
    memcpy(out, buf, len);
    return len;
}

static int write_seed(struct gguf_writer *writer, const char *dir, const char *name) {
    char path[1024], err[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int rc = gguf_writer_write(writer, path, err, sizeof(err));
    if (rc != 0) fprintf(stderr, "fuzz_gguf_seeds: %s\n", err);
    gguf_writer_free(writer);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_gguf_seeds <corpus directory>\n");
        return 2;
    }
    const char *dir = argv[1];
    int failed = 0;

    struct gguf_writer *w = gguf_writer_create();
    const struct gguf_value scalars[] = {
        {.type = GGUF_TYPE_UINT8, .v.u64 = 200},         {.type = GGUF_TYPE_INT8, .v.i64 = -5},
        {.type = GGUF_TYPE_UINT16, .v.u64 = 60000},      {.type = GGUF_TYPE_INT16, .v.i64 = -300},
        {.type = GGUF_TYPE_UINT64, .v.u64 = 1ull << 40}, {.type = GGUF_TYPE_INT64, .v.i64 = -7},
        {.type = GGUF_TYPE_FLOAT64, .v.f64 = 0.5},
    };
    const char *keys[] = {"u8", "i8", "u16", "i16", "u64", "i64", "f64"};
    for (int i = 0; i < 7; i++) gguf_writer_set_value(w, keys[i], &scalars[i]);
    gguf_writer_set_u32(w, "general.alignment", 32);
    gguf_writer_set_i32(w, "i32", -1);
    gguf_writer_set_f32(w, "f32", 1e-5f);
    gguf_writer_set_bool(w, "bool", 1);
    gguf_writer_set_string(w, "general.architecture", "llama");
    failed |= write_seed(w, dir, "scalars.gguf");

    w = gguf_writer_create();
    const char *tokens[] = {"<unk>", "<s>", "</s>", "\342\226\201",
                            "a",     "b",   "ab",   "\342\226\201ab"};
    const float scores[] = {0, 0, 0, -1, -2, -3, -4, -5};
    const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1};
    const char *merges[] = {"a b", "\xe2\x96\x81 ab"};
    gguf_writer_set_string(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", tokens, NULL, 8);
    gguf_writer_set_array(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, 8);
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 8);
    gguf_writer_set_string_array(w, "tokenizer.ggml.merges", merges, NULL, 2);
    failed |= write_seed(w, dir, "vocab.gguf");

    static float f32[32];
    static uint16_t f16[64];
    static struct tensor_block_q8_0 q8[2];
    static struct tensor_block_q4_0 q4[4];
    const uint64_t d1[] = {32}, d2[] = {32, 2}, d3[] = {32, 1, 2}, d4[] = {32, 2, 1, 2};
    for (int align = 32; align <= 64; align += 32) {
        w = gguf_writer_create();
        if (align != 32) gguf_writer_set_u32(w, "general.alignment", (uint32_t)align);
        gguf_writer_set_string(w, "general.architecture", "llama");
        gguf_writer_add_tensor(w, "output_norm.weight", TENSOR_F32, 1, d1, f32, sizeof(f32));
        gguf_writer_add_tensor(w, "token_embd.weight", TENSOR_F16, 2, d2, f16, sizeof(f16));
        gguf_writer_add_tensor(w, "blk.0.attn_q.weight", TENSOR_Q8_0, 3, d3, q8, sizeof(q8));
        gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", TENSOR_Q4_0, 4, d4, q4, sizeof(q4));
        failed |= write_seed(w, dir, align == 32 ? "tensors.gguf" : "tensors-align64.gguf");
    }

    failed |= write_seed(gguf_writer_create(), dir, "empty.gguf");

    unsigned char nested[256];
    size_t len = build_nested(nested, sizeof(nested));
    char path[1024];
    snprintf(path, sizeof(path), "%s/nested.gguf", dir);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(nested, 1, len, f) != len) failed = 1;
    if (f != NULL && fclose(f) != 0) failed = 1;
    if (failed) fprintf(stderr, "fuzz_gguf_seeds: could not write every seed into %s\n", dir);
    return failed ? 1 : 0;
}
