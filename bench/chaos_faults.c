/* chaos_faults.c -- bench/chaos_tool's fault injector and /health monitor.
 *
 * The injector posts a fault to POST /debug/fault every fault_every
 * seconds. Kinds are drawn from a shuffled bag (each of kill, stop, stall,
 * delay and close twice, refuse+kill once), so a short run still meets
 * every kind; the instance and the rank are drawn at random among the
 * ready ones that are not still recovering from an earlier fault. The
 * monitor reads GET /health every 100 ms and timestamps, for every fault
 * that must replace the runner, when the gateway noticed (the instance is
 * not ready, or has a new runner pid) and when a new runner was ready: the
 * client-side detection and recovery times, an independent check of the
 * gateway's own histograms. */
#include "chaos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHAOS_BAG 11 /* kinds in one shuffled round */

static const char *const chaos_bag_kinds[CHAOS_BAG] = {"kill",  "stop",  "stall",      "delay",
                                                       "close", "kill",  "stop",       "stall",
                                                       "delay", "close", "refuse+kill"};

static void sleep_seconds(double seconds) {
    if (seconds <= 0) return;
    struct timespec t = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&t, NULL);
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

/* Picks the instance to hit: a random one whose runner is ready now (a
 * fresh /health, so pid_before is exact) and not still recovering from an
 * earlier fault (a second fault on a runner not yet replaced would only
 * blur both measurements); -1 when none is. */
static int pick_model(struct chaos_run *run, uint64_t *rng, long *pid) {
    const struct chaos_options *o = run->options;
    struct loadgen_health_model models[LOADGEN_MODELS_MAX];
    char err[LOADGEN_ERROR_MAX];
    int n =
        loadgen_health(o->port, loadgen_now() + 5, models, LOADGEN_MODELS_MAX, err, sizeof(err));
    int first = loadgen_random_range(rng, 0, CHAOS_MODELS - 1);
    for (int k = 0; k < CHAOS_MODELS; k++) {
        int m = (first + k) % CHAOS_MODELS;
        for (int i = 0; i < n; i++) {
            if (!strcmp(models[i].name, o->names[m]) && models[i].ready && models[i].pid > 0 &&
                !recovering(run, m)) {
                *pid = models[i].pid;
                return m;
            }
        }
    }
    return -1;
}

/* Injects one fault of `kind` and records it; -1 (nothing recorded) when
 * no runner is ready to take it. */
static int inject(struct chaos_run *run, uint64_t *rng, const char *kind) {
    const struct chaos_options *o = run->options;
    struct chaos_fault f = {.phase = run->phase};
    long pid = 0;
    int m = pick_model(run, rng, &pid);
    if (m < 0) return -1;
    int delay_ms = loadgen_random_range(rng, 1, o->delay_ms);
    int steps = loadgen_random_range(rng, 10, 40);
    snprintf(f.kind, sizeof(f.kind), "%s", kind);
    f.disruptive = strcmp(kind, "delay") != 0;
    f.model = m;
    f.rank = loadgen_random_range(rng, 0, o->tp[m] - 1);
    f.pid_before = pid;
    f.at = chaos_elapsed(run);
    if (!strcmp(kind, "refuse+kill")) {
        int count = loadgen_random_range(rng, 1, 2);
        f.status = post_fault(run, o->names[m], "refuse", 0, 0, 0, count, f.error, sizeof(f.error));
        if (f.status == 200)
            f.status =
                post_fault(run, o->names[m], "kill", f.rank, 0, 0, 0, f.error, sizeof(f.error));
    } else {
        f.status = post_fault(run, o->names[m], kind, f.rank, delay_ms, steps, 0, f.error,
                              sizeof(f.error));
    }
    pthread_mutex_lock(&run->lock);
    if (run->n_faults < CHAOS_FAULTS_MAX) run->faults[run->n_faults++] = f;
    fprintf(stderr, "[%7.1f s] fault %s on %s rank %d (runner pid %ld): %s\n", f.at, f.kind,
            o->names[m], f.rank, pid, f.status == 200 ? "injected" : f.error);
    pthread_mutex_unlock(&run->lock);
    return 0;
}

void *chaos_injector_main(void *arg) {
    struct chaos_injector *injector = arg;
    struct chaos_run *run = injector->run;
    const struct chaos_options *o = run->options;
    uint64_t rng = o->seed ^ 0x6661756c74ULL; /* the faults' own stream */
    const char *bag[CHAOS_BAG];
    int left = 0;
    double next = loadgen_now() + o->fault_every;
    while (next < injector->end) {
        sleep_seconds(next - loadgen_now());
        if (left == 0) { /* a new round: shuffle the bag (Fisher-Yates) */
            memcpy(bag, chaos_bag_kinds, sizeof(bag));
            for (int i = CHAOS_BAG - 1; i > 0; i--) {
                int j = loadgen_random_range(&rng, 0, i);
                const char *kind = bag[i];
                bag[i] = bag[j];
                bag[j] = kind;
            }
            left = CHAOS_BAG;
        }
        if (inject(run, &rng, bag[left - 1]) == 0) {
            left--;
            next += o->fault_every;
        } else { /* no runner is ready: the same kind again soon */
            next = loadgen_now() + 0.5;
        }
    }
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

int chaos_print_faults(struct chaos_run *run) {
    static const char *const kinds[] = {"kill", "stop", "stall", "delay", "close", "refuse+kill"};
    int not_recovered = 0;
    printf("\n### faults (client-side: /health polled every 100 ms)\n\n");
    printf("| kind | injected | refused by /debug/fault | recovered | not recovered "
           "| detection s median / max | recovery s median / max |\n");
    printf("|---|---|---|---|---|---|---|\n");
    pthread_mutex_lock(&run->lock);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        struct loadgen_samples detection = {0}, recovery = {0};
        int injected = 0, refused = 0, recovered = 0, missing = 0, failed = 0;
        char d[64], r[64];
        for (int i = 0; i < run->n_faults; i++) {
            const struct chaos_fault *f = &run->faults[i];
            if (strcmp(f->kind, kinds[k]) != 0) continue;
            if (f->status != 200) {
                refused++;
                continue;
            }
            injected++;
            if (!f->disruptive) continue;
            if (f->recovered_at == 0) {
                missing++;
                continue;
            }
            recovered++;
            failed |= loadgen_samples_push(&detection, f->detected_at - f->at);
            failed |= loadgen_samples_push(&recovery, f->recovered_at - f->detected_at);
        }
        not_recovered += missing;
        format_times(&detection, d, sizeof(d));
        format_times(&recovery, r, sizeof(r));
        if (!strcmp(kinds[k], "delay"))
            printf("| delay | %d | %d | (no restart expected) | - | - | - |\n", injected, refused);
        else
            printf("| %s | %d | %d | %d | %d | %s | %s |\n", kinds[k], injected, refused, recovered,
                   missing, d, r);
        if (failed) printf("(out of memory for some samples)\n");
        loadgen_samples_free(&detection);
        loadgen_samples_free(&recovery);
    }
    pthread_mutex_unlock(&run->lock);
    printf("\ndetection: fault posted -> /health shows the instance not ready or a new runner; "
           "recovery: -> the new runner is ready.\n");
    return not_recovered;
}
