/* group.c -- the ranks of one model instance.
 *
 * --tp N with the local backend: N threads of this process, each with its
 * own shard of the model, engine and thread pool; rank 0 (the caller's
 * thread) leads and the others follow its step plans. --comm mpi: this
 * process is one rank of an mpirun job; rank 0 leads, the others follow
 * until released and then leave. A rank whose collective fails exits the
 * process with the comm module's distinct exit code (DESIGN.md I3). */
#include "engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Follows the leader until released. A failed collective is reported to
 * the group's on_failure (which may end the process: a rank that stops
 * waiting must not leave its leader waiting forever) and ends the thread. */
static void *follower_main(void *arg) {
    struct engine *engine = arg;
    struct engine_group *g = engine->group;
    char err[512];
    if (engine_follow(engine, err, sizeof(err)) != 0 && g->on_failure) g->on_failure(engine, err);
    return NULL;
}

int engine_exit_code(const struct engine *engine) {
    return engine->comm_error != COMM_OK ? comm_exit_code(engine->comm_error) : 1;
}

static int start_rank(struct engine_group *g, int i, struct comm *comm, const struct model *whole,
                      const struct engine_params *params, char *err, size_t errlen) {
    struct engine_params p = *params;
    p.comm = comm;
    /* a rank of one (no comm) has no collectives to report */
    if (comm && g->status) comm_attach_status(comm, &g->status[comm_rank(comm)]);
    if (g->n > 1 && model_shard(whole, comm_rank(comm), g->n, &g->shards[i], err, errlen))
        return -1;
    const struct model *m = g->n > 1 ? g->shards[i] : whole;
    if (engine_init(&g->engines[i], m, &p, err, errlen)) return -1;
    g->engines[i].group = g;
    g->started++;
    return 0;
}

static int start_local(struct engine_group *g, const struct model *whole,
                       const struct engine_params *params, char *err, size_t errlen) {
    struct engine_params p = *params;
    p.n_threads = params->n_threads / g->n > 0 ? params->n_threads / g->n : 1;
    if (g->n > 1 && comm_local_create(g->n, g->comms, err, errlen) != COMM_OK) return -1;
    for (int i = 0; i < g->n; i++) {
        if (g->comms[i]) comm_set_deadline(g->comms[i], g->deadline);
        if (start_rank(g, i, g->comms[i], whole, &p, err, errlen)) return -1;
    }
    for (int i = 1; i < g->n; i++) {
        if (pthread_create(&g->threads[i], NULL, follower_main, &g->engines[i])) {
            snprintf(err, errlen, "cannot start the thread of rank %d", i);
            return -1;
        }
        g->threads_started = i;
    }
    return 0;
}

int engine_group_start(struct engine_group *g, const struct model *whole,
                       const struct engine_params *params, char *err, size_t errlen) {
    int n = g->backend == COMM_LOCAL ? g->n : 1; /* mpi: one rank per process */
    g->comms = calloc((size_t)n, sizeof(struct comm *));
    g->shards = calloc((size_t)n, sizeof(struct model *));
    g->engines = calloc((size_t)n, sizeof(*g->engines));
    g->threads = calloc((size_t)n, sizeof(*g->threads));
    if (!g->comms || !g->shards || !g->engines || !g->threads) {
        snprintf(err, errlen, "out of memory starting %d ranks", n);
        return 1;
    }
    if (g->backend == COMM_LOCAL) return start_local(g, whole, params, err, errlen) ? 1 : 0;
    /* mpi: this process is one rank of the job; the job's size is the degree */
    int rc = comm_mpi_create(NULL, NULL, &g->comms[0], err, errlen);
    if (rc != COMM_OK) return comm_exit_code(rc);
    if (comm_size(g->comms[0]) != g->n && g->n != 1) {
        snprintf(err, errlen, "--tp %d but mpirun started %d ranks", g->n, comm_size(g->comms[0]));
        return 1;
    }
    g->n = comm_size(g->comms[0]);
    comm_set_deadline(g->comms[0], g->deadline);
    if (start_rank(g, 0, g->comms[0], whole, params, err, errlen)) return 1;
    if (comm_rank(g->comms[0]) != 0) {
        g->follower_done = 1;
        if (engine_follow(&g->engines[0], err, errlen) != 0)
            return engine_exit_code(&g->engines[0]);
    }
    return 0;
}

struct engine *engine_group_leader(struct engine_group *g) {
    return g->follower_done ? NULL : &g->engines[0];
}

int engine_group_stop(struct engine_group *g, char *err, size_t errlen) {
    int rc = 0;
    if (g->started > 0 && !g->follower_done && g->n > 1)
        rc = engine_release_followers(&g->engines[0], err, errlen);
    for (int i = 1; i <= g->threads_started; i++) pthread_join(g->threads[i], NULL);
    int local = g->backend == COMM_LOCAL ? g->n : 1;
    for (int i = 0; g->engines && i < local; i++)
        if (g->engines[i].model) engine_free(&g->engines[i]);
    for (int i = 0; g->shards && i < local; i++) model_free(g->shards[i]);
    for (int i = 0; g->comms && i < local; i++)
        if (g->comms[i]) comm_free(g->comms[i]);
    free(g->comms);
    free(g->shards);
    free(g->engines);
    free(g->threads);
    g->comms = NULL;
    g->shards = NULL;
    g->engines = NULL;
    g->threads = NULL;
    return rc;
}
