/* bandwidth.c -- measures this machine's streaming read bandwidth, the
 * ceiling of token generation (every weight is read once per token).
 *
 * usage: bandwidth [threads] [MiB]   prints the best of 7 passes in GB/s.
 * Each thread sums its own slice of one large buffer; integer sums let the
 * compiler vectorize without reordering concerns. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct slice {
    const uint64_t *data; /* first word of the slice */
    size_t n;             /* words */
    uint64_t sum;         /* result, so the reads are not optimized away */
};

static void *sum_slice(void *arg) {
    struct slice *s = arg;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= s->n; i += 4) {
        a += s->data[i];
        b += s->data[i + 1];
        c += s->data[i + 2];
        d += s->data[i + 3];
    }
    s->sum = a ^ b ^ c ^ d;
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int n_threads = argc > 1 ? atoi(argv[1]) : 1;
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    size_t words = mib * 1024 * 1024 / sizeof(uint64_t);
    if (n_threads < 1 || n_threads > 64 || mib < 1) {
        fprintf(stderr, "usage: bandwidth [threads 1..64] [MiB]\n");
        return 2;
    }
    uint64_t *data = malloc(words * sizeof(uint64_t));
    if (!data) {
        fprintf(stderr, "bandwidth: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    memset(data, 1, words * sizeof(uint64_t));
    struct slice slices[64];
    pthread_t threads[64];
    double best = 0;
    uint64_t check = 0;
    for (int pass = 0; pass < 7; pass++) {
        double t0 = now();
        for (int t = 0; t < n_threads; t++) {
            slices[t] = (struct slice){data + words / n_threads * t, words / n_threads, 0};
            pthread_create(&threads[t], NULL, sum_slice, &slices[t]);
        }
        for (int t = 0; t < n_threads; t++) {
            pthread_join(threads[t], NULL);
            check ^= slices[t].sum;
        }
        double gbs =
            (double)(words / n_threads * n_threads) * sizeof(uint64_t) / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    printf("%.2f\n", best);
    free(data);
    return check == 42 ? 3 : 0; /* uses check; never 42 for this fill */
}
