/* comm_bench.c -- all-reduce and all-gather latency of src/comm, for issue
 * 3's target (within 1.5x of a bare MPI_Allreduce of the same size, same
 * run).
 *
 *   comm_bench local [ITERATIONS]                  2 threads, local backend
 *   mpirun -np 2 ... comm_bench mpi [ITERATIONS]   mpi backend vs bare MPI
 *
 * Sizes are the all-reduces of a forward pass: 192 floats (kjv2m's dim at
 * tp=2 is 192: 8 all-reduces per token) and 768 floats (the 85M model: 24
 * per token); and the all-gather of the engine's column-split products for
 * one token of the 85M model: 768 * 4 floats per rank (4 partial products
 * of dim 768). The mpi mode measures, in alternating rounds so that noise
 * hits each equally, MPI_Allreduce, MPI_Iallreduce polled with MPI_Test, and
 * comm_allreduce_sum, then MPI_Allgather and comm_allgather; it prints the
 * median round of each, microseconds per call. Not a test: numbers only. */
#include "comm/comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef LOCKSTEP_HAVE_MPI
#include <mpi.h>
#endif

#define ROUNDS 7

static const size_t sizes[] = {192, 768};

#define GATHER_FLOATS (768 * 4) /* all-gather: floats each rank sends */
#define MAX_RANKS     16        /* all-gather: ranks the buffers hold */

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int n) {
    qsort(values, (size_t)n, sizeof(double), compare_doubles);
    return values[n / 2];
}

/* Microseconds per comm_allreduce_sum of n floats over `iterations` calls;
 * the tag's step continues from *step. Exits on a failure. */
static double time_comm(struct comm *comm, size_t n, int iterations, uint64_t *step) {
    static float buf[1024];
    char err[512];
    for (size_t i = 0; i < n; i++) buf[i] = (float)i * 1e-3f;
    double start = now_seconds();
    for (int it = 0; it < iterations; it++) {
        struct comm_tag tag = {(*step)++, 0};
        int rc = comm_allreduce_sum(comm, buf, n, tag, err, sizeof(err));
        if (rc) {
            fprintf(stderr, "comm_bench: %s\n", err);
            exit(comm_exit_code(rc));
        }
        for (size_t i = 0; i < n; i++) buf[i] *= 0.5f; /* keep the values finite */
    }
    return (now_seconds() - start) * 1e6 / iterations;
}

/* Microseconds per comm_allgather of GATHER_FLOATS floats from each rank,
 * sent from the rank's own place in the result as the engine does. */
static double time_comm_allgather(struct comm *comm, int iterations, uint64_t *step) {
    static _Thread_local float all[MAX_RANKS * GATHER_FLOATS];
    char err[512];
    float *mine = all + (size_t)comm_rank(comm) * GATHER_FLOATS;
    for (size_t i = 0; i < GATHER_FLOATS; i++) mine[i] = (float)i * 1e-3f;
    double start = now_seconds();
    for (int it = 0; it < iterations; it++) {
        struct comm_tag tag = {(*step)++, 1};
        int rc =
            comm_allgather(comm, mine, sizeof(float) * GATHER_FLOATS, all, tag, err, sizeof(err));
        if (rc) {
            fprintf(stderr, "comm_bench: %s\n", err);
            exit(comm_exit_code(rc));
        }
    }
    return (now_seconds() - start) * 1e6 / iterations;
}

struct local_rank {
    struct comm *comm;
    int iterations;
    double micros[3][ROUNDS]; /* per size, then the all-gather; per round */
};

static void *run_local_rank(void *arg) {
    struct local_rank *rank = arg;
    uint64_t step = 0;
    time_comm(rank->comm, 768, rank->iterations / 10, &step); /* warm up */
    for (int round = 0; round < ROUNDS; round++) {
        for (int s = 0; s < 2; s++)
            rank->micros[s][round] = time_comm(rank->comm, sizes[s], rank->iterations, &step);
        rank->micros[2][round] = time_comm_allgather(rank->comm, rank->iterations, &step);
    }
    return NULL;
}

static int bench_local(int iterations) {
    struct comm *ranks[2];
    char err[512];
    if (comm_local_create(2, ranks, err, sizeof(err)) != COMM_OK) {
        fprintf(stderr, "comm_bench: %s\n", err);
        return 1;
    }
    struct local_rank runs[2];
    pthread_t threads[2];
    for (int r = 0; r < 2; r++) {
        runs[r].comm = ranks[r];
        runs[r].iterations = iterations;
        pthread_create(&threads[r], NULL, run_local_rank, &runs[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(threads[r], NULL);
    for (int s = 0; s < 2; s++)
        printf("local, 2 ranks: all-reduce of %4zu floats: %7.2f us (median of %d rounds of "
               "%d)\n",
               sizes[s], median(runs[0].micros[s], ROUNDS), ROUNDS, iterations);
    printf("local, 2 ranks: all-gather of %d floats per rank: %7.2f us (median of %d rounds of "
           "%d)\n",
           GATHER_FLOATS, median(runs[0].micros[2], ROUNDS), ROUNDS, iterations);
    comm_free(ranks[0]);
    comm_free(ranks[1]);
    return 0;
}

#ifdef LOCKSTEP_HAVE_MPI

/* Microseconds per bare MPI_Allreduce (blocking = 0) or per MPI_Iallreduce
 * polled with MPI_Test (blocking = 1). */
static double time_mpi(size_t n, int iterations, int polled) {
    static float in[1024], out[1024];
    for (size_t i = 0; i < n; i++) in[i] = (float)i * 1e-3f;
    double start = now_seconds();
    for (int it = 0; it < iterations; it++) {
        if (polled) {
            MPI_Request request;
            int done = 0;
            MPI_Iallreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
            while (!done) MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        } else {
            MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
    }
    return (now_seconds() - start) * 1e6 / iterations;
}

/* Microseconds per bare MPI_Allgather of GATHER_FLOATS floats per rank. */
static double time_mpi_allgather(int iterations) {
    static float in[GATHER_FLOATS], out[MAX_RANKS * GATHER_FLOATS];
    for (size_t i = 0; i < GATHER_FLOATS; i++) in[i] = (float)i * 1e-3f;
    double start = now_seconds();
    for (int it = 0; it < iterations; it++)
        MPI_Allgather(in, GATHER_FLOATS, MPI_FLOAT, out, GATHER_FLOATS, MPI_FLOAT, MPI_COMM_WORLD);
    return (now_seconds() - start) * 1e6 / iterations;
}

static int bench_mpi(int *argc, char ***argv, int iterations) {
    struct comm *comm;
    char err[512];
    int rc = comm_mpi_create(argc, argv, &comm, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "comm_bench: %s\n", err);
        return comm_exit_code(rc);
    }
    if (comm_size(comm) > MAX_RANKS) {
        fprintf(stderr, "comm_bench: at most %d ranks\n", MAX_RANKS);
        comm_free(comm);
        return 2;
    }
    uint64_t step = 0;
    double micros[2][3][ROUNDS], gather[2][ROUNDS];
    time_mpi(768, iterations / 10, 0);
    time_comm(comm, 768, iterations / 10, &step);
    for (int round = 0; round < ROUNDS; round++) {
        for (int s = 0; s < 2; s++) {
            micros[s][0][round] = time_mpi(sizes[s], iterations, 0);
            micros[s][1][round] = time_mpi(sizes[s], iterations, 1);
            micros[s][2][round] = time_comm(comm, sizes[s], iterations, &step);
        }
        gather[0][round] = time_mpi_allgather(iterations);
        gather[1][round] = time_comm_allgather(comm, iterations, &step);
    }
    if (comm_rank(comm) == 0) {
        double gather_bare = median(gather[0], ROUNDS), gather_ours = median(gather[1], ROUNDS);
        for (int s = 0; s < 2; s++) {
            double bare = median(micros[s][0], ROUNDS), polled = median(micros[s][1], ROUNDS);
            double ours = median(micros[s][2], ROUNDS);
            printf("mpi, %d ranks, %4zu floats: MPI_Allreduce %6.2f us, MPI_Iallreduce+Test "
                   "%6.2f us, comm_allreduce_sum %6.2f us (%.2fx bare)\n",
                   comm_size(comm), sizes[s], bare, polled, ours, ours / bare);
        }
        printf("mpi, %d ranks, all-gather of %d floats per rank: MPI_Allgather %6.2f us, "
               "comm_allgather %6.2f us (%.2fx bare)\n",
               comm_size(comm), GATHER_FLOATS, gather_bare, gather_ours, gather_ours / gather_bare);
        printf("(median of %d rounds of %d calls each)\n", ROUNDS, iterations);
    }
    comm_free(comm);
    return 0;
}

#endif

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "local") != 0 && strcmp(argv[1], "mpi") != 0)) {
        fprintf(stderr, "usage: comm_bench local|mpi [ITERATIONS]\n");
        return 2;
    }
    int iterations = argc > 2 ? atoi(argv[2]) : 20000;
    if (iterations < 10) iterations = 10;
    if (strcmp(argv[1], "local") == 0) return bench_local(iterations);
#ifdef LOCKSTEP_HAVE_MPI
    return bench_mpi(&argc, &argv, iterations);
#else
    fprintf(stderr, "comm_bench: built without MPI\n");
    return 2;
#endif
}
