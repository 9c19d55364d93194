/* test_comm_local.c -- the local backend of src/comm: ranks as threads.
 *
 * Checks that the collectives give exact results (the all-reduce equals the
 * rank-order sum bitwise on every rank, the all-gather the concatenation in
 * rank order, also when sent from its own place in the result) for 1..4
 * ranks over thousands of mixed calls, and that the failures I2 and I3
 * promise happen instead of hangs: a tag mismatch, a collective kind or
 * size mismatch, a stalled rank (the deadline, with little CPU burnt while
 * waiting), a rank that leaves.
 *
 * ctest-labels: concurrency */
#include "comm/comm.h"
#include "testutil.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RANKS  4
#define ITERATIONS 2000
#define MAX_FLOATS 800
#define ERR_BYTES  512

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A float that depends on (iteration, rank, element), spread over many
 * magnitudes so the order of a sum changes its last bits. */
static float test_value(int iteration, int rank, size_t i) {
    uint32_t h = (uint32_t)iteration * 2654435761u ^ (uint32_t)rank * 40503u ^ (uint32_t)i * 97u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    float scale = (float)(1u << (h % 16)) / 256.0f;
    return ((float)(h % 2000001u) - 1000000.0f) * 1e-3f * scale;
}

/* One thread per rank runs a scenario function with this context. */
struct rank_run {
    struct comm *comm;
    int rank, size;
    int failures;        /* checks failed in this thread */
    int rc;              /* what the scenario's interesting call returned */
    char err[ERR_BYTES]; /* its message */
    double elapsed;      /* seconds that call took */
    double cpu;          /* process CPU seconds used meanwhile */
    struct comm **all;   /* every rank's handle (for comm_get_state) */
};

typedef void *(*scenario_fn)(void *run);

/* Runs fn on n threads (one per rank of a fresh group), then frees the group
 * unless a scenario freed handles itself (those are set to NULL). */
static void run_ranks(int n, scenario_fn fn, struct rank_run *runs, double deadline) {
    struct comm *ranks[MAX_RANKS];
    char err[ERR_BYTES];
    memset(runs, 0, (size_t)n * sizeof(*runs));
    for (int r = 0; r < n; r++) runs[r].rc = -100; /* "never ran" */
    int rc = comm_local_create(n, ranks, err, sizeof(err));
    CHECK_MSG(rc == COMM_OK, "%s", err);
    if (rc) return;
    pthread_t threads[MAX_RANKS];
    for (int r = 0; r < n; r++) {
        runs[r].comm = ranks[r];
        runs[r].rank = r;
        runs[r].size = n;
        runs[r].all = ranks;
        comm_set_deadline(ranks[r], deadline);
        CHECK(comm_rank(ranks[r]) == r && comm_size(ranks[r]) == n);
        CHECK(comm_backend(ranks[r]) == COMM_LOCAL);
    }
    for (int r = 0; r < n; r++) CHECK(pthread_create(&threads[r], NULL, fn, &runs[r]) == 0);
    for (int r = 0; r < n; r++) {
        pthread_join(threads[r], NULL);
        test_failures += runs[r].failures;
    }
    for (int r = 0; r < n; r++) comm_free(runs[r].comm);
}

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define RANK_CHECK(run, cond, ...)                                                                 \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: rank %d: CHECK failed: %s: ", __FILE__, __LINE__, (run)->rank, \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            (run)->failures++;                                                                     \
        }                                                                                          \
    } while (0)

/* The byte i of rank r's all-gather contribution in iteration it. */
static unsigned char gather_byte(int it, int rank, size_t i) {
    return (unsigned char)(rank * 71 + i * 3 + it);
}

/* One all-gather of iteration it (sizes change with it; odd iterations
 * send from the rank's own place in the result, even ones from a separate
 * buffer); checks every rank's bytes arrived. */
static void check_allgather(struct rank_run *run, int it, struct comm_tag tag) {
    unsigned char send[MAX_FLOATS * 4], recv[MAX_RANKS * MAX_FLOATS * 4];
    char err[ERR_BYTES];
    size_t bytes = (it % 5 == 0) ? 768 * 4 : (size_t)(it * 53 % (MAX_FLOATS * 4));
    int in_place = it % 2;
    unsigned char *from = in_place ? recv + (size_t)run->rank * bytes : send;
    memset(recv, 0xEE, sizeof(recv));
    for (size_t i = 0; i < bytes; i++) from[i] = gather_byte(it, run->rank, i);
    int rc = comm_allgather(run->comm, from, bytes, recv, tag, err, sizeof(err));
    RANK_CHECK(run, rc == COMM_OK, "all-gather %d: %s", it, err);
    size_t wrong = 0;
    for (int r = 0; r < run->size; r++)
        for (size_t i = 0; i < bytes; i++)
            wrong += recv[(size_t)r * bytes + i] != gather_byte(it, r, i);
    for (size_t i = (size_t)run->size * bytes; i < sizeof(recv); i++) wrong += recv[i] != 0xEE;
    RANK_CHECK(run, wrong == 0, "all-gather %d of %zu bytes%s: %zu bytes wrong", it, bytes,
               in_place ? " in place" : "", wrong);
}

/* Thousands of all-reduces, broadcasts, gathers, all-gathers and barriers
 * with sizes and roots that change every iteration. */
static void *scenario_exact(void *arg) {
    struct rank_run *run = arg;
    float buf[MAX_FLOATS], expect[MAX_FLOATS];
    unsigned char bytes[256], gathered[MAX_RANKS * 64];
    char err[ERR_BYTES];
    for (int it = 0; it < ITERATIONS && run->failures == 0; it++) {
        struct comm_tag tag = {(uint64_t)it, 0};
        size_t n = (it % 7 == 0) ? 768 : (size_t)(it * 37 % MAX_FLOATS);
        for (size_t i = 0; i < n; i++) {
            buf[i] = test_value(it, run->rank, i);
            float sum = test_value(it, 0, i);
            for (int r = 1; r < run->size; r++) sum += test_value(it, r, i);
            expect[i] = sum;
        }
        int rc = comm_allreduce_sum(run->comm, buf, n, tag, err, sizeof(err));
        RANK_CHECK(run, rc == COMM_OK, "all-reduce %d: %s", it, err);
        RANK_CHECK(run, memcmp(buf, expect, n * sizeof(float)) == 0,
                   "all-reduce %d of %zu floats differs from the rank-order sum", it, n);

        int root = it % run->size;
        size_t count = (size_t)(it % 200) + 1;
        for (size_t i = 0; i < count; i++)
            bytes[i] = run->rank == root ? (unsigned char)(it + i) : 0xEE;
        tag.index = 1;
        rc = comm_broadcast(run->comm, bytes, count, root, tag, err, sizeof(err));
        RANK_CHECK(run, rc == COMM_OK, "broadcast %d: %s", it, err);
        for (size_t i = 0; i < count; i++)
            RANK_CHECK(run, bytes[i] == (unsigned char)(it + i), "broadcast %d byte %zu", it, i);

        size_t sizes[MAX_RANKS], mine = (size_t)((run->rank * 13 + it) % 64);
        for (int r = 0; r < run->size; r++) sizes[r] = (size_t)((r * 13 + it) % 64);
        for (size_t i = 0; i < mine; i++) bytes[i] = (unsigned char)(run->rank * 50 + i + it);
        memset(gathered, 0xEE, sizeof(gathered));
        tag.index = 2;
        rc = comm_gather(run->comm, bytes, mine, gathered, sizes, root, tag, err, sizeof(err));
        RANK_CHECK(run, rc == COMM_OK, "gather %d: %s", it, err);
        if (run->rank == root) {
            size_t at = 0;
            for (int r = 0; r < run->size; r++)
                for (size_t i = 0; i < sizes[r]; i++, at++)
                    RANK_CHECK(run, gathered[at] == (unsigned char)(r * 50 + i + it),
                               "gather %d: byte %zu of rank %d", it, i, r);
        }
        tag.index = 3;
        check_allgather(run, it, tag);
        tag.index = 4;
        rc = comm_barrier(run->comm, tag, err, sizeof(err));
        RANK_CHECK(run, rc == COMM_OK, "barrier %d: %s", it, err);
    }
    struct comm_state state;
    comm_get_state(run->comm, &state);
    RANK_CHECK(run, state.completed == 5u * ITERATIONS && state.waiting == 0,
               "state: %llu completed, waiting %d", (unsigned long long)state.completed,
               state.waiting);
    RANK_CHECK(run, state.tag.step == ITERATIONS - 1 && state.tag.index == 4,
               "state tag (%llu, %u)", (unsigned long long)state.tag.step, state.tag.index);
    return NULL;
}

static void test_exact(void) {
    struct rank_run runs[MAX_RANKS];
    for (int n = 1; n <= MAX_RANKS; n++) {
        double start = now_seconds();
        run_ranks(n, scenario_exact, runs, 10.0);
        printf("exact collectives, %d rank(s), %d iterations: %.3f s\n", n, ITERATIONS,
               now_seconds() - start);
    }
}

/* The collective the fault scenarios run: an all-reduce of 192 floats, or
 * (fault_allgather = 1) an all-gather of 192 floats from each rank. Set
 * before the rank threads start. */
static int fault_allgather;

static int fault_collective(struct rank_run *run, struct comm_tag tag, char *err, size_t errlen) {
    float buf[192] = {0}, all[MAX_RANKS * 192];
    if (fault_allgather) return comm_allgather(run->comm, buf, sizeof(buf), all, tag, err, errlen);
    return comm_allreduce_sum(run->comm, buf, 192, tag, err, errlen);
}

/* Every rank does 3 good collectives, then one at (12, 3), except the last
 * rank which is at (12, 5). */
static void *scenario_tag_mismatch(void *arg) {
    struct rank_run *run = arg;
    char err[ERR_BYTES];
    for (uint32_t i = 0; i < 3; i++) {
        struct comm_tag tag = {11, i};
        int rc = fault_collective(run, tag, err, sizeof(err));
        RANK_CHECK(run, rc == COMM_OK, "%s", err);
    }
    struct comm_tag tag = {12, run->rank == run->size - 1 ? 5u : 3u};
    double start = now_seconds();
    run->rc = fault_collective(run, tag, run->err, sizeof(run->err));
    run->elapsed = now_seconds() - start;
    /* The group is broken now: a later call fails at once. */
    struct comm_tag next = {13, 0};
    int rc = comm_barrier(run->comm, next, err, sizeof(err));
    RANK_CHECK(run, rc == run->rc && strstr(err, "refused"), "after the failure: %d %s", rc, err);
    return NULL;
}

static void tag_mismatch_round(void) {
    struct rank_run runs[MAX_RANKS];
    for (int kind = 0; kind < 4; kind++) {
        int n = 2 + kind % 2;
        fault_allgather = kind / 2;
        run_ranks(n, scenario_tag_mismatch, runs, 5.0);
        int last = n - 1;
        char want[256];
        for (int r = 0; r < n; r++) {
            CHECK_MSG(runs[r].rc == COMM_ERR_TAG, "n=%d rank %d: %d %s", n, r, runs[r].rc,
                      runs[r].err);
            CHECK_MSG(runs[r].elapsed < 1.0, "n=%d rank %d took %.3f s", n, r, runs[r].elapsed);
            /* The last rank names whichever peer it saw first. */
            for (int peer = 0; peer < n; peer++) {
                if (r == last && peer < last)
                    snprintf(want, sizeof(want),
                             "rank %d: collective tag mismatch: this rank is in (step 12, index "
                             "5), rank %d is in (step 12, index 3)",
                             r, peer);
                else if (r != last && peer == last)
                    snprintf(want, sizeof(want),
                             "rank %d: collective tag mismatch: this rank is in (step 12, index "
                             "3), rank %d is in (step 12, index 5)",
                             r, last);
                else
                    continue;
                if (strcmp(runs[r].err, want) == 0) break;
            }
            CHECK_MSG(strcmp(runs[r].err, want) == 0, "n=%d, all-gather %d: got \"%s\"", n,
                      fault_allgather, runs[r].err);
        }
    }
}

/* The mismatch round after round for TAG_MISMATCH_SECONDS, so that the
 * ranks reach it in many orders. A rank descheduled within its last good
 * collective used to fail it ("abandoned") once the ranks past it had
 * broken the group on the mismatch: 2 rounds in 2000 failed so on an idle
 * machine, 33-43 in 20000 with the other core busy. */
#define TAG_MISMATCH_SECONDS 2.0

static void test_tag_mismatch(void) {
    double end = now_seconds() + TAG_MISMATCH_SECONDS;
    int rounds = 0, failures = test_failures;
    do {
        tag_mismatch_round();
        rounds++;
    } while (now_seconds() < end && test_failures == failures);
    printf("tag mismatch: %d rounds\n", rounds);
}

/* Same tag, different operations: rank 0 broadcasts, rank 1 all-reduces. */
static void *scenario_kind_mismatch(void *arg) {
    struct rank_run *run = arg;
    float buf[4] = {1, 2, 3, 4};
    struct comm_tag tag = {7, 1};
    if (run->rank == 0)
        run->rc = comm_broadcast(run->comm, buf, sizeof(buf), 0, tag, run->err, sizeof(run->err));
    else
        run->rc = comm_allreduce_sum(run->comm, buf, 4, tag, run->err, sizeof(run->err));
    return NULL;
}

/* Same tag, same operation, different sizes: rank r all-gathers 16 + 8 r
 * bytes. */
static void *scenario_size_mismatch(void *arg) {
    struct rank_run *run = arg;
    unsigned char send[32] = {0}, recv[2 * 32];
    struct comm_tag tag = {7, 2};
    run->rc = comm_allgather(run->comm, send, 16 + 8 * (size_t)run->rank, recv, tag, run->err,
                             sizeof(run->err));
    return NULL;
}

static void test_kind_mismatch(void) {
    struct rank_run runs[2];
    run_ranks(2, scenario_kind_mismatch, runs, 5.0);
    CHECK_MSG(runs[0].rc == COMM_ERR_TAG && strstr(runs[0].err, "this rank is in a broadcast") &&
                  strstr(runs[0].err, "rank 1 in all-reduce"),
              "%s", runs[0].err);
    CHECK_MSG(runs[1].rc == COMM_ERR_TAG && strstr(runs[1].err, "this rank is in a all-reduce") &&
                  strstr(runs[1].err, "rank 0 in broadcast"),
              "%s", runs[1].err);
    run_ranks(2, scenario_size_mismatch, runs, 5.0);
    CHECK_MSG(runs[0].rc == COMM_ERR_TAG &&
                  strcmp(runs[0].err,
                         "rank 0: collective mismatch in (step 7, index 2): this rank is in a "
                         "all-gather of 16 bytes (root 0), rank 1 in an all-gather of another "
                         "size (24 bytes, root 0)") == 0,
              "%s", runs[0].err);
    CHECK_MSG(runs[1].rc == COMM_ERR_TAG &&
                  strcmp(runs[1].err,
                         "rank 1: collective mismatch in (step 7, index 2): this rank is in a "
                         "all-gather of 24 bytes (root 0), rank 0 in an all-gather of another "
                         "size (16 bytes, root 0)") == 0,
              "%s", runs[1].err);
}

/* The last rank never enters the collective; it returns at once and its
 * handle stays in the group (not freed), so only the deadline can end the
 * others' wait. */
static void *scenario_stall(void *arg) {
    struct rank_run *run = arg;
    if (run->rank == run->size - 1) return NULL;
    struct comm_tag tag = {3, 1};
    double start = now_seconds(), cpu = cpu_seconds();
    run->rc = fault_collective(run, tag, run->err, sizeof(run->err));
    run->elapsed = now_seconds() - start;
    run->cpu = cpu_seconds() - cpu;
    return NULL;
}

static void test_stall(void) {
    struct rank_run runs[MAX_RANKS];
    for (int kind = 0; kind < 4; kind++) {
        int n = 2 + kind % 2;
        fault_allgather = kind / 2;
        const char *name = fault_allgather ? "all-gather" : "all-reduce";
        run_ranks(n, scenario_stall, runs, 0.5);
        /* The first rank to pass its deadline reports it; a rank still
         * waiting then gives up too, reporting that rank's failure. */
        int reported = 0;
        for (int r = 0; r < n - 1; r++) {
            CHECK_MSG(runs[r].rc == COMM_ERR_DEADLINE, "rank %d: %d %s", r, runs[r].rc,
                      runs[r].err);
            CHECK_MSG(runs[r].elapsed >= 0.45 && runs[r].elapsed < 0.8,
                      "rank %d waited %.3f s (deadline 0.5 s)", r, runs[r].elapsed);
            char want[128], prefix[32], deadline[96], abandoned[96];
            snprintf(want, sizeof(want), "not arrived: rank %d (last in step 0, index 0)", n - 1);
            snprintf(prefix, sizeof(prefix), "rank %d: ", r);
            snprintf(deadline, sizeof(deadline),
                     "deadline of 0.500 s passed in %s (step 3, index 1)", name);
            snprintf(abandoned, sizeof(abandoned), "%s (step 3, index 1) abandoned: rank ", name);
            int own = strstr(runs[r].err, deadline) && strstr(runs[r].err, want);
            int other = strstr(runs[r].err, abandoned) &&
                        strstr(runs[r].err, "failed in the group (deadline passed)");
            CHECK_MSG(strncmp(runs[r].err, prefix, strlen(prefix)) == 0 && (own || other),
                      "rank %d: %s", r, runs[r].err);
            reported += own;
        }
        CHECK_MSG(reported >= 1, "no rank reported its deadline");
    }
}

/* One rank waits 1 s for a stalled peer: the process must stay nearly idle
 * (the wait sleeps after its short spin). */
static void test_idle_wait(void) {
    struct rank_run runs[2];
    fault_allgather = 0;
    run_ranks(2, scenario_stall, runs, 1.0);
    printf("stalled peer: rank 0 waited %.3f s using %.4f s of CPU\n", runs[0].elapsed,
           runs[0].cpu);
    CHECK_MSG(runs[0].rc == COMM_ERR_DEADLINE, "%s", runs[0].err);
    CHECK_MSG(runs[0].elapsed >= 1.0 && runs[0].elapsed < 1.3, "waited %.3f s", runs[0].elapsed);
    CHECK_MSG(runs[0].cpu < 0.1, "waiting 1 s used %.3f s of CPU", runs[0].cpu);
}

/* Rank 1 frees its handle once rank 0 is waiting in a collective (seen
 * through comm_get_state from rank 1's thread): rank 0 fails with
 * COMM_ERR_PEER long before its deadline. */
static void *scenario_leave(void *arg) {
    struct rank_run *run = arg;
    if (run->rank == 1) {
        struct comm_state state = {0};
        double start = now_seconds();
        while (!state.waiting && now_seconds() - start < 5.0) {
            sched_yield();
            comm_get_state(run->all[0], &state);
        }
        RANK_CHECK(run,
                   state.waiting && state.tag.step == 9 && state.tag.index == 2 && state.since > 0,
                   "rank 0's state: waiting %d in (%llu, %u)", state.waiting,
                   (unsigned long long)state.tag.step, state.tag.index);
        comm_free(run->comm);
        run->comm = NULL;
        return NULL;
    }
    float buf[8] = {0};
    struct comm_tag tag = {9, 2};
    double start = now_seconds();
    run->rc = comm_allreduce_sum(run->comm, buf, 8, tag, run->err, sizeof(run->err));
    run->elapsed = now_seconds() - start;
    return NULL;
}

static void test_leave(void) {
    struct rank_run runs[2];
    run_ranks(2, scenario_leave, runs, 10.0);
    CHECK_MSG(runs[0].rc == COMM_ERR_PEER &&
                  strcmp(runs[0].err, "rank 0: rank 1 left the group while this rank waited in "
                                      "all-reduce (step 9, index 2)") == 0,
              "%d %s", runs[0].rc, runs[0].err);
    CHECK_MSG(runs[0].elapsed < 2.0, "noticed after %.3f s", runs[0].elapsed);
}

/* Arguments refused before any communication. */
static void test_usage(void) {
    struct comm *ranks[2];
    char err[ERR_BYTES];
    CHECK(comm_local_create(0, ranks, err, sizeof(err)) == COMM_ERR_USAGE);
    CHECK(comm_local_create(2, ranks, err, sizeof(err)) == COMM_OK);
    struct comm_tag tag = {1, 0};
    char byte = 0;
    CHECK(comm_broadcast(ranks[0], &byte, 1, 2, tag, err, sizeof(err)) == COMM_ERR_USAGE);
    CHECK_MSG(strcmp(err, "rank 0: broadcast root 2 is not a rank of 0..1") == 0, "%s", err);
    CHECK(comm_allreduce_sum(ranks[1], NULL, 3, tag, err, sizeof(err)) == COMM_ERR_USAGE);
    size_t sizes[2] = {1, 1};
    CHECK(comm_gather(ranks[0], &byte, 2, &byte, sizes, 0, tag, err, sizeof(err)) ==
          COMM_ERR_USAGE);
    float floats[4] = {0};
    CHECK(comm_allgather(ranks[0], floats + 1, 8, floats, tag, err, sizeof(err)) == COMM_ERR_USAGE);
    CHECK_MSG(strcmp(err, "rank 0: all-gather send buffer overlaps the receive buffer at byte 4, "
                          "not at this rank's own place (byte 0)") == 0,
              "%s", err);
    CHECK(comm_allgather(ranks[1], floats, 8, NULL, tag, err, sizeof(err)) == COMM_ERR_USAGE);
    CHECK_MSG(strcmp(err, "rank 1: all-gather of 8 bytes with a NULL receive buffer") == 0, "%s",
              err);
    CHECK(comm_exit_code(COMM_ERR_DEADLINE) == COMM_EXIT_DEADLINE);
    CHECK(comm_exit_code(COMM_ERR_TAG) == COMM_EXIT_TAG);
    CHECK(comm_exit_code(COMM_ERR_PEER) == COMM_EXIT_PEER);
    CHECK(comm_exit_code(COMM_ERR_SYSTEM) == COMM_EXIT_SYSTEM);
    CHECK(comm_exit_code(COMM_OK) == 0);
    comm_free(ranks[0]);
    comm_free(ranks[1]);
}

int main(void) {
    test_exact();
    test_tag_mismatch();
    test_kind_mismatch();
    test_stall();
    test_idle_wait();
    test_leave();
    test_usage();
    return test_status("test_comm_local");
}
