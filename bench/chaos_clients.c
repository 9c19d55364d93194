/* chaos_clients.c -- bench/chaos_tool's faults that are clients, not
 * signals to a runner (issue 21): each runs on a worker thread that the
 * injector (chaos_faults.c) starts, and checks what follows it.
 *   - stop+flood: with a rank stopped, options->flood long-prompt requests
 *     arrive at once: GET /health must keep answering within
 *     CHAOS_HEALTH_LIMIT and every answer must equal the fault-free
 *     flood's (chaos_flood also records those references);
 *   - stop-cancel: streams leave right after the chunk that ends them at
 *     their stop string; their text must be the reference's up to it, and
 *     no runner restart may follow;
 *   - half-open: connections send part of a request and close at once; the
 *     gateway's open files must come back to what they were. */
#include "chaos.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHAOS_HEALTH_LIMIT 1.0 /* seconds GET /health may take while a runner is stopped */
#define CHAOS_FD_SLACK     16  /* open files half-open may leave (other clients come and go) */
#define CHAOS_FD_SETTLE    3.0 /* seconds after the half-open connections closed */
#define CHAOS_STOP_SKIP    4   /* bytes of the reference before a stop string may start */
#define CHAOS_STOP_LENGTH  3   /* bytes of a stop string */
#define CHAOS_THREAD_STACK (1 << 20) /* bytes: flood threads only wait on a socket */

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
        chaos_sleep(asked + 0.1 - loadgen_now());
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
                                      .response_format =
                                          item->constrained ? CHAOS_RESPONSE_FORMAT : NULL,
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
        chaos_sleep(asked + 0.1 - loadgen_now());
    }
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
    for (int i = 0; pid > 0 && i < 3; i++, chaos_sleep(0.05)) {
        int n = open_files(pid);
        if (n > *before) *before = n;
    }
    *opened = half_open_burst(run->options->port, run->options->half_open);
    double closed = loadgen_now();
    chaos_sleep(closed + CHAOS_FD_SETTLE - loadgen_now());
    for (int i = 0; pid > 0 && i < 10; i++, chaos_sleep(0.1)) {
        int n = open_files(pid);
        if (n >= 0 && (*after < 0 || n < *after)) *after = n;
    }
}

/* --------------------------------------------------------------- workers */

void chaos_finish_work(struct chaos_run *run, int fault, const struct chaos_requests *requests,
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
void *chaos_flood_main(void *arg) {
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
    chaos_finish_work(run, w->fault, &out[m], failed, note);
    return NULL;
}

/* stop-cancel: the streams, then the instance watched for a restart. */
void *chaos_cancel_main(void *arg) {
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
    int excused = changed[0] && chaos_recent_delay(run, m, CHAOS_DELAY_QUIET);
    snprintf(note, sizeof(note),
             "%d streams left at their stop string, %ld with its text; %.0f s "
             "after: %.80s%s",
             sent, out.completed, window, changed[0] ? changed : "ready, same runner",
             excused ? " (not counted: a delay fault hit it shortly before)" : "");
    chaos_finish_work(run, w->fault, &out, sent == 0 || (changed[0] && !excused), note);
    return NULL;
}

/* half-open: the burst of half-sent requests, and the gateway's files. */
void *chaos_half_open_main(void *arg) {
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
    chaos_finish_work(run, w->fault, NULL, failed, note);
    return NULL;
}
