/* chaos_faults.c -- bench/chaos_tool's fault injector and /health monitor.
 *
 * The injector starts a fault every fault_every seconds. Kinds are drawn
 * in rounds: every kind once in a shuffled order, then kill, stop, stall,
 * delay and close once more, shuffled, so that a short run (nine faults)
 * still meets every kind. The instance and the rank are drawn at random
 * among the ready ones that are not still recovering from an earlier
 * fault. Kinds:
 *   - kill, stop, stall, delay, close: POST /debug/fault on a runner's rank;
 *   - refuse+kill: the next starts are refused, then a rank is killed;
 *   - stop+flood: a rank is stopped and, at once, options->flood
 *     long-prompt requests arrive for it: GET /health must keep answering
 *     within CHAOS_HEALTH_LIMIT, the watchdog must replace the runner, and
 *     every answer must equal the fault-free flood's (issue 21's freeze);
 *   - stop-cancel: streams with a stop string their output contains leave
 *     as soon as the chunk with finish_reason arrives; their text must be
 *     the reference's up to the stop string, and no runner restart may
 *     follow (a cancel the gateway mishandles leaves a request behind that
 *     makes the next runners look stuck);
 *   - half-open: connections send part of a request and close at once; the
 *     gateway must not keep their sockets (it counts its open files).
 * The last three send requests or connections of their own: a worker
 * thread does it (one at a time, on an instance no other fault touches
 * meanwhile, so that what follows is theirs) and checks what follows.
 *
 * The monitor reads GET /health every 100 ms and timestamps, for every
 * fault that must replace the runner, when the gateway noticed (the
 * instance is not ready, or has a new runner pid) and when a new runner
 * was ready: the client-side detection and recovery times, an independent
 * check of the gateway's own histograms. */
#include "chaos.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHAOS_KINDS        9                             /* distinct kinds */
#define CHAOS_REPEATS      5                             /* kinds a round holds twice */
#define CHAOS_BAG          (CHAOS_KINDS + CHAOS_REPEATS) /* faults in one round */
#define CHAOS_HEALTH_LIMIT 1.0 /* seconds GET /health may take while a runner is stopped */
#define CHAOS_FD_SLACK     16  /* open files half-open may leave (other clients come and go) */
#define CHAOS_FD_SETTLE    3.0 /* seconds after the half-open connections closed */
#define CHAOS_STOP_SKIP    4   /* bytes of the reference before a stop string may start */
#define CHAOS_STOP_LENGTH  3   /* bytes of a stop string */
#define CHAOS_THREAD_STACK (1 << 20) /* bytes: flood threads only wait on a socket */
/* seconds a delay fault may still slow its runner: up to 40 steps of 24
 * collectives (the 85M model) each delayed up to 20 ms */
#define CHAOS_DELAY_QUIET 20.0

/* Every kind, in the order of the faults' table. */
static const char *const chaos_kinds[CHAOS_KINDS] = {"kill",       "stop",        "stall",
                                                     "delay",      "close",       "refuse+kill",
                                                     "stop+flood", "stop-cancel", "half-open"};
static const char *const chaos_repeats[CHAOS_REPEATS] = {"kill", "stop", "stall", "delay", "close"};

static void sleep_seconds(double seconds) {
    if (seconds <= 0) return;
    struct timespec t = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&t, NULL);
}

static int is_kind(const struct chaos_fault *f, const char *kind) {
    return strcmp(f->kind, kind) == 0;
}

/* 1 for the kinds whose worker sends requests or connections. */
static int has_worker(const char *kind) {
    return !strcmp(kind, "stop+flood") || !strcmp(kind, "stop-cancel") ||
           !strcmp(kind, "half-open");
}

/* 1 for the kinds after which a new runner must come. */
static int is_disruptive(const char *kind) {
    return strcmp(kind, "delay") != 0 && strcmp(kind, "stop-cancel") != 0 &&
           strcmp(kind, "half-open") != 0;
}

/* ------------------------------------------------------------- monitor */

/* What a new /health of model m says about its pending faults (lock held). */
static void update_faults(struct chaos_run *run, int m, const struct loadgen_health_model *h,
                          double now) {
    for (int i = 0; i < run->n_faults; i++) {
        struct chaos_fault *f = &run->faults[i];
        if (f->model != m || !f->disruptive || f->status != 200 || f->recovered_at > 0) continue;
        int replaced = h->pid > 0 && h->pid != f->pid_before;
        if (f->detected_at == 0 && (!h->ready || replaced)) f->detected_at = now;
        if (h->ready && replaced) f->recovered_at = now;
    }
}

void *chaos_monitor_main(void *arg) {
    struct chaos_run *run = arg;
    const struct chaos_options *o = run->options;
    while (!atomic_load(&run->stopping)) {
        struct loadgen_health_model models[LOADGEN_MODELS_MAX];
        char err[LOADGEN_ERROR_MAX];
        int n = loadgen_health(o->port, loadgen_now() + 5, models, LOADGEN_MODELS_MAX, err,
                               sizeof(err));
        double now = chaos_elapsed(run);
        pthread_mutex_lock(&run->lock);
        for (int i = 0; i < n; i++) {
            for (int m = 0; m < CHAOS_MODELS; m++) {
                if (strcmp(models[i].name, o->names[m]) != 0) continue;
                struct loadgen_health_model *was = &run->health[m];
                if (models[i].ready && !was->ready && was->name[0])
                    fprintf(stderr, "[%7.1f s] %s ready again (runner pid %ld, restarts %d)\n", now,
                            o->names[m], models[i].pid, models[i].restarts);
                if (!models[i].ready && was->ready)
                    fprintf(stderr, "[%7.1f s] %s not ready: %s\n", now, o->names[m],
                            models[i].status);
                *was = models[i];
                update_faults(run, m, &models[i], now);
            }
        }
        pthread_mutex_unlock(&run->lock);
        if (n < 0) chaos_log(run, "monitor: %s", err);
        sleep_seconds(0.1);
    }
    return NULL;
}

/* --------------------------------------------------------------- flood */

/* One request of a flood, in a thread of its own. */
struct flood_request {
    struct chaos_run *run;
    int model, index;      /* the instance, and the flood item */
    double sent, deadline; /* loadgen_now() */
    atomic_int *finished;  /* counts the requests that have their answer */
    int rc, late;          /* loadgen_http's result; 1: it gave up at the deadline */
    struct loadgen_reply reply;
    char error[LOADGEN_ERROR_MAX];
    pthread_t thread;
};

static void *flood_request_main(void *arg) {
    struct flood_request *q = arg;
    const struct chaos_options *o = q->run->options;
    const struct chaos_item *item = &q->run->flood_items[q->index];
    size_t size = strlen(item->prompt) + 200;
    char *body = malloc(size);
    q->rc = -1;
    q->sent = loadgen_now();
    if (body) {
        snprintf(body, size,
                 "{\"model\":\"%s\",\"prompt\":[%s],\"max_tokens\":%d,\"temperature\":0}",
                 o->names[q->model], item->prompt, item->max_tokens);
        q->rc = loadgen_http(o->port, "POST", "/v1/completions", body, q->deadline, &q->reply,
                             q->error, sizeof(q->error));
        q->late = q->rc != 0 && loadgen_now() >= q->deadline;
    } else {
        snprintf(q->error, sizeof(q->error), "out of memory for the request");
    }
    free(body);
    atomic_fetch_add(q->finished, 1);
    return NULL;
}

/* Times GET /health every 100 ms until `finished` reaches n (or `until`). */
static void watch_health(struct chaos_run *run, atomic_int *finished, int n, double until,
                         struct chaos_health_watch *health) {
    while (atomic_load(finished) < n && loadgen_now() < until) {
        struct loadgen_health_model models[LOADGEN_MODELS_MAX];
        char err[LOADGEN_ERROR_MAX];
        double asked = loadgen_now();
        int got = loadgen_health(run->options->port, asked + 5, models, LOADGEN_MODELS_MAX, err,
                                 sizeof(err));
        double took = loadgen_now() - asked;
        health->probes++;
        if (took > health->worst) health->worst = took;
        if (took > CHAOS_HEALTH_LIMIT) chaos_log(run, "flood: GET /health took %.2f s", took);
        if (got < 0) {
            health->failed++;
            chaos_log(run, "flood: GET /health: %s", err);
        }
        sleep_seconds(asked + 0.1 - loadgen_now());
    }
}

/* The answer's text, finish_reason and completion tokens (in place), or
 * why there are none. */
static int flood_answer(const struct flood_request *q, char **text, char *finish, size_t size,
                        int *tokens, char *why, size_t whylen) {
    cJSON *root = q->reply.status == 200 ? cJSON_Parse(q->reply.body) : NULL;
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(root, "usage");
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(choice, "text"));
    const char *f = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(choice, "finish_reason"));
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
    *text = t ? strdup(t) : NULL;
    snprintf(finish, size, "%s", f ? f : "");
    *tokens = cJSON_IsNumber(n) ? n->valueint : -1;
    cJSON_Delete(root);
    if (*text) return 0;
    snprintf(why, whylen, "HTTP %d without a completion's text: %.200s", q->reply.status,
             q->reply.body ? q->reply.body : "");
    return -1;
}

/* Counts one flood answer: recorded as the reference, or checked against it. */
static void judge_flood(struct chaos_run *run, struct flood_request *q, int record,
                        struct chaos_requests *out) {
    char why[LOADGEN_ERROR_MAX] = "", finish[LOADGEN_FINISH_MAX], request[96];
    const char *what = NULL;
    char *text = NULL;
    int tokens = 0;
    out->sent++;
    if (q->rc) {
        what = q->late ? "late" : "failed";
        snprintf(why, sizeof(why), "%s", q->error);
    } else if (flood_answer(q, &text, finish, sizeof(finish), &tokens, why, sizeof(why))) {
        what = "failed";
    } else {
        enum chaos_verdict v = chaos_check_output(run, &run->flood_items[q->index], q->model, text,
                                                  finish, tokens, record, why, sizeof(why));
        what = v == CHAOS_DIFFERENT ? "wrong" : v == CHAOS_UNVERIFIED ? "unverified" : NULL;
    }
    out->completed += what == NULL;
    out->failed += what && !strcmp(what, "failed");
    out->late += what && !strcmp(what, "late");
    out->wrong += what && !strcmp(what, "wrong");
    out->unverified += what && !strcmp(what, "unverified");
    snprintf(request, sizeof(request), "%s flood item %d%s", run->options->names[q->model],
             q->index, record ? " (fault-free reference)" : "");
    if (what) chaos_log_failure(run, what, request, q->sent, tokens > 0 ? tokens : 0, why);
    free(text);
}

int chaos_flood(struct chaos_run *run, int model, int record, struct chaos_requests *out,
                struct chaos_health_watch *health) {
    const struct chaos_options *o = run->options;
    int first = model < 0 ? 0 : model, n = (model < 0 ? CHAOS_MODELS : 1) * o->flood;
    int started = 0;
    atomic_int finished = 0;
    struct flood_request *q = calloc((size_t)n, sizeof(*q));
    pthread_attr_t attr;
    if (!q || pthread_attr_init(&attr)) {
        free(q);
        return -1;
    }
    pthread_attr_setstacksize(&attr, CHAOS_THREAD_STACK);
    double deadline = loadgen_now() + o->deadline;
    for (; started < n; started++) {
        q[started] = (struct flood_request){.run = run,
                                            .model = first + started / o->flood,
                                            .index = started % o->flood,
                                            .deadline = deadline,
                                            .finished = &finished};
        if (pthread_create(&q[started].thread, &attr, flood_request_main, &q[started])) break;
    }
    pthread_attr_destroy(&attr);
    /* the requests give up at the deadline: a little more lets the last answers come */
    watch_health(run, &finished, started, deadline + 10, health);
    for (int k = 0; k < started; k++) {
        pthread_join(q[k].thread, NULL);
        judge_flood(run, &q[k], record, &out[q[k].model]);
        loadgen_reply_free(&q[k].reply);
    }
    for (int k = started; k < n; k++) { /* never sent: failed all the same */
        out[first + k / o->flood].sent++;
        out[first + k / o->flood].failed++;
    }
    if (started < n)
        chaos_log(run, "flood: %d of %d request threads did not start", n - started, n);
    free(q);
    return started < n ? -1 : 0;
}

/* --------------------------------------------------------- stop-cancel */

/* One stream of a stop-cancel fault. */
struct cancel_stream {
    struct chaos_run *run;
    int model, item;
    char stop[CHAOS_STOP_LENGTH + 1];
    char *expected;  /* the reference up to the stop string's first occurrence (owned) */
    double deadline; /* loadgen_now() */
    int rc;          /* loadgen_complete's */
    struct loadgen_result result;
    pthread_t thread;
};

static void *cancel_stream_main(void *arg) {
    struct cancel_stream *c = arg;
    const struct chaos_options *o = c->run->options;
    const struct chaos_item *item = &c->run->items[c->item];
    struct loadgen_request request = {.model = o->names[c->model],
                                      .prompt = item->prompt,
                                      .seed = item->seed,
                                      .max_tokens = item->max_tokens,
                                      .temperature = 0.8,
                                      .stop = c->stop,
                                      .leave_at_finish = 1};
    c->rc = loadgen_complete(o->port, &request, c->deadline, &c->result);
    return NULL;
}

/* 1 if the CHAOS_STOP_LENGTH bytes at p are printable ASCII, not all
 * blanks: a stop string that cuts no multi-byte character. */
static int stop_candidate(const char *p) {
    int blanks = 0;
    for (int i = 0; i < CHAOS_STOP_LENGTH; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch < 0x20 || ch > 0x7e) return 0;
        blanks += ch == ' ';
    }
    return blanks < CHAOS_STOP_LENGTH;
}

/* A stop string from a random place of the reference after its first
 * CHAOS_STOP_SKIP bytes, so the output is known to contain it; -1 if none
 * is there. */
static int stop_window(const char *reference, uint64_t *rng, char *stop) {
    size_t n = strlen(reference);
    int candidates = 0;
    for (size_t p = CHAOS_STOP_SKIP; p + CHAOS_STOP_LENGTH <= n; p++)
        candidates += stop_candidate(reference + p);
    if (candidates == 0) return -1;
    int chosen = loadgen_random_range(rng, 0, candidates - 1);
    for (size_t p = CHAOS_STOP_SKIP; p + CHAOS_STOP_LENGTH <= n; p++) {
        if (!stop_candidate(reference + p) || chosen-- > 0) continue;
        memcpy(stop, reference + p, CHAOS_STOP_LENGTH);
        stop[CHAOS_STOP_LENGTH] = '\0';
        return 0;
    }
    return -1;
}

/* Prepares stream c on item i (with a reference on its instance); 0 or -1. */
static int cancel_prepare(struct cancel_stream *c, uint64_t *rng) {
    struct chaos_run *run = c->run;
    pthread_mutex_lock(&run->lock);
    const char *reference = run->items[c->item].reference[c->model];
    char *copy = reference ? strdup(reference) : NULL;
    pthread_mutex_unlock(&run->lock);
    if (copy && stop_window(copy, rng, c->stop) == 0)
        c->expected = strndup(copy, (size_t)(strstr(copy, c->stop) - copy));
    free(copy);
    return c->expected ? 0 : -1;
}

/* Starts up to options->cancels streams on instance m, on the items with
 * a reference there in turn from a random one (an item may come twice,
 * with another stop string); the number started. */
static int cancel_start(struct chaos_run *run, int m, uint64_t *rng, struct cancel_stream *s) {
    const struct chaos_options *o = run->options;
    int started = 0, first = loadgen_random_range(rng, 0, o->n_items - 1);
    double deadline = loadgen_now() + o->deadline;
    for (int k = 0; started < o->cancels && k < 4 * o->cancels + o->n_items; k++) {
        struct cancel_stream *c = &s[started];
        *c = (struct cancel_stream){
            .run = run, .model = m, .item = (first + k) % o->n_items, .deadline = deadline};
        if (cancel_prepare(c, rng)) continue;
        if (pthread_create(&c->thread, NULL, cancel_stream_main, c)) {
            free(c->expected);
            break;
        }
        started++;
    }
    return started;
}

/* Counts one stream: it must end with finish_reason "stop" and exactly the
 * reference's text up to the stop string. */
static void cancel_judge(struct chaos_run *run, struct cancel_stream *c,
                         struct chaos_requests *out) {
    const struct loadgen_result *r = &c->result;
    char why[LOADGEN_ERROR_MAX] = "", request[160];
    const char *what = NULL;
    out->sent++;
    if (c->rc || r->outcome != LOADGEN_OK) {
        what = !c->rc && r->outcome == LOADGEN_LATE ? "late" : "failed";
        snprintf(why, sizeof(why), "%s", c->rc ? "out of memory" : r->error);
    } else if (strcmp(r->finish_reason, "stop") != 0 || strcmp(r->text, c->expected) != 0) {
        what = "wrong";
        snprintf(why, sizeof(why),
                 "finish_reason %s and text '%.60s' (%zu bytes), expected stop and '%.60s' "
                 "(%zu bytes)",
                 r->finish_reason, r->text, strlen(r->text), c->expected, strlen(c->expected));
    }
    out->completed += what == NULL;
    out->failed += what && !strcmp(what, "failed");
    out->late += what && !strcmp(what, "late");
    out->wrong += what && !strcmp(what, "wrong");
    snprintf(request, sizeof(request), "%s item %d with stop \"%s\" (left at its finish)",
             run->options->names[c->model], c->item, c->stop);
    if (what) chaos_log_failure(run, what, request, r->sent, r->chunks, why);
}

/* The streams of a stop-cancel fault on instance m, all at once; the
 * number sent (0: no reference had a stop string to take). */
static int stop_cancel(struct chaos_run *run, int m, uint64_t *rng, struct chaos_requests *out) {
    struct cancel_stream *s = calloc((size_t)run->options->cancels, sizeof(*s));
    if (!s) return 0;
    int started = cancel_start(run, m, rng, s);
    for (int k = 0; k < started; k++) {
        pthread_join(s[k].thread, NULL);
        cancel_judge(run, &s[k], out);
        loadgen_result_free(&s[k].result);
        free(s[k].expected);
    }
    free(s);
    return started;
}

/* Watches instance m's /health for `seconds`: what changed (a restart, a
 * new runner, not ready, no answer) in `what`, "" when nothing did. */
static void watch_instance(struct chaos_run *run, int m, const struct chaos_fault *f,
                           double seconds, char *what, size_t size) {
    const struct chaos_options *o = run->options;
    double end = loadgen_now() + seconds;
    what[0] = '\0';
    while (loadgen_now() < end && !what[0]) {
        struct loadgen_health_model models[LOADGEN_MODELS_MAX];
        char err[LOADGEN_ERROR_MAX];
        double asked = loadgen_now();
        int n = loadgen_health(o->port, asked + 5, models, LOADGEN_MODELS_MAX, err, sizeof(err));
        if (n < 0) snprintf(what, size, "GET /health: %.200s", err);
        for (int i = 0; i < n; i++) {
            const struct loadgen_health_model *h = &models[i];
            if (strcmp(h->name, o->names[m]) != 0) continue;
            if (h->restarts != f->restarts_before || h->pid != f->pid_before)
                snprintf(what, size, "a runner restart followed: restarts %d -> %d, pid %ld -> %ld",
                         f->restarts_before, h->restarts, f->pid_before, h->pid);
            else if (!h->ready)
                snprintf(what, size, "not ready: %.100s", h->status);
        }
        sleep_seconds(asked + 0.1 - loadgen_now());
    }
}

/* 1 if a delay fault hit instance m within the last `seconds` (its slowed
 * steps may still trip the watchdog: not the stop-cancel's doing). */
static int recent_delay(struct chaos_run *run, int m, double seconds) {
    int recent = 0;
    double since = chaos_elapsed(run) - seconds;
    pthread_mutex_lock(&run->lock);
    for (int i = 0; i < run->n_faults; i++) {
        const struct chaos_fault *f = &run->faults[i];
        recent |= f->model == m && f->status == 200 && is_kind(f, "delay") && f->at >= since;
    }
    pthread_mutex_unlock(&run->lock);
    return recent;
}

/* ------------------------------------------------------------ half-open */

/* The open files of process pid, -1 if /proc does not say. */
static int open_files(int pid) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    for (const struct dirent *e = readdir(d); e; e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A connection to the gateway (connect waits 2 s at most), or -1. */
static int connect_gateway(int port) {
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct timeval timeout = {.tv_sec = 2};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    if (connect(fd, (const struct sockaddr *)&address, sizeof(address)) == 0) return fd;
    close(fd);
    return -1;
}

/* Opens n connections, sends each the head of a request and the start of
 * its body, then closes them all: the number opened. */
static int half_open_burst(int port, int n) {
    static const char partial[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                  "Content-Length: 100\r\n\r\n{\"mo";
    int *fds = malloc((size_t)n * sizeof(int)), opened = 0;
    if (!fds) return 0;
    for (int i = 0; i < n; i++) {
        int fd = connect_gateway(port);
        if (fd >= 0) fds[opened++] = fd;
    }
    /* a send that fails (the gateway closed first) leaves a connection as half-open */
    for (int i = 0; i < opened; i++)
        send(fds[i], partial, sizeof(partial) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    for (int i = 0; i < opened; i++) close(fds[i]);
    free(fds);
    return opened;
}

/* The gateway's open files around the burst: the most of a few reads
 * before, the fewest over a second from CHAOS_FD_SETTLE s after (the
 * clients' own connections come and go meanwhile); -1 if unknown. */
static void count_around_burst(struct chaos_run *run, int *before, int *after, int *opened) {
    int pid = run->options->gateway_pid;
    *before = *after = -1;
    for (int i = 0; pid > 0 && i < 3; i++, sleep_seconds(0.05)) {
        int n = open_files(pid);
        if (n > *before) *before = n;
    }
    *opened = half_open_burst(run->options->port, run->options->half_open);
    double closed = loadgen_now();
    sleep_seconds(closed + CHAOS_FD_SETTLE - loadgen_now());
    for (int i = 0; pid > 0 && i < 10; i++, sleep_seconds(0.1)) {
        int n = open_files(pid);
        if (n >= 0 && (*after < 0 || n < *after)) *after = n;
    }
}

/* --------------------------------------------------------------- workers */

/* Ends a fault's work with what it measured (takes the lock). */
static void finish_work(struct chaos_run *run, int fault, const struct chaos_requests *requests,
                        int failed, const char *note) {
    pthread_mutex_lock(&run->lock);
    struct chaos_fault *f = &run->faults[fault];
    if (requests) f->requests = *requests;
    f->check_failed = failed;
    snprintf(f->note, sizeof(f->note), "%s", note);
    f->working = 0;
    fprintf(stderr, "[%7.1f s] %s on %s: %s%s\n", chaos_elapsed(run), f->kind,
            f->model >= 0 ? run->options->names[f->model] : "the gateway", note,
            failed ? " (FAILED)" : "");
    pthread_mutex_unlock(&run->lock);
}

/* stop+flood, once the rank is stopped: the flood, timing /health. */
static void *flood_main(void *arg) {
    const struct chaos_work *w = arg;
    struct chaos_run *run = w->run;
    int m = run->faults[w->fault].model; /* set before this thread started */
    struct chaos_requests out[CHAOS_MODELS] = {{0}};
    struct chaos_health_watch health = {0};
    char note[CHAOS_NOTE_MAX];
    int rc = chaos_flood(run, m, 0, out, &health);
    int failed = rc || health.worst > CHAOS_HEALTH_LIMIT || health.failed > 0;
    snprintf(note, sizeof(note),
             "GET /health at worst %.3f s (limit %.1f s) in %d probes, %d unanswered; %ld of %ld "
             "requests gave their reference",
             health.worst, CHAOS_HEALTH_LIMIT, health.probes, health.failed, out[m].completed,
             out[m].sent);
    pthread_mutex_lock(&run->lock);
    run->faults[w->fault].health = health;
    pthread_mutex_unlock(&run->lock);
    finish_work(run, w->fault, &out[m], failed, note);
    return NULL;
}

/* stop-cancel: the streams, then the instance watched for a restart. */
static void *cancel_main(void *arg) {
    const struct chaos_work *w = arg;
    struct chaos_run *run = w->run;
    const struct chaos_fault *f = &run->faults[w->fault]; /* read-only fields */
    struct chaos_requests out = {0};
    uint64_t rng = w->rng;
    char changed[LOADGEN_ERROR_MAX], note[CHAOS_NOTE_MAX];
    int m = f->model, sent = stop_cancel(run, m, &rng, &out);
    /* a request the cancel left behind makes an idle runner look stuck after the watchdog */
    double window = run->options->watchdog + 2 > 3 ? run->options->watchdog + 2 : 3;
    watch_instance(run, m, f, window, changed, sizeof(changed));
    int excused = changed[0] && recent_delay(run, m, CHAOS_DELAY_QUIET);
    snprintf(note, sizeof(note),
             "%d streams left at their stop string, %ld with its text; %.0f s "
             "after: %.80s%s",
             sent, out.completed, window, changed[0] ? changed : "ready, same runner",
             excused ? " (not counted: a delay fault hit it shortly before)" : "");
    finish_work(run, w->fault, &out, sent == 0 || (changed[0] && !excused), note);
    return NULL;
}

/* half-open: the burst of half-sent requests, and the gateway's files. */
static void *half_open_main(void *arg) {
    const struct chaos_work *w = arg;
    struct chaos_run *run = w->run;
    const struct chaos_options *o = run->options;
    int before, after, opened;
    char note[CHAOS_NOTE_MAX];
    count_around_burst(run, &before, &after, &opened);
    int counted = before >= 0 && after >= 0;
    int failed = opened < o->half_open || (o->gateway_pid > 0 && !counted) ||
                 (counted && after - before > CHAOS_FD_SLACK);
    if (counted)
        snprintf(note, sizeof(note),
                 "%d of %d connections half-sent and closed; gateway files %d before, %d %.0f s "
                 "after (%+d, limit +%d)",
                 opened, o->half_open, before, after, CHAOS_FD_SETTLE, after - before,
                 CHAOS_FD_SLACK);
    else
        snprintf(note, sizeof(note), "%d of %d connections half-sent and closed; gateway files %s",
                 opened, o->half_open,
                 o->gateway_pid > 0 ? "unreadable in /proc" : "not counted (no --gateway-pid)");
    finish_work(run, w->fault, NULL, failed, note);
    return NULL;
}

/* ------------------------------------------------------------ injector */

/* Posts one fault; the HTTP status (0 if nothing answered), with the
 * answer's text in err when it is not 200. */
static int post_fault(struct chaos_run *run, const char *model, const char *kind, int rank,
                      int delay_ms, int steps, int count, char *err, size_t errlen) {
    char body[512];
    struct loadgen_reply reply;
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"kind\":\"%s\",\"rank\":%d,\"delay_ms\":%d,\"steps\":%d,"
             "\"count\":%d}",
             model, kind, rank, delay_ms, steps, count);
    if (loadgen_http(run->options->port, "POST", "/debug/fault", body, loadgen_now() + 10, &reply,
                     err, errlen))
        return 0;
    int status = reply.status;
    if (status != 200) snprintf(err, errlen, "HTTP %d: %.200s", status, reply.body);
    loadgen_reply_free(&reply);
    return status;
}

/* 1 while fault f still waits for its recovery (lock held). */
static int pending(const struct chaos_fault *f) {
    return f->disruptive && f->status == 200 && f->recovered_at == 0;
}

/* 1 if instance m is still recovering from a fault (takes the lock). */
static int recovering(struct chaos_run *run, int m) {
    int busy = 0;
    pthread_mutex_lock(&run->lock);
    for (int i = 0; i < run->n_faults; i++)
        busy |= run->faults[i].model == m && pending(&run->faults[i]);
    pthread_mutex_unlock(&run->lock);
    return busy;
}

/* 1 if a worker runs on instance m (-1: half-open's), or anywhere when
 * `anywhere` is set (takes the lock). */
static int working(struct chaos_run *run, int m, int anywhere) {
    int busy = 0;
    pthread_mutex_lock(&run->lock);
    for (int i = 0; i < run->n_faults; i++)
        busy |= run->faults[i].working && (anywhere || run->faults[i].model == m);
    pthread_mutex_unlock(&run->lock);
    return busy;
}

/* 1 if instance m may take a fault now: no earlier fault still recovering
 * (a second fault on a runner not yet replaced would only blur both
 * measurements), no worker watching what follows its own, and, when
 * `quiet`, no delay fault shortly before. */
static int available(struct chaos_run *run, int m, int quiet) {
    return !recovering(run, m) && !working(run, m, 0) &&
           !(quiet && recent_delay(run, m, CHAOS_DELAY_QUIET));
}

/* Picks the instance to hit: a random available one whose runner is
 * ready now (a fresh /health, so pid_before is exact), preferring a quiet
 * one when `quiet`; -1 when none is. */
static int pick_model(struct chaos_run *run, uint64_t *rng, int quiet,
                      struct loadgen_health_model *picked) {
    const struct chaos_options *o = run->options;
    struct loadgen_health_model models[LOADGEN_MODELS_MAX];
    char err[LOADGEN_ERROR_MAX];
    int n =
        loadgen_health(o->port, loadgen_now() + 5, models, LOADGEN_MODELS_MAX, err, sizeof(err));
    int first = loadgen_random_range(rng, 0, CHAOS_MODELS - 1);
    for (int strict = quiet; strict >= 0; strict--) {
        for (int k = 0; k < CHAOS_MODELS; k++) {
            int m = (first + k) % CHAOS_MODELS;
            for (int i = 0; i < n; i++) {
                if (!strcmp(models[i].name, o->names[m]) && models[i].ready && models[i].pid > 0 &&
                    available(run, m, strict)) {
                    *picked = models[i];
                    return m;
                }
            }
        }
    }
    return -1;
}

/* Posts what fault f needs: the HTTP status of /debug/fault (200 for the
 * faults a client makes, which post nothing). */
static int post(struct chaos_run *run, struct chaos_fault *f, uint64_t *rng, int delay_ms,
                int steps) {
    const char *model = f->model >= 0 ? run->options->names[f->model] : "";
    if (is_kind(f, "stop-cancel") || is_kind(f, "half-open")) return 200;
    if (is_kind(f, "refuse+kill")) {
        int count = loadgen_random_range(rng, 1, 2);
        int status = post_fault(run, model, "refuse", 0, 0, 0, count, f->error, sizeof(f->error));
        if (status != 200) return status;
        return post_fault(run, model, "kill", f->rank, 0, 0, 0, f->error, sizeof(f->error));
    }
    /* stop+flood stops the rank; its worker sends the flood right after */
    return post_fault(run, model, is_kind(f, "stop+flood") ? "stop" : f->kind, f->rank, delay_ms,
                      steps, 0, f->error, sizeof(f->error));
}

/* Starts the worker of fault `index` (the previous one has finished). */
static void start_worker(struct chaos_injector *injector, int index, uint64_t seed) {
    struct chaos_run *run = injector->run;
    const struct chaos_fault *f = &run->faults[index]; /* its kind stays */
    void *(*work)(void *) = is_kind(f, "stop+flood")    ? flood_main
                            : is_kind(f, "stop-cancel") ? cancel_main
                                                        : half_open_main;
    if (injector->has_worker) pthread_join(injector->worker, NULL);
    injector->has_worker = 0;
    injector->work = (struct chaos_work){.run = run, .fault = index, .rng = seed};
    if (pthread_create(&injector->worker, NULL, work, &injector->work) == 0) {
        injector->has_worker = 1;
        return;
    }
    finish_work(run, index, NULL, 1, "its worker thread could not start");
}

/* Records fault f and starts its worker, if it has one. */
static void record(struct chaos_injector *injector, const struct chaos_fault *f, uint64_t *rng) {
    struct chaos_run *run = injector->run;
    const struct chaos_options *o = run->options;
    int index = -1;
    pthread_mutex_lock(&run->lock);
    if (run->n_faults < CHAOS_FAULTS_MAX) {
        index = run->n_faults++;
        run->faults[index] = *f;
        run->faults[index].working = f->worker && f->status == 200;
    }
    if (f->model >= 0)
        fprintf(stderr, "[%7.1f s] fault %s on %s rank %d (runner pid %ld): %s\n", f->at, f->kind,
                o->names[f->model], f->rank, f->pid_before,
                f->status == 200 ? "injected" : f->error);
    else
        fprintf(stderr, "[%7.1f s] fault %s on the gateway (pid %d)\n", f->at, f->kind,
                o->gateway_pid);
    int start = index >= 0 && run->faults[index].working;
    pthread_mutex_unlock(&run->lock);
    if (start) start_worker(injector, index, loadgen_random(rng));
}

/* Injects one fault of `kind` and records it; -1 (nothing recorded) when
 * it cannot be placed now: no runner is ready to take it, or it has a
 * worker and another worker still runs. */
static int inject(struct chaos_injector *injector, uint64_t *rng, const char *kind) {
    struct chaos_run *run = injector->run;
    const struct chaos_options *o = run->options;
    struct chaos_fault f = {.phase = run->phase, .model = -1};
    struct loadgen_health_model h = {0};
    snprintf(f.kind, sizeof(f.kind), "%s", kind);
    f.worker = has_worker(kind);
    f.disruptive = is_disruptive(kind);
    /* one worker at a time: the gateway's files and limits then tell one story */
    if (f.worker && working(run, -1, 1)) return -1;
    if (!is_kind(&f, "half-open")) {
        f.model = pick_model(run, rng, is_kind(&f, "stop-cancel"), &h);
        if (f.model < 0) return -1;
    }
    int delay_ms = loadgen_random_range(rng, 1, o->delay_ms);
    int steps = loadgen_random_range(rng, 10, 40);
    f.rank = f.model >= 0 ? loadgen_random_range(rng, 0, o->tp[f.model] - 1) : 0;
    f.pid_before = h.pid;
    f.restarts_before = h.restarts;
    f.at = chaos_elapsed(run);
    f.status = post(run, &f, rng, delay_ms, steps);
    record(injector, &f, rng);
    return 0;
}

static void shuffle(const char **kinds, int n, uint64_t *rng) {
    for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int j = loadgen_random_range(rng, 0, i);
        const char *kind = kinds[i];
        kinds[i] = kinds[j];
        kinds[j] = kind;
    }
}

/* A new round: every kind once, shuffled, then the repeats, shuffled. */
static void new_round(const char **bag, uint64_t *rng) {
    memcpy(bag, chaos_kinds, sizeof(chaos_kinds));
    memcpy(bag + CHAOS_KINDS, chaos_repeats, sizeof(chaos_repeats));
    shuffle(bag, CHAOS_KINDS, rng);
    shuffle(bag + CHAOS_KINDS, CHAOS_REPEATS, rng);
}

void *chaos_injector_main(void *arg) {
    struct chaos_injector *injector = arg;
    struct chaos_run *run = injector->run;
    const struct chaos_options *o = run->options;
    uint64_t rng = o->seed ^ 0x6661756c74ULL; /* the faults' own stream */
    const char *bag[CHAOS_BAG];
    int drawn = CHAOS_BAG;
    double next = loadgen_now() + o->fault_every;
    while (next < injector->end) {
        sleep_seconds(next - loadgen_now());
        if (drawn == CHAOS_BAG) {
            new_round(bag, &rng);
            drawn = 0;
        }
        if (inject(injector, &rng, bag[drawn]) == 0) {
            drawn++;
            next += o->fault_every;
            continue;
        }
        /* it cannot be placed now: the next kind first, this one soon after */
        if (drawn + 1 < CHAOS_BAG) {
            const char *kind = bag[drawn];
            bag[drawn] = bag[drawn + 1];
            bag[drawn + 1] = kind;
        }
        next = loadgen_now() + 0.5;
    }
    if (injector->has_worker) pthread_join(injector->worker, NULL); /* its waits have deadlines */
    injector->has_worker = 0;
    return NULL;
}

/* ------------------------------------------------------------- results */

void chaos_wait_recovered(struct chaos_run *run) {
    double limit = run->options->recovery_limit;
    for (;;) {
        int waiting = 0;
        double now = chaos_elapsed(run);
        pthread_mutex_lock(&run->lock);
        for (int i = 0; i < run->n_faults; i++) {
            if (!pending(&run->faults[i])) continue;
            waiting += now - run->faults[i].at <= limit;
        }
        pthread_mutex_unlock(&run->lock);
        if (waiting == 0) return;
        sleep_seconds(0.1);
    }
}

/* Median and maximum of a fault kind's times, "-" when there is none. */
static void format_times(struct loadgen_samples *s, char *out, size_t size) {
    if (s->n == 0) {
        snprintf(out, size, "-");
        return;
    }
    double median = loadgen_samples_percentile(s, 50), max = loadgen_samples_percentile(s, 100);
    snprintf(out, size, "%.2f / %.2f", median, max);
}

/* One kind's row of the faults' table (lock held); adds to the summary. */
static void print_kind(struct chaos_run *run, const char *kind,
                       struct chaos_fault_summary *summary) {
    struct loadgen_samples detection = {0}, recovery = {0};
    int injected = 0, refused = 0, recovered = 0, missing = 0, checks = 0, failed = 0;
    char d[64], r[64], c[16];
    for (int i = 0; i < run->n_faults; i++) {
        const struct chaos_fault *f = &run->faults[i];
        if (!is_kind(f, kind)) continue;
        if (f->status != 200) {
            refused++;
            continue;
        }
        injected++;
        checks += f->check_failed || f->working; /* a worker that never finished failed too */
        if (!f->disruptive) continue;
        if (f->recovered_at == 0) {
            missing++;
            continue;
        }
        recovered++;
        failed |= loadgen_samples_push(&detection, f->detected_at - f->at);
        failed |= loadgen_samples_push(&recovery, f->recovered_at - f->detected_at);
    }
    summary->not_recovered += missing;
    summary->checks_failed += checks;
    format_times(&detection, d, sizeof(d));
    format_times(&recovery, r, sizeof(r));
    if (has_worker(kind))
        snprintf(c, sizeof(c), "%d", checks);
    else
        snprintf(c, sizeof(c), "-");
    if (!is_disruptive(kind))
        printf("| %s | %d | %d | (no restart expected) | - | - | - | %s |\n", kind, injected,
               refused, c);
    else
        printf("| %s | %d | %d | %d | %d | %s | %s | %s |\n", kind, injected, refused, recovered,
               missing, d, r, c);
    if (failed) printf("(out of memory for some samples)\n");
    loadgen_samples_free(&detection);
    loadgen_samples_free(&recovery);
}

/* What each fault with a worker measured (lock held). */
static void print_checks(struct chaos_run *run) {
    int first = 1;
    for (int i = 0; i < run->n_faults; i++) {
        const struct chaos_fault *f = &run->faults[i];
        if (!f->worker || f->status != 200) continue;
        if (first)
            printf("\n### what the faults with requests or connections of their own measured\n\n");
        first = 0;
        printf("- %.1f s, %s on %s: %s%s\n", f->at, f->kind,
               f->model >= 0 ? run->options->names[f->model] : "the gateway",
               f->working ? "its worker did not finish" : f->note,
               f->check_failed || f->working ? " **FAILED**" : "");
    }
}

static void add_requests(struct chaos_requests *to, const struct chaos_requests *from) {
    to->sent += from->sent;
    to->completed += from->completed;
    to->failed += from->failed;
    to->wrong += from->wrong;
    to->late += from->late;
    to->unverified += from->unverified;
}

static void print_requests_row(const char *what, const char *model, const struct chaos_requests *r,
                               struct chaos_fault_summary *summary) {
    printf("| %s | %s | %ld | %ld | %ld | %ld | %ld | %ld |\n", what, model, r->sent, r->completed,
           r->failed, r->wrong, r->late, r->unverified);
    summary->completed += r->completed;
    summary->bad += r->failed + r->wrong + r->late + r->unverified;
}

/* The requests the faults sent, by kind and instance (lock held). */
static void print_requests(struct chaos_run *run, struct chaos_fault_summary *summary) {
    const struct chaos_options *o = run->options;
    static const char *const kinds[] = {"stop+flood", "stop-cancel"};
    printf("\n### requests the faults sent (in the verdict)\n\n");
    printf("| requests | instance | sent | completed | failed | wrong | late | unverified |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int m = 0; m < CHAOS_MODELS; m++)
        print_requests_row("flood without faults (references, end of phase 1)", o->names[m],
                           &run->flood_references[m], summary);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        for (int m = 0; m < CHAOS_MODELS; m++) {
            struct chaos_requests sum = {0};
            for (int i = 0; i < run->n_faults; i++)
                if (is_kind(&run->faults[i], kinds[k]) && run->faults[i].model == m)
                    add_requests(&sum, &run->faults[i].requests);
            print_requests_row(kinds[k], o->names[m], &sum, summary);
        }
    }
    const struct chaos_health_watch *h = &run->flood_reference_health;
    printf("\nGET /health during the floods without faults: at worst %.3f s in %d probes, %d "
           "unanswered.\n",
           h->worst, h->probes, h->failed);
}

void chaos_print_faults(struct chaos_run *run, struct chaos_fault_summary *summary) {
    *summary = (struct chaos_fault_summary){0};
    printf("\n### faults (client-side: /health polled every 100 ms)\n\n");
    printf("| kind | injected | refused by /debug/fault | recovered | not recovered "
           "| detection s median / max | recovery s median / max | own checks failed |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    pthread_mutex_lock(&run->lock);
    for (int k = 0; k < CHAOS_KINDS; k++) print_kind(run, chaos_kinds[k], summary);
    printf("\ndetection: fault posted -> /health shows the instance not ready or a new runner; "
           "recovery: -> the new runner is ready. stop+flood is a stop; stop-cancel and "
           "half-open post nothing (a client makes them).\n");
    print_checks(run);
    print_requests(run, summary);
    pthread_mutex_unlock(&run->lock);
}
