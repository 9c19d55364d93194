/* peak.c -- the timing harness of the multiply-add ceiling benchmarks
 * (peak.h): every thread runs the kernel once per pass, and the fastest of
 * 7 passes counts, since a shared host slows some passes down. */
#include "peak.h"

#include <stdio.h>
#include <stdlib.h>
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

int peak_main(int argc, char **argv, const struct peak_kernels *k) {
    int n_threads = argc > 1 ? atoi(argv[1]) : 1;
    if (n_threads < 1 || n_threads > 64) {
        fprintf(stderr, "usage: %s [threads 1..64]\n", k->name);
        return 2;
    }
    if (!k->supported) {
        printf("0\n");
        return 77;
    }
    double peak = peak_best_rate(k->peak, n_threads, k->peak_macs);
    double block = peak_best_rate(k->block, n_threads, k->block_macs);
    printf("peak        %.1f GMAC/s\n", peak);
    printf("block step  %.1f GMAC/s (%.2f of peak)\n", block, block / peak);
    return 0;
}
