/* comm_mpi_rank.c -- one rank of the mpi backend tests, started by
 * test_comm_mpi.c under mpirun: `comm_mpi_rank MODE DEADLINE_SECONDS`.
 *
 * MODE is what the job does:
 *   collectives  many all-reduces (checked bitwise against the rank-order
 *                sum), broadcasts, gathers of unequal sizes, all-gathers
 *                (every other one sent from the rank's own place in the
 *                result) and barriers; prints "rank R: ok" and exits 0;
 *   tag          after a few good calls the last rank enters (step 12,
 *                index 5) while the others enter (step 12, index 3);
 *   kill         the last rank SIGKILLs itself before step 12's all-reduce;
 *   stop         the last rank SIGSTOPs itself before step 12's all-reduce;
 *   links        point to point steps around the ring of ranks, rank 0
 *                keeping 1 to COMM_MAILBOX_SLOTS of them in flight, each
 *                checked byte for byte, and between rounds an all-reduce in
 *                the groups comm_mpi_split makes of the even and odd ranks.
 * A rank whose collective fails prints the message on stderr and exits at
 * once with comm_exit_code() without finalizing MPI, as comm.h asks. */
#include "comm/comm.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ITERATIONS 500
#define MAX_FLOATS 800

static struct comm *comm;

/* Same value generator as test_comm_local.c: order-sensitive floats. */
static float test_value(int iteration, int rank, size_t i) {
    uint32_t h = (uint32_t)iteration * 2654435761u ^ (uint32_t)rank * 40503u ^ (uint32_t)i * 97u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    float scale = (float)(1u << (h % 16)) / 256.0f;
    return ((float)(h % 2000001u) - 1000000.0f) * 1e-3f * scale;
}

/* Leaves on a failed collective: message, exit code, no MPI_Finalize.
 * The second line says when (CLOCK_MONOTONIC, which the test driver shares)
 * so the driver can time the rank itself, not mpirun's teardown. */
static void check_rc(int rc, const char *err) {
    if (rc == COMM_OK) return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    fprintf(stderr, "%s\nrank %d: exiting with code %d at %.3f\n", err, comm ? comm_rank(comm) : -1,
            comm_exit_code(rc), (double)now.tv_sec + (double)now.tv_nsec * 1e-9);
    fflush(stderr);
    _exit(comm_exit_code(rc));
}

static void fail(const char *what, int iteration) {
    fprintf(stderr, "rank %d: wrong result: %s in iteration %d\n", comm_rank(comm), what,
            iteration);
    fflush(stderr);
    _exit(1);
}

/* The byte i of rank r's all-gather contribution in iteration it. */
static unsigned char gather_byte(int it, int rank, size_t i) {
    return (unsigned char)(rank * 71 + i * 3 + it);
}

/* One all-gather of iteration it; odd iterations send in place. */
static void run_allgather(int it, int rank, int size, struct comm_tag tag) {
    static unsigned char send[MAX_FLOATS * 4], recv[16 * MAX_FLOATS * 4];
    char err[512];
    size_t bytes = (it % 5 == 0) ? 768 * 4 : (size_t)(it * 53 % (MAX_FLOATS * 4));
    unsigned char *from = it % 2 ? recv + (size_t)rank * bytes : send;
    memset(recv, 0xEE, sizeof(recv));
    for (size_t i = 0; i < bytes; i++) from[i] = gather_byte(it, rank, i);
    check_rc(comm_allgather(comm, from, bytes, recv, tag, err, sizeof(err)), err);
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < bytes; i++)
            if (recv[(size_t)r * bytes + i] != gather_byte(it, r, i)) fail("all-gather", it);
    for (size_t i = (size_t)size * bytes; i < sizeof(recv); i++)
        if (recv[i] != 0xEE) fail("all-gather (past the end)", it);
}

static void run_collectives(int rank, int size) {
    static float buf[MAX_FLOATS], expect[MAX_FLOATS];
    unsigned char bytes[256], gathered[64 * 16];
    char err[512];
    for (int it = 0; it < ITERATIONS; it++) {
        struct comm_tag tag = {(uint64_t)it, 0};
        size_t n = (it % 7 == 0) ? 768 : (size_t)(it * 37 % MAX_FLOATS);
        for (size_t i = 0; i < n; i++) {
            buf[i] = test_value(it, rank, i);
            float sum = test_value(it, 0, i);
            for (int r = 1; r < size; r++) sum += test_value(it, r, i);
            expect[i] = sum;
        }
        check_rc(comm_allreduce_sum(comm, buf, n, tag, err, sizeof(err)), err);
        if (memcmp(buf, expect, n * sizeof(float)) != 0) fail("all-reduce", it);

        int root = it % size;
        size_t count = (size_t)(it % 200) + 1;
        for (size_t i = 0; i < count; i++) bytes[i] = rank == root ? (unsigned char)(it + i) : 0xEE;
        tag.index = 1;
        check_rc(comm_broadcast(comm, bytes, count, root, tag, err, sizeof(err)), err);
        for (size_t i = 0; i < count; i++)
            if (bytes[i] != (unsigned char)(it + i)) fail("broadcast", it);

        size_t sizes[16], mine = (size_t)((rank * 13 + it) % 64);
        for (int r = 0; r < size && r < 16; r++) sizes[r] = (size_t)((r * 13 + it) % 64);
        for (size_t i = 0; i < mine; i++) bytes[i] = (unsigned char)(rank * 50 + i + it);
        tag.index = 2;
        check_rc(comm_gather(comm, bytes, mine, gathered, sizes, root, tag, err, sizeof(err)), err);
        if (rank == root) {
            size_t at = 0;
            for (int r = 0; r < size; r++)
                for (size_t i = 0; i < sizes[r]; i++, at++)
                    if (gathered[at] != (unsigned char)(r * 50 + i + it)) fail("gather", it);
        }
        tag.index = 3;
        if (size <= 16) run_allgather(it, rank, size, tag);
        tag.index = 4;
        check_rc(comm_barrier(comm, tag, err, sizeof(err)), err);
    }
}

/* A few good all-reduces, then the fault of the mode at step 12. */
static void run_fault(const char *mode, int rank, int size) {
    float buf[192] = {0};
    char err[512];
    for (uint32_t i = 0; i < 4; i++) {
        struct comm_tag tag = {11, i};
        check_rc(comm_allreduce_sum(comm, buf, 192, tag, err, sizeof(err)), err);
    }
    struct comm_tag tag = {12, 3};
    if (rank == size - 1) {
        if (strcmp(mode, "tag") == 0) tag.index = 5;
        if (strcmp(mode, "kill") == 0) raise(SIGKILL);
        if (strcmp(mode, "stop") == 0) raise(SIGSTOP);
    }
    check_rc(comm_allreduce_sum(comm, buf, 192, tag, err, sizeof(err)), err);
    fprintf(stderr, "rank %d: step 12 completed although a fault was injected\n", rank);
    _exit(1);
}

/* Byte i of what rank `from` sends in step k, and the step's size. */
static unsigned char link_byte(int k, int from, size_t i) {
    return (unsigned char)(k * 31 + from * 7 + i);
}
static size_t link_size(int k) {
    return k % 7 == 0 ? 0 : (size_t)(k * 977 % 70000);
}

static void link_send(int k, int dest) {
    static unsigned char data[70000];
    char err[512];
    size_t bytes = link_size(k);
    for (size_t i = 0; i < bytes; i++) data[i] = link_byte(k, comm_rank(comm), i);
    check_rc(
        comm_send(comm, data, bytes, dest, (struct comm_tag){(uint64_t)k, 3}, err, sizeof(err)),
        err);
}

static void link_receive(int k, int source) {
    char err[512];
    void *message = NULL;
    size_t bytes = 0;
    check_rc(comm_recv(comm, source, (struct comm_tag){(uint64_t)k, 3}, &message, &bytes, err,
                       sizeof(err)),
             err);
    const unsigned char *m = message;
    if (bytes != link_size(k)) fail("message size", k);
    for (size_t i = 0; i < bytes; i++)
        if (m[i] != link_byte(k, source, i)) fail("message bytes", k);
    free(message);
}

/* One round of `steps` steps around the ring with in_flight out at once. */
static void run_ring(int rank, int size, int steps, int in_flight) {
    if (rank == 0) {
        for (int submitted = 0, collected = 0; collected < steps;)
            if (submitted < steps && submitted - collected < in_flight)
                link_send(submitted++, 1);
            else
                link_receive(collected++, size - 1);
        return;
    }
    for (int k = 0; k < steps; k++) {
        link_receive(k, rank - 1);
        link_send(k, (rank + 1) % size);
    }
}

static void run_links(int rank, int size) {
    char err[512];
    struct comm *half = NULL;
    check_rc(comm_mpi_split(comm, rank % 2, rank, &half, err, sizeof(err)), err);
    if (comm_size(half) != (size + 1 - rank % 2) / 2 || comm_rank(half) != rank / 2)
        fail("split group", 0);
    for (int in_flight = 1; in_flight <= COMM_MAILBOX_SLOTS; in_flight *= 2) {
        run_ring(rank, size, 100, in_flight);
        float value = (float)rank, sum = 0;
        for (int r = rank % 2; r < size; r += 2) sum += (float)r;
        check_rc(comm_allreduce_sum(half, &value, 1, (struct comm_tag){(uint64_t)in_flight, 0}, err,
                                    sizeof(err)),
                 err);
        if (value != sum) fail("all-reduce in the split group", in_flight);
    }
    comm_free(half);
}

int main(int argc, char **argv) {
    char err[512];
    if (argc != 3) {
        fprintf(stderr, "usage: comm_mpi_rank collectives|links|tag|kill|stop DEADLINE_SECONDS\n");
        return 2;
    }
    int rc = comm_mpi_create(&argc, &argv, &comm, err, sizeof(err));
    check_rc(rc, err);
    comm_set_deadline(comm, atof(argv[2]));
    int rank = comm_rank(comm), size = comm_size(comm);
    if (strcmp(argv[1], "collectives") == 0 || strcmp(argv[1], "links") == 0) {
        if (argv[1][0] == 'c')
            run_collectives(rank, size);
        else
            run_links(rank, size);
        printf("rank %d: ok\n", rank);
        fflush(stdout);
        comm_free(comm);
        return 0;
    }
    run_fault(argv[1], rank, size);
    return 1;
}
