/* gateway.c -- the gateway's life: load the models' vocabularies, start
 * the cluster's first instances, serve HTTP, and until asked to stop,
 * complete moves and send keep-alive comments to quiet streams. */
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
    pthread_mutex_init(&g->reports_lock, NULL);
    pthread_mutex_init(&g->cluster_lock, NULL);
    atomic_init(&g->next_id, 1);
    if (pipe2(g->wake, O_NONBLOCK | O_CLOEXEC) || gateway_metrics_init(g)) {
        snprintf(err, errlen, "cannot set up the gateway");
        gateway_free(g);
        return -1;
    }
    if (make_runtime_dir(g, err, errlen) || load_served(g, err, errlen) ||
        gateway_http_start(g, err, errlen) || gateway_cluster_start(g, err, errlen)) {
        gateway_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

int gateway_port(const struct gateway *g) {
    return g->port;
}

void gateway_stop(struct gateway *g) {
    char byte = 1;
    atomic_store(&g->stopping, 1);
    ssize_t rc = write(g->wake[1], &byte, 1);
    (void)rc; /* a full pipe already wakes gateway_run */
}

void gateway_run(struct gateway *g) {
    uint64_t last_keep_alive = 0;
    while (!atomic_load(&g->stopping)) {
        struct pollfd p = {g->wake[0], POLLIN, 0};
        poll(&p, 1, 20); /* a move completes this soon after its runner is ready */
        gateway_cluster_step(g);
        uint64_t now = runner_now_us();
        if (now - last_keep_alive < 250000) continue;
        last_keep_alive = now;
        gateway_cluster_each(g, gateway_request_keep_alive, now);
    }
}

void gateway_free(struct gateway *g) {
    if (!g) return;
    atomic_store(&g->stopping, 1);
    /* runners first: their requests end with an error the clients still get;
     * then HTTP, whose last callbacks still reach the instances */
    gateway_cluster_stop(g);
    gateway_http_stop(g);
    gateway_cluster_free(g);
    for (int i = 0; i < g->n_served; i++) gateway_served_free(&g->served[i]);
    free(g->served);
    if (g->runtime_dir[0]) remove_runtime_dir(g->runtime_dir);
    metrics_registry_free(&g->metrics.registry);
    for (int i = 0; i < 16; i++) free(g->stuck_reports[i]);
    pthread_mutex_destroy(&g->reports_lock);
    pthread_mutex_destroy(&g->cluster_lock);
    for (int i = 0; i < 2; i++)
        if (g->wake[i] >= 0) close(g->wake[i]);
    free(g);
}
