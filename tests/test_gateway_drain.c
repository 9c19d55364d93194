/* test_gateway_drain.c -- `lockstep serve` drains on SIGTERM (issue 26):
 * no stream in flight is ever cut without a word.
 *
 * On a small random model whose steps the "delay" fault slows down:
 *   - drain: a stream in flight at SIGTERM completes with all its tokens,
 *     its finish_reason and [DONE]; meanwhile /health is 503 "draining" and
 *     a new completion gets 503 with Retry-After; the gateway exits 0 well
 *     within its drain timeout, and its runner, stopped with SIGTERM,
 *     exits 0 too;
 *   - timeout: with --drain-timeout 1, a stream that cannot finish in time
 *     gets an error event naming the shutdown, then [DONE], and the gateway
 *     exits 0 soon after the deadline;
 *   - second signal: a SIGINT during the drain stops the gateway at once
 *     (exit 0), its stream ending with the error event and [DONE];
 *   - a runner alone (`lockstep runner`) exits 0 on SIGTERM;
 *   - nothing is left running.
 *
 * ctest-labels: concurrency */
#include "testutil.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE 120.0
#define MODEL    "\"model\":\"rand\""

static char model_path[512];

/* A streaming answer being read: its socket and the bytes so far. */
struct stream {
    int fd;
    char *data;
    size_t length;
    int closed; /* 1: the server closed the connection */
};

/* Reads until data holds text: 1, or 0 when the server closed first or
 * the deadline (seconds) passed. */
static int read_until(struct stream *s, const char *text, double deadline) {
    double start = test_now();
    while (!(s->data && strstr(s->data, text))) {
        if (s->closed || s->fd < 0 || test_now() - start > deadline) return 0;
        struct pollfd p = {s->fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        char chunk[4096];
        ssize_t n = recv(s->fd, chunk, sizeof(chunk), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            s->closed = 1;
            continue;
        }
        char *grown = realloc(s->data, s->length + (size_t)n + 1);
        if (!grown) return 0;
        s->data = grown;
        memcpy(s->data + s->length, chunk, (size_t)n);
        s->length += (size_t)n;
        s->data[s->length] = '\0';
    }
    return 1;
}

static void stream_free(struct stream *s) {
    if (s->fd >= 0) close(s->fd);
    free(s->data);
    *s = (struct stream){.fd = -1};
}

/* Opens a greedy stream of max_tokens tokens (no early end of text, usage
 * at the end) and waits for its first token's chunk; 1 if it came. */
static int open_stream(int port, int max_tokens, struct stream *s) {
    char body[512];
    snprintf(body, sizeof(body),
             "{" MODEL ",\"prompt\":\"hello world\",\"max_tokens\":%d,\"temperature\":0,"
             "\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
             max_tokens);
    *s = (struct stream){.fd = test_http_send(port, "POST", "/v1/completions", NULL, body)};
    return s->fd >= 0 && read_until(s, "\"choices\":[{", 30);
}

/* Slows every step of the runner down by 0..delay_ms. */
static int slow_down(int port, int delay_ms) {
    char body[160];
    snprintf(body, sizeof(body),
             "{" MODEL ",\"kind\":\"delay\",\"rank\":0,\"delay_ms\":%d,\"steps\":100000}",
             delay_ms);
    struct test_http h = test_http_request(port, "POST", "/debug/fault", NULL, body, 10);
    int ok = h.status == 200;
    test_http_free(&h);
    return ok;
}

/* Waits up to deadline seconds for the gateway to exit: the seconds it
 * took, or -1 (it still runs). */
static double wait_exit(struct test_service *s, double deadline) {
    double start = test_now();
    while (test_service_running(s)) {
        if (test_now() - start > deadline) return -1;
        struct timespec nap = {0, 5000000};
        nanosleep(&nap, NULL);
    }
    return test_now() - start;
}

/* Waits until /health says the gateway drains (503 "draining"): 1, or 0. */
static int wait_draining(int port) {
    for (double start = test_now(); test_now() - start < 10;) {
        struct test_http h = test_http_request(port, "GET", "/health", NULL, NULL, 5);
        int draining = h.status == 503 && h.body && strstr(h.body, "\"status\":\"draining\"") &&
                       h.headers && strstr(h.headers, "Retry-After: 1");
        test_http_free(&h);
        if (draining) return 1;
        struct timespec nap = {0, 10000000};
        nanosleep(&nap, NULL);
    }
    return 0;
}

/* The gateway's runner pid, from /health; 0 if there is none. */
static int runner_pid(int port) {
    struct test_http h = test_http_request(port, "GET", "/health", NULL, NULL, 5);
    const char *at = h.body ? strstr(h.body, "\"runner_pid\":") : NULL;
    int pid = at ? atoi(at + 13) : 0;
    test_http_free(&h);
    return pid;
}

/* Its stderr once it exited (malloc'd), its output files removed. */
static char *take_log(struct test_service *s) {
    char *err = test_read_file(s->err_path, NULL);
    if (test_failures > 0) printf("--- gateway stderr:\n%s\n", err ? err : "");
    remove(s->out_path);
    remove(s->err_path);
    return err;
}

/* Checks that the runner the gateway stopped exited 0 and is gone. */
static void check_runner_stopped(const char *log, int pid) {
    char line[96];
    snprintf(line, sizeof(line), "runner %d stopped (exit status 0)", pid);
    CHECK_MSG(log && strstr(log, line), "the gateway's log lacks \"%s\"", line);
    CHECK_MSG(pid > 0 && kill(pid, 0) != 0 && errno == ESRCH, "runner %d is still there", pid);
}

static int start_gateway(struct test_service *s, const char *drain_timeout) {
    char *extra[] = {"--name", "rand", "--enable-faults", "--drain-timeout", (char *)drain_timeout,
                     NULL};
    int port = test_start_gateway(s, model_path, extra, NULL, DEADLINE);
    CHECK_MSG(port > 0, "the gateway did not start");
    return port;
}

/* ---------- the drain ---------- */

static void test_drain(void) {
    struct test_service gateway;
    struct stream s;
    int port = start_gateway(&gateway, "30");
    if (!port) return;
    int pid = runner_pid(port);
    CHECK(slow_down(port, 80)); /* 60 steps of 40 ms on average: 2.4 s */
    CHECK_MSG(open_stream(port, 60, &s), "no first token");
    kill(gateway.pid, SIGTERM);
    CHECK_MSG(wait_draining(port), "/health does not say draining with 503 and Retry-After");
    struct test_http late =
        test_http_request(port, "POST", "/v1/completions", NULL,
                          "{" MODEL ",\"prompt\":\"hi\",\"max_tokens\":2,\"stream\":true}", 10);
    CHECK_MSG(late.status == 503, "a request during the drain got %d", late.status);
    CHECK(late.headers && strstr(late.headers, "Retry-After: 1"));
    CHECK(late.body && strstr(late.body, "shutting down"));
    test_http_free(&late);
    CHECK_MSG(test_service_running(&gateway), "the gateway left before its stream ended");
    CHECK_MSG(read_until(&s, "data: [DONE]", 30), "the stream did not end with [DONE]");
    CHECK_MSG(s.data && strstr(s.data, "\"finish_reason\":\"length\""), "no finish_reason");
    CHECK_MSG(s.data && strstr(s.data, "\"completion_tokens\":60"), "not all 60 tokens came");
    CHECK_MSG(s.data && !strstr(s.data, "\"error\""), "the stream has an error");
    double took = wait_exit(&gateway, 20);
    CHECK_MSG(took >= 0 && gateway.status == 0, "exit status %d after %.2f s", gateway.status,
              took);
    char *log = take_log(&gateway);
    check_runner_stopped(log, pid);
    CHECK(log && strstr(log, "drained: every request ended"));
    free(log);
    stream_free(&s);
}

/* ---------- the drain timeout ---------- */

static void test_timeout(void) {
    struct test_service gateway;
    struct stream s;
    int port = start_gateway(&gateway, "1");
    if (!port) return;
    int pid = runner_pid(port);
    CHECK(slow_down(port, 300)); /* 200 steps of 150 ms on average: 30 s */
    CHECK_MSG(open_stream(port, 200, &s), "no first token");
    double signalled = test_now();
    kill(gateway.pid, SIGTERM);
    CHECK_MSG(read_until(&s, "data: [DONE]", 15), "the stream did not end with [DONE]");
    const char *error = s.data ? strstr(s.data, "data: {\"error\"") : NULL;
    const char *done = s.data ? strstr(s.data, "data: [DONE]") : NULL;
    CHECK_MSG(error && done && error < done, "no error event before [DONE]: %s",
              s.data ? s.data : "");
    CHECK(error && strstr(error, "shutting down") && strstr(error, "drain timeout (1 s)"));
    CHECK(s.data && !strstr(s.data, "\"finish_reason\":\"length\""));
    double took = wait_exit(&gateway, 15);
    double since = test_now() - signalled;
    CHECK_MSG(took >= 0 && gateway.status == 0, "exit status %d", gateway.status);
    /* the deadline, a flush of at most 1 s, the runner's step (< 0.3 s) */
    CHECK_MSG(since >= 1.0 && since < 5.0, "exited %.2f s after SIGTERM", since);
    char *log = take_log(&gateway);
    check_runner_stopped(log, pid);
    free(log);
    stream_free(&s);
}

/* ---------- a second signal ---------- */

static void test_second_signal(void) {
    struct test_service gateway;
    struct stream s;
    int port = start_gateway(&gateway, "30");
    if (!port) return;
    int pid = runner_pid(port);
    CHECK(slow_down(port, 300));
    CHECK_MSG(open_stream(port, 200, &s), "no first token");
    kill(gateway.pid, SIGTERM);
    CHECK_MSG(wait_draining(port), "/health does not say draining");
    double signalled = test_now();
    kill(gateway.pid, SIGINT);
    double took = wait_exit(&gateway, 15);
    CHECK_MSG(took >= 0 && gateway.status == 0, "exit status %d", gateway.status);
    CHECK_MSG(test_now() - signalled < 3.0, "exited %.2f s after the second signal",
              test_now() - signalled);
    CHECK_MSG(read_until(&s, "data: [DONE]", 5), "the stream did not end with [DONE]");
    CHECK(s.data && strstr(s.data, "data: {\"error\"") && strstr(s.data, "shutting down"));
    char *log = take_log(&gateway);
    check_runner_stopped(log, pid);
    free(log);
    stream_free(&s);
}

/* ---------- a runner alone ---------- */

static void test_runner_alone(void) {
    struct test_service runner;
    char socket_path[512];
    test_tmp_path(socket_path, sizeof(socket_path), "drain_runner.sock");
    char *argv[] = {LOCKSTEP_BIN, "runner", "-m", model_path, "--socket", socket_path, NULL};
    CHECK(test_start_service(&runner, argv, NULL));
    CHECK_MSG(test_wait_for_output(&runner, "ready on", DEADLINE), "the runner did not start");
    CHECK_MSG(test_stop_service(&runner, 10) == 0, "the runner's exit status %d after SIGTERM",
              runner.status);
}

int main(void) {
    test_tmp_path(model_path, sizeof(model_path), "drain_model.gguf");
    char *const options[] = {
        "--dim",   "64",  "--hidden", "128", "--layers", "2",   "--heads", "4", "--kv-heads", "2",
        "--vocab", "300", "--ctx",    "512", "--type",   "f32", "--seed",  "5", NULL};
    if (!test_write_random_model(model_path, options)) return test_status("test_gateway_drain");
    test_drain();
    test_timeout();
    test_second_signal();
    test_runner_alone();
    CHECK_MSG(test_reap_children(5) == 0, "processes are left running");
    test_kill_children();
    remove(model_path);
    return test_status("test_gateway_drain");
}
