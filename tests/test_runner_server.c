/* test_runner_server.c -- `lockstep runner` and `lockstep client` as
 * processes over a real unix socket.
 *
 * Usage: test_runner_server local | mpi MPIRUN. A runner is started on a
 * random model (local: tp 2 threads; mpi: mpirun -np 2 --comm mpi) with a
 * trace file. Then:
 *   - 12 requests with staggered arrivals all finish with their tokens, and
 *     the same requests sent all at once get the same tokens;
 *   - from the trace: no two steps overlap, and every request got its first
 *     prefill tokens in the first step that began after it arrived (one
 *     step in flight, DESIGN.md I1);
 *   - a malformed frame, an oversized frame and a bad ADD payload each get
 *     an ERROR frame and a closed connection while another connection's
 *     request runs to its end undisturbed;
 *   - SIGTERM stops the runner (status 0; mpirun's own status is 1) and it
 *     removes its socket.
 * ctest-labels: concurrency */
#include "runner/runner.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define N_REQUESTS 12
#define DEADLINE   120.0

static char model_path[512], socket_path[100], trace_path[512], requests_path[512];

/* Writes the request script; all at once when stagger is 0. */
static void write_requests(int stagger) {
    FILE *f = fopen(requests_path, "w");
    CHECK(f != NULL);
    if (!f) return;
    for (int i = 0; i < N_REQUESTS; i++) {
        fprintf(f, "{\"id\":%d,\"max_tokens\":%d,\"delay_ms\":%d,\"tokens\":[", i, 8 + (i * 7) % 24,
                stagger ? i * 25 : 0);
        int n = 4 + (i * 53) % 120;
        for (int t = 0; t < n; t++) fprintf(f, "%s%d", t ? "," : "", 1 + (i * 31 + t * 17) % 500);
        fprintf(f, "]}\n");
    }
    fclose(f);
}

/* Runs the client on the script; fills tokens[id] as a JSON array text. */
static void run_client(char outputs[N_REQUESTS][1024]) {
    char *argv[] = {LOCKSTEP_BIN,  "client",    "--socket", socket_path, "--requests",
                    requests_path, "--timeout", "60",       NULL};
    struct test_job job = test_run_job(argv, DEADLINE, NULL);
    CHECK_MSG(job.status == 0, "client exit %d: %s", job.status, job.err);
    int seen = 0;
    for (char *line = job.out; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        cJSON *j = cJSON_Parse(line);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
        const cJSON *finish = cJSON_GetObjectItemCaseSensitive(j, "finish");
        const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(j, "tokens");
        const cJSON *generated = cJSON_GetObjectItemCaseSensitive(j, "generated");
        if (cJSON_IsNumber(id) && id->valueint >= 0 && id->valueint < N_REQUESTS &&
            cJSON_IsArray(tokens)) {
            int i = id->valueint;
            char *text = cJSON_PrintUnformatted(tokens);
            snprintf(outputs[i], 1024, "%s", text);
            free(text);
            CHECK_MSG(cJSON_IsString(finish) && !strcmp(finish->valuestring, "length"),
                      "request %d did not finish by length", i);
            CHECK(cJSON_GetArraySize(tokens) == 8 + (i * 7) % 24);
            CHECK(cJSON_IsNumber(generated) && generated->valueint == cJSON_GetArraySize(tokens));
            seen++;
        }
        cJSON_Delete(j);
        line = end ? end + 1 : NULL;
    }
    CHECK_MSG(seen == N_REQUESTS, "%d of %d requests reported", seen, N_REQUESTS);
    test_job_free(&job);
}

/* Checks the trace: steps in order without overlap, first prefill in the
 * first step after the arrival. */
static void check_trace(void) {
    char *text = test_read_file(trace_path, NULL);
    uint64_t arrival[N_REQUESTS] = {0}, first_step[N_REQUESTS];
    uint64_t starts[20000], previous_end = 0;
    int n_steps = 0, arrivals = 0;
    for (int i = 0; i < N_REQUESTS; i++) first_step[i] = UINT64_MAX;
    CHECK(text != NULL);
    for (char *line = text; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        cJSON *j = cJSON_Parse(line);
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "type"));
        if (type && !strcmp(type, "arrival")) {
            int id = cJSON_GetObjectItemCaseSensitive(j, "id")->valueint;
            if (id >= 0 && id < N_REQUESTS) {
                arrival[id] = (uint64_t)cJSON_GetObjectItemCaseSensitive(j, "t_us")->valuedouble;
                arrivals++;
            }
        } else if (type && !strcmp(type, "step") && n_steps < 20000) {
            uint64_t step = (uint64_t)cJSON_GetObjectItemCaseSensitive(j, "step")->valuedouble;
            uint64_t start = (uint64_t)cJSON_GetObjectItemCaseSensitive(j, "start_us")->valuedouble;
            uint64_t stop = (uint64_t)cJSON_GetObjectItemCaseSensitive(j, "end_us")->valuedouble;
            CHECK_MSG(step == (uint64_t)n_steps, "step %llu out of order",
                      (unsigned long long)step);
            CHECK_MSG(start >= previous_end && stop >= start, "step %llu overlaps the one before",
                      (unsigned long long)step);
            previous_end = stop;
            starts[n_steps++] = start;
            const cJSON *s;
            cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(j, "sequences")) {
                int id = cJSON_GetObjectItemCaseSensitive(s, "id")->valueint;
                if (id >= 0 && id < N_REQUESTS && first_step[id] == UINT64_MAX)
                    first_step[id] = step;
            }
        }
        cJSON_Delete(j);
        line = end ? end + 1 : NULL;
    }
    CHECK_MSG(arrivals == N_REQUESTS, "%d arrivals in the trace", arrivals);
    for (int i = 0; i < N_REQUESTS; i++) {
        uint64_t expected = 0;
        while (expected < (uint64_t)n_steps && starts[expected] <= arrival[i]) expected++;
        CHECK_MSG(first_step[i] == expected,
                  "request %d arrived at %llu and first ran in step %llu, not step %llu", i,
                  (unsigned long long)arrival[i], (unsigned long long)first_step[i],
                  (unsigned long long)expected);
    }
    free(text);
}

static int connect_socket(void) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, socket_path, strlen(socket_path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    return fd;
}

/* Reads frames from fd until FINISHED (returns its tokens count), an ERROR
 * (its message into error, returns -1) or end of stream (-2). */
static int read_until_end(int fd, char *error, size_t size, int *n_tokens) {
    struct runner_buffer in = {0};
    char err[200];
    int result = -2;
    double start = test_now();
    *n_tokens = 0;
    while (result == -2 && test_now() - start < 60) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        uint8_t chunk[4096];
        ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
        if (n <= 0) break;
        runner_buffer_append(&in, chunk, (size_t)n);
        struct runner_frame f;
        size_t used = 0;
        while (result == -2 && runner_frame_next(in.data + used, in.length - used, RUNNER_FRAME_MAX,
                                                 &f, err, sizeof(err)) == 1) {
            used += f.frame_length;
            if (f.type == RUNNER_MSG_TOKEN) (*n_tokens)++;
            if (f.type == RUNNER_MSG_FINISHED) result = *n_tokens;
            if (f.type == RUNNER_MSG_ERROR) {
                runner_decode_error(&f, NULL, error, size, err, sizeof(err));
                result = -1;
            }
        }
        runner_buffer_consume(&in, used);
    }
    runner_buffer_free(&in);
    return result;
}

/* 1 if the peer closed fd (within a few seconds). */
static int closed_by_peer(int fd) {
    char byte;
    struct pollfd p = {fd, POLLIN, 0};
    for (int i = 0; i < 50; i++) {
        if (poll(&p, 1, 100) > 0) return recv(fd, &byte, 1, 0) == 0;
    }
    return 0;
}

/* One bad frame on its own connection: ERROR naming what is wrong, then
 * the runner closes it. */
static void send_bad(const uint8_t *bytes, size_t n, const char *expected) {
    char message[256] = "";
    int tokens;
    int fd = connect_socket();
    CHECK(send(fd, bytes, n, MSG_NOSIGNAL) == (ssize_t)n);
    CHECK_MSG(read_until_end(fd, message, sizeof(message), &tokens) == -1, "no ERROR for %s",
              expected);
    CHECK_MSG(strstr(message, expected) != NULL, "ERROR '%s' does not mention '%s'", message,
              expected);
    CHECK(closed_by_peer(fd));
    close(fd);
}

static void test_malformed_frames(void) {
    char err[200];
    struct runner_buffer good = {0};
    struct runner_request q = {.id = 77, .max_tokens = 120, .n_prompt = 3};
    int prompt[3] = {5, 6, 7}, tokens;
    runner_sampling_default(&q.sampling);
    q.sampling.temperature = 0;
    q.prompt = prompt;
    q.ignore_eos = 1;
    CHECK(runner_encode_add(&good, &q, err, sizeof(err)) == 0);
    int busy = connect_socket();
    CHECK(send(busy, good.data, good.length, MSG_NOSIGNAL) == (ssize_t)good.length);

    const uint8_t bad_version[8] = {0, 0, 0, 0, 9, RUNNER_MSG_CANCEL, 0, 0};
    const uint8_t oversized[8] = {0xff,           0xff, 0xff, 0x7f, RUNNER_PROTOCOL_VERSION,
                                  RUNNER_MSG_ADD, 0,    0};
    uint8_t short_add[16] = {8, 0, 0, 0, RUNNER_PROTOCOL_VERSION, RUNNER_MSG_ADD, 0, 0};
    send_bad(bad_version, sizeof(bad_version), "version");
    send_bad(oversized, sizeof(oversized), "payload");
    send_bad(short_add, sizeof(short_add), "ADD");

    char message[256] = "";
    int got = read_until_end(busy, message, sizeof(message), &tokens);
    CHECK_MSG(got == 120, "the other connection got %d tokens (%s)", got, message);
    close(busy);
    runner_buffer_free(&good);
}

int main(int argc, char **argv) {
    int mpi = argc > 2 && !strcmp(argv[1], "mpi");
    char *model_options[] = {"--dim",   "128", "--hidden",   "256",  "--layers", "4",
                             "--heads", "4",   "--kv-heads", "2",    "--vocab",  "512",
                             "--ctx",   "512", "--type",     "q8_0", NULL};
    if (mpi && access(argv[2], X_OK) != 0) {
        printf("skip: %s not found\n", argv[2]);
        return TEST_SKIP_CODE;
    }
    test_tmp_path(model_path, sizeof(model_path), "server-model.gguf");
    /* a socket path must be short (108 bytes): not under the build tree */
    snprintf(socket_path, sizeof(socket_path), "/tmp/lockstep-test-%d.sock", (int)getpid());
    test_tmp_path(trace_path, sizeof(trace_path), "server-trace.jsonl");
    test_tmp_path(requests_path, sizeof(requests_path), "requests.jsonl");
    if (!test_write_random_model(model_path, model_options)) return test_status(argv[0]);

    char *local_argv[] = {LOCKSTEP_BIN,
                          "runner",
                          "-m",
                          model_path,
                          "--socket",
                          socket_path,
                          "--trace",
                          trace_path,
                          "--tp",
                          "2",
                          "-t",
                          "1",
                          "--kv-memory",
                          "64M",
                          "--step-tokens",
                          "64",
                          "--max-sequences",
                          "16",
                          NULL};
    char *mpi_argv[40], np_text[16];
    int n = test_mpirun_args(mpi_argv, mpi ? argv[2] : "", 2, np_text, sizeof(np_text));
    const char *tail[] = {LOCKSTEP_BIN,
                          "runner",
                          "-m",
                          model_path,
                          "--socket",
                          socket_path,
                          "--trace",
                          trace_path,
                          "--comm",
                          "mpi",
                          "-t",
                          "1",
                          "--kv-memory",
                          "64M",
                          "--step-tokens",
                          "64",
                          "--max-sequences",
                          "16",
                          NULL};
    for (int i = 0; tail[i]; i++) mpi_argv[n++] = (char *)tail[i];
    mpi_argv[n] = NULL;

    struct test_service runner;
    CHECK(test_start_service(&runner, mpi ? mpi_argv : local_argv, mpi ? test_mpi_env : NULL));
    if (test_wait_for_output(&runner, "ready on", DEADLINE)) {
        static char staggered[N_REQUESTS][1024], together[N_REQUESTS][1024];
        write_requests(1);
        run_client(staggered);
        check_trace();
        write_requests(0);
        run_client(together);
        for (int i = 0; i < N_REQUESTS; i++)
            CHECK_MSG(!strcmp(staggered[i], together[i]), "request %d: %s vs %s", i, staggered[i],
                      together[i]);
        test_malformed_frames();
    }
    int status = test_stop_service(&runner, 20.0);
    /* mpirun itself exits 1 after a SIGTERM even when every rank exited 0;
     * the socket file being gone shows the leader stopped cleanly */
    CHECK_MSG(status == 0 || (mpi && status == 1), "runner exit status %d", status);
    CHECK_MSG(access(socket_path, F_OK) != 0, "the socket file is still there");
    /* mpirun may exit before its ranks finish leaving */
    CHECK_MSG(test_reap_children(20.0) == 0, "processes left running after the stop");
    CHECK(test_kill_children() == 0);
    return test_status(mpi ? "test_runner_server mpi" : "test_runner_server local");
}
