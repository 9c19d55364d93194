/* gateway_internal.h -- what the gateway's files share: a request, a model
 * instance with its supervised runner, and the gateway itself. */
#ifndef LOCKSTEP_GATEWAY_INTERNAL_H
#define LOCKSTEP_GATEWAY_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "cluster/cluster.h"
#include "gateway/gateway.h"
#include "gateway/metrics.h"
#include "openai/openai.h"
#include "model/model.h"
#include "protocol/protocol.h"
#include "tokenizer/tokenizer.h"

struct MHD_Connection;
struct MHD_Daemon;
struct gateway_instance;
struct gateway_screen;
struct sockaddr;

struct gateway_request;

/* One choice of a client request (OpenAI's `n`): a runner request of its
 * own, with the request's prompt and the request's seed plus its index, so
 * that each choice resumes alone after a runner restart (DESIGN.md I4).
 * Its fields are guarded by its request's lock, except queued_generation
 * (the instance lock) and those set at creation (id, index, request,
 * sampling). */
struct gateway_choice {
    uint64_t id;                     /* runner protocol id (unique in the gateway) */
    int index;                       /* its place in the answer: 0..n-1 */
    struct gateway_request *request; /* the client request it belongs to */
    struct runner_sampling sampling; /* the request's, with the seed + index */
    int *generated;                  /* (max_tokens) tokens received so far */
    int n_generated;
    struct openai_token *token_reports; /* (max_tokens) logprobs, if asked for */
    struct tokenizer_stream decoder;    /* bytes of complete UTF-8 characters */
    char *held;                         /* decoded text not yet sent: it may start a stop string */
    size_t n_held, held_capacity;
    struct runner_buffer text;  /* not streaming: the whole answer so far */
    size_t *token_start;        /* (max_tokens) decoded bytes before each token's */
    size_t decoded;             /* bytes the decoder gave so far */
    size_t released;            /* of them, sent (or cut): held starts there */
    int n_shown;                /* tokens the answer shows (a stop string may hide
                                   the last ones, in logprobs too) */
    int n_reported;             /* streaming: tokens whose logprobs were sent */
    long text_chars;            /* characters sent (completions text_offset) */
    int first_sent;             /* chat: the role chunk went out */
    enum openai_finish finish;  /* why it ended */
    int done;                   /* 1: it ended (its last chunk went out) */
    uint64_t last_token_us;     /* when its latest token arrived */
    uint64_t queued_generation; /* instance lock: the runner its ADD was queued for (0: none) */
    int queued_once;            /* instance lock: an ADD of it was queued (its queue time seen) */
    struct gateway_instance *holder; /* request lock: the instance whose table holds it; tokens
                                        from any other (one it was moved off) are ignored */
    /* tool calling (tool_calls.c), when the request's tool_choice is not "none" */
    struct runner_buffer all;       /* every byte decoded, to find and parse the calls */
    int in_calls;                   /* 1: the trigger was seen: the rest is calls */
    struct openai_tool_call *calls; /* (n_calls) the calls parsed when it ended */
    int n_calls;
};

/* One client request. The HTTP side and the instance (one reference per
 * choice in its table) each hold references; the last release frees it.
 * Everything below `lock`, and its choices, are guarded by it. Its choices
 * live and die together: the request is over when every choice ended, or
 * at the first error (the other choices are cancelled then), or when the
 * client leaves. */
struct gateway_request {
    uint64_t id;           /* its first choice's runner id (choice i has id + i) */
    atomic_int references; /* holders: HTTP connection, instance table entries */
    struct gateway *gateway;
    struct gateway_instance *instance; /* the instance it was first routed to (a reference):
                                          its model's vocabulary and metric labels; where its
                                          choices are now is theirs */
    struct openai_request body;        /* the parsed request */
    struct openai_response response;   /* what every chunk repeats */
    char response_id[48];              /* "chatcmpl-..." or "cmpl-..." */
    int *prompt;                       /* (n_prompt) the prompt's tokens */
    int n_prompt;
    int n_cached;   /* lock: prompt tokens a choice's runner found in its prefix cache (the most
                       of any choice) */
    int max_tokens; /* tokens to generate at most, per choice */
    uint64_t arrival_us;            /* when it was accepted */
    struct gateway_choice *choices; /* (n_choices) body.n of them */
    int n_choices;

    pthread_mutex_t lock;
    int n_ended;                       /* choices that ended */
    int done;                          /* 1: nothing more will be produced */
    int failed;                        /* 1: ended with an error (error_json) */
    char *error_json;                  /* the error body when failed */
    int abandoned;                     /* 1: the client went away */
    struct runner_buffer out;          /* streaming: SSE bytes not yet sent */
    struct MHD_Connection *connection; /* its HTTP connection */
    int suspended;                     /* 1: the connection waits for output */
    uint64_t first_token_us, last_output_us;
    uint64_t unsent_since_us; /* streaming: when the oldest unsent token arrived (0: none) */
};

/* Where an instance's supervisor is (DESIGN.md I4, I7). Every transition
 * goes through instance_set_state (instance.c), which refuses any other:
 *   STARTING -> READY      the runner said HELLO
 *   STARTING -> STOPPING   it exited, missed its start deadline, or the gateway stops
 *   READY    -> STOPPING   its connection broke, it was found stuck, or the gateway stops
 *   STOPPING -> STARTING   its process group is reaped and the backoff is over
 *   STOPPING -> FAILED     the GATEWAY_START_ATTEMPTS-th start in a row failed
 *   FAILED   -> READY      a later start said HELLO (it is still retried)
 *   FAILED   -> STOPPING   that start failed too, or the gateway stops
 *   any      -> DRAINING   the gateway stops: no new request is taken
 * Requests wait in the table while STARTING, READY or STOPPING; in FAILED
 * and DRAINING new ones are refused with 503. */
enum instance_state {
    INSTANCE_STARTING = 0, /* a runner was started; no HELLO yet */
    INSTANCE_READY,        /* a runner said HELLO: requests flow */
    INSTANCE_STOPPING,     /* the runner is being killed and reaped, then a backoff */
    INSTANCE_FAILED,       /* too many failed starts in a row: requests get 503 */
    INSTANCE_DRAINING,     /* the gateway stops: nothing new is taken */
};

/* A model the gateway serves (one -m): its file's metadata, vocabulary and
 * chat template, shared by all its instances (replicas, and the placements
 * a move goes through). Set up before any thread starts and read-only
 * after, so it is read without a lock. */
struct gateway_served {
    struct gateway_model model; /* as configured (strings borrowed) */
    char name[128];             /* what clients ask for */
    struct model *file;         /* the model file (metadata; weights untouched) */
    struct tokenizer *tokenizer;
    enum tokenizer_chat_template chat_template;
    char bos_text[64], eos_text[64]; /* for chat templates */
    int context_length;
};

#define GATEWAY_PLACEMENT_TEXT 256 /* a placement spelt out, "a:2+b:2" */

/* A move of an instance to another placement (cluster.c), as GET
 * /v1/cluster shows it. */
enum gateway_move_state {
    GATEWAY_MOVE_NONE = 0, /* never moved */
    GATEWAY_MOVE_STARTING, /* the new placement is starting (or warming); the old one serves */
    GATEWAY_MOVE_DONE,     /* the last move completed */
    GATEWAY_MOVE_FAILED,   /* the last move's placement did not start: the old one serves */
};

struct gateway_move {
    enum gateway_move_state state;
    int tp;                             /* the degree it moves to */
    char to[GATEWAY_PLACEMENT_TEXT];    /* the placement it moves to ("b:1+c:1") */
    char reason[256];                   /* why it failed */
    uint64_t started_us, finished_us;   /* when it began and ended */
    struct gateway_instance *successor; /* the new placement's instance while starting */
    int warming;                        /* 1: its runner computes the requests' KV (warm-ups) */
    uint64_t warm_started_us;           /* when the warm-ups were sent */
};

/* Counters of what an instance served, for GET /v1/cluster's rates. */
struct gateway_instance_stats {
    atomic_ullong generated;           /* tokens delivered */
    atomic_ullong ttft_us, ttft_count; /* time to first token, summed */
    atomic_ullong itl_us, itl_count;   /* inter-token latency, summed */
};

/* A model instance: one placement of a model and the runner that serves it.
 *
 * Lock order (the only nestings in the gateway): instance->lock, then a
 * request's lock, then the metrics registry's lock or the gateway's
 * reports_lock. No thread holds any of them across a call that can block:
 * the runner's socket is non-blocking, what goes to the runner is appended
 * to the outbox and written by the supervisor thread when the socket takes
 * it, and the HTTP thread never waits for a runner (DESIGN.md I7). */
struct gateway_instance {
    atomic_int references; /* holders: the cluster (its list, or the move that starts it),
                              the requests first routed to it (request->instance), and
                              callers of gateway_cluster_any; the last release frees it */
    struct gateway *gateway;
    const struct gateway_served *served; /* its model */
    struct gateway_model model; /* the served model's, with this placement's degree and launch */
    char name[128];             /* its model's name (logs, metric labels) */
    char id[160];               /* "NAME-N": what the admin API calls it (kept through moves) */
    struct cluster_placement placement;      /* its ranks' hosts (indices into the gateway's) */
    char hosts_text[GATEWAY_PLACEMENT_TEXT]; /* the placement spelt "a:2" */
    char host_list[GATEWAY_PLACEMENT_TEXT];  /* mpirun's --host value, when it has one */
    int64_t bytes_per_rank;                  /* memory its placement counts per rank */
    /* cluster lock (cluster.c) */
    int routable;             /* 1: new requests may be routed here */
    int deleting;             /* 1: DELETE asked for: it stops once its table is empty */
    struct gateway_move move; /* its latest move */
    uint64_t replaced_us;     /* when it was last placed elsewhere after failing */
    uint64_t left_us;         /* when it last tried to leave a drained host */
    struct gateway_instance_stats stats;
    atomic_int stop_requested; /* 1: the supervisor stops its runner and returns */
    int number;                /* its place in start order: names its files, spreads its ports */
    char socket_path[108];     /* where its runner listens: a runner address (protocol.h) */
    pthread_t thread;          /* supervisor: starts, reads, writes, restarts */
    int thread_started;
    atomic_int supervisor_done; /* 1: the supervisor returned (it may be joined at once) */
    int wake[2];                /* pipe: work for the supervisor (new requests, cancels) */

    pthread_mutex_t lock; /* guards everything below */
    enum instance_state state;
    int fd;                           /* connection to the runner (non-blocking), -1 while none */
    pid_t pid;                        /* runner process (its group's leader), 0 if none */
    uint64_t generation;              /* runners started so far: which one a queued ADD went to */
    struct runner_buffer outbox;      /* frames for the runner not yet written to its socket */
    uint64_t outbox_stalled_us;       /* when the outbox last had bytes and wrote none (0: empty) */
    struct runner_hello hello;        /* what its runner said first */
    struct runner_auth auth_answer;   /* with a cluster key: the proof sent for hello's challenge */
    int linked;                       /* 1: the current runner said HELLO and proved the key */
    int restarts;                     /* runners started after the first */
    int failures;                     /* consecutive failed starts */
    char status[256];                 /* why it is not ready */
    struct gateway_choice **requests; /* (capacity) unfinished runner requests it holds: the
                                         choices of client requests, each holding a
                                         reference to its request */
    int n_requests, capacity;
    struct runner_heartbeat last_heartbeat;
    /* the watchdog (watchdog.c) */
    char status_path[108];   /* the file the runner's ranks mirror their state into */
    void *rank_status;       /* that file, mapped (runner_status_bytes() bytes), or NULL */
    uint64_t progress_us;    /* last sign of progress (a heartbeat, HELLO, or work
                                arriving at an idle runner) */
    double step_seconds[64]; /* recent step durations (ring) */
    int n_step_seconds;      /* entries filled (<= 64) */
    int next_step_second;    /* ring position */
    uint64_t down_since_us;  /* the runner died or was found stuck (0: up) */
    int stuck_detections;
    unsigned refuse_starts; /* fault injection: starts still to refuse */
    int steps_since_ready;  /* steps the current runner completed */
    /* a move's warm-ups (cluster.c): requests of one token that fill its
     * runner's prefix cache with the moving requests' KV before they come */
    uint64_t warm_first, warm_last; /* their runner ids, [first, last] */
    int warm_pending;               /* those not finished yet */
    int last_exit;                  /* the last runner's wait status */
};

/* The metric families of GET /metrics (observe.c). */
struct gateway_metrics {
    struct metrics_registry registry;
    struct metrics_metric *requests;         /* {model, status} */
    struct metrics_metric *prompt_tokens;    /* {model} */
    struct metrics_metric *cached_tokens;    /* {model} prompt tokens found in the prefix cache */
    struct metrics_metric *kv_cached;        /* {model} gauge: blocks in the prefix cache */
    struct metrics_metric *generated_tokens; /* {model} */
    struct metrics_metric *time_to_first_token, *inter_token_latency;  /* {model} seconds */
    struct metrics_metric *queue_depth, *running, *kv_used, *kv_total; /* {model} gauges */
    struct metrics_metric *step_seconds;                               /* {model} */
    struct metrics_metric *restarts;                                   /* {model} */
    struct metrics_metric *overhead; /* {model} token received -> bytes to the socket */
    struct metrics_metric *stuck;    /* {model} stuck detections */
    struct metrics_metric *detection_seconds, *recovery_seconds; /* {model} */
    struct metrics_metric *moves;          /* {model, outcome}: done, failed */
    struct metrics_metric *move_seconds;   /* {model} from the request to the new placement */
    struct metrics_metric *host_up;        /* {host} 1 while its probes answer */
    struct metrics_metric *instance_state; /* {instance, state}: 1 for its state, 0 others */
    struct metrics_metric *queue_seconds;  /* {model, instance} arrival -> first sent to a runner */
    struct metrics_metric *request_seconds; /* {model} arrival -> its answer's end */
    struct metrics_metric *prefix_hits;     /* {model, instance} requests that reused a prefix */
    struct metrics_metric *oldest_request;  /* {model, instance} age of its oldest request */
};

#define GATEWAY_EVENTS 50 /* cluster events GET /v1/cluster keeps */

/* history.c: what GET /v1/cluster/history serves. */
#define GATEWAY_HISTORY_EVERY     5.0 /* seconds between samples */
#define GATEWAY_HISTORY_SAMPLES   180 /* per instance: 15 minutes */
#define GATEWAY_HISTORY_INSTANCES 64  /* instances tracked (the least recent is reused) */

/* One sample of an instance: its cumulative counters and latest heartbeat. */
struct gateway_history_sample {
    double time;                 /* Unix seconds */
    double generated;            /* tokens delivered so far */
    double ttft_sum, ttft_count; /* time to first token: seconds summed, and how many */
    double itl_sum, itl_count;   /* inter-token latency, the same */
    int queue, running;          /* the runner's waiting and running sequences */
    int kv_used, kv_total;       /* its KV blocks */
};

struct gateway_history_track {
    char id[160];   /* the instance's id */
    double written; /* Unix seconds of its newest sample */
    int n, next;    /* samples held; where the next one goes (a ring) */
    struct gateway_history_sample samples[GATEWAY_HISTORY_SAMPLES];
};

struct gateway_history {
    struct gateway_history_track tracks[GATEWAY_HISTORY_INSTANCES]; /* (n_tracks) */
    int n_tracks;
    uint64_t last_us; /* when the last samples were taken */
};

/* Something that happened to the cluster (GET /v1/cluster's events). */
struct gateway_event {
    double time;   /* Unix seconds */
    char kind[16]; /* start, ready, stop, move, move_failed, lost, back, stuck, restart, fault */
    char instance[160];               /* its instance id, or "" */
    char host[CLUSTER_HOST_NAME_MAX]; /* its host, or "" */
    char text[256];
};

struct gateway {
    struct gateway_params params;
    struct MHD_Daemon *daemon;
    int port;
    atomic_int stopping;
    atomic_int draining;           /* 1: gateway_drain was called: new requests get 503 */
    int wake[2];                   /* pipe: gateway_stop, gateway_drain -> gateway_run */
    struct gateway_served *served; /* (n_served) the models, fixed at start */
    int n_served;
    /* the cluster (cluster.c); lock order: cluster_lock before any instance's lock */
    pthread_mutex_t cluster_lock;
    struct gateway_instance **instances; /* (n_instances) live instances, in start order */
    int n_instances, instances_capacity;
    struct gateway_instance **retiring; /* (n_retiring) retired ones whose supervisor is still
                                           stopping their runner: joined once it returned */
    int n_retiring, retiring_capacity;
    int next_instance;                            /* instances made so far: their ids' numbers */
    struct cluster_host hosts[CLUSTER_HOSTS_MAX]; /* (n_hosts) */
    uint64_t lost_until_us[CLUSTER_HOSTS_MAX];    /* a lose-host fault's end, per host */
    uint64_t drained_until_us[CLUSTER_HOSTS_MAX]; /* a drain-host fault's end, per host (0: none) */
    int n_hosts;
    struct gateway_event events[GATEWAY_EVENTS]; /* ring */
    struct gateway_history *history;             /* history.c (cluster lock) */
    int n_events;                                /* events so far */
    pthread_t probe_thread;                      /* probe.c: learns the hosts' state */
    int probe_thread_started;
    atomic_int active; /* requests being served */
    atomic_ullong next_id;
    struct gateway_metrics metrics;
    pthread_mutex_t reports_lock;  /* guards the stuck reports */
    char *stuck_reports[16];       /* JSON of the latest stuck reports (ring) */
    int n_stuck_reports;           /* reports made so far */
    char runtime_dir[64];          /* /tmp/lockstep-PID: the runners' sockets and status files */
    struct gateway_screen *screen; /* screen.c: accepts and screens connections */
};

#define GATEWAY_START_ATTEMPTS     5   /* failed starts in a row before requests fail */
#define GATEWAY_CONNECTION_TIMEOUT 30  /* seconds, when the parameters give none */
#define GATEWAY_CLIENT_CONNECTIONS 512 /* per client address, when the parameters give none */
#define GATEWAY_DRAIN_SECONDS      30  /* gateway_drain's bound, when the parameters give none */
#define GATEWAY_FLUSH_SECONDS      1.0 /* for clients to read the errors a stop ends requests with */

/* request.c */
struct gateway_request *gateway_request_create(struct gateway *gateway,
                                               struct gateway_instance *instance,
                                               struct openai_request *body,
                                               struct openai_error *error);
void gateway_request_release(struct gateway_request *request);
/* Called by the instance `from` for each frame about a choice (no lock
 * held); ignored unless the choice is still that instance's (a move hands
 * it to another). */
void gateway_request_on_token(struct gateway_choice *choice, const struct runner_token *token,
                              struct gateway_instance *from);
void gateway_request_on_finished(struct gateway_choice *choice,
                                 const struct runner_finished *finished,
                                 struct gateway_instance *from);
/* Ends it with an error (status, message) if it is not done; its choices
 * still in the instance's table are the caller's to drop. */
void gateway_request_fail(struct gateway_request *request, int status, const char *message);
/* Its usage: the prompt once, the tokens generated over all its choices
 * (lock held). */
struct openai_usage gateway_request_usage(const struct gateway_request *request);
/* Adds an SSE comment if the stream has been quiet; wakes its connection. */
void gateway_request_keep_alive(struct gateway_request *request, uint64_t now_us);
/* Wakes the HTTP connection if it waits (lock held). */
void gateway_request_wake(struct gateway_request *request);
/* Appends "data: JSON\n\n" to the stream and frees json (lock held). */
void gateway_request_event(struct gateway_request *request, char *json);

/* tool_calls.c: tool calling around a request (lock held where it has one) */
/* 1 if the request's answer may hold tool calls (tools given, tool_choice
 * not "none"). */
int gateway_tools_active(const struct gateway_request *request);
/* The tools as the chat template takes them ((*out)[n_tools], free() it;
 * NULL with 0 when the request renders none); -1 with error. */
int gateway_tools_render(const struct gateway_request *request, struct tokenizer_chat_tool **out,
                         int *n, struct openai_error *error);
/* The messages as the chat template takes them, tool calls included
 * ((*out)[n_messages] and the calls they point to: free() *out and
 * *calls); -1 with error. */
int gateway_tools_messages(const struct gateway_request *request,
                           struct tokenizer_chat_message **out, struct tokenizer_tool_call **calls,
                           struct openai_error *error);
/* Sets the request's grammar (and trigger, for "auto") to its tool calls'
 * in the instance's family; 0 when it calls none; -1 with error. */
int gateway_tools_constrain(struct gateway_request *request, struct openai_error *error);
/* How many of the choice's held bytes may go out as content: *limit (at
 * most n_held). Returns 1 when the trigger was found (the calls start after
 * *limit bytes of held and its content ends there), else 0 (the bytes
 * after *limit could still become the trigger; all of them when final). */
int gateway_tools_limit(const struct gateway_choice *choice, int final, size_t *limit);
/* The choice ended with its calls' text after the trigger: parses them
 * into choice->calls. 0: *finish is OPENAI_FINISH_TOOL_CALLS, and a stream
 * got the calls' chunks; 1: the text stays content (the calls were cut by
 * max_tokens, or do not parse with "auto"); -1: they do not parse under a
 * grammar that forced them (a bug), message in err. */
int gateway_tools_finish(struct gateway_choice *choice, enum openai_finish *finish, char *err,
                         size_t errlen);
/* Frees the choice's tool-call state. */
void gateway_tools_free_choice(struct gateway_choice *choice);

/* served.c */
int gateway_served_init(struct gateway_served *served, const struct gateway_model *model, char *err,
                        size_t errlen);
void gateway_served_free(struct gateway_served *served);
/* The served model called name, or NULL. */
const struct gateway_served *gateway_served_find(const struct gateway *gateway, const char *name);

/* instance.c */
/* Sets up an instance of served at a placement (hosts indexing the
 * gateway's); number names its socket and status files. */
int gateway_instance_init(struct gateway_instance *instance, struct gateway *gateway,
                          const struct gateway_served *served, const char *id,
                          const struct cluster_placement *placement, int number, char *err,
                          size_t errlen);
int gateway_instance_start(struct gateway_instance *instance, char *err, size_t errlen);
/* Stops the supervisor (and its runner) and fails the unfinished requests;
 * the HTTP side may still call in (cancel) until gateway_instance_free. */
void gateway_instance_stop(struct gateway_instance *instance);
/* Tells the supervisor of an instance the cluster no longer uses (moved,
 * deleted) to stop its runner and return, without waiting for it: its
 * table is empty by then. gateway_instance_stopped says when it returned;
 * gateway_instance_stop then joins it at once. */
void gateway_instance_retire(struct gateway_instance *instance);
int gateway_instance_stopped(struct gateway_instance *instance);
/* References (the field's comment says who holds them): the last release
 * frees the instance (gateway_instance_free, then free()). */
void gateway_instance_hold(struct gateway_instance *instance);
void gateway_instance_release(struct gateway_instance *instance);
/* handover.c: a move's requests */
/* Takes every choice out of the table, telling the runner to drop them:
 * *out (free() it) holds them with their references; their count, or -1. */
int gateway_instance_take(struct gateway_instance *instance, struct gateway_choice ***out);
/* Gives it choices (with their references) taken from another instance:
 * its runner gets them with the tokens they have (DESIGN.md I4, I8); those
 * whose request is over are released instead. */
void gateway_instance_give(struct gateway_instance *instance, struct gateway_choice **choices,
                           int n);
/* Sends `to` a warm-up of every choice of `from`: a one-token request of
 * its prompt and tokens so far, which leaves their KV blocks in the runner's
 * prefix cache, so that when the choices come they compute only what was
 * generated since (DESIGN.md I8: reuse is exact). Returns how many. */
int gateway_instance_warm(struct gateway_instance *from, struct gateway_instance *to);
/* Tokens it still has to work through: prompts not started and tokens not
 * generated (the router's load figure). */
int64_t gateway_instance_outstanding(struct gateway_instance *instance);
/* Seconds since the oldest request it holds arrived (0: none): a request
 * that waits where nothing moves shows here (/health, /metrics). */
double gateway_instance_oldest(struct gateway_instance *instance, uint64_t now_us);
/* instance.c, continued */
void gateway_instance_free(struct gateway_instance *instance);
/* Registers the request's choices and wakes the supervisor, which queues
 * their ADDs for the runner (now, or when one is up); never waits. A FAILED
 * or DRAINING instance fails it with 503 at once. */
void gateway_instance_submit(struct gateway_instance *instance, struct gateway_request *request);
/* The request is over on the gateway's side (client gone, an error): its
 * choices leave the tables that hold them now, and the runners that have
 * them are told to drop them. */
void gateway_instance_cancel(struct gateway_request *request);
/* The same for one choice (its stop string matched). */
void gateway_instance_cancel_choice(struct gateway_choice *choice);
/* "starting", "ready", ... as /health, /v1/cluster and /metrics say it. */
const char *gateway_instance_state_name(enum instance_state state);
#define GATEWAY_INSTANCE_STATES 5 /* enum instance_state's values */
/* No new requests: they get 503 (the gateway stops). */
void gateway_instance_drain(struct gateway_instance *instance);
/* Ends every request it holds with an error (status, message), and tells
 * its runner to drop them. */
void gateway_instance_fail(struct gateway_instance *instance, int status, const char *message);
/* Wakes the supervisor to write the outbox (never blocks). */
void gateway_instance_wake(struct gateway_instance *instance);
/* Calls fn on the request of every registered choice, so once per choice
 * (keep-alives: fn must not mind). */
void gateway_instance_each(struct gateway_instance *instance,
                           void (*fn)(struct gateway_request *, uint64_t), uint64_t arg);

/* watchdog.c (instance lock held unless said otherwise) */
/* Maps a fresh, zeroed status file for the next runner; -1 if it cannot. */
int gateway_watchdog_prepare(struct gateway_instance *instance);
void gateway_watchdog_free(struct gateway_instance *instance);
/* A heartbeat arrived: progress, and a step time for the deadline. */
void gateway_watchdog_note(struct gateway_instance *instance, const struct runner_heartbeat *h);
/* Seconds without progress after which a runner with work is stuck. */
double gateway_watchdog_deadline(const struct gateway_instance *instance);
/* 1 if the runner has work and made no progress within the deadline. */
int gateway_watchdog_expired(const struct gateway_instance *instance, uint64_t now_us);
/* Says what every rank was doing (log and GET /debug/stuck). */
void gateway_watchdog_report(struct gateway_instance *instance, uint64_t now_us);
/* The process of rank `rank` (its status record, else the runner's). */
pid_t gateway_rank_pid(const struct gateway_instance *instance, int rank);
/* GET /debug/stuck (takes the reports lock). */
char *gateway_stuck_json(struct gateway *gateway);
/* POST /debug/fault: applies a fault (no lock held); 0, or -1 with error. */
int gateway_instance_fault(struct gateway_instance *instance, const char *kind, int rank,
                           int delay_ms, int steps, int count, struct openai_error *error);

/* tokenize.c: llama.cpp's POST /tokenize and POST /detokenize, answered in
 * the HTTP thread with an instance's tokenizer (no runner is asked). */
struct gateway_tokens_body {
    struct cJSON *root;         /* the parsed body: owns model and content */
    int detokenize;             /* 1: /detokenize, 0: /tokenize */
    const char *model;          /* "model", or NULL when absent */
    const char *content;        /* /tokenize: the text */
    int add_special;            /* /tokenize: a BOS first if the vocabulary asks for one */
    int parse_special;          /* /tokenize: special tokens' spellings become those tokens */
    int with_pieces;            /* /tokenize: {"id", "piece"} objects instead of ids */
    const struct cJSON *tokens; /* /detokenize: the array of integer ids (range not checked) */
};
/* Parses a body of /tokenize (detokenize 0) or /detokenize (1); -1 with a
 * 400 in e. Free it with gateway_tokens_free. */
int gateway_tokens_parse(const char *body, size_t length, int detokenize,
                         struct gateway_tokens_body *out, struct openai_error *e);
/* The answer's JSON text with the instance's tokenizer (free() it), or
 * NULL with e: a 400 for an id outside the vocabulary, a 500 when memory
 * runs out. */
char *gateway_tokens_answer(const struct gateway_instance *instance,
                            const struct gateway_tokens_body *body, struct openai_error *e);
void gateway_tokens_free(struct gateway_tokens_body *body);

/* cluster.c (takes the cluster lock unless said otherwise) */
/* Sets up the hosts and starts the first instances. */
int gateway_cluster_start(struct gateway *gateway, char *err, size_t errlen);
/* Completes the moves whose placement is ready (or failed) and the
 * deletions whose requests are handed over; called often by gateway_run. */
void gateway_cluster_step(struct gateway *gateway);
void gateway_cluster_stop(struct gateway *gateway);
void gateway_cluster_free(struct gateway *gateway);
/* gateway_instance_fail on every instance, moving ones' new placements too. */
void gateway_cluster_fail(struct gateway *gateway, int status, const char *message);
/* Routes the request to the least-loaded routable instance of its model
 * and submits it there; fails it with 503 when the model has none. */
void gateway_cluster_submit(struct gateway *gateway, struct gateway_request *request);
/* A routable instance of served (its vocabulary, fault injection) with a
 * reference for the caller (gateway_instance_release it), or NULL. */
struct gateway_instance *gateway_cluster_any(struct gateway *gateway,
                                             const struct gateway_served *served);
/* 1 if instance is one of the cluster's, or a move's new placement (cluster
 * lock held). */
int gateway_cluster_has(const struct gateway *gateway, const struct gateway_instance *instance);
/* gateway_instance_each over every instance, moving ones' new placements too. */
void gateway_cluster_each(struct gateway *gateway, void (*fn)(struct gateway_request *, uint64_t),
                          uint64_t arg);
/* The admin operations: 0, or an HTTP status with why. */
int gateway_cluster_add(struct gateway *gateway, const char *model, int tp,
                        const char *const *hosts, int n_hosts, char *id, size_t idlen, char *why,
                        size_t whylen);
int gateway_cluster_delete(struct gateway *gateway, const char *id, char *why, size_t whylen);
/* tp 0 keeps the degree; no hosts: the policy chooses (elsewhere, at the same degree). */
int gateway_cluster_move(struct gateway *gateway, const char *id, int tp, const char *const *hosts,
                         int n_hosts, char *why, size_t whylen);
/* Fault injection: host is lost for seconds (its probes count as failed)
 * and the runners with ranks there are killed; returns how many. */
int gateway_cluster_lose_host(struct gateway *gateway, int host, double seconds);
/* Cordons the host called name (drain 1: nothing new is placed there and
 * the cluster thread moves its instances elsewhere) or ends that (0); 0,
 * or 404 with why. */
int gateway_cluster_drain_host(struct gateway *gateway, const char *name, int drain, char *why,
                               size_t whylen);
/* Fault injection: host is drained for seconds, then undrained. */
void gateway_cluster_drain_for(struct gateway *gateway, int host, double seconds);
/* Moves every instance with a rank on a lost host elsewhere. */
void gateway_cluster_leave_host(struct gateway *gateway, int host);
/* What the live instances (and moves' new placements) hold on each host
 * (cluster lock held). */
void gateway_cluster_usage(struct gateway *gateway, struct cluster_usage *usage);
/* The same, taking the cluster lock (no instance lock may be held). */
void gateway_cluster_note(struct gateway *gateway, const char *kind, const char *instance,
                          const char *format, ...) __attribute__((format(printf, 4, 5)));
/* Records an event and logs it (cluster lock held). */
void gateway_cluster_event(struct gateway *gateway, const char *kind, const char *instance,
                           const char *host, const char *format, ...)
    __attribute__((format(printf, 5, 6)));

/* history.c */
int gateway_history_init(struct gateway *gateway);
void gateway_history_free(struct gateway *gateway);
/* Takes the samples when they are due (cluster lock held). */
void gateway_history_sample(struct gateway *gateway);
/* GET /v1/cluster/history's JSON text, every live instance's track as
 * columns (free() it). */
char *gateway_history_json(struct gateway *gateway);

/* probe.c */
/* Probes every host once, or only this machine's names (no lock held by
 * the caller). */
void gateway_probe_hosts(struct gateway *gateway, int local_only);
int gateway_probe_start(struct gateway *gateway, char *err, size_t errlen);
void gateway_probe_stop(struct gateway *gateway);

/* admin.c */
/* GET /v1/cluster's JSON text (free() it). */
char *gateway_cluster_json(struct gateway *gateway);
/* POST /debug/fault's cluster kinds on instance's model: "move" (to
 * body's "tp" and "hosts"), "lose-host" and "drain-host" (its leader's
 * host, for body's "seconds", default 15); 1 if kind is one of them (done,
 * or e set with its status), else 0. */
int gateway_admin_fault(struct gateway *gateway, struct gateway_instance *instance,
                        const char *kind, const struct cJSON *body, struct openai_error *e,
                        int *failed);
/* An admin API call (/admin/instances..., /admin/hosts/NAME/drain and
 * /undrain): the HTTP status with *json (free() it), or -1 with e (405
 * for a method the path does not take). */
int gateway_admin_call(struct gateway *gateway, const char *method, const char *url,
                       const char *body, size_t length, char **json, struct openai_error *e);
/* The methods an admin path takes ("GET, POST"), for a 405's Allow, or
 * NULL for a path that is not one. */
const char *gateway_admin_allowed(const char *url);

/* http.c */
int gateway_http_start(struct gateway *gateway, char *err, size_t errlen);
void gateway_http_stop(struct gateway *gateway);

/* screen.c: accepts on listen_fd (which it then owns), holds each client
 * address to per_client connections, and hands the connections whose first
 * request head is sound to the daemon. */
int gateway_screen_start(struct gateway *gateway, int listen_fd, int per_client, char *err,
                         size_t errlen);
/* Stops accepting and closes what is still being screened. */
void gateway_screen_stop(struct gateway *gateway);
/* The daemon closed a connection from address (its count drops). */
void gateway_screen_closed(struct gateway *gateway, const struct sockaddr *address);
/* After the daemon stopped: frees the screen. */
void gateway_screen_free(struct gateway *gateway);

/* observe.c: the gateway's metrics */
int gateway_metrics_init(struct gateway *gateway);
void gateway_observe_request(struct gateway *gateway, const char *model, int status);
void gateway_observe_tokens(struct gateway_instance *instance, int prompt, int generated);
/* Prompt tokens a request found in the runner's prefix cache. */
void gateway_observe_cached(struct gateway_instance *instance, int cached);
void gateway_observe_latency(struct gateway_instance *instance, double ttft, double itl);
void gateway_observe_heartbeat(struct gateway_instance *instance,
                               const struct runner_heartbeat *heartbeat);
void gateway_observe_restart(struct gateway_instance *instance);
void gateway_observe_overhead(struct gateway_instance *instance, double seconds);
void gateway_observe_stuck(struct gateway_instance *instance, double detection_seconds);
void gateway_observe_recovery(struct gateway_instance *instance, double seconds);
/* Every series of an instance, and of the gateway's hosts, at 0 from the
 * start (a counter that has not moved yet is still there). */
void gateway_observe_instance(struct gateway_instance *instance);
void gateway_observe_hosts(struct gateway *gateway);
void gateway_observe_move(struct gateway *gateway, const char *model, int done, double seconds);
/* A choice's first ADD was queued for a runner, seconds after its arrival. */
void gateway_observe_queued(struct gateway_instance *instance, double seconds);
/* A request ended (status as answered): its duration, and whether its
 * prompt reused the prefix cache. */
void gateway_observe_finished(struct gateway_request *request, double seconds, int cached);
char *gateway_metrics_text(struct gateway *gateway);

#endif
