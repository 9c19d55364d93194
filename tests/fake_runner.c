/* fake_runner.c -- a stand-in for `lockstep runner` that test_gateway_supervisor
 * starts through a supervisor: it speaks the runner protocol on --socket but
 * computes nothing, so the supervisor's restarts, resumption and watchdog
 * can be tested in milliseconds and with exact expectations.
 *
 * For a request of prompt p[0..n) and max_tokens m it sends, one per step,
 * the tokens (p[n-1] + 1 + k) % 1000 for k = 0..m-1 and then FINISHED
 * (length), with a HEARTBEAT after every step. A resumed request (its prompt
 * ending with the tokens an earlier runner sent) thus goes on exactly where
 * the earlier one stopped. The environment chooses how it misbehaves:
 *   FAKE_RUNNER_MODE     normal (default); crash-after=K: exit(1) after K
 *                        tokens in all (first start only); no-hello: exit(1)
 *                        at once (every start); stall: HELLO, then read ADDs
 *                        and never answer (first start only)
 *   FAKE_RUNNER_STEP_MS  milliseconds between steps (default 2)
 *   FAKE_RUNNER_LOG      a file it appends a line to per start, ADD, CANCEL
 *                        and crash; its "start" lines count the starts */
#include "protocol/protocol.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FAKE_VOCAB      1000
#define FAKE_ACTIVE_MAX 64
#define FAKE_ACCEPT_MS  30000 /* a supervisor connects long before this */
#define FAKE_LOG_LINE   4096

/* A request it is answering. */
struct fake_request {
    uint64_t id;
    int next;     /* the next token's id */
    int sent;     /* tokens sent so far */
    int max;      /* tokens to send */
    int n_prompt; /* for FINISHED */
};

struct fake_runner {
    const char *log_path;
    int index;       /* starts before this one (its "start" lines) */
    int crash_after; /* tokens before exit(1); 0: never */
    int stall;       /* 1: never answer */
    int step_ms;
    int tp;
    int fd; /* the supervisor's connection */
    int total_tokens;
    uint64_t step;
    struct fake_request active[FAKE_ACTIVE_MAX];
    int n_active;
    struct runner_buffer in, out;
};

/* Appends one line to the log in one write(), so that runners of two
 * supervisors sharing the file never mix their lines. */
static void fake_log(const struct fake_runner *f, const char *format, ...) {
    char line[FAKE_LOG_LINE];
    va_list args;
    if (!f->log_path) return;
    va_start(args, format);
    int n = vsnprintf(line, sizeof(line) - 1, format, args);
    va_end(args);
    if (n < 0) return;
    if (n > (int)sizeof(line) - 2) n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    int fd = open(f->log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return;
    ssize_t rc = write(fd, line, (size_t)n);
    (void)rc;
    close(fd);
}

/* Starts logged before this one: what the first-start-only modes read. */
static int fake_count_starts(const char *path) {
    char line[FAKE_LOG_LINE];
    int starts = 0;
    FILE *file = path ? fopen(path, "r") : NULL;
    if (!file) return 0;
    while (fgets(line, sizeof(line), file))
        if (!strncmp(line, "start ", 6)) starts++;
    fclose(file);
    return starts;
}

/* Reads the mode from the environment; exits at once for no-hello. */
static void fake_configure(struct fake_runner *f) {
    const char *mode = getenv("FAKE_RUNNER_MODE");
    const char *step = getenv("FAKE_RUNNER_STEP_MS");
    f->log_path = getenv("FAKE_RUNNER_LOG");
    f->index = fake_count_starts(f->log_path);
    f->step_ms = step ? atoi(step) : 2;
    if (!mode) mode = "normal";
    fake_log(f, "start index=%d pid=%d mode=%s", f->index, (int)getpid(), mode);
    if (!strcmp(mode, "no-hello")) exit(1);
    if (!strncmp(mode, "crash-after=", 12) && f->index == 0) f->crash_after = atoi(mode + 12);
    if (!strcmp(mode, "stall") && f->index == 0) f->stall = 1;
}

/* Writes out whole (the connection is blocking); exits when it broke. */
static void fake_flush(struct fake_runner *f) {
    size_t done = 0;
    while (done < f->out.length) {
        ssize_t n = send(f->fd, f->out.data + done, f->out.length - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) exit(0); /* the supervisor went away */
        done += (size_t)n;
    }
    runner_buffer_consume(&f->out, f->out.length);
}

/* HELLO without a challenge: the supervisor was given no cluster key. */
static void fake_hello(struct fake_runner *f) {
    char err[200];
    struct runner_hello hello = {.vocab_size = FAKE_VOCAB,
                                 .context_length = 4096,
                                 .max_sequences = FAKE_ACTIVE_MAX,
                                 .step_tokens = 512,
                                 .kv_block_size = 16,
                                 .kv_blocks_total = 1024,
                                 .tensor_parallel = f->tp > 0 ? f->tp : 1};
    snprintf(hello.model, sizeof(hello.model), "fake");
    snprintf(hello.build, sizeof(hello.build), "%s", version_build());
    if (runner_encode_hello(&f->out, &hello, err, sizeof(err))) {
        fprintf(stderr, "fake_runner: %s\n", err);
        exit(2);
    }
    fake_flush(f);
}

static void fake_finish(struct fake_runner *f, const struct fake_request *r,
                        enum runner_finish_reason reason) {
    char err[200];
    struct runner_finished done = {
        .id = r->id, .reason = reason, .n_prompt = r->n_prompt, .n_generated = r->sent};
    runner_encode_finished(&f->out, &done, err, sizeof(err));
}

/* Logs an ADD with its whole prompt, so the test sees what a resumed
 * request carried. */
static void fake_log_add(struct fake_runner *f, const struct runner_request *q) {
    char prompt[FAKE_LOG_LINE - 256];
    size_t used = 0;
    prompt[0] = '\0';
    for (int i = 0; i < q->n_prompt && used + 16 < sizeof(prompt); i++)
        used += (size_t)snprintf(prompt + used, sizeof(prompt) - used, "%s%d", i ? "," : "",
                                 q->prompt[i]);
    fake_log(f, "add index=%d pid=%d id=%llu n_prompt=%d resumed=%d max_tokens=%d prompt=%s",
             f->index, (int)getpid(), (unsigned long long)q->id, q->n_prompt, q->resumed,
             q->max_tokens, prompt);
}

static void fake_add(struct fake_runner *f, const struct runner_frame *frame) {
    char err[200];
    struct runner_request q;
    if (runner_decode_add(frame, &q, err, sizeof(err))) {
        fprintf(stderr, "fake_runner: %s\n", err);
        exit(2);
    }
    fake_log_add(f, &q);
    if (!f->stall && f->n_active < FAKE_ACTIVE_MAX)
        f->active[f->n_active++] = (struct fake_request){
            .id = q.id,
            .next = (q.prompt[q.n_prompt - 1] + 1) % FAKE_VOCAB,
            .max = q.max_tokens,
            .n_prompt = q.n_prompt,
        };
    runner_request_free(&q);
}

/* CANCEL: no more tokens for it, and FINISHED (cancelled) as the real
 * runner says it. */
static void fake_cancel(struct fake_runner *f, const struct runner_frame *frame) {
    char err[200];
    uint64_t id;
    if (runner_decode_cancel(frame, &id, err, sizeof(err))) exit(2);
    fake_log(f, "cancel id=%llu pid=%d index=%d", (unsigned long long)id, (int)getpid(), f->index);
    for (int i = 0; i < f->n_active; i++)
        if (f->active[i].id == id) {
            fake_finish(f, &f->active[i], RUNNER_FINISH_CANCELLED);
            f->active[i] = f->active[--f->n_active];
            break;
        }
    if (!f->stall) fake_flush(f);
}

/* Handles the whole frames received; exits on a malformed one. */
static void fake_frames(struct fake_runner *f) {
    char err[200];
    struct runner_frame frame;
    size_t used = 0;
    int rc;
    while ((rc = runner_frame_next(f->in.data + used, f->in.length - used, RUNNER_FRAME_MAX, &frame,
                                   err, sizeof(err))) == 1) {
        used += frame.frame_length;
        if (frame.type == RUNNER_MSG_ADD)
            fake_add(f, &frame);
        else if (frame.type == RUNNER_MSG_CANCEL)
            fake_cancel(f, &frame);
    }
    if (rc < 0) {
        fprintf(stderr, "fake_runner: %s\n", err);
        exit(2);
    }
    runner_buffer_consume(&f->in, used);
}

/* Reads what the supervisor sent; exits 0 when it closed the connection. */
static void fake_receive(struct fake_runner *f) {
    uint8_t chunk[65536];
    ssize_t n = recv(f->fd, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) return;
    if (n <= 0 || runner_buffer_append(&f->in, chunk, (size_t)n)) {
        runner_buffer_free(&f->in);
        runner_buffer_free(&f->out);
        exit(0);
    }
    fake_frames(f);
}

/* One token of request i; 1 if it is over (FINISHED queued). */
static int fake_token(struct fake_runner *f, struct fake_request *r) {
    char err[200];
    struct runner_token token = {.id = r->id, .token = r->next};
    runner_encode_token(&f->out, &token, err, sizeof(err));
    r->next = (r->next + 1) % FAKE_VOCAB;
    r->sent++;
    f->total_tokens++;
    if (f->crash_after && f->total_tokens >= f->crash_after) {
        fake_flush(f); /* the tokens so far reach the supervisor first */
        fake_log(f, "crash index=%d pid=%d tokens=%d", f->index, (int)getpid(), f->total_tokens);
        exit(1);
    }
    if (r->sent < r->max) return 0;
    fake_finish(f, r, RUNNER_FINISH_LENGTH);
    return 1;
}

/* A step: a token for every active request, then the heartbeat that
 * shows the watchdog progress. */
static void fake_step(struct fake_runner *f) {
    char err[200];
    uint64_t start = clock_now_us();
    int n = f->n_active;
    for (int i = f->n_active - 1; i >= 0; i--)
        if (fake_token(f, &f->active[i])) f->active[i] = f->active[--f->n_active];
    struct runner_heartbeat beat = {.step = f->step++,
                                    .start_us = start,
                                    .end_us = clock_now_us(),
                                    .n_tokens = n,
                                    .n_decode = n,
                                    .n_sequences = n,
                                    .n_running = f->n_active,
                                    .kv_blocks_used = f->n_active,
                                    .kv_blocks_total = 1024};
    runner_encode_heartbeat(&f->out, &beat, err, sizeof(err));
    fake_flush(f);
}

/* Accepts the supervisor's one connection, blocking from then on. */
static int fake_accept(const char *address) {
    char err[200];
    int listener = runner_listen(address, err, sizeof(err));
    if (listener < 0) {
        fprintf(stderr, "fake_runner: %s\n", err);
        exit(2);
    }
    struct pollfd p = {listener, POLLIN, 0};
    if (poll(&p, 1, FAKE_ACCEPT_MS) <= 0) exit(3);
    int fd = accept(listener, NULL, NULL);
    close(listener);
    if (fd < 0) exit(3);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

/* Takes what it needs of the runner's options and passes over the rest. */
static const char *fake_options(int argc, char **argv, struct fake_runner *f) {
    const char *address = NULL;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--socket"))
            address = argv[++i];
        else if (!strcmp(argv[i], "--tp"))
            f->tp = atoi(argv[++i]);
    }
    return address;
}

int main(int argc, char **argv) {
    struct fake_runner f = {.fd = -1};
    const char *address = fake_options(argc, argv, &f);
    if (!address) {
        fprintf(stderr, "usage: fake_runner runner -m MODEL --socket ADDRESS [...]\n");
        return 2;
    }
    fake_configure(&f);
    f.fd = fake_accept(address);
    fake_hello(&f);
    for (;;) {
        int busy = f.n_active > 0;
        struct pollfd p = {f.fd, POLLIN, 0};
        int ready = poll(&p, 1, busy ? f.step_ms : -1);
        if (ready > 0) fake_receive(&f);
        if (busy && ready == 0) fake_step(&f);
    }
}
