/* request.c -- one client request inside the gateway: from the parsed body
 * to prompt tokens, and from the runner's tokens to the bytes the client
 * gets.
 *
 * Tokens are decoded incrementally (never half a UTF-8 character) into a
 * held-back text: the tail that could still be the start of a stop string
 * waits until the next token decides, so a stop string split across tokens
 * is matched and never reaches the client. Streaming requests get one SSE
 * chunk per token that produced text (or logprobs); others accumulate the
 * text for one JSON body at the end. All of this is per choice: a request
 * with n choices is n runner requests with the same prompt (a completions
 * request of several prompts, n for each), whose chunks interleave in one
 * stream, each with its index. Each choice keeps every
 * token it generated, so a restarted runner can resume it exactly
 * (DESIGN.md I4). */
#include "gateway/requests/requests.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- creation: prompt tokens and limits ---------- */

static int chat_prompt(struct gateway_request *r, struct openai_error *error) {
    const struct gateway_served *served = r->served;
    char err[256], *text = NULL;
    size_t length = 0;
    struct tokenizer_chat_message *m = NULL;
    struct tokenizer_tool_call *calls = NULL;
    struct tokenizer_chat_tool *tools = NULL;
    int n_tools = 0;
    if (gateway_tools_messages(r, &m, &calls, error) ||
        gateway_tools_render(r, &tools, &n_tools, error)) {
        free(m);
        free(calls);
        return -1;
    }
    int rc = tokenizer_chat_apply_tools(served->chat_template, m, r->body.n_messages, tools,
                                        n_tools, 1, served->bos_text, served->eos_text, &text,
                                        &length, err, sizeof(err));
    free(m);
    free(calls);
    free(tools);
    if (rc) {
        openai_error_set(error, 400, "invalid_request_error", "messages", NULL, "%s", err);
        return -1;
    }
    int add_bos = tokenizer_adds_bos(served->tokenizer) &&
                  !tokenizer_chat_template_writes_bos(served->chat_template);
    int max_ids = tokenizer_max_ids(length);
    struct gateway_prompt *p = r->prompts = calloc(1, sizeof(*r->prompts));
    r->n_prompts = p ? 1 : 0;
    if (p) p->tokens = malloc((size_t)max_ids * sizeof(int));
    if (!p || !p->tokens ||
        tokenizer_encode_special(served->tokenizer, text, length, add_bos, p->tokens, max_ids,
                                 &p->n_tokens, err, sizeof(err))) {
        free(text);
        goto out_of_memory;
    }
    free(text);
    return gateway_tools_constrain(r, error);
out_of_memory:
    openai_error_set(error, 500, "server_error", NULL, NULL, "out of memory for the prompt");
    return -1;
}

/* Prompt `index` of a completions request into its tokens (given, or
 * encoded with the tokenizer's BOS). */
static int completion_prompt(struct gateway_request *r, int index, struct openai_error *error) {
    const struct tokenizer *tok = r->served->tokenizer;
    const struct openai_prompt *given = &r->body.prompts[index];
    struct gateway_prompt *p = &r->prompts[index];
    const char *name = r->body.kind == OPENAI_EMBEDDING ? "input" : "prompt";
    char err[256], param[32];
    snprintf(param, sizeof(param), r->n_prompts > 1 ? "%s[%d]" : "%s", name, index);
    if (given->tokens) {
        int vocab = tokenizer_vocab_size(tok);
        for (int i = 0; i < given->n_tokens; i++)
            if (given->tokens[i] >= vocab) {
                openai_error_set(error, 400, "invalid_request_error", param, NULL,
                                 "%s token %d is %d, outside the vocabulary (0..%d)", param, i,
                                 given->tokens[i], vocab - 1);
                return -1;
            }
        p->n_tokens = given->n_tokens;
        p->tokens = malloc((size_t)p->n_tokens * sizeof(int));
        if (p->tokens) memcpy(p->tokens, given->tokens, (size_t)p->n_tokens * sizeof(int));
    } else {
        size_t length = strlen(given->text);
        int max_ids = tokenizer_max_ids(length);
        p->tokens = malloc((size_t)max_ids * sizeof(int));
        if (p->tokens && tokenizer_encode(tok, given->text, length, tokenizer_adds_bos(tok),
                                          p->tokens, max_ids, &p->n_tokens, err, sizeof(err)))
            p->n_tokens = -1;
        if (p->tokens && p->n_tokens == 0 && tokenizer_bos(tok) >= 0)
            p->tokens[p->n_tokens++] = tokenizer_bos(tok);
    }
    if (!p->tokens || p->n_tokens < 0) {
        openai_error_set(error, 500, "server_error", NULL, NULL, "out of memory for the prompt");
        return -1;
    }
    if (p->n_tokens == 0) {
        openai_error_set(error, 400, "invalid_request_error", param, NULL,
                         "the prompt is empty and the vocabulary has no BOS token to start from");
        return -1;
    }
    return 0;
}

static int completion_prompts(struct gateway_request *r, struct openai_error *error) {
    r->prompts = calloc((size_t)r->body.n_prompts, sizeof(*r->prompts));
    if (!r->prompts) {
        openai_error_set(error, 500, "server_error", NULL, NULL, "out of memory for the prompts");
        return -1;
    }
    r->n_prompts = r->body.n_prompts;
    for (int i = 0; i < r->n_prompts; i++)
        if (completion_prompt(r, i, error)) return -1;
    return 0;
}

/* The limits of one prompt: its length, and max_tokens within the
 * context after it. */
static int check_prompt_limits(struct gateway_request *r, int index, struct openai_error *error) {
    const struct gateway_params *p = r->env->params;
    int context = r->served->context_length, n = r->prompts[index].n_tokens;
    /* an input to embed needs no room for an answer */
    int embed = r->body.kind == OPENAI_EMBEDDING, room = embed ? 0 : 1;
    const char *name = embed ? "input" : "prompt";
    char param[32] = "messages";
    if (r->body.kind != OPENAI_CHAT)
        snprintf(param, sizeof(param), r->n_prompts > 1 ? "%s[%d]" : "%s", name, index);
    if (n > p->max_prompt_tokens || n > context - room) {
        int limit = p->max_prompt_tokens < context - room ? p->max_prompt_tokens : context - room;
        openai_error_set(error, 400, "invalid_request_error", param, "context_length_exceeded",
                         "the prompt has %d tokens; this model accepts at most %d", n, limit);
        return -1;
    }
    /* as OpenAI: asking for more than the context holds is an error, not
     * a silent cut; without max_tokens generation runs to the context's end */
    if (!embed && r->body.max_tokens > context - n) {
        openai_error_set(error, 400, "invalid_request_error", "max_tokens",
                         "context_length_exceeded",
                         "the prompt has %d tokens and max_tokens is %d; this model's context "
                         "holds %d tokens",
                         n, r->body.max_tokens, context);
        return -1;
    }
    return 0;
}

/* The limits: each prompt's length and context, max_tokens. */
static int check_limits(struct gateway_request *r, struct openai_error *error) {
    const struct gateway_params *p = r->env->params;
    for (int i = 0; i < r->n_prompts; i++) {
        if (check_prompt_limits(r, i, error)) return -1;
        r->n_prompt_tokens += r->prompts[i].n_tokens;
    }
    if (r->body.max_tokens > p->max_tokens_limit) {
        openai_error_set(error, 400, "invalid_request_error", "max_tokens", NULL,
                         "max_tokens is %d; the limit is %d", r->body.max_tokens,
                         p->max_tokens_limit);
        return -1;
    }
    return 0;
}

/* OpenAI's sampling fields as the runner protocol carries them, checked by
 * the protocol's own rule (runner_check_sampling), so that nothing the
 * gateway accepts is refused on the way to the runner. */
static int set_sampling(struct gateway_request *r, struct runner_sampling *s,
                        struct openai_error *error) {
    const struct openai_request *b = &r->body;
    char field[32], why[160];
    runner_sampling_default(s);
    s->temperature = b->temperature;
    s->top_p = b->top_p;
    s->top_k = b->top_k;
    s->min_p = b->min_p;
    s->repeat_penalty = b->repetition_penalty;
    s->presence_penalty = b->presence_penalty;
    s->frequency_penalty = b->frequency_penalty;
    /* without a seed, one is drawn now: a resumed request must keep it */
    s->seed = b->has_seed ? b->seed : (r->arrival_us * 0x9E3779B97F4A7C15ull) ^ r->id;
    if (runner_check_sampling(s, field, sizeof(field), why, sizeof(why)) == 0) return 0;
    openai_error_set(error, 400, "invalid_request_error",
                     strcmp(field, "repeat_penalty") != 0 ? field : "repetition_penalty", NULL,
                     "%s", why);
    return -1;
}

/* The request's choices, n for each prompt in turn: choice i is runner
 * request id + i and samples with the seed + (i mod n) (modulo 2^64), so
 * that it gives what a request of its prompt alone and one choice with
 * that seed gives (README, API). Each generates up to max_tokens, or to
 * the end of the context after its prompt. */
static int create_choices(struct gateway_request *r, const struct runner_sampling *sampling,
                          struct openai_error *error) {
    int n = r->body.n > 0 ? r->body.n : 1, context = r->served->context_length;
    r->choices = calloc((size_t)r->n_choices, sizeof(*r->choices));
    if (!r->choices) goto out_of_memory;
    for (int i = 0; i < r->n_choices; i++) {
        struct gateway_choice *c = &r->choices[i];
        c->job.id = r->id + (uint64_t)i;
        c->job.group = r;
        c->job.arrival_us = r->arrival_us;
        c->index = i;
        c->request = r;
        c->prompt = &r->prompts[i / n];
        c->stop_matched = -1;
        c->max_tokens =
            r->body.max_tokens > 0 ? r->body.max_tokens : r->env->params->max_tokens_limit;
        if (c->max_tokens > context - c->prompt->n_tokens)
            c->max_tokens = context - c->prompt->n_tokens;
        /* an input to embed generates nothing (its one slot keeps the arrays non-empty) */
        if (r->body.kind == OPENAI_EMBEDDING) c->max_tokens = 1;
        c->sampling = *sampling;
        c->sampling.seed = sampling->seed + (uint64_t)(i % n);
        c->generated = malloc((size_t)c->max_tokens * sizeof(int));
        c->token_reports = calloc((size_t)c->max_tokens, sizeof(*c->token_reports));
        c->token_start = malloc((size_t)c->max_tokens * sizeof(*c->token_start));
        if (!c->generated || !c->token_reports || !c->token_start) goto out_of_memory;
        tokenizer_stream_init(&c->decoder, r->served->tokenizer, 0);
    }
    return 0;
out_of_memory:
    openai_error_set(error, 500, "server_error", NULL, NULL, "out of memory");
    return -1;
}

struct gateway_request *gateway_request_create(const struct requests_env *env,
                                               const struct gateway_served *served,
                                               const char *instance_id, struct openai_request *body,
                                               struct openai_error *error) {
    struct gateway_request *r = calloc(1, sizeof(*r));
    if (!r) {
        openai_error_set(error, 500, "server_error", NULL, NULL, "out of memory");
        openai_request_free(body);
        return NULL;
    }
    atomic_init(&r->references, 1);
    pthread_mutex_init(&r->lock, NULL);
    r->env = env;
    r->served = served;
    snprintf(r->instance_id, sizeof(r->instance_id), "%s", instance_id);
    r->body = *body;
    memset(body, 0, sizeof(*body));
    r->n_choices =
        (r->body.n > 0 ? r->body.n : 1) * (r->body.kind != OPENAI_CHAT ? r->body.n_prompts : 1);
    r->id = atomic_fetch_add(env->next_id, (unsigned long long)r->n_choices);
    r->arrival_us = clock_now_us();
    r->last_output_us = r->arrival_us;
    snprintf(r->response_id, sizeof(r->response_id), "%s%llx%06llx",
             r->body.responses             ? "resp_"
             : r->body.kind == OPENAI_CHAT ? "chatcmpl-"
                                           : "cmpl-",
             (unsigned long long)r->arrival_us, (unsigned long long)r->id);
    snprintf(r->responses_message_id, sizeof(r->responses_message_id), "msg_%llx%06llx",
             (unsigned long long)r->arrival_us, (unsigned long long)r->id);
    openai_response_init(&r->response, &r->body, r->response_id, (int64_t)time(NULL));
    r->response.model = served->name;
    struct runner_sampling sampling;
    int failed = r->body.kind == OPENAI_CHAT ? chat_prompt(r, error) : completion_prompts(r, error);
    if (!failed) failed = check_limits(r, error);
    if (!failed) failed = set_sampling(r, &sampling, error);
    if (!failed) failed = create_choices(r, &sampling, error);
    if (failed) {
        gateway_request_release(r);
        return NULL;
    }
    return r;
}

static void free_choice(struct gateway_choice *c) {
    gateway_tools_free_choice(c);
    runner_buffer_free(&c->all);
    free(c->generated);
    free(c->token_reports);
    free(c->token_start);
    free(c->held);
    free(c->embedding);
    runner_buffer_free(&c->text);
}

void gateway_request_release(struct gateway_request *r) {
    if (!r || atomic_fetch_sub(&r->references, 1) != 1) return;
    for (int i = 0; r->choices && i < r->n_choices; i++) free_choice(&r->choices[i]);
    free(r->choices);
    openai_request_free(&r->body);
    for (int i = 0; r->prompts && i < r->n_prompts; i++) free(r->prompts[i].tokens);
    free(r->prompts);
    free(r->error_json);
    runner_buffer_free(&r->out);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

struct openai_usage gateway_request_usage(const struct gateway_request *r) {
    struct openai_usage usage = {r->n_prompt_tokens, 0, 0};
    for (int i = 0; i < r->n_prompts; i++) usage.cached_tokens += r->prompts[i].n_cached;
    for (int i = 0; i < r->n_choices; i++) usage.completion_tokens += r->choices[i].n_generated;
    return usage;
}

/* ---------- output ---------- */

void gateway_request_wake(struct gateway_request *r) {
    if (r->suspended && r->reader) {
        r->suspended = 0;
        r->wake_reader(r->reader);
    }
}

void gateway_request_event(struct gateway_request *r, char *json) {
    static const char prefix[] = "data: ", suffix[] = "\n\n";
    if (!json) return;
    runner_buffer_append(&r->out, prefix, sizeof(prefix) - 1);
    runner_buffer_append(&r->out, json, strlen(json));
    runner_buffer_append(&r->out, suffix, sizeof(suffix) - 1);
    free(json);
    r->last_output_us = clock_now_us();
}

void gateway_request_named_event(struct gateway_request *r, const char *name, char *json) {
    char head[96];
    if (!json) return;
    int n = snprintf(head, sizeof(head), "event: %s\n", name);
    runner_buffer_append(&r->out, head, (size_t)n);
    gateway_request_event(r, json);
}

/* Sends a choice's text (and its pending logprobs) to the client. */
static void emit(struct gateway_choice *c, const char *text, size_t length,
                 enum openai_finish finish) {
    struct gateway_request *r = c->request;
    if (r->body.responses || r->body.anthropic) { /* its items close when it ends */
        (r->body.responses ? gateway_responses_text : gateway_messages_text)(c, text, length);
        return;
    }
    if (!r->body.stream) {
        runner_buffer_append(&c->text, text, length);
        return;
    }
    int reports = r->body.logprobs ? c->n_shown - c->n_reported : 0;
    if (length == 0 && reports == 0 && finish == OPENAI_FINISH_NONE && c->first_sent) return;
    struct openai_delta d = {.first = !c->first_sent,
                             .text = text,
                             .length = length,
                             .finish = finish,
                             .n_tokens = reports,
                             .tokens = c->token_reports + c->n_reported,
                             .text_offset = c->text_chars};
    gateway_request_event(r, openai_choice_chunk_json(&r->response, &d, c->index));
    c->first_sent = 1;
    c->n_reported = c->n_shown;
    c->text_chars += openai_text_chars(text, length);
}

/* Length of the longest tail of held that some stop string starts with. */
static size_t stop_prefix_tail(const struct gateway_choice *c) {
    const struct openai_request *b = &c->request->body;
    size_t best = 0;
    for (int s = 0; s < b->n_stops; s++) {
        size_t n = strlen(b->stops[s]);
        for (size_t k = n - 1 < c->n_held ? n - 1 : c->n_held; k > best; k--)
            if (!memcmp(c->held + c->n_held - k, b->stops[s], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Where the first stop string in held[0..limit) starts, or limit. */
static size_t find_stop(struct gateway_choice *c, size_t limit, int *stopped) {
    const struct openai_request *b = &c->request->body;
    size_t cut = limit;
    for (int s = 0; s < b->n_stops; s++) {
        const char *at = memmem(c->held, limit, b->stops[s], strlen(b->stops[s]));
        if (at && (size_t)(at - c->held) < cut) {
            cut = (size_t)(at - c->held);
            *stopped = 1;
            c->stop_matched = s;
        }
    }
    return cut;
}

/* Sends what of the held text can no longer be part of a stop string (nor,
 * with tools, of the trigger of tool calls); returns 1 if a stop string
 * was found (the text before it was sent). When the trigger is found, the
 * content before it is sent and the choice is in its calls. */
static int release_held(struct gateway_choice *c, int final) {
    size_t limit = c->n_held;
    int calls = gateway_tools_active(c->request) && gateway_tools_limit(c, final, &limit);
    if (c->n_held == 0) { /* nothing held (a token of no text yet): logprobs may still go out */
        emit(c, "", 0, OPENAI_FINISH_NONE);
        return 0;
    }
    int stopped = 0;
    /* a stop string is matched in the content only, never in calls */
    size_t cut = find_stop(c, calls ? limit : c->n_held, &stopped);
    if (!stopped && !final && !calls) {
        size_t tail = c->n_held - stop_prefix_tail(c);
        cut = tail < limit ? tail : limit;
    } else if (!stopped) {
        cut = limit;
    }
    /* the tokens whose text the stop string removed whole are not shown,
     * in logprobs either: those that begin at or after the cut */
    while (stopped && c->n_shown > 0 && c->token_start[c->n_shown - 1] >= c->released + cut)
        c->n_shown--;
    emit(c, c->held, cut, OPENAI_FINISH_NONE);
    if (stopped || calls) {
        c->n_held = 0;
        c->released += cut;
        c->in_calls = calls && !stopped;
        return stopped;
    }
    memmove(c->held, c->held + cut, c->n_held - cut);
    c->n_held -= cut;
    c->released += cut;
    return 0;
}

static int hold(struct gateway_choice *c, const char *bytes, size_t n) {
    if (n == 0) return 0;
    if (c->n_held + n > c->held_capacity) {
        size_t capacity = 2 * (c->n_held + n) + 64;
        char *grown = realloc(c->held, capacity);
        if (!grown) return -1;
        c->held = grown;
        c->held_capacity = capacity;
    }
    memcpy(c->held + c->n_held, bytes, n);
    c->n_held += n;
    return 0;
}

/* Ends the request's output: usage and [DONE] (streaming); wakes the client. */
static void end_output(struct gateway_request *r) {
    r->done = 1;
    if (r->body.stream && r->body.responses) {
        gateway_responses_end(r);
    } else if (r->body.stream && r->body.anthropic) {
        gateway_messages_end(r);
    } else if (r->body.stream) {
        if (r->body.include_usage) {
            struct openai_usage u = gateway_request_usage(r);
            gateway_request_event(r, openai_usage_chunk_json(&r->response, &u));
        }
        static const char done[] = "data: [DONE]\n\n";
        runner_buffer_append(&r->out, done, sizeof(done) - 1);
    }
    gateway_request_wake(r);
}

void gateway_choice_end(struct gateway_choice *c, enum openai_finish finish) {
    struct gateway_request *r = c->request;
    c->finish = finish;
    c->done = 1;
    if (r->body.stream) emit(c, "", 0, finish);
    if (++r->n_ended == r->n_choices) end_output(r);
}

/* Fills the logprobs report of the choice's newest token. */
static void report_token(struct gateway_choice *c, const struct runner_token *t) {
    struct openai_token *report = &c->token_reports[c->n_generated - 1];
    const struct tokenizer *tok = c->request->served->tokenizer;
    report->text = tokenizer_token_bytes(tok, t->token, &report->length);
    report->logprob = t->logprob;
    report->n_top = t->n_top < OPENAI_TOP_LOGPROBS_MAX ? t->n_top : OPENAI_TOP_LOGPROBS_MAX;
    for (int i = 0; i < report->n_top; i++) {
        report->top[i].text = tokenizer_token_bytes(tok, t->top[i].token, &report->top[i].length);
        report->top[i].logprob = t->top[i].logprob;
        if (!report->top[i].text) report->top[i] = (struct openai_alternative){"", 0, 0};
    }
    if (!report->text) report->text = "";
}

/* A token arrived now: the request's time to first token (its first of any
 * choice: what the client waits for) and the choice's inter-token latency. */
static void observe_token(struct gateway_choice *c, uint64_t now, struct gateway_latency *latency) {
    struct gateway_request *r = c->request;
    if (r->first_token_us == 0) {
        r->first_token_us = now;
        latency->ttft = (double)(now - r->arrival_us) * 1e-6;
    }
    if (c->n_generated > 0) latency->itl = (double)(now - c->last_token_us) * 1e-6;
    c->last_token_us = now;
    if (r->body.stream && !r->unsent_since_us) r->unsent_since_us = now;
}

/* New decoded bytes: held, and with tools kept whole (nothing more is
 * held once the calls began); 1 if a stop string ended the choice. */
static int take_text(struct gateway_choice *c, const char *text, size_t n, int final) {
    if (gateway_tools_active(c->request) && runner_buffer_append(&c->all, text, n)) return 0;
    if (c->in_calls) {
        gateway_tools_stream(c);
        return 0;
    }
    return hold(c, text, n) == 0 && release_held(c, final);
}

/* A choice's end: its last text, then its calls if it made some (or a
 * 500 when calls a grammar forced do not parse). Unlocks the request. */
static void finish_choice(struct gateway_choice *c, const char *text, size_t n,
                          enum runner_finish_reason reason) {
    struct gateway_request *r = c->request;
    char err[256];
    int stopped = take_text(c, text, n, 1);
    enum openai_finish finish =
        reason == RUNNER_FINISH_LENGTH && !stopped ? OPENAI_FINISH_LENGTH : OPENAI_FINISH_STOP;
    int rc = !stopped && c->in_calls ? gateway_tools_finish(c, &finish, err, sizeof(err)) : 0;
    if (rc < 0) {
        pthread_mutex_unlock(&r->lock);
        gateway_request_fail(r, 500, err);
        r->env->cancel(r->env->context, r, NULL);
        return;
    }
    if (rc == 1) /* the calls' text stays content */
        emit(c, (const char *)c->all.data + c->released, c->all.length - c->released,
             OPENAI_FINISH_NONE);
    gateway_choice_end(c, finish);
    pthread_mutex_unlock(&r->lock);
}

void gateway_request_on_token(struct gateway_choice *c, const struct runner_token *t,
                              struct supervisor *from, struct gateway_latency *latency) {
    struct gateway_request *r = c->request;
    char text[1024];
    int stopped = 0;
    latency->ttft = latency->itl = -1;
    pthread_mutex_lock(&r->lock);
    if (r->done || c->done || c->n_generated >= c->max_tokens || c->job.holder != from) {
        pthread_mutex_unlock(&r->lock);
        return;
    }
    observe_token(c, clock_now_us(), latency);
    c->token_start[c->n_generated] = c->decoded;
    c->generated[c->n_generated++] = t->token;
    c->n_shown = c->n_generated;
    report_token(c, t);
    size_t n = tokenizer_stream_push(&c->decoder, t->token, text, sizeof(text));
    c->decoded += n;
    stopped = take_text(c, text, n, 0);
    if (stopped) gateway_choice_end(c, OPENAI_FINISH_STOP);
    gateway_request_wake(r);
    pthread_mutex_unlock(&r->lock);
    /* outside the request's lock: a supervisor's lock is taken before it */
    if (stopped) r->env->cancel(r->env->context, r, c);
}

void gateway_request_fail(struct gateway_request *r, int status, const char *message) {
    struct openai_error e;
    pthread_mutex_lock(&r->lock);
    if (!r->done) {
        const char *type = status == 429   ? "rate_limit_error"
                           : status >= 500 ? "server_error"
                                           : "invalid_request_error";
        openai_error_set(&e, status, type, NULL, NULL, "%s", message);
        r->error_json = r->body.anthropic ? openai_messages_error_json(&e) : openai_error_json(&e);
        r->failed = status;
        char *copy = r->body.stream ? strdup(r->error_json ? r->error_json : "{}") : NULL;
        if (r->body.anthropic)
            gateway_request_named_event(r, "error", copy);
        else
            gateway_request_event(r, copy);
        end_output(r);
    }
    pthread_mutex_unlock(&r->lock);
}

void gateway_request_on_finished(struct gateway_choice *c, const struct runner_finished *f,
                                 struct supervisor *from) {
    struct gateway_request *r = c->request;
    char text[64];
    pthread_mutex_lock(&r->lock);
    int moved = c->job.holder != from; /* it left that runner: its successor finishes it */
    /* a stop string ended it, and its runner went on until the cancel came:
     * an error it met meanwhile is not the request's */
    int ended = c->done;
    pthread_mutex_unlock(&r->lock);
    if (moved || (ended && f->reason == RUNNER_FINISH_ERROR)) return;
    static const int status_of[] = {[RUNNER_ERROR_INTERNAL] = 500,
                                    [RUNNER_ERROR_BAD_REQUEST] = 400,
                                    [RUNNER_ERROR_OVER_CAPACITY] = 429,
                                    [RUNNER_ERROR_OUT_OF_MEMORY] = 503};
    if (f->reason == RUNNER_FINISH_ERROR) {
        /* the choices live and die together: one's error is the request's,
         * and the others are cancelled (outside the request's lock) */
        gateway_request_fail(r, status_of[f->category], f->message);
        r->env->cancel(r->env->context, r, NULL);
        return;
    }
    pthread_mutex_lock(&r->lock);
    /* a resumed choice's prompt holds its tokens so far: only the
     * request's own prompt counts */
    int cached = f->n_cached < c->prompt->n_tokens ? f->n_cached : c->prompt->n_tokens;
    if (cached > c->prompt->n_cached) c->prompt->n_cached = cached;
    if (!r->done && !c->done && f->reason != RUNNER_FINISH_CANCELLED &&
        r->body.kind == OPENAI_EMBEDDING) {
        gateway_embedding_finished(c, f);
        return;
    }
    if (!r->done && !c->done && f->reason != RUNNER_FINISH_CANCELLED) {
        size_t n = tokenizer_stream_flush(&c->decoder, text, sizeof(text));
        finish_choice(c, text, n, f->reason);
        return;
    }
    pthread_mutex_unlock(&r->lock);
}

void gateway_request_keep_alive(struct gateway_request *r, uint64_t now_us) {
    static const char comment[] = ": keep-alive\n\n";
    double seconds = r->env->params->keep_alive_seconds;
    pthread_mutex_lock(&r->lock);
    if (r->body.stream && !r->done && (double)(now_us - r->last_output_us) * 1e-6 >= seconds) {
        runner_buffer_append(&r->out, comment, sizeof(comment) - 1);
        r->last_output_us = now_us;
        gateway_request_wake(r);
    }
    pthread_mutex_unlock(&r->lock);
}

/* ---------- a choice as a supervisor's job ---------- */

struct gateway_choice *gateway_choice_of(struct supervisor_job *job) {
    return (struct gateway_choice *)((char *)job - offsetof(struct gateway_choice, job));
}

static void job_hold(struct supervisor_job *job) {
    atomic_fetch_add(&gateway_choice_of(job)->request->references, 1);
}

static void job_release(struct supervisor_job *job) {
    gateway_request_release(gateway_choice_of(job)->request);
}

/* 1 if the choice will produce nothing more (request lock held). */
static int choice_over(const struct gateway_choice *c) {
    return c->done || c->request->done || c->request->abandoned;
}

static int job_adopt(struct supervisor_job *job, struct supervisor *s) {
    struct gateway_choice *c = gateway_choice_of(job);
    pthread_mutex_lock(&c->request->lock);
    int keep = !choice_over(c);
    if (keep) job->holder = s;
    pthread_mutex_unlock(&c->request->lock);
    return keep;
}

/* A request's logit biases go to the runner as they were parsed. */
_Static_assert(sizeof(struct openai_bias) == sizeof(struct runner_bias) &&
                   offsetof(struct openai_bias, bias) == offsetof(struct runner_bias, bias),
               "struct openai_bias and struct runner_bias have one layout");
_Static_assert(OPENAI_GRAMMAR_MAX == RUNNER_GRAMMAR_MAX && OPENAI_BIASES_MAX == RUNNER_BIASES_MAX,
               "the gateway's limits are the runner protocol's");

/* The choice as a runner request: the prompt plus what it generated so far. */
static int job_request(struct supervisor_job *job, struct runner_request *q, char *err,
                       size_t errlen) {
    struct gateway_choice *c = gateway_choice_of(job);
    struct gateway_request *r = c->request;
    pthread_mutex_lock(&r->lock);
    int n = c->prompt->n_tokens + c->n_generated;
    int *prompt = malloc((size_t)n * sizeof(int));
    if (prompt) {
        memcpy(prompt, c->prompt->tokens, (size_t)c->prompt->n_tokens * sizeof(int));
        memcpy(prompt + c->prompt->n_tokens, c->generated, (size_t)c->n_generated * sizeof(int));
        /* a choice whose last token came but not its FINISHED asks for one
         * more, which it ignores, and then ends by length as it would have */
        int remaining = c->max_tokens - c->n_generated;
        *q = (struct runner_request){.id = job->id,
                                     .sampling = c->sampling,
                                     .max_tokens = remaining > 0 ? remaining : 1,
                                     .ignore_eos = r->body.ignore_eos,
                                     .logprobs = 1,
                                     .top_logprobs = r->body.top_logprobs,
                                     .resumed = c->n_generated,
                                     .n_prompt = n,
                                     .prompt = prompt,
                                     .n_biases = r->body.n_biases,
                                     .biases = (struct runner_bias *)r->body.biases,
                                     .grammar = r->body.grammar,
                                     .grammar_trigger = r->body.grammar_trigger,
                                     .embed = r->body.kind == OPENAI_EMBEDDING};
    }
    pthread_mutex_unlock(&r->lock);
    if (prompt) return 0;
    snprintf(err, errlen, "out of memory for the runner's copy of the prompt");
    return -1;
}

static int64_t job_outstanding(struct supervisor_job *job) {
    const struct gateway_choice *c = gateway_choice_of(job);
    pthread_mutex_lock(&c->request->lock);
    int64_t tokens = c->max_tokens - c->n_generated;
    if (c->n_generated == 0) tokens += c->prompt->n_tokens;
    pthread_mutex_unlock(&c->request->lock);
    return tokens;
}

static void job_failed(struct supervisor_job *job, int status, const char *message) {
    gateway_request_fail(gateway_choice_of(job)->request, status, message);
}

static void job_embedding(struct supervisor_job *job, const struct runner_embedding *embedding,
                          struct supervisor *from) {
    gateway_request_on_embedding(gateway_choice_of(job), embedding, from);
}

void gateway_request_events(struct supervisor_events *events) {
    events->hold = job_hold;
    events->release = job_release;
    events->adopt = job_adopt;
    events->request = job_request;
    events->outstanding = job_outstanding;
    events->failed = job_failed;
    events->embedding = job_embedding;
}

void gateway_request_submit(struct gateway_request *r, struct supervisor *s) {
    struct supervisor_job *jobs[OPENAI_REQUEST_CHOICES_MAX];
    int n = 0;
    pthread_mutex_lock(&r->lock);
    int window = gateway_request_window(r);
    /* the next choices, while fewer than the window are with runners */
    while (!r->done && !r->abandoned && r->n_submitted < r->n_choices &&
           r->n_submitted - r->n_ended < window && n < OPENAI_REQUEST_CHOICES_MAX) {
        atomic_fetch_add(&r->references, 1);
        jobs[n++] = &r->choices[r->n_submitted++].job;
    }
    pthread_mutex_unlock(&r->lock);
    if (n > 0) supervisor_submit(s, jobs, n);
}
