/* gateway.h -- `lockstep serve`: the OpenAI-compatible HTTP API in front of
 * supervised runners.
 *
 * The gateway owns every request (DESIGN.md I4): its prompt tokens, the
 * tokens generated so far and its sampling parameters. It starts one runner
 * per model instance (a `lockstep runner` child process, or an mpirun job),
 * talks to it over the runner protocol, and when a runner exits it starts a
 * new one and resubmits the unfinished requests with their generated tokens
 * appended, so a client's stream goes on with the tokens it would have got.
 * It tokenizes, applies chat templates, detokenizes incrementally, matches
 * stop strings, streams server-sent events and keeps Prometheus metrics. It
 * never touches weights. */
#ifndef LOCKSTEP_GATEWAY_H
#define LOCKSTEP_GATEWAY_H

#include <stddef.h>

struct cluster_host;
struct cluster_place_spec;

enum gateway_launcher {
    GATEWAY_LAUNCHER_LOCAL = 0, /* the runner's ranks are threads of one child process */
    GATEWAY_LAUNCHER_MPI = 1,   /* one process per rank under mpirun */
};

/* One model instance the gateway serves. */
struct gateway_model {
    const char *name;           /* what clients put in "model" (default: the file's name) */
    const char *path;           /* GGUF file or llama2.c checkpoint */
    const char *tokenizer_path; /* llama2.c tokenizer.bin, or NULL */
    const char *chat_template;  /* a template name, or NULL for the file's own */
    int tp;                     /* ranks */
    int threads;                /* threads per rank */
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
    int enable_faults;         /* 1: POST /debug/fault and runners that accept faults (tests) */
    int log_requests;          /* 1: a log line per finished request (never its text) */
    const char *lockstep_path; /* the lockstep binary runners are started with */
    const char *mpirun_path;   /* mpirun, for the mpi launcher */
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

struct gateway;

/* Loads each model's vocabulary, starts its runner and listens; the port
 * actually bound is gateway_port's. */
int gateway_create(struct gateway **out, const struct gateway_params *params, char *err,
                   size_t errlen);
int gateway_port(const struct gateway *gateway);
/* Serves until gateway_stop, or until a drain ends; runs the housekeeping
 * (keep-alive comments). */
void gateway_run(struct gateway *gateway);
/* Asks gateway_run to return at once; async-signal-safe. */
void gateway_stop(struct gateway *gateway);
/* Asks gateway_run to drain: new requests get 503 and /health says
 * "draining", those in flight finish, and gateway_run returns when none is
 * left or after drain_seconds, when those left end with an error event
 * naming the shutdown (streams: then [DONE]); async-signal-safe. */
void gateway_drain(struct gateway *gateway);
/* Stops the runners and the HTTP server and frees everything. */
void gateway_free(struct gateway *gateway);

#endif
