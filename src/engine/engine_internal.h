/* engine_internal.h -- what the engine's files share: the step plan and the
 * collectives of tensor-parallel execution. */
#ifndef LOCKSTEP_ENGINE_INTERNAL_H
#define LOCKSTEP_ENGINE_INTERNAL_H

#include "engine/engine.h"

/* The step plan: everything a rank needs to run one forward pass exactly as
 * the leader does (tokens, positions, and for each sequence its KV blocks).
 * The leader fills it from a batch; the followers rebuild a batch from it.
 * Followers keep no sequence state of their own: every plan carries the
 * block lists of the sequences it touches. */
struct engine_plan {
    int max_tokens;                         /* capacity of the token arrays */
    int32_t *body;                          /* serialized arrays, see plan.c */
    size_t body_capacity;                   /* int32 entries allocated */
    struct kv_sequence *seqs;               /* (max_tokens) follower: sequences of the step */
    const struct kv_sequence **leader_seqs; /* (max_tokens) leader: distinct sequences */
};

/* The prefix cache's side of the block pool (prefix.c), for kvcache.c. */
int kv_prefix_init(struct kv_cache *kv);
void kv_prefix_free(struct kv_cache *kv);
/* Cached blocks no sequence holds. */
int kv_prefix_evictable(const struct kv_cache *kv);
/* Takes the least recently used evictable block out of the cache and
 * returns it, or -1 if there is none. */
int kv_prefix_evict(struct kv_cache *kv);
/* A block no sequence holds any more: 1 if the cache keeps it (it becomes
 * the most recently used evictable block), 0 if it is free. */
int kv_prefix_keep(struct kv_cache *kv, int block);

/* What the leader broadcasts first (and a stage hands the next first).
 * n_tokens == 0 is no batch: a keep-alive (the followers wait for the
 * next plan) or the release. */
struct plan_header {
    uint64_t step;       /* the step this plan is */
    int32_t n_tokens;    /* tokens of the batch; 0: keep-alive or stop */
    int32_t n_seqs;      /* distinct sequences */
    int32_t n_block_ids; /* total block ids in the body */
    int32_t keep_alive;  /* with n_tokens == 0: 1 keep waiting, 0 stop */
    int32_t fault_kind;  /* an injected fault for this step (tests): enum engine_fault_kind */
    int32_t fault_rank;  /* ... the rank it strikes */
    int32_t fault_delay_ms, fault_steps; /* ... DELAY's longest sleep and duration */
};

/* int32 entries of the body a header announces. */
static inline size_t engine_plan_entries(const struct plan_header *h) {
    return 4 * (size_t)h->n_tokens + (size_t)h->n_seqs + (size_t)h->n_block_ids;
}

/* Makes the plan's body hold at least entries; -1 if out of memory. */
int engine_plan_reserve(struct engine_plan *plan, size_t entries);
/* Checks a received header against this rank's limits; -1 with err. */
int engine_plan_check_header(const struct engine *engine, const struct plan_header *h, char *err,
                             size_t errlen);

/* ---- the handoffs between pipeline stages (pipeline.c) ---- */

/* Hands step h (its body, and x of its tokens) to this rank's peer in the
 * next stage; an empty plan goes on alone. -1 with engine->comm_error. */
int engine_stage_send(struct engine *engine, const struct plan_header *h, const int32_t *body);
/* Receives the next step from the peer in the stage before: the header
 * into h, the body into engine->plan->body and x into engine->x, each
 * checked against the header; -1 with err (engine->comm_error set when a
 * collective failed). */
int engine_stage_receive(struct engine *engine, struct plan_header *h, char *err, size_t errlen);
/* Last stage's first rank: sends the leader the step's n_wanted rows of
 * logits. */
int engine_send_logits(struct engine *engine, int n_wanted);
/* Leader: receives step's n_wanted rows of logits from the last stage into
 * engine->logits; returns n_wanted, or -1 with err. */
int engine_receive_logits(struct engine *engine, uint64_t step, int n_wanted, char *err,
                          size_t errlen);

struct engine_plan *engine_plan_create(int max_tokens);
void engine_plan_free(struct engine_plan *plan);

/* Points engine->model at a copy of model whose matrices are packed for
 * the kernels in use (weights.c), if any are worth packing; -1 with err if
 * the memory cannot be had. */
int engine_pack_weights(struct engine *engine, const struct model *model, char *err, size_t errlen);
void engine_free_weights(struct engine *engine);

/* Checks what a batch asks for (sizes, token ids, positions, cache slots)
 * before anything is computed or broadcast; -1 with err if it is bad. */
int engine_check_batch(const struct engine *engine, const struct engine_batch *batch, char *err,
                       size_t errlen);

/* The forward pass proper over a checked batch, on engine's pool: token
 * embeddings, every layer, then the classifier (forward.c). Returns the
 * rows of logits written, or -1 (out of memory, or a failed collective
 * with engine->comm_error set). */
int engine_forward_tokens(struct engine *engine, const struct engine_batch *batch);

/* 1 if no two tokens of the batch belong to one sequence: a decode batch. */
int engine_batch_is_decode(const struct engine_batch *batch);

/* Passes run in slices (slice.c): a big enough decode batch is cut into
 * one contiguous range of tokens per thread, and each thread runs its
 * range through the whole pass alone. */
int engine_init_slices(struct engine *engine, char *err, size_t errlen);
void engine_free_slices(struct engine *engine);
/* 1 if the batch is run in slices. */
int engine_can_slice(const struct engine *engine, const struct engine_batch *batch);
/* engine_forward_tokens, in slices. */
int engine_forward_slices(struct engine *engine, const struct engine_batch *batch);
/* In a slice's pass: runs the layer's attention units of job (n_units of
 * them), lends a hand with the other slices' units that are ready, and
 * returns once every unit of job is done, whoever ran it. */
void engine_slice_attend(struct engine *view, void *job, int n_units);
/* Floats of one thread's attention work space: its scores ((n_heads,
 * context_length)), then room for the heads' queries quantized (which a
 * Q8_0 cache's scores take). */
size_t engine_attention_space(const struct model_config *c, int context_length);
/* Unit u of a layer's attention, job being forward.c's struct
 * attention_job, with scores as work space (engine_attention_space floats
 * of the thread running it). */
void engine_attention_unit(void *job, int u, float *scores);

/* Concatenates every rank's bytes from send, in rank order, into recv
 * (ranks * bytes) on every rank (tag: this step, index); send may be this
 * rank's own place in recv. Without a group does nothing. -1 on failure
 * with engine->comm_error and comm_message set. Time is added to
 * comm_seconds. */
int engine_allgather(struct engine *engine, const void *send, size_t bytes, void *recv,
                     uint32_t index);
/* Gathers every rank's logits_slice rows of the n_wanted tokens into the
 * leader's logits (n_wanted, vocab_size); -1 on failure as above. */
int engine_gather_logits(struct engine *engine, int n_wanted);
/* Point to point on the pipe (tag: step, index), timed and failing as the
 * collectives do: a message to rank dest, and the next one from source
 * (its memory the caller's to free). */
int engine_send(struct engine *engine, const void *buf, size_t bytes, int dest, uint64_t step,
                uint32_t index);
int engine_receive(struct engine *engine, int source, uint64_t step, uint32_t index, void **message,
                   size_t *bytes);
/* Broadcasts bytes from the leader (tag: this step, index). */
int engine_broadcast(struct engine *engine, void *buf, size_t bytes, uint32_t index);

/* The collective index to use at this step: index itself, unless an
 * injected fault strikes this rank now (then it may not return). */
uint32_t engine_fault_apply(const struct engine *engine, uint32_t index);

#endif
