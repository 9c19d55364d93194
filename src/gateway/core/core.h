/* core.h -- what every layer of the gateway shares: its configuration
 * (the models and the parameters `lockstep serve` was started with), the
 * models it serves (vocabulary and chat template, loaded once), and its
 * Prometheus metrics with the functions that update them by label. The
 * bottom layer of src/gateway: it knows nothing of runners, requests,
 * instances or HTTP. */
#ifndef LOCKSTEP_GATEWAY_CORE_H
#define LOCKSTEP_GATEWAY_CORE_H

#include <stddef.h>

#include "cluster/cluster.h"
#include "gateway/core/metrics.h"
#include "model/model.h"
#include "protocol/protocol.h"
#include "tokenizer/tokenizer.h"

struct cluster_host;
struct cluster_place_spec;

enum gateway_launcher {
    GATEWAY_LAUNCHER_LOCAL = 0, /* the runner's ranks are threads of one child process */
    GATEWAY_LAUNCHER_MPI = 1,   /* one process per rank under mpirun */
};

/* One model instance the gateway serves. */
struct gateway_model {
    const char *name;               /* what clients put in "model" (default: the file's name) */
    const char *path;               /* GGUF file or llama2.c checkpoint */
    const char *tokenizer_path;     /* llama2.c tokenizer.bin, or NULL */
    const char *chat_template;      /* a template name, or NULL for the file's own */
    const char *pooling;            /* the runner's --pooling for embeddings (mean, last, cls),
                                       or NULL: the file's {arch}.pooling_type */
    int tp;                         /* ranks (of each pipeline stage) */
    int pp;                         /* pipeline stages (1: none) */
    int layers[CLUSTER_STAGES_MAX]; /* layers of each stage, or all 0: the placement's split */
    int shape_chosen;               /* 1: neither tp, pp nor layers was given: the placement policy
                                       chooses them where the instance goes (cluster_choose_shape) */
    int threads;                    /* threads per rank */
    enum gateway_launcher launcher;
    const char *hosts;              /* mpi: hostfile for mpirun, or NULL */
    const char *const *runner_args; /* more `lockstep runner` options (NULL-terminated), or NULL */
};

#define GATEWAY_CORS_ORIGINS_MAX 16

struct gateway_params {
    const char *host;               /* address to listen on (127.0.0.1) */
    int port;                       /* 0: any free port */
    const char *api_key;            /* NULL: no authentication (never empty) */
    size_t max_body_bytes;          /* larger bodies get 413 */
    int max_prompt_tokens;          /* longer prompts get 400 */
    int max_tokens_limit;           /* larger max_tokens get 400 */
    int max_concurrent;             /* requests at once; more get 429 */
    double keep_alive_seconds;      /* idle streams get an SSE comment this often */
    double watchdog_seconds;        /* a runner with work and no step for max(this, 20 x its
                                       median step time) is stuck: killed and replaced */
    int connection_timeout_seconds; /* a connection idle this long is closed */
    int max_client_connections;     /* connections at once from one client address */
    int n_cors_origins;
    const char *cors_origins[GATEWAY_CORS_ORIGINS_MAX]; /* (n_cors_origins) allowed browser
                                                           origins; "*" for any */
    int enable_faults;          /* 1: POST /debug/fault and runners that accept faults (tests) */
    int log_requests;           /* 1: a log line per finished request (never its text) */
    const char *lockstep_path;  /* the lockstep binary runners are started with */
    const char *runner_wrapper; /* a program a local runner's command is handed to (say,
                                   qemu-aarch64 for another architecture's binary), or NULL */
    const char *mpirun_path;    /* mpirun, for the mpi launcher */
    int n_models;
    const struct gateway_model *models; /* (n_models) */
    /* the cluster */
    const char *admin_key;   /* the admin API's key; NULL: no admin API */
    const char *cluster_key; /* every runner link proves it (auth.c); NULL: none asked */
    const char
        *cluster_key_file; /* its file, which runners are started with (--cluster-key-file) */
    int n_hosts;           /* 0: this machine alone */
    const struct cluster_host *hosts;        /* (n_hosts) from --cluster's hostfile */
    int n_places;                            /* 0: one instance per model, placed */
    const struct cluster_place_spec *places; /* (n_places) --place: the first instances */
    double probe_seconds;                    /* hosts are probed this often (default 5) */
    double drain_seconds; /* gateway_drain waits this long for requests in flight (0: 30) */
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

/* served.c */
int gateway_served_init(struct gateway_served *served, const struct gateway_model *model, char *err,
                        size_t errlen);
void gateway_served_free(struct gateway_served *served);
/* The one of served[0..n) called name, or NULL. */
const struct gateway_served *gateway_served_find(const struct gateway_served *served, int n,
                                                 const char *name);

/* The metric families of GET /metrics (observe.c): label values are a model's name and an
 * instance's id. */
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

/* observe.c: updates by label values (model: a served model's name,
 * instance: an instance's id), from any thread */
int gateway_metrics_init(struct gateway_metrics *m);
void gateway_metrics_free(struct gateway_metrics *m);
void gateway_observe_request(struct gateway_metrics *m, const char *model, int status);
void gateway_observe_tokens(struct gateway_metrics *m, const char *model, const char *instance,
                            int prompt, int generated);
/* Prompt tokens a request found in the runner's prefix cache. */
void gateway_observe_cached(struct gateway_metrics *m, const char *model, const char *instance,
                            int cached);
/* Time to first token and inter-token latency, seconds (< 0: not this time). */
void gateway_observe_latency(struct gateway_metrics *m, const char *model, const char *instance,
                             double ttft, double itl);
void gateway_observe_heartbeat(struct gateway_metrics *m, const char *model, const char *instance,
                               const struct runner_heartbeat *heartbeat);
void gateway_observe_restart(struct gateway_metrics *m, const char *model, const char *instance);
void gateway_observe_overhead(struct gateway_metrics *m, const char *model, const char *instance,
                              double seconds);
void gateway_observe_stuck(struct gateway_metrics *m, const char *model, const char *instance,
                           double detection_seconds);
void gateway_observe_recovery(struct gateway_metrics *m, const char *model, const char *instance,
                              double seconds);
/* A choice's first ADD was queued for a runner, seconds after its arrival. */
void gateway_observe_queued(struct gateway_metrics *m, const char *model, const char *instance,
                            double seconds);
/* A request ended: its duration, and whether its prompt reused the prefix cache. */
void gateway_observe_finished(struct gateway_metrics *m, const char *model, const char *instance,
                              double seconds, int cached);
/* Every series of an instance at 0 from the start (a counter that has not
 * moved yet is still there); states names its n_states states. */
void gateway_observe_instance(struct gateway_metrics *m, const char *model, const char *instance,
                              const char *const *states, int n_states);
/* The instance is in state k of states (1 for it, 0 for the others), and
 * the oldest request it holds is seconds old. */
void gateway_observe_state(struct gateway_metrics *m, const char *model, const char *instance,
                           const char *const *states, int n_states, int k, double oldest);
void gateway_observe_host(struct gateway_metrics *m, const char *host, int up);
void gateway_observe_move(struct gateway_metrics *m, const char *model, int done, double seconds);
/* GET /metrics's text (free() it): lockstep_build_info, then every family. */
char *gateway_metrics_render(struct gateway_metrics *m);

#endif
