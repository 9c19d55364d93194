/* serve.c -- `lockstep serve`: the OpenAI-compatible HTTP gateway.
 *
 * Options before the first -m are defaults for every model; options after
 * a -m apply to that model (so `-m a.gguf --tp 2 -m b.gguf` serves a at tp
 * 2 and b at tp 1). The gateway listens on 127.0.0.1:8080 unless told
 * otherwise, prints the address it bound (useful with --port 0). SIGTERM
 * or SIGINT drains it (no new requests; those in flight finish, for up to
 * --drain-timeout seconds) and it exits 0; a second signal stops it at
 * once. --config FILE gives the same settings as a file (serve_config.c),
 * which the command line overrides; the options are serve_options.c's
 * table. */
#include "cli.h"
#include "serve_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void serve_usage(FILE *out) {
    fprintf(out,
            "usage: lockstep serve -m MODEL [model options] [-m MODEL ...] [options]\n"
            "       lockstep serve --config FILE [options]\n"
            "model options (before any -m: defaults for all):\n"
            "  -m, --model FILE        a model to serve (repeat for several)\n"
            "  --name NAME             the name clients use (default: the file name)\n"
            "  -z, --tokenizer FILE    llama2.c tokenizer.bin (for .bin checkpoints)\n"
            "  --tp N                  tensor-parallel ranks (of each stage)\n"
            "  --pp N                  pipeline stages: layers split by each stage's\n"
            "                          host memory, N steps in flight\n"
            "  --layers-split A,B,...  the layers of each stage, first to last\n"
            "                          (none of the three: the placement policy chooses\n"
            "                          the shape, tp 1 on one host when the model fits)\n"
            "  -t, --threads N         threads per rank (default 2)\n"
            "  --launcher local|mpi    ranks as threads of one process, or under mpirun\n"
            "  --hosts FILE            mpirun hostfile (mpi launcher)\n"
            "  --chat-template NAME    llama2, llama3, chatml, mistral, zephyr or plain\n"
            "                          (default: recognised from the model file)\n"
            "  --pooling mean|last|cls how POST /v1/embeddings pools the hidden states\n"
            "                          (default: the file's {arch}.pooling_type)\n"
            "  --runner-arg ARG        pass ARG to every `lockstep runner` (repeat)\n"
            "  --runner-wrapper PROGRAM  start local runners as PROGRAM LOCKSTEP runner ...\n"
            "                          (say qemu-aarch64 for an arm64 binary on x86-64)\n"
            "  --prefix-cache on|off   reuse the KV blocks of prompts' common beginnings\n"
            "                          (default on; a runner option, for every model)\n"
            "options:\n"
            "  --host ADDR             address to listen on (default 127.0.0.1)\n"
            "  --port N                port (default 8080; 0 picks a free one)\n"
            "  --config FILE           settings from a JSON file (see lockstep(1)); the\n"
            "                          command line overrides them\n"
            "  --check-config          print the settings in effect as JSON and exit\n"
            "  --api-key KEY           require Authorization: Bearer KEY (also\n"
            "                          LOCKSTEP_API_KEY); /health stays open\n"
            "  --api-key-file FILE     the API key from FILE (not readable by others)\n"
            "  --api-key-env NAME      the API key from the environment variable NAME\n"
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
            "  --drain-timeout S       on SIGTERM or SIGINT, wait up to S s for the requests\n"
            "                          in flight (default 30); new ones get 503 meanwhile,\n"
            "                          a second signal stops at once\n"
            "  --enable-faults         POST /debug/fault injects faults (tests, benchmarks)\n"
            "  --log-format text|json  log lines as text (default) or JSON objects\n"
            "  --log-requests          a log line per finished request (id, model, status,\n"
            "                          tokens, times, client address; never its text)\n"
            "cluster:\n"
            "  --cluster FILE          the hosts ranks may run on: an Open MPI hostfile\n"
            "                          (`host slots=N [memory=SIZE] [lockstep=PATH]\n"
            "                          [wrapper=PROGRAM]`; default: this machine)\n"
            "  --place NAME=tp:N[,pp:N][,layers:A+B][,hosts:a+b]  start an instance of\n"
            "                          model NAME at those degrees (on those hosts, a\n"
            "                          stage's on one; else where the policy puts it);\n"
            "                          repeat for replicas. Default: one per model at its --tp\n"
            "  --admin-key KEY         enable the admin API (/admin/instances: start, stop,\n"
            "                          move) with this key (also LOCKSTEP_ADMIN_KEY); it must\n"
            "                          differ from the API key\n"
            "  --admin-key-file FILE   the admin key from FILE (not readable by others)\n"
            "  --admin-key-env NAME    the admin key from the environment variable NAME\n"
            "  --probe-interval S      probe the hosts every S s (default 5)\n"
            "  --cluster-key-file FILE every runner link must prove this key (the runners\n"
            "                          are given the same path: the same file on every host)\n");
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
    serve_options_init(&o);
    int parsed = serve_options_parse(argc, argv, &o);
    if (parsed) {
        serve_config_free(&o);
        if (parsed != -2) serve_usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    if (o.check_only) {
        serve_config_print(&o);
        serve_config_free(&o);
        return 0;
    }
    log_set_format(o.log_format);
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        log_event(LOG_LEVEL_ERROR, "serve", "cannot find the lockstep binary");
        return 1;
    }
    self[n] = '\0';
    o.params.lockstep_path = self;
    struct gateway *g;
    /* before the gateway starts any thread: they must all block the signals */
    if (cli_handle_stop_signals(stop_serving, NULL)) return 1;
    if (gateway_create(&g, &o.params, err, sizeof(err))) {
        log_event(LOG_LEVEL_ERROR, "serve", "%s", err);
        serve_config_free(&o);
        return 1;
    }
    printf("lockstep serve: listening on http://%s:%d (", o.params.host, gateway_port(g));
    for (int i = 0; i < o.params.n_models; i++)
        printf("%s%s", i ? ", " : "models: ", o.models[i].path);
    printf(")\n");
    fflush(stdout);
    /* not "listening on http://...": scripts that read the port from stdout and
     * stderr together would find it twice */
    log_event(LOG_LEVEL_INFO, "serve", "serving %d model(s) at %s port %d", o.params.n_models,
              o.params.host, gateway_port(g));
    pthread_mutex_lock(&serving_lock);
    serving = g;
    if (stop_signals > 0) gateway_stop(g); /* nothing is in flight yet */
    pthread_mutex_unlock(&serving_lock);
    gateway_run(g);
    pthread_mutex_lock(&serving_lock);
    serving = NULL;
    pthread_mutex_unlock(&serving_lock);
    gateway_free(g);
    serve_config_free(&o);
    log_event(LOG_LEVEL_INFO, "serve", "stopped");
    return 0;
}
