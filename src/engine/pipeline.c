/* pipeline.c -- the handoffs between pipeline stages (docs/protocol/
 * pipeline.pml).
 *
 * A stage's ranks run the stage's layers over a step's batch; then each
 * hands the step to the rank of the same tensor-parallel number in the next
 * stage, in one message (stage_send and stage_recv in the model):
 *   plan header | plan body (int32 entries) | x (n_tokens, dim floats)
 * x is the residual stream after the stage's last layer, the same on every
 * rank of the stage, so the next stage starts exactly where a single rank
 * would be. The last stage's first rank sends the leader the step's logits.
 * Every message goes through the pipe's links: tagged (step, index), in
 * order, a bounded mailbox per link, every wait under the deadline. */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Records the outcome of a pipe call that started at t0, as parallel.c
 * does for collectives. */
static int finish(struct engine *engine, int rc, double t0) {
    engine->comm_seconds += now_seconds() - t0;
    if (rc != COMM_OK) engine->comm_error = rc;
    return rc == COMM_OK ? 0 : -1;
}

/* Bytes of a handoff's x: the step's tokens' residual rows. */
static size_t activation_bytes(const struct engine *engine, const struct plan_header *h) {
    return (size_t)h->n_tokens * (size_t)engine->model->config.dim * sizeof(float);
}

static struct comm_tag pipe_tag(const struct engine *engine, uint64_t step, uint32_t index) {
    return (struct comm_tag){step, engine_fault_apply(engine, index)};
}

int engine_stage_send(struct engine *engine, const struct plan_header *h, const int32_t *body) {
    size_t body_bytes = h->n_tokens > 0 ? engine_plan_entries(h) * sizeof(int32_t) : 0;
    size_t x_bytes = h->n_tokens > 0 ? activation_bytes(engine, h) : 0;
    size_t bytes = sizeof(*h) + body_bytes + x_bytes;
    unsigned char *message = malloc(bytes);
    if (!message) {
        engine->comm_error = COMM_ERR_SYSTEM;
        snprintf(engine->comm_message, sizeof(engine->comm_message),
                 "engine: out of memory for a %zu-byte handoff", bytes);
        return -1;
    }
    memcpy(message, h, sizeof(*h));
    if (body_bytes) memcpy(message + sizeof(*h), body, body_bytes);
    if (x_bytes) memcpy(message + sizeof(*h) + body_bytes, engine->x, x_bytes);
    int next = comm_rank(engine->pipe) + engine->stage_ranks;
    double t0 = now_seconds();
    int rc =
        comm_send(engine->pipe, message, bytes, next, pipe_tag(engine, h->step, ENGINE_TAG_HANDOFF),
                  engine->comm_message, sizeof(engine->comm_message));
    free(message);
    return finish(engine, rc, t0);
}

int engine_stage_receive(struct engine *engine, struct plan_header *h, char *err, size_t errlen) {
    void *message = NULL;
    size_t bytes = 0;
    int previous = comm_rank(engine->pipe) - engine->stage_ranks;
    double t0 = now_seconds();
    int rc = comm_recv(engine->pipe, previous, pipe_tag(engine, engine->step, ENGINE_TAG_HANDOFF),
                       &message, &bytes, engine->comm_message, sizeof(engine->comm_message));
    if (finish(engine, rc, t0)) {
        snprintf(err, errlen, "%s", engine->comm_message);
        return -1;
    }
    int bad = bytes < sizeof(*h);
    if (!bad) memcpy(h, message, sizeof(*h));
    if (!bad && h->n_tokens > 0) {
        if (engine_plan_check_header(engine, h, err, errlen)) {
            free(message);
            return -1;
        }
        size_t body_bytes = engine_plan_entries(h) * sizeof(int32_t);
        bad = bytes != sizeof(*h) + body_bytes + activation_bytes(engine, h);
        if (!bad && engine_plan_reserve(engine->plan, engine_plan_entries(h))) {
            free(message);
            snprintf(err, errlen, "engine: out of memory for the step plan");
            return -1;
        }
        if (!bad) {
            const unsigned char *at = (const unsigned char *)message + sizeof(*h);
            memcpy(engine->plan->body, at, body_bytes);
            memcpy(engine->x, at + body_bytes, activation_bytes(engine, h));
        }
    } else if (!bad) {
        bad = bytes != sizeof(*h);
    }
    free(message);
    if (bad)
        snprintf(err, errlen,
                 "engine: step %llu: a handoff of %zu bytes from rank %d does not "
                 "match its header",
                 (unsigned long long)engine->step, bytes, previous);
    return bad ? -1 : 0;
}

int engine_send_logits(struct engine *engine, int n_wanted) {
    size_t bytes = (size_t)n_wanted * (size_t)engine->model->config.vocab_size * sizeof(float);
    double t0 = now_seconds();
    int rc = comm_send(engine->pipe, engine->logits, bytes, 0,
                       pipe_tag(engine, engine->step, ENGINE_TAG_LOGITS), engine->comm_message,
                       sizeof(engine->comm_message));
    return finish(engine, rc, t0);
}

int engine_receive_logits(struct engine *engine, uint64_t step, int n_wanted, char *err,
                          size_t errlen) {
    void *message = NULL;
    size_t bytes = 0;
    int last = (engine->n_stages - 1) * engine->stage_ranks;
    double t0 = now_seconds();
    int rc = comm_recv(engine->pipe, last, pipe_tag(engine, step, ENGINE_TAG_LOGITS), &message,
                       &bytes, engine->comm_message, sizeof(engine->comm_message));
    if (finish(engine, rc, t0)) {
        snprintf(err, errlen, "%s", engine->comm_message);
        return -1;
    }
    size_t expected = (size_t)n_wanted * (size_t)engine->model->config.vocab_size * sizeof(float);
    if (bytes != expected) {
        free(message);
        snprintf(err, errlen, "engine: step %llu: %zu bytes of logits from rank %d, expected %zu",
                 (unsigned long long)step, bytes, last, expected);
        return -1;
    }
    if (bytes) memcpy(engine->logits, message, bytes);
    free(message);
    return n_wanted;
}
