/* peak.c -- the timing harness of the multiply-add ceiling benchmarks
 * (peak.h): every thread runs the kernel once per pass, and the fastest of
 * 7 passes counts, since a shared host slows some passes down. */
#include "peak.h"

#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double peak_best_rate(void *(*fn)(void *), int n_threads, double macs_per_thread) {
    struct worker workers[64];
    double best = 0;
    for (int pass = 0; pass < 7; pass++) {
        double t0 = now();
        for (int t = 0; t < n_threads; t++)
            pthread_create(&workers[t].thread, NULL, fn, &workers[t]);
        for (int t = 0; t < n_threads; t++) pthread_join(workers[t].thread, NULL);
        double rate = n_threads * macs_per_thread / (now() - t0) / 1e9;
        if (rate > best) best = rate;
    }
    return best;
}
