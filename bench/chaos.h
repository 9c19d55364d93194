/* chaos.h -- what the files of bench/chaos_tool share: the run (options,
 * the fixed set of request items with their reference outputs, the faults
 * injected and what /health showed of them), the client threads
 * (chaos.c) and the fault injector and /health monitor (chaos_faults.c). */
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
};

/* One request of the fixed set, and its fault-free output on each model. */
struct chaos_item {
    char *prompt;   /* (owned) */
    uint64_t seed;  /* "seed" */
    int max_tokens; /* "max_tokens" */
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
    char kind[CHAOS_KIND_MAX];     /* kill, stop, stall, delay, close, refuse+kill */
    int status;                    /* HTTP status of /debug/fault (the last post), 0: not sent */
    int disruptive;                /* 1: the runner must be replaced (all kinds but delay) */
    long pid_before;               /* runner pid when it was injected */
    double detected_at;            /* the gateway noticed: not ready or a new pid (0: not yet) */
    double recovered_at;           /* a new runner is ready (0: not yet) */
    char error[LOADGEN_ERROR_MAX]; /* what /debug/fault said when it refused */
};

/* The run every thread shares. */
struct chaos_run {
    const struct chaos_options *options;
    struct chaos_item *items; /* (options->n_items) */
    double start;             /* loadgen_now() when the run started */
    pthread_mutex_t lock;     /* guards items' references, faults, health and the log */
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

/* chaos_faults.c: the /health monitor (every 100 ms until run->stopping) */
void *chaos_monitor_main(void *arg);
/* Injects faults every options->fault_every seconds until `end`. */
struct chaos_injector {
    struct chaos_run *run;
    double end; /* loadgen_now() after which no fault is injected */
    pthread_t thread;
};
void *chaos_injector_main(void *arg);
/* Waits (up to options->recovery_limit after each) until every disruptive
 * fault has recovered. */
void chaos_wait_recovered(struct chaos_run *run);
/* Prints the table of faults by kind; the number not recovered. */
int chaos_print_faults(struct chaos_run *run);

#endif
