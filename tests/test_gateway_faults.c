/* test_gateway_faults.c -- the gateway cannot be frozen, emptied or leaked
 * by ordinary traffic (issue 21's defects, each a regression test).
 *
 * On ../shared/models/kjv2m-q8_0.gguf (skipped without it):
 *   - freeze: with the runner stopped (SIGSTOP), 240 requests of 240 prompt
 *     tokens arrive; /health answers within 1 s throughout, the watchdog
 *     replaces the runner, and every request completes with the text it
 *     gets undisturbed;
 *   - logprobs leave out the tokens a stop string removed from the text;
 *   - top_p 0 and 1e-46 are served (the most likely token: the greedy
 *     text), and no runner is restarted over them;
 *   - zombies: a client that leaves while the runner is stopped leaves
 *     nothing behind that makes the next runners "stuck": the restarts stop;
 *   - a runner that dies before its first step, start after start, ends in
 *     503 after the fifth failed start, not in an endless loop;
 *   - 500 half-sent requests whose clients closed leave no socket open,
 *     and one client address holds at most --max-client-connections;
 *   - a gateway killed with SIGKILL takes its runner with it, and its
 *     leftover directory is removed by the next gateway;
 *   - a runner's refusal keeps its category: a full queue is 429, for a
 *     stream too (not a 200 with an error inside);
 *   - small ones: what libmicrohttpd answered in HTML (431, 414, 505, a
 *     chunked body) is OpenAI JSON; conflicting Content-Length is 400 JSON, an empty API key
 *     is refused at start, "bearer" in lower case is accepted, an unknown
 *     path answers 401 before 404 when a key is required, 429 and 503
 *     carry Retry-After, GET keeps the connection alive, --cors-origin
 *     answers preflights and marks answers for its origin only. */
#include "testutil.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE  120.0
#define STALL     30.0 /* seconds the flood may go without an answer arriving */
#define N_FLOOD   240  /* requests sent to a stopped runner */
#define N_PROMPT  240  /* tokens in each of their prompts */
#define WATCHDOG  "2"
#define N_HALF    500 /* half-sent requests */
#define MODEL_REF "\"model\":\"kjv2m-q8_0\""

static char model_path[512];

static void nap_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Starts `lockstep serve` on the model with extra options (and env); its
 * port, once /health is 200, or 0. */
static int start_gateway(struct test_service *s, char *const extra[], const char *const env[]) {
    return test_start_gateway(s, model_path, extra, env, DEADLINE);
}

/* A number of the first model in /health ("restarts", "runner_pid",
 * "stuck_detections"); -1 if /health did not answer within deadline. */
static double health_number(int port, const char *name, double deadline) {
    struct test_http h = test_http_request(port, "GET", "/health", NULL, NULL, deadline);
    double value = -1;
    cJSON *j = h.body ? cJSON_Parse(h.body) : NULL;
    cJSON *model = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "models"), 0);
    cJSON *item = cJSON_GetObjectItem(model, name);
    if (cJSON_IsNumber(item)) value = item->valuedouble;
    cJSON_Delete(j);
    test_http_free(&h);
    return value;
}

static int post_fault(int port, const char *kind) {
    char body[128];
    snprintf(body, sizeof(body), "{" MODEL_REF ",\"kind\":\"%s\"}", kind);
    struct test_http h = test_http_request(port, "POST", "/debug/fault", NULL, body, 10);
    int ok = h.status == 200;
    test_http_free(&h);
    return ok;
}

/* The text of a whole completion's answer, or NULL. */
static char *completion_text(const char *body) {
    cJSON *j = body ? cJSON_Parse(body) : NULL;
    cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(choice, "text"));
    char *copy = text ? strdup(text) : NULL;
    cJSON_Delete(j);
    return copy;
}

/* ---------- the freeze ---------- */

/* Request i of the flood: 240 prompt tokens of its own, greedy. */
static void flood_body(char *out, size_t size, int i) {
    int n = snprintf(out, size, "{" MODEL_REF ",\"max_tokens\":4,\"temperature\":0,\"prompt\":[");
    for (int j = 0; j < N_PROMPT; j++)
        n +=
            snprintf(out + n, size - (size_t)n, "%s%d", j ? "," : "", 3 + (i * 31 + j * 17) % 1000);
    snprintf(out + n, size - (size_t)n, "]}");
}

/* One flood request in flight: its socket and what it answered so far. */
struct flight {
    int fd;
    char *answer;
    size_t length;
};

/* Reads what is there; 1 once the answer is whole (the server closed). */
static int read_flight(struct flight *f) {
    char chunk[4096];
    ssize_t n = recv(f->fd, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : 1;
    if (n == 0) return 1;
    char *grown = realloc(f->answer, f->length + (size_t)n + 1);
    if (!grown) return 1;
    f->answer = grown;
    memcpy(f->answer + f->length, chunk, (size_t)n);
    f->length += (size_t)n;
    f->answer[f->length] = '\0';
    return 0;
}

/* What the flood measured besides the answers. */
struct flood_watch {
    double worst_health;   /* slowest /health answer, seconds (-1: one never came) */
    double replaced_after; /* from the start until /health shows a new runner (-1: never) */
    double detected_after; /* ... until it counts a stuck detection (-1: never) */
};

/* Sends the whole flood at once, then reads every answer while /health is
 * asked every 200 ms; texts[i] gets answer i's text (NULL if none). The
 * verdict waits on progress, not on the clock: a loaded machine may take
 * long, but it gives up only after STALL seconds in which no byte of any
 * answer came, and then says what was left and how old the oldest
 * request was. */
static void run_flood(int port, char **texts, struct flood_watch *watch) {
    static struct flight flights[N_FLOOD];
    static char body[8192];
    int open = 0, pid0 = (int)health_number(port, "runner_pid", 10);
    double stuck0 = health_number(port, "stuck_detections", 10), start = test_now();
    double next_health = start, progress = start, quiet = 0; /* longest time without progress */
    *watch = (struct flood_watch){0, -1, -1};
    for (int i = 0; i < N_FLOOD; i++) {
        flood_body(body, sizeof(body), i);
        flights[i] =
            (struct flight){test_http_send(port, "POST", "/v1/completions", NULL, body), NULL, 0};
        open += flights[i].fd >= 0;
    }
    while (open > 0 && test_now() - progress < STALL) {
        struct pollfd p[N_FLOOD];
        for (int i = 0; i < N_FLOOD; i++) p[i] = (struct pollfd){flights[i].fd, POLLIN, 0};
        poll(p, N_FLOOD, 50);
        for (int i = 0; i < N_FLOOD; i++) {
            if (flights[i].fd < 0 || !p[i].revents) continue;
            size_t had = flights[i].length;
            int whole = read_flight(&flights[i]);
            if (!whole && flights[i].length == had) continue;
            if (test_now() - progress > quiet) quiet = test_now() - progress;
            progress = test_now();
            if (!whole) continue;
            close(flights[i].fd);
            flights[i].fd = -1;
            open--;
        }
        if (test_now() < next_health) continue;
        double asked = test_now();
        int pid = (int)health_number(port, "runner_pid", 5);
        double took = test_now() - asked, stuck = health_number(port, "stuck_detections", 5);
        watch->worst_health =
            pid < 0 || took > watch->worst_health ? (pid < 0 ? 99 : took) : watch->worst_health;
        if (watch->detected_after < 0 && stuck > stuck0) watch->detected_after = asked - start;
        if (watch->replaced_after < 0 && pid > 0 && pid != pid0)
            watch->replaced_after = asked - start;
        next_health = asked + 0.2;
    }
    /* slow or stuck: a slow flood answers all along; a stuck one goes quiet */
    fprintf(stderr, "flood: %d of %d answered in %.1f s, at most %.1f s without progress\n",
            N_FLOOD - open, N_FLOOD, test_now() - start, quiet);
    if (open > 0)
        fprintf(stderr,
                "flood: %d of %d requests unanswered after %.0f s without progress (%.0f s in "
                "all); the oldest request waited %.1f s\n",
                open, N_FLOOD, STALL, test_now() - start,
                health_number(port, "oldest_request_seconds", 5));
    for (int i = 0; i < N_FLOOD; i++) {
        if (flights[i].fd >= 0) close(flights[i].fd);
        const char *at = flights[i].answer ? strstr(flights[i].answer, "\r\n\r\n") : NULL;
        int ok = at && !strncmp(flights[i].answer, "HTTP/1.1 200", 12);
        texts[i] = ok ? completion_text(at + 4) : NULL;
        free(flights[i].answer);
    }
}

static void test_freeze(int port) {
    static char *reference[N_FLOOD], *flooded[N_FLOOD];
    struct flood_watch calm, stopped;
    run_flood(port, reference, &calm);
    CHECK_MSG(post_fault(port, "stop"), "the stop fault was not taken");
    run_flood(port, flooded, &stopped);
    fprintf(stderr,
            "freeze: /health at worst %.3f s; stuck detected after %.2f s, runner replaced "
            "after %.2f s\n",
            stopped.worst_health, stopped.detected_after, stopped.replaced_after);
    CHECK_MSG(stopped.worst_health < 1.0, "/health took %.2f s with the runner stopped",
              stopped.worst_health);
    /* detection within the 2 s deadline (plus a poll), a new runner soon after */
    CHECK_MSG(stopped.detected_after >= 0 && stopped.detected_after < 4.0,
              "stuck detected after %.2f s", stopped.detected_after);
    CHECK_MSG(stopped.replaced_after >= 0 && stopped.replaced_after < 15.0,
              "runner replaced after %.2f s", stopped.replaced_after);
    int same = 0;
    for (int i = 0; i < N_FLOOD; i++) {
        same += reference[i] && flooded[i] && !strcmp(reference[i], flooded[i]);
        free(reference[i]);
        free(flooded[i]);
    }
    CHECK_MSG(same == N_FLOOD, "%d of %d flooded requests gave their undisturbed text", same,
              N_FLOOD);
}

/* ---------- top_p at 0 ---------- */

static char *complete_text(int port, const char *body) {
    struct test_http h = test_http_request(port, "POST", "/v1/completions", NULL, body, 30);
    char *text = h.status == 200 ? completion_text(h.body) : NULL;
    CHECK_MSG(h.status == 200, "%s: %d %s", body, h.status, h.body ? h.body : "");
    test_http_free(&h);
    return text;
}

static void test_top_p_zero(int port) {
    double restarts = health_number(port, "restarts", 10);
    char *greedy = complete_text(
        port, "{" MODEL_REF ",\"prompt\":\"And God said\",\"max_tokens\":8,\"temperature\":0}");
    char *zero = complete_text(port, "{" MODEL_REF ",\"prompt\":\"And God said\",\"max_tokens\":8,"
                                     "\"temperature\":1,\"top_p\":0,\"seed\":5}");
    char *tiny = complete_text(port, "{" MODEL_REF ",\"prompt\":\"And God said\",\"max_tokens\":8,"
                                     "\"temperature\":1,\"top_p\":1e-46,\"seed\":6}");
    CHECK_MSG(greedy && zero && !strcmp(greedy, zero), "top_p 0 '%s', greedy '%s'", zero, greedy);
    CHECK_MSG(greedy && tiny && !strcmp(greedy, tiny), "top_p 1e-46 '%s', greedy '%s'", tiny,
              greedy);
    CHECK_MSG(health_number(port, "restarts", 10) == restarts, "a runner was restarted");
    free(greedy);
    free(zero);
    free(tiny);
}

/* ---------- logprobs of a stopped answer ---------- */

/* The tokens of the logprobs of a whole completion, joined, or NULL. */
static char *logprob_tokens(const char *body) {
    cJSON *j = body ? cJSON_Parse(body) : NULL;
    cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cJSON *tokens = cJSON_GetObjectItem(cJSON_GetObjectItem(choice, "logprobs"), "tokens"), *t;
    char *joined = tokens ? calloc(1, 4096) : NULL;
    cJSON_ArrayForEach(t, tokens) if (cJSON_IsString(t) && joined && strlen(joined) < 3000)
        strcat(joined, t->valuestring);
    cJSON_Delete(j);
    return joined;
}

/* A stop string removes its tokens from the logprobs as from the text;
 * the greedy answer to this prompt is " unto them, What is this that". */
static void test_stopped_logprobs(int port) {
    struct test_http h = test_http_request(
        port, "POST", "/v1/completions", NULL,
        "{" MODEL_REF ",\"prompt\":\"And God said\",\"max_tokens\":8,\"temperature\":0,"
        "\"logprobs\":0,\"stop\":\"What\"}",
        30);
    char *text = completion_text(h.body), *tokens = logprob_tokens(h.body);
    CHECK_MSG(h.status == 200 && text && tokens && !strcmp(text, " unto them, ") &&
                  !strncmp(tokens, text, strlen(text)) && !strstr(tokens, "What"),
              "text '%s', logprobs tokens '%s'", text ? text : "", tokens ? tokens : "");
    free(text);
    free(tokens);
    test_http_free(&h);
}

/* ---------- zombie requests ---------- */

static void test_zombies(int port) {
    CHECK(post_fault(port, "stop"));
    int fd = test_http_send(port, "POST", "/v1/completions", NULL,
                            "{" MODEL_REF ",\"prompt\":\"And\",\"max_tokens\":50,\"stream\":true}");
    /* the client leaves while the stopped runner holds its request: once
     * its stream began (a keep-alive comment), the gateway has it */
    struct pollfd p = {fd, POLLIN, 0};
    char first[64];
    CHECK_MSG(fd >= 0 && poll(&p, 1, 5000) == 1 && recv(fd, first, sizeof(first), 0) > 0,
              "the stream to a stopped runner did not begin");
    close(fd);
    /* a new request needs a runner: the stopped one is replaced for it */
    char *text = complete_text(port, "{" MODEL_REF ",\"prompt\":\"And\",\"max_tokens\":3}");
    CHECK(text != NULL);
    free(text);
    /* then nothing is pending: no runner may be judged stuck again */
    double restarts = health_number(port, "restarts", 10);
    for (double start = test_now(); test_now() - start < 3 * atof(WATCHDOG) + 1; nap_ms(200))
        CHECK_MSG(health_number(port, "restarts", 10) == restarts,
                  "an idle runner was restarted (a request stayed in its table)");
}

/* ---------- failed starts ---------- */

static void test_failed_starts(void) {
    struct test_service gateway;
    char *options[] = {"--tp", "2", NULL};
    const char *env[] = {"LOCKSTEP_FAULT=kill:0:0", NULL}; /* dies in its first step */
    int port = start_gateway(&gateway, options, env);
    CHECK(port > 0);
    struct test_http h =
        test_http_request(port, "POST", "/v1/completions", NULL,
                          "{" MODEL_REF ",\"prompt\":\"And\",\"max_tokens\":3}", 30);
    CHECK_MSG(h.status == 503 && h.body && strstr(h.body, "unavailable") &&
                  strstr(h.headers, "Retry-After"),
              "a runner that dies in its first step: %d %s", h.status, h.body ? h.body : "");
    test_http_free(&h);
    CHECK(test_stop_service(&gateway, 20) == 0);
}

/* ---------- half-open connections ---------- */

static int open_files(int pid) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    int n = 0;
    while (d && readdir(d)) n++;
    if (d) closedir(d);
    return n;
}

static int connect_to(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) return fd;
    if (fd >= 0) close(fd);
    return -1;
}

static void test_half_open(int port, int pid) {
    /* half of them stop in the body, half in the head */
    static const char *const partial[] = {"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                          "Content-Length: 100\r\n\r\n{\"mo",
                                          "POST /v1/completions HTTP/1.1\r\nHost: x\r\nCont"};
    int before = open_files(pid);
    for (int i = 0; i < N_HALF; i++) {
        int fd = connect_to(port);
        const char *bytes = partial[i % 2];
        if (fd >= 0 && send(fd, bytes, strlen(bytes), MSG_NOSIGNAL) < 0) CHECK(0);
        if (fd >= 0) close(fd);
    }
    int now = 0;
    for (double start = test_now(); test_now() - start < 3.0; nap_ms(50))
        if ((now = open_files(pid)) <= before + 4) break;
    CHECK_MSG(now <= before + 4, "%d files open after %d half-sent requests, %d before", now,
              N_HALF, before);
}

static void test_client_limit(void) {
    struct test_service gateway;
    char *options[] = {"--max-client-connections", "8", NULL};
    int port = start_gateway(&gateway, options, NULL), fds[8];
    CHECK(port > 0);
    for (int i = 0; i < 8; i++) fds[i] = connect_to(port);
    /* the ninth from the same address is closed unanswered */
    struct test_http h = test_http_request(port, "GET", "/health", NULL, NULL, 5);
    CHECK_MSG(h.status == -1, "a ninth connection was answered: %d", h.status);
    test_http_free(&h);
    for (int i = 0; i < 8; i++)
        if (fds[i] >= 0) close(fds[i]);
    int served = 0;
    for (double start = test_now(); !served && test_now() - start < 5; nap_ms(50)) {
        h = test_http_request(port, "GET", "/health", NULL, NULL, 5);
        served = h.status == 200;
        test_http_free(&h);
    }
    CHECK_MSG(served, "no answer once the eight connections closed");
    CHECK(test_stop_service(&gateway, 20) == 0);
}

/* ---------- what a runner refuses ---------- */

/* A runner whose queue takes nothing refuses every request as over
 * capacity: 429, also for a stream, which never starts with a 200. */
static void test_refusals(void) {
    struct test_service gateway;
    char *options[] = {"--runner-arg", "--max-waiting", "--runner-arg", "0", NULL};
    int port = start_gateway(&gateway, options, NULL);
    CHECK(port > 0);
    const char *bodies[] = {"{" MODEL_REF ",\"prompt\":\"And\",\"max_tokens\":3}",
                            "{" MODEL_REF ",\"prompt\":\"And\",\"max_tokens\":3,\"stream\":true}"};
    for (int i = 0; i < 2; i++) {
        struct test_http h =
            test_http_request(port, "POST", "/v1/completions", NULL, bodies[i], 30);
        CHECK_MSG(h.status == 429 && h.body && strstr(h.body, "rate_limit_error") &&
                      strstr(h.body, "queue is full") && strstr(h.headers, "Retry-After"),
                  "%s: %d %s", bodies[i], h.status, h.body ? h.body : "");
        test_http_free(&h);
    }
    CHECK(test_stop_service(&gateway, 20) == 0);
}

/* ---------- a killed gateway ---------- */

static int process_gone(int pid) {
    char path[64], *stat;
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    stat = test_read_file(path, NULL);
    const char *state = stat ? strrchr(stat, ')') : NULL;
    int gone = !state || state[2] == 'Z';
    free(stat);
    return gone;
}

static void test_killed_gateway(void) {
    struct test_service gateway, next;
    char dir[64], socket_path[96];
    int port = start_gateway(&gateway, NULL, NULL);
    int runner = (int)health_number(port, "runner_pid", 10);
    CHECK(port > 0 && runner > 0);
    snprintf(dir, sizeof(dir), "/tmp/lockstep-%d", gateway.pid);
    snprintf(socket_path, sizeof(socket_path), "%s/0.sock", dir);
    kill(gateway.pid, SIGKILL);
    test_stop_service(&gateway, 5);
    int gone = 0;
    for (double start = test_now(); !gone && test_now() - start < 10; nap_ms(50)) {
        test_reap_children(0);
        gone = process_gone(runner) && access(socket_path, F_OK) != 0;
    }
    CHECK_MSG(gone, "the runner (pid %d) or its socket outlived its killed gateway", runner);
    /* the next gateway starts beside the leftovers and removes them */
    CHECK(start_gateway(&next, NULL, NULL) > 0);
    CHECK_MSG(access(dir, F_OK) != 0, "%s is still there", dir);
    CHECK(test_stop_service(&next, 20) == 0);
}

/* ---------- smaller ones ---------- */

/* Sends raw bytes on a new connection; the answer's first line and body. */
static char *raw_exchange(int port, const char *request) {
    int fd = connect_to(port);
    if (fd < 0) return NULL;
    if (send(fd, request, strlen(request), MSG_NOSIGNAL) < 0) CHECK(0);
    struct flight f = {fd, NULL, 0};
    for (double start = test_now(); test_now() - start < 10;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) > 0 && read_flight(&f)) break;
    }
    close(fd);
    return f.answer;
}

/* What libmicrohttpd would answer in HTML is answered in OpenAI's shape. */
static void test_library_errors(int port) {
    static char big_header[20000], long_uri[10000];
    snprintf(big_header, sizeof(big_header),
             "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: %0*d\r\n\r\n", 18000, 0);
    snprintf(long_uri, sizeof(long_uri), "GET /%0*d HTTP/1.1\r\nHost: x\r\n\r\n", 9000, 0);
    const struct {
        const char *request, *status;
    } cases[] = {
        {big_header, "HTTP/1.1 431"},
        {long_uri, "HTTP/1.1 414"},
        {"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", "HTTP/1.1 505"},
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
         "ZZ\r\nabc\r\n0\r\n\r\n",
         "HTTP/1.1 411"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *a = raw_exchange(port, cases[i].request);
        const char *body = a ? strstr(a, "\r\n\r\n") : NULL;
        CHECK_MSG(a && !strncmp(a, cases[i].status, 12) && body &&
                      !strncmp(body + 4, "{\"error\":{", 10) &&
                      strstr(a, "Content-Type: application/json"),
                  "expected %s in JSON, got: %.200s", cases[i].status, a ? a : "(none)");
        free(a);
    }
}

static void test_small_ones(int port) {
    test_library_errors(port);
    /* a prompt and max_tokens past the context (256) are refused, not cut */
    struct test_http h =
        test_http_request(port, "POST", "/v1/completions", NULL,
                          "{" MODEL_REF ",\"prompt\":\"And\",\"max_tokens\":255}", 10);
    CHECK_MSG(h.status == 400 && h.body && strstr(h.body, "context_length_exceeded"),
              "max_tokens past the context: %d %s", h.status, h.body ? h.body : "");
    test_http_free(&h);
    /* /v1/models says how long the context is */
    h = test_http_request(port, "GET", "/v1/models", NULL, NULL, 10);
    CHECK_MSG(h.status == 200 && h.body && strstr(h.body, "\"context_length\":256"),
              "/v1/models: %s", h.body ? h.body : "");
    test_http_free(&h);
    char *a = raw_exchange(port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                                 "Content-Length: 40\r\nConnection: close\r\n\r\n{\"a\":1}");
    CHECK_MSG(a && !strncmp(a, "HTTP/1.1 400", 12) && strstr(a, "\"error\"") &&
                  strstr(a, "Content-Length"),
              "two Content-Length: %s", a ? a : "(none)");
    free(a);
    /* two GETs on one connection: the first answer keeps it open */
    a = raw_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                           "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const char *second = a ? strstr(a + 1, "HTTP/1.1 200") : NULL;
    CHECK_MSG(a && !strncmp(a, "HTTP/1.1 200", 12) && second && strstr(second, "\"list\""),
              "GET keep-alive: %s", a ? a : "(none)");
    free(a);
}

static void test_keys(void) {
    struct test_service gateway;
    char *empty[] = {LOCKSTEP_BIN, "serve", "-m", model_path, "--port", "0", "--api-key", "", NULL};
    struct test_job job = test_run_job(empty, 30, NULL);
    CHECK_MSG(job.status != 0 && job.err && strstr(job.err, "empty"),
              "--api-key \"\": status %d, %s", job.status, job.err ? job.err : "");
    test_job_free(&job);
    char *options[] = {"--api-key",           "s3cret", "--max-concurrent", "1",
                       "--keep-alive",        "0.3",    "--enable-faults",  "--cors-origin",
                       "https://app.example", NULL};
    int port = start_gateway(&gateway, options, NULL);
    struct test_http h =
        test_http_request(port, "GET", "/v1/models", "Authorization: bearer s3cret\r\n", NULL, 10);
    CHECK_MSG(h.status == 200, "lower-case bearer: %d", h.status);
    test_http_free(&h);
    /* CORS: a preflight needs no key; answers carry the allowed origin only */
    h = test_http_request(port, "OPTIONS", "/v1/chat/completions",
                          "Origin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n",
                          NULL, 10);
    CHECK_MSG(h.status == 204 && h.headers &&
                  strstr(h.headers, "Access-Control-Allow-Origin: https://app.example") &&
                  strstr(h.headers, "Authorization"),
              "preflight: %d %s", h.status, h.headers ? h.headers : "");
    test_http_free(&h);
    h = test_http_request(port, "GET", "/v1/models",
                          "Origin: https://app.example\r\nAuthorization: Bearer s3cret\r\n", NULL,
                          10);
    CHECK_MSG(h.status == 200 && h.headers &&
                  strstr(h.headers, "Access-Control-Allow-Origin: https://app.example"),
              "CORS on an answer: %s", h.headers ? h.headers : "");
    test_http_free(&h);
    h = test_http_request(port, "GET", "/v1/models",
                          "Origin: https://evil.example\r\nAuthorization: Bearer s3cret\r\n", NULL,
                          10);
    CHECK_MSG(h.status == 200 && h.headers && !strstr(h.headers, "Access-Control-Allow-Origin"),
              "an origin not allowed got CORS headers: %s", h.headers ? h.headers : "");
    test_http_free(&h);
    h = test_http_request(port, "GET", "/no/such/path", NULL, NULL, 10);
    CHECK_MSG(h.status == 401 && h.body && strstr(h.body, "invalid_api_key"),
              "unknown path without the key: %d", h.status);
    test_http_free(&h);
    const char *key = "Authorization: Bearer s3cret\r\n";
    h = test_http_request(port, "GET", "/no/such/path", key, NULL, 10);
    CHECK_MSG(h.status == 404, "unknown path with the key: %d", h.status);
    test_http_free(&h);
    /* the runner is stopped, so the one request allowed stays in flight;
     * its first bytes (a keep-alive comment) say it was counted */
    struct test_http stop = test_http_request(port, "POST", "/debug/fault", key,
                                              "{" MODEL_REF ",\"kind\":\"stop\"}", 10);
    CHECK(stop.status == 200);
    test_http_free(&stop);
    int fd = test_http_send(port, "POST", "/v1/completions", key,
                            "{" MODEL_REF ",\"prompt\":\"And\",\"max_tokens\":200,\"stream\":true,"
                            "\"ignore_eos\":true}");
    char first[64];
    CHECK(fd >= 0 && recv(fd, first, sizeof(first), 0) > 0);
    h = test_http_request(port, "POST", "/v1/completions", key,
                          "{" MODEL_REF ",\"prompt\":\"And\",\"max_tokens\":2}", 10);
    CHECK_MSG(h.status == 429 && h.headers && strstr(h.headers, "Retry-After: 1"), "429: %d %s",
              h.status, h.headers ? h.headers : "");
    test_http_free(&h);
    if (fd >= 0) close(fd);
    CHECK(test_stop_service(&gateway, 20) == 0);
}

int main(void) {
    struct test_service gateway;
    if (!test_require_file(
            test_shared_path(model_path, sizeof(model_path), "models/kjv2m-q8_0.gguf")))
        return TEST_SKIP_CODE;
    signal(SIGPIPE, SIG_IGN);
    char *options[] = {"--watchdog",   WATCHDOG, "--enable-faults",
                       "--keep-alive", "0.2",    "--max-concurrent",
                       "1024",         NULL};
    int port = start_gateway(&gateway, options, NULL);
    CHECK_MSG(port > 0, "the gateway did not start");
    if (port > 0) {
        test_small_ones(port);
        test_top_p_zero(port);
        test_stopped_logprobs(port);
        test_half_open(port, gateway.pid);
        test_freeze(port);
        test_zombies(port);
    }
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
    test_failed_starts();
    test_client_limit();
    test_keys();
    test_refusals();
    test_killed_gateway();
    CHECK(test_kill_children() == 0);
    return test_status("test_gateway_faults");
}
