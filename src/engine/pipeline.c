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

/* Bytes of a handoff's x: the step's tokens' residual rows. */
static size_t activation_bytes(const struct engine *engine, const struct plan_header *h) {
    return (size_t)h->n_tokens * (size_t)engine->model->config.dim * sizeof(float);
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
    int rc = engine_send(engine, message, bytes, next, h->step, ENGINE_TAG_HANDOFF);
    free(message);
    return rc;
}

/* Takes a received handoff apart: its header into h, its body into the
 * plan and its x into engine->x; -1 with err if it is not what its header
 * says. */
static int unpack_handoff(struct engine *engine, const unsigned char *message, size_t bytes,
                          struct plan_header *h, char *err, size_t errlen) {
    if (bytes < sizeof(*h)) return -2;
    memcpy(h, message, sizeof(*h));
    if (h->n_tokens == 0) return bytes == sizeof(*h) ? 0 : -2;
    if (engine_plan_check_header(engine, h, err, errlen)) return -1;
    size_t body_bytes = engine_plan_entries(h) * sizeof(int32_t);
    if (bytes != sizeof(*h) + body_bytes + activation_bytes(engine, h)) return -2;
    if (engine_plan_reserve(engine->plan, engine_plan_entries(h))) {
        snprintf(err, errlen, "engine: out of memory for the step plan");
        return -1;
    }
    memcpy(engine->plan->body, message + sizeof(*h), body_bytes);
    memcpy(engine->x, message + sizeof(*h) + body_bytes, activation_bytes(engine, h));
    return 0;
}

int engine_stage_receive(struct engine *engine, struct plan_header *h, char *err, size_t errlen) {
    void *message = NULL;
    size_t bytes = 0;
    int previous = comm_rank(engine->pipe) - engine->stage_ranks;
    if (engine_receive(engine, previous, engine->step, ENGINE_TAG_HANDOFF, &message, &bytes)) {
        snprintf(err, errlen, "%s", engine->comm_message);
        return -1;
    }
    int rc = unpack_handoff(engine, message, bytes, h, err, errlen);
    free(message);
    if (rc == -2)
        snprintf(err, errlen,
                 "engine: step %llu: a handoff of %zu bytes from rank %d does not match its header",
                 (unsigned long long)engine->step, bytes, previous);
    return rc ? -1 : 0;
}

/* Bytes of n_wanted rows of logits. */
static size_t logits_bytes(const struct engine *engine, int n_wanted) {
    return (size_t)n_wanted * (size_t)engine->model->config.vocab_size * sizeof(float);
}

int engine_send_logits(struct engine *engine, int n_wanted) {
    return engine_send(engine, engine->logits, logits_bytes(engine, n_wanted), 0, engine->step,
                       ENGINE_TAG_LOGITS);
}

int engine_receive_logits(struct engine *engine, uint64_t step, int n_wanted, char *err,
                          size_t errlen) {
    void *message = NULL;
    size_t bytes = 0;
    int last = (engine->n_stages - 1) * engine->stage_ranks;
    if (engine_receive(engine, last, step, ENGINE_TAG_LOGITS, &message, &bytes)) {
        snprintf(err, errlen, "%s", engine->comm_message);
        return -1;
    }
    size_t expected = logits_bytes(engine, n_wanted);
    if (bytes == expected && bytes) memcpy(engine->logits, message, bytes);
    free(message);
    if (bytes == expected) return n_wanted;
    snprintf(err, errlen, "engine: step %llu: %zu bytes of logits from rank %d, expected %zu",
             (unsigned long long)step, bytes, last, expected);
    return -1;
}
