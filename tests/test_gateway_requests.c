/* test_gateway_requests.c -- src/gateway/requests driven with fake events:
 * no HTTP server, no runner and no supervisor thread. A request is made
 * from a JSON body as the HTTP layer makes it, its choices are adopted by a
 * fake supervisor (a struct used only as an identity, as the real one is),
 * and tokens and finishes are fed to it as a supervisor's events would, so
 * every check is on exact bytes: the answer's text, the SSE chunks, what
 * the cancel callback was asked, the ADD a runner would get. The served
 * model is ../shared's kjv2m (its vocabulary only; skipped without it). */
#include "gateway/requests/requests.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the fake environment was asked. */
struct cancels {
    int calls;                         /* cancel callbacks */
    const struct gateway_choice *only; /* the last one's choice (NULL: the whole request) */
};

static struct gateway_params params;
static atomic_ullong next_id;
static struct cancels cancels;
static struct requests_env env;
static struct gateway_served served;
static struct supervisor_events events;
static struct supervisor fake, other; /* identities only: never initialised */

static void record_cancel(void *context, struct gateway_request *r, struct gateway_choice *only) {
    (void)context;
    (void)r;
    cancels.calls++;
    cancels.only = only;
}

static int woken;
static void wake(void *reader) {
    CHECK(reader == &woken);
    woken++;
}

/* A request of body (a chat when chat, else a completion); NULL with e. */
static struct gateway_request *make(const char *body, int chat, struct openai_error *e) {
    struct openai_request parsed;
    if (openai_parse_request(body, strlen(body), chat ? OPENAI_CHAT : OPENAI_COMPLETION, &parsed,
                             e))
        return NULL;
    return gateway_request_create(&env, &served, "kjv-1", &parsed, e);
}

/* Each choice held by the fake supervisor, with the reference it keeps. */
static void adopt_all(struct gateway_request *r) {
    for (int i = 0; i < r->n_choices; i++) {
        events.hold(&r->choices[i].job);
        CHECK(events.adopt(&r->choices[i].job, &fake) == 1);
    }
}

static void feed(struct gateway_choice *c, int token, struct supervisor *from) {
    struct runner_token t = {.id = c->job.id, .token = token, .logprob = -0.25f};
    struct gateway_latency latency;
    gateway_request_on_token(c, &t, from, &latency);
}

static void finish(struct gateway_choice *c, enum runner_finish_reason reason) {
    struct runner_finished f = {.id = c->job.id, .reason = reason};
    gateway_request_on_finished(c, &f, &fake);
    events.release(&c->job); /* the table lets go of it, as a supervisor does */
}

/* The ids of text in the served vocabulary (no BOS); their count. */
static int encode(const char *text, int *ids, int max) {
    char err[128];
    int n = 0;
    CHECK(tokenizer_encode(served.tokenizer, text, strlen(text), 0, ids, max, &n, err,
                           sizeof(err)) == 0);
    return n;
}

/* What a client gets of ids: the incremental decoder the request uses. */
static void decode(const int *ids, int n, char *out, size_t size) {
    struct tokenizer_stream stream;
    size_t used = 0;
    tokenizer_stream_init(&stream, served.tokenizer, 0);
    for (int i = 0; i < n; i++)
        used += tokenizer_stream_push(&stream, ids[i], out + used, size - used - 1);
    used += tokenizer_stream_flush(&stream, out + used, size - used - 1);
    out[used] = '\0';
}

/* The concatenated content of a stream's chunks of choice index; counts
 * the chunks with a finish_reason, the role chunks and whether it ended
 * with [DONE]. */
struct stream_seen {
    char text[4096];
    int finishes, roles, done, usage;
    char finish[16];
};

static void read_stream(const struct gateway_request *r, int index, int chat,
                        struct stream_seen *seen) {
    memset(seen, 0, sizeof(*seen));
    char *copy = strndup((const char *)r->out.data, r->out.length);
    for (char *event = strstr(copy, "data: "); event; event = strstr(event + 1, "data: ")) {
        char *end = strstr(event, "\n\n");
        CHECK_MSG(end != NULL, "an event without its blank line: %s", event);
        if (!end) break;
        *end = '\0';
        const char *json = event + 6;
        if (!strcmp(json, "[DONE]")) {
            seen->done = 1;
            CHECK(end[2] == '\0'); /* nothing after [DONE] */
            break;
        }
        cJSON *j = cJSON_Parse(json);
        CHECK_MSG(j != NULL, "a chunk that is not JSON: %s", json);
        cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        seen->usage += cJSON_IsObject(cJSON_GetObjectItem(j, "usage"));
        if (choice && cJSON_GetObjectItem(choice, "index")->valueint == index) {
            cJSON *delta = chat ? cJSON_GetObjectItem(choice, "delta") : choice;
            const char *piece =
                cJSON_GetStringValue(cJSON_GetObjectItem(delta, chat ? "content" : "text"));
            if (piece) strncat(seen->text, piece, sizeof(seen->text) - strlen(seen->text) - 1);
            seen->roles += chat && cJSON_GetObjectItem(delta, "role") != NULL;
            const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(choice, "finish_reason"));
            if (why) {
                seen->finishes++;
                snprintf(seen->finish, sizeof(seen->finish), "%s", why);
            }
        }
        cJSON_Delete(j);
        *end = '\n';
        event = end;
    }
    free(copy);
}

/* A whole answer: its text accumulates per choice, and the request ends. */
static void test_whole_answer(void) {
    struct openai_error e;
    int ids[64], n = encode("And God said, Let there be light", ids, 64);
    char expected[512];
    decode(ids, n, expected, sizeof(expected));
    struct gateway_request *r =
        make("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":40}", 1, &e);
    CHECK_MSG(r != NULL, "%s", e.message);
    if (!r) return;
    adopt_all(r);
    for (int i = 0; i < n; i++) feed(&r->choices[0], ids[i], &fake);
    CHECK(!r->done);
    finish(&r->choices[0], RUNNER_FINISH_LENGTH);
    CHECK(r->done && !r->failed);
    CHECK(r->choices[0].finish == OPENAI_FINISH_LENGTH);
    CHECK(r->choices[0].text.length == strlen(expected) &&
          !memcmp(r->choices[0].text.data, expected, strlen(expected)));
    struct openai_usage usage = gateway_request_usage(r);
    CHECK(usage.prompt_tokens == r->n_prompt && usage.completion_tokens == n);
    CHECK(r->out.length == 0); /* nothing streamed */
    gateway_request_release(r);
}

/* A stream: a role chunk first, deltas that add up to the text, one
 * finish_reason, the usage chunk asked for, then [DONE]. */
static void test_stream(void) {
    struct openai_error e;
    int ids[64], n = encode("In the beginning God created the heaven", ids, 64);
    char expected[512];
    decode(ids, n, expected, sizeof(expected));
    struct gateway_request *r =
        make("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,"
             "\"stream_options\":{\"include_usage\":true},\"max_tokens\":40}",
             1, &e);
    CHECK_MSG(r != NULL, "%s", e.message);
    if (!r) return;
    adopt_all(r);
    for (int i = 0; i < n; i++) feed(&r->choices[0], ids[i], &fake);
    finish(&r->choices[0], RUNNER_FINISH_EOS);
    struct stream_seen seen;
    read_stream(r, 0, 1, &seen);
    CHECK_MSG(!strcmp(seen.text, expected), "'%s' != '%s'", seen.text, expected);
    CHECK(seen.roles == 1 && seen.finishes == 1 && !strcmp(seen.finish, "stop"));
    CHECK(seen.usage == 1 && seen.done);
    gateway_request_release(r);
}

/* A stop string across two tokens never reaches the client; the choice
 * ends with "stop" and its runner is told (the cancel callback, once). */
static void test_stop_across_tokens(void) {
    struct openai_error e;
    int ids[64], n = encode("And the earth was without form, and void", ids, 64);
    char text[512], first[512], stop[16], body[512];
    decode(ids, n, text, sizeof(text));
    decode(ids, 2, first, sizeof(first)); /* the stop string ends inside token 2's text */
    size_t cut = strlen(first) - 1;
    CHECK(cut >= 2 && strlen(text) > cut + 3);
    snprintf(stop, sizeof(stop), "%.4s", text + cut - 2);
    const char *at = strstr(text, stop);
    size_t kept = (size_t)(at - text);
    snprintf(body, sizeof(body),
             "{\"prompt\":\"x\",\"stream\":true,\"max_tokens\":40,\"stop\":[\"%s\"]}", stop);
    struct gateway_request *r = make(body, 0, &e);
    CHECK_MSG(r != NULL, "%s", e.message);
    if (!r) return;
    adopt_all(r);
    memset(&cancels, 0, sizeof(cancels));
    for (int i = 0; i < n && !r->done; i++) feed(&r->choices[0], ids[i], &fake);
    CHECK(r->done);
    CHECK(cancels.calls == 1 && cancels.only == &r->choices[0]);
    struct stream_seen seen;
    read_stream(r, 0, 0, &seen);
    CHECK_MSG(strlen(seen.text) == kept && !strncmp(seen.text, text, kept), "'%s' (stop '%s')",
              seen.text, stop);
    CHECK(strstr(seen.text, stop) == NULL && !strcmp(seen.finish, "stop") && seen.done);
    finish(&r->choices[0], RUNNER_FINISH_CANCELLED); /* the runner's answer to the cancel */
    gateway_request_release(r);
}

/* n = 2: consecutive runner ids, seeds one apart, chunks of both indices,
 * and the request ends with its last choice. A token from a supervisor
 * that does not hold the choice (one it moved off) changes nothing. */
static void test_two_choices(void) {
    struct openai_error e;
    int ids[64], n = encode("Let there be light", ids, 64);
    char expected[256];
    decode(ids, n, expected, sizeof(expected));
    struct gateway_request *r =
        make("{\"prompt\":\"x\",\"n\":2,\"stream\":true,\"max_tokens\":20,\"seed\":7}", 0, &e);
    CHECK_MSG(r != NULL, "%s", e.message);
    if (!r) return;
    CHECK(r->n_choices == 2 && r->choices[1].job.id == r->choices[0].job.id + 1);
    CHECK(r->choices[0].sampling.seed == 7 && r->choices[1].sampling.seed == 8);
    CHECK(r->choices[0].job.group == r && r->choices[1].job.group == r);
    adopt_all(r);
    size_t before = r->out.length;
    feed(&r->choices[1], ids[0], &other);
    CHECK(r->out.length == before && r->choices[1].n_generated == 0);
    for (int i = 0; i < n; i++) {
        feed(&r->choices[0], ids[i], &fake);
        feed(&r->choices[1], ids[n - 1 - i], &fake);
    }
    finish(&r->choices[0], RUNNER_FINISH_LENGTH);
    CHECK(!r->done);
    finish(&r->choices[1], RUNNER_FINISH_LENGTH);
    CHECK(r->done);
    struct stream_seen seen;
    read_stream(r, 0, 0, &seen);
    CHECK_MSG(!strcmp(seen.text, expected), "'%s' != '%s'", seen.text, expected);
    CHECK(!strcmp(seen.finish, "length"));
    read_stream(r, 1, 0, &seen);
    CHECK(seen.finishes == 1 && seen.done);
    gateway_request_release(r);
}

/* The events a supervisor calls: the ADD as it stands (prompt + tokens so
 * far, resumed, max_tokens left), the outstanding work, adopt refusing a
 * request that is over, and failed writing the error. */
static void test_job_events(void) {
    struct openai_error e;
    char err[128];
    struct gateway_request *r =
        make("{\"prompt\":\"And God\",\"max_tokens\":10,\"stream\":true}", 0, &e);
    CHECK_MSG(r != NULL, "%s", e.message);
    if (!r) return;
    struct gateway_choice *c = &r->choices[0];
    CHECK(events.outstanding(&c->job) == r->n_prompt + 10);
    adopt_all(r);
    int ids[8], n = encode("light", ids, 8);
    CHECK(n >= 1);
    for (int i = 0; i < n; i++) feed(c, ids[i], &fake);
    CHECK(events.outstanding(&c->job) == 10 - n);
    struct runner_request q;
    CHECK(events.request(&c->job, &q, err, sizeof(err)) == 0);
    CHECK(q.id == c->job.id && q.resumed == n && q.max_tokens == 10 - n);
    CHECK(q.n_prompt == r->n_prompt + n);
    CHECK(!memcmp(q.prompt, r->prompt, (size_t)r->n_prompt * sizeof(int)));
    CHECK(!memcmp(q.prompt + r->n_prompt, ids, (size_t)n * sizeof(int)));
    free((void *)q.prompt);
    events.failed(&c->job, 503, "the runner is gone");
    CHECK(r->done && r->failed == 503 && r->error_json && strstr(r->error_json, "the runner"));
    struct stream_seen seen;
    read_stream(r, 0, 0, &seen);
    CHECK(seen.done); /* the error event, then [DONE] */
    CHECK(strstr((const char *)r->out.data, "\"error\"") != NULL);
    CHECK(events.adopt(&c->job, &other) == 0 && c->job.holder == &fake);
    events.release(&c->job);
    gateway_request_release(r);
}

/* A runner's error category is the request's status, and the other
 * choices are cancelled. */
static void test_runner_errors(void) {
    static const struct {
        enum runner_error_category category;
        int status;
    } cases[] = {{RUNNER_ERROR_INTERNAL, 500},
                 {RUNNER_ERROR_BAD_REQUEST, 400},
                 {RUNNER_ERROR_OVER_CAPACITY, 429},
                 {RUNNER_ERROR_OUT_OF_MEMORY, 503}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct openai_error e;
        struct gateway_request *r = make("{\"prompt\":\"x\",\"n\":2,\"max_tokens\":4}", 0, &e);
        CHECK_MSG(r != NULL, "%s", e.message);
        if (!r) return;
        adopt_all(r);
        memset(&cancels, 0, sizeof(cancels));
        struct runner_finished f = {.id = r->choices[1].job.id,
                                    .reason = RUNNER_FINISH_ERROR,
                                    .category = cases[i].category};
        snprintf(f.message, sizeof(f.message), "refused");
        gateway_request_on_finished(&r->choices[1], &f, &fake);
        CHECK_MSG(r->failed == cases[i].status, "category %d: %d", (int)cases[i].category,
                  r->failed);
        CHECK(cancels.calls == 1 && cancels.only == NULL);
        events.release(&r->choices[0].job);
        events.release(&r->choices[1].job);
        gateway_request_release(r);
    }
}

/* Output wakes a waiting reader once, and clears its wait. */
static void test_reader_wake(void) {
    struct openai_error e;
    struct gateway_request *r = make("{\"prompt\":\"x\",\"stream\":true,\"max_tokens\":4}", 0, &e);
    CHECK_MSG(r != NULL, "%s", e.message);
    if (!r) return;
    adopt_all(r);
    r->reader = &woken;
    r->wake_reader = wake;
    r->suspended = 1;
    woken = 0;
    int ids[4], n = encode("And", ids, 4);
    feed(&r->choices[0], ids[0], &fake);
    CHECK(n >= 1 && woken == 1 && r->suspended == 0);
    feed(&r->choices[0], ids[0], &fake);
    CHECK(woken == 1); /* not waiting: nothing to wake */
    finish(&r->choices[0], RUNNER_FINISH_LENGTH);
    gateway_request_release(r);
}

/* The limits are refused at creation, naming the field. */
static void test_limits(void) {
    struct openai_error e;
    char body[4096];
    size_t used = (size_t)snprintf(body, sizeof(body), "{\"prompt\":\"");
    for (int i = 0; i < 300; i++)
        used += (size_t)snprintf(body + used, sizeof(body) - used, "light ");
    snprintf(body + used, sizeof(body) - used, "\",\"max_tokens\":4}");
    CHECK(make(body, 0, &e) == NULL);
    CHECK(e.status == 400 && !strcmp(e.param, "prompt"));
    CHECK(make("{\"prompt\":\"x\",\"max_tokens\":65}", 0, &e) == NULL);
    CHECK(e.status == 400 && !strcmp(e.param, "max_tokens"));
}

int main(void) {
    char path[512], err[256];
    test_shared_path(path, sizeof(path), "models/kjv2m-q8_0.gguf");
    if (!test_require_file(path)) return TEST_SKIP_CODE;
    struct gateway_model model = {.name = "kjv", .path = path, .tp = 1, .threads = 1};
    if (gateway_served_init(&served, &model, err, sizeof(err))) {
        fprintf(stderr, "test_gateway_requests: %s\n", err);
        return 1;
    }
    params.max_prompt_tokens = 200;
    params.max_tokens_limit = 64;
    params.keep_alive_seconds = 15;
    atomic_init(&next_id, 1);
    env = (struct requests_env){.params = &params, .next_id = &next_id, .cancel = record_cancel};
    gateway_request_events(&events);
    test_whole_answer();
    test_stream();
    test_stop_across_tokens();
    test_two_choices();
    test_job_events();
    test_runner_errors();
    test_reader_wake();
    test_limits();
    gateway_served_free(&served);
    return test_status("test_gateway_requests");
}
