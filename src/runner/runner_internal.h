/* runner_internal.h -- what the runner's files share: a sequence's state,
 * the runner itself and the step being planned. */
#ifndef LOCKSTEP_RUNNER_INTERNAL_H
#define LOCKSTEP_RUNNER_INTERNAL_H

#include <stdio.h>

#include "engine/engine.h"
#include "runner/runner.h"

/* One request inside the runner. Its tokens are the prompt followed by what
 * was generated; the cache holds the first n_computed of them, and the
 * tokens after that are what the next steps must feed (the whole prompt at
 * first, one token while decoding, everything again after a preemption). */
struct runner_sequence {
    uint32_t client;               /* who submitted it */
    struct runner_request request; /* as submitted (prompt, sampling, limits) */
    int *tokens;                   /* (capacity) prompt then generated tokens */
    int n_tokens;                  /* prompt + generated */
    int capacity;                  /* entries allocated in tokens */
    int n_generated;               /* tokens sampled so far */
    int n_computed;                /* positions whose keys/values are in the cache */
    int admitted;                  /* 1: holds KV blocks for every token it has */
    int started;                   /* 1: has had prefill tokens since it arrived */
    int n_cached;                  /* prompt tokens its first admission found cached, or -1
                                      before it */
    int step_tokens;               /* tokens it has in the step being planned */
    uint64_t order;                /* arrival number: lower came first */
    struct kv_sequence kv;         /* its blocks of the cache */
    struct sampler sampler;        /* its own random stream */
    int sampled;                   /* the token sampled this step (finish_step) */
    float sampled_logprob;         /* its log-probability, if the request asks */
    struct runner_alternative sampled_top[RUNNER_TOP_LOGPROBS_MAX]; /* the step's most
                                                                       likely tokens, if asked */
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
    struct runner_sequence **due; /* (step_tokens) */
    /* the trace ring and its file */
    struct runner_trace_step *ring;   /* (trace_steps) */
    struct runner_trace_entry *slots; /* (trace_steps, max_sequences) entries of the ring */
    int ring_next;                    /* slot the next step goes to */
    int ring_count;                   /* steps held */
    FILE *trace_file;                 /* NULL: no trace file */
};

/* scheduler.c: fills the step's batch from the live sequences (decode
 * tokens first, then prefill chunks in arrival order, admitting and
 * preempting as the KV pool allows); returns its token count. */
int runner_schedule(struct runner *runner);
/* Gives a sequence's blocks back; it will be recomputed from its tokens. */
void runner_preempt(struct runner *runner, struct runner_sequence *sequence);

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
