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
/* Broadcasts bytes from the leader (tag: this step, index). */
int engine_broadcast(struct engine *engine, void *buf, size_t bytes, uint32_t index);

/* The collective index to use at this step: index itself, unless an
 * injected fault strikes this rank now (then it may not return). */
uint32_t engine_fault_apply(const struct engine *engine, uint32_t index);

#endif
