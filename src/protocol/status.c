/* status.c -- the rank status file, read from outside the runner.
 *
 * `lockstep runner --status FILE` makes every rank mirror its collective
 * state into its record of FILE (comm_attach_status). The layout and the
 * meaning of a collective's index (ENGINE_TAG_*) belong to the runner and
 * the engine below it; a supervisor that maps the file (the gateway's
 * watchdog) reads it only through runner_status_read, so it needs no
 * header of the engine or of comm. */
#include "engine/engine.h"
#include "protocol/protocol.h"

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

size_t runner_status_bytes(void) {
    return RUNNER_RANKS_MAX * sizeof(struct comm_status_record);
}

/* What a collective index of a step is (ENGINE_TAG_* in engine.h). */
static void describe_index(char *out, size_t size, uint32_t index, int n_layers) {
    if (index == ENGINE_TAG_PLAN_HEADER)
        snprintf(out, size, "plan header");
    else if (index == ENGINE_TAG_PLAN_BODY)
        snprintf(out, size, "plan body");
    else if (index < ENGINE_TAG_LAYER(n_layers, 0))
        snprintf(out, size, "layer %u %s", (index - ENGINE_TAG_LAYER(0, 0)) / 2,
                 (index - ENGINE_TAG_LAYER(0, 0)) % 2 ? "feed-forward output" : "attention output");
    else
        snprintf(out, size, "logits gather");
}

void runner_status_read(const void *status, int rank, int n_layers,
                        struct runner_rank_status *out) {
    const struct comm_status_record *r = (const struct comm_status_record *)status + rank;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    out->pid = atomic_load(&r->pid);
    out->waiting = atomic_load(&r->waiting) != 0;
    out->step = atomic_load(&r->step);
    out->index = atomic_load(&r->index);
    uint64_t since = atomic_load(out->waiting ? &r->since_ns : &r->done_ns);
    out->seconds = since && now_ns > since ? (double)(now_ns - since) * 1e-9 : 0;
    describe_index(out->collective, sizeof(out->collective), out->index, n_layers);
}
