/* runner.c -- `lockstep runner`: one model instance serving the runner
 * protocol on a unix socket.
 *
 * All ranks of the instance run here: threads of this process (--tp N), or
 * one process per rank under mpirun (--comm mpi), where rank 0 serves and
 * the others follow its plans until it stops. The KV cache is sized at
 * start from --kv-memory (or a fraction of the memory available) and
 * reported with the rest of the configuration on one "ready" line. SIGTERM
 * or SIGINT stops the runner between two steps; followers ignore them and
 * leave when the leader releases them. */
#include "cli.h"
#include "runner/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct runner_options {
    const char *model_path;
    const char *tokenizer_path;
    const char *socket_path;
    const char *trace_path;
    const char *status_path; /* --status: shared file of every rank's collective state */
    int allow_faults;        /* --allow-faults: accept FAULT frames (tests, benchmarks) */
    const char *cluster_key; /* --cluster-key-file's key: every connection must prove it */
    char cluster_key_text[CLI_KEY_MAX];
    int logged; /* --log-format given: the ready line is a log line too */
    int n_threads;
    int context;              /* 0: the model's */
    int kv_block_size;        /* positions per KV block */
    double kv_memory;         /* bytes for the KV cache (all ranks together); 0: kv_fraction */
    double kv_fraction;       /* of MemAvailable, when kv_memory is 0 */
    enum tensor_type kv_type; /* --kv-type */
    struct runner_params limits;
    struct cli_parallel parallel;
};

static void runner_usage(FILE *out) {
    fprintf(out,
            "usage: lockstep runner -m MODEL --socket PATH [options]\n"
            "  -m, --model FILE        GGUF model or llama2.c checkpoint\n"
            "  -z, --tokenizer FILE    llama2.c tokenizer.bin (for .bin checkpoints)\n"
            "  --socket PATH           unix socket to serve the runner protocol on\n"
            "  -t, --threads N         threads per rank (default 2)\n"
            "  -c, --ctx N             context length (default: the model's)\n"
            "  --max-sequences N       sequences decoding at once (default 32)\n"
            "  --max-waiting N         requests queued for admission (default 256)\n"
            "  --step-tokens N         token budget of a step (default 48; more than\n"
            "                          --max-sequences)\n"
            "  --kv-memory SIZE        KV cache bytes, all ranks together (e.g. 512M, 2G)\n"
            "  --kv-fraction F         or this fraction of available memory (default 0.25)\n"
            "  --kv-block N            positions per KV block (default 16)\n"
            "  --prefix-cache on|off   reuse the KV blocks of earlier prompts' common\n"
            "                          beginnings (default on)\n"
            "  --pooling mean|last|cls how embedding requests pool the hidden states\n"
            "                          (default: the file's {arch}.pooling_type)\n" CLI_KV_TYPE_HELP
            "  --trace FILE            write every step as a JSON line\n"
            "  --trace-steps N         steps kept in memory (default 1024)\n"
            "  --status FILE           each rank mirrors its collective state into FILE\n"
            "                          (for the gateway's stuck reports)\n"
            "  --allow-faults          accept fault injection frames (tests only)\n"
            "  --cluster-key-file FILE every connection must prove this key (HMAC) before\n"
            "                          it may send anything: needed on tcp: addresses\n"
            "  --log-format text|json  log lines (on stderr, the ready line too) as text or\n"
            "                          JSON objects, as `lockstep serve` passes it "
            "on\n" CLI_PARALLEL_HELP);
}

/* Parses "512M"-style sizes. */
static int parse_size(const char *text, double *bytes) {
    char *end;
    double v = strtod(text, &end);
    double unit = 1;
    if (!strcasecmp(end, "k") || !strcasecmp(end, "kib"))
        unit = 1024.0;
    else if (!strcasecmp(end, "m") || !strcasecmp(end, "mib"))
        unit = 1024.0 * 1024;
    else if (!strcasecmp(end, "g") || !strcasecmp(end, "gib"))
        unit = 1024.0 * 1024 * 1024;
    else if (*end)
        return -1;
    if (end == text || !(v > 0)) return -1;
    *bytes = v * unit;
    return 0;
}

static int parse_runner_option(const char *a, int argc, char **argv, int *i,
                               struct runner_options *o) {
    const char *cmd = "runner", *text;
    struct runner_params *l = &o->limits;
    if (!strcmp(a, "-m") || !strcmp(a, "--model"))
        return cli_string_value(cmd, argc, argv, i, &o->model_path);
    if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer"))
        return cli_string_value(cmd, argc, argv, i, &o->tokenizer_path);
    if (!strcmp(a, "--socket")) return cli_string_value(cmd, argc, argv, i, &o->socket_path);
    if (!strcmp(a, "--trace")) return cli_string_value(cmd, argc, argv, i, &o->trace_path);
    if (!strcmp(a, "--status")) return cli_string_value(cmd, argc, argv, i, &o->status_path);
    if (!strcmp(a, "--allow-faults")) return (o->allow_faults = 1) - 1;
    if (!strcmp(a, "--cluster-key-file")) {
        if (cli_key_file_value(cmd, argc, argv, i, o->cluster_key_text,
                               sizeof(o->cluster_key_text)))
            return -1;
        o->cluster_key = o->cluster_key_text;
        return 0;
    }
    if (!strcmp(a, "--log-format")) {
        enum log_format format;
        if (cli_string_value(cmd, argc, argv, i, &text)) return -1;
        if (log_format_parse(text, &format)) {
            fprintf(stderr, "lockstep runner: --log-format '%s' is not text or json\n", text);
            return -1;
        }
        log_set_format(format);
        return (o->logged = 1) - 1;
    }
    if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
        return cli_int_value(cmd, argc, argv, i, 1, 256, &o->n_threads);
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx"))
        return cli_int_value(cmd, argc, argv, i, 2, 1 << 24, &o->context);
    if (!strcmp(a, "--max-sequences"))
        return cli_int_value(cmd, argc, argv, i, 1, 4096, &l->max_sequences);
    if (!strcmp(a, "--max-waiting"))
        return cli_int_value(cmd, argc, argv, i, 0, 1 << 20, &l->max_waiting);
    if (!strcmp(a, "--step-tokens"))
        return cli_int_value(cmd, argc, argv, i, 2, 1 << 16, &l->step_tokens);
    if (!strcmp(a, "--trace-steps"))
        return cli_int_value(cmd, argc, argv, i, 1, 1 << 20, &l->trace_steps);
    if (!strcmp(a, "--kv-type")) return cli_kv_type_value(cmd, argc, argv, i, &o->kv_type);
    if (!strcmp(a, "--prefix-cache")) return cli_switch_value(cmd, argc, argv, i, &l->prefix_cache);
    if (!strcmp(a, "--pooling")) {
        if (cli_string_value(cmd, argc, argv, i, &text)) return -1;
        if (runner_pooling_parse(text, &l->pooling) == 0) return 0;
        fprintf(stderr, "lockstep runner: --pooling '%s' is not mean, last or cls\n", text);
        return -1;
    }
    if (!strcmp(a, "--kv-block"))
        return cli_int_value(cmd, argc, argv, i, 1, 4096, &o->kv_block_size);
    if (!strcmp(a, "--kv-fraction")) {
        float f;
        if (cli_float_value(cmd, argc, argv, i, &f)) return -1;
        if (!(f > 0 && f <= 0.9f)) {
            fprintf(stderr, "lockstep runner: --kv-fraction %g is not in (0, 0.9]\n", f);
            return -1;
        }
        o->kv_fraction = f;
        return 0;
    }
    if (!strcmp(a, "--kv-memory")) {
        if (cli_string_value(cmd, argc, argv, i, &text)) return -1;
        if (parse_size(text, &o->kv_memory) == 0) return 0;
        fprintf(stderr, "lockstep runner: --kv-memory '%s' is not a size like 512M or 2G\n", text);
        return -1;
    }
    fprintf(stderr, "lockstep runner: unknown option '%s' (see --help)\n", a);
    return -1;
}

/* Returns 0, 1 for --help, or -1 on a bad option. */
static int parse_runner_options(int argc, char **argv, struct runner_options *o) {
    memset(o, 0, sizeof(*o));
    o->n_threads = 2;
    o->kv_block_size = 16;
    o->kv_fraction = 0.25;
    o->kv_type = TENSOR_F16;
    o->limits =
        (struct runner_params){/* 48: on the 85M Q8_0 model (2 threads) it keeps 16 running streams'
                                * inter-token latency under 50 ms while a 512-token prompt is
                                * admitted, and that prompt's first token within 1.5x of an
                                * unchunked prefill (bench/runner_bench) */
                               .max_sequences = 32,
                               .max_waiting = 256,
                               .step_tokens = 48,
                               .trace_steps = 1024,
                               .prefix_cache = 1};
    cli_parallel_default(&o->parallel);
    for (int i = 1; i < argc; i++) {
        int matched;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
        if (cli_parallel_option("runner", argc, argv, &i, &o->parallel, &matched)) return -1;
        if (!matched && parse_runner_option(argv[i], argc, argv, &i, o)) return -1;
    }
    if (!o->model_path || !o->socket_path) {
        fprintf(stderr, "lockstep runner: -m MODEL and --socket PATH are required\n");
        return -1;
    }
    return 0;
}

/* MemAvailable from /proc/meminfo in bytes, or 0. */
static double available_memory(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kib = 0;
    if (!f) return 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    fclose(f);
    return kib * 1024.0;
}

/* KV blocks for the options: the memory asked for, but no more than every
 * sequence at full context needs. */
static int kv_blocks(const struct runner_options *o, const struct model_config *c, int context,
                     double *bytes_per_block) {
    int kv_dim = c->n_kv_heads * c->head_dim;
    *bytes_per_block = (double)kv_cache_bytes(o->kv_type, c->n_layers, kv_dim, o->kv_block_size, 1);
    double memory = o->kv_memory > 0 ? o->kv_memory : o->kv_fraction * available_memory();
    double blocks = memory / *bytes_per_block;
    int blocks_per_sequence = (context + o->kv_block_size - 1) / o->kv_block_size;
    double useful = (double)o->limits.max_sequences * blocks_per_sequence;
    if (blocks > useful) blocks = useful;
    return blocks > (1 << 30) ? 1 << 30 : (int)blocks;
}

/* The tokens that end a sequence: EOS and the end-of-turn markers of the
 * chat formats the vocabulary has. */
static void find_end_tokens(const struct tokenizer *tok, struct runner_params *limits) {
    static const char *const markers[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>"};
    limits->n_eos = 0;
    if (tokenizer_eos(tok) >= 0) limits->eos[limits->n_eos++] = tokenizer_eos(tok);
    for (size_t i = 0; i < sizeof(markers) / sizeof(markers[0]); i++) {
        int id = tokenizer_find(tok, markers[i], strlen(markers[i]));
        if (id >= 0 && id != tokenizer_eos(tok)) limits->eos[limits->n_eos++] = id;
    }
}

/* The server, for the signal thread; the lock keeps it from being freed
 * while a stop is under way. */
static pthread_mutex_t running_lock = PTHREAD_MUTEX_INITIALIZER;
static struct runner_server *running_server;
static int stop_asked; /* a stop signal came (running_lock) */

/* A signal that came while the engine started stops the server as soon as
 * it exists: the gateway's SIGTERM is never lost to a runner still loading. */
static void set_running_server(struct runner_server *server) {
    pthread_mutex_lock(&running_lock);
    running_server = server;
    if (server && stop_asked) runner_server_stop(server);
    pthread_mutex_unlock(&running_lock);
}

/* SIGTERM/SIGINT: stop between two steps (nothing to do in a follower). */
static void stop_serving(void *unused) {
    (void)unused;
    pthread_mutex_lock(&running_lock);
    stop_asked = 1;
    if (running_server) runner_server_stop(running_server);
    pthread_mutex_unlock(&running_lock);
}

/* Basename of a path, for the model's name. */
static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Serves on the leader's engine until a signal or a failure; exit status. */
static int serve(struct engine *leader, const struct runner_options *o, double block_bytes) {
    char err[512];
    struct runner *runner = NULL;
    struct runner_server *server = NULL;
    struct runner_sink none = {0};
    struct runner_server_params sp = {.socket_path = o->socket_path,
                                      .model_name = base_name(o->model_path),
                                      .keep_alive_seconds = o->parallel.deadline / 4,
                                      .allow_faults = o->allow_faults,
                                      .cluster_key = o->cluster_key};
    int rc = 1;
    if (runner_create(&runner, leader, &o->limits, &none, err, sizeof(err)) ||
        (o->trace_path && runner_trace_open(runner, o->trace_path, err, sizeof(err))) ||
        runner_server_create(&server, runner, &sp, err, sizeof(err))) {
        log_event(LOG_LEVEL_ERROR, "runner", "%s", err);
        goto done;
    }
    set_running_server(server);
    if (!o->cluster_key && !strncmp(o->socket_path, "tcp:", 4))
        log_event(LOG_LEVEL_WARN, "runner",
                  "serving %s without a cluster key: whoever reaches this port can drive this "
                  "runner (--cluster-key-file)",
                  o->socket_path);
    char ready[1024];
    snprintf(ready, sizeof(ready),
             "ready on %s (model %s, tp %d, pp %d, context %d, %d sequences, step budget "
             "%d tokens, %s KV cache %d blocks of %d positions = %.1f MiB, room for %.1f whole "
             "contexts, prefix cache %s, pooling %s)",
             o->socket_path, sp.model_name, leader->model->shard_count, leader->n_stages,
             leader->context_length, o->limits.max_sequences, o->limits.step_tokens,
             tensor_type_name(leader->kv.type), leader->kv.n_blocks, leader->kv.block_size,
             leader->kv.n_blocks * block_bytes / (1024.0 * 1024.0),
             (double)leader->kv.n_blocks * leader->kv.block_size / leader->context_length,
             o->limits.prefix_cache ? "on" : "off", runner_pooling_name(o->limits.pooling));
    /* standalone, the line is for whoever started it (tests wait for it on stdout) */
    if (o->logged)
        log_event(LOG_LEVEL_INFO, "runner", "%s", ready);
    else
        printf("lockstep runner: %s\n", ready);
    fflush(stdout);
    rc = 0;
    if (runner_server_run(server, err, sizeof(err))) {
        log_event(LOG_LEVEL_ERROR, "runner", "%s", err);
        rc = engine_exit_code(leader);
    }
    set_running_server(NULL);
done:
    runner_server_free(server);
    runner_free(runner);
    return rc;
}

/* Maps the status file every rank of the instance writes its record into
 * (ranks of other processes open the same file); NULL if there is none. */
static struct comm_status_record *map_status(const char *path) {
    size_t bytes = runner_status_bytes();
    if (!path) return NULL;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    void *p = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)bytes) == 0)
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    if (p == MAP_FAILED) {
        log_event(LOG_LEVEL_ERROR, "runner", "cannot map the status file %s: %s", path,
                  strerror(errno));
        return NULL;
    }
    return p;
}

static int run_instance(const struct cli_model *m, struct runner_options *o) {
    char err[512];
    const struct model_config *c = &m->model->config;
    int context = o->context > 0 && o->context < c->context_length ? o->context : c->context_length;
    double block_bytes;
    int blocks = kv_blocks(o, c, context, &block_bytes);
    struct engine_group group = cli_parallel_group(&o->parallel);
    struct engine_params params = {.n_threads = o->n_threads,
                                   .max_tokens = o->limits.step_tokens,
                                   .context_length = context,
                                   .kv_block_size = o->kv_block_size,
                                   .kv_blocks = blocks,
                                   .kv_type = o->kv_type};
    int rc;
    if (blocks < 1) {
        log_event(LOG_LEVEL_ERROR, "runner", "the KV memory holds no block of %.0f bytes",
                  block_bytes);
        return 1;
    }
    find_end_tokens(m->tokenizer, &o->limits);
    o->limits.tokenizer = m->tokenizer;
    if (o->limits.pooling == RUNNER_POOLING_NONE)
        o->limits.pooling = (enum runner_pooling)engine_model_pooling(m->model);
    if (cli_read_fault("runner", &params.fault)) return 1;
    group.status = map_status(o->status_path);
    if (o->status_path && !group.status) return 1;
    /* a stop request reaches the leader's server; a follower (an mpi rank
     * that got the signal too) leaves when the leader releases it */
    if (cli_handle_stop_signals(stop_serving, NULL)) return 1;
    if ((rc = engine_group_start(&group, m->model, &params, err, sizeof(err))) != 0) {
        log_event(LOG_LEVEL_ERROR, "runner", "%s", err);
    } else {
        struct engine *leader = engine_group_leader(&group);
        if (leader) rc = serve(leader, o, block_bytes);
        cli_leave_if_collective_failed(leader);
    }
    if (engine_group_stop(&group, err, sizeof(err)) != 0 && rc == 0) {
        log_event(LOG_LEVEL_ERROR, "runner", "%s", err);
        rc = 1;
    }
    if (group.status) munmap(group.status, runner_status_bytes());
    return rc;
}

int cli_runner(int argc, char **argv) {
    struct runner_options o;
    struct cli_model m;
    int parsed = parse_runner_options(argc, argv, &o);
    if (parsed) {
        runner_usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    if (getenv("LOCKSTEP_FAULT_REFUSE_START")) { /* fault injection: a runner that fails */
        log_event(LOG_LEVEL_ERROR, "runner", "refusing to start (LOCKSTEP_FAULT_REFUSE_START)");
        return 1;
    }
    if (cli_model_load(&m, "runner", o.model_path, o.tokenizer_path)) return 1;
    int rc = run_instance(&m, &o);
    cli_model_free(&m);
    return rc;
}
