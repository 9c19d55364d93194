/* test_engine_profile.c -- engine_profile: where forward passes spend their
 * time (what runner_bench's breakdown reads).
 *
 * On a seeded random Q8_0 model, 2 threads:
 *  - with profiling off, passes leave the profile at zero;
 *  - with it on, a prefill pass and a decode pass of two sequences (whose
 *    attention units store their own keys and values) each count one pass
 *    and add time to products, attention and per-token work; the three add
 *    up to no more than the wall time around the passes;
 *  - turned off again, further passes add nothing. */
#include "engine/engine.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROMPT_LEN 9

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Prefills two sequences (one pass each), then decodes one token of both in
 * one pass; returns the wall time of the three passes and leaves the
 * profile as it was before the decode pass in prefilled. */
static double run_passes(struct engine *engine, struct engine_profile *prefilled) {
    char err[256];
    struct kv_sequence seqs[2] = {{0}};
    int tokens[PROMPT_LEN + 1], positions[2];
    struct kv_sequence *batch_seqs[2] = {&seqs[0], &seqs[1]};
    uint8_t want[2] = {1, 1};
    for (int i = 0; i <= PROMPT_LEN; i++)
        tokens[i] = (i * 31 + 7) % engine->model->config.vocab_size;
    double start = now_seconds();
    for (int s = 0; s < 2; s++) {
        CHECK(kv_sequence_reserve(&engine->kv, &seqs[s], PROMPT_LEN + 1) == 0);
        CHECK_MSG(engine_run_sequence(engine, &seqs[s], tokens, PROMPT_LEN, 0, err, sizeof(err)) ==
                      0,
                  "prefill: %s", err);
        positions[s] = PROMPT_LEN;
    }
    *prefilled = engine->profile;
    int decode[2] = {tokens[PROMPT_LEN], tokens[PROMPT_LEN - 1]};
    struct engine_batch batch = {2, decode, positions, batch_seqs, want};
    CHECK_MSG(engine_forward(engine, &batch, err, sizeof(err)) == 2, "decode: %s", err);
    double elapsed = now_seconds() - start;
    for (int s = 0; s < 2; s++) kv_sequence_release(&engine->kv, &seqs[s]);
    return elapsed;
}

static int profile_is_zero(const struct engine_profile *p) {
    for (int w = 0; w < ENGINE_WORK_KINDS; w++)
        if (p->seconds[w] != 0) return 0;
    return p->passes == 0;
}

int main(void) {
    char path[512], err[512];
    struct model_random_params params = {MODEL_ARCH_LLAMA, 128, 256,           2, 4, 2, 300, 64,
                                         TENSOR_Q8_0,      7,   MODEL_MIX_NONE};
    struct model *model = NULL;
    struct engine engine;
    test_tmp_path(path, sizeof(path), "profile.gguf");
    CHECK_MSG(model_write_random(&params, path, err, sizeof(err)) == 0, "write: %s", err);
    CHECK_MSG(model_load(&model, path, err, sizeof(err)) == 0, "load: %s", err);
    if (!model) return test_status("test_engine_profile");
    struct engine_params ep = {.n_threads = 2,
                               .max_tokens = 16,
                               .kv_block_size = 4,
                               .kv_blocks = 16,
                               .kv_type = TENSOR_F16};
    CHECK_MSG(engine_init(&engine, model, &ep, err, sizeof(err)) == 0, "engine: %s", err);

    struct engine_profile prefilled;
    run_passes(&engine, &prefilled);
    CHECK_MSG(profile_is_zero(&engine.profile), "profiling off, the passes were timed");

    engine.profile.on = 1;
    double wall = run_passes(&engine, &prefilled);
    static const char *const names[] = {"products", "attention", "per-token work"};
    double sum = 0;
    CHECK_MSG(prefilled.passes == 2 && engine.profile.passes == 3,
              "%lld passes counted after the prefills and %lld after the decode, not 2 and 3",
              prefilled.passes, engine.profile.passes);
    for (int w = 0; w < ENGINE_WORK_KINDS; w++) {
        CHECK_MSG(prefilled.seconds[w] > 0, "no time for %s in the prefills", names[w]);
        CHECK_MSG(engine.profile.seconds[w] > prefilled.seconds[w],
                  "no time for %s in the decode pass", names[w]);
        sum += engine.profile.seconds[w];
    }
    CHECK_MSG(sum <= wall, "the kinds of work add up to %.6f s, more than the %.6f s of the passes",
              sum, wall);

    engine.profile.on = 0;
    struct engine_profile kept = engine.profile;
    run_passes(&engine, &prefilled);
    CHECK_MSG(memcmp(&kept, &engine.profile, sizeof(kept)) == 0,
              "profiling off again, the passes were timed");

    engine_free(&engine);
    model_free(model);
    remove(path);
    return test_status("test_engine_profile");
}
