/* test_gateway_choices.c -- OpenAI's `n` (parallel sampling) over real HTTP.
 *
 * On ../shared/models/kjv2m-q8_0.gguf (skipped without it):
 *   - n=3 at temperature 1 with a seed, completions and chat: choices 0, 1
 *     and 2 in order, choice i with exactly the text and finish_reason of a
 *     request of n=1 with seed + i (also with stop strings, and with
 *     logprobs: as many entries as that request's tokens); usage counts the
 *     prompt once and the tokens of every choice; /metrics counts the
 *     request once and the tokens of every choice;
 *   - streamed, n=3: every chunk names one choice in 0..2, a chat choice's
 *     first chunk carries the role, each choice ends with one finish_reason
 *     and nothing after it, then one usage chunk and one [DONE]; each
 *     choice's deltas give the whole answer's text;
 *   - n=9, 0, 2.5 and -1 get a 400 naming n;
 *   - SIGKILL of the runner mid-stream: every choice resumes with its own
 *     tokens and ends with the text of an undisturbed run;
 *   - a client that leaves a stream of n=3 frees all three sequences long
 *     before they could have ended (the runner is slowed down);
 *   - one choice refused by the runner (its queue is full) fails the whole
 *     request with that 429, and the other choices are cancelled.
 * ctest-labels: concurrency */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DEADLINE    120.0
#define MAX_CHOICES 8
#define SEED        1234
#define MODEL       "kjv2m-q8_0"

static char model_path[512];
static int port;

/* Starts `lockstep serve` with extra options (ending with NULL); fills the
 * port once /health says the runner is ready. */
static int start_gateway(struct test_service *s, char *const extra[]) {
    port = test_start_gateway(s, model_path, extra, NULL, DEADLINE);
    return port > 0;
}

/* What an answer (whole or streamed) says, choice by choice. */
struct answer {
    int status;
    int n;                        /* choices received */
    char *text[MAX_CHOICES];      /* each choice's text (malloc'd) */
    char finish[MAX_CHOICES][16]; /* each choice's finish_reason */
    int n_logprobs[MAX_CHOICES];  /* entries in each choice's logprobs */
    int prompt_tokens, completion_tokens;
};

static void answer_free(struct answer *a) {
    for (int i = 0; i < MAX_CHOICES; i++) free(a->text[i]);
    memset(a, 0, sizeof(*a));
}

/* Appends s to *text (malloc'd). */
static void append(char **text, const char *s) {
    size_t n = *text ? strlen(*text) : 0, k = strlen(s);
    char *grown = realloc(*text, n + k + 1);
    if (!grown) return;
    memcpy(grown + n, s, k + 1);
    *text = grown;
}

static int number(const cJSON *object, const char *key) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
    return cJSON_IsNumber(item) ? item->valueint : -1;
}

/* A choice's text, whole (message/text) or streamed (delta/text). */
static const char *choice_text(const cJSON *choice, int chat, int streamed) {
    const cJSON *holder =
        chat ? cJSON_GetObjectItem(choice, streamed ? "delta" : "message") : choice;
    const cJSON *text = cJSON_GetObjectItem(holder, chat ? "content" : "text");
    return cJSON_IsString(text) ? text->valuestring : "";
}

/* Entries in a choice's logprobs (0 when null). */
static int logprob_entries(const cJSON *choice, int chat) {
    const cJSON *logprobs = cJSON_GetObjectItem(choice, "logprobs");
    return cJSON_GetArraySize(cJSON_GetObjectItem(logprobs, chat ? "content" : "tokens"));
}

static void read_usage(struct answer *a, const cJSON *usage) {
    a->prompt_tokens = number(usage, "prompt_tokens");
    a->completion_tokens = number(usage, "completion_tokens");
    CHECK(number(usage, "total_tokens") == a->prompt_tokens + a->completion_tokens);
}

/* A whole answer: choices[i] must have index i. */
static struct answer whole(const char *path, const char *body) {
    struct answer a = {0};
    int chat = strstr(path, "chat") != NULL;
    struct test_http h = test_http_request(port, "POST", path, NULL, body, DEADLINE);
    a.status = h.status;
    cJSON *j = h.status == 200 ? cJSON_Parse(h.body) : NULL;
    const cJSON *choices = cJSON_GetObjectItem(j, "choices");
    a.n = cJSON_GetArraySize(choices);
    for (int i = 0; i < a.n && i < MAX_CHOICES; i++) {
        const cJSON *choice = cJSON_GetArrayItem(choices, i);
        const cJSON *reason = cJSON_GetObjectItem(choice, "finish_reason");
        CHECK_MSG(number(choice, "index") == i, "choices[%d] has index %d", i,
                  number(choice, "index"));
        a.text[i] = strdup(choice_text(choice, chat, 0));
        snprintf(a.finish[i], sizeof(a.finish[i]), "%s",
                 cJSON_IsString(reason) ? reason->valuestring : "");
        a.n_logprobs[i] = logprob_entries(choice, chat);
    }
    if (j) read_usage(&a, cJSON_GetObjectItem(j, "usage"));
    cJSON_Delete(j);
    test_http_free(&h);
    return a;
}

/* What a stream's chunks said so far, to check its framing. */
struct stream_state {
    int chat;
    int chunks[MAX_CHOICES]; /* chunks per choice */
    int usage_chunks, done;
};

/* One "data: {...}" chunk of a stream with n choices. */
static void stream_chunk(struct answer *a, struct stream_state *s, const cJSON *j, int n) {
    const cJSON *choices = cJSON_GetObjectItem(j, "choices");
    CHECK_MSG(!s->usage_chunks && !s->done, "a chunk after the usage chunk or [DONE]");
    if (cJSON_GetArraySize(choices) == 0) { /* the usage chunk: after every choice ended */
        s->usage_chunks++;
        for (int i = 0; i < n; i++) CHECK_MSG(a->finish[i][0], "usage before choice %d ended", i);
        read_usage(a, cJSON_GetObjectItem(j, "usage"));
        return;
    }
    CHECK(cJSON_GetArraySize(choices) == 1);
    const cJSON *choice = cJSON_GetArrayItem(choices, 0);
    int i = number(choice, "index");
    CHECK_MSG(i >= 0 && i < n, "a chunk of choice %d", i);
    if (i < 0 || i >= n) return;
    CHECK_MSG(!a->finish[i][0], "a chunk of choice %d after its finish_reason", i);
    if (s->chat) {
        const cJSON *role = cJSON_GetObjectItem(cJSON_GetObjectItem(choice, "delta"), "role");
        CHECK_MSG((s->chunks[i] == 0) == cJSON_IsString(role), "choice %d, chunk %d: role", i,
                  s->chunks[i]);
    }
    s->chunks[i]++;
    append(&a->text[i], choice_text(choice, s->chat, 1));
    a->n_logprobs[i] += logprob_entries(choice, s->chat);
    const cJSON *reason = cJSON_GetObjectItem(choice, "finish_reason");
    if (cJSON_IsString(reason))
        snprintf(a->finish[i], sizeof(a->finish[i]), "%s", reason->valuestring);
}

/* Parses an SSE body of n choices, checking its framing. */
static void parse_stream(struct answer *a, const char *body, int chat, int n, int usage) {
    struct stream_state s = {.chat = chat};
    for (const char *line = body; line && *line;) {
        const char *end = strstr(line, "\n\n");
        CHECK_MSG(end != NULL, "an event does not end with a blank line");
        if (!end) break;
        if (!strncmp(line, "data: [DONE]", 12)) {
            s.done++;
            CHECK_MSG(end[2] == '\0', "bytes after [DONE]");
        } else if (!strncmp(line, "data: ", 6)) {
            char *json = strndup(line + 6, (size_t)(end - line - 6));
            cJSON *j = cJSON_Parse(json);
            CHECK_MSG(j != NULL, "chunk is not JSON: %s", json);
            if (j) stream_chunk(a, &s, j, n);
            cJSON_Delete(j);
            free(json);
        } else {
            CHECK_MSG(line[0] == ':', "unexpected line: %.40s", line);
        }
        line = end + 2;
    }
    a->n = 0;
    for (int i = 0; i < n; i++) a->n += a->finish[i][0] != '\0';
    CHECK_MSG(s.done == 1 && s.usage_chunks == usage, "[DONE] %d times, %d usage chunks", s.done,
              s.usage_chunks);
    for (int i = 0; i < n; i++) {
        CHECK_MSG(s.chunks[i] > 0 && a->finish[i][0], "choice %d: %d chunks, finish '%s'", i,
                  s.chunks[i], a->finish[i]);
        if (!a->text[i]) a->text[i] = strdup("");
    }
}

/* A streamed answer of n choices (with include_usage in the body or not). */
static struct answer streamed(const char *path, const char *body, int n) {
    struct answer a = {0};
    struct test_http h = test_http_request(port, "POST", path, NULL, body, DEADLINE);
    a.status = h.status;
    CHECK_MSG(h.status == 200, "%s: status %d: %s", path, h.status, h.body);
    if (h.status == 200)
        parse_stream(&a, h.body, strstr(path, "chat") != NULL, n,
                     strstr(body, "include_usage") != NULL);
    test_http_free(&h);
    return a;
}

/* A request body: n choices with seed at temperature 1, extra fields
 * (",..." or ""). */
static void make_body(char *out, size_t size, int chat, int n, long seed, int max_tokens,
                      const char *extra) {
    snprintf(out, size,
             "{\"model\":\"" MODEL "\",%s,\"n\":%d,\"seed\":%ld,\"temperature\":1,"
             "\"max_tokens\":%d%s}",
             chat ? "\"messages\":[{\"role\":\"user\",\"content\":\"Who made the earth?\"}]"
                  : "\"prompt\":\"And God said\"",
             n, seed, max_tokens, extra);
}

static const char *endpoint(int chat) {
    return chat ? "/v1/chat/completions" : "/v1/completions";
}

/* n=3 against three requests of n=1 with seed + i: the same texts, finish
 * reasons and logprobs; usage counts the prompt once. Returns the answer. */
static struct answer check_seeds(int chat, const char *extra) {
    char body[512];
    make_body(body, sizeof(body), chat, 3, SEED, 24, extra);
    struct answer all = whole(endpoint(chat), body);
    CHECK_MSG(all.status == 200 && all.n == 3, "%s n=3%s: status %d, %d choices", endpoint(chat),
              extra, all.status, all.n);
    int completion = 0;
    for (int i = 0; i < 3 && all.n == 3; i++) {
        make_body(body, sizeof(body), chat, 1, SEED + i, 24, extra);
        struct answer one = whole(endpoint(chat), body);
        CHECK(one.status == 200 && one.n == 1);
        CHECK_MSG(one.text[0] && !strcmp(all.text[i], one.text[0]),
                  "%s%s: choice %d:\n'%s'\nvs n=1 with seed %d:\n'%s'", endpoint(chat), extra, i,
                  all.text[i], SEED + i, one.text[0]);
        CHECK_MSG(!strcmp(all.finish[i], one.finish[0]), "choice %d: finish %s vs %s", i,
                  all.finish[i], one.finish[0]);
        CHECK(all.n_logprobs[i] == one.n_logprobs[0]);
        CHECK(all.prompt_tokens == one.prompt_tokens);
        completion += one.completion_tokens;
        answer_free(&one);
    }
    CHECK_MSG(all.completion_tokens == completion, "completion_tokens %d, the choices' sum %d",
              all.completion_tokens, completion);
    return all;
}

static void test_seeds(void) {
    for (int chat = 0; chat < 2; chat++) {
        struct answer plain = check_seeds(chat, "");
        /* three seeds x 24 tokens at temperature 1: all equal would mean
         * the choices were not sampled apart */
        CHECK_MSG(plain.n == 3 && (strcmp(plain.text[0], plain.text[1]) ||
                                   strcmp(plain.text[1], plain.text[2])),
                  "the three choices are the same text");
        answer_free(&plain);
        struct answer stopped = check_seeds(chat, ",\"stop\":[\" the\",\"and\"]");
        int stops = 0;
        for (int i = 0; i < stopped.n; i++) stops += !strcmp(stopped.finish[i], "stop");
        CHECK_MSG(stops > 0, "no choice met its stop string"); /* else the case tests nothing */
        answer_free(&stopped);
        struct answer logprobs =
            check_seeds(chat, chat ? ",\"logprobs\":true,\"top_logprobs\":2" : ",\"logprobs\":2");
        int entries = 0;
        for (int i = 0; i < logprobs.n; i++) entries += logprobs.n_logprobs[i];
        CHECK(entries == logprobs.completion_tokens && entries > 0);
        answer_free(&logprobs);
    }
}

static void test_streamed(void) {
    char body[512];
    for (int chat = 0; chat < 2; chat++)
        for (int usage = 0; usage < 2; usage++) {
            make_body(body, sizeof(body), chat, 3, SEED, 24, "");
            struct answer all = whole(endpoint(chat), body);
            make_body(body, sizeof(body), chat, 3, SEED, 24,
                      usage ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}"
                            : ",\"stream\":true");
            struct answer s = streamed(endpoint(chat), body, 3);
            CHECK(s.n == 3 && all.n == 3);
            for (int i = 0; i < 3 && s.n == 3 && all.n == 3; i++) {
                CHECK_MSG(!strcmp(s.text[i], all.text[i]),
                          "%s streamed, choice %d:\n'%s'\nvs\n'%s'", endpoint(chat), i, s.text[i],
                          all.text[i]);
                CHECK(!strcmp(s.finish[i], all.finish[i]));
            }
            if (usage)
                CHECK_MSG(s.prompt_tokens == all.prompt_tokens &&
                              s.completion_tokens == all.completion_tokens,
                          "streamed usage %d+%d, whole %d+%d", s.prompt_tokens, s.completion_tokens,
                          all.prompt_tokens, all.completion_tokens);
            answer_free(&s);
            answer_free(&all);
        }
}

/* A request's status and error.param. */
static void expect_refused(const char *body, int status, const char *param) {
    struct test_http h = test_http_request(port, "POST", "/v1/chat/completions", NULL, body, 30);
    cJSON *j = cJSON_Parse(h.body ? h.body : "");
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    const cJSON *p = cJSON_GetObjectItem(e, "param");
    CHECK_MSG(h.status == status, "status %d, expected %d: %s", h.status, status, h.body);
    CHECK_MSG(cJSON_IsString(cJSON_GetObjectItem(e, "message")) &&
                  (param ? cJSON_IsString(p) && !strcmp(p->valuestring, param) : 1),
              "not the expected error: %s", h.body);
    cJSON_Delete(j);
    test_http_free(&h);
}

static void test_refused(void) {
    static const char *const values[] = {"9", "0", "2.5", "-1"};
    char body[512];
    for (int i = 0; i < 4; i++) {
        snprintf(body, sizeof(body),
                 "{\"model\":\"" MODEL "\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
                 "\"n\":%s}",
                 values[i]);
        expect_refused(body, 400, "n");
    }
}

/* A sample's value in /metrics text (the first line starting with prefix). */
static double metric(const char *prefix) {
    struct test_http h = test_http_request(port, "GET", "/metrics", NULL, NULL, 10);
    const char *at = h.body ? strstr(h.body, prefix) : NULL;
    double value = at ? atof(at + strlen(prefix)) : -1;
    test_http_free(&h);
    return value;
}

#define REQUESTS_200 "lockstep_requests_total{model=\"" MODEL "\",status=\"200\"} "
#define GENERATED    "lockstep_generated_tokens_total{model=\"" MODEL "\",instance=\"" MODEL "-1\"} "
#define PROMPT       "lockstep_prompt_tokens_total{model=\"" MODEL "\",instance=\"" MODEL "-1\"} "
#define RUNNING      "lockstep_running_sequences{model=\"" MODEL "\",instance=\"" MODEL "-1\"} "
#define WAITING      "lockstep_queue_depth{model=\"" MODEL "\",instance=\"" MODEL "-1\"} "
#define GAPS                                                                                       \
    "lockstep_inter_token_latency_seconds_count{model=\"" MODEL "\",instance=\"" MODEL "-1\"} "

/* An answered request is counted once it is over on the gateway's side,
 * which may be a moment after the client has the answer: waits until the
 * counter moves (deadline), then returns its value. */
static double metric_after(const char *prefix, double before) {
    double value = metric(prefix);
    for (double start = test_now(); value <= before && test_now() - start < 30;) {
        struct timespec nap = {0, 10000000};
        nanosleep(&nap, NULL);
        value = metric(prefix);
    }
    return value;
}

/* One HTTP request of 3 choices is one request in /metrics; its tokens are
 * every choice's. */
static void test_metrics(void) {
    char body[512];
    double requests = metric(REQUESTS_200), generated = metric(GENERATED);
    double prompt = metric(PROMPT);
    make_body(body, sizeof(body), 0, 3, SEED, 24, "");
    struct answer a = whole("/v1/completions", body);
    CHECK(a.status == 200 && a.n == 3);
    CHECK_MSG(metric_after(REQUESTS_200, requests) == requests + 1, "requests: %g before, %g after",
              requests, metric(REQUESTS_200));
    CHECK_MSG(metric_after(GENERATED, generated) == generated + a.completion_tokens,
              "generated tokens: %g before, %g after, usage %d", generated, metric(GENERATED),
              a.completion_tokens);
    CHECK_MSG(metric(PROMPT) == prompt + a.prompt_tokens, "prompt tokens: %g before, %g after",
              prompt, metric(PROMPT));
    answer_free(&a);
}

/* POST /debug/fault on the model (the gateway runs with --enable-faults). */
static void fault(const char *json) {
    struct test_http h = test_http_request(port, "POST", "/debug/fault", NULL, json, 30);
    CHECK_MSG(h.status == 200, "fault %s: %d %s", json, h.status, h.body);
    test_http_free(&h);
}

/* Waits until metric(prefix) satisfies at_least (value >= target) or not
 * (value == target); 1 if it did within seconds. */
static int wait_metric(const char *prefix, double target, int at_least, double seconds) {
    for (double start = test_now(); test_now() - start < seconds;) {
        double value = metric(prefix);
        if (at_least ? value >= target : value == target) return 1;
        struct timespec nap = {0, 10000000};
        nanosleep(&nap, NULL);
    }
    return 0;
}

struct stream_job {
    const char *body;
    struct answer answer;
};

static void *run_stream(void *arg) {
    struct stream_job *job = arg;
    job->answer = streamed("/v1/completions", job->body, 3);
    return NULL;
}

static int runner_pid(void) {
    struct test_http h = test_http_request(port, "GET", "/health", NULL, NULL, 10);
    const char *at = h.body ? strstr(h.body, "\"runner_pid\":") : NULL;
    int pid = at ? atoi(at + 13) : 0;
    test_http_free(&h);
    return pid;
}

/* The runner dies while three choices stream: each resumes with its own
 * tokens (DESIGN.md I4), so each ends with its undisturbed text. The kill
 * comes once the gateway has seen about 15 tokens of each choice (their
 * gaps are counted in /metrics as they come), on a runner slowed down so
 * that 120 tokens take seconds. */
static void test_runner_killed(void) {
    char body[512];
    make_body(body, sizeof(body), 0, 3, SEED, 120, ",\"ignore_eos\":true,\"stream\":true");
    struct answer reference = streamed("/v1/completions", body, 3);
    fault("{\"model\":\"" MODEL "\",\"kind\":\"delay\",\"delay_ms\":50,\"steps\":100000}");
    struct stream_job job = {body, {0}};
    pthread_t thread;
    double gaps = metric(GAPS);
    pthread_create(&thread, NULL, run_stream, &job);
    CHECK_MSG(wait_metric(GAPS, gaps + 3 * 15, 1, 30), "the choices did not stream");
    int pid = runner_pid();
    CHECK(pid > 0);
    if (pid > 0) kill(pid, SIGKILL);
    pthread_join(thread, NULL);
    for (int i = 0; i < 3 && reference.n == 3 && job.answer.n == 3; i++) {
        CHECK_MSG(!strcmp(job.answer.text[i], reference.text[i]),
                  "choice %d after the kill:\n'%s'\nundisturbed:\n'%s'", i, job.answer.text[i],
                  reference.text[i]);
        CHECK(!strcmp(job.answer.finish[i], "length"));
    }
    CHECK(reference.n == 3 && job.answer.n == 3);
    struct test_http h = test_http_request(port, "GET", "/health", NULL, NULL, 10);
    CHECK_MSG(h.body && strstr(h.body, "\"restarts\":1"), "health: %s", h.body);
    test_http_free(&h);
    answer_free(&reference);
    answer_free(&job.answer);
}

/* Reads from fd until at least n bytes came (or the deadline). */
static void read_some(int fd, size_t n) {
    char buffer[4096];
    size_t got = 0;
    for (double start = test_now(); got < n && test_now() - start < 30;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t k = recv(fd, buffer, sizeof(buffer), 0);
        if (k <= 0) break;
        got += (size_t)k;
    }
}

/* A client leaves a stream of three choices: all three are cancelled. The
 * runner is slowed down so that their 200 tokens would take about 10 s:
 * their sequences must be gone long before that. */
static void test_client_leaves(void) {
    char body[512];
    fault("{\"model\":\"" MODEL "\",\"kind\":\"delay\",\"delay_ms\":100,\"steps\":100000}");
    make_body(body, sizeof(body), 0, 3, SEED, 200, ",\"ignore_eos\":true,\"stream\":true");
    int fd = test_http_send(port, "POST", "/v1/completions", NULL, body);
    CHECK(fd >= 0);
    read_some(fd, 400); /* headers and a few chunks */
    CHECK_MSG(wait_metric(RUNNING, 3, 1, 30), "the three choices never ran together");
    close(fd);
    CHECK_MSG(wait_metric(RUNNING, 0, 0, 3) && wait_metric(WAITING, 0, 0, 3),
              "choices of a client that left still run: %g running, %g waiting", metric(RUNNING),
              metric(WAITING));
}

/* The runner takes one sequence and one waiting request: of three choices,
 * the second or third is refused (429), so the whole request is, and the
 * others are cancelled: the runner, slowed down so that 200 tokens would
 * take about 10 s, is empty long before that, and the next request finds
 * room. A stream refused before its first token gets the 429 as its
 * status; one refused later (its first choice was quicker) gets it as an
 * error event. */
static void test_one_choice_fails(void) {
    struct test_service gateway;
    char *options[] = {"--enable-faults",
                       "--runner-arg",
                       "--max-sequences",
                       "--runner-arg",
                       "1",
                       "--runner-arg",
                       "--max-waiting",
                       "--runner-arg",
                       "1",
                       NULL};
    CHECK(start_gateway(&gateway, options));
    fault("{\"model\":\"" MODEL "\",\"kind\":\"delay\",\"delay_ms\":100,\"steps\":100000}");
    char body[512];
    for (int stream = 0; stream < 2; stream++) {
        make_body(body, sizeof(body), 0, 3, SEED, 200,
                  stream ? ",\"ignore_eos\":true,\"stream\":true" : ",\"ignore_eos\":true");
        struct test_http h = test_http_request(port, "POST", "/v1/completions", NULL, body, 60);
        int in_stream = stream && h.status == 200;
        CHECK_MSG((h.status == 429 || in_stream) && h.body && strstr(h.body, "rate_limit_error"),
                  "stream %d: status %d: %s", stream, h.status, h.body);
        test_http_free(&h);
        CHECK_MSG(wait_metric(RUNNING, 0, 0, 3) && wait_metric(WAITING, 0, 0, 3),
                  "the other choices still run: %g running, %g waiting", metric(RUNNING),
                  metric(WAITING));
        make_body(body, sizeof(body), 0, 1, SEED, 4, "");
        struct answer one = whole("/v1/completions", body);
        CHECK_MSG(one.status == 200 && one.n == 1, "the next request: status %d", one.status);
        answer_free(&one);
    }
    CHECK(test_stop_service(&gateway, 20) == 0);
}

int main(void) {
    struct test_service gateway;
    if (!test_require_file(
            test_shared_path(model_path, sizeof(model_path), "models/kjv2m-q8_0.gguf")))
        return TEST_SKIP_CODE;
    char *options[] = {"--enable-faults", NULL};
    if (start_gateway(&gateway, options)) {
        test_seeds();
        test_streamed();
        test_refused();
        test_metrics();
        test_runner_killed();
        test_client_leaves();
    } else {
        CHECK_MSG(0, "the gateway did not start");
    }
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
    test_one_choice_fails();
    CHECK(test_kill_children() == 0);
    return test_status("test_gateway_choices");
}
