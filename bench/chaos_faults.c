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
 *   - stop+flood, stop-cancel, half-open: clients, not signals (issue 21):
 *     a worker thread (chaos_clients.c) sends their requests or
 *     connections and checks what follows, one at a time, on an instance
 *     no other fault touches meanwhile, so that what follows is theirs.
 *
 * The monitor reads GET /health every 100 ms and timestamps, for every
 * fault that must replace the runner, when the gateway noticed (the
 * instance is not ready, or has a new runner pid) and when a new runner
 * was ready: the client-side detection and recovery times, an independent
 * check of the gateway's own histograms. */
#include "chaos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHAOS_KINDS   12                            /* distinct kinds */
#define CHAOS_CLUSTER 3                             /* the last ones need --hosts */
#define CHAOS_REPEATS 5                             /* kinds a round holds twice */
#define CHAOS_BAG     (CHAOS_KINDS + CHAOS_REPEATS) /* faults in one round, at most */

/* Every kind, in the order of the faults' table. */
static const char *const chaos_kinds[CHAOS_KINDS] = {
    "kill",       "stop",        "stall",     "delay", "close",     "refuse+kill",
    "stop+flood", "stop-cancel", "half-open", "move",  "lose-host", "drain-host"};
static const char *const chaos_repeats[CHAOS_REPEATS] = {"kill", "stop", "stall", "delay", "close"};

void chaos_sleep(double seconds) {
    if (seconds <= 0) return;
    struct timespec t = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&t, NULL);
}

int chaos_is_kind(const struct chaos_fault *f, const char *kind) {
    return strcmp(f->kind, kind) == 0;
}

int chaos_recent_delay(struct chaos_run *run, int m, double seconds) {
    int recent = 0;
    double since = chaos_elapsed(run) - seconds;
    pthread_mutex_lock(&run->lock);
    for (int i = 0; i < run->n_faults; i++) {
        const struct chaos_fault *f = &run->faults[i];
        recent |= f->model == m && f->status == 200 && chaos_is_kind(f, "delay") && f->at >= since;
    }
    pthread_mutex_unlock(&run->lock);
    return recent;
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
        chaos_sleep(0.1);
    }
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
           !(quiet && chaos_recent_delay(run, m, CHAOS_DELAY_QUIET));
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

/* A move of the model's instance to a random placement on the cluster's
 * hosts: tp 1 or 2, in 1 or 2 pipeline stages, on one host or (tp 2, or
 * a stage each) two; the gateway refuses one that does not fit (409),
 * which counts as refused. */
static int post_move(struct chaos_run *run, const char *model, uint64_t *rng, char *err,
                     size_t errlen) {
    const struct chaos_options *o = run->options;
    char body[512];
    struct loadgen_reply reply;
    int tp = loadgen_random_range(rng, 1, 2), first = loadgen_random_range(rng, 0, o->n_hosts - 1);
    int pp = loadgen_random_range(rng, 1, 2);
    int second = (first + loadgen_random_range(rng, 1, o->n_hosts - 1)) % o->n_hosts;
    int two = (tp == 2 || pp == 2) && o->n_hosts > 1 && loadgen_random_range(rng, 0, 1);
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"kind\":\"move\",\"tp\":%d,\"pp\":%d,\"hosts\":[\"%s\"%s%s%s]}",
             model, tp, pp, o->hosts[first], two ? ",\"" : "", two ? o->hosts[second] : "",
             two ? "\"" : "");
    if (loadgen_http(o->port, "POST", "/debug/fault", body, loadgen_now() + 10, &reply, err,
                     errlen))
        return 0;
    int status = reply.status;
    if (status != 200) snprintf(err, errlen, "HTTP %d: %.200s", status, reply.body);
    loadgen_reply_free(&reply);
    return status;
}

/* Posts what fault f needs: the HTTP status of /debug/fault (200 for the
 * faults a client makes, which post nothing). */
static int post(struct chaos_run *run, struct chaos_fault *f, uint64_t *rng, int delay_ms,
                int steps) {
    const char *model = f->model >= 0 ? run->options->names[f->model] : "";
    if (chaos_is_kind(f, "stop-cancel") || chaos_is_kind(f, "half-open")) return 200;
    if (chaos_is_kind(f, "move")) return post_move(run, model, rng, f->error, sizeof(f->error));
    if (chaos_is_kind(f, "refuse+kill")) {
        int count = loadgen_random_range(rng, 1, 2);
        int status = post_fault(run, model, "refuse", 0, 0, 0, count, f->error, sizeof(f->error));
        if (status != 200) return status;
        return post_fault(run, model, "kill", f->rank, 0, 0, 0, f->error, sizeof(f->error));
    }
    /* stop+flood stops the rank; its worker sends the flood right after */
    return post_fault(run, model, chaos_is_kind(f, "stop+flood") ? "stop" : f->kind, f->rank,
                      delay_ms, steps, 0, f->error, sizeof(f->error));
}

/* Starts the worker of fault `index` (the previous one has finished). */
static void start_worker(struct chaos_injector *injector, int index, uint64_t seed) {
    struct chaos_run *run = injector->run;
    const struct chaos_fault *f = &run->faults[index]; /* its kind stays */
    void *(*work)(void *) = chaos_is_kind(f, "stop+flood")    ? chaos_flood_main
                            : chaos_is_kind(f, "stop-cancel") ? chaos_cancel_main
                                                              : chaos_half_open_main;
    if (injector->has_worker) pthread_join(injector->worker, NULL);
    injector->has_worker = 0;
    injector->work = (struct chaos_work){.run = run, .fault = index, .rng = seed};
    if (pthread_create(&injector->worker, NULL, work, &injector->work) == 0) {
        injector->has_worker = 1;
        return;
    }
    chaos_finish_work(run, index, NULL, 1, "its worker thread could not start");
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
    if (!chaos_is_kind(&f, "half-open")) {
        f.model = pick_model(run, rng, chaos_is_kind(&f, "stop-cancel"), &h);
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

/* A new round: every kind once (the cluster's only with --hosts),
 * shuffled, then the repeats, shuffled; returns its size. */
static int new_round(const char **bag, uint64_t *rng, int cluster) {
    int kinds = cluster ? CHAOS_KINDS : CHAOS_KINDS - CHAOS_CLUSTER;
    memcpy(bag, chaos_kinds, (size_t)kinds * sizeof(chaos_kinds[0]));
    memcpy(bag + kinds, chaos_repeats, sizeof(chaos_repeats));
    shuffle(bag, kinds, rng);
    shuffle(bag + kinds, CHAOS_REPEATS, rng);
    return kinds + CHAOS_REPEATS;
}

void *chaos_injector_main(void *arg) {
    struct chaos_injector *injector = arg;
    struct chaos_run *run = injector->run;
    const struct chaos_options *o = run->options;
    uint64_t rng = o->seed ^ 0x6661756c74ULL; /* the faults' own stream */
    const char *bag[CHAOS_BAG];
    int drawn = CHAOS_BAG, size = CHAOS_BAG;
    double next = loadgen_now() + o->fault_every;
    while (next < injector->end) {
        chaos_sleep(next - loadgen_now());
        if (drawn == size) {
            size = new_round(bag, &rng, o->n_hosts > 0);
            drawn = 0;
        }
        if (inject(injector, &rng, bag[drawn]) == 0) {
            drawn++;
            next += o->fault_every;
            continue;
        }
        /* it cannot be placed now: the next kind first, this one soon after */
        if (drawn + 1 < size) {
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
        chaos_sleep(0.1);
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
        if (!chaos_is_kind(f, kind)) continue;
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
                if (chaos_is_kind(&run->faults[i], kinds[k]) && run->faults[i].model == m)
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
