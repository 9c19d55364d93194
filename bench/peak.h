/* peak.h -- what the multiply-add ceiling benchmarks (vnni_peak,
 * maddubs_peak) share: a worker thread's record and the best rate of a
 * kernel run on several threads at once (peak.c). */
#ifndef LOCKSTEP_BENCH_PEAK_H
#define LOCKSTEP_BENCH_PEAK_H

#include <pthread.h>
#include <stdint.h>

struct worker {
    pthread_t thread;
    int32_t result; /* the sums, stored so the loop is not optimized away */
};

/* Best rate of 7 passes of fn on n_threads threads (at most 64), in GMAC/s,
 * for macs_per_thread multiply-adds a thread and pass. */
double peak_best_rate(void *(*fn)(void *), int n_threads, double macs_per_thread);

/* A ceiling benchmark: its kernels and whether this machine runs them. */
struct peak_kernels {
    const char *name;       /* for the usage line */
    int supported;          /* 0: the machine lacks the instructions (prints 0, exits 77) */
    void *(*peak)(void *);  /* the bare multiply-adds */
    double peak_macs;       /* multiply-adds of one call, per thread */
    void *(*block)(void *); /* the panel kernel's block steps */
    double block_macs;      /* multiply-adds of one call, per thread */
};

/* The benchmark's main: `NAME [threads 1..64]`; prints both rates. */
int peak_main(int argc, char **argv, const struct peak_kernels *kernels);

#endif
