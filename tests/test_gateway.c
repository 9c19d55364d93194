/* test_gateway.c -- `lockstep serve` over real HTTP on loopback.
 *
 * On ../shared/models/kjv2m-q8_0.gguf (skipped without it):
 *   - completions, whole and streamed, give exactly the text of
 *     `lockstep generate` for the same prompt, greedy and seeded; streamed
 *     chat gives the text of whole chat;
 *   - 32 concurrent streams all complete, each with well-formed chunks
 *     ending in one finish_reason and "data: [DONE]";
 *   - a stop string that spans tokens ends the text just before it, and no
 *     chunk ever carries it;
 *   - malformed JSON, wrong types, n=9, unknown model and unknown path get
 *     the right status and OpenAI error body;
 *   - a client that disconnects mid-stream frees its sequence (running
 *     sequences and KV blocks in /metrics return to 0, status 499 counted);
 *   - /metrics parses as Prometheus text;
 *   - SIGKILL of the runner mid-stream: every open stream completes with
 *     the same text as an undisturbed run, and /health counts the restart
 *     (n > 1 has its own test, test_gateway_choices.c);
 *   - with --api-key, --max-body and --max-concurrent: 401, 413 and 429;
 *     a second -m instance is listed and routed to by its --name.
 * ctest-labels: concurrency */
#include "runner/runner.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DEADLINE  120.0
#define N_STREAMS 32
#define N_KILLED  6

static char model_path[512];
static int port;

/* Starts `lockstep serve` with extra options; fills the port. */
static int start_gateway(struct test_service *s, char *const extra[]) {
    port = test_start_gateway(s, model_path, extra, NULL, DEADLINE);
    return port > 0;
}

/* The text of every "data:" chunk of an SSE body concatenated (choices[0]
 * text or delta.content); checks the framing. Returns malloc'd text. */
static char *stream_text(const char *body, int chat, char *finish, size_t finish_size) {
    size_t capacity = strlen(body) + 1, n = 0;
    char *text = calloc(1, capacity);
    int done = 0, finishes = 0;
    for (const char *line = body; line && *line;) {
        const char *end = strstr(line, "\n\n");
        CHECK_MSG(end != NULL, "an event does not end with a blank line");
        if (!end) break;
        if (!strncmp(line, "data: [DONE]", 12)) {
            done = 1;
            CHECK_MSG(end[2] == '\0', "bytes after [DONE]");
        } else if (!strncmp(line, "data: ", 6)) {
            CHECK(!done);
            char *json = strndup(line + 6, (size_t)(end - line - 6));
            cJSON *j = cJSON_Parse(json);
            CHECK_MSG(j != NULL, "chunk is not JSON: %s", json);
            cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
            cJSON *piece =
                chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(choice, "delta"), "content")
                     : cJSON_GetObjectItem(choice, "text");
            if (cJSON_IsString(piece)) {
                size_t k = strlen(piece->valuestring);
                memcpy(text + n, piece->valuestring, k < capacity - n - 1 ? k : 0);
                n += k < capacity - n - 1 ? k : 0;
            }
            cJSON *reason = cJSON_GetObjectItem(choice, "finish_reason");
            if (cJSON_IsString(reason)) {
                finishes++;
                snprintf(finish, finish_size, "%s", reason->valuestring);
            }
            cJSON_Delete(j);
            free(json);
        } else {
            CHECK_MSG(line[0] == ':', "unexpected line: %.40s", line);
        }
        line = end + 2;
    }
    CHECK_MSG(done && finishes == 1, "stream: [DONE] %d, %d finish reasons", done, finishes);
    return text;
}

/* A completion's text: whole (JSON) or streamed. */
static char *complete(const char *path, const char *body, int stream, char *finish) {
    struct test_http h = test_http_request(port, "POST", path, NULL, body, DEADLINE);
    int chat = strstr(path, "chat") != NULL;
    char *text = NULL;
    CHECK_MSG(h.status == 200, "%s: status %d: %s", path, h.status, h.body);
    if (h.status == 200 && stream) {
        text = stream_text(h.body, chat, finish, 32);
    } else if (h.status == 200) {
        cJSON *j = cJSON_Parse(h.body);
        cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        cJSON *t = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(choice, "message"), "content")
                        : cJSON_GetObjectItem(choice, "text");
        cJSON *reason = cJSON_GetObjectItem(choice, "finish_reason");
        text = strdup(cJSON_IsString(t) ? t->valuestring : "");
        snprintf(finish, 32, "%s", cJSON_IsString(reason) ? reason->valuestring : "");
        cJSON_Delete(j);
    }
    test_http_free(&h);
    return text ? text : strdup("");
}

/* `lockstep generate` of the same prompt: what follows the prompt. */
static char *generate(const char *prompt, int n, const char *temperature, const char *seed) {
    char count[16];
    snprintf(count, sizeof(count), "%d", n);
    char *argv[] = {LOCKSTEP_BIN,   "generate",   "-m",  model_path, "-p",
                    (char *)prompt, "-n",         count, "--temp",   (char *)temperature,
                    "-s",           (char *)seed, NULL};
    struct test_job job = test_run_job(argv, DEADLINE, NULL);
    CHECK(job.status == 0);
    char *text =
        strdup(job.out && strlen(job.out) > strlen(prompt) ? job.out + strlen(prompt) : "");
    size_t k = strlen(text);
    if (k && text[k - 1] == '\n') text[k - 1] = '\0'; /* generate ends with a newline */
    test_job_free(&job);
    return text;
}

static void test_same_as_generate(void) {
    char body[512], finish[32];
    const char *cases[2][2] = {{"0", "1"}, {"0.8", "7"}};
    for (int c = 0; c < 2; c++) {
        char *expected = generate("And God said", 40, cases[c][0], cases[c][1]);
        for (int stream = 0; stream < 2; stream++) {
            snprintf(body, sizeof(body),
                     "{\"model\":\"kjv2m-q8_0\",\"prompt\":\"And God said\",\"max_tokens\":40,"
                     "\"temperature\":%s,\"seed\":%s,\"top_k\":40,\"top_p\":0.95,\"min_p\":0.05,"
                     "\"stream\":%s}",
                     cases[c][0], cases[c][1], stream ? "true" : "false");
            char *text = complete("/v1/completions", body, stream, finish);
            CHECK_MSG(!strcmp(text, expected),
                      "temperature %s, stream %d:\n'%s'\nvs generate\n'%s'", cases[c][0], stream,
                      text, expected);
            CHECK(!strcmp(finish, "length"));
            free(text);
        }
        free(expected);
    }
    const char *chat = "{\"model\":\"kjv2m-q8_0\",\"messages\":[{\"role\":\"system\",\"content\":"
                       "\"Speak.\"},{\"role\":\"user\",\"content\":\"Who made the earth?\"}],"
                       "\"max_tokens\":30,\"temperature\":0.7,\"seed\":3%s}";
    snprintf(body, sizeof(body), chat, "");
    char *whole = complete("/v1/chat/completions", body, 0, finish);
    snprintf(body, sizeof(body), chat, ",\"stream\":true");
    char *streamed = complete("/v1/chat/completions", body, 1, finish);
    CHECK_MSG(strlen(whole) > 0 && !strcmp(whole, streamed), "chat: '%s' vs '%s'", whole, streamed);
    free(whole);
    free(streamed);
}

struct stream_job {
    int index;
    int status;
    char *text;
    char finish[32];
    atomic_int *chunks_seen; /* counts received bytes events for the kill test (or NULL) */
};

static void *run_stream(void *arg) {
    struct stream_job *job = arg;
    char body[256];
    snprintf(body, sizeof(body),
             "{\"model\":\"kjv2m-q8_0\",\"prompt\":\"In the beginning %d\",\"max_tokens\":%d,"
             "\"temperature\":0.9,\"seed\":%d,\"stream\":true}",
             job->index, 20 + job->index % 7, 100 + job->index);
    job->text = complete("/v1/completions", body, 1, job->finish);
    return NULL;
}

static void test_concurrent_streams(void) {
    pthread_t threads[N_STREAMS];
    static struct stream_job jobs[N_STREAMS];
    for (int i = 0; i < N_STREAMS; i++) {
        jobs[i] = (struct stream_job){.index = i};
        pthread_create(&threads[i], NULL, run_stream, &jobs[i]);
    }
    for (int i = 0; i < N_STREAMS; i++) {
        pthread_join(threads[i], NULL);
        /* "stop": the model sampled end-of-sequence */
        CHECK_MSG(strlen(jobs[i].text) > 0 &&
                      (!strcmp(jobs[i].finish, "length") || !strcmp(jobs[i].finish, "stop")),
                  "stream %d: finish '%s'", i, jobs[i].finish);
    }
    /* the same request alone gives the same text */
    struct stream_job again = {.index = 5};
    run_stream(&again);
    CHECK_MSG(!strcmp(again.text, jobs[5].text), "stream 5 alone differs");
    free(again.text);
    for (int i = 0; i < N_STREAMS; i++) free(jobs[i].text);
}

static void test_stop_strings(void) {
    char finish[32];
    const char *request = "{\"model\":\"kjv2m-q8_0\",\"prompt\":\"In the beginning\","
                          "\"max_tokens\":30,\"temperature\":0%s,\"stream\":%s}";
    char body[512];
    snprintf(body, sizeof(body), request, "", "false");
    char *full = complete("/v1/completions", body, 0, finish);
    /* " princes of" is several tokens; its middle "nces o" starts inside one */
    const char *stop = "nces o";
    const char *at = strstr(full, stop);
    CHECK_MSG(at != NULL, "the reference text lacks '%s': %s", stop, full);
    if (!at) {
        free(full);
        return;
    }
    char *expected = strndup(full, (size_t)(at - full));
    for (int stream = 0; stream < 2; stream++) {
        char stops[64];
        snprintf(stops, sizeof(stops), ",\"stop\":[\"zzz\",\"%s\"]", stop);
        snprintf(body, sizeof(body), request, stops, stream ? "true" : "false");
        struct test_http h = test_http_request(port, "POST", "/v1/completions", NULL, body, 60);
        CHECK(h.status == 200 && !strstr(h.body, "nces o"));
        test_http_free(&h);
        char *text = complete("/v1/completions", body, stream, finish);
        CHECK_MSG(!strcmp(text, expected) && !strcmp(finish, "stop"),
                  "stop string, stream %d: '%s' (%s), expected '%s'", stream, text, finish,
                  expected);
        free(text);
    }
    free(expected);
    free(full);
}

/* status and error.code / error.param of a request. */
static void expect_error(const char *method, const char *path, const char *headers,
                         const char *body, int status, const char *field, const char *value) {
    struct test_http h = test_http_request(port, method, path, headers, body, 30);
    CHECK_MSG(h.status == status, "%s %s: status %d, expected %d: %s", method, path, h.status,
              status, h.body);
    cJSON *j = cJSON_Parse(h.body ? h.body : "");
    cJSON *e = cJSON_GetObjectItem(j, "error");
    CHECK_MSG(cJSON_IsString(cJSON_GetObjectItem(e, "message")) &&
                  cJSON_IsString(cJSON_GetObjectItem(e, "type")),
              "%s %s: not an OpenAI error: %s", method, path, h.body);
    if (field) {
        cJSON *f = cJSON_GetObjectItem(e, field);
        CHECK_MSG(cJSON_IsString(f) && !strcmp(f->valuestring, value), "%s: %s is not %s: %s", path,
                  field, value, h.body);
    }
    cJSON_Delete(j);
    test_http_free(&h);
}

static void test_errors(void) {
    expect_error("POST", "/v1/completions", NULL, "{\"model\": \"kjv2m-q8_0\", \"prompt\": ", 400,
                 NULL, NULL);
    expect_error("POST", "/v1/completions", NULL,
                 "{\"model\":\"kjv2m-q8_0\",\"prompt\":\"a\",\"temperature\":\"hot\"}", 400,
                 "param", "temperature");
    expect_error("POST", "/v1/chat/completions", NULL,
                 "{\"model\":\"kjv2m-q8_0\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
                 "\"n\":9}",
                 400, "param", "n");
    expect_error("POST", "/v1/completions", NULL, "{\"model\":\"gpt-9\",\"prompt\":\"a\"}", 404,
                 "code", "model_not_found");
    expect_error("GET", "/v1/nothing", NULL, NULL, 404, NULL, NULL);
    expect_error("POST", "/v1/completions", NULL,
                 "{\"model\":\"kjv2m-q8_0\",\"prompt\":\"a\",\"max_tokens\":1000000}", 400, "param",
                 "max_tokens");
}

/* A sample's value in /metrics text (first line starting with prefix). */
static double metric(const char *text, const char *prefix) {
    const char *at = strstr(text, prefix);
    return at ? atof(at + strlen(prefix)) : -1;
}

static void test_metrics_format(void) {
    struct test_http h = test_http_request(port, "GET", "/metrics", NULL, NULL, 30);
    CHECK(h.status == 200 && strstr(h.headers, "text/plain"));
    char build_info[256];
    snprintf(build_info, sizeof(build_info),
             "\nlockstep_build_info{version=\"%s\",commit=\"%s\",protocol=\"%d\"} 1\n",
             version_string(), version_commit(), RUNNER_PROTOCOL_VERSION);
    CHECK_MSG(h.body && strstr(h.body, build_info), "no %s in /metrics", build_info);
    int samples = 0;
    for (char *line = h.body; line && *line;) {
        char *end = strchr(line, '\n');
        CHECK_MSG(end != NULL, "the last line has no newline");
        if (!end) break;
        *end = '\0';
        if (line[0] != '#') {
            char *space = strrchr(line, ' ');
            char *tail;
            CHECK_MSG(space && space > line, "no value: %s", line);
            if (space) strtod(space + 1, &tail);
            CHECK_MSG(space && *tail == '\0', "bad value: %s", line);
            size_t name =
                strspn(line, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:0123456789");
            CHECK_MSG(name > 0 && (line[name] == '{' || line[name] == ' '), "bad name: %s", line);
            if (line[name] == '{') CHECK_MSG(space[-1] == '}', "bad labels: %s", line);
            samples++;
        } else {
            CHECK_MSG(!strncmp(line, "# HELP ", 7) || !strncmp(line, "# TYPE ", 7),
                      "bad comment: %s", line);
        }
        line = end + 1;
    }
    CHECK(samples > 10);
    test_http_free(&h);
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

static void test_disconnect(void) {
    const char *body = "{\"model\":\"kjv2m-q8_0\",\"prompt\":\"And\",\"max_tokens\":200,"
                       "\"stream\":true}";
    int fd = test_http_send(port, "POST", "/v1/completions", NULL, body);
    CHECK(fd >= 0);
    read_some(fd, 600); /* headers and a few chunks */
    close(fd);
    int freed = 0;
    for (double start = test_now(); !freed && test_now() - start < 30;) {
        struct test_http h = test_http_request(port, "GET", "/metrics", NULL, NULL, 10);
        freed =
            h.body &&
            metric(h.body,
                   "lockstep_running_sequences{model=\"kjv2m-q8_0\",instance=\"kjv2m-q8_0-1\"} ") ==
                0 &&
            metric(h.body,
                   "lockstep_kv_blocks_used{model=\"kjv2m-q8_0\",instance=\"kjv2m-q8_0-1\"} ") ==
                0 &&
            metric(h.body, "status=\"499\"} ") >= 1;
        test_http_free(&h);
        struct timespec nap = {0, 20000000};
        nanosleep(&nap, NULL);
    }
    CHECK_MSG(freed, "a disconnected stream still holds its sequence");
}

/* The runner's pid from /health. */
static int runner_pid(void) {
    struct test_http h = test_http_request(port, "GET", "/health", NULL, NULL, 10);
    const char *at = h.body ? strstr(h.body, "\"runner_pid\":") : NULL;
    int pid = at ? atoi(at + 13) : 0;
    test_http_free(&h);
    return pid;
}

struct killed_job {
    int index;
    char *text;
    char finish[32];
};

static void *run_long_stream(void *arg) {
    struct killed_job *job = arg;
    char body[256];
    snprintf(body, sizeof(body),
             "{\"model\":\"kjv2m-q8_0\",\"prompt\":\"Thus saith the LORD %d\",\"max_tokens\":150,"
             "\"ignore_eos\":true,\"temperature\":0.8,\"seed\":%d,\"stream\":true}",
             job->index, 40 + job->index);
    job->text = complete("/v1/completions", body, 1, job->finish);
    return NULL;
}

static void test_runner_killed(void) {
    static struct killed_job reference[N_KILLED], killed[N_KILLED];
    pthread_t threads[N_KILLED];
    for (int i = 0; i < N_KILLED; i++) {
        reference[i] = (struct killed_job){.index = i};
        pthread_create(&threads[i], NULL, run_long_stream, &reference[i]);
    }
    for (int i = 0; i < N_KILLED; i++) pthread_join(threads[i], NULL);
    for (int i = 0; i < N_KILLED; i++) {
        killed[i] = (struct killed_job){.index = i};
        pthread_create(&threads[i], NULL, run_long_stream, &killed[i]);
    }
    /* kill once tokens flow: the running sequences show in /metrics */
    for (double start = test_now(); test_now() - start < 30;) {
        struct test_http h = test_http_request(port, "GET", "/metrics", NULL, NULL, 10);
        int running =
            h.body
                ? (int)metric(
                      h.body,
                      "lockstep_running_sequences{model=\"kjv2m-q8_0\",instance=\"kjv2m-q8_0-1\"} ")
                : 0;
        test_http_free(&h);
        if (running >= N_KILLED) break;
    }
    int pid = runner_pid();
    CHECK(pid > 0);
    if (pid > 0) kill(pid, SIGKILL);
    for (int i = 0; i < N_KILLED; i++) {
        pthread_join(threads[i], NULL);
        CHECK_MSG(!strcmp(killed[i].text, reference[i].text) && !strcmp(killed[i].finish, "length"),
                  "stream %d after the kill:\n'%s'\nundisturbed:\n'%s'", i, killed[i].text,
                  reference[i].text);
        free(killed[i].text);
        free(reference[i].text);
    }
    struct test_http h = test_http_request(port, "GET", "/health", NULL, NULL, 10);
    CHECK_MSG(h.body && strstr(h.body, "\"restarts\":1"), "health: %s", h.body);
    test_http_free(&h);
}

static void test_limits(void) {
    struct test_service gateway;
    /* a second instance of the model, routed by name */
    char *options[] = {"--api-key", "s3cret",   "--max-concurrent", "1",      "--max-body", "2048",
                       "-m",        model_path, "--name",           "second", NULL};
    const char *key = "Authorization: Bearer s3cret\r\n";
    CHECK(start_gateway(&gateway, options));
    expect_error("GET", "/v1/models", NULL, NULL, 401, "code", "invalid_api_key");
    expect_error("GET", "/v1/models", "Authorization: Bearer wrong\r\n", NULL, 401, "code",
                 "invalid_api_key");
    struct test_http h = test_http_request(port, "GET", "/v1/models", key, NULL, 10);
    CHECK(h.status == 200 && strstr(h.body, "\"kjv2m-q8_0\"") && strstr(h.body, "\"second\""));
    char version[64];
    snprintf(version, sizeof(version), "\"lockstep_version\":\"%s\"", version_string());
    CHECK_MSG(strstr(h.body, version), "no %s in /v1/models: %s", version, h.body);
    test_http_free(&h);
    h = test_http_request(port, "POST", "/v1/completions", key,
                          "{\"model\":\"second\",\"prompt\":\"And\",\"max_tokens\":3}", 30);
    CHECK_MSG(h.status == 200 && strstr(h.body, "\"model\":\"second\""), "second model: %d %s",
              h.status, h.body);
    test_http_free(&h);
    h = test_http_request(port, "GET", "/health", NULL, NULL, 10);
    CHECK(h.status == 200);
    test_http_free(&h);
    char big[4000];
    snprintf(big, sizeof(big), "{\"model\":\"kjv2m-q8_0\",\"prompt\":\"%02990d\"}", 0);
    expect_error("POST", "/v1/completions", key, big, 413, NULL, NULL);
    int fd = test_http_send(port, "POST", "/v1/completions", key,
                            "{\"model\":\"kjv2m-q8_0\",\"prompt\":\"And\",\"max_tokens\":200,"
                            "\"stream\":true}");
    read_some(fd, 300);
    expect_error("POST", "/v1/completions", key,
                 "{\"model\":\"kjv2m-q8_0\",\"prompt\":\"And\",\"max_tokens\":2}", 429, "code",
                 "too_many_requests");
    close(fd);
    CHECK(test_stop_service(&gateway, 20) == 0);
}

int main(void) {
    struct test_service gateway;
    if (!test_require_file(
            test_shared_path(model_path, sizeof(model_path), "models/kjv2m-q8_0.gguf")))
        return TEST_SKIP_CODE;
    char *options[] = {"--keep-alive", "0.5", NULL};
    if (start_gateway(&gateway, options)) {
        test_same_as_generate();
        test_concurrent_streams();
        test_stop_strings();
        test_errors();
        test_metrics_format();
        test_disconnect();
        test_runner_killed();
    } else {
        CHECK_MSG(0, "the gateway did not start");
    }
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
    test_limits();
    CHECK(test_kill_children() == 0);
    return test_status("test_gateway");
}
