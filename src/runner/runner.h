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
 * on every rank.
 *
 * The runner itself is single-threaded: runner_submit, runner_cancel and
 * runner_step are called from the step loop only. runner_serve (server.c)
 * adds the unix socket: an I/O thread reads and validates frames and hands
 * them to the step loop at step boundaries. */
#ifndef LOCKSTEP_RUNNER_H
#define LOCKSTEP_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* ======================= requests and events ======================= */

#define RUNNER_TOP_LOGPROBS_MAX 20 /* alternatives per token a request may ask for */
#define RUNNER_STOPS_MAX        16 /* stop sequences per request */
#define RUNNER_STOP_TOKENS_MAX  64 /* tokens per stop sequence */

/* A token sequence that ends generation when the output ends with it. */
struct runner_stop {
    int n_tokens; /* 1..RUNNER_STOP_TOKENS_MAX */
    int *tokens;  /* (n_tokens) */
};

/* What a client asks for. */
struct runner_request {
    uint64_t id;                    /* chosen by the client, unique per connection */
    struct sampler_params sampling; /* temperature, top-k/p, min-p, penalty, seed */
    int max_tokens;                 /* tokens to generate at most (>= 1) */
    int logprobs;                   /* 1: report each token's log-probability */
    int top_logprobs;               /* 0..RUNNER_TOP_LOGPROBS_MAX alternatives per token */
    int ignore_eos;                 /* 1: the end-of-sequence token does not stop */
    int n_prompt;                   /* >= 1 */
    int *prompt;                    /* (n_prompt) token ids */
    int n_stops;                    /* 0..RUNNER_STOPS_MAX */
    struct runner_stop *stops;      /* (n_stops) */
};

/* Frees what a decoded or copied request owns (prompt, stops). */
void runner_request_free(struct runner_request *request);

/* One of the top_logprobs alternatives of a token. */
struct runner_alternative {
    int token;
    float logprob;
};

/* A sampled token. */
struct runner_token {
    uint64_t id;   /* request */
    int token;     /* token id */
    float logprob; /* log-probability under the model (0 if not asked for) */
    int n_top;     /* alternatives that follow */
    struct runner_alternative top[RUNNER_TOP_LOGPROBS_MAX]; /* most likely first */
};

enum runner_finish_reason {
    RUNNER_FINISH_EOS = 1,       /* the model produced end-of-sequence (not sent as a token) */
    RUNNER_FINISH_LENGTH = 2,    /* max_tokens reached, or the context is full */
    RUNNER_FINISH_STOP = 3,      /* the output ended with a stop sequence (its tokens were sent) */
    RUNNER_FINISH_CANCELLED = 4, /* cancelled by the client */
    RUNNER_FINISH_ERROR = 5,     /* refused or failed: message says why */
};

/* A request that is over; no frame about it follows. */
struct runner_finished {
    uint64_t id;
    enum runner_finish_reason reason;
    int n_prompt;      /* prompt tokens */
    int n_generated;   /* tokens sent */
    char message[200]; /* ERROR: why; otherwise empty */
};

/* One completed step, sent to every connection. Times are microseconds on
 * CLOCK_MONOTONIC. */
struct runner_heartbeat {
    uint64_t step;       /* step index */
    uint64_t start_us;   /* when the leader began planning it */
    uint64_t end_us;     /* when it had completed on every rank and was sampled */
    int n_tokens;        /* tokens in the batch */
    int n_decode;        /* of which decode tokens */
    int n_sequences;     /* sequences in the batch */
    int n_running;       /* sequences holding KV blocks after the step */
    int n_waiting;       /* requests waiting for admission after the step */
    int kv_blocks_used;  /* KV blocks in use after the step */
    int kv_blocks_total; /* KV blocks in the pool */
    float comm_ms;       /* time in collectives during the step */
};

/* What a runner tells a new connection first. */
struct runner_hello {
    int vocab_size;
    int context_length;
    int max_sequences;
    int step_tokens;     /* token budget per step */
    int kv_block_size;   /* positions per block */
    int kv_blocks_total; /* blocks in the pool */
    int tensor_parallel; /* ranks */
    char model[128];     /* model name (file name) */
};

/* ======================= protocol frames (protocol.c) ======================= */

/* Every frame: an 8-byte header -- payload length (u32), version (u8),
 * type (u8), zero (u16) -- then the payload. Integers are little-endian,
 * floats IEEE-754 binary32 sent as their u32 bits. Payloads, by type:
 *   HELLO      i32 vocab, context, max_sequences, step_tokens, block_size,
 *              blocks_total, tensor_parallel; u32 n + n bytes model name
 *   ADD        u64 id; f32 temperature; i32 top_k; f32 top_p, min_p,
 *              repeat_penalty; i32 repeat_last_n; u64 seed; i32 max_tokens;
 *              u32 flags (1 logprobs, 2 ignore_eos); i32 top_logprobs;
 *              u32 n_stops, each u32 n + n i32 tokens; u32 n_prompt + i32 tokens
 *   CANCEL     u64 id
 *   TOKEN      u64 id; i32 token; f32 logprob; u32 n_top + n_top (i32, f32)
 *   FINISHED   u64 id; u32 reason; i32 n_prompt, n_generated; u32 n + n bytes message
 *   HEARTBEAT  u64 step, start_us, end_us; i32 n_tokens, n_decode, n_sequences,
 *              n_running, n_waiting, kv_used, kv_total; f32 comm_ms
 *   ERROR      u32 n + n bytes message (the sender closes the connection after it)
 * A payload must be consumed exactly: trailing bytes are an error. */
#define RUNNER_PROTOCOL_VERSION 1
#define RUNNER_FRAME_HEADER     8
#define RUNNER_FRAME_MAX        (4u << 20) /* default largest payload */

enum runner_message {
    RUNNER_MSG_HELLO = 1,
    RUNNER_MSG_ADD = 2,
    RUNNER_MSG_CANCEL = 3,
    RUNNER_MSG_TOKEN = 4,
    RUNNER_MSG_FINISHED = 5,
    RUNNER_MSG_HEARTBEAT = 6,
    RUNNER_MSG_ERROR = 7,
};

/* A growable byte buffer frames are appended to. */
struct runner_buffer {
    uint8_t *data;
    size_t length;   /* bytes in use */
    size_t capacity; /* bytes allocated */
};

void runner_buffer_free(struct runner_buffer *buffer);
/* Drops the first n bytes (sent or parsed). */
void runner_buffer_consume(struct runner_buffer *buffer, size_t n);
/* Appends n bytes; -1 if out of memory. */
int runner_buffer_append(struct runner_buffer *buffer, const void *bytes, size_t n);

/* Each appends one whole frame to out; -1 if out of memory or a field is out
 * of range (message in err). */
int runner_encode_hello(struct runner_buffer *out, const struct runner_hello *hello, char *err,
                        size_t errlen);
int runner_encode_add(struct runner_buffer *out, const struct runner_request *request, char *err,
                      size_t errlen);
int runner_encode_cancel(struct runner_buffer *out, uint64_t id, char *err, size_t errlen);
int runner_encode_token(struct runner_buffer *out, const struct runner_token *token, char *err,
                        size_t errlen);
int runner_encode_finished(struct runner_buffer *out, const struct runner_finished *finished,
                           char *err, size_t errlen);
int runner_encode_heartbeat(struct runner_buffer *out, const struct runner_heartbeat *heartbeat,
                            char *err, size_t errlen);
int runner_encode_error(struct runner_buffer *out, const char *message, char *err, size_t errlen);

/* A frame found in received bytes; payload points into them. */
struct runner_frame {
    enum runner_message type;
    const uint8_t *payload;
    size_t payload_length;
    size_t frame_length; /* header + payload: bytes to consume */
};

/* Looks for a frame at the start of data: 1 and *frame if a whole frame is
 * there, 0 if more bytes are needed, -1 with err if the header is malformed
 * (wrong version, unknown type, nonzero reserved bits, payload longer than
 * max_payload). */
int runner_frame_next(const uint8_t *data, size_t length, size_t max_payload,
                      struct runner_frame *frame, char *err, size_t errlen);

/* Each decodes a frame of its type; -1 with err naming the field if the
 * payload is malformed or a value is out of range. runner_decode_add
 * allocates the prompt and stops (runner_request_free them; nothing is
 * left allocated on failure). */
int runner_decode_hello(const struct runner_frame *frame, struct runner_hello *hello, char *err,
                        size_t errlen);
int runner_decode_add(const struct runner_frame *frame, struct runner_request *request, char *err,
                      size_t errlen);
int runner_decode_cancel(const struct runner_frame *frame, uint64_t *id, char *err, size_t errlen);
int runner_decode_token(const struct runner_frame *frame, struct runner_token *token, char *err,
                        size_t errlen);
int runner_decode_finished(const struct runner_frame *frame, struct runner_finished *finished,
                           char *err, size_t errlen);
int runner_decode_heartbeat(const struct runner_frame *frame, struct runner_heartbeat *heartbeat,
                            char *err, size_t errlen);
int runner_decode_error(const struct runner_frame *frame, char *message, size_t message_size,
                        char *err, size_t errlen);

/* Name of a finish reason ("eos", "length", "stop", "cancelled", "error"). */
const char *runner_finish_reason_name(enum runner_finish_reason reason);

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
};

/* Where the runner's reports go; called from runner_submit, runner_cancel
 * and runner_step. client is the number the request was submitted with. */
struct runner_sink {
    void (*token)(void *context, uint32_t client, const struct runner_token *token);
    void (*finished)(void *context, uint32_t client, const struct runner_finished *finished);
    void (*heartbeat)(void *context, const struct runner_heartbeat *heartbeat);
    void *context;
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
/* What a new connection is told (model name left empty). */
void runner_describe(const struct runner *runner, struct runner_hello *hello);

/* Writes every step (and arrivals, preemptions, finishes) to path as JSON
 * lines as they happen. */
int runner_trace_open(struct runner *runner, const char *path, char *err, size_t errlen);
/* The most recent steps the ring holds, oldest first: up to max entries
 * copied (pointers into the ring; valid until the next step). */
int runner_trace_recent(const struct runner *runner, const struct runner_trace_step **steps,
                        int max);

/* Microseconds on CLOCK_MONOTONIC. */
uint64_t runner_now_us(void);

/* ======================= the unix socket server (server.c) ======================= */

struct runner_server_params {
    const char *socket_path;   /* where to listen (a stale socket there is replaced) */
    const char *model_name;    /* told to every connection in HELLO */
    size_t max_payload;        /* largest frame payload accepted (RUNNER_FRAME_MAX if 0) */
    int max_connections;       /* connections at once (16 if 0) */
    double keep_alive_seconds; /* an idle leader sends followers a keep-alive plan this
                                  often (well within the collective deadline) */
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
