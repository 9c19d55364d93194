/* test_gateway_requests.c -- src/gateway/requests alone, driven by fake
 * events: no HTTP server, no runner, no supervisor thread.
 *
 * The layer knows a supervisor only as a pointer (a choice's holder) and
 * through the job events of gateway_request_events, and the layers above
 * only as struct requests_env (whose cancel is recorded here) and the
 * reader hook. So each case parses an OpenAI body, creates a request with
 * the vocabulary of ../shared/models/kjv2m-q8_0.gguf (skipped without it),
 * makes its choices held by a fake supervisor (the address of a struct
 * supervisor never initialised) through adopt, and feeds it fabricated
 * TOKEN and FINISHED frames whose ids encode known text, so that every
 * check is on exact bytes: whole and streamed answers, a stop string split
 * across tokens, n = 2, frames from a supervisor that is not the holder,
 * the job events (request, outstanding, adopt, failed, hold and release),
 * runner errors as HTTP statuses, the reader's wake-up, keep-alive
 * comments and the limits checked at creation. Everything is synchronous:
 * each call has done its work when it returns (the cases run in one thread
 * of their own only so that LeakSanitizer sees a request never freed). */
#include "gateway/requests/requests.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_FILE "models/kjv2m-q8_0.gguf"
#define MAX_IDS    64
#define TEXT       "Hello world" /* what the runner "generates" */
#define STOP       "o w"         /* split across TEXT's tokens: " H" "ell" "o" " wor" "ld" */

static char model_path[512];
static struct gateway_served served;
static struct gateway_params params;
static atomic_ullong next_id;
static struct requests_env env;
static struct supervisor_events events;
/* Fake supervisors: only their addresses are used, as holders' identities. */
static struct supervisor fake_a, fake_b;

/* The router's cancel, recorded: it must be asked once per ended choice. */
static struct {
    struct gateway_request *request;
    struct gateway_choice *only;
} cancels[16];
static int n_cancels;

/* Forgets the calls recorded: no stale request address stays in them to
 * hide a leaked request from LeakSanitizer. */
static void forget_cancels(void) {
    memset(cancels, 0, sizeof(cancels));
    n_cancels = 0;
}

static void fake_cancel(void *context, struct gateway_request *r, struct gateway_choice *only) {
    CHECK(context == &env);
    if (n_cancels < 16) {
        cancels[n_cancels].request = r;
        cancels[n_cancels].only = only;
    }
    n_cancels++;
}

/* The reader's wake-ups, recorded. */
static int reader_identity;
static void *woken[16];
static int n_woken;

static void fake_wake(void *reader) {
    if (n_woken < 16) woken[n_woken] = reader;
    n_woken++;
}

/* ---------- helpers ---------- */

/* 1: ready; 0: the model is absent (skip); -1: it did not load. */
static int setup(void) {
    char err[256];
    test_shared_path(model_path, sizeof(model_path), MODEL_FILE);
    if (!test_require_file(model_path)) return 0;
    struct gateway_model model = {.path = model_path, .tp = 1, .threads = 1};
    if (gateway_served_init(&served, &model, err, sizeof(err))) {
        CHECK_MSG(0, "%s: %s", model_path, err);
        return -1;
    }
    params.max_prompt_tokens = 200;
    params.max_tokens_limit = 64;
    params.keep_alive_seconds = 15;
    atomic_init(&next_id, 1000);
    env = (struct requests_env){.params = &params, .next_id = &next_id, .cancel = fake_cancel};
    env.context = &env;
    gateway_request_events(&events);
    return 1;
}

/* A request of kind from a JSON body; NULL after a failed check. */
static struct gateway_request *create(enum openai_kind kind, const char *json) {
    struct openai_request body;
    struct openai_error e;
    if (openai_parse_request(json, strlen(json), kind, &body, &e)) {
        CHECK_MSG(0, "%s: %s", json, e.message);
        return NULL;
    }
    struct gateway_request *r = gateway_request_create(&env, &served, "fake-1", &body, &e);
    CHECK_MSG(r != NULL, "%s: %d %s", json, e.status, e.message);
    return r;
}

/* The body is refused at creation with a 400 about param (code and the
 * message's start when not NULL). */
static void refuse(enum openai_kind kind, const char *json, const char *param, const char *code,
                   const char *message) {
    struct openai_request body;
    struct openai_error e;
    if (openai_parse_request(json, strlen(json), kind, &body, &e)) {
        CHECK_MSG(0, "%s: %s", json, e.message);
        return;
    }
    struct gateway_request *r = gateway_request_create(&env, &served, "fake-1", &body, &e);
    CHECK_MSG(r == NULL, "%s was accepted", json);
    if (r) {
        gateway_request_release(r);
        return;
    }
    CHECK_MSG(e.status == 400 && !strcmp(e.type, "invalid_request_error"), "%d %s", e.status,
              e.type);
    CHECK_MSG(!strcmp(e.param, param), "param '%s', not '%s'", e.param, param);
    CHECK(code ? e.code && !strcmp(e.code, code) : e.code == NULL);
    if (message) CHECK_MSG(!strncmp(e.message, message, strlen(message)), "%s", e.message);
}

/* Every choice of r is held by s now. */
static void adopt(struct gateway_request *r, struct supervisor *s) {
    for (int i = 0; i < r->n_choices; i++)
        CHECK(events.adopt(&r->choices[i].job, s) == 1 && r->choices[i].job.holder == s);
}

/* text's ids (no BOS), as the runner would generate them. */
static int encode(const char *text, int *ids) {
    char err[256];
    int n = 0;
    CHECK(tokenizer_encode(served.tokenizer, text, strlen(text), 0, ids, MAX_IDS, &n, err,
                           sizeof(err)) == 0);
    return n;
}

/* The bytes ids decode to, as a choice's own stream decoder gives them;
 * starts[k] (when not NULL) is where token k's bytes begin. */
static size_t detokenize(const int *ids, int n, char *out, size_t size, size_t *starts) {
    struct tokenizer_stream stream;
    char piece[1024];
    size_t used = 0;
    tokenizer_stream_init(&stream, served.tokenizer, 0);
    for (int k = 0; k <= n; k++) {
        if (starts && k < n) starts[k] = used;
        size_t m = k < n ? tokenizer_stream_push(&stream, ids[k], piece, sizeof(piece))
                         : tokenizer_stream_flush(&stream, piece, sizeof(piece));
        if (used + m >= size) {
            CHECK_MSG(0, "more than %zu bytes", size);
            break;
        }
        memcpy(out + used, piece, m);
        used += m;
    }
    out[used] = '\0';
    return used;
}

/* A TOKEN frame from `from` (logprob fabricated); its latency in *latency. */
static void token(struct gateway_choice *c, int id, struct supervisor *from,
                  struct gateway_latency *latency) {
    struct runner_token t = {.id = c->job.id, .token = id, .logprob = -0.25f};
    struct gateway_latency ignored;
    gateway_request_on_token(c, &t, from, latency ? latency : &ignored);
}

static void tokens(struct gateway_choice *c, const int *ids, int n, struct supervisor *from) {
    for (int k = 0; k < n; k++) token(c, ids[k], from, NULL);
}

/* A FINISHED frame from `from` (category and message for an error). */
static void finished(struct gateway_choice *c, enum runner_finish_reason reason,
                     enum runner_error_category category, struct supervisor *from) {
    struct runner_finished f = {.id = c->job.id,
                                .reason = reason,
                                .n_prompt = c->prompt->n_tokens,
                                .n_generated = c->n_generated,
                                .category = category};
    if (reason == RUNNER_FINISH_ERROR) snprintf(f.message, sizeof(f.message), "the runner failed");
    gateway_request_on_finished(c, &f, from);
}

/* The choice's whole (not streamed) answer is exactly text. */
static void check_text(const struct gateway_choice *c, const char *text) {
    size_t n = strlen(text);
    CHECK_MSG(c->text.length == n && (n == 0 || !memcmp(c->text.data, text, n)), "'%.*s', not '%s'",
              (int)c->text.length, c->text.data ? (char *)c->text.data : "", text);
}

/* The events of r's stream: its JSON chunks parsed (free_stream them), and
 * whether it ended with "data: [DONE]" (nothing may follow it). */
struct stream {
    cJSON *chunks[128];
    int n;
    int done;
};

static void parse_stream(const struct gateway_request *r, struct stream *s) {
    const char *p = (const char *)r->out.data, *end = p + r->out.length;
    memset(s, 0, sizeof(*s));
    while (p && p < end) {
        const char *next = memmem(p, (size_t)(end - p), "\n\n", 2);
        CHECK_MSG(!s->done, "bytes after [DONE]");
        if (!next || strncmp(p, "data: ", 6) != 0) {
            CHECK_MSG(0, "not an SSE data event: %.*s", (int)(end - p), p);
            return;
        }
        const char *data = p + 6;
        size_t length = (size_t)(next - data);
        if (length == 6 && !memcmp(data, "[DONE]", 6)) {
            s->done = 1;
        } else {
            cJSON *chunk = cJSON_ParseWithLength(data, length);
            CHECK_MSG(chunk && s->n < 128, "%.*s", (int)length, data);
            if (chunk && s->n < 128) s->chunks[s->n++] = chunk;
        }
        p = next + 2;
    }
}

static void free_stream(struct stream *s) {
    for (int k = 0; k < s->n; k++) cJSON_Delete(s->chunks[k]);
    s->n = 0;
}

/* What a stream says of choice `index`: its deltas' text in order, its
 * finish_reason (only its last chunk may have one), its chunks, and
 * whether (chat) the first carried the role and only the first. */
struct streamed {
    char text[512];
    size_t length;
    char finish[16];
    int chunks;
    int role_first;
};

static void stream_choice(const struct stream *s, int index, struct streamed *out) {
    memset(out, 0, sizeof(*out));
    for (int k = 0; k < s->n; k++) {
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(s->chunks[k], "choices"), 0);
        const cJSON *at = cJSON_GetObjectItem(c, "index");
        if (!cJSON_IsNumber(at) || at->valueint != index) continue;
        CHECK_MSG(!out->finish[0], "choice %d: a chunk after its finish_reason", index);
        const cJSON *delta = cJSON_GetObjectItem(c, "delta");
        const cJSON *text = cJSON_GetObjectItem(delta ? delta : c, delta ? "content" : "text");
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(delta, "role"));
        if (out->chunks == 0)
            out->role_first = role && !strcmp(role, "assistant");
        else
            CHECK(role == NULL);
        const char *piece = cJSON_GetStringValue(text);
        size_t n = piece ? strlen(piece) : 0;
        CHECK(out->length + n < sizeof(out->text));
        if (piece && out->length + n < sizeof(out->text)) {
            memcpy(out->text + out->length, piece, n);
            out->length += n;
        }
        const char *finish = cJSON_GetStringValue(cJSON_GetObjectItem(c, "finish_reason"));
        if (finish) snprintf(out->finish, sizeof(out->finish), "%s", finish);
        out->chunks++;
    }
}

/* A chat body with one user message and more fields (may be ""). */
static void chat_body(char *out, size_t size, const char *content, const char *fields) {
    snprintf(out, size, "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]%s%s}", content,
             *fields ? "," : "", fields);
}

/* The chat prompt's tokens are the template's text for that message,
 * encoded as the gateway's chat_prompt must (the vocabulary's BOS unless
 * the template writes it). */
static void check_chat_prompt(const struct gateway_request *r, const char *content) {
    struct tokenizer_chat_message m = {.role = "user", .content = content};
    char *text = NULL, err[256];
    size_t length = 0;
    int n = 0;
    CHECK(tokenizer_chat_apply(served.chat_template, &m, 1, 1, served.bos_text, served.eos_text,
                               &text, &length, err, sizeof(err)) == 0);
    int add_bos = tokenizer_adds_bos(served.tokenizer) &&
                  !tokenizer_chat_template_writes_bos(served.chat_template);
    int *ids = malloc((size_t)tokenizer_max_ids(length) * sizeof(int));
    CHECK(ids && tokenizer_encode_special(served.tokenizer, text, length, add_bos, ids,
                                          tokenizer_max_ids(length), &n, err, sizeof(err)) == 0);
    CHECK_MSG(r->prompts[0].n_tokens == n && n > 0 &&
                  !memcmp(r->prompts[0].tokens, ids, (size_t)n * sizeof(int)),
              "prompt of %d tokens, not %d", r->prompts[0].n_tokens, n);
    free(ids);
    free(text);
}

/* ---------- cases ---------- */

/* A whole chat answer: the decoded tokens, finish "length", usage. */
static void test_whole_chat(void) {
    char body[512], want[256];
    int ids[MAX_IDS];
    int n = encode(TEXT, ids);
    detokenize(ids, n, want, sizeof(want), NULL);
    /* SPM's space prefix stays: the stream decoder does not strip it */
    CHECK_MSG(!strcmp(want, " " TEXT), "'%s'", want);
    chat_body(body, sizeof(body), "In the beginning", "\"max_tokens\":16");
    struct gateway_request *r = create(OPENAI_CHAT, body);
    if (!r) return;
    struct gateway_choice *c = &r->choices[0];
    CHECK(r->n_choices == 1 && r->choices[0].max_tokens == 16 && c->job.id == r->id &&
          c->job.group == r);
    check_chat_prompt(r, "In the beginning");
    adopt(r, &fake_a);
    for (int k = 0; k < n; k++) {
        struct gateway_latency latency;
        token(c, ids[k], &fake_a, &latency);
        /* the request's first token has a ttft; every later one an itl */
        CHECK(k == 0 ? latency.ttft >= 0 && latency.itl < 0 : latency.ttft < 0 && latency.itl >= 0);
    }
    CHECK(!r->done && !c->done);
    struct runner_finished f = {.id = c->job.id, .reason = RUNNER_FINISH_LENGTH, .n_cached = 3};
    gateway_request_on_finished(c, &f, &fake_a);
    CHECK(r->done && !r->failed && c->done && c->finish == OPENAI_FINISH_LENGTH);
    check_text(c, want);
    struct openai_usage usage = gateway_request_usage(r);
    CHECK(usage.prompt_tokens == r->prompts[0].n_tokens && usage.completion_tokens == n &&
          usage.cached_tokens == 3);
    CHECK(r->out.length == 0 && n_cancels == 0); /* not streamed; nothing to cancel */
    gateway_request_release(r);
}

/* A streamed chat answer: a role chunk first, the deltas spell the text,
 * finish "length" last, with include_usage a usage chunk, then [DONE]. */
static void test_stream_chat(int include_usage) {
    char body[512], want[256];
    int ids[MAX_IDS];
    int n = encode(TEXT, ids);
    detokenize(ids, n, want, sizeof(want), NULL);
    chat_body(body, sizeof(body), "In the beginning",
              include_usage ? "\"stream\":true,\"stream_options\":{\"include_usage\":true}"
                            : "\"stream\":true");
    struct gateway_request *r = create(OPENAI_CHAT, body);
    if (!r) return;
    adopt(r, &fake_a);
    tokens(&r->choices[0], ids, n, &fake_a);
    finished(&r->choices[0], RUNNER_FINISH_LENGTH, 0, &fake_a);
    CHECK(r->done && r->choices[0].text.length == 0); /* streamed, not kept */
    struct stream s;
    struct streamed got;
    parse_stream(r, &s);
    stream_choice(&s, 0, &got);
    CHECK(s.done);
    /* one chunk per token (each has text), the finishing one, the usage */
    CHECK_MSG(s.n == n + 1 + include_usage, "%d chunks", s.n);
    CHECK(got.role_first && got.chunks == n + 1 && !strcmp(got.finish, "length"));
    CHECK_MSG(got.length == strlen(want) && !strcmp(got.text, want), "'%s'", got.text);
    for (int k = 0; k < s.n; k++) {
        const cJSON *usage = cJSON_GetObjectItem(s.chunks[k], "usage");
        CHECK(
            !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s.chunks[k], "id")), r->response_id));
        CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s.chunks[k], "object")),
                      "chat.completion.chunk"));
        if (include_usage && k < s.n - 1) CHECK(cJSON_IsNull(usage));
        if (!include_usage) CHECK(usage == NULL);
    }
    if (include_usage && s.n > 0) {
        const cJSON *last = s.chunks[s.n - 1], *usage = cJSON_GetObjectItem(last, "usage");
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(last, "choices")) == 0);
        CHECK(cJSON_GetObjectItem(usage, "prompt_tokens")->valueint == r->prompts[0].n_tokens);
        CHECK(cJSON_GetObjectItem(usage, "completion_tokens")->valueint == n);
        CHECK(cJSON_GetObjectItem(usage, "total_tokens")->valueint == r->prompts[0].n_tokens + n);
    }
    free_stream(&s);
    gateway_request_release(r);
}

/* A stop string split across two tokens never reaches the client; the
 * choice ends "stop" and its runner is cancelled once; what the runner
 * sends after that is ignored. */
static void test_stop_split(int stream) {
    char body[512], want[256];
    size_t starts[MAX_IDS];
    int ids[MAX_IDS];
    int n = encode(TEXT, ids);
    detokenize(ids, n, want, sizeof(want), starts);
    const char *at = strstr(want, STOP);
    size_t cut = at ? (size_t)(at - want) : 0;
    /* the premise: STOP starts in one token and ends in a later one */
    int first = 0, last = 0; /* the tokens of STOP's first and last bytes */
    int shown = 0;           /* the tokens that begin before it */
    for (int k = 0; k < n; k++) {
        if (starts[k] <= cut) first = k;
        if (starts[k] < cut + strlen(STOP)) last = k;
        if (starts[k] < cut) shown++;
    }
    CHECK_MSG(at && first < last, "'%s' is not split in '%s'", STOP, want);
    chat_body(body, sizeof(body), "In the beginning",
              stream ? "\"stop\":[\"" STOP "\"],\"stream\":true" : "\"stop\":[\"" STOP "\"]");
    struct gateway_request *r = create(OPENAI_CHAT, body);
    if (!r) return;
    struct gateway_choice *c = &r->choices[0];
    adopt(r, &fake_a);
    forget_cancels();
    tokens(c, ids, n, &fake_a);
    finished(c, RUNNER_FINISH_LENGTH, 0, &fake_a); /* too late: it ended "stop" */
    CHECK(r->done && c->done && c->finish == OPENAI_FINISH_STOP);
    /* the tokens after the stop's last were ignored; those that begin at
     * or after the cut are not shown (in logprobs) */
    CHECK_MSG(c->n_generated == last + 1 && c->n_shown == shown, "%d generated, %d shown",
              c->n_generated, c->n_shown);
    CHECK_MSG(n_cancels == 1 && cancels[0].request == r && cancels[0].only == c, "%d cancels",
              n_cancels);
    want[cut] = '\0';
    if (stream) {
        struct stream s;
        struct streamed got;
        parse_stream(r, &s);
        stream_choice(&s, 0, &got);
        CHECK(s.done && !strcmp(got.finish, "stop"));
        CHECK_MSG(!strcmp(got.text, want), "'%s', not '%s'", got.text, want);
        free_stream(&s);
    } else {
        check_text(c, want);
    }
    gateway_request_release(r);
    forget_cancels();
}

/* A choice a stop string ended is over: the error its runner may still
 * send before the cancel reaches it (a grammar's dead end in the tokens
 * generated past the stop) fails neither the request nor its other
 * choice. */
static void test_error_after_stop(void) {
    char body[512], want[256];
    int ids[MAX_IDS];
    int n = encode(TEXT, ids);
    detokenize(ids, n, want, sizeof(want), NULL);
    chat_body(body, sizeof(body), "In the beginning", "\"n\":2,\"stop\":[\"" STOP "\"]");
    struct gateway_request *r = create(OPENAI_CHAT, body);
    if (!r) return;
    adopt(r, &fake_a);
    forget_cancels();
    tokens(&r->choices[0], ids, n, &fake_a);
    CHECK(r->choices[0].done && n_cancels == 1 && cancels[0].only == &r->choices[0]);
    finished(&r->choices[0], RUNNER_FINISH_ERROR, RUNNER_ERROR_BAD_REQUEST, &fake_a);
    CHECK_MSG(!r->done && !r->failed && n_cancels == 1, "failed %d, %d cancels", r->failed,
              n_cancels);
    tokens(&r->choices[1], ids, 2, &fake_a); /* " H" "ell": no stop */
    finished(&r->choices[1], RUNNER_FINISH_EOS, 0, &fake_a);
    CHECK(r->done && !r->failed && r->choices[1].finish == OPENAI_FINISH_STOP);
    char *at = strstr(want, STOP);
    if (at) *at = '\0';
    check_text(&r->choices[0], want);
    check_text(&r->choices[1], " Hell");
    gateway_request_release(r);
    forget_cancels();
}

/* n = 2: consecutive runner ids, seeds one apart, interleaved chunks
 * with their index, and one end after both choices finished. */
static void test_two_choices(void) {
    char want0[256], want1[256];
    int ids0[MAX_IDS], ids1[MAX_IDS], prompt[MAX_IDS];
    int n0 = encode(TEXT, ids0), n1 = encode("And God said", ids1);
    detokenize(ids0, n0, want0, sizeof(want0), NULL);
    detokenize(ids1, n1, want1, sizeof(want1), NULL);
    unsigned long long before = atomic_load(&next_id);
    struct gateway_request *r =
        create(OPENAI_COMPLETION, "{\"prompt\":\"In the beginning\",\"n\":2,\"seed\":42,"
                                  "\"stream\":true,\"max_tokens\":8}");
    if (!r) return;
    CHECK(r->id == before && atomic_load(&next_id) == before + 2 && r->n_choices == 2);
    for (int i = 0; i < 2; i++)
        CHECK(r->choices[i].job.id == r->id + (uint64_t)i && r->choices[i].index == i &&
              r->choices[i].sampling.seed == 42 + (uint64_t)i && r->choices[i].job.group == r);
    /* the completion prompt: its text's ids after the vocabulary's BOS */
    char err[256];
    int n_prompt = 0;
    CHECK(tokenizer_encode(served.tokenizer, "In the beginning", 16,
                           tokenizer_adds_bos(served.tokenizer), prompt, MAX_IDS, &n_prompt, err,
                           sizeof(err)) == 0);
    CHECK(r->prompts[0].n_tokens == n_prompt &&
          !memcmp(r->prompts[0].tokens, prompt, (size_t)n_prompt * sizeof(int)));
    adopt(r, &fake_a);
    for (int k = 0; k < n0 || k < n1; k++) {
        if (k < n0) token(&r->choices[0], ids0[k], &fake_a, NULL);
        if (k < n1) token(&r->choices[1], ids1[k], &fake_a, NULL);
    }
    finished(&r->choices[0], RUNNER_FINISH_LENGTH, 0, &fake_a);
    struct stream s;
    parse_stream(r, &s);
    CHECK(!r->done && r->n_ended == 1 && !s.done); /* choice 1 still runs */
    free_stream(&s);
    finished(&r->choices[1], RUNNER_FINISH_EOS, 0, &fake_a);
    CHECK(r->done && r->n_ended == 2);
    struct streamed got0, got1;
    parse_stream(r, &s);
    stream_choice(&s, 0, &got0);
    stream_choice(&s, 1, &got1);
    CHECK(s.done && got0.chunks + got1.chunks == s.n);
    CHECK(!strcmp(got0.text, want0) && !strcmp(got0.finish, "length"));
    CHECK(!strcmp(got1.text, want1) && !strcmp(got1.finish, "stop"));
    /* interleaved as they came: choice 0's first token, then choice 1's */
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(s.chunks[0], "choices"), 0);
    const cJSON *c1 = cJSON_GetArrayItem(cJSON_GetObjectItem(s.chunks[1], "choices"), 0);
    CHECK(cJSON_GetObjectItem(c0, "index")->valueint == 0 &&
          cJSON_GetObjectItem(c1, "index")->valueint == 1);
    struct openai_usage usage = gateway_request_usage(r);
    CHECK(usage.prompt_tokens == n_prompt && usage.completion_tokens == n0 + n1);
    free_stream(&s);
    gateway_request_release(r);
    /* without a seed one is drawn, and the choices' still differ by one */
    r = create(OPENAI_COMPLETION, "{\"prompt\":\"In\",\"n\":2}");
    if (r) CHECK(r->choices[1].sampling.seed == r->choices[0].sampling.seed + 1);
    gateway_request_release(r);
}

/* Frames from a supervisor that does not hold the choice (one it was
 * moved off) change nothing; after a move, the new holder's count. */
static void test_holder_mismatch(void) {
    char body[512], want[256];
    int ids[MAX_IDS];
    int n = encode("In the beginning God created the heaven", ids);
    CHECK(n >= 3);
    chat_body(body, sizeof(body), "Hi", "\"stream\":true");
    struct gateway_request *r = create(OPENAI_CHAT, body);
    if (!r) return;
    struct gateway_choice *c = &r->choices[0];
    struct gateway_latency latency;
    adopt(r, &fake_a);
    token(c, ids[0], &fake_a, NULL);
    size_t out = r->out.length;
    CHECK(out > 0 && c->n_generated == 1);
    token(c, ids[1], &fake_b, &latency);
    CHECK(r->out.length == out && c->n_generated == 1 && latency.ttft < 0 && latency.itl < 0);
    finished(c, RUNNER_FINISH_LENGTH, 0, &fake_b);
    finished(c, RUNNER_FINISH_ERROR, RUNNER_ERROR_INTERNAL, &fake_b);
    CHECK(!c->done && !r->done && !r->failed && n_cancels == 0 && r->out.length == out);
    /* moved to b: a's frames are the stale ones now */
    adopt(r, &fake_b);
    token(c, ids[1], &fake_a, NULL);
    CHECK(r->out.length == out && c->n_generated == 1);
    token(c, ids[1], &fake_b, NULL);
    token(c, ids[2], &fake_b, NULL);
    finished(c, RUNNER_FINISH_LENGTH, 0, &fake_a);
    CHECK(!r->done && c->n_generated == 3);
    finished(c, RUNNER_FINISH_LENGTH, 0, &fake_b);
    CHECK(r->done);
    struct stream s;
    struct streamed got;
    parse_stream(r, &s);
    stream_choice(&s, 0, &got);
    detokenize(ids, 3, want, sizeof(want), NULL);
    CHECK_MSG(s.done && !strcmp(got.text, want), "'%s', not '%s'", got.text, want);
    free_stream(&s);
    gateway_request_release(r);
}

/* request(): the prompt and the tokens so far, resumed and max_tokens
 * what is left; outstanding(): prompt + max before the first token, then
 * what is left; adopt() refuses once the choice is over. */
static void test_job_request(void) {
    int ids[MAX_IDS];
    char err[128];
    int n = encode("In the beginning God created the heaven and the earth", ids);
    CHECK(n > 8);
    struct gateway_request *r =
        create(OPENAI_COMPLETION, "{\"prompt\":\"In\",\"max_tokens\":8,\"seed\":7,"
                                  "\"logprobs\":2,\"ignore_eos\":true}");
    if (!r) return;
    struct gateway_choice *c = &r->choices[0];
    struct supervisor_job *job = &c->job;
    adopt(r, &fake_a);
    static const int looks[] = {0, 3, 8}; /* tokens received when the supervisor asks */
    int generated = 0;
    for (int k = 0; k < 3; k++) {
        struct runner_request q;
        tokens(c, ids + generated, looks[k] - generated, &fake_a);
        generated = looks[k];
        CHECK(events.request(job, &q, err, sizeof(err)) == 0);
        CHECK(q.id == job->id && q.sampling.seed == 7 && q.logprobs == 1 && q.top_logprobs == 2 &&
              q.ignore_eos == 1 && q.resumed == generated);
        CHECK(
            q.n_prompt == r->prompts[0].n_tokens + generated &&
            !memcmp(q.prompt, r->prompts[0].tokens, (size_t)r->prompts[0].n_tokens * sizeof(int)) &&
            !memcmp(q.prompt + r->prompts[0].n_tokens, ids, (size_t)generated * sizeof(int)));
        /* all 8 came but not FINISHED: it asks for one more it will ignore */
        CHECK_MSG(q.max_tokens == (generated < 8 ? 8 - generated : 1), "max_tokens %d",
                  q.max_tokens);
        CHECK(events.outstanding(job) == (generated ? 8 - generated : r->prompts[0].n_tokens + 8));
        free(q.prompt);
    }
    token(c, ids[8], &fake_a, NULL); /* past max_tokens: ignored */
    CHECK(c->n_generated == 8);
    finished(c, RUNNER_FINISH_LENGTH, 0, &fake_a);
    CHECK(r->done && events.adopt(job, &fake_b) == 0 && job->holder == &fake_a);
    gateway_request_release(r);
    /* a request its client left: nothing more to adopt */
    r = create(OPENAI_COMPLETION, "{\"prompt\":\"In\"}");
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    r->abandoned = 1;
    pthread_mutex_unlock(&r->lock);
    CHECK(events.adopt(&r->choices[0].job, &fake_a) == 0 && r->choices[0].job.holder == NULL);
    gateway_request_release(r);
}

/* failed(): the request ends with an OpenAI error (status kept in
 * r->failed; the first error wins); a stream gets the error event and
 * [DONE]. */
static void test_job_failed(void) {
    static const struct {
        int status;
        const char *type;
    } cases[] = {{400, "invalid_request_error"}, {429, "rate_limit_error"}, {503, "server_error"}};
    for (int k = 0; k < 3; k++) {
        for (int stream = 0; stream < 2; stream++) {
            struct gateway_request *r =
                create(OPENAI_COMPLETION,
                       stream ? "{\"prompt\":\"In\",\"stream\":true}" : "{\"prompt\":\"In\"}");
            if (!r) return;
            adopt(r, &fake_a);
            events.failed(&r->choices[0].job, cases[k].status, "the runner is gone");
            events.failed(&r->choices[0].job, 500, "a second error");
            CHECK(r->done && r->failed == cases[k].status && r->error_json);
            cJSON *j = cJSON_Parse(r->error_json ? r->error_json : "");
            const cJSON *e = cJSON_GetObjectItem(j, "error");
            CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "message")),
                          "the runner is gone"));
            CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "type")), cases[k].type));
            cJSON_Delete(j);
            char want[512] = "";
            if (stream && r->error_json)
                snprintf(want, sizeof(want), "data: %s\n\ndata: [DONE]\n\n", r->error_json);
            CHECK_MSG(r->out.length == strlen(want) &&
                          (!r->out.length || !memcmp(r->out.data, want, r->out.length)),
                      "%.*s", (int)r->out.length, r->out.data ? (char *)r->out.data : "");
            /* over: no more tokens, and no supervisor may adopt it */
            token(&r->choices[0], 100, &fake_a, NULL);
            CHECK(r->choices[0].n_generated == 0);
            CHECK(events.adopt(&r->choices[0].job, &fake_b) == 0);
            gateway_request_release(r);
        }
    }
}

/* hold/release: each supervisor table's reference; the last release
 * frees the request (ASan's leak check proves it). */
static void test_job_references(void) {
    struct gateway_request *r = create(OPENAI_COMPLETION, "{\"prompt\":\"In\",\"n\":2}");
    if (!r) return;
    events.hold(&r->choices[0].job);
    events.hold(&r->choices[1].job);
    CHECK(atomic_load(&r->references) == 3);
    gateway_request_release(r); /* the HTTP side's */
    CHECK(atomic_load(&r->references) == 2);
    events.release(&r->choices[1].job);
    CHECK(atomic_load(&r->references) == 1);
    events.release(&r->choices[0].job); /* the last: freed here */
}

/* FINISHED(error): the runner's category is the request's HTTP status,
 * and every choice is cancelled (only NULL). */
static void test_error_finish(void) {
    static const struct {
        enum runner_error_category category;
        int status;
    } cases[] = {{RUNNER_ERROR_INTERNAL, 500},
                 {RUNNER_ERROR_BAD_REQUEST, 400},
                 {RUNNER_ERROR_OVER_CAPACITY, 429},
                 {RUNNER_ERROR_OUT_OF_MEMORY, 503}};
    char body[512];
    int ids[MAX_IDS];
    encode(TEXT, ids);
    chat_body(body, sizeof(body), "In the beginning", "\"n\":2");
    for (int k = 0; k < 4; k++) {
        struct gateway_request *r = create(OPENAI_CHAT, body);
        if (!r) return;
        adopt(r, &fake_a);
        forget_cancels();
        token(&r->choices[0], ids[0], &fake_a, NULL);
        finished(&r->choices[1], RUNNER_FINISH_ERROR, cases[k].category, &fake_a);
        CHECK_MSG(r->done && r->failed == cases[k].status, "category %d: %d", k, r->failed);
        CHECK(r->error_json && strstr(r->error_json, "\"message\":\"the runner failed\""));
        CHECK(n_cancels == 1 && cancels[0].request == r && cancels[0].only == NULL);
        /* the cancelled choice's FINISHED changes nothing */
        finished(&r->choices[0], RUNNER_FINISH_CANCELLED, 0, &fake_a);
        CHECK(r->failed == cases[k].status && !r->choices[0].done && n_cancels == 1);
        CHECK(r->out.length == 0); /* not streamed: the answer is error_json */
        gateway_request_release(r);
    }
    forget_cancels();
}

/* The reader hook: output wakes a suspended reader once and clears
 * suspended; a reader already awake, or gone, is not called. */
static void test_reader(void) {
    char body[512];
    int ids[MAX_IDS];
    int n = encode(TEXT, ids);
    chat_body(body, sizeof(body), "Hi", "\"stream\":true");
    struct gateway_request *r = create(OPENAI_CHAT, body);
    if (!r) return;
    adopt(r, &fake_a);
    r->reader = &reader_identity;
    r->wake_reader = fake_wake;
    r->suspended = 1;
    n_woken = 0;
    token(&r->choices[0], ids[0], &fake_a, NULL);
    CHECK(n_woken == 1 && woken[0] == &reader_identity && r->suspended == 0);
    tokens(&r->choices[0], ids + 1, n - 1, &fake_a);
    CHECK(n_woken == 1); /* it did not wait: reading, it will find the bytes */
    r->suspended = 1;
    finished(&r->choices[0], RUNNER_FINISH_EOS, 0, &fake_a);
    CHECK(n_woken == 2 && woken[1] == &reader_identity && r->suspended == 0 && r->done);
    gateway_request_release(r);
    /* its connection closed: reader NULL, nobody to wake */
    r = create(OPENAI_CHAT, body);
    if (!r) return;
    adopt(r, &fake_a);
    r->wake_reader = fake_wake;
    r->suspended = 1;
    token(&r->choices[0], ids[0], &fake_a, NULL);
    CHECK(n_woken == 2 && r->out.length > 0);
    gateway_request_release(r);
    n_woken = 0;
}

/* A quiet stream gets ": keep-alive" after keep_alive_seconds (and wakes
 * its reader); a whole answer, or a stream that ended, does not. */
static void test_keep_alive(void) {
    char body[512];
    chat_body(body, sizeof(body), "Hi", "\"stream\":true");
    struct gateway_request *r = create(OPENAI_CHAT, body);
    if (!r) return;
    static const char comment[] = ": keep-alive\n\n";
    uint64_t t0 = r->last_output_us;
    r->reader = &reader_identity;
    r->wake_reader = fake_wake;
    r->suspended = 1;
    n_woken = 0;
    gateway_request_keep_alive(r, t0 + 14500000);
    CHECK(r->out.length == 0 && n_woken == 0);
    gateway_request_keep_alive(r, t0 + 15500000);
    CHECK(r->out.length == sizeof(comment) - 1 && !memcmp(r->out.data, comment, r->out.length));
    CHECK(r->last_output_us == t0 + 15500000 && n_woken == 1 && r->suspended == 0);
    gateway_request_fail(r, 503, "gone");
    size_t out = r->out.length;
    gateway_request_keep_alive(r, t0 + 60000000);
    CHECK(r->out.length == out);
    gateway_request_release(r);
    chat_body(body, sizeof(body), "Hi", "");
    r = create(OPENAI_CHAT, body);
    if (!r) return;
    gateway_request_keep_alive(r, r->last_output_us + 60000000);
    CHECK(r->out.length == 0);
    gateway_request_release(r);
    n_woken = 0;
}

/* A body of a completion whose prompt is n token ids (and more fields). */
static void ids_body(char *out, size_t size, int n, const char *fields) {
    size_t used = (size_t)snprintf(out, size, "{\"prompt\":[");
    for (int k = 0; k < n && used < size; k++)
        used += (size_t)snprintf(out + used, size - used, "%s100", k ? "," : "");
    snprintf(out + used, size - used, "]%s%s}", *fields ? "," : "", fields);
}

/* The limits, checked at creation: a 400 naming the field. */
static void test_limits(void) {
    char body[2048], content[1024] = "";
    struct gateway_params saved = params;
    params.max_prompt_tokens = 32;
    ids_body(body, sizeof(body), 32, "");
    struct gateway_request *r = create(OPENAI_COMPLETION, body);
    /* without max_tokens: the limit, within the context */
    CHECK(r && r->prompts[0].n_tokens == 32 && r->choices[0].max_tokens == params.max_tokens_limit);
    gateway_request_release(r);
    ids_body(body, sizeof(body), 33, "");
    refuse(OPENAI_COMPLETION, body, "prompt", "context_length_exceeded",
           "the prompt has 33 tokens; this model accepts at most 32");
    for (int k = 0; k < 20; k++) strcat(content, "and the earth was without form ");
    chat_body(body, sizeof(body), content, "");
    refuse(OPENAI_CHAT, body, "messages", "context_length_exceeded", "the prompt has ");
    ids_body(body, sizeof(body), 4, "\"max_tokens\":64");
    r = create(OPENAI_COMPLETION, body);
    CHECK(r && r->choices[0].max_tokens == 64);
    gateway_request_release(r);
    ids_body(body, sizeof(body), 4, "\"max_tokens\":65");
    refuse(OPENAI_COMPLETION, body, "max_tokens", NULL, "max_tokens is 65; the limit is 64");
    /* past the context (256 tokens), with a limit that would allow it */
    params.max_tokens_limit = 1000;
    ids_body(body, sizeof(body), 32, "\"max_tokens\":225");
    refuse(OPENAI_COMPLETION, body, "max_tokens", "context_length_exceeded",
           "the prompt has 32 tokens and max_tokens is 225");
    ids_body(body, sizeof(body), 32, "");
    r = create(OPENAI_COMPLETION, body);
    CHECK(r && r->choices[0].max_tokens == served.context_length - 32);
    gateway_request_release(r);
    refuse(OPENAI_COMPLETION, "{\"prompt\":[5,1024]}", "prompt", NULL,
           "prompt token 1 is 1024, outside the vocabulary");
    params = saved;
}

/* The cases run in a thread of their own: once it is joined, no stale
 * copy of a request's address on its stack or in its registers keeps a
 * request that was never freed reachable, so the leak check at exit sees
 * it (test_job_references relies on that). */
static void *run_cases(void *unused) {
    (void)unused;
    test_whole_chat();
    test_stream_chat(0);
    test_stream_chat(1);
    test_stop_split(0);
    test_stop_split(1);
    test_error_after_stop();
    test_two_choices();
    test_holder_mismatch();
    test_job_request();
    test_job_failed();
    test_job_references();
    test_error_finish();
    test_reader();
    test_keep_alive();
    test_limits();
    return NULL;
}

int main(void) {
    pthread_t cases;
    int ready = setup();
    if (ready == 0) return TEST_SKIP_CODE;
    if (ready > 0) {
        CHECK(served.context_length == 256 && tokenizer_vocab_size(served.tokenizer) == 1024);
        CHECK(pthread_create(&cases, NULL, run_cases, NULL) == 0 && pthread_join(cases, NULL) == 0);
        gateway_served_free(&served);
    }
    return test_status("test_gateway_requests");
}
