/* probe.c -- `lockstep probe`: what this machine can hold (cores, memory,
 * instruction set, architecture, numerics contract) as one JSON line on
 * stdout. The gateway runs it on each host of the cluster as `mpirun -np 1
 * --host H lockstep probe` and parses the last line of the output
 * (cluster_probe_parse).
 *
 * `lockstep probe --links`, run under mpirun with one rank on each host,
 * measures the links between them instead: each ordered pair in turn
 * (the others wait at a barrier, so one pair loads the network at a
 * time) bounces a small message to time a round trip and a 1 MiB one to
 * time a transfer, through src/comm as the ranks of an instance talk;
 * rank 0 prints every pair (cluster_links_parse). */
#include "base/base.h"
#include "cli.h"
#include "cluster/cluster.h"
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINKS_SMALL_ROUNDS 32        /* round trips of a small message */
#define LINKS_LARGE_ROUNDS 6         /* round trips of a large one */
#define LINKS_LARGE_BYTES  (1 << 20) /* what the transfer carries one way */
#define LINKS_DEADLINE     5.0       /* seconds a rank waits for its peer */

static void probe_usage(FILE *out) {
    fprintf(out, "usage: lockstep probe [--links]\n\n"
                 "Prints one JSON line describing this machine, for `lockstep serve --cluster`:\n"
                 "  {\"hostname\":\"node1\",\"cores\":8,\"memory_total\":BYTES,"
                 "\"memory_available\":BYTES,\"isa\":\"avx2\",\"load\":0.50,\"arch\":\"x86_64\",\n"
                 "   \"numerics\":\"" CLUSTER_NUMERICS "\"}\n"
                 "isa is the instruction set a runner here would use (LOCKSTEP_ISA caps it),\n"
                 "arch the machine (x86_64, aarch64, ...), numerics the float reduction order\n"
                 "of this build's kernels: only hosts of one numerics share an instance.\n"
                 "--links: under mpirun with one rank on each host, measures the link between\n"
                 "every ordered pair of ranks (a small message's round trip, a 1 MiB transfer)\n"
                 "and rank 0 prints {\"links\":[{\"from\":0,\"to\":1,\"latency_us\":..,"
                 "\"bytes_per_second\":..},...]}.\n"
                 "Exits 0, or 1 with the reason on stderr.\n");
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int n) {
    qsort(values, (size_t)n, sizeof(*values), compare_doubles);
    return values[n / 2];
}

/* rounds round trips with peer of `bytes` out and 8 back (the measurer),
 * or back and forth the other way (its peer); the median in seconds on
 * the measurer. Tags name the pair and the round. */
static int bounce(struct comm *comm, int peer, int measurer, uint64_t pair, int rounds,
                  size_t bytes, const char *payload, double *seconds, char *err, size_t errlen) {
    double times[LINKS_SMALL_ROUNDS + LINKS_LARGE_ROUNDS] = {0};
    for (int r = 0; r < rounds; r++) {
        struct comm_tag out = {pair, (uint32_t)(2 * r + (bytes > 8))}, back = {pair, 1u << 20};
        uint64_t start = clock_now_us();
        void *message = NULL;
        size_t got = 0;
        int rc = measurer ? comm_send(comm, payload, bytes, peer, out, err, errlen)
                          : comm_recv(comm, peer, out, &message, &got, err, errlen);
        free(message);
        message = NULL;
        if (rc == 0)
            rc = measurer ? comm_recv(comm, peer, back, &message, &got, err, errlen)
                          : comm_send(comm, payload, 8, peer, back, err, errlen);
        free(message);
        if (rc) return rc;
        times[r] = (double)(clock_now_us() - start) * 1e-6;
    }
    *seconds = median(times, rounds);
    return 0;
}

/* Measures the link from rank `from` to rank `to` (both call it; the others
 * do not) into *link on `from`. */
static int measure_pair(struct comm *comm, int from, int to, uint64_t pair, const char *payload,
                        struct cluster_link *link, char *err, size_t errlen) {
    int me = comm_rank(comm), measurer = me == from, peer = measurer ? to : from;
    double small = 0, large = 0;
    if (bounce(comm, peer, measurer, pair, LINKS_SMALL_ROUNDS, 8, payload, &small, err, errlen) ||
        bounce(comm, peer, measurer, pair, LINKS_LARGE_ROUNDS, LINKS_LARGE_BYTES, payload, &large,
               err, errlen))
        return -1;
    if (!measurer) return 0;
    double transfer = large - small; /* the large trip less a small one's latencies */
    if (transfer <= 0) transfer = large;
    link->latency_us = small / 2 * 1e6;
    link->bytes_per_second = LINKS_LARGE_BYTES / transfer;
    return 0;
}

/* `lockstep probe --links` on one rank of the mpirun job. */
static int probe_links(int *argc, char ***argv) {
    struct comm *comm = NULL;
    char err[256] = "", *line = NULL;
    if (comm_mpi_create(argc, argv, &comm, err, sizeof(err))) {
        fprintf(stderr, "lockstep probe --links: %s\n", err);
        return 1;
    }
    comm_set_deadline(comm, LINKS_DEADLINE);
    int n = comm_size(comm), me = comm_rank(comm), rc = 0;
    size_t row_bytes = (size_t)n * sizeof(struct cluster_link);
    struct cluster_link *row = calloc((size_t)n, sizeof(*row));
    struct cluster_link *links = calloc((size_t)n * (size_t)n, sizeof(*links));
    size_t *sizes = calloc((size_t)n, sizeof(*sizes));
    char *payload = calloc(1, LINKS_LARGE_BYTES);
    if (!row || !links || !sizes || !payload || n > CLUSTER_HOSTS_MAX) {
        snprintf(err, sizeof(err),
                 n > CLUSTER_HOSTS_MAX ? "more ranks than hosts a cluster has" : "out of memory");
        rc = -1;
    }
    uint64_t pair = 0;
    for (int from = 0; from < n && rc == 0; from++)
        for (int to = 0; to < n && rc == 0; to++) {
            if (from == to) continue;
            rc = comm_barrier(comm, (struct comm_tag){++pair, 1u << 21}, err, sizeof(err));
            if (rc == 0 && (me == from || me == to))
                rc = measure_pair(comm, from, to, pair, payload, &row[to], err, sizeof(err));
        }
    for (int r = 0; r < n && sizes; r++) sizes[r] = row_bytes;
    if (rc == 0)
        rc = comm_gather(comm, row, row_bytes, links, sizes, 0, (struct comm_tag){++pair, 0}, err,
                         sizeof(err));
    size_t size = (size_t)n * (size_t)n * 96 + 32;
    if (rc == 0 && me == 0 && (line = malloc(size)) != NULL &&
        cluster_links_format(links, n, line, size) >= 0)
        printf("%s\n", line);
    else if (rc == 0 && me == 0)
        rc = -1;
    if (rc) fprintf(stderr, "lockstep probe --links: rank %d: %s\n", me, err[0] ? err : "failed");
    free(line);
    free(payload);
    free(sizes);
    free(links);
    free(row);
    comm_free(comm);
    return rc || fflush(stdout) != 0 ? 1 : 0;
}

int cli_probe(int argc, char **argv) {
    int links = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            probe_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--links")) {
            links = 1;
            continue;
        }
        fprintf(stderr, "lockstep probe: unknown argument '%s' (see --help)\n", argv[i]);
        return 2;
    }
    if (links) return probe_links(&argc, &argv);
    struct cluster_probe probe;
    char err[256] = "", line[512];
    if (cluster_probe_local(&probe, err, sizeof(err)) ||
        cluster_probe_format(&probe, line, sizeof(line)) < 0) {
        fprintf(stderr, "lockstep probe: %s\n", err[0] ? err : "cannot describe this machine");
        return 1;
    }
    printf("%s\n", line);
    return fflush(stdout) == 0 ? 0 : 1;
}
