/* fleet.h -- the gateway's instances across the cluster's hosts: which
 * exist and where their ranks are, which one a request goes to, how they
 * move and stop while requests flow, and what the hosts' probes say.
 *
 * The layer above the requests: an instance is a placement of a served
 * model around the supervisor of its runner, whose events it answers
 * (instance.c); the probes tell it of host changes through the same kind
 * of callback. It knows nothing of HTTP: the layer above calls it. */
#ifndef LOCKSTEP_GATEWAY_FLEET_H
#define LOCKSTEP_GATEWAY_FLEET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "gateway/core/core.h"
#include "gateway/requests/requests.h"
#include "gateway/supervisor/supervisor.h"

struct cJSON;

#define FLEET_PLACEMENT_TEXT 256 /* a placement spelt out, "a:2+b:2" */

/* A move of an instance to another placement (cluster.c), as GET
 * /v1/cluster shows it. */
enum fleet_move_state {
    FLEET_MOVE_NONE = 0, /* never moved */
    FLEET_MOVE_STARTING, /* the new placement is starting (or warming); the old one serves */
    FLEET_MOVE_DONE,     /* the last move completed */
    FLEET_MOVE_FAILED,   /* the last move's placement did not start: the old one serves */
};

struct fleet_move {
    enum fleet_move_state state;
    int tp;                           /* the degree it moves to */
    int pp;                           /* ... and its stages */
    char to[FLEET_PLACEMENT_TEXT];    /* the placement it moves to ("b:1+c:1") */
    char reason[256];                 /* why it failed */
    uint64_t started_us, finished_us; /* when it began and ended */
    struct fleet_instance *successor; /* the new placement's instance while starting */
    int warming;                      /* 1: its runner computes the requests' KV (warm-ups) */
    uint64_t warm_started_us;         /* when the warm-ups were sent */
};

/* Counters of what an instance served, for GET /v1/cluster's rates. */
struct fleet_instance_stats {
    atomic_ullong generated;           /* tokens delivered */
    atomic_ullong ttft_us, ttft_count; /* time to first token, summed */
    atomic_ullong itl_us, itl_count;   /* inter-token latency, summed */
};

/* A model instance: one placement of a model, and the supervisor of the
 * runner that serves it. Lock order: the cluster lock, then its
 * supervisor's lock, then a request's lock, then the metrics registry's or
 * the stuck reports' lock (DESIGN.md, Locks). */
struct fleet_instance {
    atomic_int references; /* holders: the cluster (its list, or the move that starts it)
                              and callers of fleet_any; the last release frees it */
    struct fleet *fleet;
    const struct gateway_served *served; /* its model */
    int tp;                              /* its placement's degree */
    char name[128];                      /* its model's name (logs, metric labels) */
    char id[160]; /* "NAME-N": what the admin API calls it (kept through moves) */
    struct cluster_placement placement;    /* its ranks' hosts (indices into the gateway's) */
    char hosts_text[FLEET_PLACEMENT_TEXT]; /* the placement spelt "a:2" */
    int64_t bytes_per_rank;                /* memory its placement counts per rank */
    int shape_chosen; /* 1: the policy chose its shape, and chooses it again when it moves
                         without one asked for */
    /* cluster lock (cluster.c) */
    int routable;           /* 1: new requests may be routed here */
    int deleting;           /* 1: DELETE asked for: it stops once its table is empty */
    struct fleet_move move; /* its latest move */
    uint64_t replaced_us;   /* when it was last placed elsewhere after failing */
    uint64_t left_us;       /* when it last tried to leave a drained host */
    struct fleet_instance_stats stats;
    struct supervisor supervisor; /* its runner (its own lock) */
};

#define FLEET_EVENTS 50 /* cluster events GET /v1/cluster keeps */

/* history.c: what GET /v1/cluster/history serves. */
#define FLEET_HISTORY_EVERY     5.0 /* seconds between samples */
#define FLEET_HISTORY_SAMPLES   180 /* per instance: 15 minutes */
#define FLEET_HISTORY_INSTANCES 64  /* instances tracked (the least recent is reused) */

/* One sample of an instance: its cumulative counters and latest heartbeat. */
struct fleet_history_sample {
    double time;                 /* Unix seconds */
    double generated;            /* tokens delivered so far */
    double ttft_sum, ttft_count; /* time to first token: seconds summed, and how many */
    double itl_sum, itl_count;   /* inter-token latency, the same */
    int queue, running;          /* the runner's waiting and running sequences */
    int kv_used, kv_total;       /* its KV blocks */
};

struct fleet_history_track {
    char id[160];   /* the instance's id */
    double written; /* Unix seconds of its newest sample */
    int n, next;    /* samples held; where the next one goes (a ring) */
    struct fleet_history_sample samples[FLEET_HISTORY_SAMPLES];
};

struct fleet_history {
    struct fleet_history_track tracks[FLEET_HISTORY_INSTANCES]; /* (n_tracks) */
    int n_tracks;
    uint64_t last_us; /* when the last samples were taken */
};

/* Something that happened to the cluster (GET /v1/cluster's events). */
struct fleet_event {
    double time;   /* Unix seconds */
    char kind[16]; /* start, ready, stop, move, move_failed, lost, back, stuck, restart, fault */
    char instance[160];               /* its instance id, or "" */
    char host[CLUSTER_HOST_NAME_MAX]; /* its host, or "" */
    char text[256];
};

/* How a prober hears of the hosts and tells what they answered. */
struct fleet_probe_events {
    void *context;
    /* Copies the hosts to probe into hosts (CLUSTER_HOSTS_MAX at most);
     * returns how many. */
    int (*hosts)(void *context, struct cluster_host *hosts);
    /* Host `host` (its index in that copy) answered p, or did not (NULL). */
    void (*answered)(void *context, int host, const struct cluster_probe *p);
    /* The link probe measured links ([i * n + j]) between the n hosts of
     * indices hosts[] (into that copy). */
    void (*links)(void *context, const int *hosts, int n, const struct cluster_link *links);
};

/* A thread that probes every host every every_seconds (probe.c). */
struct fleet_prober {
    const char *mpirun_path;   /* runs `lockstep probe` on other machines */
    const char *lockstep_path; /* the lockstep binary there */
    double every_seconds;      /* between rounds (0: 5) */
    atomic_int *stopping;      /* the gateway stops: the thread returns */
    struct fleet_probe_events events;
    pthread_t thread;       /* probes the hosts */
    pthread_t links_thread; /* measures the links between them */
    int started, links_started;
};

/* The gateway's instances across the cluster's hosts. Set up by
 * fleet_init with what it borrows from the gateway (which
 * outlives it); its lock guards what its comments say. */
struct fleet {
    const struct gateway_params *params;
    const struct gateway_served *served; /* (n_served) the models, fixed at start */
    int n_served;
    struct gateway_metrics *metrics;
    atomic_int *stopping;   /* the gateway stops (fleet_stop sets it too) */
    atomic_ullong *next_id; /* runner ids */
    char runtime_dir[64];   /* the runners' sockets and status files */
    /* lock order: cluster_lock before any supervisor's lock */
    pthread_mutex_t cluster_lock;
    struct fleet_instance **instances; /* (n_instances) live instances, in start order */
    int n_instances, instances_capacity;
    struct fleet_instance **retiring; /* (n_retiring) retired ones whose supervisor is still
                                           stopping their runner: joined once it returned */
    int n_retiring, retiring_capacity;
    int next_instance;                            /* instances made so far: their ids' numbers */
    struct cluster_host hosts[CLUSTER_HOSTS_MAX]; /* (n_hosts) */
    uint64_t lost_until_us[CLUSTER_HOSTS_MAX];    /* a lose-host fault's end, per host */
    uint64_t drained_until_us[CLUSTER_HOSTS_MAX]; /* a drain-host fault's end, per host (0: none) */
    int n_hosts;
    /* the links between hosts as the latest link probe measured them,
     * [from * n_hosts + to] (all 0 until one answers): what the policy
     * weighs when it chooses a shape */
    struct cluster_link links[CLUSTER_HOSTS_MAX * CLUSTER_HOSTS_MAX];
    int links_measured;                      /* 1: a link probe has answered */
    struct fleet_event events[FLEET_EVENTS]; /* ring */
    int n_events;                            /* events so far */
    struct fleet_history *history;           /* history.c (cluster lock) */
    struct fleet_prober prober;              /* probe.c: learns the hosts' state */
    pthread_mutex_t reports_lock;            /* guards the stuck reports */
    char *stuck_reports[16];                 /* JSON of the latest stuck reports (ring) */
    int n_stuck_reports;                     /* reports made so far */
};

/* cluster.c */
/* Borrows what it is given (the gateway outlives it); -1 with err. */
int fleet_init(struct fleet *fleet, const struct gateway_params *params,
               const struct gateway_served *served, int n_served, struct gateway_metrics *metrics,
               atomic_int *stopping, atomic_ullong *next_id, const char *runtime_dir, char *err,
               size_t errlen);

/* instance.c: an instance around its supervisor */
/* Sets up an instance of served at a placement (hosts indexing the
 * gateway's) and its supervisor; number names its socket and status files. */
int fleet_instance_init(struct fleet_instance *instance, struct fleet *fleet,
                        const struct gateway_served *served, const char *id,
                        const struct cluster_placement *placement, int number, char *err,
                        size_t errlen);
void fleet_instance_free(struct fleet_instance *instance);
/* References (the field's comment says who holds them): the last release
 * frees the instance (fleet_instance_free, then free()). */
void fleet_instance_hold(struct fleet_instance *instance);
void fleet_instance_release(struct fleet_instance *instance);
/* The request's choices go to the instance's supervisor. */
void fleet_instance_submit(struct fleet_instance *instance, struct gateway_request *request);
/* requests_env's cancel: drops the request's choices (or only `only`)
 * from every supervisor that holds them now (takes the cluster lock). */
void fleet_instance_cancel(void *gateway, struct gateway_request *request,
                           struct gateway_choice *only);
/* Calls fn on the request of every choice the instance holds, so once per
 * choice (keep-alives: fn must not mind). */
void fleet_instance_each(struct fleet_instance *instance,
                         void (*fn)(struct gateway_request *, uint64_t), uint64_t arg);
/* GET /debug/stuck (takes the reports lock). */
char *fleet_stuck_json(struct fleet *fleet);

/* cluster.c (takes the cluster lock unless said otherwise) */
/* Sets up the hosts and starts the first instances. */
int fleet_start(struct fleet *fleet, char *err, size_t errlen);
/* Completes the moves whose placement is ready (or failed) and the
 * deletions whose requests are handed over; called often by gateway_run. */
void fleet_step(struct fleet *fleet);
void fleet_stop(struct fleet *fleet);
void fleet_free(struct fleet *fleet);
/* fleet_instance_fail on every instance, moving ones' new placements too. */
void fleet_fail(struct fleet *fleet, int status, const char *message);
/* Routes the request to the least-loaded routable instance of its model
 * and submits it there; fails it with 503 when the model has none. */
void fleet_submit(struct fleet *fleet, struct gateway_request *request);
/* The same for the choices a request submits later (requests_env's
 * submit_more: an embeddings request's next inputs). */
void fleet_submit_more(void *fleet, struct gateway_request *request);
/* A routable instance of served (its vocabulary, fault injection) with a
 * reference for the caller (fleet_instance_release it), or NULL. */
struct fleet_instance *fleet_any(struct fleet *fleet, const struct gateway_served *served);
/* The live instance with this id, or NULL (cluster lock held). */
struct fleet_instance *fleet_find(struct fleet *fleet, const char *id);
/* 1 if instance is one of the cluster's, or a move's new placement (cluster
 * lock held). */
int fleet_has(const struct fleet *fleet, const struct fleet_instance *instance);
/* fleet_instance_each over every instance, moving ones' new placements too. */
void fleet_each(struct fleet *fleet, void (*fn)(struct gateway_request *, uint64_t), uint64_t arg);
/* The admin operations: 0, or an HTTP status with why. */
int fleet_add(struct fleet *fleet, const char *model, const struct cluster_shape *shape,
              const char *const *hosts, int n_hosts, char *id, size_t idlen, char *why,
              size_t whylen);
int fleet_delete(struct fleet *fleet, const char *id, char *why, size_t whylen);
/* shape's tp or pp 0 keeps that degree; no hosts: the policy chooses
 * (elsewhere, at the same degrees). */
int fleet_move(struct fleet *fleet, const char *id, const struct cluster_shape *shape,
               const char *const *hosts, int n_hosts, char *why, size_t whylen);
/* Fault injection: host is lost for seconds (its probes count as failed)
 * and the runners with ranks there are killed; returns how many. */
int fleet_lose_host(struct fleet *fleet, int host, double seconds);
/* Cordons the host called name (drain 1: nothing new is placed there and
 * the cluster thread moves its instances elsewhere) or ends that (0); 0,
 * or 404 with why. */
int fleet_drain_host(struct fleet *fleet, const char *name, int drain, char *why, size_t whylen);
/* Fault injection: host is drained for seconds, then undrained. */
void fleet_drain_for(struct fleet *fleet, int host, double seconds);
/* Moves every instance with a rank on a lost host elsewhere. */
void fleet_leave_host(struct fleet *fleet, int host);
/* What the live instances (and moves' new placements) hold on each host
 * (cluster lock held). */
void fleet_usage(struct fleet *fleet, struct cluster_usage *usage);
/* placement.c: a placement for served at shape (shape->chosen: the
 * policy's shape): on the named hosts when some are given, else where the
 * policy says, never on `avoid` (a placement being left, or NULL), only on
 * hosts of contract numerics ("": any one); *bytes_per_rank is what each
 * rank counts. 0, or an HTTP status with why (cluster lock held). */
int fleet_choose_placement(struct fleet *fleet, const struct gateway_served *served,
                           const struct cluster_shape *shape, const char *const *hosts, int n_hosts,
                           const struct cluster_placement *avoid, const char *numerics,
                           struct cluster_placement *out, int64_t *bytes_per_rank, char *why,
                           size_t whylen);
/* The same, taking the cluster lock (no supervisor's lock may be held). */
void fleet_note(struct fleet *fleet, const char *kind, const char *instance, const char *format,
                ...) __attribute__((format(printf, 4, 5)));
/* Records an event and logs it (cluster lock held). */
void fleet_record(struct fleet *fleet, const char *kind, const char *instance, const char *host,
                  const char *format, ...) __attribute__((format(printf, 5, 6)));

/* history.c */
int fleet_history_init(struct fleet *fleet);
void fleet_history_free(struct fleet *fleet);
/* Takes the samples when they are due (cluster lock held). */
void fleet_history_sample(struct fleet *fleet);
/* GET /v1/cluster/history's JSON text, every live instance's track as
 * columns (free() it). */
char *fleet_history_json(struct fleet *fleet);

/* probe.c */
/* Probes every host once, or only this machine's names (no lock held by
 * the caller). */
void fleet_probe_hosts(struct fleet_prober *prober, int local_only);
int fleet_probe_start(struct fleet_prober *prober, char *err, size_t errlen);
void fleet_probe_stop(struct fleet_prober *prober);

/* views.c (each takes the cluster lock) */
/* GET /v1/cluster's JSON text (free() it). */
char *fleet_json(struct fleet *fleet);
/* The instance called id as GET /v1/cluster shows it, or NULL. */
struct cJSON *fleet_instance_view(struct fleet *fleet, const char *id);
/* Its latest move as GET /v1/cluster shows it (null if it never moved),
 * or NULL when there is no instance called id. */
struct cJSON *fleet_move_view(struct fleet *fleet, const char *id);
/* GET /admin/instances: the instances as GET /v1/cluster shows them (free() it). */
char *fleet_instances_json(struct fleet *fleet);
/* GET /health's "models": an object per instance; *ready: there is one
 * and every one is ready. */
struct cJSON *fleet_health_json(struct fleet *fleet, int *ready);

/* observe.c: GET /metrics's text, after the hosts', the instances' states
 * and their oldest requests' ages are read (takes the cluster lock). */
char *fleet_metrics_text(struct fleet *fleet);

#endif
