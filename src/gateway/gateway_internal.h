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
#include "gateway/requests/requests.h"
#include "gateway/supervisor/supervisor.h"
#include "openai/openai.h"

struct MHD_Connection;
struct MHD_Daemon;
struct gateway_instance;
struct gateway_screen;
struct sockaddr;

struct gateway_request;

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

/* A model instance: one placement of a model, and the supervisor of the
 * runner that serves it. Lock order: the cluster lock, then its
 * supervisor's lock, then a request's lock, then the metrics registry's or
 * the stuck reports' lock (DESIGN.md, Locks). */
struct gateway_instance {
    atomic_int references; /* holders: the cluster (its list, or the move that starts it)
                              and callers of gateway_cluster_any; the last release frees it */
    struct gateway *gateway;
    const struct gateway_served *served; /* its model */
    int tp;                              /* its placement's degree */
    char name[128];                      /* its model's name (logs, metric labels) */
    char id[160]; /* "NAME-N": what the admin API calls it (kept through moves) */
    struct cluster_placement placement;      /* its ranks' hosts (indices into the gateway's) */
    char hosts_text[GATEWAY_PLACEMENT_TEXT]; /* the placement spelt "a:2" */
    int64_t bytes_per_rank;                  /* memory its placement counts per rank */
    /* cluster lock (cluster.c) */
    int routable;             /* 1: new requests may be routed here */
    int deleting;             /* 1: DELETE asked for: it stops once its table is empty */
    struct gateway_move move; /* its latest move */
    uint64_t replaced_us;     /* when it was last placed elsewhere after failing */
    uint64_t left_us;         /* when it last tried to leave a drained host */
    struct gateway_instance_stats stats;
    struct supervisor supervisor; /* its runner (its own lock) */
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
    struct requests_env requests_env; /* what its requests are created with */
    pthread_mutex_t reports_lock;     /* guards the stuck reports */
    char *stuck_reports[16];          /* JSON of the latest stuck reports (ring) */
    int n_stuck_reports;              /* reports made so far */
    char runtime_dir[64];             /* /tmp/lockstep-PID: the runners' sockets and status files */
    struct gateway_screen *screen;    /* screen.c: accepts and screens connections */
};

#define GATEWAY_START_ATTEMPTS     5   /* failed starts in a row before requests fail */
#define GATEWAY_CONNECTION_TIMEOUT 30  /* seconds, when the parameters give none */
#define GATEWAY_CLIENT_CONNECTIONS 512 /* per client address, when the parameters give none */
#define GATEWAY_DRAIN_SECONDS      30  /* gateway_drain's bound, when the parameters give none */
#define GATEWAY_FLUSH_SECONDS      1.0 /* for clients to read the errors a stop ends requests with */

/* instance.c: an instance around its supervisor */
/* Sets up an instance of served at a placement (hosts indexing the
 * gateway's) and its supervisor; number names its socket and status files. */
int gateway_instance_init(struct gateway_instance *instance, struct gateway *gateway,
                          const struct gateway_served *served, const char *id,
                          const struct cluster_placement *placement, int number, char *err,
                          size_t errlen);
void gateway_instance_free(struct gateway_instance *instance);
/* References (the field's comment says who holds them): the last release
 * frees the instance (gateway_instance_free, then free()). */
void gateway_instance_hold(struct gateway_instance *instance);
void gateway_instance_release(struct gateway_instance *instance);
/* The request's choices go to the instance's supervisor. */
void gateway_instance_submit(struct gateway_instance *instance, struct gateway_request *request);
/* requests_env's cancel: drops the request's choices (or only `only`)
 * from every supervisor that holds them now (takes the cluster lock). */
void gateway_instance_cancel(void *gateway, struct gateway_request *request,
                             struct gateway_choice *only);
/* Calls fn on the request of every choice the instance holds, so once per
 * choice (keep-alives: fn must not mind). */
void gateway_instance_each(struct gateway_instance *instance,
                           void (*fn)(struct gateway_request *, uint64_t), uint64_t arg);
/* GET /debug/stuck (takes the reports lock). */
char *gateway_stuck_json(struct gateway *gateway);

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

/* observe.c: GET /metrics's text, after the hosts', the instances' states
 * and their oldest requests' ages are read (takes the cluster lock). */
char *gateway_metrics_text(struct gateway *gateway);

#endif
