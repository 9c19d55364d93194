/* test_watchdog.c -- every injected fault costs a delay, never a request.
 *
 * `lockstep serve --enable-faults --watchdog 1` on kjv2m-q8_0 with two
 * ranks (threads of one runner). For each fault -- kill, stop (SIGSTOP),
 * stall in a collective, delay collectives, close the runner's socket,
 * refuse two starts then kill -- a seeded stream that is running when the
 * fault strikes completes with exactly the text of an undisturbed run. The
 * stuck faults (stop, stall) are detected within the deadline and the
 * report in GET /debug/stuck names the ranks' collective states; a delay
 * is slow, not stuck, and restarts nothing. A stream that waits for its
 * runner gets keep-alive comments. A runner that cannot start fails its
 * requests with the reason after 5 tries, and comes back later. When the
 * gateway stops, no
 * process is left behind. Skipped without ../shared.
 * ctest-labels: concurrency */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#define DEADLINE 120.0

static int port;
static int keep_alives;  /* ": keep-alive" comments seen by the last stream */
static char *last_error; /* the error event of the last stream, if any (malloc'd) */

/* One streamed completion's concatenated text, or NULL if it failed: 120
 * tokens whatever they are (ignore_eos), so the stream is still running
 * when a fault is injected. */
static char *stream_once(void) {
    const char *body = "{\"model\":\"kjv2m-q8_0\",\"prompt\":\"And the LORD spake\","
                       "\"max_tokens\":120,\"ignore_eos\":true,\"temperature\":0.8,\"seed\":11,"
                       "\"stream\":true}";
    struct test_http h = test_http_request(port, "POST", "/v1/completions", NULL, body, DEADLINE);
    size_t n = 0;
    char *text = calloc(1, h.body ? h.length + 1 : 1);
    int done = 0;
    keep_alives = 0;
    free(last_error);
    last_error = NULL;
    for (char *line = h.status == 200 ? h.body : NULL; line && *line;) {
        char *end = strstr(line, "\n\n");
        if (!end) break;
        *end = '\0';
        if (!strcmp(line, "data: [DONE]")) done = 1;
        keep_alives += !strcmp(line, ": keep-alive");
        cJSON *j = strncmp(line, "data: {", 7) ? NULL : cJSON_Parse(line + 6);
        const cJSON *piece =
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text");
        if (cJSON_IsString(piece)) {
            memcpy(text + n, piece->valuestring, strlen(piece->valuestring));
            n += strlen(piece->valuestring);
        }
        if (j && cJSON_GetObjectItem(j, "error")) {
            free(last_error);
            last_error = strdup(line);
        }
        cJSON_Delete(j);
        line = end + 2;
    }
    CHECK_MSG(h.status == 200 && done, "status %d, [DONE] %d", h.status, done);
    test_http_free(&h);
    return text;
}

static void *stream_thread(void *out) {
    *(char **)out = stream_once();
    return NULL;
}

/* A number from GET /health's first model ("restarts", "stuck_detections"). */
static int health_number(const char *field) {
    struct test_http h = test_http_request(port, "GET", "/health", NULL, NULL, 10);
    cJSON *j = cJSON_Parse(h.body ? h.body : "");
    const cJSON *v =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "models"), 0), field);
    int value = cJSON_IsNumber(v) ? v->valueint : -1;
    cJSON_Delete(j);
    test_http_free(&h);
    return value;
}

/* Waits until the runner holds a running sequence (the stream is under way). */
static int wait_running(void) {
    for (double start = test_now(); test_now() - start < 30;) {
        struct test_http h = test_http_request(port, "GET", "/metrics", NULL, NULL, 10);
        const char *at =
            h.body
                ? strstr(
                      h.body,
                      "lockstep_running_sequences{model=\"kjv2m-q8_0\",instance=\"kjv2m-q8_0-1\"} ")
                : NULL;
        int running = at && atoi(strchr(at, '}') + 2) > 0;
        test_http_free(&h);
        if (running) return 1;
    }
    return 0;
}

/* Slows the runner's next 200 steps (a sleep of up to 2 ms before each
 * collective of rank 1, about 1.5 s for a stream) so that the stream
 * started next is still running when the test acts on it: at full speed it
 * takes 6-10 ms, which a loaded machine can let pass unseen. The tokens do
 * not depend on the pace. */
static void pace_next_stream(void) {
    struct test_http h = test_http_request(
        port, "POST", "/debug/fault", NULL,
        "{\"model\":\"kjv2m-q8_0\",\"kind\":\"delay\",\"rank\":1,\"delay_ms\":2,\"steps\":200}",
        10);
    CHECK_MSG(h.status == 200, "pace: status %d: %s", h.status, h.body);
    test_http_free(&h);
}

/* Injects fault while a stream runs; the stream must give reference. */
static void run_with_fault(const char *fault, const char *reference) {
    pthread_t thread;
    char *text = NULL, body[256];
    pace_next_stream();
    pthread_create(&thread, NULL, stream_thread, &text);
    CHECK_MSG(wait_running(), "%s: the stream never ran", fault);
    snprintf(body, sizeof(body), "{\"model\":\"kjv2m-q8_0\",%s}", fault);
    struct test_http h = test_http_request(port, "POST", "/debug/fault", NULL, body, 10);
    CHECK_MSG(h.status == 200, "fault %s: status %d: %s", fault, h.status, h.body);
    test_http_free(&h);
    pthread_join(thread, NULL);
    CHECK_MSG(text && !strcmp(text, reference) && !last_error,
              "after %s:\n'%s'\nundisturbed:\n'%s'\nerror: %s", fault, text, reference,
              last_error ? last_error : "none");
    free(text);
}

/* The newest stuck report: detected within its deadline, every rank named. */
static void check_stuck_report(const char *fault) {
    struct test_http h = test_http_request(port, "GET", "/debug/stuck", NULL, NULL, 10);
    cJSON *j = cJSON_Parse(h.body ? h.body : "");
    const cJSON *reports = cJSON_GetObjectItem(j, "reports");
    const cJSON *last = cJSON_GetArrayItem(reports, cJSON_GetArraySize(reports) - 1);
    double quiet = cJSON_GetNumberValue(cJSON_GetObjectItem(last, "no_progress_seconds"));
    double deadline = cJSON_GetNumberValue(cJSON_GetObjectItem(last, "deadline_seconds"));
    const cJSON *ranks = cJSON_GetObjectItem(last, "ranks");
    CHECK_MSG(last && quiet > deadline && quiet < deadline + 0.5,
              "%s: detected after %.3f s, deadline %.3f s", fault, quiet, deadline);
    CHECK_MSG(cJSON_GetArraySize(ranks) == 2, "%s: the report names %d ranks", fault,
              cJSON_GetArraySize(ranks));
    const cJSON *rank0 = cJSON_GetArrayItem(ranks, 0);
    CHECK_MSG(cJSON_IsString(cJSON_GetObjectItem(rank0, "state")) &&
                  cJSON_GetObjectItem(rank0, "pid")->valueint > 0,
              "%s: rank 0 has no state: %s", fault, h.body);
    cJSON_Delete(j);
    test_http_free(&h);
}

/* A model whose runner cannot start: after 5 failed starts its request
 * fails with a 503 naming the cause (not a wait forever), /health says why,
 * and the 7th start brings the model back. */
static void test_give_up(void) {
    pthread_t thread;
    char *text = NULL;
    struct test_http h =
        test_http_request(port, "POST", "/debug/fault", NULL,
                          "{\"model\":\"kjv2m-q8_0\",\"kind\":\"refuse\",\"count\":6}", 10);
    CHECK(h.status == 200);
    test_http_free(&h);
    pace_next_stream();
    pthread_create(&thread, NULL, stream_thread, &text);
    CHECK(wait_running());
    h = test_http_request(port, "POST", "/debug/fault", NULL,
                          "{\"model\":\"kjv2m-q8_0\",\"kind\":\"kill\"}", 10);
    test_http_free(&h);
    pthread_join(thread, NULL);
    CHECK_MSG(last_error && strstr(last_error, "unavailable") &&
                  strstr(last_error, "exit status 1"),
              "the stream's error: %s", last_error ? last_error : "(none)");
    h = test_http_request(port, "GET", "/health", NULL, NULL, 10);
    CHECK_MSG(h.status == 503 && strstr(h.body, "failed before its first step"), "health: %s",
              h.body);
    test_http_free(&h);
    int back = 0;
    for (double start = test_now(); !back && test_now() - start < 60;) {
        h = test_http_request(port, "GET", "/health", NULL, NULL, 10);
        back = h.status == 200;
        test_http_free(&h);
    }
    CHECK_MSG(back, "the model did not come back after the refused starts");
    free(text);
}

int main(void) {
    char model[512];
    if (!test_require_file(test_shared_path(model, sizeof(model), "models/kjv2m-q8_0.gguf")))
        return TEST_SKIP_CODE;
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* what the gateway leaves behind comes to us */
    char *argv[] = {LOCKSTEP_BIN,
                    "serve",
                    "-m",
                    model,
                    "--tp",
                    "2",
                    "-t",
                    "2",
                    "--port",
                    "0",
                    "--watchdog",
                    "1",
                    "--enable-faults",
                    "--keep-alive",
                    "0.2",
                    NULL};
    struct test_service gateway;
    CHECK(test_start_service(&gateway, argv, NULL));
    if (test_wait_for_output(&gateway, "listening on", DEADLINE)) {
        char *out = test_read_file(gateway.out_path, NULL);
        port = atoi(strstr(out, "127.0.0.1:") + 10);
        free(out);
        char *reference = stream_once();
        run_with_fault("\"kind\":\"kill\"", reference);
        CHECK(health_number("restarts") == 1);
        run_with_fault("\"kind\":\"stop\"", reference);
        check_stuck_report("stop");
        /* a stream waiting a second for its runner gets keep-alive comments */
        CHECK_MSG(keep_alives >= 2, "%d keep-alive comments during a 1 s stall", keep_alives);
        run_with_fault("\"kind\":\"stall\",\"rank\":1", reference);
        check_stuck_report("stall");
        CHECK(health_number("stuck_detections") == 2 && health_number("restarts") == 3);
        run_with_fault("\"kind\":\"delay\",\"rank\":1,\"delay_ms\":5,\"steps\":30", reference);
        CHECK_MSG(health_number("restarts") == 3, "a delay restarted the runner");
        run_with_fault("\"kind\":\"close\"", reference);
        CHECK(health_number("restarts") == 4);
        struct test_http h = test_http_request(port, "POST", "/debug/fault", NULL,
                                               "{\"model\":\"kjv2m-q8_0\",\"kind\":\"refuse\","
                                               "\"count\":2}",
                                               10);
        CHECK(h.status == 200);
        test_http_free(&h);
        run_with_fault("\"kind\":\"kill\"", reference);
        CHECK_MSG(health_number("restarts") == 7, "restarts %d after 2 refused starts",
                  health_number("restarts"));
        test_give_up();
        free(reference);
    }
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
    CHECK_MSG(test_reap_children(10) == 0, "processes left behind");
    free(last_error);
    CHECK(test_kill_children() == 0);
    return test_status("test_watchdog");
}
