/* plan.c -- lockstep execution (DESIGN.md I2): the leader decides, every
 * rank executes exactly what it decided.
 *
 * Each step the leader broadcasts a plan -- a fixed-size header, then a body
 * of int32 arrays -- and runs it; followers receive the plan, rebuild the
 * batch and run the same forward pass, so every rank issues the same
 * collectives with the same (step, index) tags in the same order by
 * construction. Body layout, for n tokens and s sequences:
 *   tokens[n] positions[n] sequence_of_token[n] want_logits[n]
 *   blocks_of_sequence[s] block_ids[sum of blocks_of_sequence] */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct engine_plan *engine_plan_create(int max_tokens) {
    struct engine_plan *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    size_t n = (size_t)max_tokens;
    p->max_tokens = max_tokens;
    p->seqs = calloc(n, sizeof(*p->seqs));
    p->leader_seqs = malloc(n * sizeof(const struct kv_sequence *));
    if (!p->seqs || !p->leader_seqs) {
        engine_plan_free(p);
        return NULL;
    }
    return p;
}

void engine_plan_free(struct engine_plan *plan) {
    if (!plan) return;
    for (int i = 0; plan->seqs && i < plan->max_tokens; i++) free(plan->seqs[i].blocks);
    free(plan->seqs);
    free((void *)plan->leader_seqs);
    free(plan->body);
    free(plan);
}

int engine_plan_reserve(struct engine_plan *plan, size_t entries) {
    if (entries <= plan->body_capacity) return 0;
    int32_t *grown = realloc(plan->body, entries * sizeof(int32_t));
    if (!grown) return -1;
    plan->body = grown;
    plan->body_capacity = entries;
    return 0;
}

/* Serializes batch into plan->body and header; -1 if out of memory. */
static int encode_plan(struct engine *engine, const struct engine_batch *b, struct plan_header *h) {
    struct engine_plan *p = engine->plan;
    int n = b->n_tokens, n_seqs = 0, n_ids = 0;
    for (int t = 0; t < n; t++) {
        int j = n_seqs - 1; /* a sequence's tokens are consecutive: check the last first */
        while (j >= 0 && p->leader_seqs[j] != b->seqs[t]) j--;
        if (j < 0) {
            p->leader_seqs[n_seqs++] = b->seqs[t];
            n_ids += b->seqs[t]->n_blocks;
        }
    }
    if (engine_plan_reserve(p, 4 * (size_t)n + (size_t)n_seqs + (size_t)n_ids)) return -1;
    int32_t *tokens = p->body, *positions = tokens + n, *seq_of = positions + n;
    int32_t *want = seq_of + n, *blocks_of = want + n, *ids = blocks_of + n_seqs;
    for (int t = 0; t < n; t++) {
        int j = n_seqs - 1;
        while (p->leader_seqs[j] != b->seqs[t]) j--;
        tokens[t] = b->tokens[t];
        positions[t] = b->positions[t];
        seq_of[t] = j;
        want[t] = b->want_logits[t];
    }
    for (int j = 0; j < n_seqs; j++) {
        blocks_of[j] = p->leader_seqs[j]->n_blocks;
        memcpy(ids, p->leader_seqs[j]->blocks, (size_t)blocks_of[j] * sizeof(int32_t));
        ids += blocks_of[j];
    }
    *h = (struct plan_header){engine->step,
                              n,
                              n_seqs,
                              n_ids,
                              0,
                              engine->planned_fault.kind,
                              engine->planned_fault.rank,
                              engine->planned_delay_ms,
                              engine->planned_delay_steps};
    engine->planned_fault.kind = ENGINE_FAULT_NONE;
    return 0;
}

void engine_plan_fault(struct engine *leader, enum engine_fault_kind kind, int rank, int delay_ms,
                       int steps) {
    leader->planned_fault = (struct engine_fault){kind, rank, 0};
    leader->planned_delay_ms = delay_ms;
    leader->planned_delay_steps = steps;
}

/* Makes the fault a plan carries this rank's, from this step on. */
static void take_fault(struct engine *engine, const struct plan_header *h) {
    int rank = engine_rank(engine);
    if (h->fault_rank != rank) return;
    if (h->fault_kind == ENGINE_FAULT_STALL)
        engine->fault = (struct engine_fault){ENGINE_FAULT_STALL, rank, h->step};
    if (h->fault_kind == ENGINE_FAULT_DELAY && h->fault_delay_ms > 0) {
        engine->delay_ms = h->fault_delay_ms;
        engine->delay_until = h->step + (uint64_t)h->fault_steps;
    }
}

/* The wanted rows of a batch. */
static int wanted_rows(const struct engine_batch *batch) {
    int n = 0;
    for (int t = 0; t < batch->n_tokens; t++) n += batch->want_logits[t] == ENGINE_WANT_LOGITS;
    return n;
}

/* Keeps a submitted step in the flights (rows: its logits rows, or -1
 * for a pass that failed). */
static void add_flight(struct engine *engine, int rows) {
    engine->flights[engine->n_flights++] = (struct engine_flight){engine->step, rows};
    engine->step++;
}

int engine_submit_step(struct engine *engine, const struct engine_batch *batch, char *err,
                       size_t errlen) {
    struct plan_header h;
    if (engine->n_flights >= engine->n_stages) {
        snprintf(err, errlen, "engine: %d steps in flight already (%d stages)", engine->n_flights,
                 engine->n_stages);
        return -1;
    }
    if (!engine->comm && !engine->pipe) {
        /* one rank: no plan to carry a fault; it strikes around the pass */
        h = (struct plan_header){engine->step,
                                 batch->n_tokens,
                                 0,
                                 0,
                                 0,
                                 engine->planned_fault.kind,
                                 engine->planned_fault.rank,
                                 engine->planned_delay_ms,
                                 engine->planned_delay_steps};
        engine->planned_fault.kind = ENGINE_FAULT_NONE;
        take_fault(engine, &h);
        engine_fault_apply(engine, 0);
        int rows = engine_forward(engine, batch, err, errlen);
        if (rows < 0) return -1;
        add_flight(engine, rows);
        return 0;
    }
    /* a bad batch is refused before the followers see it */
    if (engine_check_batch(engine, batch, err, errlen)) return -1;
    if (encode_plan(engine, batch, &h)) {
        snprintf(err, errlen, "engine: out of memory for the step plan");
        return -1;
    }
    size_t body_bytes = engine_plan_entries(&h) * sizeof(int32_t);
    take_fault(engine, &h);
    if (engine->comm &&
        (engine_broadcast(engine, &h, sizeof(h), ENGINE_TAG_PLAN_HEADER) ||
         engine_broadcast(engine, engine->plan->body, body_bytes, ENGINE_TAG_PLAN_BODY))) {
        snprintf(err, errlen, "%s", engine->comm_message);
        return -1;
    }
    int rows = engine_forward(engine, batch, err, errlen);
    if (rows < 0) return -1;
    /* a pipeline: the step goes on down the stages (SUBMIT); its logits
     * come back from the last (COLLECT) */
    if (engine->pipe) {
        if (engine_stage_send(engine, &h, engine->plan->body)) {
            snprintf(err, errlen, "%s", engine->comm_message);
            return -1;
        }
        rows = wanted_rows(batch);
    }
    add_flight(engine, rows);
    return 0;
}

int engine_collect_step(struct engine *engine, char *err, size_t errlen) {
    if (engine->n_flights == 0) {
        snprintf(err, errlen, "engine: no step in flight to collect");
        return -1;
    }
    struct engine_flight oldest = engine->flights[0];
    engine->n_flights--;
    memmove(engine->flights, engine->flights + 1,
            (size_t)engine->n_flights * sizeof(engine->flights[0]));
    if (!engine->pipe) return oldest.rows;
    return engine_receive_logits(engine, oldest.step, oldest.rows, err, errlen);
}

int engine_lead_step(struct engine *engine, const struct engine_batch *batch, char *err,
                     size_t errlen) {
    if (engine_submit_step(engine, batch, err, errlen)) return -1;
    return engine_collect_step(engine, err, errlen);
}

/* Broadcasts a plan without a batch: keep_alive 1 keeps the followers
 * waiting, 0 releases them. A keep-alive is a step of its own. */
static int send_empty_plan(struct engine *engine, int keep_alive, char *err, size_t errlen) {
    struct plan_header h = {engine->step, 0, 0, 0, keep_alive, 0, 0, 0, 0};
    if (!engine->comm && !engine->pipe) return 0;
    if ((engine->comm && engine_broadcast(engine, &h, sizeof(h), ENGINE_TAG_PLAN_HEADER)) ||
        (engine->pipe && engine_stage_send(engine, &h, NULL))) {
        snprintf(err, errlen, "%s", engine->comm_message);
        return -1;
    }
    if (keep_alive) engine->step++;
    return 0;
}

int engine_release_followers(struct engine *engine, char *err, size_t errlen) {
    return send_empty_plan(engine, 0, err, errlen);
}

int engine_keep_alive(struct engine *engine, char *err, size_t errlen) {
    return send_empty_plan(engine, 1, err, errlen);
}

int engine_plan_check_header(const struct engine *engine, const struct plan_header *h, char *err,
                             size_t errlen) {
    if (h->n_tokens < 0 || h->n_tokens > engine->max_tokens || h->n_seqs < 1 ||
        h->n_seqs > h->n_tokens || h->n_block_ids < 0 ||
        (int64_t)h->n_block_ids > (int64_t)h->n_seqs * engine->kv.n_blocks) {
        snprintf(err, errlen,
                 "engine: step %llu: bad plan (%d tokens, %d sequences, %d blocks; limits %d "
                 "tokens, %d blocks)",
                 (unsigned long long)h->step, h->n_tokens, h->n_seqs, h->n_block_ids,
                 engine->max_tokens, engine->kv.n_blocks);
        return -1;
    }
    return 0;
}

/* 1 if every index in a received body is in range and the block counts add
 * up to the header's total. */
static int body_is_valid(const struct engine *engine, const struct plan_header *h) {
    const int32_t *seq_of = engine->plan->body + 2 * (size_t)h->n_tokens;
    const int32_t *blocks_of = seq_of + 2 * (size_t)h->n_tokens;
    const int32_t *ids = blocks_of + h->n_seqs;
    int64_t total = 0;
    for (int t = 0; t < h->n_tokens; t++)
        if (seq_of[t] < 0 || seq_of[t] >= h->n_seqs) return 0;
    for (int j = 0; j < h->n_seqs; j++) {
        if (blocks_of[j] < 0) return 0;
        total += blocks_of[j];
    }
    if (total != h->n_block_ids) return 0;
    for (int i = 0; i < h->n_block_ids; i++)
        if (ids[i] < 0 || ids[i] >= engine->kv.n_blocks) return 0;
    return 1;
}

/* Rebuilds the sequences and the batch from a received body. */
static int decode_plan(struct engine *engine, const struct plan_header *h,
                       struct engine_batch *batch, char *err, size_t errlen) {
    struct engine_plan *p = engine->plan;
    int n = h->n_tokens, n_seqs = h->n_seqs;
    const int32_t *tokens = p->body, *positions = tokens + n, *seq_of = positions + n;
    const int32_t *want = seq_of + n, *blocks_of = want + n, *ids = blocks_of + n_seqs;
    if (!body_is_valid(engine, h)) {
        snprintf(err, errlen, "engine: step %llu: inconsistent plan body",
                 (unsigned long long)h->step);
        return -1;
    }
    for (int j = 0; j < n_seqs; ids += blocks_of[j], j++) {
        struct kv_sequence *s = &p->seqs[j];
        if (blocks_of[j] > s->capacity) {
            int *grown = realloc(s->blocks, (size_t)blocks_of[j] * sizeof(int));
            if (!grown) {
                snprintf(err, errlen, "engine: out of memory for the step plan");
                return -1;
            }
            s->blocks = grown;
            s->capacity = blocks_of[j];
        }
        memcpy(s->blocks, ids, (size_t)blocks_of[j] * sizeof(int));
        s->n_blocks = blocks_of[j];
    }
    /* tokens and positions are used where they arrived (int32_t is int
     * here); sequences and flags go to the engine's batch arrays */
    for (int t = 0; t < n; t++) {
        engine->chunk_sequences[t] = &p->seqs[seq_of[t]];
        engine->chunk_want[t] = (uint8_t)want[t];
    }
    *batch =
        (struct engine_batch){n, tokens, positions, engine->chunk_sequences, engine->chunk_want};
    return 0;
}

/* Receives the next plan: stage 0's followers from the leader's
 * broadcast, a later stage's ranks from their peer in the stage before
 * (with x). An empty plan has no body. */
static int receive_plan(struct engine *engine, struct plan_header *h, char *err, size_t errlen) {
    if (engine->stage > 0) return engine_stage_receive(engine, h, err, errlen);
    if (engine_broadcast(engine, h, sizeof(*h), ENGINE_TAG_PLAN_HEADER)) {
        snprintf(err, errlen, "%s", engine->comm_message);
        return -1;
    }
    if (h->n_tokens == 0) return 0;
    if (engine_plan_check_header(engine, h, err, errlen)) return -1;
    if (engine_plan_reserve(engine->plan, engine_plan_entries(h))) {
        snprintf(err, errlen, "engine: out of memory for the step plan");
        return -1;
    }
    if (engine_broadcast(engine, engine->plan->body, engine_plan_entries(h) * sizeof(int32_t),
                         ENGINE_TAG_PLAN_BODY)) {
        snprintf(err, errlen, "%s", engine->comm_message);
        return -1;
    }
    return 0;
}

/* After a rank ran step h: the next stage's peer gets it; the last
 * stage's first rank sends the leader the logits. */
static int pass_on(struct engine *engine, const struct plan_header *h, int rows, char *err,
                   size_t errlen) {
    int rc = 0;
    if (!engine->pipe) return 0;
    if (engine->stage + 1 < engine->n_stages)
        rc = engine_stage_send(engine, h, engine->plan->body);
    else if (h->n_tokens > 0 && (!engine->comm || comm_rank(engine->comm) == 0))
        rc = engine_send_logits(engine, rows);
    if (rc) snprintf(err, errlen, "%s", engine->comm_message);
    return rc;
}

int engine_follow(struct engine *engine, char *err, size_t errlen) {
    for (;;) {
        struct plan_header h;
        struct engine_batch batch;
        if (receive_plan(engine, &h, err, errlen)) return -1;
        if (h.n_tokens == 0) {
            if (pass_on(engine, &h, 0, err, errlen)) return -1;
            if (!h.keep_alive) return 0;
            engine->step++;
            continue;
        }
        take_fault(engine, &h);
        if (decode_plan(engine, &h, &batch, err, errlen)) return -1;
        int rows = engine_forward(engine, &batch, err, errlen);
        if (rows < 0 || pass_on(engine, &h, rows, err, errlen)) return -1;
        engine->step++;
    }
}
