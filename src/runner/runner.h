/* runner.h -- one model instance serving many requests: the continuous
 * batching scheduler, the step loop and the runner protocol (leader side).
 *
 * The runner lives on the leader (rank 0). Each step it fills a token
 * budget -- one decode token for every running sequence first, then prefill
 * chunks of waiting prompts in arrival order -- runs that mixed batch as one
 * lockstep forward pass on every rank (engine_lead_step), samples the next
 * token of every sequence whose prompt is complete and reports tokens,
 * finished requests and a heartbeat. One step is in flight at a time
 * (DESIGN.md I1): the next one is planned only after the last one finished
 * on every rank. In a pipeline of S stages up to S steps are in flight,
 * each on its own stage, each of sequences no other step in flight holds
 * (docs/protocol/pipeline.pml): a sequence's next step is planned only
 * after its last one came back.
 *
 * The runner itself is single-threaded: runner_submit, runner_cancel and
 * runner_step are called from the step loop only. runner_serve (server.c)
 * adds the unix socket: an I/O thread reads and validates frames and hands
 * them to the step loop at step boundaries. */
#ifndef LOCKSTEP_RUNNER_H
#define LOCKSTEP_RUNNER_H

#include "base/base.h"
#include "protocol/protocol.h"

#include <stddef.h>
#include <stdint.h>

struct engine;    /* engine/engine.h: the leader's engine, for runner_create */
struct tokenizer; /* tokenizer/tokenizer.h: the model's vocabulary, for grammars */

/* ======================= the runner (runner.c, scheduler.c, trace.c) ======================= */

#define RUNNER_EOS_MAX 8 /* tokens that end a sequence */

struct runner_params {
    int max_sequences;       /* sequences holding KV blocks at once */
    int max_waiting;         /* requests waiting for admission at most; more are refused */
    int step_tokens;         /* token budget of a step, decode and prefill tokens together;
                                > max_sequences so a new prompt always gets prefill tokens,
                                <= the engine's max_tokens */
    int trace_steps;         /* steps the trace ring keeps */
    int n_eos;               /* entries of eos */
    int eos[RUNNER_EOS_MAX]; /* tokens that end a sequence (EOS, end-of-turn) */
    int prefix_cache;        /* 1: reuse cached KV blocks of earlier prompts (engine.h) */
    int steps_in_flight;     /* pipeline: steps (micro-batches of distinct sequences) kept in
                                flight at once; 0: one per stage. 1 without a pipeline */
    const struct tokenizer *tokenizer; /* the tokens' bytes, which grammars match; NULL: requests
                                          with a grammar are refused */
    enum runner_pooling pooling;       /* how embed requests are pooled (the file's
                                          {arch}.pooling_type, or --pooling); NONE: refused */
};

/* Where the runner's reports go; called from runner_submit, runner_cancel
 * and runner_step. client is the number the request was submitted with. */
struct runner_sink {
    void (*token)(void *context, uint32_t client, const struct runner_token *token);
    void (*finished)(void *context, uint32_t client, const struct runner_finished *finished);
    void (*heartbeat)(void *context, const struct runner_heartbeat *heartbeat);
    void *context;
    /* an embed request's vector, just before its FINISHED (NULL: dropped) */
    void (*embedding)(void *context, uint32_t client, const struct runner_embedding *embedding);
};

/* One sequence's share of a step, as the trace keeps it. */
struct runner_trace_entry {
    uint32_t client; /* who submitted the request */
    uint64_t id;     /* its id */
    int position;    /* position of its first token in this step */
    int n_tokens;    /* tokens it had in the step */
    int decode;      /* 1: a decode token, 0: a prefill chunk */
};

/* One step, as the trace ring keeps it. */
struct runner_trace_step {
    uint64_t step;                      /* index */
    uint64_t start_us, end_us;          /* planning began / results sampled (CLOCK_MONOTONIC) */
    int n_tokens;                       /* tokens in the batch */
    int kv_blocks_used;                 /* after the step */
    int n_entries;                      /* sequences in the batch */
    struct runner_trace_entry *entries; /* (n_entries) sequences of the step, batch order */
};

struct runner;

/* The runner drives the leader's engine (engine_lead_step); the engine's
 * max_tokens must hold step_tokens. */
int runner_create(struct runner **out, struct engine *leader, const struct runner_params *params,
                  const struct runner_sink *sink, char *err, size_t errlen);
void runner_free(struct runner *runner);

/* Queues a request that arrived at arrival_us. Takes over the request's
 * arrays (the caller's struct is zeroed). A request the runner cannot serve
 * (prompt longer than the context, token id outside the vocabulary, more KV
 * blocks than the pool holds, queue full, id already in use by this client)
 * is finished at once with RUNNER_FINISH_ERROR and a message; returns -1
 * then, else 0. */
int runner_submit(struct runner *runner, uint32_t client, struct runner_request *request,
                  uint64_t arrival_us);
/* Cancels a request (finished with RUNNER_FINISH_CANCELLED, its blocks
 * freed); nothing if it is not there (already finished). */
void runner_cancel(struct runner *runner, uint32_t client, uint64_t id);
/* Cancels every request of a client that went away. */
void runner_cancel_client(struct runner *runner, uint32_t client);
/* 1 if a step would have work: requests running or waiting. */
int runner_has_work(const struct runner *runner);
/* Plans and runs one step that began at start_us (0: now), samples and
 * reports. 1 if a step ran, 0 if there was nothing to do, -1 if the engine
 * failed (err; the runner cannot go on: engine_exit_code tells why). */
int runner_step(struct runner *runner, uint64_t start_us, char *err, size_t errlen);
/* The next step's plan carries the fault (STALL or DELAY) to its rank. */
void runner_inject_fault(struct runner *runner, const struct runner_fault *fault);
/* Sends a heartbeat without a step (n_tokens 0): the state after requests
 * left between steps, so a client sees freed blocks while the runner idles. */
void runner_report_state(struct runner *runner);
/* What a new connection is told (model name left empty). */
void runner_describe(const struct runner *runner, struct runner_hello *hello);

/* Writes every step (and arrivals, preemptions, finishes) to path as JSON
 * lines as they happen. */
int runner_trace_open(struct runner *runner, const char *path, char *err, size_t errlen);
/* The most recent steps the ring holds, oldest first: up to max entries
 * copied (pointers into the ring; valid until the next step). */
int runner_trace_recent(const struct runner *runner, const struct runner_trace_step **steps,
                        int max);

/* ======================= the protocol server (server.c) ======================= */

struct runner_server_params {
    const char *socket_path;   /* where to listen: an address (a stale socket is replaced) */
    const char *model_name;    /* told to every connection in HELLO */
    size_t max_payload;        /* largest frame payload accepted (RUNNER_FRAME_MAX if 0) */
    int max_connections;       /* connections at once (16 if 0) */
    double keep_alive_seconds; /* an idle leader sends followers a keep-alive plan this
                                  often (well within the collective deadline) */
    int allow_faults;          /* 1: accept FAULT frames (tests and benchmarks only) */
    const char *cluster_key;   /* a connection must prove it (auth.c) before anything else;
                                  NULL: none asked (a unix socket's permissions guard it) */
};

struct runner_server;

/* Listens on the socket; the runner's sink is replaced by the server's. */
int runner_server_create(struct runner_server **out, struct runner *runner,
                         const struct runner_server_params *params, char *err, size_t errlen);
/* Serves until runner_server_stop: frames are read and validated on an I/O
 * thread, requests enter the runner between steps, and this thread runs the
 * steps. 0 after a stop, -1 if the engine failed (err). */
int runner_server_run(struct runner_server *server, char *err, size_t errlen);
/* Asks runner_server_run to return; async-signal-safe. */
void runner_server_stop(struct runner_server *server);
/* Closes the socket (and removes its file) and frees the server. */
void runner_server_free(struct runner_server *server);

#endif
