/* fuzz_http.c -- libFuzzer harness for the gateway's HTTP layer
 * (src/gateway/http over libmicrohttpd, with the requests layer below it),
 * driven with raw bytes over loopback, with no runner.
 *
 * The HTTP layer alone is under test: its sources and the requests
 * layer's are compiled into the harness with the fuzzer's instrumentation
 * and serve over a fake fleet (fake_fleet.c) in place of src/gateway/fleet:
 * one served model, one instance whose supervisor is never started, and a
 * fake runner that answers each request through the requests layer, at
 * once in the HTTP thread or a token every 100 us on a worker thread, so
 * that answers are whole, streamed, and waited for by suspended
 * connections. No runner process and no supervisor thread: an input takes
 * milliseconds whatever it asks, nothing is left running when the harness
 * dies, and the coverage that guides the fuzzer is the code that reads what
 * clients send, not a runner's life (fuzz_runner_protocol fuzzes that
 * side's codec).
 *
 * Before the first input, a tiny seeded random model (fuzz_http-model.gguf)
 * is written to the working directory, for the vocabulary and chat template
 * the requests are tokenized with (no ../shared needed), and the server is
 * started with http_start as the gateway starts it: 127.0.0.1, any free
 * port, API key "fuzz-key", admin key "fuzz-admin" (the admin API is
 * fuzzed too), --enable-faults (POST /debug/fault), one CORS origin and
 * small limits (16 KiB bodies, 768 prompt tokens, max_tokens 64). The
 * harness waits until GET /health is 200.
 *
 * Each input is one TCP connection. Its first byte chooses how the rest is
 * sent and how the connection ends (the seeds in corpus-http/ start with a
 * printable one; '4' is one write, then read the answer, then half-close):
 *   bits 0-1: the number of writes the bytes are cut into (1, 2, 3 or 8),
 *             1 ms apart, so requests arrive in pieces;
 *   bits 2-3: 0 half-close (shutdown SHUT_WR) right after the last write,
 *             1 read until the gateway is quiet for 10 ms, then half-close,
 *             2 read until quiet, then leave with a reset,
 *             3 reset right after the last write (a client that vanishes);
 *   bits 4-7: shift the cut points.
 * What must hold whatever the bytes (DESIGN.md I6):
 *   - everything the gateway sends is a sequence of well-formed HTTP/1.x
 *     responses: status line, header syntax, at most one Content-Length,
 *     one framing (Content-Length, chunked, or to the end), nothing after
 *     "Connection: close". Only the last may be cut off, and only when the
 *     client half-closed, left or was reset, not when the gateway closed
 *     on its own;
 *   - the gateway keeps answering GET /health with 200 (the fake fleet is
 *     always ready): checked every HEALTH_EVERY inputs, after an input
 *     that could not connect or ran into the 3 s deadline, and at exit. No
 *     answer within 5 s is a hang: the inputs sent since the last good
 *     check are written to fuzz_http-recent-NN, and the harness aborts.
 * At exit the fake runner's worker fails what it still holds (503, as a
 * stopping supervisor does), the server is stopped, and everything is
 * freed, so ASan's leak check sees every allocation the HTTP and requests
 * layers made; a reference fleet_any gave out and the HTTP layer never
 * released aborts too. The answer to a connection's first request, which
 * the gateway's screen reads before libmicrohttpd does, is an OpenAI JSON
 * error whenever its status is 4xx or 5xx; later requests on a kept-alive
 * connection are parsed by the library alone, and once it answers one with
 * its own HTML page the rest of that connection is not checked. One
 * stricter check is a compile-time option:
 *   -DFUZZ_HTTP_CLOSE_CHECK: a connection the client half-closed is closed
 *     by the gateway within 3 s, not left in CLOSE_WAIT until a timeout.
 * Built by tests/fuzz/CMakeLists.txt when LOCKSTEP_FUZZ=ON. */
#include "fake_fleet.h"
#include "gateway/http/http.h"
#include "model/model.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MODEL_NAME     "fuzz"
#define API_KEY        "fuzz-key"
#define ADMIN_KEY      "fuzz-admin"
#define CORS_ORIGIN    "http://fuzz.example"
#define START_SECONDS  10.0  /* the server answers /health */
#define ANSWER_SECONDS 3.0   /* the most one input may take */
#define HEALTH_SECONDS 5.0   /* /health must answer within this */
#define CLOSE_SECONDS  3.0   /* FUZZ_HTTP_CLOSE_CHECK: a half-closed connection is closed */
#define QUIET_MS       10    /* the gateway has said all it will say for now */
#define PIECE_GAP_MS   1     /* between the writes of one input */
#define HEALTH_EVERY   16    /* inputs between two checks of /health */
#define INPUT_MAX      65536 /* what -max_len allows (CMakeLists.txt) */
#define ANSWER_MAX     (1 << 20)

/* How a connection ends (bits 2-3 of the mode byte). */
enum ending { END_SHUT, END_LINGER, END_LEAVE, END_RESET };

/* How reading a connection stopped. */
enum read_state { READ_EOF, READ_RESET, READ_QUIET, READ_DEADLINE };

/* What the gateway sent on one connection. */
struct answer {
    char bytes[ANSWER_MAX];
    size_t length;
    int overflow; /* more than ANSWER_MAX bytes came: only the first are checked */
};

/* The inputs since the last good /health, for a hang report. */
struct recent {
    uint8_t data[HEALTH_EVERY][INPUT_MAX];
    size_t size[HEALTH_EVERY];
    int count;
};

/* What the gateway would hold: the server and what it borrows. */
static struct gateway_metrics metrics;
static atomic_int stopping, draining;
static atomic_ullong next_id = 1;
static struct fleet *fleet;
static struct requests_env requests_env;
static struct http_server server;
static int port;
static char model_path[4200];
static struct answer answer;
static struct recent recent;
static unsigned long n_inputs;

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Milliseconds left until deadline, at most cap (poll's timeout). */
static int ms_until(double deadline, int cap) {
    double left = (deadline - now_seconds()) * 1e3;
    if (left <= 0) return 0;
    return left < cap ? (int)left + 1 : cap;
}

/* ---------- one connection ---------- */

/* Polls until fd is writable (> 0), fails, or the deadline passes (0). */
static int wait_writable(int fd, double deadline) {
    struct pollfd p = {fd, POLLOUT, 0};
    for (;;) {
        int ready = poll(&p, 1, ms_until(deadline, 1000));
        if (ready > 0 || (ready < 0 && errno != EINTR) || now_seconds() >= deadline) return ready;
    }
}

/* A non-blocking TCP connection to the gateway, or -1. Non-blocking so a
 * gateway that stops accepting cannot stall the fuzzer past the deadline. */
static int connect_gateway(double deadline) {
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1; /* each write its own segment, so the pieces arrive apart */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&address, sizeof(address)) == 0) return fd;
    int ready = errno == EINPROGRESS ? wait_writable(fd, deadline) : -1, error = ETIMEDOUT;
    socklen_t length = sizeof(error);
    if (ready > 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (ready > 0 && error == 0) return fd;
    close(fd);
    return -1;
}

/* Closes with a reset (SO_LINGER 0), so the gateway's socket goes away at
 * once whatever state its request was in. */
static void close_reset(int fd) {
    struct linger linger = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger));
    close(fd);
}

/* Reads what is there into answer; waits up to wait_ms for something.
 * 1: got bytes, 0: nothing yet, or the read_state that ended it. */
static int read_some(int fd, int wait_ms, enum read_state *state) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0) return 0;
    char scratch[16384];
    int overflow = answer.length == ANSWER_MAX;
    char *into = overflow ? scratch : answer.bytes + answer.length;
    size_t room = overflow ? sizeof(scratch) : ANSWER_MAX - answer.length;
    ssize_t n = recv(fd, into, room, 0);
    if (n > 0) {
        if (overflow)
            answer.overflow = 1;
        else
            answer.length += (size_t)n;
        return 1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    *state = n == 0 ? READ_EOF : READ_RESET;
    return -1;
}

/* Reads until the gateway closes, resets, is quiet for quiet_ms (never, if
 * negative), or the deadline passes. */
static enum read_state read_until(int fd, int quiet_ms, double deadline) {
    enum read_state state = READ_DEADLINE;
    double quiet_since = now_seconds();
    while (now_seconds() < deadline) {
        int got = read_some(fd, ms_until(deadline, quiet_ms < 0 ? 100 : quiet_ms), &state);
        if (got < 0) return state;
        if (got > 0)
            quiet_since = now_seconds();
        else if (quiet_ms >= 0 && (now_seconds() - quiet_since) * 1e3 >= quiet_ms)
            return READ_QUIET;
    }
    return READ_DEADLINE;
}

/* Writes all of data, reading what comes meanwhile; 0, or -1 when the
 * gateway stopped taking bytes (it answered and closed, or the deadline). */
static int send_all(int fd, const uint8_t *data, size_t size, double deadline) {
    enum read_state state;
    while (size > 0) {
        ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
        if (n > 0) {
            data += n;
            size -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR) return -1;
        struct pollfd p = {fd, POLLOUT, 0};
        poll(&p, 1, ms_until(deadline, 10));
        if (read_some(fd, 0, &state) < 0 || now_seconds() >= deadline) return -1;
    }
    return 0;
}

/* Sends data cut into pieces as the mode byte says, a short gap between
 * them so the gateway sees each on its own. */
static int send_pieces(int fd, const uint8_t *data, size_t size, unsigned mode, double deadline) {
    static const size_t pieces_of[4] = {1, 2, 3, 8};
    size_t pieces = pieces_of[mode & 3], shift = mode >> 4, at = 0;
    enum read_state state;
    for (size_t k = 1; k <= pieces; k++) {
        size_t cut = k == pieces ? size : size * k / pieces + (shift * k) % 16;
        if (cut > size) cut = size;
        if (cut <= at) continue;
        if (send_all(fd, data + at, cut - at, deadline)) return -1;
        at = cut;
        if (k < pieces && read_some(fd, PIECE_GAP_MS, &state) < 0) return -1;
    }
    return 0;
}

/* ---------- checking the answer ---------- */

/* What one response's head says. */
struct head {
    int status;
    long long content_length; /* -1: none */
    int chunked, close;
};

static const char *find_crlf(const char *at, const char *end) {
    return memmem(at, (size_t)(end - at), "\r\n", 2);
}

/* 1 if c may appear in a header field's value or a reason phrase. */
static int field_byte(unsigned char c) {
    return c == '\t' || (c >= 0x20 && c != 0x7F);
}

static int token_byte(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* "HTTP/1.x DDD reason"; NULL or what is wrong. */
static const char *check_status_line(const char *line, size_t length, int *status) {
    if (length < 12 || memcmp(line, "HTTP/1.", 7) != 0 || line[7] < '0' || line[7] > '9' ||
        line[8] != ' ')
        return "the status line does not start with \"HTTP/1.x \"";
    *status = 0;
    for (int i = 9; i < 12; i++) {
        if (line[i] < '0' || line[i] > '9') return "the status code is not three digits";
        *status = *status * 10 + (line[i] - '0');
    }
    if (*status < 100 || *status > 599) return "the status code is not 1xx-5xx";
    if (length > 12 && line[12] != ' ') return "no space after the status code";
    for (size_t i = 13; i < length; i++)
        if (!field_byte((unsigned char)line[i])) return "a control byte in the reason phrase";
    return NULL;
}

/* One "Name: value" line into head; NULL or what is wrong. */
static const char *check_header(const char *line, size_t length, struct head *head) {
    size_t name = 0;
    while (name < length && token_byte((unsigned char)line[name])) name++;
    if (name == 0 || name == length || line[name] != ':') return "a header line is not Name: value";
    for (size_t i = name + 1; i < length; i++)
        if (!field_byte((unsigned char)line[i])) return "a control byte in a header value";
    const char *value = line + name + 1;
    size_t value_length = length - name - 1;
    while (value_length > 0 && (*value == ' ' || *value == '\t')) value++, value_length--;
    if (name == 14 && !strncasecmp(line, "Content-Length", 14)) {
        if (head->content_length >= 0) return "two Content-Length headers";
        if (value_length == 0 || value_length > 15) return "a bad Content-Length";
        head->content_length = 0;
        for (size_t i = 0; i < value_length; i++) {
            if (value[i] < '0' || value[i] > '9') return "a bad Content-Length";
            head->content_length = head->content_length * 10 + (value[i] - '0');
        }
    } else if (name == 17 && !strncasecmp(line, "Transfer-Encoding", 17)) {
        head->chunked = memmem(value, value_length, "chunked", 7) != NULL;
    } else if (name == 10 && !strncasecmp(line, "Connection", 10)) {
        head->close = value_length >= 5 && !strncasecmp(value, "close", 5);
    }
    return NULL;
}

/* Parses a response head at *at. 1: whole (*at past it), 0: cut off,
 * -1: malformed (*why says how). */
static int parse_head(const char **at, const char *end, struct head *head, const char **why) {
    const char *line = *at, *eol = find_crlf(line, end);
    *head = (struct head){0, -1, 0, 0};
    if (!eol) return 0;
    if ((*why = check_status_line(line, (size_t)(eol - line), &head->status))) return -1;
    for (line = eol + 2; (eol = find_crlf(line, end)) != NULL && eol > line; line = eol + 2)
        if ((*why = check_header(line, (size_t)(eol - line), head))) return -1;
    if (!eol) return 0;
    if (head->chunked && head->content_length >= 0) {
        *why = "both Content-Length and chunked";
        return -1;
    }
    *at = eol + 2;
    return 1;
}

/* A chunk size line "HEX[;ext]" ending at eol; -1 if malformed. */
static long long chunk_size(const char *line, const char *eol) {
    long long size = 0;
    const char *at = line;
    for (; at < eol && at - line < 15; at++) {
        int c = (unsigned char)*at, digit = c >= '0' && c <= '9'   ? c - '0'
                                            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                                   : -1;
        if (digit < 0) break;
        size = size * 16 + digit;
    }
    return at > line && (at == eol || *at == ';') ? size : -1;
}

/* Skips a chunked body at *at: 1 whole, 0 cut off, -1 malformed. */
static int skip_chunked(const char **at, const char *end, const char **why) {
    for (;;) {
        const char *eol = find_crlf(*at, end);
        if (!eol) return 0;
        long long size = chunk_size(*at, eol);
        if (size < 0) {
            *why = "a bad chunk size line";
            return -1;
        }
        *at = eol + 2;
        if (size == 0) break;
        if (end - *at < size + 2) return 0;
        if (memcmp(*at + size, "\r\n", 2) != 0) {
            *why = "a chunk does not end with CRLF";
            return -1;
        }
        *at += size + 2;
    }
    for (const char *eol; (eol = find_crlf(*at, end)) != NULL; *at = eol + 2)
        if (eol == *at) { /* the blank line after the trailers */
            *at = eol + 2;
            return 1;
        }
    return 0;
}

/* An error body must be {"error": {"message": "..."}} (OpenAI's shape). */
static const char *check_error_body(const char *body, size_t length) {
    cJSON *root = cJSON_ParseWithLength(body, length);
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(root, "error");
    int ok = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(error, "message"));
    cJSON_Delete(root);
    return ok ? NULL : "a 4xx/5xx body is not OpenAI's JSON error";
}

/* Skips one response's body: 1 whole, 0 cut off, -1 malformed. The first
 * response of a connection answers a request the gateway's screen read:
 * an error there must be OpenAI's JSON. */
static int skip_body(const char **at, const char *end, const struct head *head, int first,
                     const char **why) {
    if (head->status < 200 || head->status == 204 || head->status == 304) return 1;
    if (head->chunked) return skip_chunked(at, end, why);
    if (head->content_length < 0) { /* the body runs to the end of the connection */
        *at = end;
        return 1;
    }
    if ((unsigned long long)(end - *at) < (unsigned long long)head->content_length) return 0;
    if (first && head->status >= 400 &&
        (*why = check_error_body(*at, (size_t)head->content_length)))
        return -1;
    *at += head->content_length;
    return 1;
}

/* 1 if the response at `at` is one of libmicrohttpd's own error pages: a
 * 4xx or 5xx status whose body (after the head) is HTML, or a second head
 * (its answer to a malformed Content-Length). */
static int library_page(const char *at, const char *end) {
    const char *body = memmem(at, (size_t)(end - at), "\r\n\r\n", 4);
    if (!(end - at > 12 && !strncmp(at, "HTTP/1.1 ", 9) && (at[9] == '4' || at[9] == '5') && body))
        return 0;
    body += 4;
    return (end - body >= 6 && !strncmp(body, "<html>", 6)) ||
           (end - body >= 9 && !strncmp(body, "HTTP/1.1 ", 9));
}

/* Checks every response in the answer; NULL or what is wrong. whole: the
 * gateway closed on its own, so nothing may be cut off. A HEAD request
 * (anywhere in the input) has a body-less response that cannot be told
 * apart, so then only the first head is checked. */
static const char *check_answer(int whole, int head_request) {
    const char *at = answer.bytes, *end = answer.bytes + answer.length, *why = NULL;
    if (answer.overflow) whole = 0;
    for (int first = 1; at < end; first = 0) {
        struct head head;
        /* libmicrohttpd parses a kept-alive connection's later requests
         * alone: its own error pages are HTML, and 0.9.75 answers a
         * malformed Content-Length with two heads; what follows one is
         * that client's own problem, not the gateway's to frame */
        if (!first && library_page(at, end)) return NULL;
        int rc = parse_head(&at, end, &head, &why);
        if (rc > 0 && head_request) return NULL;
        if (rc > 0) rc = skip_body(&at, end, &head, first, &why);
        if (rc < 0) return why;
        if (rc == 0) return whole ? "the gateway closed in the middle of a response" : NULL;
        if (head.close && at < end) return "bytes after a Connection: close response";
    }
    return NULL;
}

/* Prints bytes with everything unprintable escaped. */
static void print_escaped(const char *what, const void *bytes, size_t size) {
    const unsigned char *b = bytes;
    fprintf(stderr, "---- %s (%zu bytes) ----\n", what, size);
    for (size_t i = 0; i < size && i < 4096; i++) {
        if (b[i] == '\n')
            fputs("\\n\n", stderr);
        else if (b[i] >= 0x20 && b[i] < 0x7F && b[i] != '\\')
            fputc(b[i], stderr);
        else
            fprintf(stderr, "\\x%02x", b[i]);
    }
    fputs(size > 4096 ? "...\n" : "\n", stderr);
}

static void fail(const char *why, const uint8_t *data, size_t size) {
    fprintf(stderr, "fuzz_http: %s\n", why);
    if (data) print_escaped("sent (after the mode byte)", data, size);
    if (data) print_escaped("answer", answer.bytes, answer.length);
    abort();
}

/* ---------- /health ---------- */

/* GET /health's status; -1 when no well-formed answer came in time. */
static int health_status(double seconds) {
    static const char request[] =
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    double deadline = now_seconds() + seconds;
    int fd = connect_gateway(deadline);
    if (fd < 0) return -1;
    answer.length = 0;
    answer.overflow = 0;
    int rc = -1;
    if (send_all(fd, (const uint8_t *)request, sizeof(request) - 1, deadline) == 0 &&
        read_until(fd, -1, deadline) == READ_EOF && answer.length > 12 &&
        check_answer(1, 0) == NULL)
        rc = atoi(answer.bytes + 9);
    close_reset(fd);
    return rc;
}

/* Writes the inputs since the last good check, for a hang report. */
static void save_recent(void) {
    for (int i = 0; i < recent.count; i++) {
        char name[64];
        snprintf(name, sizeof(name), "fuzz_http-recent-%02d", i);
        FILE *f = fopen(name, "wb");
        if (!f) continue;
        fwrite(recent.data[i], 1, recent.size[i], f);
        fclose(f);
        fprintf(stderr, "fuzz_http: wrote %s (%zu bytes)\n", name, recent.size[i]);
    }
}

/* The gateway must answer /health with 200: the fake fleet is always ready. */
static void require_health(const char *when) {
    int status = health_status(HEALTH_SECONDS);
    if (status == 200) {
        recent.count = 0;
        return;
    }
    fprintf(stderr, "fuzz_http: GET /health got %s %s (input %lu)\n",
            status < 0 ? "no answer in time" : "an unexpected status", when, n_inputs);
    print_escaped("the last answer to GET /health", answer.bytes, answer.length);
    save_recent();
    fail("the gateway stopped answering /health", NULL, 0);
}

/* ---------- the server's life ---------- */

/* path in the working directory, made absolute. */
static void path_here(char *out, size_t size, const char *name) {
    char cwd[4096];
    if (!getcwd(cwd, sizeof(cwd))) snprintf(cwd, sizeof(cwd), ".");
    snprintf(out, size, "%s/%s", cwd, name);
}

/* The tiny model, written with the library `lockstep convert --random`
 * uses, then put in place with one rename, so that concurrent runs (and
 * -fork jobs) sharing the working directory never see half of one. It is
 * the same for every run and stays for the next: a crash leaves nothing
 * new behind. */
static void write_model(void) {
    char err[256], temporary[sizeof(model_path) + 32];
    /* a context long enough for a chat with tools (their schema is in the prompt) */
    struct model_random_params shape = {MODEL_ARCH_LLAMA, 32, 64, 1, 2, 2, 512, 1024, TENSOR_F32, 1,
                                        MODEL_MIX_NONE};
    path_here(model_path, sizeof(model_path), "fuzz_http-model.gguf");
    snprintf(temporary, sizeof(temporary), "%s.%d", model_path, (int)getpid());
    if (model_write_random(&shape, temporary, err, sizeof(err))) {
        fprintf(stderr, "fuzz_http: %s\n", err);
        exit(1);
    }
    if (rename(temporary, model_path) != 0) {
        perror("fuzz_http: rename");
        exit(1);
    }
}

/* The fake fleet and the HTTP server over it, filled as gateway.c's
 * start_layers fills them, with their threads blocking SIGALRM:
 * libFuzzer's -timeout alarm must interrupt the fuzzer's thread, as the
 * gateway's threads block signals under `lockstep serve` too. */
static void start_server(void) {
    static const struct gateway_model model = {.name = MODEL_NAME, .tp = 1, .threads = 1};
    static struct gateway_model models[1];
    static struct gateway_params params = {.host = "127.0.0.1",
                                           .api_key = API_KEY,
                                           .admin_key = ADMIN_KEY,
                                           .enable_faults = 1,
                                           .n_cors_origins = 1,
                                           .cors_origins = {CORS_ORIGIN},
                                           .max_body_bytes = 16 * 1024,
                                           .max_prompt_tokens = 768,
                                           .max_tokens_limit = 64,
                                           .max_concurrent = 16,
                                           .keep_alive_seconds = 1,
                                           .watchdog_seconds = 5,
                                           .n_models = 1,
                                           .models = models};
    char err[512] = "";
    sigset_t alarm, old;
    models[0] = model;
    models[0].path = model_path;
    if (gateway_metrics_init(&metrics)) {
        fprintf(stderr, "fuzz_http: cannot set up the metrics\n");
        exit(1);
    }
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alarm, &old);
    fleet = fake_fleet_create(&params, &metrics, &stopping, &next_id, err, sizeof(err));
    requests_env = (struct requests_env){.params = &params,
                                         .next_id = &next_id,
                                         .metrics = &metrics,
                                         .cancel = fleet_instance_cancel,
                                         .submit_more = fleet_submit_more,
                                         .context = fleet};
    server = (struct http_server){.params = &params,
                                  .fleet = fleet,
                                  .metrics = &metrics,
                                  .requests_env = &requests_env,
                                  .stopping = &stopping,
                                  .draining = &draining};
    int failed = !fleet || http_start(&server, err, sizeof(err));
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (failed) {
        fprintf(stderr, "fuzz_http: cannot start the HTTP server: %s\n", err);
        exit(1);
    }
    port = server.port;
}

/* At exit: the server must still answer; then it stops as gateway_free
 * stops the gateway (the runners' side first: what is left fails with
 * 503, which its clients still get), and everything is freed before
 * ASan's leak check runs. */
static void stop_server(void) {
    require_health("at exit");
    atomic_store(&stopping, 1);
    fake_fleet_stop(fleet);
    http_stop(&server);
    fake_fleet_free(fleet);
    fleet = NULL;
    gateway_metrics_free(&metrics);
    fprintf(stderr, "fuzz_http: %lu inputs, the server answered /health throughout\n", n_inputs);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN); /* as `lockstep serve` does */
    write_model();
    start_server();
    double deadline = now_seconds() + START_SECONDS;
    while (health_status(HEALTH_SECONDS) != 200) {
        if (now_seconds() > deadline) {
            fprintf(stderr, "fuzz_http: the server was not ready in %.0f s\n", START_SECONDS);
            exit(1);
        }
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    atexit(stop_server);
    fprintf(stderr, "fuzz_http: the HTTP layer on 127.0.0.1:%d, over a fake fleet\n", port);
    return 0;
}

/* ---------- one input ---------- */

/* After a half-close: the rest of the answer. The gateway may stay silent
 * on a request it cannot finish, so the wait is short unless
 * FUZZ_HTTP_CLOSE_CHECK requires it to close. */
static enum read_state read_after_shutdown(int fd, double deadline, const uint8_t *data,
                                           size_t size) {
    shutdown(fd, SHUT_WR);
#ifdef FUZZ_HTTP_CLOSE_CHECK
    double close_deadline = now_seconds() + CLOSE_SECONDS;
    enum read_state state = read_until(fd, -1, close_deadline);
    if (state == READ_DEADLINE)
        fail("the gateway did not close a half-closed connection in time", data, size);
    (void)deadline;
    return state;
#else
    (void)data;
    (void)size;
    return read_until(fd, QUIET_MS, deadline);
#endif
}

/* 1 if "HEAD" (in any case: a method libmicrohttpd may take as HEAD) is
 * anywhere in the input. */
static int has_head(const uint8_t *data, size_t size) {
    for (size_t i = 0; i + 4 <= size; i++)
        if (!strncasecmp((const char *)data + i, "HEAD", 4)) return 1;
    return 0;
}

/* Sends one input and checks the answer. 1 if the connection failed or
 * ran into the deadline: then /health must still answer. */
static int exchange(unsigned mode, const uint8_t *data, size_t size) {
    enum ending ending = (enum ending)((mode >> 2) & 3);
    double deadline = now_seconds() + ANSWER_SECONDS;
    int fd = connect_gateway(deadline);
    if (fd < 0) return 1;
    answer.length = 0;
    answer.overflow = 0;
    int sent = send_pieces(fd, data, size, mode, deadline) == 0;
    if (ending == END_RESET) {
        close_reset(fd);
        return 0;
    }
    enum read_state state = READ_QUIET;
    if (sent && ending != END_SHUT) state = read_until(fd, QUIET_MS, deadline);
    int whole = state == READ_EOF; /* the gateway closed before the client did anything */
    if (sent && ending != END_LEAVE && state == READ_QUIET)
        state = read_after_shutdown(fd, deadline, data, size);
    if (!sent && state == READ_QUIET) state = read_until(fd, QUIET_MS, deadline);
    const char *why = check_answer(whole, has_head(data, size));
    if (why) fail(why, data, size);
    if (state == READ_EOF)
        close(fd);
    else
        close_reset(fd);
    return state == READ_DEADLINE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > INPUT_MAX) return 0;
    n_inputs++;
    memcpy(recent.data[recent.count], data, size);
    recent.size[recent.count++] = size;
    int late = exchange(data[0], data + 1, size - 1);
    if (late || recent.count == HEALTH_EVERY)
        require_health(late ? "after an input that failed to connect or took too long"
                            : "after a batch of inputs");
    return 0;
}
