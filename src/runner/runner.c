/* runner.c -- the step loop of one model instance (leader side).
 *
 * runner_step plans a step (scheduler.c), runs it on every rank
 * (engine_submit_step, engine_collect_step), then samples one token for
 * every sequence whose known tokens were all computed, reports it, and
 * finishes sequences that hit a stop condition. Requests enter and leave
 * only between steps, so the step in flight never changes under the engine
 * (DESIGN.md I1). In a pipeline, steps of distinct sequences are submitted
 * while fewer than max_in_flight are out (SUBMIT), then the oldest is
 * collected (COLLECT): the states of docs/protocol/pipeline.pml. A
 * sequence cancelled while in flight is finished when its step returns. Each sequence
 * samples with its own seeded random stream from its own logits row, and
 * the kernels give the same row whatever shares the batch (I5), so a
 * request's tokens do not depend on its neighbours. */
#include "runner_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int check_params(const struct runner_params *p, const struct engine *engine, char *err,
                        size_t errlen) {
    if (p->max_sequences < 1 || p->max_waiting < 0 || p->trace_steps < 1 || p->n_eos < 0 ||
        p->n_eos > RUNNER_EOS_MAX) {
        snprintf(err, errlen, "runner: bad limits (max sequences %d, max waiting %d)",
                 p->max_sequences, p->max_waiting);
        return -1;
    }
    if (p->step_tokens <= p->max_sequences || p->step_tokens > engine->max_tokens) {
        snprintf(err, errlen,
                 "runner: the step budget (%d tokens) must exceed the sequence limit (%d) so "
                 "new prompts always get prefill tokens, and fit the engine's batch (%d)",
                 p->step_tokens, p->max_sequences, engine->max_tokens);
        return -1;
    }
    return 0;
}

/* A sampling work space for each of the leader pool's n threads. */
static int make_scratch(struct runner *r, int n) {
    r->scratch = calloc((size_t)n, sizeof(*r->scratch));
    if (!r->scratch) return -1;
    for (; r->n_scratch < n; r->n_scratch++)
        if (sampler_scratch_init(&r->scratch[r->n_scratch], r->vocab_size)) return -1;
    return 0;
}

int runner_create(struct runner **out, struct engine *leader, const struct runner_params *params,
                  const struct runner_sink *sink, char *err, size_t errlen) {
    *out = NULL;
    if (check_params(params, leader, err, errlen)) return -1;
    struct runner *r = calloc(1, sizeof(*r));
    if (!r) goto out_of_memory;
    size_t live = (size_t)params->max_sequences + (size_t)params->max_waiting;
    size_t budget = (size_t)params->step_tokens;
    r->engine = leader;
    r->params = *params;
    r->sink = *sink;
    r->context_length = leader->context_length;
    r->vocab_size = leader->model->config.vocab_size;
    r->sequences = calloc(live, sizeof(struct runner_sequence *));
    r->batch_sequences = calloc(budget, sizeof(struct runner_sequence *));
    r->batch_tokens = calloc(budget, sizeof(int));
    r->batch_positions = calloc(budget, sizeof(int));
    r->batch_kv = calloc(budget, sizeof(struct kv_sequence *));
    r->batch_want = calloc(budget, 1);
    r->due = calloc(budget, sizeof(struct runner_sequence *));
    r->cancelled = calloc(budget, sizeof(struct runner_sequence *));
    r->embedded = calloc(budget, sizeof(struct runner_sequence *));
    r->pooled = calloc((size_t)leader->model->config.dim, sizeof(float));
    r->max_in_flight = leader->n_stages;
    if (params->steps_in_flight > 0 && params->steps_in_flight < r->max_in_flight)
        r->max_in_flight = params->steps_in_flight;
    for (int k = 0; k < r->max_in_flight; k++) {
        r->flights[k].sequences = calloc(budget, sizeof(struct runner_sequence *));
        r->flights[k].step_tokens = calloc(budget, sizeof(int));
        if (!r->flights[k].sequences || !r->flights[k].step_tokens) goto out_of_memory;
    }
    if (!r->sequences || !r->batch_sequences || !r->batch_tokens || !r->batch_positions ||
        !r->batch_kv || !r->batch_want || !r->due || !r->cancelled || !r->embedded || !r->pooled ||
        make_scratch(r, tensor_pool_size(leader->pool)) || runner_trace_init(r, err, errlen))
        goto out_of_memory;
    if (runner_constrain_init(r, err, errlen)) {
        runner_free(r);
        return -1;
    }
    *out = r;
    return 0;
out_of_memory:
    runner_free(r);
    snprintf(err, errlen, "runner: out of memory");
    return -1;
}

static void free_sequence(struct runner *runner, struct runner_sequence *s) {
    kv_sequence_release(&runner->engine->kv, &s->kv);
    runner_constrain_end(s);
    runner_request_free(&s->request);
    free(s->pool_sum);
    free(s->tokens);
    free(s);
}

void runner_free(struct runner *runner) {
    if (!runner) return;
    for (int i = 0; i < runner->n_sequences; i++) free_sequence(runner, runner->sequences[i]);
    free(runner->sequences);
    free(runner->batch_sequences);
    free(runner->batch_tokens);
    free(runner->batch_positions);
    free(runner->batch_kv);
    free(runner->batch_want);
    free(runner->due);
    free(runner->cancelled);
    free(runner->embedded);
    free(runner->pooled);
    for (int k = 0; k < ENGINE_MAX_STAGES; k++) {
        free(runner->flights[k].sequences);
        free(runner->flights[k].step_tokens);
    }
    for (int i = 0; i < runner->n_scratch; i++) sampler_scratch_free(&runner->scratch[i]);
    free(runner->scratch);
    runner_trace_free(runner);
    runner_constrain_free(runner);
    free(runner);
}

/* Reports the end of a request that never became a sequence. */
static void refuse(struct runner *runner, uint32_t client, const struct runner_request *request,
                   enum runner_error_category category, const char *message) {
    struct runner_finished f = {.id = request->id,
                                .reason = RUNNER_FINISH_ERROR,
                                .n_prompt = request->n_prompt,
                                .category = category};
    snprintf(f.message, sizeof(f.message), "%s", message);
    runner->sink.finished(runner->sink.context, client, &f);
}

static struct runner_sequence *find(const struct runner *runner, uint32_t client, uint64_t id,
                                    int *index) {
    for (int i = 0; i < runner->n_sequences; i++) {
        struct runner_sequence *s = runner->sequences[i];
        if (s->client == client && s->request.id == id) {
            if (index) *index = i;
            return s;
        }
    }
    return NULL;
}

/* Why the runner cannot embed q's prompt, or NULL. */
static const char *check_embed(const struct runner *runner, const struct runner_request *q,
                               char *why, size_t size) {
    if (runner->params.pooling == RUNNER_POOLING_NONE)
        snprintf(why, size,
                 "this model's file names no pooling ({arch}.pooling_type) for embeddings: serve "
                 "it with --pooling mean, last or cls");
    else if (runner->engine->n_stages > 1)
        snprintf(why, size, "embeddings need a model served in one pipeline stage (pp 1)");
    else if (q->grammar || q->n_biases || q->n_stops)
        snprintf(why, size, "an input to embed takes no grammar, biases or stops");
    else
        return NULL;
    return why;
}

/* Why the runner cannot serve request (and what kind of refusal that is,
 * into *category), or NULL. */
static const char *check_request(const struct runner *runner, uint32_t client,
                                 const struct runner_request *q, char *why, size_t size,
                                 enum runner_error_category *category) {
    const struct kv_cache *kv = &runner->engine->kv;
    *category = RUNNER_ERROR_BAD_REQUEST;
    if (find(runner, client, q->id, NULL)) {
        snprintf(why, size, "request id %llu is already in use", (unsigned long long)q->id);
        return why;
    }
    if (q->embed && check_embed(runner, q, why, size)) return why;
    /* a prompt leaves room for one generated token; an input to embed needs none */
    int room = q->embed ? 0 : 1;
    if (q->n_prompt < 1 || q->n_prompt > runner->context_length - room) {
        snprintf(why, size,
                 q->embed ? "the input has %d tokens; the context holds %d"
                          : "the prompt has %d tokens; the context holds %d (prompt and at least "
                            "one generated token)",
                 q->n_prompt, runner->context_length);
        return why;
    }
    for (int i = 0; i < q->n_prompt; i++)
        if (q->prompt[i] < 0 || q->prompt[i] >= runner->vocab_size) {
            snprintf(why, size, "prompt token %d is %d, outside the vocabulary (0..%d)", i,
                     q->prompt[i], runner->vocab_size - 1);
            return why;
        }
    if (kv_blocks_for(kv, q->n_prompt + room) > kv->n_blocks) {
        snprintf(why, size, "the prompt needs %d KV blocks; the cache has %d",
                 kv_blocks_for(kv, q->n_prompt + room), kv->n_blocks);
        return why;
    }
    if (runner_constrain_check(runner, q, why, size)) return why;
    if (runner->n_sequences - runner->n_admitted >= runner->params.max_waiting) {
        *category = RUNNER_ERROR_OVER_CAPACITY;
        snprintf(why, size, "the queue is full (%d requests waiting)", runner->params.max_waiting);
        return why;
    }
    return NULL;
}

/* The engine's sampler takes what ADD carries, field for field. */
static struct sampler_params sampler_params_of(const struct runner_sampling *s) {
    return (struct sampler_params){.temperature = s->temperature,
                                   .top_k = s->top_k,
                                   .top_p = s->top_p,
                                   .min_p = s->min_p,
                                   .repeat_penalty = s->repeat_penalty,
                                   .repeat_last_n = s->repeat_last_n,
                                   .seed = s->seed,
                                   .presence_penalty = s->presence_penalty,
                                   .frequency_penalty = s->frequency_penalty};
}

int runner_submit(struct runner *runner, uint32_t client, struct runner_request *request,
                  uint64_t arrival_us) {
    char why[160];
    struct runner_sequence *s = NULL;
    enum runner_error_category category;
    if (check_request(runner, client, request, why, sizeof(why), &category)) goto refused;
    category = RUNNER_ERROR_OUT_OF_MEMORY;
    snprintf(why, sizeof(why), "out of memory");
    s = calloc(1, sizeof(*s));
    if (!s) goto refused;
    s->capacity = request->n_prompt + request->max_tokens;
    if (s->capacity > runner->context_length) s->capacity = runner->context_length;
    s->tokens = malloc((size_t)s->capacity * sizeof(int));
    if (request->embed)
        s->pool_sum = calloc((size_t)runner->engine->model->config.dim, sizeof(double));
    if (!s->tokens || (request->embed && !s->pool_sum)) goto refused;
    struct sampler_params sampling = sampler_params_of(&request->sampling);
    sampler_init(&s->sampler, &sampling, runner->vocab_size);
    memcpy(s->tokens, request->prompt, (size_t)request->n_prompt * sizeof(int));
    sampler_skip(&s->sampler, request->resumed);
    s->n_tokens = request->n_prompt;
    s->n_cached = -1;
    s->client = client;
    s->order = runner->next_order++;
    s->request = *request;
    memset(request, 0, sizeof(*request));
    if (runner_constrain_start(runner, s, why, sizeof(why))) {
        refuse(runner, client, &s->request, RUNNER_ERROR_BAD_REQUEST, why);
        free_sequence(runner, s);
        return -1;
    }
    runner->sequences[runner->n_sequences++] = s;
    runner_trace_event(runner, "arrival", s, arrival_us, NULL);
    return 0;
refused:
    if (s) {
        free(s->pool_sum);
        free(s->tokens);
        free(s);
    }
    refuse(runner, client, request, category, why);
    runner_request_free(request);
    return -1;
}

/* Reports the end of sequence i (an error with message), frees it and
 * closes the gap. */
static void finish_with(struct runner *runner, int i, enum runner_finish_reason reason,
                        const char *message) {
    struct runner_sequence *s = runner->sequences[i];
    struct runner_finished f = {.id = s->request.id,
                                .reason = reason,
                                .n_prompt = s->request.n_prompt,
                                .n_generated = s->n_generated,
                                .n_cached = s->n_cached > 0 ? s->n_cached : 0};
    if (message) {
        f.category = RUNNER_ERROR_BAD_REQUEST;
        snprintf(f.message, sizeof(f.message), "%s", message);
    }
    runner_trace_event(runner, "finish", s, clock_now_us(), runner_finish_reason_name(reason));
    runner->sink.finished(runner->sink.context, s->client, &f);
    if (s->admitted) runner->n_admitted--;
    free_sequence(runner, s);
    memmove(&runner->sequences[i], &runner->sequences[i + 1],
            (size_t)(runner->n_sequences - i - 1) * sizeof(struct runner_sequence *));
    runner->n_sequences--;
}

static void finish(struct runner *runner, int i, enum runner_finish_reason reason) {
    finish_with(runner, i, reason, NULL);
}

/* Cancels sequence i now, or when its step in flight returns. */
static void cancel(struct runner *runner, int i) {
    if (runner->sequences[i]->in_flight)
        runner->sequences[i]->cancelled = 1;
    else
        finish(runner, i, RUNNER_FINISH_CANCELLED);
}

void runner_cancel(struct runner *runner, uint32_t client, uint64_t id) {
    int i;
    if (find(runner, client, id, &i)) cancel(runner, i);
}

void runner_cancel_client(struct runner *runner, uint32_t client) {
    for (int i = runner->n_sequences - 1; i >= 0; i--)
        if (runner->sequences[i]->client == client) cancel(runner, i);
}

int runner_has_work(const struct runner *runner) {
    return runner->n_sequences > 0;
}

void runner_describe(const struct runner *runner, struct runner_hello *hello) {
    memset(hello, 0, sizeof(*hello));
    hello->vocab_size = runner->vocab_size;
    hello->context_length = runner->context_length;
    hello->max_sequences = runner->params.max_sequences;
    hello->step_tokens = runner->params.step_tokens;
    hello->kv_block_size = runner->engine->kv.block_size;
    hello->kv_blocks_total = runner->engine->kv.n_blocks;
    hello->tensor_parallel = runner->engine->model->shard_count;
    snprintf(hello->build, sizeof(hello->build), "%s", version_build());
}

/* The most likely n tokens of a logits row with their log-probabilities,
 * from the row's highest logit and sampler_log_normalizer. */
static void find_top_logprobs(const float *logits, int vocab, float highest, double normalizer,
                              int n, struct runner_alternative *top) {
    for (int k = 0; k < n; k++) top[k] = (struct runner_alternative){-1, -INFINITY};
    for (int i = 0; i < vocab; i++) {
        float lp = sampler_log_probability(logits[i], highest, normalizer);
        if (lp <= top[n - 1].logprob) continue;
        int k = n - 1; /* insertion keeps the list sorted, ties by lower id */
        while (k > 0 && top[k - 1].logprob < lp) {
            top[k] = top[k - 1];
            k--;
        }
        top[k] = (struct runner_alternative){i, lp};
    }
}

/* Why s stops after its newest token, or 0 to go on. */
static enum runner_finish_reason stop_reason(const struct runner *runner,
                                             const struct runner_sequence *s) {
    int last = s->tokens[s->n_tokens - 1];
    if (!s->request.ignore_eos)
        for (int i = 0; i < runner->params.n_eos; i++)
            if (last == runner->params.eos[i]) return RUNNER_FINISH_EOS;
    for (int i = 0; i < s->request.n_stops; i++) {
        const struct runner_stop *stop = &s->request.stops[i];
        if (stop->n_tokens > s->n_generated) continue;
        if (!memcmp(stop->tokens, s->tokens + s->n_tokens - stop->n_tokens,
                    (size_t)stop->n_tokens * sizeof(int)))
            return RUNNER_FINISH_STOP;
    }
    /* full: max_tokens, the context, or a pool too small for the next token */
    if (s->n_generated >= s->request.max_tokens || s->n_tokens >= runner->context_length ||
        kv_blocks_for(&runner->engine->kv, s->n_tokens) > runner->engine->kv.n_blocks)
        return RUNNER_FINISH_LENGTH;
    return 0;
}

/* Reports s's token sampled this step; returns why the sequence stops,
 * or 0. */
static enum runner_finish_reason take_sampled(struct runner *runner, struct runner_sequence *s) {
    struct runner_token *t = &runner->token;
    int next = s->sampled;
    s->tokens[s->n_tokens++] = next;
    s->n_generated++;
    /* under a grammar an end token ends the text whatever ignore_eos says:
     * the mask offers it only where the grammar may end */
    if (s->grammar_state && runner_constrain_is_end(runner, next)) return RUNNER_FINISH_EOS;
    int complete = runner_constrain_advance(runner, s, next) == 1;
    enum runner_finish_reason reason = stop_reason(runner, s);
    if (reason == RUNNER_FINISH_EOS) return reason; /* EOS is not sent as a token */
    if (complete) reason = RUNNER_FINISH_STOP;
    memset(t, 0, sizeof(*t));
    t->id = s->request.id;
    t->token = next;
    if (s->request.logprobs) t->logprob = s->sampled_logprob;
    t->n_top = s->request.top_logprobs;
    memcpy(t->top, s->sampled_top, (size_t)t->n_top * sizeof(t->top[0]));
    runner->sink.token(runner->sink.context, s->client, t);
    return reason;
}

/* Samples due sequence i on thread `thread` of the leader's pool, and
 * finds its token's log-probability and its most likely tokens if the
 * request asks: one pass of exp over the vocabulary serves both, and is
 * made only then. */
static void sample_due(void *arg, int i, int thread) {
    struct runner *runner = arg;
    struct runner_sequence *s = runner->due[i];
    if (!s) return; /* cancelled while its step was in flight: its row goes unused */
    struct sampler_scratch *scratch = &runner->scratch[thread];
    const float *logits = runner->engine->logits + (size_t)i * runner->vocab_size;
    const float *row = runner_constrain_row(runner, s, thread, logits);
    s->sampled = row ? sampler_sample(&s->sampler, scratch, row, s->tokens, s->n_tokens) : -1;
    if (s->sampled < 0) return;
    if (!s->request.logprobs && s->request.top_logprobs == 0) return;
    float highest;
    double normalizer = sampler_log_normalizer(scratch, logits, runner->vocab_size, &highest);
    s->sampled_logprob = sampler_log_probability(logits[s->sampled], highest, normalizer);
    if (s->request.top_logprobs > 0)
        find_top_logprobs(logits, runner->vocab_size, highest, normalizer, s->request.top_logprobs,
                          s->sampled_top);
}

/* Vocabulary entries a step's sampling must cover before the pool's
 * threads share it: below, handing out the job costs about what it saves
 * (bench/sampler_bench: greedy takes 0.2 us over 512 tokens and 6.5 us over
 * 32000, llama.cpp's defaults 10 us and the OpenAI defaults 49 us over
 * 32000). The caller never waits for a worker that has not joined, so a
 * sleeping pool costs nothing but the publication. */
#define SAMPLE_SHARED_WORK 32768

/* Samples every due sequence: each on its own random stream, so which
 * thread samples it does not change its token. */
static void sample_all_due(struct runner *runner, int n_due) {
    if (n_due > 1 && runner->n_scratch > 1 &&
        (long)n_due * runner->vocab_size >= SAMPLE_SHARED_WORK)
        tensor_pool_run_chunks(runner->engine->pool, sample_due, runner, n_due);
    else
        for (int i = 0; i < n_due; i++) sample_due(runner, i, 0);
}

/* Adds the hidden rows from `row` on that are s's pooled positions in this
 * step to its sum (position order); returns the next sequence's first row. */
static int pool_rows(struct runner *runner, struct runner_sequence *s, int row) {
    int dim = runner->engine->model->config.dim;
    for (int i = 0; i < s->step_tokens; i++) {
        if (!runner_wants(runner, s, s->n_computed + i)) continue;
        if (!s->cancelled)
            engine_pooling_add(s->pool_sum, runner->engine->hidden + (size_t)row * dim, dim);
        row++;
    }
    return row;
}

/* An embed request whose input was all computed: its vector goes out and
 * it is finished (EOS: the request is complete). */
static void send_embedding(struct runner *runner, struct runner_sequence *s) {
    int i, dim = runner->engine->model->config.dim;
    engine_pooling_finish((enum engine_pooling)runner->params.pooling, s->pool_sum, s->n_tokens,
                          dim, runner->pooled);
    struct runner_embedding e = {s->request.id, dim, runner->pooled};
    if (runner->sink.embedding) runner->sink.embedding(runner->sink.context, s->client, &e);
    if (find(runner, s->client, s->request.id, &i)) finish(runner, i, RUNNER_FINISH_EOS);
}

/* After the forward pass: advances every sequence of the batch, samples
 * where logits were computed and finishes what stopped. */
static void finish_step(struct runner *runner) {
    int n_due = 0, n_embedded = 0, hidden_row = 0;
    for (int b = 0; b < runner->n_batch_sequences; b++) {
        struct runner_sequence *s = runner->batch_sequences[b];
        int complete = s->n_computed + s->step_tokens >= s->n_tokens;
        if (s->request.embed) { /* its pooled states are the step's next hidden rows */
            hidden_row = pool_rows(runner, s, hidden_row);
            if (!s->cancelled && complete) runner->embedded[n_embedded++] = s;
        }
        if (s->cancelled) { /* finished after this (finish_cancelled), but keeps its row */
            runner->due[n_due] = NULL;
            n_due += complete && !s->request.embed;
            continue;
        }
        s->n_computed += s->step_tokens;
        if (runner->params.prefix_cache)
            kv_sequence_publish(&runner->engine->kv, &s->kv, s->tokens, s->n_computed);
        if (!complete || s->request.embed) continue; /* prompt not complete yet, or no logits */
        runner->due[n_due++] = s; /* due sequence d has the step's logits row d */
    }
    for (int e = 0; e < n_embedded; e++) send_embedding(runner, runner->embedded[e]);
    sample_all_due(runner, n_due);
    for (int d = 0; d < n_due; d++) {
        struct runner_sequence *s = runner->due[d];
        int i = 0;
        if (!s) continue;
        if (s->sampled < 0 && find(runner, s->client, s->request.id, &i)) {
            finish_with(runner, i, RUNNER_FINISH_ERROR,
                        "no token is allowed here: the grammar allows none of this vocabulary's "
                        "tokens, or logit_bias bans every one it allows");
            continue;
        }
        enum runner_finish_reason reason = take_sampled(runner, s);
        if (reason && find(runner, s->client, s->request.id, &i)) finish(runner, i, reason);
    }
}

static void send_heartbeat(struct runner *runner, uint64_t start_us, uint64_t end_us, int n_tokens,
                           float comm_ms) {
    const struct kv_cache *kv = &runner->engine->kv;
    struct runner_heartbeat h = {.step = runner->steps,
                                 .start_us = start_us,
                                 .end_us = end_us,
                                 .n_tokens = n_tokens,
                                 .n_decode = runner->n_decode,
                                 .n_sequences = runner->n_batch_sequences,
                                 .n_running = runner->n_admitted,
                                 .n_waiting = runner->n_sequences - runner->n_admitted,
                                 .kv_blocks_used = kv_blocks_held(kv),
                                 .kv_blocks_total = kv->n_blocks,
                                 .comm_ms = comm_ms,
                                 .kv_blocks_cached = kv_blocks_cached(kv)};
    runner->sink.heartbeat(runner->sink.context, &h);
}

void runner_inject_fault(struct runner *runner, const struct runner_fault *fault) {
    enum engine_fault_kind kind =
        fault->kind == RUNNER_FAULT_STALL ? ENGINE_FAULT_STALL : ENGINE_FAULT_DELAY;
    engine_plan_fault(runner->engine, kind, fault->rank, fault->delay_ms, fault->steps);
}

void runner_report_state(struct runner *runner) {
    uint64_t now = clock_now_us();
    runner->n_batch_sequences = 0;
    runner->n_decode = 0;
    send_heartbeat(runner, now, now, 0, 0.0f);
}

/* SUBMIT: hands the planned batch of n_tokens to the engine and keeps
 * what its collection needs; its sequences are in flight until then. */
static int submit(struct runner *runner, int n_tokens, uint64_t start_us, char *err,
                  size_t errlen) {
    struct runner_flight *f = &runner->flights[runner->n_flights];
    struct engine_batch batch = {n_tokens, runner->batch_tokens, runner->batch_positions,
                                 (struct kv_sequence *const *)runner->batch_kv, runner->batch_want};
    *f = (struct runner_flight){
        f->sequences, f->step_tokens, runner->n_batch_sequences,   runner->n_decode,
        n_tokens,     start_us,       runner->engine->comm_seconds};
    if (engine_submit_step(runner->engine, &batch, err, errlen)) return -1;
    for (int b = 0; b < f->n_sequences; b++) {
        struct runner_sequence *s = runner->batch_sequences[b];
        f->sequences[b] = s;
        f->step_tokens[b] = s->step_tokens;
        s->in_flight = 1;
    }
    runner->n_flights++;
    return 0;
}

/* The oldest step's plan again as the step being finished: its sequences
 * (less those cancelled meanwhile, which finish now) and their tokens. */
static void restore_oldest(struct runner *runner) {
    const struct runner_flight *f = &runner->flights[0];
    runner->n_batch_sequences = 0;
    runner->n_decode = f->n_decode;
    for (int b = 0; b < f->n_sequences; b++) {
        struct runner_sequence *s = f->sequences[b];
        s->in_flight = 0;
        s->step_tokens = f->step_tokens[b];
        runner->batch_sequences[runner->n_batch_sequences++] = s;
    }
}

/* The collected step's sequences that were cancelled while it was in
 * flight, into runner->cancelled: finish_step samples nothing for them and
 * leaves them alive, and may free the others. Their count. */
static int take_cancelled(struct runner *runner) {
    int n = 0;
    for (int b = 0; b < runner->n_batch_sequences; b++)
        if (runner->batch_sequences[b]->cancelled)
            runner->cancelled[n++] = runner->batch_sequences[b];
    return n;
}

/* Finishes the n sequences take_cancelled found. */
static void finish_cancelled(struct runner *runner, int n) {
    for (int c = 0; c < n; c++) {
        const struct runner_sequence *s = runner->cancelled[c];
        int i;
        if (find(runner, s->client, s->request.id, &i)) finish(runner, i, RUNNER_FINISH_CANCELLED);
    }
}

/* COLLECT: waits for the oldest step's logits, then samples, reports and
 * finishes as after any step. */
static int collect(struct runner *runner, char *err, size_t errlen) {
    if (engine_collect_step(runner->engine, err, errlen) < 0) return -1;
    const struct runner_flight *f = &runner->flights[0];
    float comm_ms = (float)((runner->engine->comm_seconds - f->comm_before) * 1e3);
    uint64_t start_us = f->start_us;
    int n_tokens = f->n_tokens;
    restore_oldest(runner);
    /* the trace copies the batch before sequences finish and are freed */
    runner_trace_begin(runner, start_us, n_tokens);
    int n_cancelled = take_cancelled(runner);
    finish_step(runner);
    finish_cancelled(runner, n_cancelled);
    struct runner_flight done = runner->flights[0];
    runner->n_flights--;
    memmove(runner->flights, runner->flights + 1, (size_t)runner->n_flights * sizeof(done));
    runner->flights[runner->n_flights] = done; /* its arrays, for a later step */
    uint64_t end_us = clock_now_us();
    runner_trace_end(runner, end_us);
    send_heartbeat(runner, start_us, end_us, n_tokens, comm_ms);
    runner->steps++;
    return 0;
}

int runner_step(struct runner *runner, uint64_t start_us, char *err, size_t errlen) {
    if (!start_us) start_us = clock_now_us();
    while (runner->n_flights < runner->max_in_flight) {
        int n_tokens = runner_schedule(runner);
        if (n_tokens == 0) break;
        if (submit(runner, n_tokens, start_us, err, errlen)) return -1;
        start_us = clock_now_us();
    }
    if (runner->n_flights == 0) return 0;
    return collect(runner, err, errlen) ? -1 : 1;
}
