/* test_runner_auth.c -- runner links that prove the cluster key.
 *
 *   - HMAC-SHA256 gives RFC 4231's test vectors, and the exchange of
 *     auth.c holds: a right answer is accepted and the runner's reply
 *     confirms; another key, a changed byte of a proof, or a reply to
 *     another challenge is refused;
 *   - a runner serving TCP with --cluster-key-file: a connection that
 *     sends a request before proving the key, one whose proof is wrong and
 *     one that stays silent are each closed with an ERROR frame (the
 *     silent one after RUNNER_AUTH_SECONDS) and a log line naming the peer
 *     and the reason, while `lockstep client` with the key gets exactly the
 *     tokens it got before the intruders came; a client without the key is
 *     refused, and a raw client that proves the key gets the runner's proof;
 *   - `lockstep serve --cluster-key-file` starts its runners with the key
 *     file's path (never the key) and answers a completion; a key file
 *     others may read is refused at start.
 * ctest-labels: concurrency */
#include "runner/runner.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE 120.0
#define KEY      "7b1f0c9e2d4a6b8c0e1f3a5b7c9d1e2f"

static char model_path[512], key_path[512], address[64];
static char err[512];

/* ---------- the exchange ---------- */

static void check_mac(const char *key, size_t key_length, const char *data, const char *hex) {
    uint8_t mac[RUNNER_AUTH_BYTES];
    char text[2 * RUNNER_AUTH_BYTES + 1];
    CHECK(runner_auth_hmac(key, key_length, data, strlen(data), mac) == 0);
    for (int i = 0; i < RUNNER_AUTH_BYTES; i++) snprintf(text + 2 * i, 3, "%02x", mac[i]);
    CHECK_MSG(!strcmp(text, hex), "HMAC-SHA256 of '%s': %s, expected %s", data, text, hex);
}

static void test_exchange(void) {
    /* RFC 4231, test cases 1 and 2 */
    char key1[20];
    memset(key1, 0x0b, sizeof(key1));
    check_mac(key1, sizeof(key1), "Hi There",
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    check_mac("Jefe", 4, "what do ya want for nothing?",
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");

    uint8_t challenge[RUNNER_AUTH_BYTES], other[RUNNER_AUTH_BYTES];
    struct runner_auth answer, reply, wrong;
    CHECK(runner_auth_random(challenge, err, sizeof(err)) == 0);
    CHECK(runner_auth_random(other, err, sizeof(err)) == 0);
    CHECK(memcmp(challenge, other, sizeof(other)) != 0);
    CHECK(runner_auth_answer(KEY, challenge, &answer, err, sizeof(err)) == 0);
    CHECK(runner_auth_accept(KEY, challenge, &answer, &reply) == 1);
    CHECK(runner_auth_confirm(KEY, challenge, &answer, &reply) == 1);
    /* another key, another challenge, a changed byte: refused either way */
    CHECK(runner_auth_accept("another key", challenge, &answer, &wrong) == 0);
    CHECK(runner_auth_accept(KEY, other, &answer, &wrong) == 0);
    wrong = answer;
    wrong.mac[RUNNER_AUTH_BYTES - 1] ^= 1;
    CHECK(runner_auth_accept(KEY, challenge, &wrong, &reply) == 0);
    CHECK(runner_auth_accept(KEY, challenge, &answer, &reply) == 1);
    CHECK(runner_auth_confirm("another key", challenge, &answer, &reply) == 0);
    CHECK(runner_auth_confirm(KEY, other, &answer, &reply) == 0);
    wrong = reply;
    wrong.mac[0] ^= 0x80;
    CHECK(runner_auth_confirm(KEY, challenge, &answer, &wrong) == 0);
    /* a client's proof is not a runner's: the labels differ */
    CHECK(runner_auth_confirm(KEY, challenge, &answer, &answer) == 0);
}

/* ---------- a runner on TCP ---------- */

/* A port the OS picked and let go of. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof(a);
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &length) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

static int connect_runner(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) return fd;
    if (fd >= 0) close(fd);
    return -1;
}

/* Reads frames until the peer closes (or the deadline): the types seen in
 * *types (bit per type), the HELLO in *hello and an AUTH in *auth. 1 if
 * the connection was closed by the runner. */
static int read_until_closed(int fd, double deadline, unsigned *types, struct runner_hello *hello,
                             struct runner_auth *auth, int stop_at_auth) {
    struct runner_buffer in = {0};
    double start = test_now();
    int closed = 0;
    *types = 0;
    while (!closed && test_now() - start < deadline) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        uint8_t chunk[4096];
        ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
        if (n <= 0) {
            closed = 1;
            break;
        }
        runner_buffer_append(&in, chunk, (size_t)n);
        struct runner_frame f;
        size_t used = 0;
        while (runner_frame_next(in.data + used, in.length - used, RUNNER_FRAME_MAX, &f, err,
                                 sizeof(err)) == 1) {
            used += f.frame_length;
            *types |= 1u << f.type;
            if (f.type == RUNNER_MSG_HELLO && hello)
                runner_decode_hello(&f, hello, err, sizeof(err));
            if (f.type == RUNNER_MSG_AUTH && auth) runner_decode_auth(&f, auth, err, sizeof(err));
        }
        runner_buffer_consume(&in, used);
        if (stop_at_auth && (*types & (1u << RUNNER_MSG_AUTH))) break;
    }
    runner_buffer_free(&in);
    return closed;
}

/* Reads the HELLO a new connection is told; 1 if it came with a challenge. */
static int read_hello(int fd, struct runner_hello *hello) {
    struct runner_buffer in = {0};
    struct runner_frame f;
    int found = 0;
    for (double start = test_now(); !found && test_now() - start < 10;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        uint8_t chunk[4096];
        ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
        if (n <= 0) break;
        runner_buffer_append(&in, chunk, (size_t)n);
        found =
            runner_frame_next(in.data, in.length, RUNNER_FRAME_MAX, &f, err, sizeof(err)) == 1 &&
            f.type == RUNNER_MSG_HELLO && runner_decode_hello(&f, hello, err, sizeof(err)) == 0;
    }
    runner_buffer_free(&in);
    return found && hello->has_challenge;
}

static void send_buffer(int fd, struct runner_buffer *b) {
    ssize_t n = send(fd, b->data, b->length, MSG_NOSIGNAL);
    CHECK(n == (ssize_t)b->length);
    b->length = 0;
}

/* `lockstep client` for 12 greedy tokens, with the key or without; its
 * exit status and its tokens' JSON array, or its error (free() it). */
static int run_client(int with_key, char **out) {
    char *with[] = {
        LOCKSTEP_BIN, "client", "--socket", address,     "--tokens", "1,5,9,13,200",       "-n",
        "12",         "--temp", "0",        "--timeout", "30",       "--cluster-key-file", key_path,
        NULL};
    if (!with_key) with[12] = NULL;
    struct test_job job = test_run_job(with, DEADLINE, NULL);
    const char *tokens = job.status == 0 ? strstr(job.out, "\"tokens\":") : NULL;
    *out = tokens ? strndup(tokens, strcspn(tokens, "]") + 1) : strdup(job.err);
    int status = job.status;
    test_job_free(&job);
    return status;
}

/* Waits until the runner's log holds text; 1 if it came. */
static int wait_log(struct test_service *runner, const char *text, double deadline) {
    for (double start = test_now(); test_now() - start < deadline;) {
        char *log = test_read_file(runner->err_path, NULL);
        int found = log && strstr(log, text);
        free(log);
        if (found) return 1;
        struct timespec nap = {0, 50000000};
        nanosleep(&nap, NULL);
    }
    return 0;
}

static void test_intruders(void) {
    int port = free_port();
    snprintf(address, sizeof(address), "tcp:127.0.0.1:%d", port);
    char *argv[] = {LOCKSTEP_BIN, "runner", "-m", model_path,           "--socket", address, "--tp",
                    "1",          "-t",     "1",  "--cluster-key-file", key_path,   NULL};
    struct test_service runner;
    CHECK(test_start_service(&runner, argv, NULL));
    CHECK_MSG(test_wait_for_output(&runner, "ready on", DEADLINE), "the runner did not start");
    char *reference = NULL, *again = NULL, *refused = NULL;
    CHECK_MSG(run_client(1, &reference) == 0, "client with the key: %s", reference);

    /* a request before the proof */
    struct runner_hello hello;
    struct runner_buffer out = {0};
    unsigned types;
    int early = connect_runner(port);
    CHECK(early >= 0 && read_hello(early, &hello));
    int prompt[2] = {1, 2};
    struct runner_request q = {.id = 1, .max_tokens = 4, .n_prompt = 2, .prompt = prompt};
    runner_sampling_default(&q.sampling);
    CHECK(runner_encode_add(&out, &q, err, sizeof(err)) == 0);
    send_buffer(early, &out);
    CHECK_MSG(read_until_closed(early, 10, &types, NULL, NULL, 0) &&
                  (types & (1u << RUNNER_MSG_ERROR)) && !(types & (1u << RUNNER_MSG_TOKEN)),
              "a request before the proof was not refused (frames 0x%x)", types);
    close(early);
    CHECK(wait_log(&runner, "before proving the cluster key", 10));

    /* a wrong proof, and a silent connection, while the client streams */
    int wrong = connect_runner(port), silent = connect_runner(port);
    CHECK(wrong >= 0 && read_hello(wrong, &hello));
    struct runner_auth answer;
    CHECK(runner_auth_answer("not the key", hello.challenge, &answer, err, sizeof(err)) == 0);
    CHECK(runner_encode_auth(&out, &answer, err, sizeof(err)) == 0);
    send_buffer(wrong, &out);
    CHECK_MSG(run_client(1, &again) == 0 && reference && !strcmp(again, reference),
              "the client's tokens changed with intruders: '%s' then '%s'", reference, again);
    CHECK_MSG(read_until_closed(wrong, 10, &types, NULL, NULL, 0) &&
                  (types & (1u << RUNNER_MSG_ERROR)) && !(types & (1u << RUNNER_MSG_AUTH)),
              "a wrong proof was not refused (frames 0x%x)", types);
    close(wrong);
    CHECK(wait_log(&runner, "its proof does not match the cluster key", 10));
    double start = test_now();
    CHECK_MSG(read_until_closed(silent, RUNNER_AUTH_SECONDS + 10, &types, NULL, NULL, 0),
              "a silent connection was kept");
    CHECK_MSG(test_now() - start < RUNNER_AUTH_SECONDS + 5 &&
                  !(types & (1u << RUNNER_MSG_HEARTBEAT)),
              "the silent connection: closed after %.1f s, frames 0x%x", test_now() - start, types);
    close(silent);
    CHECK(wait_log(&runner, "did not prove the cluster key within", 10));
    CHECK(wait_log(&runner, "refused a connection from 127.0.0.1:", 1));

    /* a client without the key; a raw client that proves it */
    CHECK_MSG(run_client(0, &refused) != 0 && refused && strstr(refused, "asks for a cluster key"),
              "a client without the key: %s", refused ? refused : "");
    int good = connect_runner(port);
    CHECK(good >= 0 && read_hello(good, &hello));
    CHECK(runner_auth_answer(KEY, hello.challenge, &answer, err, sizeof(err)) == 0);
    CHECK(runner_encode_auth(&out, &answer, err, sizeof(err)) == 0);
    send_buffer(good, &out);
    struct runner_auth reply;
    memset(&reply, 0, sizeof(reply));
    read_until_closed(good, 10, &types, NULL, &reply, 1);
    CHECK_MSG((types & (1u << RUNNER_MSG_AUTH)) &&
                  runner_auth_confirm(KEY, hello.challenge, &answer, &reply),
              "the runner did not prove the key back (frames 0x%x)", types);
    close(good);
    runner_buffer_free(&out);
    free(reference);
    free(again);
    free(refused);
    CHECK(test_stop_service(&runner, 20) == 0);
}

/* ---------- the gateway ---------- */

/* Processes whose command line holds text (as /proc shows it to ps). */
static int processes_with(const char *text) {
    DIR *proc = opendir("/proc");
    int n = 0;
    for (struct dirent *e; proc && (e = readdir(proc));) {
        char path[300], line[4096];
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "rb");
        size_t length = f ? fread(line, 1, sizeof(line) - 1, f) : 0;
        if (f) fclose(f);
        for (size_t i = 0; i < length; i++)
            if (line[i] == '\0') line[i] = ' ';
        line[length] = '\0';
        n += strstr(line, text) != NULL;
    }
    if (proc) closedir(proc);
    return n;
}

static void test_gateway(void) {
    struct test_service server;
    char *const extra[] = {"--cluster-key-file", key_path, "-t", "1", NULL};
    int port = test_start_gateway(&server, model_path, extra, NULL, DEADLINE);
    CHECK_MSG(port > 0, "the gateway with a cluster key did not start");
    if (port > 0) {
        struct test_http h = test_http_request(
            port, "POST", "/v1/completions", NULL,
            "{\"prompt\":\"a b c\",\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true}", 60);
        CHECK_MSG(h.status == 200 && h.body && strstr(h.body, "\"completion_tokens\":4"),
                  "a completion through an authenticated link: %d %s", h.status,
                  h.body ? h.body : "");
        test_http_free(&h);
        /* the runner was given the file, not the key */
        CHECK_MSG(processes_with("--cluster-key-file") >= 1,
                  "no runner was started with --cluster-key-file");
        CHECK_MSG(processes_with(KEY) == 0, "a process shows the key on its command line");
    }
    CHECK(test_stop_service(&server, 20) == 0);
    chmod(key_path, 0644);
    char *argv[] = {LOCKSTEP_BIN,         "serve",  "-m", model_path, "--port", "0",
                    "--cluster-key-file", key_path, NULL};
    struct test_job job = test_run_job(argv, 30, NULL);
    CHECK_MSG(job.status != 0 && strstr(job.err, "world-readable"),
              "a world-readable key file: status %d, %s", job.status, job.err);
    test_job_free(&job);
}

int main(void) {
    test_exchange();
    test_tmp_path(model_path, sizeof(model_path), "auth-rand.gguf");
    test_tmp_path(key_path, sizeof(key_path), "cluster.key");
    char *const options[] = {
        "--dim",   "64",  "--hidden", "128", "--layers", "2",   "--heads", "4", "--kv-heads", "2",
        "--vocab", "260", "--ctx",    "256", "--type",   "f32", "--seed",  "5", NULL};
    if (!test_write_random_model(model_path, options)) return test_status("test_runner_auth");
    FILE *f = fopen(key_path, "w");
    if (!f) return 1;
    fprintf(f, "%s\n", KEY);
    fclose(f);
    chmod(key_path, 0600);
    test_intruders();
    test_gateway();
    CHECK_MSG(test_reap_children(10) == 0, "processes were left running");
    return test_status("test_runner_auth");
}
