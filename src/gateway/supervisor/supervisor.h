/* supervisor.h -- one runner, supervised: the gateway's layer that starts a
 * `lockstep runner` (a child, or an mpirun job), talks to it over the
 * runner protocol, watches it for a stuck rank, and when it dies or sticks
 * starts another and gives it every unfinished job with the tokens it has
 * (DESIGN.md I4, I7).
 *
 * The supervisor knows the requests above it only as jobs: a struct
 * supervisor_job embedded in whatever owns it (a choice of a client
 * request), and it hears back from its owner and tells it what happened
 * only through the events it was given (struct supervisor_events), as
 * src/comm's backends plug in through struct comm_ops. It takes no lock of
 * the layers above; the events it calls with its own lock held are the
 * ones that say so, and they may take an owner's lock (the lock order is
 * supervisor, then owner). */
#ifndef LOCKSTEP_GATEWAY_SUPERVISOR_H
#define LOCKSTEP_GATEWAY_SUPERVISOR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "cluster/cluster.h"
#include "protocol/protocol.h"

struct supervisor;

#define SUPERVISOR_HOST_MAX  64 /* a host name's bytes, with its NUL */
#define SUPERVISOR_PARTS_MAX 64 /* an mpirun job's app contexts: one a host (of 64 ranks) */

/* One runner request as the supervisor carries it, embedded in its owner.
 * id, group and arrival_us are set by the owner before it is submitted and
 * never change; holder is guarded by the owner's lock (the supervisor sets
 * it only inside events->adopt); the queued fields by the supervisor's. */
struct supervisor_job {
    uint64_t id;                /* runner protocol id (unique in the gateway) */
    const void *group;          /* jobs that live and die together (one request's choices) */
    uint64_t arrival_us;        /* when its request arrived: queue time, the oldest's age */
    struct supervisor *holder;  /* the supervisor whose table holds it; frames about it from
                                   any other (one it was moved off) are ignored */
    uint64_t queued_generation; /* the runner its ADD was queued for (0: none) */
    int queued_once;            /* an ADD of it was queued once (its queue time was seen) */
};

/* How a supervisor hears from the owners of its jobs and tells them, and
 * the layer above it, what happened. Job events receive the job; the
 * others receive `context`. None may call back into this supervisor. */
struct supervisor_events {
    void *context;
    /* a reference on the job's owner for the supervisor's table, and its release */
    void (*hold)(struct supervisor_job *job);
    void (*release)(struct supervisor_job *job);
    /* (supervisor lock held) Under the owner's lock: 0 if the job will
     * produce nothing more, else sets job->holder to s and returns 1. */
    int (*adopt)(struct supervisor_job *job, struct supervisor *s);
    /* (supervisor lock held) The job as a runner request now: q's fields,
     * with q->prompt its prompt and the tokens it generated so far in a
     * malloc'd copy the supervisor frees; -1 with err. */
    int (*request)(struct supervisor_job *job, struct runner_request *q, char *err, size_t errlen);
    /* (supervisor lock held) Tokens it still has to work through: prompt
     * not started and tokens not generated (the router's load figure). */
    int64_t (*outstanding)(struct supervisor_job *job);
    /* A frame about the job came from runner of `from` (no lock held). */
    void (*token)(struct supervisor_job *job, const struct runner_token *token,
                  struct supervisor *from);
    void (*finished)(struct supervisor_job *job, const struct runner_finished *finished,
                     struct supervisor *from);
    void (*embedding)(struct supervisor_job *job, const struct runner_embedding *embedding,
                      struct supervisor *from);
    /* (supervisor lock may be held) The job's owner ends with an error. */
    void (*failed)(struct supervisor_job *job, int status, const char *message);
    /* The runner said HELLO (and proved the cluster key): requests flow. */
    void (*ready)(void *context, int pid);
    /* The runner ended or was found stuck; another starts after a backoff. */
    void (*restarting)(void *context, int stuck, const char *why);
    /* (supervisor lock held) A job's first ADD was queued, seconds after it arrived. */
    void (*queued)(void *context, double seconds);
    void (*heartbeat)(void *context, const struct runner_heartbeat *heartbeat);
    /* (supervisor lock held) The watchdog found the runner stuck: how long
     * it went without progress, and its report (JSON, the callee's to free). */
    void (*stuck)(void *context, double seconds, char *report);
    /* (supervisor lock held) A runner is up again, seconds after the last went down. */
    void (*recovered)(void *context, double seconds);
    /* The name of a host of its placement that is lost (into host), or 0:
     * no runner is started while one is (no lock held). */
    int (*placement_lost)(void *context, char *host, size_t size);
};

/* One host's share of an mpirun job whose hosts run different programs
 * (MPMD: an app context each, `-np 1 --host a A : -np 1 --host b B`). */
struct supervisor_part {
    const char *host;     /* its --host NAME (NULL: this machine, every rank here) */
    int ranks;            /* its -np, and the slots its --host names */
    const char *lockstep; /* the lockstep binary there */
    const char *wrapper;  /* the program that runs it there, or NULL */
};

/* How the runner is started. */
struct supervisor_launch {
    const char *lockstep_path;      /* the lockstep binary */
    const char *wrapper;            /* the program that runs it (qemu-aarch64), or NULL */
    const char *mpirun_path;        /* mpirun, when mpi */
    const char *model_path;         /* GGUF file or llama2.c checkpoint */
    const char *tokenizer_path;     /* llama2.c tokenizer.bin, or NULL */
    int tp;                         /* ranks (of each pipeline stage) */
    int pp;                         /* pipeline stages (0 or 1: none) */
    int layers[CLUSTER_STAGES_MAX]; /* pp > 1: each stage's layers */
    int threads;                    /* threads per rank */
    int n_layers;                   /* the model's (to read the ranks' status records) */
    int mpi;                        /* 1: one process per rank under mpirun */
    const char *hostfile;           /* mpi: mpirun's --hostfile when host_list is empty */
    char host_list[256];            /* mpi: mpirun's --host value ("a:1,b:1"), or "" */
    int n_parts;                    /* mpi: > 0 when its hosts run different programs: one
                                       app context each, in rank order (then lockstep_path,
                                       wrapper and host_list are not used) */
    struct supervisor_part parts[SUPERVISOR_PARTS_MAX]; /* (n_parts) */
    const char *const *runner_args;   /* more runner options (NULL-terminated), or NULL */
    int allow_faults;                 /* 1: the runner takes FAULT frames (tests) */
    const char *cluster_key;          /* the key the runner must prove, or NULL */
    const char *cluster_key_file;     /* its file, passed to the runner */
    char leader[SUPERVISOR_HOST_MAX]; /* the leader's host when another machine ("": this one) */
    int local;                        /* 1: every rank runs on this machine */
};

/* What a supervisor is set up with. */
struct supervisor_config {
    char id[160];   /* what logs call it ("NAME-N") */
    char name[128]; /* its model's name (error messages) */
    struct supervisor_launch launch;
    char runtime_dir[64];       /* where its socket and status file go */
    int number;                 /* names its files, spreads its ports */
    int alone;                  /* 1: nowhere else to place it: a FAILED supervisor
                                   fails new and waiting jobs at once */
    double watchdog_seconds;    /* the stuck deadline's floor */
    const atomic_int *stopping; /* the gateway stops: return (may be NULL) */
    atomic_ullong *next_id;     /* the gateway's runner ids (warm-ups take some) */
};

/* Where a supervisor is (DESIGN.md I4, I7). Every transition goes through
 * one function (supervisor.c), which refuses any other:
 *   STARTING -> READY      the runner said HELLO
 *   STARTING -> STOPPING   it exited, missed its start deadline, or the gateway stops
 *   READY    -> STOPPING   its connection broke, it was found stuck, or the gateway stops
 *   STOPPING -> STARTING   its process group is reaped and the backoff is over
 *   STOPPING -> FAILED     the SUPERVISOR_START_ATTEMPTS-th start in a row failed
 *   FAILED   -> READY      a later start said HELLO (it is still retried)
 *   FAILED   -> STOPPING   that start failed too, or the gateway stops
 *   any      -> DRAINING   the gateway stops: no new job is taken
 * Jobs wait in the table while STARTING, READY or STOPPING; in FAILED
 * (alone) and DRAINING new ones fail with 503. */
enum supervisor_state {
    SUPERVISOR_STARTING = 0, /* a runner was started; no HELLO yet */
    SUPERVISOR_READY,        /* a runner said HELLO: jobs flow */
    SUPERVISOR_STOPPING,     /* the runner is being killed and reaped, then a backoff */
    SUPERVISOR_FAILED,       /* too many failed starts in a row */
    SUPERVISOR_DRAINING,     /* nothing new is taken */
};
#define SUPERVISOR_STATES         5 /* enum supervisor_state's values */
#define SUPERVISOR_START_ATTEMPTS 5 /* failed starts in a row before FAILED */

/* What the layers above read of a supervisor (a copy under its lock). */
struct supervisor_view {
    enum supervisor_state state;
    char status[256]; /* why it is not ready ("" when ready) */
    int restarts;     /* runners started after the first */
    int failures;     /* consecutive failed starts */
    int stuck_detections;
    int n_jobs;                        /* jobs in its table */
    int pid;                           /* the runner's (its group's leader), 0 if none */
    int warm_pending;                  /* a move's warm-ups not finished yet */
    struct runner_heartbeat heartbeat; /* the latest */
};

struct supervisor {
    struct supervisor_config config;
    struct supervisor_events events;
    char socket_path[108]; /* where its runner listens: a runner address (protocol.h) */
    char status_path[108]; /* the file its ranks mirror their state into */
    pthread_t thread;      /* starts, reads, writes, restarts */
    int thread_started;
    atomic_int stop_requested; /* 1: stop the runner and return */
    atomic_int done;           /* 1: the thread returned (it may be joined at once) */
    int wake[2];               /* pipe: work for the thread (new jobs, cancels) */

    pthread_mutex_t lock; /* guards everything below */
    enum supervisor_state state;
    int fd;                         /* connection to the runner (non-blocking), -1 while none */
    pid_t pid;                      /* runner process (its group's leader), 0 if none */
    uint64_t generation;            /* runners started so far: which one a queued ADD went to */
    struct runner_buffer outbox;    /* frames for the runner not yet written to its socket */
    uint64_t outbox_stalled_us;     /* when the outbox last had bytes and wrote none (0: empty) */
    struct runner_hello hello;      /* what its runner said first */
    struct runner_auth auth_answer; /* with a cluster key: the proof sent for hello's challenge */
    int linked;                     /* 1: the current runner said HELLO and proved the key */
    int restarts;                   /* runners started after the first */
    int failures;                   /* consecutive failed starts */
    char status[256];               /* why it is not ready */
    struct supervisor_job **jobs;   /* (capacity) unfinished jobs, each holding a reference
                                       to its owner */
    int n_jobs, capacity;
    struct runner_heartbeat last_heartbeat;
    /* the watchdog (watchdog.c) */
    void *rank_status;       /* the status file, mapped (runner_status_bytes() bytes), or NULL */
    uint64_t progress_us;    /* last sign of progress (a heartbeat, HELLO, or work arriving at
                                an idle runner) */
    double step_seconds[64]; /* recent step durations (ring) */
    int n_step_seconds;      /* entries filled (<= 64) */
    int next_step_second;    /* ring position */
    uint64_t down_since_us;  /* the runner died or was found stuck (0: up) */
    int stuck_detections;
    unsigned refuse_starts; /* fault injection: starts still to refuse */
    int steps_since_ready;  /* steps the current runner completed */
    /* a move's warm-ups: requests of one token that fill its runner's
     * prefix cache with the moving jobs' KV before they come */
    uint64_t warm_first, warm_last; /* their runner ids, [first, last] */
    int warm_pending;               /* those not finished yet */
    int last_exit;                  /* the last runner's wait status */
};

/* A runner's command line (supervisor_runner_argv). */
#define SUPERVISOR_ARGV_MAX 2048
struct supervisor_argv {
    const char *argv[SUPERVISOR_ARGV_MAX]; /* (n) then NULL */
    int n;
    char numbers[SUPERVISOR_PARTS_MAX + 4][16];                /* the counts it holds */
    char layers[CLUSTER_STAGES_MAX * 8];                       /* "6,10": --layers-split */
    char hosts[SUPERVISOR_PARTS_MAX][SUPERVISOR_HOST_MAX + 8]; /* "NAME:RANKS" */
};

/* The ranks launch starts: tp in each of its stages. */
static inline int supervisor_launch_ranks(const struct supervisor_launch *launch) {
    return launch->tp * (launch->pp > 1 ? launch->pp : 1);
}

/* supervisor.c: its life */
/* The command that starts launch's runner listening on socket_path (and
 * writing its ranks' status to status_path when not NULL), borrowing
 * launch's strings: [wrapper] lockstep runner ... for a runner of threads;
 * under mpirun, one app context for every rank (`mpirun ... -np N [wrapper]
 * lockstep runner ...`), or with parts one per host, `mpirun ... -np R0
 * --host a:R0 [wrapper_a] lockstep_a runner ... : -np R1 --host b:R1 ...`.
 * 0, or -1 when it does not fit. */
int supervisor_runner_argv(const struct supervisor_launch *launch, const char *socket_path,
                           const char *status_path, struct supervisor_argv *out);
/* Sets it up (nothing runs yet); -1 with err. */
int supervisor_init(struct supervisor *s, const struct supervisor_config *config,
                    const struct supervisor_events *events, char *err, size_t errlen);
/* Starts its thread, which starts the runner. */
int supervisor_start(struct supervisor *s, char *err, size_t errlen);
/* No new jobs: they fail with 503. */
void supervisor_drain(struct supervisor *s);
/* Tells the thread to stop its runner and return, without waiting for it;
 * supervisor_stopped says when it did. */
void supervisor_retire(struct supervisor *s);
int supervisor_stopped(struct supervisor *s);
/* Drains, joins the thread (its runner stopped), and fails what is left
 * with 503. */
void supervisor_stop(struct supervisor *s);
void supervisor_free(struct supervisor *s);
void supervisor_view(struct supervisor *s, struct supervisor_view *out);
/* Adds restarts and stuck detections carried over from a predecessor. */
void supervisor_inherit(struct supervisor *s, int restarts, int stuck_detections);
/* "starting", "ready", ... as /health, /v1/cluster and /metrics say it. */
const char *supervisor_state_name(enum supervisor_state state);
/* Every state's name, in the enum's order. */
extern const char *const supervisor_state_names[SUPERVISOR_STATES];

/* jobs.c: its table of jobs */
/* Takes the jobs (each with a reference its owner took for the table) and
 * wakes the thread, which queues their ADDs; never waits. Alone and
 * FAILED, or DRAINING, it fails them with 503 at once. */
void supervisor_submit(struct supervisor *s, struct supervisor_job **jobs, int n);
/* Drops the jobs of group (only `only` if not NULL) from the table and
 * tells the runner that has them to drop them. */
void supervisor_cancel(struct supervisor *s, const void *group, const struct supervisor_job *only);
/* Every job fails (status, message); the runner drops them. */
void supervisor_fail(struct supervisor *s, int status, const char *message);
/* Takes every job out of the table, telling the runner to drop them: *out
 * (free() it) holds them with their references; their count, or -1. */
int supervisor_take(struct supervisor *s, struct supervisor_job ***out);
/* Gives it jobs taken from another, with their references: its runner gets
 * them with the tokens they have (I4, I8); those over are released. */
void supervisor_give(struct supervisor *s, struct supervisor_job **jobs, int n);
/* Sends `to` a warm-up of every job of `from`: a one-token request of its
 * prompt and tokens so far, which leaves their KV blocks in the runner's
 * prefix cache (I8: reuse is exact). Returns how many. */
int supervisor_warm(struct supervisor *from, struct supervisor *to);
int64_t supervisor_outstanding(struct supervisor *s);
/* Seconds since the oldest job it holds arrived (0: none). */
double supervisor_oldest(struct supervisor *s, uint64_t now_us);
/* Calls fn on every job (its lock held: fn must not call back). */
void supervisor_each(struct supervisor *s, void (*fn)(struct supervisor_job *, void *), void *arg);
/* Wakes the thread (never blocks). */
void supervisor_wake(struct supervisor *s);

/* watchdog.c: stuck runners, and the faults tests inject */
/* POST /debug/fault on its runner: kill, stop, stall, delay, close (rank,
 * delay_ms, steps) or refuse (count starts); 0, or the HTTP status of the
 * refusal with why. */
int supervisor_fault(struct supervisor *s, const char *kind, int rank, int delay_ms, int steps,
                     int count, char *why, size_t size);

#endif
