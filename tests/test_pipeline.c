/* test_pipeline.c -- pipeline parallelism over the local backend: for
 * every configuration of stages (even and uneven layer splits, 2 to 4
 * stages) alone and with tensor parallelism inside each stage, the greedy
 * tokens of several prompts and the logits after every prompt and every
 * generated token are bit for bit those of one rank (the per-layer math is
 * the same; x crosses a stage boundary as the floats it is). A split that
 * does not fit the model is refused with the reason. Models: seeded random
 * F32, Q8_0 and Q4_K models of 6 layers, and ../shared/models/kjv2m*
 * (skipped when absent). With as many steps in flight as stages (three
 * sequences decoding in turn, each step collected oldest first), every
 * token and logit is the same again.
 * ctest-labels: concurrency */
#include "engine/engine.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define N_PROMPTS   3
#define PROMPT_LEN  21
#define N_GENERATED 12

/* Greedy tokens and the logits of every step of every prompt. */
struct run_result {
    int tokens[N_PROMPTS][N_GENERATED];
    float *logits; /* (N_PROMPTS, N_GENERATED + 1, vocab) */
};

/* A configuration: stages, ranks per stage, and the layer split (NULL:
 * even). */
struct config {
    int pp, tp;
    const int *layers;
    const char *name;
};

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Starts the configuration's group of local ranks; -1 (err says why, the
 * group stopped) if it does not start. */
static int start_config(const struct model *model, const struct config *cf,
                        struct engine_group *group, char *err, size_t errlen) {
    struct engine_params params = {.n_threads = 2,
                                   .max_tokens = 8,
                                   .kv_block_size = 16,
                                   .kv_blocks = 32,
                                   .kv_type = TENSOR_F16};
    *group = (struct engine_group){.n = cf->tp,
                                   .stages = cf->pp,
                                   .layers = cf->layers,
                                   .n_layers = cf->layers ? cf->pp : 0,
                                   .backend = COMM_LOCAL,
                                   .deadline = 10.0};
    if (engine_group_start(group, model, &params, err, errlen) == 0) return 0;
    char ignored[256];
    engine_group_stop(group, ignored, sizeof(ignored));
    return -1;
}

/* Runs the prompts on the leader of the configuration's group; -1 if the
 * group does not start (err says why). */
static int run_config(const struct model *model, const struct config *cf,
                      int prompts[N_PROMPTS][PROMPT_LEN], struct run_result *out, char *err,
                      size_t errlen) {
    int vocab = model->config.vocab_size;
    struct engine_group group;
    if (start_config(model, cf, &group, err, errlen)) return -1;
    struct engine *leader = engine_group_leader(&group);
    for (int p = 0; p < N_PROMPTS; p++) {
        struct kv_sequence seq = {0};
        float *logits = out->logits + (size_t)p * (N_GENERATED + 1) * vocab;
        CHECK(kv_sequence_reserve(&leader->kv, &seq, PROMPT_LEN + N_GENERATED) == 0);
        /* prompt in passes of 8 tokens (the engine's max_tokens) */
        CHECK_MSG(engine_run_sequence(leader, &seq, prompts[p], PROMPT_LEN, 0, err, errlen) == 0,
                  "%s: %s", cf->name, err);
        memcpy(logits, leader->logits, sizeof(float) * vocab);
        for (int i = 0; i < N_GENERATED; i++) {
            out->tokens[p][i] = argmax(leader->logits, vocab);
            if (engine_run_sequence(leader, &seq, &out->tokens[p][i], 1, PROMPT_LEN + i, err,
                                    errlen) != 0) {
                CHECK_MSG(0, "%s: %s", cf->name, err);
                break;
            }
            memcpy(logits + (size_t)(i + 1) * vocab, leader->logits, sizeof(float) * vocab);
        }
        kv_sequence_release(&leader->kv, &seq);
    }
    CHECK(engine_group_stop(&group, err, errlen) == 0);
    return 0;
}

/* The same prompts with up to pp steps in flight: each prompt is
 * prefilled, then the three decode one token a step, round robin, a step
 * submitted whenever fewer than pp are in flight and a sequence has none
 * (the leader's rule in docs/protocol/pipeline.pml), collected oldest
 * first. */
static int run_in_flight(const struct model *model, const struct config *cf,
                         int prompts[N_PROMPTS][PROMPT_LEN], struct run_result *out, char *err,
                         size_t errlen) {
    int vocab = model->config.vocab_size;
    struct engine_group group;
    if (start_config(model, cf, &group, err, errlen)) return -1;
    struct engine *leader = engine_group_leader(&group);
    struct kv_sequence seqs[N_PROMPTS] = {{0}};
    int generated[N_PROMPTS] = {0}, busy[N_PROMPTS] = {0}, queue[N_PROMPTS], n_queued = 0;
    int positions[N_PROMPTS];
    uint8_t want = 1;
    for (int p = 0; p < N_PROMPTS; p++) {
        CHECK(kv_sequence_reserve(&leader->kv, &seqs[p], PROMPT_LEN + N_GENERATED) == 0);
        CHECK(engine_run_sequence(leader, &seqs[p], prompts[p], PROMPT_LEN, 0, err, errlen) == 0);
        memcpy(out->logits + (size_t)p * (N_GENERATED + 1) * vocab, leader->logits,
               sizeof(float) * vocab);
        out->tokens[p][0] = argmax(leader->logits, vocab);
    }
    int most = 0;
    for (int next = 0, done = 0; done < N_PROMPTS * N_GENERATED;) {
        for (int tries = 0; tries < N_PROMPTS && engine_steps_in_flight(leader) < cf->pp;
             tries++, next = (next + 1) % N_PROMPTS) {
            if (busy[next] || generated[next] == N_GENERATED) continue;
            struct kv_sequence *seq = &seqs[next];
            positions[next] = PROMPT_LEN + generated[next];
            struct engine_batch batch = {1, &out->tokens[next][generated[next]], &positions[next],
                                         &seq, &want};
            CHECK_MSG(engine_submit_step(leader, &batch, err, errlen) == 0, "%s", err);
            busy[next] = 1;
            queue[n_queued++] = next;
        }
        if (engine_steps_in_flight(leader) > most) most = engine_steps_in_flight(leader);
        int rows = engine_collect_step(leader, err, errlen);
        CHECK_MSG(rows == 1, "%s: collect: %d %s", cf->name, rows, err);
        if (rows != 1) break;
        int p = queue[0];
        memmove(queue, queue + 1, (size_t)--n_queued * sizeof(int));
        busy[p] = 0;
        generated[p]++;
        done++;
        memcpy(out->logits + ((size_t)p * (N_GENERATED + 1) + generated[p]) * vocab, leader->logits,
               sizeof(float) * vocab);
        if (generated[p] < N_GENERATED)
            out->tokens[p][generated[p]] = argmax(leader->logits, vocab);
    }
    CHECK_MSG(most == (cf->pp < N_PROMPTS ? cf->pp : N_PROMPTS), "%s: at most %d in flight",
              cf->name, most);
    for (int p = 0; p < N_PROMPTS; p++) kv_sequence_release(&leader->kv, &seqs[p]);
    CHECK(engine_group_stop(&group, err, errlen) == 0);
    return 0;
}

/* Compares every configuration with one rank, bit for bit. */
static void check_model(const char *path, const struct config *configs, int n_configs) {
    char err[512];
    struct model *model;
    if (model_load(&model, path, err, sizeof(err))) {
        CHECK_MSG(0, "load: %s", err);
        return;
    }
    int vocab = model->config.vocab_size, prompts[N_PROMPTS][PROMPT_LEN];
    size_t n_logits = (size_t)N_PROMPTS * (N_GENERATED + 1) * vocab;
    for (int p = 0; p < N_PROMPTS; p++)
        for (int i = 0; i < PROMPT_LEN; i++) prompts[p][i] = (p * 131 + i * 17 + 1) % vocab;
    struct run_result one = {.logits = malloc(sizeof(float) * n_logits)};
    struct run_result other = {.logits = malloc(sizeof(float) * n_logits)};
    struct config single = {1, 1, NULL, "pp 1 tp 1"};
    CHECK_MSG(run_config(model, &single, prompts, &one, err, sizeof(err)) == 0, "%s", err);
    for (int c = 0; c < n_configs; c++) {
        if (run_config(model, &configs[c], prompts, &other, err, sizeof(err)) != 0) {
            CHECK_MSG(0, "%s: %s: %s", path, configs[c].name, err);
            continue;
        }
        int same_tokens = memcmp(one.tokens, other.tokens, sizeof(one.tokens)) == 0;
        int same_logits = memcmp(one.logits, other.logits, sizeof(float) * n_logits) == 0;
        printf("%s: %s: greedy tokens %s, logits %s\n", path, configs[c].name,
               same_tokens ? "identical" : "DIFFER", same_logits ? "bit-equal" : "DIFFER");
        CHECK_MSG(same_tokens && same_logits, "%s: %s differs from one rank (max |diff| %g)", path,
                  configs[c].name, test_max_abs_diff(one.logits, other.logits, n_logits));
        if (configs[c].layers) continue;
        memset(other.logits, 0, sizeof(float) * n_logits);
        if (run_in_flight(model, &configs[c], prompts, &other, err, sizeof(err)) != 0) {
            CHECK_MSG(0, "%s: %s in flight: %s", path, configs[c].name, err);
            continue;
        }
        same_tokens = memcmp(one.tokens, other.tokens, sizeof(one.tokens)) == 0;
        same_logits = memcmp(one.logits, other.logits, sizeof(float) * n_logits) == 0;
        printf("%s: %s, %d steps in flight: greedy tokens %s, logits %s\n", path, configs[c].name,
               configs[c].pp, same_tokens ? "identical" : "DIFFER",
               same_logits ? "bit-equal" : "DIFFER");
        CHECK_MSG(same_tokens && same_logits, "%s: %s in flight differs from one rank", path,
                  configs[c].name);
    }
    free(one.logits);
    free(other.logits);
    model_free(model);
}

/* Splits that do not fit are refused before any rank starts, saying why. */
static void check_refusals(const char *path) {
    static const int short_split[] = {2, 3}, empty_stage[] = {6, 0};
    const struct config bad[] = {
        {2, 1, short_split, "2 + 3 layers"},
        {2, 1, empty_stage, "a stage of 0 layers"},
        {7, 1, NULL, "7 stages for 6 layers"},
        {9, 1, NULL, "9 stages"},
    };
    const char *reasons[] = {"the layer split adds up to 5 layers, the model has 6",
                             "stage 1 of the layer split has 0 layers",
                             "7 pipeline stages for 6 layers", "9 pipeline stages (at most 8)"};
    char err[512];
    struct model *model;
    if (model_load(&model, path, err, sizeof(err))) {
        CHECK_MSG(0, "load: %s", err);
        return;
    }
    struct run_result out = {.logits = malloc(sizeof(float) * N_PROMPTS * (N_GENERATED + 1) *
                                              (size_t)model->config.vocab_size)};
    int prompts[N_PROMPTS][PROMPT_LEN] = {{0}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = run_config(model, &bad[i], prompts, &out, err, sizeof(err));
        CHECK_MSG(rc == -1 && strstr(err, reasons[i]), "%s: rc %d, \"%s\"", bad[i].name, rc, err);
    }
    free(out.logits);
    model_free(model);
}

static void check_random(enum tensor_type type) {
    static const int front[] = {1, 5}, back[] = {4, 2}, three[] = {1, 2, 3};
    const struct config configs[] = {
        {2, 1, NULL, "pp 2 (3 + 3 layers)"}, {2, 1, front, "pp 2 (1 + 5)"},
        {2, 1, back, "pp 2 (4 + 2)"},        {3, 1, three, "pp 3 (1 + 2 + 3)"},
        {2, 2, NULL, "pp 2 x tp 2"},         {3, 2, NULL, "pp 3 x tp 2"},
    };
    char path[512], err[512];
    /* 8 heads, hidden 2 * dim: every slice of tp 2 is whole blocks (of
     * 256 elements for Q4_K) */
    int dim = type == TENSOR_Q4_K ? 512 : 256;
    struct model_random_params params = {MODEL_ARCH_LLAMA, dim, 2 * dim, 6, 8, 4, 300, 64, type, 5,
                                         MODEL_MIX_NONE};
    test_tmp_path(path, sizeof(path), "pipeline.gguf");
    CHECK(model_write_random(&params, path, err, sizeof(err)) == 0);
    check_model(path, configs, (int)(sizeof(configs) / sizeof(configs[0])));
    if (type == TENSOR_F32) check_refusals(path);
    remove(path);
}

int main(void) {
    char path[1024];
    check_random(TENSOR_F32);
    check_random(TENSOR_Q8_0);
    check_random(TENSOR_Q4_K);
    if (test_require_file(test_shared_path(path, sizeof(path), "models/kjv2m-q8_0.gguf"))) {
        const struct config configs[] = {{2, 1, NULL, "pp 2"}, {2, 2, NULL, "pp 2 x tp 2"}};
        check_model(path, configs, 2);
        check_model(test_shared_path(path, sizeof(path), "models/kjv2m.bin"), configs, 1);
    }
    return test_status("test_pipeline");
}
