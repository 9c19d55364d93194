/* test_embed_fixtures.c -- embeddings against llama.cpp's: for the shared
 * tiny model in F32 and Q8_0, four texts with mean and with last pooling
 * (../shared/fixtures/embeddings/reference.json, llama-embedding's
 * vectors, L2-normalized), the hidden states engine_embed_sequence keeps
 * (every position's last-layer output after the final RMS norm), pooled
 * and normalized here, must have a cosine of at least 0.99999 (F32) and
 * 0.9999 (Q8_0) with llama.cpp's: the two engines sum in different orders,
 * and llama.cpp's own F32 and Q8_0 vectors of one text agree to
 * 0.9999-0.99997. The same text run in passes of 3 tokens gives the same
 * hidden states bit for bit as one pass (batch invariance). Skips without
 * ../shared. */
#include "engine/engine.h"
#include "model/model.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 512

/* The hidden states of text's tokens (n of them) in passes of max_tokens. */
static float *hidden_states(const struct model *model, const struct tokenizer *tok,
                            const char *text, int max_tokens, int *n) {
    char err[512];
    static int ids[MAX_IDS];
    int dim = model->config.dim;
    *n = 0;
    CHECK_MSG(tokenizer_encode(tok, text, strlen(text), tokenizer_adds_bos(tok), ids, MAX_IDS, n,
                               err, sizeof(err)) == 0,
              "%s", err);
    struct engine engine;
    struct engine_params params = {
        .n_threads = 2, .max_tokens = max_tokens, .context_length = MAX_IDS, .kv_block_size = 16};
    float *hidden = malloc((size_t)(*n > 0 ? *n : 1) * dim * sizeof(float));
    if (!hidden || engine_init(&engine, model, &params, err, sizeof(err))) {
        CHECK_MSG(0, "%s", hidden ? err : "out of memory");
        free(hidden);
        return NULL;
    }
    struct kv_sequence seq = {0};
    int ok = kv_sequence_reserve(&engine.kv, &seq, *n) == 0 &&
             engine_embed_sequence(&engine, &seq, ids, *n, hidden, err, sizeof(err)) == 0;
    CHECK_MSG(ok, "embedding '%s': %s", text, err);
    kv_sequence_release(&engine.kv, &seq);
    engine_free(&engine);
    if (ok) return hidden;
    free(hidden);
    return NULL;
}

/* The cosine of the pooled hidden states with want (dim floats). */
static double cosine(const float *hidden, int n, int dim, int mean, const cJSON *want) {
    double dot = 0, a = 0, b = 0;
    for (int d = 0; d < dim; d++) {
        double v = 0;
        for (int t = mean ? 0 : n - 1; t < n; t++) v += hidden[(size_t)t * dim + d];
        double w = cJSON_GetArrayItem(want, d)->valuedouble;
        dot += v * w;
        a += v * v;
        b += w * w;
    }
    return dot / sqrt(a) / sqrt(b);
}

static void check_model(const cJSON *cases, const char *name, double bound) {
    char path[512], err[512];
    struct model *model = NULL;
    struct tokenizer *tok = NULL;
    test_shared_path(path, sizeof(path), "models/");
    strncat(path, name, sizeof(path) - strlen(path) - 1);
    if (model_load(&model, path, err, sizeof(err)) ||
        tokenizer_load_gguf(&tok, model->gguf, err, sizeof(err))) {
        CHECK_MSG(0, "%s: %s", name, err);
        if (model) model_free(model);
        return;
    }
    int dim = model->config.dim, checked = 0;
    double worst = 1.0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *model_name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "model"));
        const char *pooling = cJSON_GetStringValue(cJSON_GetObjectItem(c, "pooling"));
        const char *input = cJSON_GetStringValue(cJSON_GetObjectItem(c, "input"));
        const cJSON *want = cJSON_GetObjectItem(c, "embedding");
        if (!model_name || strcmp(model_name, name) || !pooling || !input) continue;
        CHECK(cJSON_GetArraySize(want) == dim);
        int n = 0, n_split = 0;
        float *whole = hidden_states(model, tok, input, 128, &n);
        float *split = hidden_states(model, tok, input, 3, &n_split);
        if (whole && split && cJSON_GetArraySize(want) == dim) {
            double cos = cosine(whole, n, dim, !strcmp(pooling, "mean"), want);
            CHECK_MSG(cos >= bound, "%s %s '%s': cosine %.7f < %g", name, pooling, input, cos,
                      bound);
            CHECK_MSG(n == n_split && !memcmp(whole, split, (size_t)n * dim * sizeof(float)),
                      "%s '%s': passes of 3 tokens differ from one pass", name, input);
            if (cos < worst) worst = cos;
            checked++;
        }
        free(whole);
        free(split);
    }
    CHECK_MSG(checked == 8, "%s: %d cases checked, expected 8", name, checked);
    printf("%s: %d cases, worst cosine %.7f (bound %g)\n", name, checked, worst, bound);
    tokenizer_free(tok);
    model_free(model);
}

int main(void) {
    char path[512];
    test_shared_path(path, sizeof(path), "fixtures/embeddings/reference.json");
    if (!test_require_file(path)) return TEST_SKIP_CODE;
    FILE *f = fopen(path, "rb");
    static char text[1 << 20];
    size_t length = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f) fclose(f);
    text[length] = '\0';
    cJSON *root = cJSON_Parse(text);
    const cJSON *cases = cJSON_GetObjectItem(root, "cases");
    CHECK_MSG(cJSON_IsArray(cases), "%s: no cases array", path);
    check_model(cases, "kjv2m-f32.gguf", 0.99999);
    check_model(cases, "kjv2m-q8_0.gguf", 0.9999);
    cJSON_Delete(root);
    return test_status("test_embed_fixtures");
}
