/* common.c -- option parsing and model loading shared by the subcommands. */
#include "cli.h"

#include <pthread.h>
#include <signal.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int missing_value(const char *command, const char *option) {
    fprintf(stderr, "lockstep %s: option %s needs a value\n", command, option);
    return -1;
}

int cli_string_value(const char *command, int argc, char **argv, int *i, const char **out) {
    if (*i + 1 >= argc) return missing_value(command, argv[*i]);
    *out = argv[++*i];
    return 0;
}

int cli_kv_type_value(const char *command, int argc, char **argv, int *i, enum tensor_type *out) {
    const char *option = argv[*i], *text;
    if (cli_string_value(command, argc, argv, i, &text)) return -1;
    int type = tensor_type_from_name(text);
    if (kv_cache_type_supported(type)) {
        *out = (enum tensor_type)type;
        return 0;
    }
    fprintf(stderr, "lockstep %s: option %s: '%s' is not f16, f32 or q8_0\n", command, option,
            text);
    return -1;
}

int cli_switch_value(const char *command, int argc, char **argv, int *i, int *out) {
    const char *option = argv[*i], *text;
    if (cli_string_value(command, argc, argv, i, &text)) return -1;
    if (!strcmp(text, "on") || !strcmp(text, "off")) {
        *out = !strcmp(text, "on");
        return 0;
    }
    fprintf(stderr, "lockstep %s: option %s: '%s' is not on or off\n", command, option, text);
    return -1;
}

int cli_int_value(const char *command, int argc, char **argv, int *i, int min, int max, int *out) {
    const char *option = argv[*i], *text;
    char *end;
    if (cli_string_value(command, argc, argv, i, &text)) return -1;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno || end == text || *end || value < min || value > max) {
        fprintf(stderr, "lockstep %s: option %s: '%s' is not an integer in [%d, %d]\n", command,
                option, text, min, max);
        return -1;
    }
    *out = (int)value;
    return 0;
}

int cli_float_value(const char *command, int argc, char **argv, int *i, float *out) {
    const char *option = argv[*i], *text;
    char *end;
    if (cli_string_value(command, argc, argv, i, &text)) return -1;
    errno = 0;
    float value = strtof(text, &end);
    if (errno || end == text || *end || value != value) {
        fprintf(stderr, "lockstep %s: option %s: '%s' is not a number\n", command, option, text);
        return -1;
    }
    *out = value;
    return 0;
}

int cli_model_load(struct cli_model *loaded, const char *command, const char *model_path,
                   const char *tokenizer_path) {
    char err[512];
    memset(loaded, 0, sizeof(*loaded));
    if (!model_path) {
        fprintf(stderr, "lockstep %s: no model given (-m FILE)\n", command);
        return -1;
    }
    if (model_load(&loaded->model, model_path, err, sizeof(err))) {
        fprintf(stderr, "lockstep %s: %s\n", command, err);
        return -1;
    }
    int failed;
    if (loaded->model->gguf && !tokenizer_path) {
        failed = tokenizer_load_gguf(&loaded->tokenizer, loaded->model->gguf, err, sizeof(err));
    } else if (tokenizer_path) {
        failed = tokenizer_load_llama2c(&loaded->tokenizer, tokenizer_path,
                                        loaded->model->config.vocab_size, err, sizeof(err));
    } else {
        snprintf(err, sizeof(err), "%s is a llama2.c checkpoint: give its tokenizer with -z FILE",
                 model_path);
        failed = 1;
    }
    if (failed) {
        fprintf(stderr, "lockstep %s: %s\n", command, err);
        cli_model_free(loaded);
        return -1;
    }
    return 0;
}

void cli_model_free(struct cli_model *loaded) {
    if (loaded->tokenizer) tokenizer_free(loaded->tokenizer);
    if (loaded->model) model_free(loaded->model);
    memset(loaded, 0, sizeof(*loaded));
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_parallel_default(struct cli_parallel *parallel) {
    memset(parallel, 0, sizeof(*parallel));
    parallel->tp = 1;
    parallel->pp = 1;
    parallel->backend = COMM_LOCAL;
    parallel->deadline = (float)COMM_DEFAULT_DEADLINE;
}

int cli_layers_parse(const char *text, int *layers, int *n_layers, char *err, size_t errlen) {
    *n_layers = 0;
    for (const char *at = text;; at++) {
        char *end;
        long count = strtol(at, &end, 10);
        if (end == at || count < 1 || count > MODEL_MAX_LAYERS || *n_layers == ENGINE_MAX_STAGES ||
            (*end != ',' && *end != '\0')) {
            snprintf(err, errlen,
                     "'%s': expected up to %d positive layer counts separated by commas", text,
                     ENGINE_MAX_STAGES);
            *n_layers = 0;
            return -1;
        }
        layers[(*n_layers)++] = (int)count;
        at = end;
        if (*end == '\0') return 0;
    }
}

struct engine_group cli_parallel_group(const struct cli_parallel *parallel) {
    return (struct engine_group){.n = parallel->tp,
                                 .stages = parallel->pp,
                                 .layers = parallel->n_layers ? parallel->layers : NULL,
                                 .n_layers = parallel->n_layers,
                                 .backend = parallel->backend,
                                 .deadline = parallel->deadline,
                                 .on_failure = cli_rank_failed};
}

int cli_parallel_option(const char *command, int argc, char **argv, int *i,
                        struct cli_parallel *parallel, int *matched) {
    const char *arg = argv[*i], *name;
    *matched = 1;
    if (!strcmp(arg, "--tp")) return cli_int_value(command, argc, argv, i, 1, 256, &parallel->tp);
    if (!strcmp(arg, "--pp"))
        return cli_int_value(command, argc, argv, i, 1, ENGINE_MAX_STAGES, &parallel->pp);
    if (!strcmp(arg, "--layers-split")) {
        char err[160];
        if (cli_string_value(command, argc, argv, i, &name)) return -1;
        if (cli_layers_parse(name, parallel->layers, &parallel->n_layers, err, sizeof(err)) == 0)
            return 0;
        fprintf(stderr, "lockstep %s: --layers-split %s\n", command, err);
        return -1;
    }
    if (!strcmp(arg, "--comm-deadline")) {
        if (cli_float_value(command, argc, argv, i, &parallel->deadline)) return -1;
        if (parallel->deadline > 0) return 0;
        fprintf(stderr, "lockstep %s: --comm-deadline must be positive\n", command);
        return -1;
    }
    if (!strcmp(arg, "--comm")) {
        if (cli_string_value(command, argc, argv, i, &name)) return -1;
        if (!strcmp(name, "local") || !strcmp(name, "mpi")) {
            parallel->backend = !strcmp(name, "mpi") ? COMM_MPI : COMM_LOCAL;
            return 0;
        }
        fprintf(stderr, "lockstep %s: --comm '%s' is not local or mpi\n", command, name);
        return -1;
    }
    *matched = 0;
    return 0;
}

void cli_rank_failed(struct engine *engine, const char *message) {
    fprintf(stderr, "lockstep: rank %d: %s\n", engine_rank(engine), message);
    fflush(stderr);
    _exit(engine_exit_code(engine));
}

void cli_leave_if_collective_failed(const struct engine *leader) {
    if (!leader || leader->comm_error == COMM_OK) return;
    /* a peer may be stuck inside a collective: it can be neither joined nor
     * freed, and waiting for it is the hang DESIGN.md I3 rules out */
    fflush(stdout);
    fflush(stderr);
    _exit(engine_exit_code(leader));
}

int cli_read_fault(const char *command, struct engine_fault *fault) {
    char err[256];
    if (engine_fault_parse(fault, getenv("LOCKSTEP_FAULT"), err, sizeof(err)) == 0) return 0;
    fprintf(stderr, "lockstep %s: LOCKSTEP_FAULT: %s\n", command, err);
    return -1;
}

struct stop_watch {
    void (*stop)(void *arg);
    void *arg;
    sigset_t signals;
};

static void *watch_stop_signals(void *context) {
    struct stop_watch *w = context;
    for (;;) {
        int sig;
        if (sigwait(&w->signals, &sig) == 0) w->stop(w->arg);
    }
    return NULL;
}

int cli_handle_stop_signals(void (*stop)(void *arg), void *arg) {
    static struct stop_watch watch; /* lives as long as the process */
    pthread_t thread;
    watch = (struct stop_watch){stop, arg, {{0}}};
    sigemptyset(&watch.signals);
    sigaddset(&watch.signals, SIGTERM);
    sigaddset(&watch.signals, SIGINT);
    signal(SIGPIPE, SIG_IGN);
    if (pthread_sigmask(SIG_BLOCK, &watch.signals, NULL) ||
        pthread_create(&thread, NULL, watch_stop_signals, &watch)) {
        fprintf(stderr, "lockstep: cannot set up signal handling\n");
        return -1;
    }
    pthread_detach(thread);
    return 0;
}

int cli_key_file_value(const char *command, int argc, char **argv, int *i, char *text,
                       size_t size) {
    const char *path;
    char label[96], err[700];
    if (cli_string_value(command, argc, argv, i, &path)) return -1;
    snprintf(label, sizeof(label), "lockstep %s: %s", command, argv[*i - 1]);
    if (cli_read_key_file(path, text, size, label, err, sizeof(err)) == 0) return 0;
    fprintf(stderr, "%s\n", err);
    return -1;
}

int cli_read_key_file(const char *path, char *text, size_t size, const char *label, char *err,
                      size_t errlen) {
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st)) {
        snprintf(err, errlen, "%s: cannot read %s: %s", label, path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if (st.st_mode & S_IROTH) {
        snprintf(err, errlen, "%s: %s is world-readable, so the key is not secret; chmod o-r %s",
                 label, path, path);
        close(fd);
        return -1;
    }
    ssize_t n = read(fd, text, size);
    close(fd);
    if (n > 0 && memchr(text, '\n', (size_t)n)) /* the first line */
        n = (char *)memchr(text, '\n', (size_t)n) - text;
    while (n > 0 && (text[n - 1] == '\r' || text[n - 1] == ' ' || text[n - 1] == '\t')) n--;
    if (n <= 0 || (size_t)n >= size) {
        snprintf(err, errlen, "%s: %s %s", label, path,
                 n <= 0 ? "holds no key" : "is longer than a key may be");
        return -1;
    }
    text[n] = '\0';
    return 0;
}
