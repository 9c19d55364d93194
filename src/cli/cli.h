/* cli.h -- the lockstep command's subcommands and what they share: option
 * parsing helpers and loading a model with its tokenizer. */
#ifndef LOCKSTEP_CLI_H
#define LOCKSTEP_CLI_H

#include <stddef.h>

#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

int cli_generate(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_convert(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_embed(int argc, char **argv);
int cli_runner(int argc, char **argv);
int cli_client(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_probe(int argc, char **argv);

/* Parses the value of option argv[*i] (advancing *i past it). Each returns 0,
 * or -1 after printing "lockstep <command>: ..." naming the option. */
int cli_int_value(const char *command, int argc, char **argv, int *i, int min, int max, int *out);
int cli_float_value(const char *command, int argc, char **argv, int *i, float *out);
int cli_string_value(const char *command, int argc, char **argv, int *i, const char **out);
/* on|off: 1 or 0. */
int cli_switch_value(const char *command, int argc, char **argv, int *i, int *out);
/* Reads a key from the first line of the file at path (trailing blanks
 * cut) into text (size bytes); a world-readable file, an empty one or a
 * key that does not fit is refused with label and the path in err. */
#define CLI_KEY_MAX 512 /* bytes of a key read from a file, with its terminator */
int cli_read_key_file(const char *path, char *text, size_t size, const char *label, char *err,
                      size_t errlen);
/* An option whose value is a key file (--cluster-key-file FILE): the key
 * into text, or -1 said on stderr. */
int cli_key_file_value(const char *command, int argc, char **argv, int *i, char *text, size_t size);
/* --kv-type f16|f32|q8_0: the key/value cache's element type. */
int cli_kv_type_value(const char *command, int argc, char **argv, int *i, enum tensor_type *out);
#define CLI_KV_TYPE_HELP                                                                           \
    "  --kv-type T             key/value cache elements: f16 (default; half the memory of f32),\n" \
    "                          q8_0 (8.5 bits an element; head dimension a multiple of 32)\n"      \
    "                          or f32 (a float reference's numerics)\n"

/* A model and its tokenizer: from the GGUF's metadata, or, for a llama2.c
 * checkpoint, from tokenizer_path (required then). */
struct cli_model {
    struct model *model;
    struct tokenizer *tokenizer;
};

int cli_model_load(struct cli_model *loaded, const char *command, const char *model_path,
                   const char *tokenizer_path);
void cli_model_free(struct cli_model *loaded);

/* Converts a llama2.c checkpoint and its tokenizer.bin to a GGUF file with
 * 2-D weights of type (or mix); prints the reason and returns -1 on failure. */
int convert_llama2c(const char *input, const char *tokenizer_path, enum tensor_type type,
                    enum model_mix mix, const char *output);

/* Tensor-parallel options shared by generate and bench. */
struct cli_parallel {
    int tp;                        /* --tp: ranks (local backend) */
    int pp;                        /* --pp: pipeline stages of tp ranks each */
    int layers[ENGINE_MAX_STAGES]; /* --layers-split: layers of each stage */
    int n_layers;                  /* ... how many were given (0: an even split) */
    enum comm_backend backend;     /* --comm local|mpi */
    float deadline;                /* --comm-deadline: seconds a collective may wait */
};

void cli_parallel_default(struct cli_parallel *parallel);
/* Parses argv[*i] if it is one of the options above (*matched = 1). */
int cli_parallel_option(const char *command, int argc, char **argv, int *i,
                        struct cli_parallel *parallel, int *matched);
#define CLI_PARALLEL_HELP                                                                          \
    "  --tp N                  tensor-parallel ranks (threads of this process)\n"                  \
    "  --pp N                  pipeline stages of --tp ranks each (layers split between them)\n"   \
    "  --layers-split A,B,...  layers of each stage, first to last (default: as even as can be)\n" \
    "  --comm local|mpi        collectives backend; mpi: run under mpirun, one rank a process\n"   \
    "  --comm-deadline S       seconds a collective may wait for a peer (default 30)\n"

/* "A,B,...": each pipeline stage's layers, first to last, into layers
 * (ENGINE_MAX_STAGES entries) and their count; -1 with err. */
int cli_layers_parse(const char *text, int *layers, int *n_layers, char *err, size_t errlen);

/* The engine group the options describe (degrees, layer split, backend,
 * deadline), its on_failure cli_rank_failed. */
struct engine_group cli_parallel_group(const struct cli_parallel *parallel);

/* engine_group's on_failure for the command: prints the rank's failure and
 * exits the process with its distinct exit code (DESIGN.md I3). */
void cli_rank_failed(struct engine *engine, const char *message);

/* Exits the process at once with the leader's exit code if one of its
 * collectives failed (the message has been printed); returns otherwise. */
void cli_leave_if_collective_failed(const struct engine *leader);

/* The fault injection a test asks for in LOCKSTEP_FAULT (engine_fault_parse);
 * -1 (message printed) if it is malformed. */
int cli_read_fault(const char *command, struct engine_fault *fault);

/* Blocks SIGTERM and SIGINT in the calling thread (and so in every thread
 * it starts afterwards; call it before starting any) and starts a thread
 * that waits for them and calls stop(arg) on each: stop runs as ordinary
 * code, not in a signal handler. SIGPIPE is ignored. 0, or -1 (printed). */
int cli_handle_stop_signals(void (*stop)(void *arg), void *arg);

/* Seconds on a monotonic clock. */
double cli_now(void);

#endif
