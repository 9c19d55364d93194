/* runner_internal.h -- what the runner's files share: a sequence's state,
 * the runner itself and the step being planned. */
#ifndef LOCKSTEP_RUNNER_INTERNAL_H
#define LOCKSTEP_RUNNER_INTERNAL_H

#include <stdio.h>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "runner/runner.h"

/* One request inside the runner. Its tokens are the prompt followed by what
 * was generated; the cache holds the first n_computed of them, and the
 * tokens after that are what the next steps must feed (the whole prompt at
 * first, one token while decoding, everything again after a preemption). */
struct runner_sequence {
    uint32_t client;                     /* who submitted it */
    struct runner_request request;       /* as submitted (prompt, sampling, limits) */
    int *tokens;                         /* (capacity) prompt then generated tokens */
    int n_tokens;                        /* prompt + generated */
    int capacity;                        /* entries allocated in tokens */
    int n_generated;                     /* tokens sampled so far */
    int n_computed;                      /* positions whose keys/values are in the cache */
    int admitted;                        /* 1: holds KV blocks for every token it has */
    int started;                         /* 1: has had prefill tokens since it arrived */
    int n_cached;                        /* prompt tokens its first admission found cached, or -1
                                            before it */
    int step_tokens;                     /* tokens it has in the step being planned */
    int in_flight;                       /* 1: in a step submitted and not yet collected */
    int cancelled;                       /* cancelled while in flight: finished at collection */
    uint64_t order;                      /* arrival number: lower came first */
    struct kv_sequence kv;               /* its blocks of the cache */
    struct sampler sampler;              /* its own random stream */
    struct grammar *grammar;             /* the request's grammar compiled, or NULL */
    struct grammar_state *grammar_state; /* where its tokens so far are in it; NULL while a
                                            trigger has not appeared */
    struct runner_buffer before_trigger; /* with a trigger not seen yet: the output's bytes */
    double *pool_sum;                    /* embed requests: (dim) the sum of the pooled positions'
                                            hidden states computed so far (engine_pooling_add) */
    int sampled;                         /* the token sampled this step (finish_step) */
    float sampled_logprob;               /* its log-probability, if the request asks */
    struct runner_alternative sampled_top[RUNNER_TOP_LOGPROBS_MAX]; /* the step's most
                                                                       likely tokens, if asked */
};

/* A step submitted and not yet collected (docs/protocol/pipeline.pml's
 * in_flight): what its collection needs of the plan it was. */
struct runner_flight {
    struct runner_sequence **sequences; /* (step_tokens) its sequences, batch order */
    int *step_tokens;                   /* (step_tokens) their tokens in it */
    int n_sequences;
    int n_decode;       /* decode tokens in it */
    int n_tokens;       /* tokens in it */
    uint64_t start_us;  /* when it was planned */
    double comm_before; /* the engine's comm_seconds then */
};

struct runner {
    struct engine *engine;       /* the leader's engine */
    struct runner_params params; /* limits */
    struct runner_sink sink;     /* where reports go */
    int context_length;          /* longest sequence */
    int vocab_size;
    /* live sequences in arrival order (admitted or waiting) */
    struct runner_sequence **sequences; /* (max_sequences + max_waiting) */
    int n_sequences;
    int n_admitted; /* of which hold blocks */
    uint64_t next_order;
    uint64_t steps; /* steps run */
    /* steps in flight, oldest first: up to max_in_flight (one per pipeline
     * stage, unless params.steps_in_flight asks fewer) */
    struct runner_flight flights[ENGINE_MAX_STAGES];
    struct runner_sequence **cancelled; /* (step_tokens) the collected step's sequences that
                                           were cancelled in flight */
    int n_flights;
    int max_in_flight;
    /* the step being planned: sequences in batch order, then the batch */
    struct runner_sequence **batch_sequences; /* (step_tokens) */
    int n_batch_sequences;
    int n_decode;                  /* decode tokens in the batch */
    int *batch_tokens;             /* (step_tokens) */
    int *batch_positions;          /* (step_tokens) */
    struct kv_sequence **batch_kv; /* (step_tokens) */
    uint8_t *batch_want;           /* (step_tokens) */
    struct runner_token token;     /* report being built */
    /* sampling after a step: one work space per thread of the leader's
     * pool, and the sequences that sample, in the order of the step's
     * logits rows */
    struct sampler_scratch *scratch; /* (n_scratch) */
    int n_scratch;
    float *constrained;                  /* (n_scratch, vocab_size) a row biased and masked */
    uint8_t *allowed;                    /* (n_scratch, vocab_size) a grammar's mask */
    struct grammar_vocab *grammar_vocab; /* the vocabulary's trie (from params.tokenizer), or
                                            NULL */
    struct runner_sequence **due;        /* (step_tokens) */
    struct runner_sequence **embedded;   /* (step_tokens) embed requests the step completed */
    float *pooled;                       /* (dim) the vector being sent */
    /* the trace ring and its file */
    struct runner_trace_step *ring;   /* (trace_steps) */
    struct runner_trace_entry *slots; /* (trace_steps, max_sequences) entries of the ring */
    int ring_next;                    /* slot the next step goes to */
    int ring_count;                   /* steps held */
    FILE *trace_file;                 /* NULL: no trace file */
};

_Static_assert((int)ENGINE_POOLING_MEAN == (int)RUNNER_POOLING_MEAN &&
                   (int)ENGINE_POOLING_CLS == (int)RUNNER_POOLING_CLS &&
                   (int)ENGINE_POOLING_LAST == (int)RUNNER_POOLING_LAST,
               "the protocol's poolings are the engine's (GGUF's numbers)");

/* scheduler.c: fills the step's batch from the live sequences (decode
 * tokens first, then prefill chunks in arrival order, admitting and
 * preempting as the KV pool allows); returns its token count. */
int runner_schedule(struct runner *runner);
/* Gives a sequence's blocks back; it will be recomputed from its tokens. */
void runner_preempt(struct runner *runner, struct runner_sequence *sequence);
/* The engine's batch flag for s's token at position: logits where its
 * known tokens end; an embed request's hidden state where its pooling
 * needs one. */
uint8_t runner_wants(const struct runner *runner, const struct runner_sequence *s, int position);

/* constrain.c: logit biases and grammars. */
int runner_constrain_init(struct runner *runner, char *err, size_t errlen);
void runner_constrain_free(struct runner *runner);
/* Why the runner cannot apply q's constraints, or NULL. */
const char *runner_constrain_check(const struct runner *runner, const struct runner_request *q,
                                   char *why, size_t size);
/* Compiles s's grammar and advances it over resumed tokens; -1 with why. */
int runner_constrain_start(struct runner *runner, struct runner_sequence *s, char *why,
                           size_t size);
void runner_constrain_end(struct runner_sequence *s);
/* The row s samples from on thread: logits itself when unconstrained, else
 * a biased and masked copy; NULL if no token is allowed (the grammar
 * allows none, or a bias bans every one it allows). */
const float *runner_constrain_row(struct runner *runner, struct runner_sequence *s, int thread,
                                  const float *logits);
/* 1 if token is an end token (EOS, end of turn). */
int runner_constrain_is_end(const struct runner *runner, int token);
/* Advances s's grammar over token: 0 more may follow, 1 the grammar is
 * complete (or token is an end token where it may end), -1 it does not
 * match. 0 without a grammar. */
int runner_constrain_advance(const struct runner *runner, struct runner_sequence *s, int token);

/* trace.c */
int runner_trace_init(struct runner *runner, char *err, size_t errlen);
void runner_trace_free(struct runner *runner);
/* Records the step just run while its batch is still in runner's arrays,
 * then (after sampling) its end time, and writes it to the trace file. */
void runner_trace_begin(struct runner *runner, uint64_t start_us, int n_tokens);
void runner_trace_end(struct runner *runner, uint64_t end_us);
/* One-line events in the trace file: arrival, preemption, finish. */
void runner_trace_event(struct runner *runner, const char *event,
                        const struct runner_sequence *sequence, uint64_t t_us, const char *detail);

#endif
