/* test_runner_embed.c -- embed requests in the continuous batching runner.
 *
 * On a seeded random model (nothing from ../shared):
 *   - inputs of 5, 40 and 100 tokens embedded while two streams decode
 *     beside them, in chunks of a 32-token step budget, give bit for bit
 *     the vector of one engine_embed_sequence pass pooled alone, with mean,
 *     last and cls pooling; each is one EMBEDDING before a FINISHED (eos,
 *     nothing generated);
 *   - the streams beside them get exactly the tokens they get alone;
 *   - with the prefix cache, a repeated input is found cached under last
 *     pooling (same vector) and never under mean pooling, which needs every
 *     position's state;
 *   - an input as long as the whole context is embedded;
 *   - a cancelled input frees its blocks and sends no vector;
 *   - refusals: a model without a pooling, an input with a grammar, one
 *     longer than the context;
 *   - a file's {arch}.pooling_type is read as the runner's default (qwen3's
 *     3 is last; a number outside 1..3, or none, is none). */
#include "engine/engine.h"
#include "runner/runner.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define MAX_REQUESTS 8
#define MAX_OUTPUT   16
#define DIM          64

struct result {
    int tokens[MAX_OUTPUT];
    int n_tokens;
    float vector[DIM];
    int n_vectors;   /* EMBEDDING frames */
    int vector_size; /* n of the last one */
    int finished;    /* reason, 0 while running */
    int n_generated, n_cached;
    char message[200];
};

static struct result results[MAX_REQUESTS];

static void on_token(void *context, uint32_t client, const struct runner_token *t) {
    (void)context, (void)client;
    struct result *r = &results[t->id];
    if (r->n_tokens < MAX_OUTPUT) r->tokens[r->n_tokens++] = t->token;
}

static void on_finished(void *context, uint32_t client, const struct runner_finished *f) {
    (void)context, (void)client;
    struct result *r = &results[f->id];
    r->finished = (int)f->reason;
    r->n_generated = f->n_generated;
    r->n_cached = f->n_cached;
    snprintf(r->message, sizeof(r->message), "%s", f->message);
}

static void on_heartbeat(void *context, const struct runner_heartbeat *h) {
    (void)context, (void)h;
}

static void on_embedding(void *context, uint32_t client, const struct runner_embedding *e) {
    (void)context, (void)client;
    struct result *r = &results[e->id];
    CHECK_MSG(r->finished == 0, "request %llu: a vector after its FINISHED",
              (unsigned long long)e->id);
    r->n_vectors++;
    r->vector_size = e->n;
    memcpy(r->vector, e->values, (size_t)(e->n < DIM ? e->n : DIM) * sizeof(float));
}

static const struct runner_sink sink = {on_token, on_finished, on_heartbeat, NULL, on_embedding};

/* What one request asks: an input to embed, or a prompt to continue. */
struct spec {
    int n_prompt;
    int embed;
    int seed; /* makes its tokens */
};

static int *make_tokens(const struct spec *s, int vocab) {
    int *tokens = malloc((size_t)s->n_prompt * sizeof(int));
    for (int i = 0; i < s->n_prompt; i++)
        tokens[i] =
            (int)(((uint64_t)s->seed * 7919u + (uint64_t)i * 104729u) % (uint64_t)(vocab - 1)) + 1;
    return tokens;
}

static void make_request(struct runner_request *q, uint64_t id, const struct spec *s, int vocab) {
    memset(q, 0, sizeof(*q));
    runner_sampling_default(&q->sampling);
    q->sampling.temperature = 0;
    q->id = id;
    q->max_tokens = s->embed ? 1 : MAX_OUTPUT;
    q->ignore_eos = !s->embed;
    q->embed = s->embed;
    q->n_prompt = s->n_prompt;
    q->prompt = make_tokens(s, vocab);
}

static struct runner *new_runner(struct engine *engine, enum runner_pooling pooling,
                                 int prefix_cache) {
    char err[256];
    struct runner *r = NULL;
    struct runner_params p = {.max_sequences = 4,
                              .max_waiting = 16,
                              .step_tokens = 32,
                              .trace_steps = 64,
                              .prefix_cache = prefix_cache,
                              .pooling = pooling};
    CHECK_MSG(runner_create(&r, engine, &p, &sink, err, sizeof(err)) == 0, "%s", err);
    return r;
}

/* Submits every spec at once and steps until all finished. */
static void run(struct runner *r, const struct spec *specs, int n, int vocab) {
    char err[256];
    memset(results, 0, sizeof(results));
    for (int i = 0; i < n; i++) {
        struct runner_request q;
        make_request(&q, (uint64_t)i, &specs[i], vocab);
        runner_submit(r, 0, &q, clock_now_us());
    }
    for (int steps = 0; runner_has_work(r) && steps < 10000; steps++)
        CHECK_MSG(runner_step(r, 0, err, sizeof(err)) >= 0, "%s", err);
    CHECK(!runner_has_work(r));
}

/* The vector of one pass over the spec's tokens alone, pooled. */
static void reference(struct engine *engine, const struct spec *s, int vocab,
                      enum engine_pooling pooling, float *out) {
    char err[256] = "";
    int n = s->n_prompt, *tokens = make_tokens(s, vocab);
    float *hidden = malloc((size_t)n * DIM * sizeof(float));
    double sum[DIM] = {0};
    struct kv_sequence seq = {0};
    CHECK(kv_sequence_reserve(&engine->kv, &seq, n) == 0);
    CHECK_MSG(engine_embed_sequence(engine, &seq, tokens, n, hidden, err, sizeof(err)) == 0, "%s",
              err);
    for (int t = 0; t < n; t++)
        if (engine_pooling_wants(pooling, t, n)) engine_pooling_add(sum, hidden + t * DIM, DIM);
    engine_pooling_finish(pooling, sum, n, DIM, out);
    kv_sequence_release(&engine->kv, &seq);
    free(hidden);
    free(tokens);
}

/* Three inputs and two streams together, under each pooling. */
static void test_mixed(struct engine *engine, int vocab) {
    const struct spec specs[] = {
        {12, 0, 1}, {5, 1, 2}, {40, 1, 3}, {9, 0, 4}, {100, 1, 5},
    };
    int n = (int)(sizeof(specs) / sizeof(specs[0]));
    struct result streams_alone[2];
    for (int k = 0; k < 2; k++) { /* each stream alone */
        struct runner *r = new_runner(engine, RUNNER_POOLING_MEAN, 0);
        run(r, &specs[k * 3], 1, vocab);
        streams_alone[k] = results[0];
        runner_free(r);
    }
    const enum runner_pooling poolings[] = {RUNNER_POOLING_MEAN, RUNNER_POOLING_LAST,
                                            RUNNER_POOLING_CLS};
    for (int p = 0; p < 3; p++) {
        struct runner *r = new_runner(engine, poolings[p], 0);
        run(r, specs, n, vocab);
        runner_free(r);
        struct result got[MAX_REQUESTS];
        memcpy(got, results, sizeof(got));
        for (int i = 0; i < n; i++) {
            const struct result *g = &got[i];
            if (!specs[i].embed) {
                const struct result *alone = &streams_alone[i == 0 ? 0 : 1];
                CHECK_MSG(g->n_tokens == alone->n_tokens && g->n_vectors == 0 &&
                              !memcmp(g->tokens, alone->tokens, sizeof(int) * (size_t)g->n_tokens),
                          "pooling %s: stream %d differs from its run alone",
                          runner_pooling_name(poolings[p]), i);
                continue;
            }
            float want[DIM];
            reference(engine, &specs[i], vocab, (enum engine_pooling)poolings[p], want);
            CHECK_MSG(g->finished == RUNNER_FINISH_EOS && g->n_vectors == 1 &&
                          g->vector_size == DIM && g->n_generated == 0 && g->n_tokens == 0,
                      "pooling %s, input %d: reason %d, %d vectors of %d, %d generated (%s)",
                      runner_pooling_name(poolings[p]), i, g->finished, g->n_vectors,
                      g->vector_size, g->n_generated, g->message);
            CHECK_MSG(test_same_bits(g->vector, want, DIM),
                      "pooling %s, input %d of %d tokens: not the vector of one pass alone",
                      runner_pooling_name(poolings[p]), i, specs[i].n_prompt);
        }
    }
}

/* A repeated input: last pooling reuses the cached blocks, mean never. */
static void test_prefix_cache(struct engine *engine, int vocab) {
    const struct spec input = {70, 1, 9};
    const enum runner_pooling poolings[] = {RUNNER_POOLING_LAST, RUNNER_POOLING_MEAN};
    for (int p = 0; p < 2; p++) {
        struct runner *r = new_runner(engine, poolings[p], 1);
        run(r, &input, 1, vocab);
        struct result first = results[0];
        run(r, &input, 1, vocab);
        runner_free(r);
        int reused = poolings[p] == RUNNER_POOLING_LAST;
        CHECK_MSG(first.n_cached == 0 &&
                      (reused ? results[0].n_cached == 64 : results[0].n_cached == 0),
                  "pooling %s: %d then %d tokens found cached", runner_pooling_name(poolings[p]),
                  first.n_cached, results[0].n_cached);
        CHECK_MSG(results[0].n_vectors == 1 && test_same_bits(first.vector, results[0].vector, DIM),
                  "pooling %s: the cached run's vector differs", runner_pooling_name(poolings[p]));
    }
}

/* The whole context; a cancel; the refusals. */
static void test_limits(struct engine *engine, int vocab) {
    char err[256];
    struct runner *r = new_runner(engine, RUNNER_POOLING_MEAN, 0);
    const struct spec whole = {engine->context_length, 1, 3};
    run(r, &whole, 1, vocab);
    CHECK_MSG(results[0].finished == RUNNER_FINISH_EOS && results[0].n_vectors == 1,
              "an input of the whole context: reason %d (%s)", results[0].finished,
              results[0].message);
    const struct spec longer = {engine->context_length + 1, 1, 3};
    run(r, &longer, 1, vocab);
    CHECK_MSG(results[0].finished == RUNNER_FINISH_ERROR &&
                  strstr(results[0].message, "the input has 129 tokens; the context holds 128"),
              "%s", results[0].message);

    /* cancelled after its first chunk: its blocks come back, no vector */
    struct runner_request q;
    memset(results, 0, sizeof(results));
    make_request(&q, 0, &(struct spec){100, 1, 4}, vocab);
    runner_submit(r, 0, &q, clock_now_us());
    CHECK(runner_step(r, 0, err, sizeof(err)) == 1);
    CHECK(kv_blocks_held(&engine->kv) > 0);
    runner_cancel(r, 0, 0);
    CHECK(results[0].finished == RUNNER_FINISH_CANCELLED && results[0].n_vectors == 0);
    CHECK(kv_blocks_held(&engine->kv) == 0 && !runner_has_work(r));

    /* a grammar has nothing to constrain */
    make_request(&q, 1, &(struct spec){4, 1, 4}, vocab);
    q.grammar = strdup("root ::= \"a\"");
    runner_submit(r, 0, &q, clock_now_us());
    CHECK_MSG(
        results[1].finished == RUNNER_FINISH_ERROR &&
            !strcmp(results[1].message, "an input to embed takes no grammar, biases or stops"),
        "%s", results[1].message);
    runner_free(r);

    r = new_runner(engine, RUNNER_POOLING_NONE, 0);
    make_request(&q, 2, &(struct spec){4, 1, 4}, vocab);
    runner_submit(r, 0, &q, clock_now_us());
    CHECK_MSG(results[2].finished == RUNNER_FINISH_ERROR &&
                  strstr(results[2].message, "names no pooling ({arch}.pooling_type)") &&
                  strstr(results[2].message, "--pooling mean, last or cls"),
              "%s", results[2].message);
    runner_free(r);
}

/* engine_model_pooling on a file with only the keys it reads. */
static void test_file_pooling(void) {
    const struct {
        int has_key;
        uint32_t type;
        enum engine_pooling want;
    } cases[] = {{1, 3, ENGINE_POOLING_LAST}, {1, 1, ENGINE_POOLING_MEAN},
                 {1, 2, ENGINE_POOLING_CLS},  {1, 7, ENGINE_POOLING_NONE},
                 {1, 0, ENGINE_POOLING_NONE}, {0, 0, ENGINE_POOLING_NONE}};
    char path[512], err[256];
    test_tmp_path(path, sizeof(path), "runner-embed-pooling.gguf");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gguf_writer *w = gguf_writer_create();
        gguf_writer_set_string(w, "general.architecture", "qwen3");
        if (cases[i].has_key) gguf_writer_set_u32(w, "qwen3.pooling_type", cases[i].type);
        struct model m;
        memset(&m, 0, sizeof(m));
        CHECK_MSG(gguf_writer_write(w, path, err, sizeof(err)) == 0 &&
                      gguf_open(&m.gguf, path, err, sizeof(err)) == 0,
                  "%s", err);
        gguf_writer_free(w);
        if (!m.gguf) continue;
        CHECK_MSG(engine_model_pooling(&m) == cases[i].want, "pooling_type %u: %d, expected %d",
                  cases[i].type, (int)engine_model_pooling(&m), (int)cases[i].want);
        gguf_close(m.gguf);
    }
}

int main(void) {
    char path[512], err[256];
    struct model *model = NULL;
    struct engine engine;
    struct model_random_params shape = {MODEL_ARCH_LLAMA, DIM, 128,           2, 4, 2, 512, 128,
                                        TENSOR_Q8_0,      11,  MODEL_MIX_NONE};
    test_tmp_path(path, sizeof(path), "runner-embed-model.gguf");
    CHECK_MSG(model_write_random(&shape, path, err, sizeof(err)) == 0, "%s", err);
    CHECK_MSG(model_load(&model, path, err, sizeof(err)) == 0, "%s", err);
    if (!model) return test_status("test_runner_embed");
    struct engine_params p = {.n_threads = 2,
                              .max_tokens = 128,
                              .kv_block_size = 16,
                              .kv_blocks = 64,
                              .kv_type = TENSOR_F16};
    CHECK_MSG(engine_init(&engine, model, &p, err, sizeof(err)) == 0, "%s", err);
    test_mixed(&engine, shape.vocab_size);
    test_prefix_cache(&engine, shape.vocab_size);
    test_limits(&engine, shape.vocab_size);
    test_file_pooling();
    engine_free(&engine);
    model_free(model);
    return test_status("test_runner_embed");
}
