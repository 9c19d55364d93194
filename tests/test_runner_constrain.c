/* test_runner_constrain.c -- logit biases and grammars in the runner
 * (src/runner/constrain.c), in process.
 *
 * On a seeded random model with a byte-level vocabulary (nothing from
 * ../shared):
 *   - under a grammar, 60 requests at temperature 1 with different seeds
 *     each give text the grammar matches whole, and end when it is
 *     complete ("stop") or on an end token where it may end;
 *   - a request resumed with its first tokens in the prompt (as the gateway
 *     resubmits after a runner restart) continues with exactly the tokens
 *     of the uninterrupted run, and so does one run beside others;
 *   - a bias of +100 makes greedy choose its token every time; -100 bans a
 *     token greedy would choose;
 *   - a grammar with a trigger leaves the output free (the tokens of a run
 *     without the grammar) until the trigger appears; once it has (here in
 *     the tokens a resumed request already generated), the rest matches the
 *     grammar from the trigger on;
 *   - a grammar that does not compile, and a bias on a token outside the
 *     vocabulary, are refused with their reason. */
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "runner/runner.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#define MAX_REQUESTS 64
#define MAX_OUTPUT   48

struct result {
    int tokens[MAX_OUTPUT];
    int n_tokens;
    int finished; /* 0 while running, else the reason */
    char message[200];
};

static struct result results[MAX_REQUESTS];
static const struct tokenizer *tok;

static void on_token(void *context, uint32_t client, const struct runner_token *t) {
    (void)context;
    (void)client;
    struct result *r = &results[t->id];
    if (r->n_tokens < MAX_OUTPUT) r->tokens[r->n_tokens++] = t->token;
}

static void on_finished(void *context, uint32_t client, const struct runner_finished *f) {
    (void)context;
    (void)client;
    results[f->id].finished = (int)f->reason;
    snprintf(results[f->id].message, sizeof(results[f->id].message), "%s", f->message);
}

static void on_heartbeat(void *context, const struct runner_heartbeat *h) {
    (void)context;
    (void)h;
}

static const struct runner_sink sink = {on_token, on_finished, on_heartbeat, NULL, NULL};

static struct runner *new_runner(struct engine *engine) {
    char err[256];
    struct runner *r = NULL;
    struct runner_params p = {.max_sequences = 8,
                              .max_waiting = 64,
                              .step_tokens = 64,
                              .trace_steps = 64,
                              .n_eos = 1,
                              .eos = {tokenizer_eos(tok)},
                              .tokenizer = tok};
    CHECK_MSG(runner_create(&r, engine, &p, &sink, err, sizeof(err)) == 0, "%s", err);
    return r;
}

/* A request for prompt (n tokens) under grammar (NULL: none). */
static void make_request(struct runner_request *q, uint64_t id, const int *prompt, int n,
                         const char *grammar, float temperature) {
    memset(q, 0, sizeof(*q));
    runner_sampling_default(&q->sampling);
    q->sampling.temperature = temperature;
    q->sampling.seed = 77 + id;
    q->id = id;
    q->max_tokens = MAX_OUTPUT;
    q->n_prompt = n;
    q->prompt = malloc((size_t)n * sizeof(int));
    memcpy(q->prompt, prompt, (size_t)n * sizeof(int));
    q->grammar = grammar ? strdup(grammar) : NULL;
}

static void drain(struct runner *r) {
    char err[256];
    for (int steps = 0; runner_has_work(r) && steps < 100000; steps++)
        if (runner_step(r, 0, err, sizeof(err)) < 0) {
            CHECK_MSG(0, "%s", err);
            return;
        }
}

/* The bytes of a result's tokens. */
static size_t text_of(const struct result *r, char *out, size_t size) {
    size_t n = 0;
    for (int i = 0; i < r->n_tokens; i++) {
        size_t len;
        const char *bytes = tokenizer_token_bytes(tok, r->tokens[i], &len);
        if (n + len >= size) break;
        memcpy(out + n, bytes, len);
        n += len;
    }
    out[n] = '\0';
    return n;
}

static const char json_like[] =
    "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws name ws \",\" ws \"\\\"age\\\"\" ws \":\" ws "
    "age ws \"}\"\n"
    "name ::= \"\\\"\" [a-z]{1,8} \"\\\"\"\n"
    "age ::= [1-9] [0-9]?\n"
    "ws ::= \" \"?\n";

static const int prompt[] = {1, 40, 61, 200, 301, 17, 88};
#define N_PROMPT ((int)(sizeof(prompt) / sizeof(prompt[0])))

static void test_grammar_outputs(struct engine *engine, const struct grammar *g) {
    struct runner *r = new_runner(engine);
    memset(results, 0, sizeof(results));
    for (int i = 0; i < 60; i++) {
        struct runner_request q;
        make_request(&q, (uint64_t)i, prompt, N_PROMPT, json_like, 1.0f);
        runner_submit(r, 0, &q, clock_now_us());
        if (i % 8 == 7) drain(r);
    }
    drain(r);
    runner_free(r);
    for (int i = 0; i < 60; i++) {
        char text[MAX_OUTPUT * 16 + 1];
        size_t n = text_of(&results[i], text, sizeof(text));
        struct grammar_state *s = grammar_state_create(g);
        int matched = s && grammar_accept(s, text, n) == 0 && grammar_can_end(s);
        CHECK_MSG(matched, "request %d: '%s' does not match the grammar", i, text);
        CHECK_MSG(results[i].finished == RUNNER_FINISH_STOP ||
                      results[i].finished == RUNNER_FINISH_EOS,
                  "request %d finished %d (%s)", i, results[i].finished, results[i].message);
        grammar_state_free(s);
    }
}

/* A request resumed after k tokens continues as the whole run did. */
static void test_resumed(struct engine *engine) {
    struct runner *r = new_runner(engine);
    struct runner_request q;
    memset(results, 0, sizeof(results));
    make_request(&q, 0, prompt, N_PROMPT, json_like, 1.0f);
    runner_submit(r, 0, &q, clock_now_us());
    drain(r);
    struct result whole = results[0];
    CHECK(whole.n_tokens > 4);
    int k = whole.n_tokens / 2, resumed[N_PROMPT + MAX_OUTPUT];
    memcpy(resumed, prompt, sizeof(prompt));
    memcpy(resumed + N_PROMPT, whole.tokens, (size_t)k * sizeof(int));
    memset(results, 0, sizeof(results));
    make_request(&q, 0, resumed, N_PROMPT + k, json_like, 1.0f);
    q.sampling.seed = 77; /* request 0's */
    q.resumed = k;
    q.max_tokens = MAX_OUTPUT - k;
    runner_submit(r, 0, &q, clock_now_us());
    /* beside an unconstrained neighbour */
    make_request(&q, 1, prompt, N_PROMPT, NULL, 1.0f);
    runner_submit(r, 0, &q, clock_now_us());
    drain(r);
    CHECK_MSG(results[0].n_tokens == whole.n_tokens - k, "resumed: %d tokens, expected %d",
              results[0].n_tokens, whole.n_tokens - k);
    CHECK_MSG(
        !memcmp(results[0].tokens, whole.tokens + k, (size_t)(whole.n_tokens - k) * sizeof(int)),
        "the resumed request's tokens differ from the whole run's");
    CHECK(results[0].finished == whole.finished);
    runner_free(r);
}

static void test_biases(struct engine *engine) {
    struct runner *r = new_runner(engine);
    struct runner_request q;
    static struct runner_bias favour[1] = {{300, 100.0f}};
    memset(results, 0, sizeof(results));
    make_request(&q, 0, prompt, N_PROMPT, NULL, 0.0f);
    q.max_tokens = 8;
    runner_submit(r, 0, &q, clock_now_us());
    drain(r);
    struct result greedy = results[0];
    CHECK(greedy.n_tokens == 8);
    make_request(&q, 1, prompt, N_PROMPT, NULL, 0.0f);
    q.max_tokens = 8;
    q.n_biases = 1;
    q.biases = malloc(sizeof(favour));
    memcpy(q.biases, favour, sizeof(favour));
    runner_submit(r, 0, &q, clock_now_us());
    make_request(&q, 2, prompt, N_PROMPT, NULL, 0.0f);
    q.max_tokens = 8;
    q.n_biases = 1;
    q.biases = malloc(sizeof(struct runner_bias));
    q.biases[0] = (struct runner_bias){greedy.tokens[0], -100.0f};
    runner_submit(r, 0, &q, clock_now_us());
    drain(r);
    for (int i = 0; i < results[1].n_tokens; i++)
        CHECK_MSG(results[1].tokens[i] == 300, "+100 on token 300: token %d is %d", i,
                  results[1].tokens[i]);
    CHECK(results[1].n_tokens == 8);
    for (int i = 0; i < results[2].n_tokens; i++)
        CHECK_MSG(results[2].tokens[i] != greedy.tokens[0], "-100 on token %d: it came at %d",
                  greedy.tokens[0], i);
    CHECK(results[2].n_tokens == 8 && results[2].tokens[0] != greedy.tokens[0]);
    runner_free(r);
}

static const char tagged[] = "root ::= \"<c>\" [a-z]{1,5} \"</c>\"\n";

/* The ids of text's bytes: the vocabulary has a token for every byte. */
static int byte_tokens(const char *text, int *ids) {
    int n = 0;
    for (const char *c = text; *c; c++) {
        ids[n] = -1;
        for (int id = 0; id < tokenizer_vocab_size(tok) && ids[n] < 0; id++) {
            size_t len;
            const char *bytes = tokenizer_token_bytes(tok, id, &len);
            if (len == 1 && bytes[0] == *c) ids[n] = id;
        }
        n++;
    }
    return n;
}

static void test_trigger(struct engine *engine, const struct grammar *g) {
    struct runner *r = new_runner(engine);
    struct runner_request q;
    memset(results, 0, sizeof(results));
    /* no trigger in the output: the same tokens as with no grammar at all */
    make_request(&q, 0, prompt, N_PROMPT, NULL, 1.0f);
    runner_submit(r, 0, &q, clock_now_us());
    make_request(&q, 1, prompt, N_PROMPT, tagged, 1.0f);
    q.sampling.seed = 77;
    q.grammar_trigger = strdup("<c>");
    runner_submit(r, 0, &q, clock_now_us());
    drain(r);
    CHECK_MSG(results[1].n_tokens == results[0].n_tokens &&
                  !memcmp(results[0].tokens, results[1].tokens, sizeof(results[0].tokens)),
              "a trigger that never appears changed the output");
    /* the trigger in the tokens already generated: the rest is constrained */
    int resumed[N_PROMPT + 8];
    memcpy(resumed, prompt, sizeof(prompt));
    int k = byte_tokens("xy<c>", resumed + N_PROMPT);
    for (int i = 2; i < 12; i++) {
        make_request(&q, (uint64_t)i, resumed, N_PROMPT + k, tagged, 1.0f);
        q.grammar_trigger = strdup("<c>");
        q.resumed = k;
        runner_submit(r, 0, &q, clock_now_us());
    }
    drain(r);
    for (int i = 2; i < 12; i++) {
        char text[MAX_OUTPUT * 16 + 4] = "<c>";
        size_t n = 3 + text_of(&results[i], text + 3, sizeof(text) - 3);
        struct grammar_state *s = grammar_state_create(g);
        int matched = s && grammar_accept(s, text, n) == 0 && grammar_can_end(s);
        CHECK_MSG(matched && results[i].finished == RUNNER_FINISH_STOP,
                  "after the trigger, request %d wrote '%s' (finished %d)", i, text,
                  results[i].finished);
        grammar_state_free(s);
    }
    runner_free(r);
}

static void test_refusals(struct engine *engine) {
    struct runner *r = new_runner(engine);
    struct runner_request q;
    memset(results, 0, sizeof(results));
    make_request(&q, 0, prompt, N_PROMPT, "root ::= valu", 1.0f);
    runner_submit(r, 0, &q, clock_now_us());
    CHECK_MSG(results[0].finished == RUNNER_FINISH_ERROR &&
                  strstr(results[0].message, "grammar: 1:10: ") == results[0].message &&
                  strstr(results[0].message, "valu") != NULL,
              "a bad grammar: finished %d, '%s'", results[0].finished, results[0].message);
    make_request(&q, 1, prompt, N_PROMPT, NULL, 1.0f);
    q.n_biases = 1;
    q.biases = malloc(sizeof(struct runner_bias));
    q.biases[0] = (struct runner_bias){512, 1.0f};
    runner_submit(r, 0, &q, clock_now_us());
    CHECK_MSG(
        results[1].finished == RUNNER_FINISH_ERROR &&
            !strcmp(results[1].message, "logit_bias token 512 is outside the vocabulary (0..511)"),
        "a bias out of the vocabulary: finished %d, '%s'", results[1].finished, results[1].message);
    CHECK(!runner_has_work(r));
    runner_free(r);
}

int main(void) {
    char path[512], err[256];
    struct model *model = NULL;
    struct tokenizer *loaded = NULL;
    struct model_random_params shape = {MODEL_ARCH_LLAMA, 64, 128,           2, 4, 2, 512, 512,
                                        TENSOR_Q8_0,      5,  MODEL_MIX_NONE};
    test_tmp_path(path, sizeof(path), "constrain-model.gguf");
    CHECK_MSG(model_write_random(&shape, path, err, sizeof(err)) == 0, "%s", err);
    CHECK_MSG(model_load(&model, path, err, sizeof(err)) == 0, "%s", err);
    if (!model) return test_status("test_runner_constrain");
    CHECK_MSG(tokenizer_load_gguf(&loaded, model->gguf, err, sizeof(err)) == 0, "%s", err);
    struct grammar *g = NULL;
    CHECK_MSG(grammar_compile(&g, json_like, strlen(json_like), err, sizeof(err)) == 0, "%s", err);
    struct engine engine;
    struct engine_params p = {.n_threads = 2,
                              .max_tokens = 64,
                              .kv_block_size = 16,
                              .kv_blocks = 128,
                              .kv_type = TENSOR_F16};
    CHECK_MSG(engine_init(&engine, model, &p, err, sizeof(err)) == 0, "%s", err);
    tok = loaded;
    if (loaded && g) {
        test_grammar_outputs(&engine, g);
        test_resumed(&engine);
        test_biases(&engine);
        test_refusals(&engine);
        struct grammar *g_tagged = NULL;
        CHECK_MSG(grammar_compile(&g_tagged, tagged, strlen(tagged), err, sizeof(err)) == 0, "%s",
                  err);
        if (g_tagged) test_trigger(&engine, g_tagged);
        grammar_free(g_tagged);
    }
    engine_free(&engine);
    grammar_free(g);
    tokenizer_free(loaded);
    model_free(model);
    return test_status("test_runner_constrain");
}
