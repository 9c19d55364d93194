/* parallel.c -- the engine's collectives: tagged with (step, index), timed,
 * and their failures kept in the engine for the caller to report and to
 * turn into the rank's exit code (comm_exit_code). */
#include "engine_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Records the outcome of a collective that started at t0. */
static int finish(struct engine *engine, int rc, double t0) {
    engine->comm_seconds += now_seconds() - t0;
    if (rc != COMM_OK) engine->comm_error = rc;
    return rc == COMM_OK ? 0 : -1;
}

static struct comm_tag tag_of(const struct engine *engine, uint32_t index) {
    struct comm_tag tag = {engine->step, engine_fault_apply(engine, index)};
    return tag;
}

int engine_allgather(struct engine *engine, const void *send, size_t bytes, void *recv,
                     uint32_t index) {
    if (!engine->comm) return 0;
    double t0 = now_seconds();
    int rc = comm_allgather(engine->comm, send, bytes, recv, tag_of(engine, index),
                            engine->comm_message, sizeof(engine->comm_message));
    return finish(engine, rc, t0);
}

int engine_broadcast(struct engine *engine, void *buf, size_t bytes, uint32_t index) {
    double t0 = now_seconds();
    int rc = comm_broadcast(engine->comm, buf, bytes, 0, tag_of(engine, index),
                            engine->comm_message, sizeof(engine->comm_message));
    return finish(engine, rc, t0);
}

int engine_send(struct engine *engine, const void *buf, size_t bytes, int dest, uint64_t step,
                uint32_t index) {
    struct comm_tag tag = {step, engine_fault_apply(engine, index)};
    double t0 = now_seconds();
    int rc = comm_send(engine->pipe, buf, bytes, dest, tag, engine->comm_message,
                       sizeof(engine->comm_message));
    return finish(engine, rc, t0);
}

int engine_receive(struct engine *engine, int source, uint64_t step, uint32_t index, void **message,
                   size_t *bytes) {
    struct comm_tag tag = {step, engine_fault_apply(engine, index)};
    double t0 = now_seconds();
    int rc = comm_recv(engine->pipe, source, tag, message, bytes, engine->comm_message,
                       sizeof(engine->comm_message));
    return finish(engine, rc, t0);
}

int engine_gather_logits(struct engine *engine, int n_wanted) {
    const struct model *m = engine->model;
    int n_ranks = comm_size(engine->comm), vocab = m->config.vocab_size;
    int leader = comm_rank(engine->comm) == 0;
    uint32_t index = ENGINE_TAG_LAYER(m->config.n_layers, 0);
    /* rank r holds rows [vocab * r / n, vocab * (r + 1) / n) of the classifier */
    for (int r = 0; leader && r < n_ranks; r++) {
        int rows = (int)((int64_t)vocab * (r + 1) / n_ranks - (int64_t)vocab * r / n_ranks);
        engine->gather_bytes[r] = (size_t)n_wanted * rows * sizeof(float);
    }
    double t0 = now_seconds();
    int rc = comm_gather(engine->comm, engine->logits_slice,
                         (size_t)n_wanted * m->output.rows * sizeof(float), engine->logits_gathered,
                         engine->gather_bytes, 0, tag_of(engine, index), engine->comm_message,
                         sizeof(engine->comm_message));
    if (finish(engine, rc, t0) || !leader) return rc == COMM_OK ? 0 : -1;
    /* slices arrive rank after rank as (n_wanted, rows_r): interleave them
     * into one (n_wanted, vocab) row per token */
    const float *slice = engine->logits_gathered;
    for (int r = 0; r < n_ranks; r++) {
        int begin = (int)((int64_t)vocab * r / n_ranks);
        int rows = (int)((int64_t)vocab * (r + 1) / n_ranks) - begin;
        for (int t = 0; t < n_wanted; t++)
            memcpy(engine->logits + (size_t)t * vocab + begin, slice + (size_t)t * rows,
                   (size_t)rows * sizeof(float));
        slice += (size_t)n_wanted * rows;
    }
    return 0;
}
