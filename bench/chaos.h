/* chaos.h -- what the files of bench/chaos_tool share: the run (options,
 * the fixed set of request items with their reference outputs, the faults
 * injected and what /health showed of them), the client threads
 * (chaos.c) and the fault injector, the /health monitor and the faults
 * that send requests or connections of their own (chaos_faults.c). */
#ifndef LOCKSTEP_BENCH_CHAOS_H
#define LOCKSTEP_BENCH_CHAOS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "loadgen.h"

#define CHAOS_MODELS      2    /* instances: "big" (tensor-parallel) and "small" */
#define CHAOS_FAULTS_MAX  4096 /* faults one run records */
#define CHAOS_KIND_MAX    16   /* bytes of a fault kind's name */
#define CHAOS_LOG_FAILURE 40   /* failures logged one by one; the rest are counted */
#define CHAOS_FLOOD_MAX   512  /* requests of one stop+flood fault */
#define CHAOS_CANCELS_MAX 64   /* streams of one stop-cancel fault */
#define CHAOS_HALF_MAX    1000 /* connections of one half-open fault */
#define CHAOS_NOTE_MAX    200  /* bytes of what a fault's own checks measured */
#define CHAOS_HOSTS_MAX   8    /* hosts --hosts names */

struct chaos_options {
    int port;                        /* the gateway's port */
    const char *names[CHAOS_MODELS]; /* model names: big, small */
    int tp[CHAOS_MODELS];            /* ranks of each (fault ranks are drawn below it) */
    int clients[CHAOS_MODELS];       /* concurrent streaming clients on each */
    double duration;                 /* seconds of each phase */
    double fault_every;              /* seconds between faults */
    double deadline;                 /* seconds a request may take */
    double recovery_limit;           /* seconds a fault may take to recover */
    int faults;                      /* 0: phase 2 runs without faults (--no-faults) */
    uint64_t seed;                   /* items, client choices and faults derive from it */
    int n_items;                     /* distinct (prompt, seed, max_tokens) items */
    int max_words, max_tokens;       /* largest prompt (words) and max_tokens of an item */
    int delay_ms;                    /* "delay" faults sleep up to this per collective */
    int flood;                       /* requests a stop+flood fault sends the stopped runner */
    int flood_prompt;                /* prompt tokens of each */
    int cancels;                     /* streams a stop-cancel fault leaves at their stop string */
    int half_open;                   /* connections a half-open fault leaves half-sent */
    int gateway_pid;                 /* whose open files half-open counts (0: not counted) */
    double watchdog;                 /* the gateway's --watchdog, seconds */
    int limits;                      /* 1: print the gateway limits the run needs, and exit */
    int n_hosts; /* the cluster's hosts (--hosts): move, lose-host, drain-host */
    char hosts[CHAOS_HOSTS_MAX][64]; /* (n_hosts) their names */
};

/* What a set of requests that a fault sends gave. */
struct chaos_requests {
    long sent, completed, failed, wrong, late, unverified;
};

/* GET /health timed while a flood runs. */
struct chaos_health_watch {
    double worst;       /* the slowest answer, seconds */
    int probes, failed; /* asked; not answered (an error, or nothing within 5 s) */
};

/* What every third item asks for: JSON under a schema (issue 23), so that
 * a grammar's state is carried through every fault as exactly as the
 * tokens are. */
#define CHAOS_RESPONSE_FORMAT                                                                      \
    "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"item\",\"schema\":{\"type\":"           \
    "\"object\",\"properties\":{\"word\":{\"type\":\"string\",\"maxLength\":12},\"n\":{"           \
    "\"type\":\"integer\"}},\"required\":[\"word\",\"n\"],\"additionalProperties\":false}}}"

/* One request of the fixed set, and its fault-free output on each model. */
struct chaos_item {
    char *prompt;    /* (owned) text; a flood item's: token ids, "5,301,17" */
    uint64_t seed;   /* "seed" */
    int max_tokens;  /* "max_tokens" */
    int constrained; /* 1: asks for JSON under a schema (CHAOS_RESPONSE_FORMAT) */
    /* reference outputs, guarded by the run's lock */
    char *reference[CHAOS_MODELS]; /* text, NULL until the first fault-free completion */
    char finish[CHAOS_MODELS][LOADGEN_FINISH_MAX];
    int completion_tokens[CHAOS_MODELS];
};

/* One injected fault and what /health showed afterwards. */
struct chaos_fault {
    double at;                     /* when it was posted (seconds since the run started) */
    int phase;                     /* the phase it belongs to (1: faults) */
    int model, rank;               /* instance and rank it hit */
    char kind[CHAOS_KIND_MAX];     /* kill, stop, stall, delay, close, refuse+kill, stop+flood,
                                    * stop-cancel, half-open, move, lose-host, drain-host */
    int status;                    /* HTTP status of /debug/fault (the last post), 0: not sent;
                                    * 200 for stop-cancel and half-open, which post nothing */
    int disruptive;                /* 1: the runner must be replaced (not delay, stop-cancel,
                                    * half-open) */
    long pid_before;               /* runner pid when it was injected */
    int restarts_before;           /* the instance's restarts in /health then */
    double detected_at;            /* the gateway noticed: not ready or a new pid (0: not yet) */
    double recovered_at;           /* a new runner is ready (0: not yet) */
    char error[LOADGEN_ERROR_MAX]; /* what /debug/fault said when it refused */
    /* stop+flood, stop-cancel and half-open: a worker thread sends their
     * requests or connections and checks what follows */
    int worker;                       /* 1: it has a worker */
    int working;                      /* 1: the worker still runs */
    struct chaos_requests requests;   /* what its requests gave */
    struct chaos_health_watch health; /* stop+flood: GET /health during the flood */
    int check_failed;                 /* 1: one of its own checks failed */
    char note[CHAOS_NOTE_MAX];        /* what its checks measured */
};

/* The run every thread shares. */
struct chaos_run {
    const struct chaos_options *options;
    struct chaos_item *items; /* (options->n_items) */
    /* (options->flood) what stop+flood sends: token-id prompts, greedy */
    struct chaos_item *flood_items;
    struct chaos_requests flood_references[CHAOS_MODELS]; /* the fault-free floods */
    struct chaos_health_watch flood_reference_health;     /* GET /health during them */
    double start;                                         /* loadgen_now() when the run started */
    pthread_mutex_t lock; /* guards items' references, faults, health and the log */
    struct chaos_fault faults[CHAOS_FAULTS_MAX];
    int n_faults;
    struct loadgen_health_model health[CHAOS_MODELS]; /* the latest /health of each model */
    int failures_logged;                              /* failure lines printed so far */
    atomic_int stopping;                              /* 1: the monitor returns */
    int phase;                                        /* 0: baseline, 1: faults */
};

/* Seconds since the run started. */
double chaos_elapsed(const struct chaos_run *run);
/* A line on stderr, prefixed by the elapsed time (takes the lock). */
void chaos_log(struct chaos_run *run, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* A failed request's line (the first CHAOS_LOG_FAILURE of the run in
 * full): what went wrong, with which request, sent when, and why. */
void chaos_log_failure(struct chaos_run *run, const char *what, const char *request, double sent,
                       int tokens, const char *why);

enum chaos_verdict { CHAOS_EQUAL, CHAOS_RECORDED, CHAOS_DIFFERENT, CHAOS_UNVERIFIED };
/* Compares a completed output (text, finish_reason, completion tokens)
 * with the item's reference on that instance, or records it as the
 * reference (only fault-free runs may); why says how it differs. */
enum chaos_verdict chaos_check_output(struct chaos_run *run, struct chaos_item *item, int model,
                                      const char *text, const char *finish, int tokens,
                                      int may_record, char *why, size_t whylen);

/* chaos_faults.c: the /health monitor (every 100 ms until run->stopping) */
void *chaos_monitor_main(void *arg);
/* What the worker of a fault works on (one runs at a time). */
struct chaos_work {
    struct chaos_run *run;
    int fault;    /* its index in run->faults */
    uint64_t rng; /* its own choices */
};
/* Injects faults every options->fault_every seconds until `end`. */
struct chaos_injector {
    struct chaos_run *run;
    double end; /* loadgen_now() after which no fault is injected */
    pthread_t thread;
    struct chaos_work work; /* the latest worker's */
    pthread_t worker;       /* its thread (joined before the next starts) */
    int has_worker;         /* 1: worker is to be joined */
};
void *chaos_injector_main(void *arg);
/* Sleeps seconds (nothing when <= 0). */
void chaos_sleep(double seconds);
/* 1 if fault f is of kind. */
int chaos_is_kind(const struct chaos_fault *f, const char *kind);
/* Seconds a delay fault may still slow its runner: up to 40 steps of 24
 * collectives (the 85M model) each delayed up to 20 ms. */
#define CHAOS_DELAY_QUIET 20.0
/* 1 if a delay fault hit instance m within the last `seconds` (takes the
 * lock): its slowed steps may still trip the watchdog. */
int chaos_recent_delay(struct chaos_run *run, int m, double seconds);

/* chaos_clients.c: the faults that are clients, each on the worker thread
 * the injector starts with a struct chaos_work. */
void *chaos_flood_main(void *work);
void *chaos_cancel_main(void *work);
void *chaos_half_open_main(void *work);
/* Ends a fault's work with what it measured (takes the lock). */
void chaos_finish_work(struct chaos_run *run, int fault, const struct chaos_requests *requests,
                       int failed, const char *note);
/* Every flood item at once on instance `model` (-1: on both), greedy,
 * while GET /health is timed every 100 ms: records the references when
 * `record` (a fault-free run), else checks each answer against them.
 * Adds the outcomes to out[model] and the /health times to *health; -1 if
 * a request's thread could not start (it counts as failed). */
int chaos_flood(struct chaos_run *run, int model, int record, struct chaos_requests *out,
                struct chaos_health_watch *health);
/* Waits (up to options->recovery_limit after each) until every disruptive
 * fault has recovered. */
void chaos_wait_recovered(struct chaos_run *run);

/* What the faults' table adds to the verdict. */
struct chaos_fault_summary {
    int not_recovered; /* disruptive faults without a new ready runner */
    int checks_failed; /* faults whose own checks failed */
    long completed;    /* requests the faults sent (flood references included) that passed */
    long bad;          /* ... that failed, were wrong, late or unverified */
};
/* Prints the faults by kind, what the faults with a worker measured and
 * the requests they sent; fills the summary. */
void chaos_print_faults(struct chaos_run *run, struct chaos_fault_summary *summary);

#endif
