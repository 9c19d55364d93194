/* test_batch_invariance.c -- invariant I5: a sequence's logits are bit for
 * bit the same whether its prompt is prefilled in one pass or in chunks,
 * whether other sequences share its passes (prefill chunks beside decode
 * tokens, or a pass of one decode token per sequence), and however many
 * threads run, with an F16, an F32 and a Q8_0 key/value cache -- also when a
 * decode batch is big enough to run in slices, a range of its tokens per
 * thread (slice.c). Runs on
 * seeded random models of every weight type (written by
 * model_write_random), so it needs nothing from ../shared.
 * ctest-labels: concurrency */
#include "engine/engine_internal.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define PROMPT_LEN 37
#define MAX_BATCH  64

/* One token of a batch under construction. */
struct batch_builder {
    int n;
    int tokens[MAX_BATCH];
    int positions[MAX_BATCH];
    struct kv_sequence *seqs[MAX_BATCH];
    uint8_t want[MAX_BATCH];
};

static void add_token(struct batch_builder *b, struct kv_sequence *seq, int token, int position,
                      int want) {
    b->tokens[b->n] = token;
    b->positions[b->n] = position;
    b->seqs[b->n] = seq;
    b->want[b->n] = (uint8_t)want;
    b->n++;
}

static int run(struct engine *engine, struct batch_builder *b) {
    char err[256];
    struct engine_batch batch = {b->n, b->tokens, b->positions, b->seqs, b->want};
    int rows = engine_forward(engine, &batch, err, sizeof(err));
    if (rows < 0) fprintf(stderr, "forward: %s\n", err);
    b->n = 0;
    return rows;
}

/* Fills the whole key/value cache with finite junk, so that a pass that
 * reads a position before it is stored (or never stores it) reads values
 * of no earlier pass -- the same prompt at the same positions would
 * otherwise have left exactly the right ones there. */
static void poison_cache(struct engine *engine) {
    memset(engine->kv.keys, 0x3c, engine->kv.side_bytes);
    memset(engine->kv.values, 0x3c, engine->kv.side_bytes);
}

/* Logits of the last prompt token of `prompt` prefilled in chunks of
 * `chunk`, copied to out. */
static void prefill_alone(struct engine *engine, const int *prompt, int chunk, float *out) {
    struct kv_sequence seq = {0};
    struct batch_builder b = {0};
    int vocab = engine->model->config.vocab_size;
    poison_cache(engine);
    CHECK(kv_sequence_reserve(&engine->kv, &seq, PROMPT_LEN) == 0);
    for (int i = 0; i < PROMPT_LEN; i++) {
        add_token(&b, &seq, prompt[i], i, i == PROMPT_LEN - 1);
        if (b.n == chunk || i == PROMPT_LEN - 1) CHECK(run(engine, &b) >= 0);
    }
    memcpy(out, engine->logits, (size_t)vocab * sizeof(float));
    kv_sequence_release(&engine->kv, &seq);
}

/* The same prompt prefilled while another sequence decodes and a third
 * prefills beside it, in every pass; logits of our last token into out. */
static void prefill_shared(struct engine *engine, const int *prompt, const int *other, float *out) {
    struct kv_sequence seq = {0}, neighbour = {0}, third = {0};
    struct batch_builder b = {0};
    int vocab = engine->model->config.vocab_size;
    poison_cache(engine);
    CHECK(kv_sequence_reserve(&engine->kv, &seq, PROMPT_LEN) == 0);
    CHECK(kv_sequence_reserve(&engine->kv, &neighbour, PROMPT_LEN) == 0);
    CHECK(kv_sequence_reserve(&engine->kv, &third, PROMPT_LEN) == 0);
    /* neighbour starts first: its whole prompt minus one token */
    for (int i = 0; i < PROMPT_LEN - 8; i++) add_token(&b, &neighbour, other[i], i, 0);
    CHECK(run(engine, &b) >= 0);
    /* then chunks of 5 of ours, each with one decode token of neighbour's and
     * 2 tokens of a third prompt */
    int decoded = PROMPT_LEN - 8, third_done = 0, rows = 0;
    for (int start = 0; start < PROMPT_LEN; start += 5) {
        if (decoded < PROMPT_LEN) add_token(&b, &neighbour, other[decoded], decoded, 1), decoded++;
        for (int k = 0; k < 2 && third_done < PROMPT_LEN; k++, third_done++)
            add_token(&b, &third, other[PROMPT_LEN - 1 - third_done], third_done, 0);
        int len = PROMPT_LEN - start < 5 ? PROMPT_LEN - start : 5;
        for (int i = 0; i < len; i++)
            add_token(&b, &seq, prompt[start + i], start + i, start + i == PROMPT_LEN - 1);
        int last_is_ours = start + len == PROMPT_LEN;
        rows = run(engine, &b);
        CHECK(rows >= 1);
        if (last_is_ours)
            memcpy(out, engine->logits + (size_t)(rows - 1) * vocab, (size_t)vocab * sizeof(float));
    }
    kv_sequence_release(&engine->kv, &seq);
    kv_sequence_release(&engine->kv, &neighbour);
    kv_sequence_release(&engine->kv, &third);
}

/* The last tokens of three sequences decoded in one pass, one token each
 * (a decode batch: each token's attention unit stores its own keys and
 * values): other's, the prompt's, other's again. The three tokens' logits
 * into out (3, vocab). */
static void decode_shared(struct engine *engine, const int *prompt, const int *other, float *out) {
    struct kv_sequence seqs[3] = {{0}};
    const int *prompts[3] = {other, prompt, other}; /* the third: other's tokens again */
    struct batch_builder b = {0};
    int vocab = engine->model->config.vocab_size;
    poison_cache(engine);
    for (int s = 0; s < 3; s++) {
        CHECK(kv_sequence_reserve(&engine->kv, &seqs[s], PROMPT_LEN) == 0);
        for (int i = 0; i < PROMPT_LEN - 1; i++) add_token(&b, &seqs[s], prompts[s][i], i, 0);
        CHECK(run(engine, &b) >= 0);
    }
    for (int s = 0; s < 3; s++)
        add_token(&b, &seqs[s], prompts[s][PROMPT_LEN - 1], PROMPT_LEN - 1, 1);
    CHECK(run(engine, &b) == 3);
    memcpy(out, engine->logits, 3 * (size_t)vocab * sizeof(float));
    for (int s = 0; s < 3; s++) kv_sequence_release(&engine->kv, &seqs[s]);
}

/* A decode batch of SLICED sequences, enough for a pass in slices with 2
 * threads. Sequence s holds the first length(s) tokens of prompt (odd s) or
 * of other (even s), so the tokens decode at different positions: short
 * pasts in the first half, long ones in the second, so that the slices run
 * each other's attention units. Every fifth wants no logits. Each wanted
 * row must be the logits of the same tokens run as one sequence alone. */
#define SLICED 19
static int sliced_length(int s) {
    return s < SLICED / 2 ? 2 + s % 4 : PROMPT_LEN - 1 - s % 4;
}

static void decode_sliced(struct engine *engine, const int *prompt, const int *other,
                          const char *what) {
    static struct kv_sequence seqs[SLICED];
    struct batch_builder b = {0};
    int vocab = engine->model->config.vocab_size;
    float *alone = malloc((size_t)SLICED * vocab * sizeof(float));
    char err[256];
    poison_cache(engine);
    for (int s = 0; s < SLICED; s++) {
        const int *tokens = s % 2 ? prompt : other;
        struct kv_sequence seq = {0};
        CHECK(kv_sequence_reserve(&engine->kv, &seq, PROMPT_LEN) == 0);
        for (int i = 0; i <= sliced_length(s); i++)
            add_token(&b, &seq, tokens[i], i, i == sliced_length(s));
        CHECK(run(engine, &b) == 1);
        memcpy(alone + (size_t)s * vocab, engine->logits, (size_t)vocab * sizeof(float));
        kv_sequence_release(&engine->kv, &seq);
    }
    for (int s = 0; s < SLICED; s++) {
        const int *tokens = s % 2 ? prompt : other;
        memset(&seqs[s], 0, sizeof(seqs[s]));
        CHECK(kv_sequence_reserve(&engine->kv, &seqs[s], PROMPT_LEN) == 0);
        for (int i = 0; i < sliced_length(s); i++) add_token(&b, &seqs[s], tokens[i], i, 0);
        CHECK(run(engine, &b) >= 0);
    }
    for (int s = 0; s < SLICED; s++) {
        const int *tokens = s % 2 ? prompt : other;
        add_token(&b, &seqs[s], tokens[sliced_length(s)], sliced_length(s), s % 5 != 4);
    }
    struct engine_batch batch = {b.n, b.tokens, b.positions, b.seqs, b.want};
    int threads = tensor_pool_size(engine->pool);
    CHECK_MSG(engine_can_slice(engine, &batch) == (threads > 1),
              "%s: a decode batch of %d tokens with %d threads %s run in slices", what, SLICED,
              threads, threads > 1 ? "is not" : "is");
    CHECK(engine_forward(engine, &batch, err, sizeof(err)) == SLICED - SLICED / 5);
    for (int s = 0, row = 0; s < SLICED; s++) {
        if (s % 5 == 4) continue;
        const float *want = alone + (size_t)s * vocab;
        const float *got = engine->logits + (size_t)row++ * vocab;
        CHECK_MSG(memcmp(got, want, (size_t)vocab * sizeof(float)) == 0,
                  "%s: sequence %d of a decode batch of %d with %d threads differs from its "
                  "sequence alone (max diff %g)",
                  what, s, SLICED, threads, test_max_abs_diff(got, want, vocab));
    }
    for (int s = 0; s < SLICED; s++) kv_sequence_release(&engine->kv, &seqs[s]);
    free(alone);
}

static void check_model_type(enum tensor_type type, enum model_arch arch) {
    char path[512], err[512];
    struct model_random_params params = {arch, 128, 256,           2, 4, 2, 300, 128,
                                         type, 7,   MODEL_MIX_NONE};
    struct model *model;
    struct engine engine;
    int prompt[PROMPT_LEN], other[PROMPT_LEN];
    test_tmp_path(path, sizeof(path), "invariance.gguf");
    CHECK(model_write_random(&params, path, err, sizeof(err)) == 0);
    if (model_load(&model, path, err, sizeof(err))) {
        CHECK_MSG(0, "load: %s", err);
        remove(path);
        return;
    }
    int vocab = model->config.vocab_size;
    for (int i = 0; i < PROMPT_LEN; i++) {
        prompt[i] = (i * 37 + 11) % vocab;
        other[i] = (i * 53 + 5) % vocab;
    }
    float *reference = malloc((size_t)vocab * sizeof(float));
    float *reference_other = malloc((size_t)vocab * sizeof(float));
    float *got = malloc(3 * (size_t)vocab * sizeof(float));
    /* each key/value cache type, each thread count (2 threads against 1) */
    static const enum tensor_type kv_types[] = {TENSOR_F16, TENSOR_F32, TENSOR_Q8_0};
    for (int run = 0; run < 6; run++) {
        int threads = 1 + run % 2;
        enum tensor_type kv_type = kv_types[run / 2];
        struct engine_params ep = {.n_threads = threads,
                                   .max_tokens = MAX_BATCH,
                                   .kv_block_size = 16,
                                   .kv_blocks = 64,
                                   .kv_type = kv_type};
        CHECK(engine_init(&engine, model, &ep, err, sizeof(err)) == 0);
        if (threads == 1) {
            prefill_alone(&engine, prompt, PROMPT_LEN, reference);
            prefill_alone(&engine, other, PROMPT_LEN, reference_other);
        }
        static const int chunks[] = {PROMPT_LEN, 1, 3, 16};
        for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
            prefill_alone(&engine, prompt, chunks[c], got);
            CHECK_MSG(memcmp(got, reference, (size_t)vocab * sizeof(float)) == 0,
                      "%s/%s, %s cache: chunks of %d with %d threads change the logits (max diff "
                      "%g)",
                      model_arch_name(arch), tensor_type_name(type), tensor_type_name(kv_type),
                      chunks[c], threads, test_max_abs_diff(got, reference, vocab));
        }
        prefill_shared(&engine, prompt, other, got);
        CHECK_MSG(memcmp(got, reference, (size_t)vocab * sizeof(float)) == 0,
                  "%s/%s, %s cache: sharing passes with %d threads changes the logits (max "
                  "diff %g)",
                  model_arch_name(arch), tensor_type_name(type), tensor_type_name(kv_type), threads,
                  test_max_abs_diff(got, reference, vocab));
        decode_shared(&engine, prompt, other, got);
        for (int s = 0; s < 3; s++) {
            const float *want = s == 1 ? reference : reference_other;
            const float *row = got + (size_t)s * vocab;
            CHECK_MSG(memcmp(row, want, (size_t)vocab * sizeof(float)) == 0,
                      "%s/%s, %s cache: token %d of a decode batch with %d threads differs from "
                      "its sequence alone (max diff %g)",
                      model_arch_name(arch), tensor_type_name(type), tensor_type_name(kv_type), s,
                      threads, test_max_abs_diff(row, want, vocab));
        }
        char what[128];
        snprintf(what, sizeof(what), "%s/%s, %s cache", model_arch_name(arch),
                 tensor_type_name(type), tensor_type_name(kv_type));
        decode_sliced(&engine, prompt, other, what);
        engine_free(&engine);
    }
    free(reference);
    free(reference_other);
    free(got);
    model_free(model);
    remove(path);
}

int main(void) {
    static const enum tensor_type types[] = {TENSOR_F32, TENSOR_F16, TENSOR_Q8_0, TENSOR_Q4_0};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
        check_model_type(types[t], MODEL_ARCH_LLAMA);
    check_model_type(TENSOR_Q8_0, MODEL_ARCH_QWEN2);
    check_model_type(TENSOR_F32, MODEL_ARCH_QWEN3);
    return test_status("test_batch_invariance");
}
