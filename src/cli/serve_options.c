/* serve_options.c -- `lockstep serve`'s options: one table for the command
 * line and the configuration file, and the command line's parser.
 *
 * Each row names an option as the command line spells it and as the file
 * does, the kind of value it takes and the setter that checks and stores
 * it. The command line is read after the file (serve_config.c), so what it
 * says wins: a single value replaces the file's, the first of a repeated
 * option replaces the file's list, and the first -m replaces the file's
 * models. Model options given before any -m are defaults for the models
 * that follow, and apply to the file's models too when the command line
 * names none. */
#include "serve_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The field a generic row sets: in the model for model options, else in params. */
static void *field_of(struct serve_options *o, struct gateway_model *m,
                      const struct serve_option *row) {
    return (char *)(row->model ? (void *)m : (void *)&o->params) + row->offset;
}

static int parse_int(const char *value, const struct serve_option *row, const char *label, int *out,
                     char *err, size_t errlen) {
    char *end;
    errno = 0;
    long n = strtol(value, &end, 10);
    if (errno || end == value || *end || n < row->min || n > row->max) {
        snprintf(err, errlen, "%s: '%s' is not an integer in [%.0f, %.0f]", label, value, row->min,
                 row->max);
        return -1;
    }
    *out = (int)n;
    return 0;
}

static int parse_number(const char *value, const char *label, double *out, char *err,
                        size_t errlen) {
    char *end;
    errno = 0;
    double n = strtod(value, &end);
    if (errno || end == value || *end || n != n) {
        snprintf(err, errlen, "%s: '%s' is not a number", label, value);
        return -1;
    }
    *out = n;
    return 0;
}

static int parse_switch(const char *value, const char *label, int *out, char *err, size_t errlen) {
    if (!value || !strcmp(value, "on") || !strcmp(value, "off")) {
        *out = !value || !strcmp(value, "on");
        return 0;
    }
    snprintf(err, errlen, "%s: '%s' is not on or off", label, value);
    return -1;
}

static int set_text(struct serve_options *o, struct gateway_model *m,
                    const struct serve_option *row, const char *value, const char *label, char *err,
                    size_t errlen) {
    (void)label, (void)err, (void)errlen;
    *(const char **)field_of(o, m, row) = value;
    return 0;
}

static int set_int(struct serve_options *o, struct gateway_model *m, const struct serve_option *row,
                   const char *value, const char *label, char *err, size_t errlen) {
    return parse_int(value, row, label, (int *)field_of(o, m, row), err, errlen);
}

/* --layers-split A,B: a model's layers per stage. */
static int set_layers_split(struct serve_options *o, struct gateway_model *m,
                            const struct serve_option *row, const char *value, const char *label,
                            char *err, size_t errlen) {
    struct gateway_model *model = m ? m : &o->defaults;
    int n = 0;
    char why[160];
    (void)row;
    memset(model->layers, 0, sizeof(model->layers));
    if (cli_layers_parse(value, model->layers, &n, why, sizeof(why)) == 0) return 0;
    snprintf(err, errlen, "%s: %s", label, why);
    return -1;
}

static int set_flag(struct serve_options *o, struct gateway_model *m,
                    const struct serve_option *row, const char *value, const char *label, char *err,
                    size_t errlen) {
    return parse_switch(value, label, (int *)field_of(o, m, row), err, errlen);
}

/* A time in seconds within the row's range: a period shorter than 0.1 s
 * would spin, and a huge one would turn off what it times (a watchdog of
 * 1e308 s never finds a runner stuck). */
static int set_seconds(struct serve_options *o, struct gateway_model *m,
                       const struct serve_option *row, const char *value, const char *label,
                       char *err, size_t errlen) {
    double seconds;
    if (parse_number(value, label, &seconds, err, errlen)) return -1;
    if (!(seconds >= row->min && seconds <= row->max)) {
        snprintf(err, errlen, "%s: %g is not between %g and %g seconds", label, seconds, row->min,
                 row->max);
        return -1;
    }
    *(double *)field_of(o, m, row) = seconds;
    return 0;
}

static int set_max_body(struct serve_options *o, struct gateway_model *m,
                        const struct serve_option *row, const char *value, const char *label,
                        char *err, size_t errlen) {
    int bytes;
    (void)m;
    if (parse_int(value, row, label, &bytes, err, errlen)) return -1;
    o->params.max_body_bytes = (size_t)bytes;
    return 0;
}

static int set_launcher(struct serve_options *o, struct gateway_model *m,
                        const struct serve_option *row, const char *value, const char *label,
                        char *err, size_t errlen) {
    (void)o, (void)row;
    if (strcmp(value, "local") != 0 && strcmp(value, "mpi") != 0) {
        snprintf(err, errlen, "%s: '%s' is not local or mpi", label, value);
        return -1;
    }
    m->launcher = !strcmp(value, "mpi") ? GATEWAY_LAUNCHER_MPI : GATEWAY_LAUNCHER_LOCAL;
    return 0;
}

static int set_prefix_cache(struct serve_options *o, struct gateway_model *m,
                            const struct serve_option *row, const char *value, const char *label,
                            char *err, size_t errlen) {
    (void)m, (void)row;
    return parse_switch(value, label, &o->prefix_cache, err, errlen);
}

static int set_pooling(struct serve_options *o, struct gateway_model *m,
                       const struct serve_option *row, const char *value, const char *label,
                       char *err, size_t errlen) {
    enum runner_pooling pooling;
    (void)o, (void)row;
    if (runner_pooling_parse(value, &pooling)) {
        snprintf(err, errlen, "%s: '%s' is not mean, last or cls", label, value);
        return -1;
    }
    m->pooling = value;
    return 0;
}

static int set_log_format(struct serve_options *o, struct gateway_model *m,
                          const struct serve_option *row, const char *value, const char *label,
                          char *err, size_t errlen) {
    (void)m, (void)row;
    if (log_format_parse(value, &o->log_format)) {
        snprintf(err, errlen, "%s: '%s' is not text or json", label, value);
        return -1;
    }
    return 0;
}

static int set_check_only(struct serve_options *o, struct gateway_model *m,
                          const struct serve_option *row, const char *value, const char *label,
                          char *err, size_t errlen) {
    (void)m, (void)row;
    return parse_switch(value, label, &o->check_only, err, errlen);
}

/* --config was read before the rest of the command line. */
static int set_nothing(struct serve_options *o, struct gateway_model *m,
                       const struct serve_option *row, const char *value, const char *label,
                       char *err, size_t errlen) {
    (void)o, (void)m, (void)row, (void)value, (void)label, (void)err, (void)errlen;
    return 0;
}

static int set_cors_origin(struct serve_options *o, struct gateway_model *m,
                           const struct serve_option *row, const char *value, const char *label,
                           char *err, size_t errlen) {
    struct gateway_params *p = &o->params;
    (void)m, (void)row;
    if (p->n_cors_origins == GATEWAY_CORS_ORIGINS_MAX) {
        snprintf(err, errlen, "%s: at most %d origins", label, GATEWAY_CORS_ORIGINS_MAX);
        return -1;
    }
    p->cors_origins[p->n_cors_origins++] = value;
    return 0;
}

static void clear_cors_origins(struct serve_options *o) {
    o->params.n_cors_origins = 0;
}

static int set_runner_arg(struct serve_options *o, struct gateway_model *m,
                          const struct serve_option *row, const char *value, const char *label,
                          char *err, size_t errlen) {
    (void)m, (void)row;
    if (o->n_runner_args == SERVE_MAX_RUNNER_ARGS) {
        snprintf(err, errlen, "%s: at most %d runner arguments", label, SERVE_MAX_RUNNER_ARGS);
        return -1;
    }
    o->runner_args[o->n_runner_args++] = value;
    return 0;
}

static void clear_runner_args(struct serve_options *o) {
    o->n_runner_args = 0;
}

static int set_place(struct serve_options *o, struct gateway_model *m,
                     const struct serve_option *row, const char *value, const char *label,
                     char *err, size_t errlen) {
    struct gateway_params *p = &o->params;
    char why[512];
    (void)m, (void)row;
    if (p->n_places == SERVE_MAX_MODELS) {
        snprintf(err, errlen, "%s: at most %d placements", label, SERVE_MAX_MODELS);
        return -1;
    }
    if (cluster_place_spec_parse(value, &o->places[p->n_places], why, sizeof(why))) {
        snprintf(err, errlen, "%s: %s: %s", label, value, why);
        return -1;
    }
    p->places = o->places;
    p->n_places++;
    return 0;
}

static void clear_places(struct serve_options *o) {
    o->params.n_places = 0;
}

static int set_cluster(struct serve_options *o, struct gateway_model *m,
                       const struct serve_option *row, const char *value, const char *label,
                       char *err, size_t errlen) {
    char why[512];
    (void)m, (void)row;
    if (cluster_hostfile_load(value, o->hosts, &o->params.n_hosts, why, sizeof(why))) {
        snprintf(err, errlen, "%s: %s", label, why);
        return -1;
    }
    o->params.hosts = o->hosts;
    return 0;
}

/* Which key a key row sets: the admin key's fields, or the API key's. */
static int is_admin(const struct serve_option *row) {
    return row->offset == offsetof(struct gateway_params, admin_key);
}

static int set_key(struct serve_options *o, struct gateway_model *m, const struct serve_option *row,
                   const char *value, const char *label, char *err, size_t errlen) {
    (void)m, (void)err, (void)errlen;
    *(const char **)field_of(o, NULL, row) = value;
    snprintf(is_admin(row) ? o->admin_key_source : o->api_key_source, SERVE_SOURCE_MAX, "(from %s)",
             label);
    return 0;
}

static int set_key_env(struct serve_options *o, struct gateway_model *m,
                       const struct serve_option *row, const char *value, const char *label,
                       char *err, size_t errlen) {
    const char *key = getenv(value);
    (void)m;
    if (!key || !*key) {
        snprintf(err, errlen, "%s: the environment variable %s is %s", label, value,
                 key ? "empty" : "not set");
        return -1;
    }
    *(const char **)field_of(o, NULL, row) = key;
    snprintf(is_admin(row) ? o->admin_key_source : o->api_key_source, SERVE_SOURCE_MAX,
             "(from $%s)", value);
    return 0;
}

/* Reads a key from a file only its owner (and group) may read: the key
 * would be anyone's otherwise. The key is its first line, without
 * trailing white space. */
static int set_key_file(struct serve_options *o, struct gateway_model *m,
                        const struct serve_option *row, const char *value, const char *label,
                        char *err, size_t errlen) {
    char *text = is_admin(row) ? o->admin_key_text : o->api_key_text;
    (void)m;
    if (cli_read_key_file(value, text, SERVE_KEY_MAX, label, err, errlen)) return -1;
    *(const char **)field_of(o, NULL, row) = text;
    snprintf(is_admin(row) ? o->admin_key_source : o->api_key_source, SERVE_SOURCE_MAX,
             "(from file %s)", value);
    return 0;
}

/* The cluster key: a file only, whose path the runners are given too (the
 * same path on every host, as the binary's and the models'). */
static int set_cluster_key_file(struct serve_options *o, struct gateway_model *m,
                                const struct serve_option *row, const char *value,
                                const char *label, char *err, size_t errlen) {
    (void)m, (void)row;
    if (cli_read_key_file(value, o->cluster_key_text, SERVE_KEY_MAX, label, err, errlen)) return -1;
    o->params.cluster_key = o->cluster_key_text;
    o->params.cluster_key_file = value;
    return 0;
}

#define PARAM(field) offsetof(struct gateway_params, field)
#define MODEL(field) offsetof(struct gateway_model, field)

const struct serve_option serve_option_table[] = {
    /* model options */
    {"--name", NULL, "name", SERVE_TEXT, 1, MODEL(name), 0, 0, set_text, NULL},
    {"--tokenizer", "-z", "tokenizer", SERVE_TEXT, 1, MODEL(tokenizer_path), 0, 0, set_text, NULL},
    {"--tp", NULL, "tp", SERVE_INT, 1, MODEL(tp), 1, 64, set_int, NULL},
    {"--pp", NULL, "pp", SERVE_INT, 1, MODEL(pp), 1, CLUSTER_STAGES_MAX, set_int, NULL},
    {"--layers-split", NULL, "layers_split", SERVE_TEXT, 1, 0, 0, 0, set_layers_split, NULL},
    {"--threads", "-t", "threads", SERVE_INT, 1, MODEL(threads), 1, 256, set_int, NULL},
    {"--launcher", NULL, "launcher", SERVE_TEXT, 1, 0, 0, 0, set_launcher, NULL},
    {"--hosts", NULL, "hosts", SERVE_TEXT, 1, MODEL(hosts), 0, 0, set_text, NULL},
    {"--chat-template", NULL, "chat_template", SERVE_TEXT, 1, MODEL(chat_template), 0, 0, set_text,
     NULL},
    {"--pooling", NULL, "pooling", SERVE_TEXT, 1, MODEL(pooling), 0, 0, set_pooling, NULL},
    /* for every model */
    {"--runner-arg", NULL, "runner_args", SERVE_LIST, 0, 0, 0, 0, set_runner_arg,
     clear_runner_args},
    {"--runner-wrapper", NULL, "runner_wrapper", SERVE_TEXT, 0, PARAM(runner_wrapper), 0, 0,
     set_text, NULL},
    {"--prefix-cache", NULL, "prefix_cache", SERVE_SWITCH, 0, 0, 0, 0, set_prefix_cache, NULL},
    /* the server */
    {"--host", NULL, "host", SERVE_TEXT, 0, PARAM(host), 0, 0, set_text, NULL},
    {"--port", NULL, "port", SERVE_INT, 0, PARAM(port), 0, 65535, set_int, NULL},
    {"--api-key", NULL, NULL, SERVE_TEXT, 0, PARAM(api_key), 0, 0, set_key, NULL},
    {"--api-key-file", NULL, "api_key_file", SERVE_TEXT, 0, PARAM(api_key), 0, 0, set_key_file,
     NULL},
    {"--api-key-env", NULL, "api_key_env", SERVE_TEXT, 0, PARAM(api_key), 0, 0, set_key_env, NULL},
    {"--max-body", NULL, "max_body", SERVE_INT, 0, 0, 64, 1 << 30, set_max_body, NULL},
    {"--max-prompt-tokens", NULL, "max_prompt_tokens", SERVE_INT, 0, PARAM(max_prompt_tokens), 1,
     1 << 24, set_int, NULL},
    {"--max-tokens", NULL, "max_tokens", SERVE_INT, 0, PARAM(max_tokens_limit), 1, 1 << 24, set_int,
     NULL},
    {"--max-concurrent", NULL, "max_concurrent", SERVE_INT, 0, PARAM(max_concurrent), 1, 1 << 20,
     set_int, NULL},
    {"--keep-alive", NULL, "keep_alive", SERVE_NUMBER, 0, PARAM(keep_alive_seconds), 0.05, 3600,
     set_seconds, NULL},
    {"--watchdog", NULL, "watchdog", SERVE_NUMBER, 0, PARAM(watchdog_seconds), 0.1, 3600,
     set_seconds, NULL},
    {"--drain-timeout", NULL, "drain_timeout", SERVE_NUMBER, 0, PARAM(drain_seconds), 0, 86400,
     set_seconds, NULL},
    {"--connection-timeout", NULL, "connection_timeout", SERVE_INT, 0,
     PARAM(connection_timeout_seconds), 1, 86400, set_int, NULL},
    {"--max-client-connections", NULL, "max_client_connections", SERVE_INT, 0,
     PARAM(max_client_connections), 1, 1 << 16, set_int, NULL},
    {"--cors-origin", NULL, "cors_origins", SERVE_LIST, 0, 0, 0, 0, set_cors_origin,
     clear_cors_origins},
    {"--enable-faults", NULL, "enable_faults", SERVE_FLAG, 0, PARAM(enable_faults), 0, 0, set_flag,
     NULL},
    /* the cluster */
    {"--cluster", NULL, "cluster", SERVE_TEXT, 0, 0, 0, 0, set_cluster, NULL},
    {"--place", NULL, "place", SERVE_LIST, 0, 0, 0, 0, set_place, clear_places},
    {"--admin-key", NULL, NULL, SERVE_TEXT, 0, PARAM(admin_key), 0, 0, set_key, NULL},
    {"--admin-key-file", NULL, "admin_key_file", SERVE_TEXT, 0, PARAM(admin_key), 0, 0,
     set_key_file, NULL},
    {"--admin-key-env", NULL, "admin_key_env", SERVE_TEXT, 0, PARAM(admin_key), 0, 0, set_key_env,
     NULL},
    {"--probe-interval", NULL, "probe_interval", SERVE_NUMBER, 0, PARAM(probe_seconds), 0.1, 3600,
     set_seconds, NULL},
    {"--cluster-key-file", NULL, "cluster_key_file", SERVE_TEXT, 0, 0, 0, 0, set_cluster_key_file,
     NULL},
    /* logs */
    {"--log-format", NULL, "log_format", SERVE_TEXT, 0, 0, 0, 0, set_log_format, NULL},
    {"--log-requests", NULL, "log_requests", SERVE_FLAG, 0, PARAM(log_requests), 0, 0, set_flag,
     NULL},
    /* the command itself */
    {"--config", NULL, NULL, SERVE_TEXT, 0, 0, 0, 0, set_nothing, NULL},
    {"--check-config", NULL, NULL, SERVE_FLAG, 0, 0, 0, 0, set_check_only, NULL},
};
const int serve_option_count = (int)(sizeof(serve_option_table) / sizeof(serve_option_table[0]));

const struct serve_option *serve_option_by_key(const char *key) {
    for (int i = 0; i < serve_option_count; i++)
        if (serve_option_table[i].key && !strcmp(serve_option_table[i].key, key))
            return &serve_option_table[i];
    return NULL;
}

static const struct serve_option *option_by_name(const char *name) {
    for (int i = 0; i < serve_option_count; i++) {
        const struct serve_option *row = &serve_option_table[i];
        if (!strcmp(row->name, name) || (row->short_name && !strcmp(row->short_name, name)))
            return row;
    }
    return NULL;
}

void serve_options_init(struct serve_options *o) {
    memset(o, 0, sizeof(*o));
    o->params = (struct gateway_params){.host = "127.0.0.1",
                                        .port = 8080,
                                        .api_key = getenv("LOCKSTEP_API_KEY"),
                                        .admin_key = getenv("LOCKSTEP_ADMIN_KEY"),
                                        .max_body_bytes = 1 << 20,
                                        .max_prompt_tokens = 1 << 24,
                                        .max_tokens_limit = 4096,
                                        .max_concurrent = 256,
                                        .keep_alive_seconds = 15,
                                        .watchdog_seconds = 5,
                                        .drain_seconds = 30,
                                        .connection_timeout_seconds = 30,
                                        .max_client_connections = 512,
                                        .probe_seconds = 5,
                                        .mpirun_path = "mpirun"};
    o->defaults = (struct gateway_model){.threads = 2}; /* tp, pp 0 until given */
    o->prefix_cache = -1;
    snprintf(o->api_key_source, SERVE_SOURCE_MAX, "(from $LOCKSTEP_API_KEY)");
    snprintf(o->admin_key_source, SERVE_SOURCE_MAX, "(from $LOCKSTEP_ADMIN_KEY)");
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

/* Each model's runner arguments: the log format, the common ones,
 * --prefix-cache's, --pooling's, its own. The gateway passes the runner some 16
 * arguments of its own and at most 62 in all. */
static int assemble_runner_args(struct serve_options *o) {
    for (int m = 0; m < o->params.n_models; m++) {
        const char **args = o->model_args[m];
        int n = 0;
        if (o->n_runner_args + o->n_own_args[m] > SERVE_MAX_RUNNER_ARGS) {
            fprintf(stderr, "lockstep serve: model %s: at most %d runner arguments in all\n",
                    o->models[m].path, SERVE_MAX_RUNNER_ARGS);
            return -1;
        }
        args[n++] = "--log-format";
        args[n++] = o->log_format == LOG_FORMAT_JSON ? "json" : "text";
        for (int i = 0; i < o->n_runner_args; i++) args[n++] = o->runner_args[i];
        if (o->prefix_cache >= 0) {
            args[n++] = "--prefix-cache";
            args[n++] = o->prefix_cache ? "on" : "off";
        }
        if (o->models[m].pooling) {
            args[n++] = "--pooling";
            args[n++] = o->models[m].pooling;
        }
        for (int i = 0; i < o->n_own_args[m]; i++) args[n++] = o->own_args[m][i];
        args[n] = NULL;
        o->models[m].runner_args = args;
    }
    return 0;
}

/* -m FILE: the first replaces the file's models. */
static int add_model(struct serve_options *o, const char *path, int *cli_models) {
    struct gateway_params *p = &o->params;
    if (!*cli_models) p->n_models = 0;
    if (p->n_models == SERVE_MAX_MODELS) {
        fprintf(stderr, "lockstep serve: at most %d models\n", SERVE_MAX_MODELS);
        return -1;
    }
    struct gateway_model *m = &o->models[p->n_models];
    *m = o->defaults;
    m->name = NULL;
    m->path = path;
    o->n_own_args[p->n_models++] = 0;
    (*cli_models)++;
    return 0;
}

/* One option of the command line (its value at argv[*i + 1] if it takes one). */
static int parse_option(int argc, char **argv, int *i, struct serve_options *o, int cli_models,
                        unsigned char *listed) {
    const char *a = argv[*i], *value = NULL;
    const struct serve_option *row = option_by_name(a);
    char label[128], err[1024];
    if (!row) {
        fprintf(stderr, "lockstep serve: unknown option '%s' (see --help)\n", a);
        return -1;
    }
    if (row->kind != SERVE_FLAG) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "lockstep serve: option %s needs a value\n", a);
            return -1;
        }
        value = argv[++*i];
    }
    if (row->clear && !listed[row - serve_option_table]) { /* the file's list goes */
        listed[row - serve_option_table] = 1;
        row->clear(o);
    }
    snprintf(label, sizeof(label), "option %s", a);
    int failed;
    if (!row->model) {
        failed = row->set(o, NULL, row, value, label, err, sizeof(err));
    } else if (cli_models) {
        failed =
            row->set(o, &o->models[o->params.n_models - 1], row, value, label, err, sizeof(err));
    } else { /* a default, for the file's models too */
        failed = row->set(o, &o->defaults, row, value, label, err, sizeof(err));
        for (int m = 0; !failed && m < o->params.n_models; m++)
            failed = row->set(o, &o->models[m], row, value, label, err, sizeof(err));
    }
    if (failed) fprintf(stderr, "lockstep serve: %s\n", err);
    return failed ? -1 : 0;
}

/* --config FILE (the last one), read before the options that override it. */
static int read_config(int argc, char **argv, struct serve_options *o) {
    char err[1024];
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--config")) o->config_path = argv[i + 1];
    if (!o->config_path || !serve_config_load(o, o->config_path, err, sizeof(err))) return 0;
    fprintf(stderr, "lockstep serve: %s\n", err);
    return -1;
}

int serve_options_parse(int argc, char **argv, struct serve_options *o) {
    struct gateway_params *p = &o->params;
    unsigned char listed[sizeof(serve_option_table) / sizeof(serve_option_table[0])] = {0};
    int cli_models = 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
    if (read_config(argc, argv, o)) return -2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "lockstep serve: option %s needs a value\n", a);
                return -1;
            }
            if (add_model(o, argv[++i], &cli_models)) return -1;
        } else if (parse_option(argc, argv, &i, o, cli_models, listed)) {
            return -1;
        }
    }
    if (p->n_models == 0) {
        fprintf(stderr, "lockstep serve: no model given (-m FILE%s)\n",
                o->config_path ? ", or \"models\" in the configuration file" : "");
        return -1;
    }
    if (check_keys(p)) return -1;
    for (int m = 0; m < p->n_models; m++) {
        struct gateway_model *model = &o->models[m];
        model->shape_chosen = !model->tp && !model->pp && !model->layers[0];
        if (!model->tp) model->tp = 1;
        if (!model->pp) model->pp = 1;
    }
    p->models = o->models;
    return assemble_runner_args(o);
}
