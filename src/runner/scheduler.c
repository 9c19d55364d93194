/* scheduler.c -- what goes into the next step.
 *
 * A step fills a token budget: first one decode token for every sequence
 * that is decoding (a running stream is never skipped for a prompt), then
 * prefill chunks of the other sequences in arrival order. A waiting prompt
 * is admitted only when the KV blocks of all its tokens fit and a sequence
 * slot is free; admission is first come, first served (a large prompt is not
 * overtaken forever by small ones). When a decoding sequence needs a block
 * and the pool is empty, the newest admitted sequence gives its blocks back
 * and waits to be recomputed from its tokens (preemption by recomputation:
 * its output is the same, since every chunking gives the same logits).
 *
 * Every prompt that has not started yet is promised one token of the step's
 * budget before earlier prompts take the rest, so a new request waits at
 * most one step for its first prefill chunk (DESIGN.md I1).
 *
 * With the prefix cache on, an admitted sequence starts from the longest
 * run of cached blocks its tokens begin with (engine.h, prefix.c), and
 * publishes each block it completes. A prompt whose next blocks another
 * admitted sequence is computing right now waits for them instead of
 * computing them twice: the choices of one request (n > 1) compute their
 * shared prompt once. Cached blocks no sequence holds count as free
 * (kv_available), so the cache never keeps a prompt waiting.
 *
 * A sequence in a step still in flight (a pipeline's micro-batches) is
 * left out, and is never a preemption victim: its step may be writing its
 * blocks. */
#include "runner_internal.h"

#include <string.h>

/* Tokens the sequence still has to feed. */
static int pending(const struct runner_sequence *s) {
    return s->n_tokens - s->n_computed;
}

/* Decoding: the prompt was computed and one sampled token waits. */
static int is_decoding(const struct runner_sequence *s) {
    return s->admitted && s->n_generated > 0 && pending(s) == 1;
}

void runner_preempt(struct runner *runner, struct runner_sequence *sequence) {
    kv_sequence_release(&runner->engine->kv, &sequence->kv);
    sequence->n_computed = 0;
    if (sequence->pool_sum)
        memset(sequence->pool_sum, 0, (size_t)runner->engine->model->config.dim * sizeof(double));
    sequence->admitted = 0;
    runner->n_admitted--;
    runner_trace_event(runner, "preempt", sequence, clock_now_us(), NULL);
}

/* The admitted sequence that arrived last and is in no step in flight
 * (whose blocks a step may be writing), or NULL. */
static struct runner_sequence *newest_admitted(struct runner *runner) {
    for (int i = runner->n_sequences - 1; i >= 0; i--)
        if (runner->sequences[i]->admitted && !runner->sequences[i]->in_flight)
            return runner->sequences[i];
    return NULL;
}

uint8_t runner_wants(const struct runner *runner, const struct runner_sequence *s, int position) {
    if (s->request.embed)
        return engine_pooling_wants((enum engine_pooling)runner->params.pooling, position,
                                    s->n_tokens)
                   ? ENGINE_WANT_HIDDEN
                   : 0;
    return position + 1 == s->n_tokens ? ENGINE_WANT_LOGITS : 0;
}

/* Appends the next n tokens of s to the batch. */
static void add_to_batch(struct runner *runner, struct runner_sequence *s, int n, int *n_tokens) {
    for (int i = 0; i < n; i++) {
        int t = *n_tokens + i, position = s->n_computed + i;
        runner->batch_tokens[t] = s->tokens[position];
        runner->batch_positions[t] = position;
        runner->batch_kv[t] = &s->kv;
        runner->batch_want[t] = runner_wants(runner, s, position);
    }
    s->step_tokens = n;
    runner->batch_sequences[runner->n_batch_sequences++] = s;
    *n_tokens += n;
}

/* The decode tokens one step takes: every decoding sequence's, or with k
 * steps in flight a k-th of them (rounded up), so that the decoding
 * sequences spread over k micro-batches and every stage has one. A
 * sequence in flight counts: it decodes in another micro-batch. */
static int decode_share(const struct runner *runner) {
    if (runner->max_in_flight <= 1) return runner->params.step_tokens;
    int decoding = 0;
    for (int i = 0; i < runner->n_sequences; i++) {
        const struct runner_sequence *s = runner->sequences[i];
        decoding += s->admitted && s->n_generated > 0 && pending(s) == 1;
    }
    return (decoding + runner->max_in_flight - 1) / runner->max_in_flight;
}

/* Reserves the decode position of every decoding sequence (up to its
 * share, decode_share), oldest first, preempting the newest when the pool
 * runs dry, and puts them in the batch. Victims are always newer than the
 * sequence being served (or it), so no sequence already in the batch loses
 * its blocks. */
static int schedule_decodes(struct runner *runner) {
    struct kv_cache *kv = &runner->engine->kv;
    int n_tokens = 0, share = decode_share(runner);
    for (int i = 0; i < runner->n_sequences && n_tokens < share; i++) {
        struct runner_sequence *s = runner->sequences[i];
        if (!is_decoding(s) || s->in_flight) continue;
        int reserved = 1;
        while (reserved && kv_sequence_reserve(kv, &s->kv, s->n_tokens)) {
            struct runner_sequence *victim = newest_admitted(runner);
            if (victim) runner_preempt(runner, victim);
            /* no victim: the rest are in flight; s waits for their blocks */
            reserved = victim && victim != s;
        }
        if (reserved && s->admitted) add_to_batch(runner, s, 1, &n_tokens);
    }
    runner->n_decode = n_tokens;
    return n_tokens;
}

/* Tokens a and b have in common from the start. */
static int common_prefix(const struct runner_sequence *a, const struct runner_sequence *b) {
    int n = a->n_tokens < b->n_tokens ? a->n_tokens : b->n_tokens, i = 0;
    while (i < n && a->tokens[i] == b->tokens[i]) i++;
    return i;
}

/* 1 if an admitted sequence is computing a full block that s could share
 * once it is published: one s would otherwise compute too. */
static int awaits_shared_block(const struct runner *runner, const struct runner_sequence *s) {
    int bs = runner->engine->kv.block_size;
    int shareable = (s->n_tokens - 1) / bs * bs; /* kv_sequence_share's limit */
    for (int i = 0; i < runner->n_sequences; i++) {
        const struct runner_sequence *o = runner->sequences[i];
        if (o == s || !o->admitted || o->n_computed >= shareable) continue;
        int common = common_prefix(s, o) / bs * bs;
        if (common > shareable) common = shareable;
        if (common > o->n_computed) return 1;
    }
    return 0;
}

/* Admits s if a slot is free and the blocks of all its tokens fit, with
 * those the prefix cache has shared. */
static int admit(struct runner *runner, struct runner_sequence *s) {
    struct kv_cache *kv = &runner->engine->kv;
    if (runner->n_admitted >= runner->params.max_sequences) return 0;
    /* an embedding pooled over more than the last position needs every
     * state it pools computed, not found in the cache */
    int shares = !s->request.embed || runner->params.pooling == RUNNER_POOLING_LAST;
    if (runner->params.prefix_cache && shares) {
        if (awaits_shared_block(runner, s)) return 0;
        s->n_computed = kv_sequence_share(kv, &s->kv, s->tokens, s->n_tokens);
    }
    if (kv_sequence_reserve(kv, &s->kv, s->n_tokens)) {
        kv_sequence_release(kv, &s->kv);
        s->n_computed = 0;
        return 0;
    }
    if (s->n_cached < 0)
        s->n_cached = s->n_computed < s->request.n_prompt ? s->n_computed : s->request.n_prompt;
    s->admitted = 1;
    runner->n_admitted++;
    return 1;
}

int runner_schedule(struct runner *runner) {
    int budget = runner->params.step_tokens, unstarted = 0, admitting = 1;
    runner->n_batch_sequences = 0;
    for (int i = 0; i < runner->n_sequences; i++) {
        runner->sequences[i]->step_tokens = 0;
        unstarted += !runner->sequences[i]->started;
    }
    int n_tokens = schedule_decodes(runner);
    for (int i = 0; i < runner->n_sequences && n_tokens < budget; i++) {
        struct runner_sequence *s = runner->sequences[i];
        /* (a decoding sequence past its step's share waits for the next) */
        if (s->step_tokens || is_decoding(s) || s->in_flight) continue;
        if (!s->started) unstarted--;
        if (!s->admitted && (!admitting || !admit(runner, s))) {
            admitting = 0; /* first come, first served: nobody overtakes it */
            continue;
        }
        /* leave one token for each newer prompt that has not started and
         * could be admitted */
        int free_slots = runner->params.max_sequences - runner->n_admitted;
        int room = budget - n_tokens - (unstarted < free_slots ? unstarted : free_slots);
        if (room < 1 && s->started) continue; /* the rest is the newer prompts' first tokens */
        if (room < 1) room = 1;
        int n = pending(s) < room ? pending(s) : room;
        s->started = 1;
        add_to_batch(runner, s, n, &n_tokens);
    }
    return n_tokens;
}
