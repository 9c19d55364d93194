/* test_llamacpp_logits.c -- lockstep's logits against llama.cpp's, type by
 * type, on the quantization fixtures (../shared/fixtures/quant: files
 * written by llama-quantize in every common type; skipped without them).
 *
 * tests/data/llamacpp_logits.json (bench/llamacpp_logits/run, llama.cpp
 * c392e50) holds, for each file and each of its four prompts, llama.cpp's
 * prompt ids and, at the first four positions (the prompt, then llama.cpp's
 * own greedy tokens fed one at a time), its eight largest logits; and its
 * spread on the file: the largest difference between its logits with flash
 * attention off and on, which float order alone makes.
 *
 * For every file: lockstep's tokenizer gives llama.cpp's prompt ids, and
 * lockstep's logits of those eight tokens at each position are within
 * max(1.5 x the spread, 0.01) of llama.cpp's: lockstep is as close to
 * llama.cpp as llama.cpp is to itself. Where llama.cpp's best token leads
 * the next by more than twice that bound, lockstep's best token is the
 * same. On the random-weight files the spread is 0.1-0.25 for every
 * quantized type (activations quantized to int8 turn a last-bit
 * difference into a different quant now and then) and under 0.01 for F32;
 * the single products agree to 5e-7 of their largest value. */
#include "engine/engine.h"
#include "model/model.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 64

/* lockstep's logits at each position of one case: the prompt, then each
 * forced token; checks them against the case's, and returns the largest
 * difference. */
static double check_case(struct engine *engine, const struct tokenizer *tok, const char *file,
                         const cJSON *c, double bound) {
    char err[256];
    int ids[MAX_IDS], n_prompt = 0, n_forced = 0, n_ids = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, cJSON_GetObjectItem(c, "prompt_ids")) if (n_prompt < MAX_IDS / 2)
        ids[n_prompt++] = item->valueint;
    cJSON_ArrayForEach(item, cJSON_GetObjectItem(c, "forced")) if (n_forced < MAX_IDS / 2)
        ids[n_prompt + n_forced++] = item->valueint;
    const char *prompt = cJSON_GetStringValue(cJSON_GetObjectItem(c, "prompt"));
    int mine[MAX_IDS];
    CHECK(prompt && tokenizer_encode(tok, prompt, strlen(prompt), tokenizer_adds_bos(tok), mine,
                                     MAX_IDS, &n_ids, err, sizeof(err)) == 0);
    CHECK_MSG(n_ids == n_prompt && !memcmp(mine, ids, sizeof(int) * (size_t)n_prompt),
              "%s '%s': lockstep's prompt ids are not llama.cpp's", file, prompt);
    struct kv_sequence seq = {0};
    double worst = 0;
    CHECK(kv_sequence_reserve(&engine->kv, &seq, n_prompt + n_forced) == 0);
    int p = 0;
    cJSON_ArrayForEach(item, cJSON_GetObjectItem(c, "positions")) {
        int start = p == 0 ? 0 : n_prompt + p - 1, n = p == 0 ? n_prompt : 1;
        CHECK_MSG(engine_run_sequence(engine, &seq, ids + start, n, start, err, sizeof(err)) == 0,
                  "%s", err);
        const float *logits = engine->logits;
        int best = 0, vocab = engine->model->config.vocab_size;
        for (int i = 1; i < vocab; i++)
            if (logits[i] > logits[best]) best = i;
        const cJSON *top = item->child, *second = top ? top->next : NULL, *entry;
        cJSON_ArrayForEach(entry, item) {
            int id = cJSON_GetArrayItem(entry, 0)->valueint;
            double want = cJSON_GetArrayItem(entry, 1)->valuedouble;
            if (id >= 0 && id < vocab && fabs(logits[id] - want) > worst)
                worst = fabs(logits[id] - want);
        }
        double lead = cJSON_GetArrayItem(top, 1)->valuedouble -
                      (second ? cJSON_GetArrayItem(second, 1)->valuedouble : 0);
        if (second && lead > 2 * bound)
            CHECK_MSG(best == cJSON_GetArrayItem(top, 0)->valueint,
                      "%s '%s' position %d: lockstep's best token %d, llama.cpp's %d leads by %.3f",
                      file, prompt, p, best, cJSON_GetArrayItem(top, 0)->valueint, lead);
        p++;
    }
    kv_sequence_release(&engine->kv, &seq);
    return worst;
}

static void check_file(const char *name, const cJSON *cases) {
    char path[512], err[256];
    struct model *model = NULL;
    struct tokenizer *tok = NULL;
    struct engine engine;
    test_shared_path(path, sizeof(path), "fixtures/quant/");
    strncat(path, name, sizeof(path) - strlen(path) - 1);
    struct engine_params params = {
        .n_threads = 2, .max_tokens = MAX_IDS, .context_length = MAX_IDS, .kv_block_size = 16};
    if (model_load(&model, path, err, sizeof(err)) ||
        tokenizer_load_gguf(&tok, model->gguf, err, sizeof(err)) ||
        engine_init(&engine, model, &params, err, sizeof(err))) {
        CHECK_MSG(0, "%s: %s", name, err);
        tokenizer_free(tok);
        if (model) model_free(model);
        return;
    }
    double spread = 0, worst = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        double s = cJSON_GetNumberValue(cJSON_GetObjectItem(c, "spread"));
        if (s > spread) spread = s;
    }
    double bound = fmax(1.5 * spread, 0.01);
    cJSON_ArrayForEach(c, cases) worst = fmax(worst, check_case(&engine, tok, name, c, bound));
    CHECK_MSG(worst <= bound, "%s: lockstep's logits are %.4f from llama.cpp's (bound %.4f)", name,
              worst, bound);
    printf("%-20s largest difference %.4f, llama.cpp's own spread %.4f (bound %.4f)\n", name, worst,
           spread, bound);
    engine_free(&engine);
    tokenizer_free(tok);
    model_free(model);
}

int main(void) {
    char path[512], data[512];
    test_shared_path(path, sizeof(path), "fixtures/quant/reference.json");
    if (!test_require_file(path)) return TEST_SKIP_CODE;
    const char *source = __FILE__, *slash = strrchr(source, '/');
    snprintf(data, sizeof(data), "%.*s/data/llamacpp_logits.json",
             slash ? (int)(slash - source) : 1, slash ? source : ".");
    size_t length = 0;
    char *text = test_read_file(data, &length);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    const cJSON *files = cJSON_GetObjectItem(root, "files"), *f;
    CHECK_MSG(cJSON_GetArraySize(files) == 19, "%s: %d files, expected 19", data,
              cJSON_GetArraySize(files));
    cJSON_ArrayForEach(f, files) check_file(f->string, f);
    cJSON_Delete(root);
    free(text);
    return test_status("test_llamacpp_logits");
}
