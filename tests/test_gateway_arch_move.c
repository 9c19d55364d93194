/* test_gateway_arch_move.c -- a live move between an x86-64 runner and an
 * arm64 one, with not one token or logprob changed.
 *
 * The cluster is this machine under two names: localhost runs the
 * gateway's own (x86-64) binary, and 127.0.0.2 is an arm64 host whose
 * cluster file line names its own binary and the program that runs it
 * (`lockstep=$LOCKSTEP_ARM64_BIN wrapper=qemu-aarch64`), as a real arm64
 * host names its own build at its own path. On the trained model kjv2m
 * (q8_0), with 4 streams (one greedy, three seeded samples at temperature
 * 0.9), each asking for 2 logprob alternatives per token:
 *   - 127.0.0.2's probe ran its own binary: it reports aarch64 and this
 *     build's numerics contract, localhost another arch;
 *   - the reference: the streams on localhost at tp 2 (x86), never moved;
 *   - a live move to 127.0.0.2 (tp 2, the arm64 runner under qemu) while
 *     the streams run, slowed down so that each has had tokens from the x86
 *     runner and is still unfinished when the arm64 one takes over: every
 *     stream ends with exactly the reference's text, and every token's
 *     logprob and its alternatives' are the same floats (the gateway prints
 *     the shortest text that reads back as the same float); the runner
 *     serving then is qemu-aarch64 running the arm64 binary (/proc);
 *   - the same streams on the arm64 runner alone, never moved: the same;
 *   - a live move back to localhost (x86) mid-stream: the same.
 * It needs the arm64 build (LOCKSTEP_ARM64_BIN, a path) and qemu-aarch64 on
 * PATH, and is skipped (77) without them or without ../shared's model;
 * scripts/arm64.sh runs it. Everything it starts is stopped by pid, and a
 * deadline (alarm) stops the gateway's process group whatever happens. */
#include "cluster/cluster.h"
#include "cluster_client.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define START_DEADLINE  120.0 /* the gateway and its first runner */
#define STREAM_DEADLINE 300.0 /* one stream, slowed down, part of it under qemu */
#define MOVE_DEADLINE   180.0 /* a move's new runner ready */
#define TEST_DEADLINE   540   /* seconds: past it the alarm stops everything (CTest: 600) */
#define N_STREAMS       4
#define MAX_TOKENS      160
#define ADMIN           "Authorization: Bearer admin-secret\r\n"

static struct cluster_client client = {0, ADMIN};
static volatile sig_atomic_t gateway_group; /* the gateway's process group, for the alarm */

static void nap_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* The test's deadline: the gateway's group is killed (its runners follow:
 * they get SIGTERM when it dies) and the test fails. */
static void on_alarm(int signal) {
    (void)signal;
    static const char message[] = "test_gateway_arch_move: the test's deadline passed\n";
    if (gateway_group > 0) kill(-(pid_t)gateway_group, SIGKILL);
    if (write(STDERR_FILENO, message, sizeof(message) - 1) < 0) _exit(1);
    _exit(1);
}

/* ---------- streams with logprobs ---------- */

static const char *const prompts[N_STREAMS] = {"In the beginning", "And the LORD said unto Moses",
                                               "Blessed are the", "And it came to pass"};

struct stream {
    pthread_t thread;
    int port, index;
    char *text;        /* the deltas joined */
    char *logprobs;    /* one line per token: text, logprob, alternatives (%.9g) */
    atomic_int tokens; /* tokens received so far */
    char finish[16];   /* the last finish_reason ("error" for an error event) */
    int done, status;  /* [DONE] arrived; the HTTP status */
    double arrived[MAX_TOKENS +
                   1]; /* when each token came (CLOCK_REALTIME, as the gateway times its events) */
    size_t text_length, logprobs_length;
};

static void append(char **to, size_t *length, const char *text) {
    size_t n = strlen(text);
    char *grown = realloc(*to, *length + n + 1);
    if (!grown) return;
    memcpy(grown + *length, text, n + 1);
    *to = grown;
    *length += n;
}

/* A token's text, its newlines and tabs escaped (they separate the record). */
static void append_token(char **to, size_t *length, const char *text) {
    char one[2] = {0, 0};
    for (const char *c = text ? text : "(none)"; *c; c++) {
        one[0] = *c;
        append(to, length, *c == '\n' ? "\\n" : *c == '\t' ? "\\t" : *c == '\\' ? "\\\\" : one);
    }
}

/* A number as the float the gateway printed it from. */
static void append_number(char **to, size_t *length, const cJSON *number) {
    char text[48];
    snprintf(text, sizeof(text), "%.9g",
             cJSON_IsNumber(number) ? (double)(float)number->valuedouble : (double)NAN);
    append(to, length, text);
}

/* One chunk's logprobs (the completions shape: tokens, token_logprobs,
 * top_logprobs) as lines of the stream's record. */
static void add_logprobs(struct stream *s, const cJSON *logprobs) {
    const cJSON *tokens = cJSON_GetObjectItem(logprobs, "tokens");
    const cJSON *values = cJSON_GetObjectItem(logprobs, "token_logprobs");
    const cJSON *tops = cJSON_GetObjectItem(logprobs, "top_logprobs");
    for (int i = 0; i < cJSON_GetArraySize(tokens); i++) {
        const char *token = cJSON_GetStringValue(cJSON_GetArrayItem(tokens, i));
        append_token(&s->logprobs, &s->logprobs_length, token);
        append(&s->logprobs, &s->logprobs_length, "\t");
        append_number(&s->logprobs, &s->logprobs_length, cJSON_GetArrayItem(values, i));
        const cJSON *alternative;
        cJSON_ArrayForEach(alternative, cJSON_GetArrayItem(tops, i)) {
            append(&s->logprobs, &s->logprobs_length, "\t");
            append_token(&s->logprobs, &s->logprobs_length, alternative->string);
            append(&s->logprobs, &s->logprobs_length, "=");
            append_number(&s->logprobs, &s->logprobs_length, alternative);
        }
        append(&s->logprobs, &s->logprobs_length, "\n");
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        int k = atomic_load(&s->tokens);
        if (k <= MAX_TOKENS) s->arrived[k] = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
        atomic_fetch_add(&s->tokens, 1);
    }
}

/* One SSE event's data. */
static void add_event(struct stream *s, const char *json) {
    cJSON *j = cJSON_Parse(json);
    cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(choice, "text"));
    const char *finish = cJSON_GetStringValue(cJSON_GetObjectItem(choice, "finish_reason"));
    if (text) append(&s->text, &s->text_length, text);
    add_logprobs(s, cJSON_GetObjectItem(choice, "logprobs"));
    if (finish) snprintf(s->finish, sizeof(s->finish), "%s", finish);
    if (cJSON_GetObjectItem(j, "error")) snprintf(s->finish, sizeof(s->finish), "error");
    cJSON_Delete(j);
}

/* Moves the whole chunks at the front of raw (HTTP chunked coding) to
 * body; what is left is a chunk not yet whole. */
static void dechunk(char **raw, size_t *raw_length, char **body, size_t *body_length) {
    size_t at = 0;
    for (;;) {
        char *line_end = strstr(*raw + at, "\r\n");
        if (!line_end) break;
        size_t size = strtoul(*raw + at, NULL, 16);
        size_t data = (size_t)(line_end - *raw) + 2;
        if (data + size + 2 > *raw_length) break;
        char saved = (*raw)[data + size];
        (*raw)[data + size] = '\0';
        append(body, body_length, *raw + data);
        (*raw)[data + size] = saved;
        at = data + size + 2;
    }
    memmove(*raw, *raw + at, *raw_length - at + 1);
    *raw_length -= at;
}

/* Runs the stream, reading its events as they come (so that the tokens
 * received so far can be counted while it runs). */
static void *run_stream(void *arg) {
    struct stream *s = arg;
    char request[512], buffer[65536];
    /* stream 0 greedy, the others seeded samples */
    snprintf(request, sizeof(request),
             "{\"model\":\"kjv\",\"prompt\":\"%s\",\"max_tokens\":%d,\"stream\":true,"
             "\"temperature\":%s,\"seed\":%d,\"logprobs\":2,\"ignore_eos\":true}",
             prompts[s->index], MAX_TOKENS, s->index ? "0.9" : "0", 100 + s->index);
    s->text = calloc(1, 1);
    s->logprobs = calloc(1, 1);
    char *raw = calloc(1, 1), *body = calloc(1, 1);
    size_t raw_length = 0, body_length = 0;
    int fd = test_http_send(s->port, "POST", "/v1/completions", NULL, request);
    int headers = 0, chunked = 0;
    struct timeval tv = {0, 200000};
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (double start = test_now();
         fd >= 0 && raw && body && !s->done && test_now() - start < STREAM_DEADLINE;) {
        ssize_t n = recv(fd, buffer, sizeof(buffer) - 1, 0);
        if (n == 0) break;
        if (n < 0) continue;
        buffer[n] = '\0';
        append(&raw, &raw_length, buffer);
        if (!headers) {
            char *split = strstr(raw, "\r\n\r\n");
            if (!split) continue;
            *split = '\0';
            sscanf(raw, "HTTP/1.%*d %d", &s->status);
            chunked = strcasestr(raw, "Transfer-Encoding: chunked") != NULL;
            size_t skip = (size_t)(split + 4 - raw);
            memmove(raw, raw + skip, raw_length - skip + 1);
            raw_length -= skip;
            headers = 1;
        }
        if (chunked) {
            dechunk(&raw, &raw_length, &body, &body_length);
        } else {
            append(&body, &body_length, raw);
            raw[0] = '\0';
            raw_length = 0;
        }
        /* the whole lines of the body: "data: ..." events */
        char *line = body, *end;
        while ((end = strchr(line, '\n')) != NULL) {
            *end = '\0';
            if (!strncmp(line, "data: [DONE]", 12)) s->done = 1;
            if (!strncmp(line, "data: {", 7)) add_event(s, line + 6);
            line = end + 1;
        }
        body_length -= (size_t)(line - body);
        memmove(body, line, body_length + 1);
    }
    if (fd >= 0) close(fd);
    free(raw);
    free(body);
    return NULL;
}

static void streams_start(struct stream *s, int port) {
    for (int i = 0; i < N_STREAMS; i++) {
        memset(&s[i], 0, sizeof(s[i]));
        s[i].port = port;
        s[i].index = i;
        pthread_create(&s[i].thread, NULL, run_stream, &s[i]);
    }
}

static void streams_join(struct stream *s) {
    for (int i = 0; i < N_STREAMS; i++) pthread_join(s[i].thread, NULL);
}

static void streams_free(struct stream *s) {
    for (int i = 0; i < N_STREAMS; i++) {
        free(s[i].text);
        free(s[i].logprobs);
        s[i].text = s[i].logprobs = NULL;
    }
}

/* Each stream whole, with the reference's text and logprobs. */
static void streams_check(const struct stream *s, const struct stream *reference,
                          const char *what) {
    for (int i = 0; i < N_STREAMS; i++) {
        int whole = s[i].status == 200 && s[i].done && !strcmp(s[i].finish, "length") &&
                    atomic_load(&s[i].tokens) == MAX_TOKENS;
        CHECK_MSG(whole, "%s: stream %d: status %d, finish '%s', done %d, %d tokens", what, i,
                  s[i].status, s[i].finish, s[i].done, atomic_load(&s[i].tokens));
        CHECK_MSG(s[i].text && reference[i].text && !strcmp(s[i].text, reference[i].text),
                  "%s: stream %d's text differs:\n  got  %s\n  want %s", what, i,
                  s[i].text ? s[i].text : "(none)", reference[i].text ? reference[i].text : "");
        int same =
            s[i].logprobs && reference[i].logprobs && !strcmp(s[i].logprobs, reference[i].logprobs);
        if (!same && s[i].logprobs && reference[i].logprobs) {
            /* the first line that differs */
            const char *a = s[i].logprobs, *b = reference[i].logprobs;
            int line = 1;
            while (*a && *a == *b) line += *a++ == '\n', b++;
            while (a > s[i].logprobs && a[-1] != '\n') a--;
            while (b > reference[i].logprobs && b[-1] != '\n') b--;
            fprintf(stderr, "%s: stream %d: token %d: got '%.*s', want '%.*s'\n", what, i, line,
                    (int)strcspn(a, "\n"), a, (int)strcspn(b, "\n"), b);
        }
        CHECK_MSG(same, "%s: stream %d's logprobs differ", what, i);
    }
}

/* Waits until every stream has had at least n tokens. */
static int wait_tokens(struct stream *s, int n, double deadline) {
    for (double start = test_now(); test_now() - start < deadline; nap_ms(5)) {
        int started = 0;
        for (int i = 0; i < N_STREAMS; i++) started += atomic_load(&s[i].tokens) >= n;
        if (started == N_STREAMS) return 1;
    }
    return 0;
}

/* ---------- the cluster ---------- */

static cJSON *host_of(cJSON *cluster, const char *name) {
    cJSON *host;
    cJSON_ArrayForEach(host, cJSON_GetObjectItem(cluster, "hosts")) {
        const char *at = cJSON_GetStringValue(cJSON_GetObjectItem(host, "name"));
        if (at && !strcmp(at, name)) return host;
    }
    return NULL;
}

static const char *field(cJSON *object, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(object, key));
    return s ? s : "(none)";
}

/* Waits until 127.0.0.2's probe (its own binary) answered; 1, or 0. */
static int wait_probed(void) {
    for (double start = test_now(); test_now() - start < 60; nap_ms(100)) {
        cJSON *c = cluster_client_state(&client);
        int up = c && !strcmp(field(host_of(c, "127.0.0.2"), "state"), "up");
        cJSON_Delete(c);
        if (up) return 1;
    }
    return 0;
}

static void test_hosts(void) {
    cJSON *c = cluster_client_state(&client);
    cJSON *x86 = host_of(c, "localhost"), *arm = host_of(c, "127.0.0.2");
    fprintf(stderr, "localhost: %s %s %s; 127.0.0.2: %s %s %s\n", field(x86, "arch"),
            field(x86, "isa"), field(x86, "numerics"), field(arm, "arch"), field(arm, "isa"),
            field(arm, "numerics"));
    CHECK_MSG(!strcmp(field(arm, "arch"), "aarch64"), "127.0.0.2's arch: %s", field(arm, "arch"));
    CHECK_MSG(strcmp(field(x86, "arch"), field(arm, "arch")) != 0, "both hosts are %s",
              field(x86, "arch"));
    CHECK_MSG(!strcmp(field(arm, "numerics"), CLUSTER_NUMERICS), "127.0.0.2's numerics: %s",
              field(arm, "numerics"));
    CHECK(!strcmp(field(x86, "numerics"), CLUSTER_NUMERICS));
    cJSON_Delete(c);
}

/* The pid of the runner the latest "ready on HOSTS" event names, or 0. */
static int runner_pid(const char *hosts) {
    char want[128];
    int pid = 0;
    snprintf(want, sizeof(want), "kjv-1 ready on %s (runner pid ", hosts);
    cJSON *c = cluster_client_state(&client), *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "events")) {
        const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(e, "text"));
        const char *at = text ? strstr(text, want) : NULL;
        if (at) pid = atoi(at + strlen(want));
    }
    cJSON_Delete(c);
    return pid;
}

/* The runner serving on hosts runs program (argv[0]) with binary (argv[1]),
 * as /proc says. */
static void check_runner(const char *hosts, const char *program, const char *binary) {
    int pid = runner_pid(hosts);
    char path[64], *cmdline = NULL;
    snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
    size_t size = 0;
    if (pid > 0) cmdline = test_read_file(path, &size);
    const char *first = cmdline ? cmdline : "";
    const char *second = cmdline && strlen(first) + 1 < size ? cmdline + strlen(first) + 1 : "";
    fprintf(stderr, "the runner on %s: pid %d: %s %s ...\n", hosts, pid, first, second);
    CHECK_MSG(pid > 0 && !strcmp(first, program) && (!binary || !strcmp(second, binary)),
              "the runner on %s (pid %d) is '%s %s', not '%s %s'", hosts, pid, first, second,
              program, binary ? binary : "...");
    free(cmdline);
}

/* Slows the runner down: every rank sleeps up to 40 ms before each
 * collective for its next 1000 steps (a tp 2 runner has some in every
 * layer), so that streams are mid-way when the move completes. */
static void slow_down(void) {
    struct test_http h = test_http_request(
        client.port, "POST", "/debug/fault", NULL,
        "{\"model\":\"kjv\",\"kind\":\"delay\",\"delay_ms\":40,\"steps\":1000}", 10);
    CHECK_MSG(h.status == 200, "delay fault: %d %s", h.status, h.body ? h.body : "");
    test_http_free(&h);
}

/* When kjv-1's latest move handed its requests over (its "moved from"
 * event, CLOCK_REALTIME), or 0. */
static double handover_time(void) {
    double at = 0;
    cJSON *c = cluster_client_state(&client), *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "events")) {
        const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(e, "text"));
        if (text && strstr(text, "kjv-1 moved from "))
            at = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "time"));
    }
    cJSON_Delete(c);
    return at;
}

/* Moves kjv-1 to hosts (body) while the streams run, once each has had a
 * quarter of its tokens where it was; every stream must equal the
 * reference, and each must have been unfinished at the handover: the
 * tokens that came before the move's "moved from" event are the old
 * runner's (slowed down, so none finished meanwhile), the rest the new
 * one's (the old one holds no request after it). */
static void move_during_streams(const struct stream *reference, const char *body, const char *hosts,
                                const char *what) {
    struct stream s[N_STREAMS];
    slow_down();
    streams_start(s, client.port);
    CHECK_MSG(wait_tokens(s, MAX_TOKENS / 4, 120), "%s: the streams did not get %d tokens", what,
              MAX_TOKENS / 4);
    double start = test_now();
    char *answer = NULL;
    int status =
        cluster_client_admin(&client, "POST", "/admin/instances/kjv-1/move", ADMIN, body, &answer);
    CHECK_MSG(status == 202, "%s: the move: %d %s", what, status, answer ? answer : "");
    free(answer);
    int placed = cluster_client_wait_placed(&client, "kjv-1", hosts, MOVE_DEADLINE);
    CHECK_MSG(placed, "%s: kjv-1 did not reach %s", what, hosts);
    double took = test_now() - start, handover = handover_time();
    streams_join(s);
    int moved = 0;
    fprintf(stderr, "%s: the move took %.2f s; tokens per stream before the handover:", what, took);
    for (int i = 0; i < N_STREAMS; i++) {
        int before = 0, n = atomic_load(&s[i].tokens);
        while (before < n && before <= MAX_TOKENS && s[i].arrived[before] < handover) before++;
        moved += before >= MAX_TOKENS / 4 && before < MAX_TOKENS;
        fprintf(stderr, " %d", before);
    }
    fprintf(stderr, " (of %d; the rest after)\n", MAX_TOKENS);
    CHECK_MSG(handover > 0 && moved == N_STREAMS,
              "%s: %d of %d streams were mid-way at the handover (%.3f)", what, moved, N_STREAMS,
              handover);
    streams_check(s, reference, what);
    streams_free(s);
}

/* 1 if program is an executable file in a directory of PATH. */
static int on_path(const char *program) {
    const char *path = getenv("PATH");
    char dir[PATH_MAX + 64];
    for (const char *at = path ? path : ""; *at;) {
        size_t n = strcspn(at, ":");
        snprintf(dir, sizeof(dir), "%.*s/%s", (int)n, at, program);
        if (n && access(dir, X_OK) == 0) return 1;
        at += n + (at[n] == ':');
    }
    return 0;
}

int main(void) {
    const char *arm64 = getenv("LOCKSTEP_ARM64_BIN");
    char binary[PATH_MAX], x86[PATH_MAX], model[512], hostfile[512], text[PATH_MAX + 256];
    if (!arm64 || !*arm64) {
        printf("skip: LOCKSTEP_ARM64_BIN is not set (the arm64 lockstep binary; "
               "scripts/arm64.sh sets it)\n");
        return TEST_SKIP_CODE;
    }
    if (!realpath(arm64, binary) || access(binary, X_OK) != 0) {
        printf("skip: LOCKSTEP_ARM64_BIN=%s is not an executable file\n", arm64);
        return TEST_SKIP_CODE;
    }
    if (!realpath(LOCKSTEP_BIN, x86)) snprintf(x86, sizeof(x86), "%s", LOCKSTEP_BIN);
    if (!on_path("qemu-aarch64")) {
        printf("skip: qemu-aarch64 is not on PATH\n");
        return TEST_SKIP_CODE;
    }
    if (!test_require_file(test_shared_path(model, sizeof(model), "models/kjv2m-q8_0.gguf")))
        return TEST_SKIP_CODE;
    snprintf(text, sizeof(text),
             "# this machine: an x86-64 host, and an arm64 one whose binary runs under qemu\n"
             "localhost slots=2\n"
             "127.0.0.2 slots=2 lockstep=%s wrapper=qemu-aarch64\n",
             binary);
    if (!cluster_client_hostfile(hostfile, sizeof(hostfile), "arch-move-hosts", text)) return 1;
    signal(SIGALRM, on_alarm);
    alarm(TEST_DEADLINE);
    struct test_service server;
    char *const extra[] = {"--name",
                           "kjv",
                           "--cluster",
                           hostfile,
                           "--place",
                           "kjv=tp:2,hosts:localhost",
                           "--admin-key",
                           "admin-secret",
                           "--enable-faults",
                           "--probe-interval",
                           "1",
                           "-t",
                           "1",
                           NULL};
    int port = test_start_gateway(&server, model, extra, NULL, START_DEADLINE);
    gateway_group = server.pid;
    client.port = port;
    CHECK_MSG(port > 0, "the gateway did not start");
    if (port > 0) {
        struct stream reference[N_STREAMS], alone[N_STREAMS];
        CHECK_MSG(wait_probed(), "127.0.0.2 was not probed");
        test_hosts();
        /* the reference: x86 alone, never moved */
        streams_start(reference, port);
        streams_join(reference);
        for (int i = 0; i < N_STREAMS; i++)
            CHECK_MSG(reference[i].status == 200 && reference[i].done &&
                          atomic_load(&reference[i].tokens) == MAX_TOKENS,
                      "reference stream %d failed (%d, %d tokens)", i, reference[i].status,
                      atomic_load(&reference[i].tokens));
        for (int i = 0; i < N_STREAMS; i++) {
            /* a line per token, each with its logprob and its alternatives */
            int lines = 0, fields = 0;
            for (const char *c = reference[i].logprobs; c && *c; c++) {
                lines += *c == '\n';
                fields += *c == '\t';
            }
            CHECK_MSG(lines == MAX_TOKENS && fields >= 2 * MAX_TOKENS,
                      "reference stream %d: %d logprob lines, %d fields", i, lines, fields);
        }
        fprintf(stderr, "reference (greedy): %.60s...; its first token: %.*s\n", reference[0].text,
                (int)strcspn(reference[0].logprobs, "\n"), reference[0].logprobs);
        check_runner("localhost:2", x86, NULL);
        move_during_streams(reference, "{\"tp\":2,\"hosts\":[\"127.0.0.2\"]}", "127.0.0.2:2",
                            "x86 -> arm64");
        check_runner("127.0.0.2:2", "qemu-aarch64", binary);
        /* arm64 alone, never moved */
        streams_start(alone, port);
        streams_join(alone);
        streams_check(alone, reference, "arm64 alone");
        streams_free(alone);
        move_during_streams(reference, "{\"tp\":2,\"hosts\":[\"localhost\"]}", "localhost:2",
                            "arm64 -> x86");
        check_runner("localhost:2", x86, NULL);
        streams_free(reference);
    }
    int status = test_stop_service(&server, 20);
    gateway_group = 0;
    alarm(0);
    CHECK_MSG(port <= 0 || status == 0, "lockstep serve exited with %d", status);
    CHECK_MSG(test_reap_children(10) == 0, "processes were left running");
    return test_status("test_gateway_arch_move");
}
