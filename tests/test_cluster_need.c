/* test_cluster_need.c -- the memory one rank of a model needs
 * (cluster_model_need) against hand computation for small seeded random
 * models of known shape: F32 and Q8_0 weights, tp 1 against tp 2 (the split
 * tensors' part halves, the replicated part stays), KV caches of F16, F32
 * and Q8_0 elements, a classifier tied to the embedding; and the degrees a
 * model cannot take refused with the reason and the degrees that work
 * (cluster_degree_check, the model module's own rule). */
#include "cluster/cluster.h"
#include "model/model.h"
#include "testutil.h"

#include <stdio.h>
#include <string.h>

/* Writes and loads a seeded random llama model; NULL after a failed check. */
static struct model *random_model(const char *name, int dim, int hidden, int layers, int heads,
                                  int kv_heads, enum tensor_type type) {
    struct model_random_params p = {.arch = MODEL_ARCH_LLAMA,
                                    .dim = dim,
                                    .hidden_dim = hidden,
                                    .n_layers = layers,
                                    .n_heads = heads,
                                    .n_kv_heads = kv_heads,
                                    .vocab_size = 300,
                                    .context_length = 64,
                                    .type = type,
                                    .seed = 11};
    char path[512], err[512];
    struct model *m = NULL;
    test_tmp_path(path, sizeof(path), name);
    CHECK_MSG(model_write_random(&p, path, err, sizeof(err)) == 0, "%s", err);
    CHECK_MSG(model_load(&m, path, err, sizeof(err)) == 0, "%s", err);
    remove(path); /* the mapping stays */
    return m;
}

/* dim 64, hidden 96, 2 layers, 4 heads of 16, 2 KV heads, vocab 300, F32. */
static void test_f32_model(void) {
    struct model *m = random_model("cluster_need_f32.gguf", 64, 96, 2, 4, 2, TENSOR_F32);
    if (!m) return;
    struct cluster_need n1, n2;
    char err[512];
    CHECK_MSG(cluster_model_need(m, 1, 1000, &n1, err, sizeof(err)) == 0, "%s", err);
    CHECK_MSG(cluster_model_need(m, 2, 1000, &n2, err, sizeof(err)) == 0, "%s", err);
    /* per layer, in floats: q 64x64, k and v 32x64 (rows split), o 64x64 (columns
     * split), gate and up 96x64 (rows), down 64x96 (columns); two norms of 64 */
    int64_t layer_split = (64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 96 * 64) * 4;
    int64_t layer_whole = 2 * 64 * 4;
    /* token_embd 300x64 and output_norm whole; the classifier by vocabulary */
    int64_t embd = 300 * 64 * 4, output = 300 * 64 * 4, output_norm = 64 * 4;
    int64_t replicated = 2 * layer_whole + embd + output_norm;
    CHECK_MSG(n1.weight_bytes == 2 * layer_split + replicated + output, "%lld",
              (long long)n1.weight_bytes);
    CHECK_MSG(n2.weight_bytes == 2 * layer_split / 2 + replicated + output / 2, "%lld",
              (long long)n2.weight_bytes);
    CHECK(n1.weight_bytes == 400640 && n2.weight_bytes == 239360);
    CHECK(n1.weight_bytes - replicated == 2 * (n2.weight_bytes - replicated));
    /* KV: 2 layers x keys and values x 2 KV heads of 16 x 2 bytes (F16) a position */
    CHECK(n1.kv_bytes == (int64_t)2 * 2 * 2 * 16 * 2 * 1000 && n2.kv_bytes == n1.kv_bytes / 2);
    CHECK(n1.tp == 1 && n2.tp == 2);
    CHECK(n1.total_bytes == n1.weight_bytes + n1.kv_bytes + CLUSTER_OVERHEAD_BYTES);
    CHECK(n2.total_bytes == n2.weight_bytes + n2.kv_bytes + CLUSTER_OVERHEAD_BYTES);

    CHECK(cluster_model_need_kv(m, 1, 1000, TENSOR_F32, &n1, err, sizeof(err)) == 0);
    CHECK(n1.kv_bytes == (int64_t)2 * 2 * 2 * 16 * 4 * 1000);
    CHECK(cluster_model_need_kv(m, 1, 1000, TENSOR_Q8_0, &n1, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "a q8_0 KV cache needs a head dimension that is a multiple of 32, "
                          "not 16"),
              "%s", err);
    CHECK(cluster_model_need_kv(m, 1, 1000, TENSOR_Q4_0, &n1, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "the KV cache does not keep elements of type"), "%s", err);
    CHECK(cluster_model_need(m, 1, -1, &n1, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "-1 KV positions is out of range"), "%s", err);
    CHECK(cluster_model_need(m, 1, 0, &n1, err, sizeof(err)) == 0 && n1.kv_bytes == 0);

    /* a classifier tied to the embedding costs nothing more */
    m->output = m->token_embd;
    CHECK(cluster_model_need(m, 2, 1000, &n2, err, sizeof(err)) == 0);
    CHECK(n2.weight_bytes == 2 * layer_split / 2 + replicated);
    model_free(m);
}

/* Degrees the heads do not divide by are refused, naming those that work. */
static void test_degrees(void) {
    struct model *m = random_model("cluster_need_heads.gguf", 64, 96, 2, 4, 2, TENSOR_F32);
    if (!m) return;
    char why[512], err[512];
    struct cluster_need n;
    CHECK(cluster_degree_check(m, 1, why, sizeof(why)) == 0);
    CHECK(cluster_degree_check(m, 2, why, sizeof(why)) == 0);
    CHECK(cluster_degree_check(m, 3, why, sizeof(why)) == -1);
    CHECK_MSG(strstr(why, "cannot split 3 ways: 4 query heads and 2 key/value heads do not "
                          "divide by 3; degrees that work: 1, 2") &&
                  strstr(why, m->path) == why,
              "%s", why);
    CHECK(cluster_degree_check(m, 4, why, sizeof(why)) == -1);
    CHECK_MSG(strstr(why, "degrees that work: 1, 2"), "%s", why);
    CHECK(cluster_degree_check(m, 0, why, sizeof(why)) == -1);
    CHECK_MSG(strstr(why, "0 ranks is out of range"), "%s", why);
    CHECK(cluster_model_need(m, 3, 100, &n, err, sizeof(err)) == -1);
    CHECK_MSG(!strcmp(err, why) || strstr(err, "cannot split 3 ways"), "%s", err);
    model_free(m);
    /* Q8_0 down projections of 96 columns: halves of 48 are not whole blocks */
    m = random_model("cluster_need_q8_blocks.gguf", 64, 96, 2, 4, 2, TENSOR_Q8_0);
    if (!m) return;
    CHECK(cluster_degree_check(m, 2, why, sizeof(why)) == -1);
    CHECK_MSG(strstr(why, "blk.0.ffn_down.weight slices of 48 columns are not whole 32-element "
                          "q8_0 blocks; degrees that work: 1"),
              "%s", why);
    model_free(m);
}

/* dim 128, hidden 256, 1 layer, 4 heads of 32 and 4 KV heads, Q8_0: a row of
 * n elements is n / 32 blocks of 34 bytes. */
static void test_q8_0_model(void) {
    struct model *m = random_model("cluster_need_q8.gguf", 128, 256, 1, 4, 4, TENSOR_Q8_0);
    if (!m) return;
    struct cluster_need n1, n2;
    char err[512];
    CHECK_MSG(cluster_model_need_kv(m, 1, 500, TENSOR_Q8_0, &n1, err, sizeof(err)) == 0, "%s", err);
    CHECK_MSG(cluster_model_need_kv(m, 2, 500, TENSOR_Q8_0, &n2, err, sizeof(err)) == 0, "%s", err);
    int64_t row128 = 128 / 32 * 34, row256 = 256 / 32 * 34;
    /* q, k, v 128x128 and o 128x128; gate, up 256x128 and down 128x256 */
    int64_t split = 4 * 128 * row128 + 2 * 256 * row128 + 128 * row256;
    int64_t replicated = 2 * 128 * 4 + 300 * row128 + 128 * 4; /* norms, token_embd */
    int64_t output = 300 * row128;
    CHECK_MSG(n1.weight_bytes == split + replicated + output, "%lld", (long long)n1.weight_bytes);
    CHECK_MSG(n2.weight_bytes == split / 2 + replicated + output / 2, "%lld",
              (long long)n2.weight_bytes);
    /* KV: 1 layer x 2 x (4 / tp heads of 32 as Q8_0 blocks) a position */
    CHECK(n1.kv_bytes == (int64_t)2 * 4 * 34 * 500 && n2.kv_bytes == n1.kv_bytes / 2);
    model_free(m);
}

int main(void) {
    test_f32_model();
    test_degrees();
    test_q8_0_model();
    return test_status("test_cluster_need");
}
