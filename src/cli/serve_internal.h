/* serve_internal.h -- what `lockstep serve`'s files share: the settings
 * being assembled and the one option table that both the command line
 * (serve_options.c) and the configuration file (serve_config.c) go
 * through, so an option is one row and both ways of giving it take the
 * same values with the same checks. */
#ifndef LOCKSTEP_SERVE_INTERNAL_H
#define LOCKSTEP_SERVE_INTERNAL_H

#include <stddef.h>

#include "cli/cli.h"
#include "cluster/cluster.h"
#include "gateway/gateway.h"
#include "runner/runner.h"

#define SERVE_MAX_MODELS      16
#define SERVE_MAX_RUNNER_ARGS 32
#define SERVE_KEY_MAX         CLI_KEY_MAX /* bytes of a key read from a file */
#define SERVE_SOURCE_MAX      600         /* bytes of where a key came from */

/* Everything `lockstep serve` was told, from its defaults, the file and the
 * command line, in that order of precedence (the last wins). */
struct serve_options {
    struct gateway_params params;
    struct gateway_model defaults; /* model options outside any model */
    struct gateway_model models[SERVE_MAX_MODELS];
    const char *runner_args[SERVE_MAX_RUNNER_ARGS + 1]; /* --runner-arg, for every model */
    int n_runner_args;
    /* the runner arguments of each model: --log-format's, the common ones,
     * --prefix-cache's, then the model's own (runner_args in a file's model) */
    const char *model_args[SERVE_MAX_MODELS][SERVE_MAX_RUNNER_ARGS + 7];
    const char *own_args[SERVE_MAX_MODELS][SERVE_MAX_RUNNER_ARGS]; /* a file model's own */
    int n_own_args[SERVE_MAX_MODELS];
    int prefix_cache;                                   /* -1: the runner's default, 0 off, 1 on */
    struct cluster_host hosts[CLUSTER_HOSTS_MAX];       /* --cluster's hosts */
    struct cluster_place_spec places[SERVE_MAX_MODELS]; /* --place */
    enum log_format log_format;                         /* --log-format */
    int check_only;                                     /* --check-config: validate and print */
    const char *config_path;                            /* --config FILE, or NULL */
    void *config_tree;                                  /* the file's cJSON (strings point in) */
    int n_file_models;                                  /* models the file gave (0: none) */
    char api_key_text[SERVE_KEY_MAX];                   /* a key read from a file */
    char admin_key_text[SERVE_KEY_MAX];
    char cluster_key_text[SERVE_KEY_MAX];  /* --cluster-key-file's key */
    char api_key_source[SERVE_SOURCE_MAX]; /* "(from file X)", "(from $ENV)", ... */
    char admin_key_source[SERVE_SOURCE_MAX];
};

/* What a value must be: in a file, the JSON type it must have. */
enum serve_kind {
    SERVE_TEXT,   /* a string */
    SERVE_INT,    /* an integer in [min, max] */
    SERVE_NUMBER, /* a number */
    SERVE_SWITCH, /* on|off on the command line; true/false (or "on"/"off") in a file */
    SERVE_FLAG,   /* no value on the command line; true/false in a file */
    SERVE_LIST,   /* repeatable; in a file a string or an array of strings */
};

struct serve_option;

/* Sets an option from its value's text (NULL for a flag given on the
 * command line). m is the model it describes, for model options. label
 * names where the value came from ("option --port" or "FILE:LINE: port")
 * and starts every error written to err. */
typedef int (*serve_setter)(struct serve_options *o, struct gateway_model *m,
                            const struct serve_option *row, const char *value, const char *label,
                            char *err, size_t errlen);

/* One option, as the command line and the file name it. */
struct serve_option {
    const char *name;       /* "--port", or NULL: file only */
    const char *short_name; /* "-t", or NULL */
    const char *key;        /* the file's key ("port"), or NULL: command line only */
    enum serve_kind kind;
    int model;        /* 1: a model option (a model's, or a default for every model) */
    size_t offset;    /* the field in gateway_params or gateway_model, for the generic setters */
    double min, max;  /* SERVE_INT's and SERVE_NUMBER's range (seconds for the periods) */
    serve_setter set; /* checks and stores the value */
    void (*clear)(struct serve_options *o); /* SERVE_LIST: forget the file's values */
};

extern const struct serve_option serve_option_table[];
extern const int serve_option_count;

/* The row for a file key, or NULL. */
const struct serve_option *serve_option_by_key(const char *key);

/* Default settings (before the file and the command line). */
void serve_options_init(struct serve_options *o);
/* Parses the command line over what the file set: 0, 1 for --help, -1
 * (printed) on a bad option or setting, -2 (printed) on a bad file. */
int serve_options_parse(int argc, char **argv, struct serve_options *o);

/* Reads a configuration file into o: 0, or -1 with err naming the file,
 * the line and the key. */
int serve_config_load(struct serve_options *o, const char *path, char *err, size_t errlen);
void serve_config_free(struct serve_options *o);
/* Prints the effective settings as JSON (keys redacted to their source). */
void serve_config_print(const struct serve_options *o);

#endif
