/* trace.c -- the execution trace: every step's start and end time and the
 * sequences and token counts it carried.
 *
 * Steps are kept in a fixed-size ring (the most recent trace_steps), so a
 * long-running runner uses constant memory; with a trace file every step
 * and every request event (arrival, preemption, finish) is also written as
 * one JSON line the moment it happens, which is what the tests read to
 * check the scheduling invariants. */
#include "runner_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int runner_trace_init(struct runner *runner, char *err, size_t errlen) {
    size_t steps = (size_t)runner->params.trace_steps;
    runner->ring = calloc(steps, sizeof(*runner->ring));
    runner->slots = calloc(steps * (size_t)runner->params.max_sequences, sizeof(*runner->slots));
    if (!runner->ring || !runner->slots) {
        snprintf(err, errlen, "runner: out of memory for the trace of %zu steps", steps);
        return -1;
    }
    for (size_t i = 0; i < steps; i++)
        runner->ring[i].entries = runner->slots + i * (size_t)runner->params.max_sequences;
    return 0;
}

void runner_trace_free(struct runner *runner) {
    free(runner->ring);
    free(runner->slots);
    if (runner->trace_file) fclose(runner->trace_file);
}

int runner_trace_open(struct runner *runner, const char *path, char *err, size_t errlen) {
    runner->trace_file = fopen(path, "w");
    if (!runner->trace_file) {
        snprintf(err, errlen, "runner: cannot write the trace %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

void runner_trace_begin(struct runner *runner, uint64_t start_us, int n_tokens) {
    struct runner_trace_step *t = &runner->ring[runner->ring_next];
    const struct kv_cache *kv = &runner->engine->kv;
    t->step = runner->steps;
    t->start_us = start_us;
    t->end_us = 0;
    t->n_tokens = n_tokens;
    t->n_entries = runner->n_batch_sequences;
    for (int i = 0; i < t->n_entries; i++) {
        const struct runner_sequence *s = runner->batch_sequences[i];
        t->entries[i] = (struct runner_trace_entry){s->client, s->request.id, s->n_computed,
                                                    s->step_tokens, i < runner->n_decode};
    }
    t->kv_blocks_used = kv_blocks_held(kv);
}

/* One step as a JSON line. */
static void write_step(FILE *f, const struct runner_trace_step *t) {
    fprintf(f,
            "{\"type\":\"step\",\"step\":%llu,\"start_us\":%llu,\"end_us\":%llu,\"tokens\":%d,"
            "\"kv_used\":%d,\"sequences\":[",
            (unsigned long long)t->step, (unsigned long long)t->start_us,
            (unsigned long long)t->end_us, t->n_tokens, t->kv_blocks_used);
    for (int i = 0; i < t->n_entries; i++) {
        const struct runner_trace_entry *e = &t->entries[i];
        fprintf(f, "%s{\"client\":%u,\"id\":%llu,\"position\":%d,\"tokens\":%d,\"decode\":%d}",
                i ? "," : "", e->client, (unsigned long long)e->id, e->position, e->n_tokens,
                e->decode);
    }
    fputs("]}\n", f);
    fflush(f);
}

void runner_trace_end(struct runner *runner, uint64_t end_us) {
    struct runner_trace_step *t = &runner->ring[runner->ring_next];
    t->end_us = end_us;
    runner->ring_next = (runner->ring_next + 1) % runner->params.trace_steps;
    if (runner->ring_count < runner->params.trace_steps) runner->ring_count++;
    if (runner->trace_file) write_step(runner->trace_file, t);
}

void runner_trace_event(struct runner *runner, const char *event,
                        const struct runner_sequence *sequence, uint64_t t_us, const char *detail) {
    if (!runner->trace_file) return;
    fprintf(runner->trace_file,
            "{\"type\":\"%s\",\"client\":%u,\"id\":%llu,\"t_us\":%llu,\"prompt\":%d,"
            "\"generated\":%d,\"step\":%llu%s%s%s}\n",
            event, sequence->client, (unsigned long long)sequence->request.id,
            (unsigned long long)t_us, sequence->request.n_prompt, sequence->n_generated,
            (unsigned long long)runner->steps, detail ? ",\"detail\":\"" : "", detail ? detail : "",
            detail ? "\"" : "");
    fflush(runner->trace_file);
}

int runner_trace_recent(const struct runner *runner, const struct runner_trace_step **steps,
                        int max) {
    int n = runner->ring_count < max ? runner->ring_count : max;
    int first = runner->ring_next - n;
    if (first < 0) first += runner->params.trace_steps;
    for (int i = 0; i < n; i++) steps[i] = &runner->ring[(first + i) % runner->params.trace_steps];
    return n;
}
