/* engine.h -- the forward pass over a token batch, the paged key/value cache
 * and the sampler.
 *
 * A batch is any set of tokens from any sequences, each with its position:
 * decode tokens of running sequences and prefill chunks of new prompts run in
 * one pass. The key/value cache is paged: a sequence owns a list of
 * fixed-size blocks taken from one free list, so sequences of any length
 * share the memory without fragmentation. Functions that can fail return 0
 * or -1 with a one-line message in err. */
#ifndef LOCKSTEP_ENGINE_H
#define LOCKSTEP_ENGINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/model.h"
#include "tensor/tensor.h"

/* The most pipeline stages an instance has, and so the most steps in
 * flight. docs/protocol/pipeline.pml shows that k steps in flight never
 * find a link full when it holds k + 1 messages with keep-alives that go
 * one way down the pipe (as engine_keep_alive's do): COMM_MAILBOX_SLOTS. */
#define ENGINE_MAX_STAGES (COMM_MAILBOX_SLOTS - 1)

/* ======================= paged key/value cache ======================= */

struct kv_prefix_cache;

struct kv_cache {
    enum tensor_type type; /* TENSOR_F16, TENSOR_F32 or TENSOR_Q8_0: keys' and values' type */
    int n_layers;          /* layers of the model */
    int n_kv_heads;        /* key/value heads */
    int head_dim;          /* elements per head */
    int block_size;        /* positions per block */
    int n_blocks;          /* blocks in the pool */
    void *keys;            /* (n_layers, n_blocks, n_kv_heads, block_size, head_dim) of type,
                            * or by dimension (..., head_dim, block_size), see below */
    void *values;          /* (n_layers, n_blocks, n_kv_heads, block_size, head_dim) of type */
    size_t row_bytes;      /* bytes of one head's key (or value) at one position */
    size_t side_bytes;     /* bytes of keys, and of values */
    int *free_list;        /* (n_blocks) stack of free block ids */
    int n_free;            /* entries of free_list in use */
    int *references;       /* (n_blocks) sequences holding each block */
    struct kv_prefix_cache *prefix; /* full blocks kept for reuse (prefix.c) */
};

/* The blocks of one sequence: position p lives in block blocks[p / block_size]
 * at offset p % block_size. */
struct kv_sequence {
    int *blocks;         /* (capacity) block ids */
    int n_blocks;        /* blocks held */
    int capacity;        /* allocated entries of blocks */
    int n_hashed;        /* leading blocks whose hash chain is known (shared or published) */
    uint64_t chain_hash; /* the chain's hash after those blocks */
};

/* 1 if a cache can keep elements of type (F16, F32 or Q8_0). */
int kv_cache_type_supported(int type);
/* type: TENSOR_F16 (half the memory of floats; llama.cpp's default too),
 * TENSOR_Q8_0 (34 bytes per 32 elements, about a quarter: head_dim must be
 * a multiple of 32) or TENSOR_F32 (the numerics of a float reference such as
 * run.c). */
int kv_cache_init(struct kv_cache *kv, enum tensor_type type, int n_layers, int n_kv_heads,
                  int head_dim, int block_size, int n_blocks, char *err, size_t errlen);
void kv_cache_free(struct kv_cache *kv);
/* Bytes a cache of n_blocks blocks of type takes. */
size_t kv_cache_bytes(enum tensor_type type, int n_layers, int kv_dim, int block_size,
                      int n_blocks);
/* Blocks needed to hold n_positions positions. */
int kv_blocks_for(const struct kv_cache *kv, int n_positions);
/* Makes seq hold at least n_positions positions, taking free blocks first,
 * then the least recently used cached blocks no sequence holds; -1
 * (nothing taken) if even those run short. */
int kv_sequence_reserve(struct kv_cache *kv, struct kv_sequence *seq, int n_positions);
/* Blocks a reserve can take now: free ones and evictable cached ones. */
int kv_available(const struct kv_cache *kv);
/* Blocks held by sequences (the rest are free or cached for reuse). */
int kv_blocks_held(const struct kv_cache *kv);
/* Gives back every block of seq and empties it: a block no other sequence
 * holds returns to the free list, or, if it is in the prefix cache, stays
 * there and becomes evictable (the chain's later blocks first). */
void kv_sequence_release(struct kv_cache *kv, struct kv_sequence *seq);

/* ======================= prefix cache (prefix.c) ======================= */

/* A full block of computed positions is named by a hash chain over its
 * tokens and every token before it (seeded with the cache's element type
 * and shape: the cache serves one model), so two sequences whose first
 * tokens agree hold the same keys and values in their first blocks, bit
 * for bit (the engine's chunking invariance). Blocks are reference
 * counted; a block in the cache that no sequence holds is evicted least
 * recently used first, when a reserve needs it. Only the leader's
 * scheduler calls these: the followers run the block lists the plan
 * carries (DESIGN.md I2). */

/* Makes the empty seq share the longest run of cached blocks that starts
 * tokens[0..n_tokens), never the block of the last token (its logits must
 * be computed). Returns the positions it covers: the sequence computes from
 * there. */
int kv_sequence_share(struct kv_cache *kv, struct kv_sequence *seq, const int *tokens,
                      int n_tokens);
/* Puts seq's full blocks among its first n_computed positions (tokens
 * being its tokens) into the cache, unless the cache has their chain
 * already (then the sequence keeps its copy private). */
void kv_sequence_publish(struct kv_cache *kv, struct kv_sequence *seq, const int *tokens,
                         int n_computed);
/* Blocks in the cache (held or evictable). */
int kv_blocks_cached(const struct kv_cache *kv);
/* Address of head's keys (or values) in block `index` of seq, positions
 * index * block_size onwards, so attention reads a block of a head as one
 * stream. Values: block_size rows of head_dim elements of kv->type
 * (row_bytes each), one after another. Keys lie one position a vector
 * lane for the scores: F16 and F32 keys as head_dim rows of block_size
 * elements, dimension i of the block's position r at i * block_size + r
 * (tensor_dot_columns; against rows, it halves the score time: 109 against
 * 184 ns for 40 F16 positions of 64 dimensions, one core); Q8_0 keys as a
 * block of Q8_0 keys (tensor.h, tensor_dot_q8_0_keys). */
const void *kv_block_keys(const struct kv_cache *kv, const struct kv_sequence *seq, int layer,
                          int index, int head);
const void *kv_block_values(const struct kv_cache *kv, const struct kv_sequence *seq, int layer,
                            int index, int head);
/* Stores every head of key and value (n_kv_heads * head_dim floats each,
 * rounded or quantized to kv->type) at (layer, position) of seq. */
void kv_store(struct kv_cache *kv, const struct kv_sequence *seq, int layer, int position,
              const float *key, const float *value);

/* ======================= forward pass ======================= */

/* A batch of tokens for one forward pass. The positions of one sequence's
 * tokens must be consecutive and in order; every position before them must
 * already be in its cache (earlier passes), and its blocks reserved. */
#define ENGINE_WANT_LOGITS 1
#define ENGINE_WANT_HIDDEN 2

struct engine_batch {
    int n_tokens;
    const int *tokens;               /* (n_tokens) token ids */
    const int *positions;            /* (n_tokens) position within its sequence */
    struct kv_sequence *const *seqs; /* (n_tokens) sequence of each token */
    const uint8_t *want_logits;      /* (n_tokens) ENGINE_WANT_LOGITS: compute logits for it;
                                        ENGINE_WANT_HIDDEN: keep its final-normed hidden state
                                        (embeddings); 0: neither */
};

/* An injected fault (fault.c): off unless a test or benchmark asks. */
enum engine_fault_kind {
    ENGINE_FAULT_NONE = 0,
    ENGINE_FAULT_TAG = 1,   /* use a wrong collective tag */
    ENGINE_FAULT_KILL = 2,  /* SIGKILL this process */
    ENGINE_FAULT_STOP = 3,  /* SIGSTOP this process */
    ENGINE_FAULT_STALL = 4, /* stop making progress inside the collective */
    ENGINE_FAULT_DELAY = 5, /* sleep a random 0..delay_ms before each collective */
};

struct engine_fault {
    enum engine_fault_kind kind;
    int rank;      /* the rank it strikes */
    uint64_t step; /* in the collectives of this step */
};

/* Parses "KIND:RANK:STEP" (empty or NULL: no fault). */
int engine_fault_parse(struct engine_fault *fault, const char *spec, char *err, size_t errlen);

/* A share of one layer's attention that one thread takes: heads
 * [head_begin, head_end) of tokens [token_begin, token_end), consecutive
 * tokens of one sequence (forward.c). */
struct attention_unit {
    int token_begin, token_end;
    int head_begin, head_end;
};

/* The kinds of work a forward pass's time is split into (engine_profile). */
enum engine_work {
    ENGINE_WORK_PRODUCTS,  /* matrix products, quantizing inputs not quantized ahead */
    ENGINE_WORK_ATTENTION, /* rotary turns, cache stores, scores and weighted sums */
    ENGINE_WORK_TOKENS,    /* per-token work: embeddings, residual adds, norms, SwiGLU */
    /* (a job that makes a product's input quantizes it ahead: time of its kind) */
    ENGINE_WORK_KINDS
};

/* Wall time forward passes spent per kind of work while on is set (the
 * caller sets and clears it; a pass reads the clock only then). A pass run
 * in slices (slice.c) adds its first slice's times: waiting for the other
 * slices to end is in none of the kinds. Time in collectives is
 * engine.comm_seconds. */
struct engine_profile {
    int on;                            /* 1: forward passes add their times */
    double seconds[ENGINE_WORK_KINDS]; /* per kind, summed over the passes */
    long long passes;                  /* forward passes timed */
};

/* Working memory and the thread pool for forward passes of one model. */
struct engine {
    const struct model *model; /* the model run: the caller's, or packed_model */
    struct model packed_model; /* the caller's model with packed matrices (weights.c) */
    void *packed_weights;      /* the packed matrices' memory, or NULL */
    size_t packed_bytes;       /* its size */
    struct tensor_pool *pool;
    struct kv_cache kv;
    int max_tokens;          /* largest batch the buffers hold */
    float *x;                /* (max_tokens, dim) residual stream */
    float *xb;               /* (max_tokens, dim) normed input */
    float *q;                /* (max_tokens, n_heads*head_dim) */
    float *k;                /* (max_tokens, kv_dim) */
    float *v;                /* (max_tokens, kv_dim) */
    float *attn;             /* (max_tokens, n_heads*head_dim) attention output */
    float *gate;             /* (max_tokens, hidden_dim) */
    float *up;               /* (max_tokens, hidden_dim) */
    float *scores;           /* (n_threads, engine_attention_space) attention weights and queries */
    int rope_pairs;          /* pairs of each head the rotary embedding turns */
    float *rope_frequencies; /* (rope_pairs) each pair's frequency, with the model's scaling */
    float *rope_cosines;     /* (max_tokens, rope_pairs) each token's angles */
    float *rope_sines;       /* (max_tokens, rope_pairs) */
    float *logits;           /* (max_tokens, vocab_size) */
    float *hidden;           /* (max_tokens, dim) the last pass's ENGINE_WANT_HIDDEN tokens'
                                hidden states after the final norm, in batch order (one stage:
                                a pipeline's last stage keeps them, not the leader) */
    int n_hidden;            /* rows of hidden the last pass wrote */
    float *partials;         /* (reduce_parts * ranks, max_tokens, dim) column-split products */
    int context_length;      /* longest sequence the engine accepts */
    /* batch arrays for engine_run_sequence (all three) and for a follower's
     * plan (sequences and flags) */
    int *chunk_positions;                 /* (max_tokens) */
    struct kv_sequence **chunk_sequences; /* (max_tokens) */
    uint8_t *chunk_want;                  /* (max_tokens) */
    /* this pass's attention work (forward.c) */
    struct attention_unit *attention_units; /* (max_tokens * n_heads) */
    int n_attention_units;                  /* the ones in use */
    int attention_whole_tokens;             /* 1: each unit is one token, all its heads */
    int attention_stores;                   /* 1: each unit stores its token's k and v */
    struct tensor_ahead *ahead;             /* the next product's input, quantized ahead */
    int quantize_ahead;                     /* 1: the job making that input quantizes it */
    int n_slices;                           /* the pool's threads if more than one and a
                                             * layer's weights are small enough, else 0
                                             * (slice.c) */
    struct engine_slice *slices;            /* (n_slices) each thread's own state for passes
                                             * run in slices (slice.c) */
    struct engine_slice *slice;             /* a slice's view of the engine: that slice;
                                             * else NULL */
    struct engine_profile profile;          /* where passes spend their time, when on */
    /* tensor parallelism (comm == NULL for one rank) */
    struct comm *comm;        /* this rank's handle on its group */
    uint64_t step;            /* tag of the current step (leader: next to run) */
    float *logits_slice;      /* (max_tokens, output.rows) this rank's vocabulary rows */
    float *logits_gathered;   /* leader: (max_tokens, vocab_size) slices in rank order */
    size_t *gather_bytes;     /* leader: (ranks) bytes of each rank's slice */
    double comm_seconds;      /* time spent in collectives so far */
    int comm_error;           /* the enum comm_error of the last failed collective */
    char comm_message[256];   /* its message */
    struct engine_plan *plan; /* the step plan being built or received */
    /* pipeline parallelism (pipe == NULL for one stage): the model is this
     * stage's layers (model_stage); rank r of the pipe is tensor-parallel
     * rank r % stage_ranks of stage r / stage_ranks */
    struct comm *pipe; /* this rank's handle on every rank of the instance (handoffs) */
    /* leader: the steps in flight, oldest first (pipeline.pml's in_flight;
     * a step submitted and not yet collected) */
    struct engine_flight {
        uint64_t step; /* its tag */
        int rows;      /* logits rows it will bring back */
    } flights[ENGINE_MAX_STAGES];
    int n_flights;                     /* entries of flights in use */
    int stage;                         /* this rank's stage, 0 .. n_stages - 1 */
    int n_stages;                      /* stages of the pipeline (1 without one) */
    int stage_ranks;                   /* ranks per stage: the tensor-parallel degree */
    struct engine_group *group;        /* the group this rank belongs to, or NULL */
    struct engine_fault fault;         /* injected fault (tests), kind NONE normally */
    struct engine_fault planned_fault; /* leader: a fault the next plan carries to its rank */
    int planned_delay_ms;              /* ... DELAY: longest sleep per collective */
    int planned_delay_steps;           /* ... DELAY: for how many steps */
    int delay_ms;                      /* DELAY in force on this rank: longest sleep */
    uint64_t delay_until;              /* ... until this step (exclusive) */
};

struct engine_params {
    int n_threads;             /* threads of the pool */
    int max_tokens;            /* largest batch (prefill chunk) */
    int context_length;        /* 0: the model's */
    int kv_block_size;         /* positions per KV block (16 if 0) */
    int kv_blocks;             /* 0: enough for one full-context sequence */
    struct comm *comm;         /* tensor-parallel group (model is this rank's shard), or NULL */
    struct comm *pipe;         /* pipeline: every rank of the instance (model is this
                                  rank's stage, model_stage), or NULL */
    struct engine_fault fault; /* fault injection for tests; zero: none */
    enum tensor_type kv_type;  /* TENSOR_F16, TENSOR_F32 or TENSOR_Q8_0 (see kv_cache_init) */
};

int engine_init(struct engine *engine, const struct model *model,
                const struct engine_params *params, char *err, size_t errlen);
void engine_free(struct engine *engine);

/* Runs the model over the batch. Logits of the tokens with want_logits set
 * are written, in batch order, to engine->logits (one row of vocab_size per
 * wanted token); returns the number of rows, or -1 with err. */
int engine_forward(struct engine *engine, const struct engine_batch *batch, char *err,
                   size_t errlen);

/* 1 if a batch wants a hidden state (ENGINE_WANT_HIDDEN) of any token. */
int engine_batch_wants_hidden(const struct engine_batch *batch);
/* Runs tokens[0..n) of one sequence from position 0 (its blocks reserved)
 * keeping every token's final-normed hidden state: hidden (n, dim) gets
 * them, in passes of at most max_tokens. The leader of a group of one
 * stage (pp 1; any tp). 0, or -1 with err. For embeddings. */
int engine_embed_sequence(struct engine *engine, struct kv_sequence *seq, const int *tokens, int n,
                          float *hidden, char *err, size_t errlen);

/* pooling.c: an embedding from hidden states. The numbers are GGUF's
 * {arch}.pooling_type, and the runner protocol's (enum runner_pooling). */
enum engine_pooling {
    ENGINE_POOLING_NONE = 0, /* the file names none */
    ENGINE_POOLING_MEAN = 1, /* the average over every position (BOS included) */
    ENGINE_POOLING_CLS = 2,  /* the first position's state */
    ENGINE_POOLING_LAST = 3, /* the last position's state */
};

/* The file's {arch}.pooling_type (NONE when it has none, or for llama2.c). */
enum engine_pooling engine_model_pooling(const struct model *model);
/* 1 if the pooling needs position's hidden state of a prompt of n_tokens. */
int engine_pooling_wants(enum engine_pooling pooling, int position, int n_tokens);
/* sum (dim) += hidden (dim): the wanted positions' states, in position order. */
void engine_pooling_add(double *sum, const float *hidden, int dim);
/* The pooled vector (dim) of the sum of a prompt of n_tokens (not normalized). */
void engine_pooling_finish(enum engine_pooling pooling, const double *sum, int n_tokens, int dim,
                           float *out);

/* Runs tokens[0..n) of one sequence, at positions start.., in passes of at
 * most max_tokens; the logits of the last token end in engine->logits. The
 * sequence's blocks must be reserved. For prompts and benchmarks. */
int engine_run_sequence(struct engine *engine, struct kv_sequence *seq, const int *tokens, int n,
                        int start, char *err, size_t errlen);

/* ======================= lockstep execution ======================= */

/* Tags of a step's collectives, in the order every rank issues them: the
 * plan (header, then body), then two all-gathers of the column-split
 * products per layer (after attn_output and ffn_down), then the
 * classifier gather. Within a stage of a pipeline, layer is the stage's
 * own (its tensor-parallel group is a group of its own). Between stages,
 * on the pipe: the handoff of a step to the next stage, and the logits the
 * last stage sends the leader. */
#define ENGINE_TAG_PLAN_HEADER          0u
#define ENGINE_TAG_PLAN_BODY            1u
#define ENGINE_TAG_LAYER(layer, second) (2u + 2u * (uint32_t)(layer) + (uint32_t)(second))
#define ENGINE_TAG_HANDOFF              0u
#define ENGINE_TAG_LOGITS               1u

/* Leader (rank 0): broadcasts the plan of batch to the other ranks, then
 * runs it like engine_forward. With one rank it is engine_forward. In a
 * pipeline the leader runs the first stage, hands the step to the next
 * and receives the logits from the last. */
int engine_lead_step(struct engine *engine, const struct engine_batch *batch, char *err,
                     size_t errlen);
/* Leader, in two halves, so that a pipeline keeps up to n_stages steps in
 * flight (one per stage; the caller decides each from sequences no step
 * in flight holds): SUBMIT runs the first stage and hands the step on
 * (without a pipeline: the whole pass); COLLECT waits for the oldest
 * step's logits (in engine->logits) and returns its rows. At most
 * n_stages steps may be in flight; engine_lead_step is the two at once. */
int engine_submit_step(struct engine *engine, const struct engine_batch *batch, char *err,
                       size_t errlen);
int engine_collect_step(struct engine *engine, char *err, size_t errlen);
/* Steps submitted and not collected. */
static inline int engine_steps_in_flight(const struct engine *engine) {
    return engine->n_flights;
}

/* Leader: the next plan tells rank `rank` to stall in its collectives
 * (ENGINE_FAULT_STALL) or to sleep up to delay_ms before each of them for
 * `steps` steps (ENGINE_FAULT_DELAY). Fault injection for tests and
 * benchmarks; a single rank applies it around its forward pass. */
void engine_plan_fault(struct engine *leader, enum engine_fault_kind kind, int rank, int delay_ms,
                       int steps);
/* Leader, idle: tells the other ranks to keep waiting for the next plan, so
 * their wait's deadline starts again (send one well within it). */
int engine_keep_alive(struct engine *engine, char *err, size_t errlen);
/* Leader: tells the other ranks to leave engine_follow. */
int engine_release_followers(struct engine *engine, char *err, size_t errlen);
/* Ranks other than 0: receive and run the leader's plans until it releases
 * them (returns 0) or a collective fails (-1; engine->comm_error says why). */
int engine_follow(struct engine *engine, char *err, size_t errlen);

/* The ranks of one model instance (group.c). Set n, backend and
 * deadline (and for a pipeline stages and layers), zero the rest, then
 * start. */
struct engine_group {
    int n;                       /* tensor-parallel degree */
    int stages;                  /* pipeline stages (0 or 1: none); n * stages ranks in all */
    const int *layers;           /* (n_layers) layers of each stage, or NULL: as even as can be */
    int n_layers;                /* entries of layers: must be stages */
    enum comm_backend backend;   /* local threads or mpirun processes */
    double deadline;             /* seconds a collective may wait */
    struct comm **comms;         /* (ranks) local: every rank's tensor-parallel handle; mpi: [0]
                                    this process's */
    struct comm **pipes;         /* (ranks) the same for the pipe (stages > 1) */
    struct model **shards;       /* (ranks) each rank's slice (n > 1) */
    struct model **stage_models; /* (ranks) each rank's stage of its slice (stages > 1) */
    struct engine *engines;      /* (ranks) local: every rank's engine; mpi: [0] */
    pthread_t *threads;          /* (ranks) local: followers' threads, [1..ranks) */
    int started;                 /* engines initialized */
    int threads_started;         /* highest follower thread started */
    int follower_done;           /* mpi: this process was a follower and is done */
    /* Shared records each rank mirrors its collective state into (indexed
     * by rank; NULL: none), for stuck reports. Set before starting. */
    struct comm_status_record *status;
    /* Called on a local follower thread whose collective failed (NULL:
     * the thread just ends). The lockstep command exits the process with
     * engine_exit_code, so a rank that gives up never leaves peers waiting. */
    void (*on_failure)(struct engine *engine, const char *message);
};

/* Shards the model and starts the ranks; 0, or the process exit status for
 * the failure (message in err). A follower process of an mpi job returns
 * only after the leader released it (engine_group_leader is then NULL). */
int engine_group_start(struct engine_group *group, const struct model *whole,
                       const struct engine_params *params, char *err, size_t errlen);
/* The leader's engine, or NULL in a follower process. */
struct engine *engine_group_leader(struct engine_group *group);
/* Releases the followers, joins their threads and frees everything. */
int engine_group_stop(struct engine_group *group, char *err, size_t errlen);
/* This rank's number in its instance: its rank on the pipe, else in its
 * tensor-parallel group, else 0. */
static inline int engine_rank(const struct engine *engine) {
    return engine->pipe ? comm_rank(engine->pipe) : engine->comm ? comm_rank(engine->comm) : 0;
}
/* The process exit status for an engine failure: the comm module's code if
 * a collective failed, else 1. */
int engine_exit_code(const struct engine *engine);

/* ======================= sampling ======================= */

struct sampler_params {
    float temperature;       /* <= 0: greedy (argmax) */
    int top_k;               /* keep the k most likely; <= 0: off */
    float top_p;             /* keep the smallest set with mass >= top_p; >= 1: off */
    float min_p;             /* drop tokens below min_p * p(max); <= 0: off */
    float repeat_penalty;    /* divide positive / multiply negative logits of recent
                                tokens; 1: off */
    int repeat_last_n;       /* how many recent tokens the penalties see */
    uint64_t seed;           /* same seed, same tokens */
    float presence_penalty;  /* subtracted from the logit of every recent token; 0: off */
    float frequency_penalty; /* times its count among the recent tokens, subtracted; 0: off */
};

/* A token and its probability, for sampling and logprobs. */
struct sampler_candidate {
    int id;
    float logit;
    float p;
};

struct sampler {
    struct sampler_params params;
    uint64_t rng; /* xorshift state */
    int vocab_size;
};

/* Work space of sampler_sample for one thread: the samplers of every
 * sequence a thread samples share it, so memory follows the threads, not
 * the sequences. */
struct sampler_scratch {
    int vocab_size;                       /* the largest vocabulary it serves */
    float *logits;                        /* (vocab_size) the logits penalized, then weights */
    float *weights;                       /* (vocab_size) their weights, for a top-p ranking */
    struct sampler_candidate *candidates; /* (vocab_size) tokens being ranked */
    struct sampler_candidate *spare;      /* (vocab_size) them ranked by a full sort */
    uint64_t *order, *order_spare;        /* (vocab_size) each: a full sort's (key, id) words */
};

void sampler_params_default(struct sampler_params *params);
void sampler_init(struct sampler *sampler, const struct sampler_params *params, int vocab_size);
/* Advances the random stream as n samples would, so a request resumed
 * with its generated tokens draws what it would have drawn. */
void sampler_skip(struct sampler *sampler, int n);
/* Returns 0, or -1 when out of memory. */
int sampler_scratch_init(struct sampler_scratch *scratch, int vocab_size);
void sampler_scratch_free(struct sampler_scratch *scratch);
/* Picks the next token from logits (vocab_size), with scratch (of at least
 * vocab_size) as work space. history holds the sequence's tokens so far
 * (for the repetition penalty). */
int sampler_sample(struct sampler *sampler, struct sampler_scratch *scratch, const float *logits,
                   const int *history, int n_history);
/* log of the sum of e^(logit - highest) over logits (n <= scratch's
 * vocabulary), highest their maximum (into *highest): one pass of
 * tensor_exp_weights, with scratch as work space. One pass serves the
 * log-probability of every token of the row (sampler_log_probability). */
double sampler_log_normalizer(struct sampler_scratch *scratch, const float *logits, int n,
                              float *highest);
/* The log-probability of a token of logit under the model's own
 * distribution (before penalty and temperature), from its row's highest
 * logit and sampler_log_normalizer. */
static inline float sampler_log_probability(float logit, float highest, double normalizer) {
    return (float)((double)(logit - highest) - normalizer);
}

#endif
