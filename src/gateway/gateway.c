/* gateway.c -- the gateway's life: load the models' vocabularies, start
 * the cluster's first instances, serve HTTP, and until asked to stop,
 * complete moves and send keep-alive comments to quiet streams. Asked to
 * drain, it takes no new request and returns once those in flight ended
 * (or its drain timeout ended them with an error): no stream is ever cut
 * without a word. */
#include "gateway_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* 1 if name is one of ours, "lockstep-PID" or an older "lockstep-PID-N.sock"
 * or ".status", whose gateway (PID) no longer runs: a killed gateway's. */
static int left_over(const char *name) {
    char *end;
    if (strncmp(name, "lockstep-", 9) != 0) return 0;
    long pid = strtol(name + 9, &end, 10);
    if (end == name + 9 || pid <= 0 || pid > INT32_MAX) return 0;
    if (*end == '-') {
        strtol(end + 1, &end, 10);
        if (strcmp(end, ".sock") != 0 && strcmp(end, ".status") != 0) return 0;
    } else if (*end != '\0') {
        return 0;
    }
    return pid == getpid() || (kill((pid_t)pid, 0) != 0 && errno == ESRCH);
}

/* Removes a runtime directory and the files in it. */
static void remove_runtime_dir(const char *path) {
    DIR *d = opendir(path);
    struct dirent *e;
    char file[320];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
            unlink(file);
        }
    if (d) closedir(d);
    rmdir(path);
}

/* Makes /tmp/lockstep-PID for the runners' sockets and status files, after
 * removing what killed gateways left in /tmp. */
static int make_runtime_dir(struct gateway *g, char *err, size_t errlen) {
    DIR *d = opendir("/tmp");
    struct dirent *e;
    char path[320];
    while (d && (e = readdir(d)))
        if (left_over(e->d_name)) {
            snprintf(path, sizeof(path), "/tmp/%s", e->d_name);
            if (unlink(path) != 0) remove_runtime_dir(path);
        }
    if (d) closedir(d);
    snprintf(g->runtime_dir, sizeof(g->runtime_dir), "/tmp/lockstep-%d", (int)getpid());
    if (mkdir(g->runtime_dir, 0700) == 0) return 0;
    snprintf(err, errlen, "cannot make %s: %s", g->runtime_dir, strerror(errno));
    g->runtime_dir[0] = '\0';
    return -1;
}

/* Loads every model's vocabulary; two models may not share a name. */
static int load_served(struct gateway *g, char *err, size_t errlen) {
    const struct gateway_params *p = &g->params;
    g->served = calloc((size_t)p->n_models, sizeof(*g->served));
    if (!g->served) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < p->n_models; i++) {
        g->n_served = i + 1;
        if (gateway_served_init(&g->served[i], &p->models[i], err, errlen)) return -1;
        for (int j = 0; j < i; j++)
            if (!strcmp(g->served[j].name, g->served[i].name)) {
                snprintf(err, errlen, "two models are called '%s': name them (--name)",
                         g->served[i].name);
                return -1;
            }
    }
    return 0;
}

/* The fleet, the HTTP server and the cluster's first instances, each given
 * what it borrows from the gateway. */
static int start_layers(struct gateway *g, char *err, size_t errlen) {
    if (fleet_init(&g->fleet, &g->params, g->served, g->n_served, &g->metrics, &g->stopping,
                   &g->next_id, g->runtime_dir, err, errlen))
        return -1;
    g->fleet_ready = 1;
    g->requests_env = (struct requests_env){.params = &g->params,
                                            .next_id = &g->next_id,
                                            .metrics = &g->metrics,
                                            .cancel = fleet_instance_cancel,
                                            .submit_more = fleet_submit_more,
                                            .context = &g->fleet};
    g->http = (struct http_server){.params = &g->params,
                                   .fleet = &g->fleet,
                                   .metrics = &g->metrics,
                                   .requests_env = &g->requests_env,
                                   .stopping = &g->stopping,
                                   .draining = &g->draining};
    return http_start(&g->http, err, errlen) || fleet_start(&g->fleet, err, errlen) ? -1 : 0;
}

int gateway_create(struct gateway **out, const struct gateway_params *params, char *err,
                   size_t errlen) {
    struct gateway *g = calloc(1, sizeof(*g));
    *out = NULL;
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    g->params = *params;
    g->wake[0] = g->wake[1] = -1;
    atomic_init(&g->next_id, 1);
    if (pipe2(g->wake, O_NONBLOCK | O_CLOEXEC) || gateway_metrics_init(&g->metrics)) {
        snprintf(err, errlen, "cannot set up the gateway");
        gateway_free(g);
        return -1;
    }
    if (make_runtime_dir(g, err, errlen) || load_served(g, err, errlen) ||
        start_layers(g, err, errlen)) {
        gateway_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

int gateway_port(const struct gateway *g) {
    return g->http.port;
}

/* Wakes gateway_run; async-signal-safe. */
static void wake_run(struct gateway *g) {
    char byte = 1;
    ssize_t rc = write(g->wake[1], &byte, 1);
    (void)rc; /* a full pipe already wakes gateway_run */
}

void gateway_stop(struct gateway *g) {
    atomic_store(&g->stopping, 1);
    wake_run(g);
}

void gateway_drain(struct gateway *g) {
    atomic_store(&g->draining, 1);
    wake_run(g);
}

/* Waits up to seconds for the clients to take the last bytes of the
 * requests in flight (each one leaves g->active when its answer is sent);
 * a client that does not read in time is cut. */
static void flush_requests(struct gateway *g, double seconds) {
    uint64_t start = clock_now_us();
    while (atomic_load(&g->http.active) > 0 && (double)(clock_now_us() - start) * 1e-6 < seconds) {
        struct timespec nap = {0, 10000000};
        nanosleep(&nap, NULL);
    }
}

/* One look at a drain (lock-free): 1 when it is over, because no request
 * is in flight, or because the deadline passed and those left were ended
 * with an error naming the shutdown. *deadline is 0 until the first look. */
static int drain_over(struct gateway *g, uint64_t now, uint64_t *deadline) {
    double seconds = g->params.drain_seconds > 0 ? g->params.drain_seconds : GATEWAY_DRAIN_SECONDS;
    int active = atomic_load(&g->http.active);
    char why[200];
    if (*deadline == 0) {
        *deadline = now + (uint64_t)(seconds * 1e6);
        fprintf(stderr, "lockstep serve: draining: %d request%s in flight, waiting up to %g s\n",
                active, active == 1 ? "" : "s", seconds);
    }
    if (active == 0) {
        fprintf(stderr, "lockstep serve: drained: every request ended\n");
        return 1;
    }
    if (now < *deadline) return 0;
    fprintf(stderr, "lockstep serve: drain timeout (%g s): ending %d request%s with an error\n",
            seconds, active, active == 1 ? "" : "s");
    snprintf(why, sizeof(why),
             "the gateway is shutting down: its drain timeout (%g s) passed before this "
             "request ended",
             seconds);
    fleet_fail(&g->fleet, 503, why);
    flush_requests(g, GATEWAY_FLUSH_SECONDS);
    return 1;
}

/* Takes the bytes of the wake pipe (they only say "look"). */
static void take_wake(struct gateway *g) {
    char bytes[64];
    while (read(g->wake[0], bytes, sizeof(bytes)) > 0) continue;
}

void gateway_run(struct gateway *g) {
    uint64_t last_keep_alive = 0, drain_deadline = 0;
    while (!atomic_load(&g->stopping)) {
        struct pollfd p = {g->wake[0], POLLIN, 0};
        /* a move completes this soon after its runner is ready */
        if (poll(&p, 1, 20) > 0) take_wake(g);
        fleet_step(&g->fleet);
        uint64_t now = clock_now_us();
        if (atomic_load(&g->draining) && drain_over(g, now, &drain_deadline)) return;
        if (now - last_keep_alive < 250000) continue;
        last_keep_alive = now;
        fleet_each(&g->fleet, gateway_request_keep_alive, now);
    }
}

void gateway_free(struct gateway *g) {
    if (!g) return;
    atomic_store(&g->stopping, 1);
    /* runners first: their requests end with an error the clients still get;
     * then HTTP, whose last callbacks still reach the instances */
    if (g->fleet_ready) fleet_stop(&g->fleet);
    flush_requests(g, GATEWAY_FLUSH_SECONDS);
    http_stop(&g->http);
    if (g->fleet_ready) fleet_free(&g->fleet);
    for (int i = 0; i < g->n_served; i++) gateway_served_free(&g->served[i]);
    free(g->served);
    if (g->runtime_dir[0]) remove_runtime_dir(g->runtime_dir);
    gateway_metrics_free(&g->metrics);
    for (int i = 0; i < 2; i++)
        if (g->wake[i] >= 0) close(g->wake[i]);
    free(g);
}
