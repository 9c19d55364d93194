/* request.c -- one client request inside the gateway: from the parsed body
 * to prompt tokens, and from the runner's tokens to the bytes the client
 * gets.
 *
 * Tokens are decoded incrementally (never half a UTF-8 character) into a
 * held-back text: the tail that could still be the start of a stop string
 * waits until the next token decides, so a stop string split across tokens
 * is matched and never reaches the client. Streaming requests get one SSE
 * chunk per token that produced text (or logprobs); others accumulate the
 * text for one JSON body at the end. The request keeps every generated
 * token, so a restarted runner can resume it exactly (DESIGN.md I4). */
#include "gateway_internal.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- creation: prompt tokens and limits ---------- */

static int chat_prompt(struct gateway_request *r, struct openai_error *error) {
    const struct gateway_instance *in = r->instance;
    char err[256], *text = NULL;
    size_t length = 0;
    int n = r->body.n_messages;
    struct tokenizer_chat_message *m = calloc((size_t)n, sizeof(*m));
    if (!m) goto out_of_memory;
    for (int i = 0; i < n; i++) {
        /* "developer" is OpenAI's newer name for the system role */
        int developer = !strcmp(r->body.messages[i].role, "developer");
        m[i] = (struct tokenizer_chat_message){developer ? "system" : r->body.messages[i].role,
                                               r->body.messages[i].content};
    }
    int rc = tokenizer_chat_apply(in->chat_template, m, n, 1, in->bos_text, in->eos_text, &text,
                                  &length, err, sizeof(err));
    free(m);
    if (rc) {
        openai_error_set(error, 400, "invalid_request_error", "messages", NULL, "%s", err);
        return -1;
    }
    int add_bos =
        tokenizer_adds_bos(in->tokenizer) && !tokenizer_chat_template_writes_bos(in->chat_template);
    int max_ids = tokenizer_max_ids(length);
    r->prompt = malloc((size_t)max_ids * sizeof(int));
    if (!r->prompt || tokenizer_encode_special(in->tokenizer, text, length, add_bos, r->prompt,
                                               max_ids, &r->n_prompt, err, sizeof(err))) {
        free(text);
        goto out_of_memory;
    }
    free(text);
    return 0;
out_of_memory:
    openai_error_set(error, 500, "server_error", NULL, NULL, "out of memory for the prompt");
    return -1;
}

static int completion_prompt(struct gateway_request *r, struct openai_error *error) {
    const struct tokenizer *tok = r->instance->tokenizer;
    char err[256];
    if (r->body.prompt_tokens) {
        int vocab = tokenizer_vocab_size(tok);
        for (int i = 0; i < r->body.n_prompt_tokens; i++)
            if (r->body.prompt_tokens[i] >= vocab) {
                openai_error_set(error, 400, "invalid_request_error", "prompt", NULL,
                                 "prompt token %d is %d, outside the vocabulary (0..%d)", i,
                                 r->body.prompt_tokens[i], vocab - 1);
                return -1;
            }
        r->n_prompt = r->body.n_prompt_tokens;
        r->prompt = malloc((size_t)r->n_prompt * sizeof(int));
        if (r->prompt) memcpy(r->prompt, r->body.prompt_tokens, (size_t)r->n_prompt * sizeof(int));
    } else {
        size_t length = strlen(r->body.prompt);
        int max_ids = tokenizer_max_ids(length);
        r->prompt = malloc((size_t)max_ids * sizeof(int));
        if (r->prompt && tokenizer_encode(tok, r->body.prompt, length, tokenizer_adds_bos(tok),
                                          r->prompt, max_ids, &r->n_prompt, err, sizeof(err)))
            r->n_prompt = -1;
        if (r->prompt && r->n_prompt == 0 && tokenizer_bos(tok) >= 0)
            r->prompt[r->n_prompt++] = tokenizer_bos(tok);
    }
    if (!r->prompt || r->n_prompt < 0) {
        openai_error_set(error, 500, "server_error", NULL, NULL, "out of memory for the prompt");
        return -1;
    }
    if (r->n_prompt == 0) {
        openai_error_set(error, 400, "invalid_request_error", "prompt", NULL,
                         "the prompt is empty and the vocabulary has no BOS token to start from");
        return -1;
    }
    return 0;
}

/* The limits: prompt length, context, max_tokens. */
static int check_limits(struct gateway_request *r, struct openai_error *error) {
    const struct gateway_params *p = &r->gateway->params;
    int context = r->instance->context_length;
    if (r->n_prompt > p->max_prompt_tokens || r->n_prompt >= context) {
        int limit = p->max_prompt_tokens < context - 1 ? p->max_prompt_tokens : context - 1;
        openai_error_set(error, 400, "invalid_request_error", "messages", "context_length_exceeded",
                         "the prompt has %d tokens; this model accepts at most %d", r->n_prompt,
                         limit);
        if (r->body.kind == OPENAI_COMPLETION)
            snprintf(error->param, sizeof(error->param), "prompt");
        return -1;
    }
    if (r->body.max_tokens > p->max_tokens_limit) {
        openai_error_set(error, 400, "invalid_request_error", "max_tokens", NULL,
                         "max_tokens is %d; the limit is %d", r->body.max_tokens,
                         p->max_tokens_limit);
        return -1;
    }
    /* as OpenAI: asking for more than the context holds is an error, not
     * a silent cut; without max_tokens generation runs to the context's end */
    if (r->body.max_tokens > context - r->n_prompt) {
        openai_error_set(error, 400, "invalid_request_error", "max_tokens",
                         "context_length_exceeded",
                         "the prompt has %d tokens and max_tokens is %d; this model's context "
                         "holds %d tokens",
                         r->n_prompt, r->body.max_tokens, context);
        return -1;
    }
    r->max_tokens = r->body.max_tokens > 0 ? r->body.max_tokens : p->max_tokens_limit;
    if (r->max_tokens > context - r->n_prompt) r->max_tokens = context - r->n_prompt;
    return 0;
}

/* OpenAI's sampling fields as the runner protocol carries them, checked by
 * the protocol's own rule (runner_check_sampling), so that nothing the
 * gateway accepts is refused on the way to the runner. */
static int set_sampling(struct gateway_request *r, struct openai_error *error) {
    const struct openai_request *b = &r->body;
    struct runner_sampling *s = &r->sampling;
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

struct gateway_request *gateway_request_create(struct gateway *gateway,
                                               struct gateway_instance *instance,
                                               struct openai_request *body,
                                               struct openai_error *error) {
    struct gateway_request *r = calloc(1, sizeof(*r));
    if (!r) {
        openai_error_set(error, 500, "server_error", NULL, NULL, "out of memory");
        openai_request_free(body);
        return NULL;
    }
    atomic_init(&r->references, 1);
    pthread_mutex_init(&r->lock, NULL);
    r->gateway = gateway;
    r->instance = instance;
    r->body = *body;
    memset(body, 0, sizeof(*body));
    r->id = atomic_fetch_add(&gateway->next_id, 1);
    r->arrival_us = runner_now_us();
    r->last_output_us = r->arrival_us;
    snprintf(r->response_id, sizeof(r->response_id), "%s-%llx%06llx",
             r->body.kind == OPENAI_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)r->arrival_us,
             (unsigned long long)r->id);
    openai_response_init(&r->response, &r->body, r->response_id, (int64_t)time(NULL));
    r->response.model = instance->name;
    int failed = r->body.kind == OPENAI_CHAT ? chat_prompt(r, error) : completion_prompt(r, error);
    if (!failed) failed = check_limits(r, error);
    if (!failed) failed = set_sampling(r, error);
    if (!failed) {
        r->generated = malloc((size_t)r->max_tokens * sizeof(int));
        r->token_reports = calloc((size_t)r->max_tokens, sizeof(*r->token_reports));
        r->token_start = malloc((size_t)r->max_tokens * sizeof(*r->token_start));
        if (!r->generated || !r->token_reports || !r->token_start) {
            openai_error_set(error, 500, "server_error", NULL, NULL, "out of memory");
            failed = 1;
        }
    }
    if (failed) {
        gateway_request_release(r);
        return NULL;
    }
    tokenizer_stream_init(&r->decoder, instance->tokenizer, 0);
    return r;
}

void gateway_request_release(struct gateway_request *r) {
    if (!r || atomic_fetch_sub(&r->references, 1) != 1) return;
    openai_request_free(&r->body);
    free(r->prompt);
    free(r->generated);
    free(r->token_reports);
    free(r->token_start);
    free(r->held);
    free(r->error_json);
    runner_buffer_free(&r->text);
    runner_buffer_free(&r->out);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* ---------- output ---------- */

void gateway_request_wake(struct gateway_request *r) {
    if (r->suspended && r->connection) {
        r->suspended = 0;
        MHD_resume_connection(r->connection);
    }
}

/* Appends "data: JSON\n\n" (and frees json). */
static void append_event(struct gateway_request *r, char *json) {
    static const char prefix[] = "data: ", suffix[] = "\n\n";
    if (!json) return;
    runner_buffer_append(&r->out, prefix, sizeof(prefix) - 1);
    runner_buffer_append(&r->out, json, strlen(json));
    runner_buffer_append(&r->out, suffix, sizeof(suffix) - 1);
    free(json);
    r->last_output_us = runner_now_us();
}

/* Sends text (and the pending logprobs) to the client. */
static void emit(struct gateway_request *r, const char *text, size_t length,
                 enum openai_finish finish) {
    if (!r->body.stream) {
        runner_buffer_append(&r->text, text, length);
        return;
    }
    int reports = r->body.logprobs ? r->n_shown - r->n_reported : 0;
    if (length == 0 && reports == 0 && finish == OPENAI_FINISH_NONE && r->first_sent) return;
    struct openai_delta d = {.first = !r->first_sent,
                             .text = text,
                             .length = length,
                             .finish = finish,
                             .n_tokens = reports,
                             .tokens = r->token_reports + r->n_reported,
                             .text_offset = r->text_chars};
    append_event(r, openai_chunk_json(&r->response, &d));
    r->first_sent = 1;
    r->n_reported = r->n_shown;
    r->text_chars += openai_text_chars(text, length);
}

/* Length of the longest tail of held that some stop string starts with. */
static size_t stop_prefix_tail(const struct gateway_request *r) {
    size_t best = 0;
    for (int s = 0; s < r->body.n_stops; s++) {
        size_t n = strlen(r->body.stops[s]);
        for (size_t k = n - 1 < r->n_held ? n - 1 : r->n_held; k > best; k--)
            if (!memcmp(r->held + r->n_held - k, r->body.stops[s], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Sends what of the held text can no longer be part of a stop string;
 * returns 1 if a stop string was found (the text before it was sent). */
static int release_held(struct gateway_request *r, int final) {
    size_t cut = r->n_held;
    if (cut == 0) { /* nothing held (a token of no text yet): logprobs may still go out */
        emit(r, "", 0, OPENAI_FINISH_NONE);
        return 0;
    }
    int stopped = 0;
    for (int s = 0; s < r->body.n_stops; s++) {
        const char *at = memmem(r->held, r->n_held, r->body.stops[s], strlen(r->body.stops[s]));
        if (at && (size_t)(at - r->held) < cut) {
            cut = (size_t)(at - r->held);
            stopped = 1;
        }
    }
    if (!stopped && !final) cut = r->n_held - stop_prefix_tail(r);
    /* the tokens whose text the stop string removed whole are not shown,
     * in logprobs either: those that begin at or after the cut */
    while (stopped && r->n_shown > 0 && r->token_start[r->n_shown - 1] >= r->released + cut)
        r->n_shown--;
    emit(r, r->held, cut, OPENAI_FINISH_NONE);
    if (stopped) {
        r->n_held = 0;
        return 1;
    }
    memmove(r->held, r->held + cut, r->n_held - cut);
    r->n_held -= cut;
    r->released += cut;
    return 0;
}

static int hold(struct gateway_request *r, const char *bytes, size_t n) {
    if (n == 0) return 0;
    if (r->n_held + n > r->held_capacity) {
        size_t capacity = 2 * (r->n_held + n) + 64;
        char *grown = realloc(r->held, capacity);
        if (!grown) return -1;
        r->held = grown;
        r->held_capacity = capacity;
    }
    memcpy(r->held + r->n_held, bytes, n);
    r->n_held += n;
    return 0;
}

/* Ends the output: last chunk, usage, [DONE] (streaming); wakes the client. */
static void finish_output(struct gateway_request *r, enum openai_finish finish) {
    r->finish = finish;
    r->done = 1;
    if (r->body.stream) {
        emit(r, "", 0, finish);
        if (r->body.include_usage) {
            struct openai_usage u = {r->n_prompt, r->n_generated};
            append_event(r, openai_usage_chunk_json(&r->response, &u));
        }
        static const char done[] = "data: [DONE]\n\n";
        runner_buffer_append(&r->out, done, sizeof(done) - 1);
    }
    gateway_request_wake(r);
}

/* Fills the logprobs report of the newest token. */
static void report_token(struct gateway_request *r, const struct runner_token *t) {
    struct openai_token *report = &r->token_reports[r->n_generated - 1];
    const struct tokenizer *tok = r->instance->tokenizer;
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

void gateway_request_on_token(struct gateway_request *r, const struct runner_token *t) {
    char text[1024];
    int stopped = 0;
    pthread_mutex_lock(&r->lock);
    if (r->done || r->n_generated >= r->max_tokens) {
        pthread_mutex_unlock(&r->lock);
        return;
    }
    uint64_t now = runner_now_us();
    if (r->n_generated == 0)
        r->first_token_us = now;
    else
        gateway_observe_latency(r->instance, -1, (double)(now - r->last_token_us) * 1e-6);
    if (r->n_generated == 0)
        gateway_observe_latency(r->instance, (double)(now - r->arrival_us) * 1e-6, -1);
    r->last_token_us = now;
    if (r->body.stream && !r->unsent_since_us) r->unsent_since_us = now;
    r->token_start[r->n_generated] = r->decoded;
    r->generated[r->n_generated++] = t->token;
    r->n_shown = r->n_generated;
    report_token(r, t);
    size_t n = tokenizer_stream_push(&r->decoder, t->token, text, sizeof(text));
    r->decoded += n;
    if (hold(r, text, n) == 0) stopped = release_held(r, 0);
    if (stopped) finish_output(r, OPENAI_FINISH_STOP);
    gateway_request_wake(r);
    pthread_mutex_unlock(&r->lock);
    /* outside the request's lock: the instance lock is taken before it */
    if (stopped) gateway_instance_cancel(r->instance, r);
}

void gateway_request_fail(struct gateway_request *r, int status, const char *message) {
    struct openai_error e;
    pthread_mutex_lock(&r->lock);
    if (!r->done) {
        const char *type = status == 429   ? "rate_limit_error"
                           : status >= 500 ? "server_error"
                                           : "invalid_request_error";
        openai_error_set(&e, status, type, NULL, NULL, "%s", message);
        r->error_json = openai_error_json(&e);
        r->failed = status;
        if (r->body.stream) append_event(r, strdup(r->error_json ? r->error_json : "{}"));
        finish_output(r, OPENAI_FINISH_NONE);
    }
    pthread_mutex_unlock(&r->lock);
}

void gateway_request_on_finished(struct gateway_request *r, const struct runner_finished *f) {
    char text[64];
    static const int status_of[] = {[RUNNER_ERROR_INTERNAL] = 500,
                                    [RUNNER_ERROR_BAD_REQUEST] = 400,
                                    [RUNNER_ERROR_OVER_CAPACITY] = 429,
                                    [RUNNER_ERROR_OUT_OF_MEMORY] = 503};
    if (f->reason == RUNNER_FINISH_ERROR) {
        gateway_request_fail(r, status_of[f->category], f->message);
        return;
    }
    pthread_mutex_lock(&r->lock);
    if (!r->done && f->reason != RUNNER_FINISH_CANCELLED) {
        size_t n = tokenizer_stream_flush(&r->decoder, text, sizeof(text));
        int stopped = hold(r, text, n) == 0 && release_held(r, 1);
        int length = f->reason == RUNNER_FINISH_LENGTH && !stopped;
        finish_output(r, length ? OPENAI_FINISH_LENGTH : OPENAI_FINISH_STOP);
    }
    pthread_mutex_unlock(&r->lock);
}

void gateway_request_keep_alive(struct gateway_request *r, uint64_t now_us) {
    static const char comment[] = ": keep-alive\n\n";
    double seconds = r->gateway->params.keep_alive_seconds;
    pthread_mutex_lock(&r->lock);
    if (r->body.stream && !r->done && (double)(now_us - r->last_output_us) * 1e-6 >= seconds) {
        runner_buffer_append(&r->out, comment, sizeof(comment) - 1);
        r->last_output_us = now_us;
        gateway_request_wake(r);
    }
    pthread_mutex_unlock(&r->lock);
}
