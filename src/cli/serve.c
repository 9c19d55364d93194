/* serve.c -- `lockstep serve`: the OpenAI-compatible HTTP gateway.
 *
 * Options before the first -m are defaults for every model; options after
 * a -m apply to that model (so `-m a.gguf --tp 2 -m b.gguf` serves a at tp
 * 2 and b at tp 1). The gateway listens on 127.0.0.1:8080 unless told
 * otherwise, prints the address it bound (useful with --port 0). SIGTERM
 * or SIGINT drains it (no new requests; those in flight finish, for up to
 * --drain-timeout seconds) and it exits 0; a second signal stops it at
 * once. */
#include "cli.h"
#include "cluster/cluster.h"
#include "gateway/gateway.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SERVE_MAX_MODELS      16
#define SERVE_MAX_RUNNER_ARGS 32

struct serve_options {
    struct gateway_params params;
    struct gateway_model defaults; /* options before the first -m */
    struct gateway_model models[SERVE_MAX_MODELS];
    const char *runner_args[SERVE_MAX_RUNNER_ARGS + 1]; /* --runner-arg, for every model */
    int n_runner_args;
    struct cluster_host hosts[CLUSTER_HOSTS_MAX];       /* --cluster's hostfile */
    struct cluster_place_spec places[SERVE_MAX_MODELS]; /* --place */
};

static void serve_usage(FILE *out) {
    fprintf(out,
            "usage: lockstep serve -m MODEL [model options] [-m MODEL ...] [options]\n"
            "model options (before any -m: defaults for all):\n"
            "  -m, --model FILE        a model to serve (repeat for several)\n"
            "  --name NAME             the name clients use (default: the file name)\n"
            "  -z, --tokenizer FILE    llama2.c tokenizer.bin (for .bin checkpoints)\n"
            "  --tp N                  tensor-parallel ranks (default 1)\n"
            "  -t, --threads N         threads per rank (default 2)\n"
            "  --launcher local|mpi    ranks as threads of one process, or under mpirun\n"
            "  --hosts FILE            mpirun hostfile (mpi launcher)\n"
            "  --chat-template NAME    llama2, llama3, chatml, mistral, zephyr or plain\n"
            "                          (default: recognised from the model file)\n"
            "  --runner-arg ARG        pass ARG to every `lockstep runner` (repeat)\n"
            "  --prefix-cache on|off   reuse the KV blocks of prompts' common beginnings\n"
            "                          (default on; a runner option, for every model)\n"
            "options:\n"
            "  --host ADDR             address to listen on (default 127.0.0.1)\n"
            "  --port N                port (default 8080; 0 picks a free one)\n"
            "  --api-key KEY           require Authorization: Bearer KEY (also\n"
            "                          LOCKSTEP_API_KEY); /health stays open\n"
            "  --max-body BYTES        largest request body (default 1048576)\n"
            "  --max-prompt-tokens N   longest prompt (default: the context)\n"
            "  --max-tokens N          largest max_tokens (default 4096)\n"
            "  --max-concurrent N      requests at once (default 256)\n"
            "  --keep-alive S          SSE comment on quiet streams every S s (default 15)\n"
            "  --watchdog S            a runner with work and no completed step for the\n"
            "                          larger of S and 20 median steps is stuck: killed,\n"
            "                          restarted, its requests resumed (default 5)\n"
            "  --connection-timeout S  close a connection idle for S s (default 30; a\n"
            "                          stream waiting for tokens is not idle)\n"
            "  --max-client-connections N  connections at once from one address (default 512)\n"
            "  --cors-origin ORIGIN    answer CORS preflights and add CORS headers for\n"
            "                          ORIGIN (repeat; * for any)\n"
            "  --enable-faults         POST /debug/fault injects faults (tests, benchmarks)\n"
            "  --drain-timeout S       on SIGTERM or SIGINT, wait up to S s for the requests\n"
            "                          in flight (default 30); new ones get 503 meanwhile,\n"
            "                          a second signal stops at once\n"
            "cluster:\n"
            "  --cluster FILE          the hosts ranks may run on: an Open MPI hostfile\n"
            "                          (`host slots=N [memory=SIZE]`; default: this machine)\n"
            "  --place NAME=tp:N[,hosts:a+b]  start an instance of model NAME at degree N\n"
            "                          (on those hosts; else where the policy puts it);\n"
            "                          repeat for replicas. Default: one per model at its --tp\n"
            "  --admin-key KEY         enable the admin API (/admin/instances: start, stop,\n"
            "                          move) with this key (also LOCKSTEP_ADMIN_KEY); it must\n"
            "                          differ from the API key\n"
            "  --probe-interval S      probe the hosts every S s (default 5)\n");
}

/* --cluster FILE, --place SPEC, --probe-interval S. */
static int parse_cluster_option(const char *a, int argc, char **argv, int *i,
                                struct serve_options *o) {
    struct gateway_params *p = &o->params;
    const char *text;
    char err[512];
    if (!strcmp(a, "--probe-interval")) {
        float seconds;
        if (cli_float_value("serve", argc, argv, i, &seconds)) return -1;
        if (!(seconds >= 0.1f)) {
            fprintf(stderr, "lockstep serve: --probe-interval %g is below 0.1 s\n", seconds);
            return -1;
        }
        p->probe_seconds = seconds;
        return 0;
    }
    if (cli_string_value("serve", argc, argv, i, &text)) return -1;
    if (!strcmp(a, "--cluster")) {
        if (cluster_hostfile_load(text, o->hosts, &p->n_hosts, err, sizeof(err))) {
            fprintf(stderr, "lockstep serve: --cluster: %s\n", err);
            return -1;
        }
        p->hosts = o->hosts;
        return 0;
    }
    if (p->n_places == SERVE_MAX_MODELS) {
        fprintf(stderr, "lockstep serve: at most %d --place\n", SERVE_MAX_MODELS);
        return -1;
    }
    if (cluster_place_spec_parse(text, &o->places[p->n_places], err, sizeof(err))) {
        fprintf(stderr, "lockstep serve: --place %s: %s\n", text, err);
        return -1;
    }
    p->places = o->places;
    p->n_places++;
    return 0;
}

/* Options of the model being described (or the defaults). */
static int parse_model_option(const char *a, int argc, char **argv, int *i, struct gateway_model *m,
                              int *matched) {
    const char *cmd = "serve", *text;
    *matched = 1;
    if (!strcmp(a, "--name")) return cli_string_value(cmd, argc, argv, i, &m->name);
    if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer"))
        return cli_string_value(cmd, argc, argv, i, &m->tokenizer_path);
    if (!strcmp(a, "--tp")) return cli_int_value(cmd, argc, argv, i, 1, 64, &m->tp);
    if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
        return cli_int_value(cmd, argc, argv, i, 1, 256, &m->threads);
    if (!strcmp(a, "--hosts")) return cli_string_value(cmd, argc, argv, i, &m->hosts);
    if (!strcmp(a, "--chat-template"))
        return cli_string_value(cmd, argc, argv, i, &m->chat_template);
    if (!strcmp(a, "--launcher")) {
        if (cli_string_value(cmd, argc, argv, i, &text)) return -1;
        if (!strcmp(text, "local") || !strcmp(text, "mpi")) {
            m->launcher = !strcmp(text, "mpi") ? GATEWAY_LAUNCHER_MPI : GATEWAY_LAUNCHER_LOCAL;
            return 0;
        }
        fprintf(stderr, "lockstep serve: --launcher '%s' is not local or mpi\n", text);
        return -1;
    }
    *matched = 0;
    return 0;
}

static int parse_server_option(const char *a, int argc, char **argv, int *i,
                               struct serve_options *o) {
    const char *cmd = "serve";
    struct gateway_params *p = &o->params;
    int value;
    if (!strcmp(a, "--host")) return cli_string_value(cmd, argc, argv, i, &p->host);
    if (!strcmp(a, "--port")) return cli_int_value(cmd, argc, argv, i, 0, 65535, &p->port);
    if (!strcmp(a, "--api-key")) return cli_string_value(cmd, argc, argv, i, &p->api_key);
    if (!strcmp(a, "--admin-key")) return cli_string_value(cmd, argc, argv, i, &p->admin_key);
    if (!strcmp(a, "--cluster") || !strcmp(a, "--place") || !strcmp(a, "--probe-interval"))
        return parse_cluster_option(a, argc, argv, i, o);
    if (!strcmp(a, "--max-prompt-tokens"))
        return cli_int_value(cmd, argc, argv, i, 1, 1 << 24, &p->max_prompt_tokens);
    if (!strcmp(a, "--max-tokens"))
        return cli_int_value(cmd, argc, argv, i, 1, 1 << 24, &p->max_tokens_limit);
    if (!strcmp(a, "--max-concurrent"))
        return cli_int_value(cmd, argc, argv, i, 1, 1 << 20, &p->max_concurrent);
    if (!strcmp(a, "--max-body")) {
        if (cli_int_value(cmd, argc, argv, i, 64, 1 << 30, &value)) return -1;
        p->max_body_bytes = (size_t)value;
        return 0;
    }
    if (!strcmp(a, "--enable-faults")) return (p->enable_faults = 1) - 1;
    if (!strcmp(a, "--connection-timeout"))
        return cli_int_value(cmd, argc, argv, i, 1, 86400, &p->connection_timeout_seconds);
    if (!strcmp(a, "--max-client-connections"))
        return cli_int_value(cmd, argc, argv, i, 1, 1 << 16, &p->max_client_connections);
    if (!strcmp(a, "--cors-origin")) {
        if (p->n_cors_origins == GATEWAY_CORS_ORIGINS_MAX) {
            fprintf(stderr, "lockstep serve: at most %d --cors-origin\n", GATEWAY_CORS_ORIGINS_MAX);
            return -1;
        }
        return cli_string_value(cmd, argc, argv, i, &p->cors_origins[p->n_cors_origins++]);
    }
    if (!strcmp(a, "--watchdog")) {
        float seconds;
        if (cli_float_value(cmd, argc, argv, i, &seconds)) return -1;
        if (!(seconds >= 0.1f)) {
            fprintf(stderr, "lockstep serve: --watchdog %g is below 0.1 s\n", seconds);
            return -1;
        }
        p->watchdog_seconds = seconds;
        return 0;
    }
    if (!strcmp(a, "--drain-timeout")) {
        float seconds;
        if (cli_float_value(cmd, argc, argv, i, &seconds)) return -1;
        if (!(seconds > 0 && seconds <= 86400)) {
            fprintf(stderr, "lockstep serve: --drain-timeout %g is not in (0, 86400] s\n", seconds);
            return -1;
        }
        p->drain_seconds = seconds;
        return 0;
    }
    if (!strcmp(a, "--keep-alive")) {
        float seconds;
        if (cli_float_value(cmd, argc, argv, i, &seconds)) return -1;
        p->keep_alive_seconds = seconds > 0.05f ? seconds : 0.05f;
        return 0;
    }
    if (!strcmp(a, "--prefix-cache")) {
        int on;
        if (cli_switch_value(cmd, argc, argv, i, &on)) return -1;
        if (o->n_runner_args + 2 > SERVE_MAX_RUNNER_ARGS) {
            fprintf(stderr, "lockstep serve: at most %d --runner-arg\n", SERVE_MAX_RUNNER_ARGS);
            return -1;
        }
        o->runner_args[o->n_runner_args++] = "--prefix-cache";
        o->runner_args[o->n_runner_args++] = on ? "on" : "off";
        return 0;
    }
    if (!strcmp(a, "--runner-arg")) {
        if (o->n_runner_args == SERVE_MAX_RUNNER_ARGS) {
            fprintf(stderr, "lockstep serve: at most %d --runner-arg\n", SERVE_MAX_RUNNER_ARGS);
            return -1;
        }
        return cli_string_value(cmd, argc, argv, i, &o->runner_args[o->n_runner_args++]);
    }
    fprintf(stderr, "lockstep serve: unknown option '%s' (see --help)\n", a);
    return -1;
}

/* Checks the keys: an empty one would turn authentication off without a
 * word, and one key for both would let every client run the cluster. */
static int check_keys(const struct gateway_params *p) {
    if (p->api_key && !*p->api_key) {
        fprintf(stderr, "lockstep serve: the API key (--api-key or LOCKSTEP_API_KEY) is empty; "
                        "give a key, or unset it to serve without one\n");
        return -1;
    }
    if (p->admin_key && !*p->admin_key) {
        fprintf(stderr, "lockstep serve: the admin key (--admin-key or LOCKSTEP_ADMIN_KEY) is "
                        "empty; give a key, or unset it to serve without the admin API\n");
        return -1;
    }
    if (p->admin_key && p->api_key && !strcmp(p->admin_key, p->api_key)) {
        fprintf(stderr, "lockstep serve: the admin key must differ from the API key\n");
        return -1;
    }
    return 0;
}

/* Returns 0, 1 for --help, or -1 on a bad option. */
static int parse_serve_options(int argc, char **argv, struct serve_options *o) {
    struct gateway_params *p = &o->params;
    memset(o, 0, sizeof(*o));
    *p = (struct gateway_params){.host = "127.0.0.1",
                                 .port = 8080,
                                 .api_key = getenv("LOCKSTEP_API_KEY"),
                                 .admin_key = getenv("LOCKSTEP_ADMIN_KEY"),
                                 .max_body_bytes = 1 << 20,
                                 .max_prompt_tokens = 1 << 24,
                                 .max_tokens_limit = 4096,
                                 .max_concurrent = 256,
                                 .keep_alive_seconds = 15,
                                 .watchdog_seconds = 5,
                                 .connection_timeout_seconds = 30,
                                 .max_client_connections = 512,
                                 .drain_seconds = 30,
                                 .mpirun_path = "mpirun"};
    o->defaults = (struct gateway_model){.tp = 1, .threads = 2};
    struct gateway_model *current = &o->defaults;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int matched;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (p->n_models == SERVE_MAX_MODELS) {
                fprintf(stderr, "lockstep serve: at most %d models\n", SERVE_MAX_MODELS);
                return -1;
            }
            current = &o->models[p->n_models++];
            *current = o->defaults;
            current->name = NULL;
            if (cli_string_value("serve", argc, argv, &i, &current->path)) return -1;
            continue;
        }
        if (parse_model_option(a, argc, argv, &i, current, &matched)) return -1;
        if (!matched && parse_server_option(a, argc, argv, &i, o)) return -1;
    }
    if (p->n_models == 0) {
        fprintf(stderr, "lockstep serve: no model given (-m FILE)\n");
        return -1;
    }
    if (check_keys(p)) return -1;
    for (int m = 0; m < p->n_models; m++) o->models[m].runner_args = o->runner_args;
    p->models = o->models;
    return 0;
}

/* The gateway being served, for the signal thread; the lock keeps it from
 * being freed while a stop is under way. */
static pthread_mutex_t serving_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gateway *serving;
static int stop_signals; /* SIGTERMs and SIGINTs so far (serving_lock) */

/* SIGTERM/SIGINT: the first drains the gateway, the next stops it at once
 * (one that comes while it starts is acted on once it is up). */
static void stop_serving(void *unused) {
    (void)unused;
    pthread_mutex_lock(&serving_lock);
    stop_signals++;
    if (serving && stop_signals == 1) gateway_drain(serving);
    if (serving && stop_signals > 1) gateway_stop(serving);
    pthread_mutex_unlock(&serving_lock);
}

int cli_serve(int argc, char **argv) {
    static struct serve_options o;
    static char self[4096]; /* the options point to it for the gateway's lifetime */
    char err[512];
    int parsed = parse_serve_options(argc, argv, &o);
    if (parsed) {
        serve_usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        fprintf(stderr, "lockstep serve: cannot find the lockstep binary\n");
        return 1;
    }
    self[n] = '\0';
    o.params.lockstep_path = self;
    struct gateway *g;
    /* before the gateway starts any thread: they must all block the signals */
    if (cli_handle_stop_signals(stop_serving, NULL)) return 1;
    if (gateway_create(&g, &o.params, err, sizeof(err))) {
        fprintf(stderr, "lockstep serve: %s\n", err);
        return 1;
    }
    printf("lockstep serve: listening on http://%s:%d (", o.params.host, gateway_port(g));
    for (int i = 0; i < o.params.n_models; i++)
        printf("%s%s", i ? ", " : "models: ", o.models[i].path);
    printf(")\n");
    fflush(stdout);
    pthread_mutex_lock(&serving_lock);
    serving = g;
    if (stop_signals > 0) gateway_stop(g); /* nothing is in flight yet */
    pthread_mutex_unlock(&serving_lock);
    gateway_run(g);
    pthread_mutex_lock(&serving_lock);
    serving = NULL;
    pthread_mutex_unlock(&serving_lock);
    gateway_free(g);
    return 0;
}
