/* gateway_bench.h -- what the files of bench/gateway_bench share: the run's
 * options, the keep-alive connection to the gateway with its response
 * reader (gateway_bench.c, which also reads the model's context length
 * through them), and the client threads that send each workload's requests
 * and measure their streams (gateway_workloads.c), which gateway_bench.c
 * starts for each concurrency level and sums. */
#ifndef LOCKSTEP_BENCH_GATEWAY_BENCH_H
#define LOCKSTEP_BENCH_GATEWAY_BENCH_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "loadgen.h"

#define BENCH_MAX_LEVELS 16
#define BENCH_BUFFER     16384 /* bytes received from the socket at once */
#define BENCH_ERROR_MAX  256   /* bytes of an error message */
#define BENCH_MAX_TURNS  64    /* requests of one multi-turn conversation */

/* The request shapes of --workload (see the top of gateway_bench.c). */
enum bench_workload {
    WORKLOAD_COMPLETIONS,
    WORKLOAD_SHORT,
    WORKLOAD_SHARED_PREFIX,
    WORKLOAD_MULTI_TURN,
};

struct bench_options {
    const char *host;             /* server address (IPv4 dotted quad, or localhost) */
    int port;                     /* server port */
    const char *model;            /* "model" of every request */
    const char *prompt;           /* prompt text */
    const char *api_key;          /* sent as Authorization: Bearer, or NULL */
    int levels[BENCH_MAX_LEVELS]; /* (n_levels) concurrent clients of each level */
    int n_levels;
    double seconds;      /* measured time per level */
    int max_tokens;      /* max_tokens of every request */
    unsigned long seed;  /* seed of the first request; each next one adds 1 */
    double timeout;      /* seconds a client waits for a byte before giving up */
    char *prompt_json;   /* prompt escaped for a JSON string (owned) */
    char *model_json;    /* model escaped for a JSON string (owned) */
    struct in_addr addr; /* host, parsed */
    enum bench_workload workload;
    int user_words;            /* words of each chat request's new user message */
    int system_words;          /* words of the generated system prompt (0: none) */
    unsigned long system_seed; /* seed the system prompt is generated from */
    const char *system_file;   /* or: the system prompt is this file's text */
    char *system;              /* the system prompt, or NULL (owned) */
    int turns;                 /* requests of a multi-turn conversation */
    int context_length;        /* the model's, from GET /v1/models (0: unknown) */
    int print_system;          /* 1: print the system prompt and exit */
    const char *label;         /* first column of the --tsv lines */
    const char *tsv;           /* append one line per level here, or NULL */
};

/* ---------------------------------------------------------- connection */

/* One keep-alive connection to the gateway and the bytes received on it. */
struct bench_connection {
    int fd;                  /* socket, -1 while closed */
    double timeout;          /* seconds to wait for a byte */
    char data[BENCH_BUFFER]; /* received bytes; [start, end) not consumed yet */
    size_t start, end;
};

int bench_connection_open(struct bench_connection *c, const struct bench_options *o, char *err,
                          size_t errlen);
int bench_connection_send(struct bench_connection *c, const char *bytes, size_t n, char *err,
                          size_t errlen);
void bench_connection_close(struct bench_connection *c);

/* ------------------------------------------------------------ response */

/* What the status line and headers of a response say. */
struct bench_head {
    int status;       /* HTTP status code */
    int chunked;      /* 1: Transfer-Encoding: chunked */
    long long length; /* Content-Length, or -1 */
    int close;        /* 1: the server closes the connection after it */
};

/* Where the body reader is. */
struct bench_body {
    int chunked;         /* 1: chunked transfer coding */
    long long remaining; /* bytes left in the current chunk (chunked) or the body; -1: to EOF */
    int finished;        /* 1: the body's end was read */
};

int bench_read_head(struct bench_connection *c, struct bench_head *h, char *err, size_t errlen);
/* Reads up to max bytes of the body into out: their count, 0 at its end,
 * -1 on an error. */
long bench_read_body(struct bench_connection *c, struct bench_body *b, char *out, size_t max,
                     char *err, size_t errlen);

/* ------------------------------------------------- gateway_workloads.c */

/* What every client of a run shares. */
struct bench_run {
    const struct bench_options *options;
    atomic_ulong next_seed; /* seed of the next request */
};

/* One exchange of a multi-turn conversation: the user's turn and the
 * assistant's answer as it came back. */
struct bench_turn {
    char *user, *assistant; /* (owned) */
};

/* The conversation a multi-turn client holds. */
struct bench_conversation {
    struct bench_turn turns[BENCH_MAX_TURNS]; /* (n_turns) answered so far */
    int n_turns;
    int prompt_tokens, completion_tokens; /* the last answer's usage */
    int growth; /* the most prompt tokens one turn added so far (0: one turn) */
};

/* One client thread and what it measured during one level. */
struct bench_client {
    struct bench_run *run;
    double deadline; /* no request starts after it */
    struct bench_connection connection;
    char *request; /* (request_capacity) the HTTP request being sent */
    size_t request_capacity;
    struct loadgen_samples ttft, itl;       /* seconds, observed before the deadline */
    long completed;                         /* requests whose [DONE] came before the deadline */
    long tokens;                            /* generated tokens received before the deadline */
    long chunks, chunk_tokens;              /* completed requests: token chunks, tokens in them */
    long errors;                            /* requests that failed */
    char first_error[BENCH_ERROR_MAX];      /* what the first failure said */
    long prompt_tokens, prompt_counted;     /* completed requests: usage.prompt_tokens, how many */
    struct bench_conversation conversation; /* multi-turn */
    char *user;                             /* the user message being sent (owned) */
    long conversations, context_resets;     /* multi-turn: started, started early for the context */
    pthread_t thread;
};

/* A client thread (arg: its struct bench_client): requests of the run's
 * workload one after another until its deadline. */
void *bench_client_main(void *arg);

#endif
