/* test_prefix_cache.c -- the prefix cache (src/engine/prefix.c) and the
 * runner's use of it.
 *
 * On the pool alone: a sequence shares the longest run of published full
 * blocks its tokens begin with, never the block of its last token; shared
 * blocks are counted, stay while held, become evictable when the last
 * holder lets go and are evicted later blocks of a chain first; a block
 * computed twice is cached once.
 *
 * In the runner, on a seeded random model (nothing from ../shared), for
 * every KV type (f16, q8_0, f32) and tensor-parallel degrees 1 and 2:
 * requests whose prompts share 0, 1, many and all of their blocks with an
 * earlier one, and one that continues an earlier conversation into its
 * generated tokens, get bit for bit the tokens and log-probabilities they
 * get with the cache off, greedy and seeded, under step budgets that cut
 * the shared prefix at different places; the tokens found cached are the
 * ones expected. Three requests with one prompt arriving together compute
 * it once. A pool too small for everyone preempts and recomputes through
 * the cache with the same results, and a prompt that needs every block is
 * admitted though cached blocks fill the pool.
 * ctest-labels: concurrency */
#include "engine/engine.h"
#include "runner/runner.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

/* ======================= the pool alone ======================= */

#define BS 4 /* positions per block in the pool tests */

static void fill(int *tokens, int n, int first) {
    for (int i = 0; i < n; i++) tokens[i] = first + i;
}

static void test_pool(void) {
    char err[256];
    struct kv_cache kv;
    CHECK_MSG(kv_cache_init(&kv, TENSOR_F32, 1, 1, 4, BS, 8, err, sizeof(err)) == 0, "%s", err);
    int a[32], b[32];
    fill(a, 32, 100);
    memcpy(b, a, sizeof(b));
    struct kv_sequence first = {0}, second = {0}, third = {0}, big = {0};

    /* 10 computed positions publish their two full blocks */
    CHECK(kv_sequence_share(&kv, &first, a, 11) == 0);
    CHECK(kv_sequence_reserve(&kv, &first, 11) == 0 && first.n_blocks == 3);
    kv_sequence_publish(&kv, &first, a, 10);
    CHECK(kv_blocks_cached(&kv) == 2 && kv_blocks_held(&kv) == 3);

    /* a prompt of 9 may share both (its last token is in block 2); one of 8 only block 0 */
    CHECK(kv_sequence_share(&kv, &second, b, 9) == 8);
    CHECK(second.n_blocks == 2 && second.blocks[0] == first.blocks[0] &&
          second.blocks[1] == first.blocks[1]);
    CHECK(kv_sequence_share(&kv, &third, b, 8) == 4 && third.blocks[0] == first.blocks[0]);
    kv_sequence_release(&kv, &third);
    CHECK(kv_blocks_held(&kv) == 3 && kv_available(&kv) == 5);

    /* a different token in block 1 shares block 0 only */
    b[6] = 7;
    CHECK(kv_sequence_share(&kv, &third, b, 20) == 4);
    CHECK(kv_sequence_reserve(&kv, &third, 20) == 0);
    kv_sequence_publish(&kv, &third, b, 20);
    CHECK(kv_blocks_cached(&kv) == 2 + 4); /* its blocks 1..4 are new chains */

    /* the last holder's release makes blocks evictable, not free */
    kv_sequence_release(&kv, &first);
    kv_sequence_release(&kv, &second);
    kv_sequence_release(&kv, &third);
    CHECK(kv_blocks_held(&kv) == 0 && kv_available(&kv) == 8 && kv.n_free == 2);
    CHECK(kv_blocks_cached(&kv) == 6);

    /* a reserve of 4 blocks takes the 2 free ones, then evicts the LRU's
     * first: third's chain was released last, its later blocks first, so
     * first's chain (blocks 0 and 1 of a) is evicted before it... */
    CHECK(kv_sequence_reserve(&kv, &big, 4 * BS) == 0 && kv_blocks_cached(&kv) == 4);
    CHECK(kv_sequence_share(&kv, &second, a, 9) == 4); /* block 0 of a is shared with b: kept */
    kv_sequence_release(&kv, &second);
    /* ...and the whole pool evicts everything */
    kv_sequence_release(&kv, &big);
    CHECK(kv_sequence_reserve(&kv, &big, 8 * BS) == 0 && kv_blocks_cached(&kv) == 0);
    CHECK(kv_sequence_reserve(&kv, &first, 1) == -1);
    kv_sequence_release(&kv, &big);

    /* two sequences computing one chain: the second's copy stays private */
    CHECK(kv_sequence_reserve(&kv, &first, 8) == 0 && kv_sequence_reserve(&kv, &second, 8) == 0);
    kv_sequence_publish(&kv, &first, a, 8);
    kv_sequence_publish(&kv, &second, a, 8);
    CHECK(kv_blocks_cached(&kv) == 2);
    kv_sequence_release(&kv, &second);
    CHECK(kv.n_free == 6);
    kv_sequence_release(&kv, &first);
    CHECK(kv.n_free == 6 && kv_available(&kv) == 8);
    kv_cache_free(&kv);
}

/* ======================= in the runner ======================= */

#define MAX_REQUESTS 12
#define MAX_OUTPUT   24
#define BLOCK        16

struct result {
    int tokens[MAX_OUTPUT];
    float logprobs[MAX_OUTPUT];
    int n_tokens;
    int finished; /* 0 while running, else the reason */
    int n_cached; /* prompt tokens found in the cache */
};

static struct result results[MAX_REQUESTS];
static long long prefill_tokens; /* tokens of the steps that were not decode tokens */

static void on_token(void *context, uint32_t client, const struct runner_token *t) {
    (void)context;
    (void)client;
    struct result *r = &results[t->id];
    if (r->n_tokens >= MAX_OUTPUT) return;
    r->logprobs[r->n_tokens] = t->logprob;
    r->tokens[r->n_tokens++] = t->token;
}

static void on_finished(void *context, uint32_t client, const struct runner_finished *f) {
    (void)context;
    (void)client;
    results[f->id].finished = (int)f->reason;
    results[f->id].n_cached = f->n_cached;
}

static void on_heartbeat(void *context, const struct runner_heartbeat *h) {
    (void)context;
    prefill_tokens += h->n_tokens - h->n_decode;
}

static const struct runner_sink sink = {on_token, on_finished, on_heartbeat, NULL, NULL};

/* A request: its prompt, and when to send it (after the steps of the
 * requests before it, or together with them). */
struct spec {
    int prompt[200];
    int n_prompt;
    int together; /* 1: sent in the same step as the request before it */
};

static void make_request(struct runner_request *q, uint64_t id, const struct spec *s) {
    memset(q, 0, sizeof(*q));
    runner_sampling_default(&q->sampling);
    q->sampling.temperature = id % 2 ? 0.8f : 0.0f; /* greedy and seeded */
    q->sampling.seed = 4242 + id;
    q->id = id;
    q->max_tokens = MAX_OUTPUT;
    q->logprobs = 1;
    q->ignore_eos = 1;
    q->n_prompt = s->n_prompt;
    q->prompt = malloc((size_t)s->n_prompt * sizeof(int));
    memcpy(q->prompt, s->prompt, (size_t)s->n_prompt * sizeof(int));
}

static struct runner *new_runner(struct engine *leader, int step_tokens, int prefix_cache) {
    char err[256];
    struct runner *r = NULL;
    struct runner_params p = {.max_sequences = 4,
                              .max_waiting = 64,
                              .step_tokens = step_tokens,
                              .trace_steps = 64,
                              .prefix_cache = prefix_cache};
    CHECK_MSG(runner_create(&r, leader, &p, &sink, err, sizeof(err)) == 0, "%s", err);
    return r;
}

/* Steps until nothing runs; -1 on a failed step. */
static int drain(struct runner *r) {
    char err[256];
    for (int steps = 0; runner_has_work(r) && steps < 100000; steps++) {
        int rc = runner_step(r, 0, err, sizeof(err));
        CHECK_MSG(rc >= 0, "%s", err);
        if (rc < 0) return -1;
    }
    return 0;
}

/* Sends the specs in order, each group of `together` ones at once, the
 * next group once the previous one finished. */
static void run_specs(struct runner *r, const struct spec *specs, int n) {
    memset(results, 0, sizeof(results));
    prefill_tokens = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && !specs[i].together && drain(r)) return;
        struct runner_request q;
        make_request(&q, (uint64_t)i, &specs[i]);
        runner_submit(r, 0, &q, clock_now_us());
    }
    drain(r);
}

static void check_same(const struct result *want, int n, const char *what) {
    for (int i = 0; i < n; i++) {
        const struct result *a = &want[i], *b = &results[i];
        CHECK_MSG(a->n_tokens == MAX_OUTPUT && b->n_tokens == MAX_OUTPUT,
                  "%s: request %d: %d and %d tokens", what, i, b->n_tokens, a->n_tokens);
        CHECK_MSG(!memcmp(a->tokens, b->tokens, sizeof(a->tokens)),
                  "%s: request %d: tokens differ from the cache off", what, i);
        CHECK_MSG(test_same_bits(a->logprobs, b->logprobs, MAX_OUTPUT),
                  "%s: request %d: logprobs differ in their bits", what, i);
        CHECK_MSG(b->finished == RUNNER_FINISH_LENGTH, "%s: request %d finished %d", what, i,
                  b->finished);
    }
}

/* Prompts sharing 0, 1, many and all blocks of the first, then one that
 * continues the first's conversation (its prompt, its output, more), then
 * three with one prompt arriving together. The first's output is known
 * only after a run: continuation is filled in from `earlier`. */
static int make_specs(struct spec *specs, const struct result *earlier) {
    int n = 0;
    struct spec base = {{0}, 80, 0}; /* five blocks */
    for (int i = 0; i < base.n_prompt; i++) base.prompt[i] = 1 + (i * 37) % 500;
    specs[n++] = base;
    struct spec other = {{0}, 50, 0}; /* nothing in common */
    for (int i = 0; i < other.n_prompt; i++) other.prompt[i] = 3 + (i * 11) % 400;
    specs[n++] = other;
    int shared[] = {BLOCK + 3, 4 * BLOCK + 5}; /* one block, four blocks */
    for (int k = 0; k < 2; k++) {
        struct spec s = base;
        s.n_prompt = 75;
        for (int i = shared[k]; i < s.n_prompt; i++) s.prompt[i] = 2 + (i * 13) % 450;
        specs[n++] = s;
    }
    specs[n++] = base; /* all of it: the last block is computed again */
    struct spec next = base;
    memcpy(next.prompt + base.n_prompt, earlier->tokens, sizeof(earlier->tokens));
    next.n_prompt = base.n_prompt + MAX_OUTPUT;
    for (int i = 0; i < 10; i++) next.prompt[next.n_prompt++] = 9 + i;
    specs[n++] = next;
    struct spec fresh = base;
    for (int i = 0; i < fresh.n_prompt; i++) fresh.prompt[i] = 5 + (i * 29) % 480;
    for (int k = 0; k < 3; k++) {
        specs[n] = fresh;
        specs[n++].together = k > 0;
    }
    return n;
}

/* Tokens each spec must find cached, given what the ones before left;
 * returns their sum. */
static int check_cached(int n_specs, const char *what) {
    /* base 0; other 0; one block; four; all but the last block (79 / 16);
     * the continuation everything the first computed: its prompt and all
     * but its last output token (103 positions: 6 blocks); the three
     * together: 0, then the first's four full blocks each */
    static const int want[] = {0, 0, BLOCK, 4 * BLOCK, 4 * BLOCK, 6 * BLOCK, 0, 64, 64};
    int sum = 0;
    CHECK(n_specs == (int)(sizeof(want) / sizeof(want[0])));
    for (int i = 0; i < n_specs; i++) {
        CHECK_MSG(results[i].n_cached == want[i], "%s: request %d found %d tokens cached, not %d",
                  what, i, results[i].n_cached, want[i]);
        sum += want[i];
    }
    return sum;
}

/* The leader of a new group of tp local ranks (its cache empty), or NULL. */
static struct engine *start_group(struct engine_group *group, const struct model *model,
                                  enum tensor_type kv_type, int tp) {
    char err[512];
    struct engine_params params = {.n_threads = 2,
                                   .max_tokens = 64,
                                   .kv_block_size = BLOCK,
                                   .kv_blocks = 64,
                                   .kv_type = kv_type};
    *group = (struct engine_group){.n = tp, .backend = COMM_LOCAL, .deadline = 20.0};
    if (engine_group_start(group, model, &params, err, sizeof(err)) == 0)
        return engine_group_leader(group);
    CHECK_MSG(0, "tp %d: %s", tp, err);
    engine_group_stop(group, err, sizeof(err));
    return NULL;
}

static void stop_group(struct engine_group *group) {
    char err[512];
    CHECK_MSG(engine_group_stop(group, err, sizeof(err)) == 0, "%s", err);
}

static void check_runner(const struct model *model, enum tensor_type kv_type, int tp) {
    char what[96];
    struct engine_group group;
    struct engine *leader = start_group(&group, model, kv_type, tp);
    if (!leader) return;
    static struct spec specs[MAX_REQUESTS];
    static struct result first[MAX_REQUESTS], want[MAX_REQUESTS];
    /* the first prompt alone gives the output the continuation extends */
    struct runner *r = new_runner(leader, 64, 0);
    make_specs(specs, &first[0]);
    run_specs(r, specs, 1);
    memcpy(first, results, sizeof(first));
    runner_free(r);
    int n = make_specs(specs, &first[0]);
    r = new_runner(leader, 64, 0);
    run_specs(r, specs, n);
    long long prefill_off = prefill_tokens;
    memcpy(want, results, sizeof(want));
    runner_free(r);
    stop_group(&group);
    /* budgets that cut the shared prefix inside blocks and at their ends,
     * each on a new group: an empty cache, as after a runner restart */
    static const int budgets[] = {7, 29, 64};
    for (size_t b = 0; b < sizeof(budgets) / sizeof(budgets[0]); b++) {
        snprintf(what, sizeof(what), "kv %s, tp %d, budget %d", tensor_type_name(kv_type), tp,
                 budgets[b]);
        leader = start_group(&group, model, kv_type, tp);
        if (!leader) return;
        r = new_runner(leader, budgets[b], 1);
        run_specs(r, specs, n);
        check_same(want, n, what);
        /* what the cache gave is what was not computed */
        int cached = check_cached(n, what);
        CHECK_MSG(prefill_off - prefill_tokens == cached,
                  "%s: %lld prefill tokens with the cache, %lld without, %d found cached", what,
                  prefill_tokens, prefill_off, cached);
        runner_free(r);
        CHECK_MSG(kv_blocks_held(&leader->kv) == 0, "%s: blocks still held", what);
        stop_group(&group);
    }
}

/* A pool of 14 blocks for four sequences that grow to ~7 blocks each: the
 * cache makes no difference to what preemption recomputes. */
static void check_preemption(const struct model *model) {
    char err[256];
    struct engine small;
    struct engine_params p = {.n_threads = 2,
                              .max_tokens = 64,
                              .kv_block_size = BLOCK,
                              .kv_blocks = 14,
                              .kv_type = TENSOR_F16};
    CHECK_MSG(engine_init(&small, model, &p, err, sizeof(err)) == 0, "%s", err);
    static struct spec specs[4];
    static struct result want[4];
    for (int k = 0; k < 4; k++) {
        specs[k].n_prompt = 70 + 5 * k;
        for (int i = 0; i < specs[k].n_prompt; i++) specs[k].prompt[i] = 1 + (i * 37) % 500;
        for (int i = 40; i < specs[k].n_prompt; i++) specs[k].prompt[i] = 1 + (i * k * 7) % 300;
        specs[k].together = k > 0;
    }
    struct runner *r = new_runner(&small, 64, 0);
    run_specs(r, specs, 4);
    memcpy(want, results, sizeof(want));
    runner_free(r);
    r = new_runner(&small, 64, 1);
    run_specs(r, specs, 4);
    check_same(want, 4, "preempted, cache on");
    runner_free(r);
    /* the cache is full of those chains now; a prompt that needs all 14
     * blocks is admitted by evicting them */
    CHECK(kv_blocks_cached(&small.kv) > 0 && kv_blocks_held(&small.kv) == 0);
    struct spec whole = {{0}, 14 * BLOCK - MAX_OUTPUT, 0};
    for (int i = 0; i < whole.n_prompt; i++) whole.prompt[i] = 2 + (i * 17) % 499;
    r = new_runner(&small, 64, 1);
    run_specs(r, &whole, 1);
    CHECK_MSG(results[0].n_tokens == MAX_OUTPUT && results[0].finished == RUNNER_FINISH_LENGTH,
              "a prompt needing the whole pool got %d tokens, finished %d", results[0].n_tokens,
              results[0].finished);
    runner_free(r);
    engine_free(&small);
}

int main(void) {
    char path[512], err[256];
    struct model *model = NULL;
    test_pool();
    /* head dimension 32 (q8_0 keys need a multiple of 32), two KV heads
     * (tp 2) */
    struct model_random_params shape = {MODEL_ARCH_LLAMA, 128, 256,           2, 4, 2, 512, 512,
                                        TENSOR_Q8_0,      11,  MODEL_MIX_NONE};
    test_tmp_path(path, sizeof(path), "prefix-model.gguf");
    CHECK_MSG(model_write_random(&shape, path, err, sizeof(err)) == 0, "%s", err);
    CHECK_MSG(model_load(&model, path, err, sizeof(err)) == 0, "%s", err);
    if (!model) return test_status("test_prefix_cache");
    static const enum tensor_type kv_types[] = {TENSOR_F16, TENSOR_Q8_0, TENSOR_F32};
    for (size_t t = 0; t < sizeof(kv_types) / sizeof(kv_types[0]); t++)
        for (int tp = 1; tp <= 2; tp++) check_runner(model, kv_types[t], tp);
    check_preemption(model);
    model_free(model);
    return test_status("test_prefix_cache");
}
