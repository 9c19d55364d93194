/* group.c -- the ranks of one model instance.
 *
 * --tp N with the local backend: N threads of this process, each with its
 * own shard of the model, engine and thread pool; rank 0 (the caller's
 * thread) leads and the others follow its step plans. --comm mpi: this
 * process is one rank of an mpirun job; rank 0 leads, the others follow
 * until released and then leave. A rank whose collective fails exits the
 * process with the comm module's distinct exit code (DESIGN.md I3).
 *
 * --pp S as well: S stages of N ranks each, S * N in all; rank r is
 * tensor-parallel rank r % N of stage r / N and runs that stage's layers
 * of its shard (model_stage). The ranks of a stage form a tensor-parallel
 * group of their own; every rank is on the pipe, the group of all S * N
 * that carries the handoffs between stages (pipeline.c). */
#include "engine_internal.h"

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

/* The ranks of the instance. */
static int group_ranks(const struct engine_group *g) {
    return g->n * (g->stages > 1 ? g->stages : 1);
}

/* The model rank `rank` of the instance runs: its shard of whole (n > 1),
 * then its stage's layers of that (stages > 1). */
static int rank_model(struct engine_group *g, int i, int rank, const struct model *whole,
                      const struct model **out, char *err, size_t errlen) {
    int t = rank % g->n, stage = rank / g->n;
    if (g->n > 1 && model_shard(whole, t, g->n, &g->shards[i], err, errlen)) return -1;
    const struct model *m = g->n > 1 ? g->shards[i] : whole;
    if (g->stages > 1) {
        int counts[ENGINE_MAX_STAGES], first = 0;
        if (model_stage_layers(m->config.n_layers, g->stages, g->layers, counts, err, errlen))
            return -1;
        for (int s = 0; s < stage; s++) first += counts[s];
        if (model_stage(m, first, counts[stage], &g->stage_models[i], err, errlen)) return -1;
        m = g->stage_models[i];
    }
    *out = m;
    return 0;
}

/* Starts the engine of the rank whose handles are comm (its stage's
 * tensor-parallel group, or NULL) and pipe (or NULL), at index i. */
static int start_rank(struct engine_group *g, int i, struct comm *comm, struct comm *pipe,
                      const struct model *whole, const struct engine_params *params, char *err,
                      size_t errlen) {
    struct engine_params p = *params;
    p.comm = comm;
    p.pipe = pipe;
    int rank = pipe ? comm_rank(pipe) : comm ? comm_rank(comm) : 0;
    /* a rank of one (no comm) has no collectives to report */
    if (g->status && comm) comm_attach_status(comm, &g->status[rank]);
    if (g->status && pipe) comm_attach_status(pipe, &g->status[rank]);
    const struct model *m;
    if (rank_model(g, i, rank, whole, &m, err, errlen)) return -1;
    if (engine_init(&g->engines[i], m, &p, err, errlen)) return -1;
    g->engines[i].group = g;
    g->started++;
    return 0;
}

static int start_local(struct engine_group *g, const struct model *whole,
                       const struct engine_params *params, char *err, size_t errlen) {
    struct engine_params p = *params;
    int ranks = group_ranks(g);
    p.n_threads = params->n_threads / ranks > 0 ? params->n_threads / ranks : 1;
    for (int first = 0; g->n > 1 && first < ranks; first += g->n)
        if (comm_local_create(g->n, g->comms + first, err, errlen) != COMM_OK) return -1;
    if (g->stages > 1 && comm_local_create(ranks, g->pipes, err, errlen) != COMM_OK) return -1;
    for (int i = 0; i < ranks; i++) {
        if (g->comms[i]) comm_set_deadline(g->comms[i], g->deadline);
        if (g->pipes[i]) comm_set_deadline(g->pipes[i], g->deadline);
        if (start_rank(g, i, g->comms[i], g->pipes[i], whole, &p, err, errlen)) return -1;
    }
    for (int i = 1; i < ranks; i++) {
        if (pthread_create(&g->threads[i], NULL, follower_main, &g->engines[i])) {
            snprintf(err, errlen, "cannot start the thread of rank %d", i);
            return -1;
        }
        g->threads_started = i;
    }
    return 0;
}

/* mpi: this process's handles: the job is the pipe (with stages) and each
 * stage's ranks split off as its tensor-parallel group; without stages
 * the job is the group. Returns 0 or an exit status. */
static int join_mpi(struct engine_group *g, char *err, size_t errlen) {
    struct comm *job = NULL;
    int rc = comm_mpi_create(NULL, NULL, &job, err, errlen);
    if (rc != COMM_OK) return comm_exit_code(rc);
    int stages = g->stages > 1 ? g->stages : 1;
    if (comm_size(job) != group_ranks(g) && (g->n != 1 || stages != 1)) {
        snprintf(err, errlen, "--tp %d --pp %d needs %d ranks but mpirun started %d", g->n, stages,
                 group_ranks(g), comm_size(job));
        comm_free(job);
        return 1;
    }
    comm_set_deadline(job, g->deadline);
    if (stages == 1) {
        g->n = comm_size(job);
        g->comms[0] = job;
        return 0;
    }
    g->pipes[0] = job;
    if (g->n == 1) return 0;
    rc = comm_mpi_split(job, comm_rank(job) / g->n, comm_rank(job) % g->n, &g->comms[0], err,
                        errlen);
    if (rc != COMM_OK) return comm_exit_code(rc);
    comm_set_deadline(g->comms[0], g->deadline);
    return 0;
}

int engine_group_start(struct engine_group *g, const struct model *whole,
                       const struct engine_params *params, char *err, size_t errlen) {
    if (g->stages > ENGINE_MAX_STAGES) {
        snprintf(err, errlen, "%d pipeline stages (at most %d)", g->stages, ENGINE_MAX_STAGES);
        return 1;
    }
    if (g->layers && g->n_layers != (g->stages > 1 ? g->stages : 1)) {
        snprintf(err, errlen, "the layer split names %d stages, the pipeline has %d", g->n_layers,
                 g->stages > 1 ? g->stages : 1);
        return 1;
    }
    /* mpi: one rank per process */
    int n = g->backend == COMM_LOCAL ? group_ranks(g) : 1;
    g->comms = calloc((size_t)n, sizeof(struct comm *));
    g->pipes = calloc((size_t)n, sizeof(struct comm *));
    g->shards = calloc((size_t)n, sizeof(struct model *));
    g->stage_models = calloc((size_t)n, sizeof(struct model *));
    g->engines = calloc((size_t)n, sizeof(*g->engines));
    g->threads = calloc((size_t)n, sizeof(*g->threads));
    if (!g->comms || !g->pipes || !g->shards || !g->stage_models || !g->engines || !g->threads) {
        snprintf(err, errlen, "out of memory starting %d ranks", n);
        return 1;
    }
    if (g->backend == COMM_LOCAL) return start_local(g, whole, params, err, errlen) ? 1 : 0;
    int rc = join_mpi(g, err, errlen);
    if (rc) return rc;
    if (start_rank(g, 0, g->comms[0], g->pipes[0], whole, params, err, errlen)) return 1;
    if (engine_rank(&g->engines[0]) != 0) {
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
    if (g->started > 0 && !g->follower_done && group_ranks(g) > 1)
        rc = engine_release_followers(&g->engines[0], err, errlen);
    for (int i = 1; i <= g->threads_started; i++) pthread_join(g->threads[i], NULL);
    int local = g->backend == COMM_LOCAL ? group_ranks(g) : 1;
    for (int i = 0; g->engines && i < local; i++)
        if (g->engines[i].model) engine_free(&g->engines[i]);
    for (int i = 0; g->stage_models && i < local; i++) model_free(g->stage_models[i]);
    for (int i = 0; g->shards && i < local; i++) model_free(g->shards[i]);
    /* a split group before the job it was split from */
    for (int i = 0; g->comms && i < local; i++)
        if (g->comms[i]) comm_free(g->comms[i]);
    for (int i = 0; g->pipes && i < local; i++)
        if (g->pipes[i]) comm_free(g->pipes[i]);
    free(g->comms);
    free(g->pipes);
    free(g->shards);
    free(g->stage_models);
    free(g->engines);
    free(g->threads);
    g->comms = NULL;
    g->pipes = NULL;
    g->shards = NULL;
    g->stage_models = NULL;
    g->engines = NULL;
    g->threads = NULL;
    return rc;
}
