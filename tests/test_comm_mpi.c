/* test_comm_mpi.c -- the mpi backend of src/comm under a real mpirun.
 *
 * Runs tests/comm_mpi_rank.c under `mpirun -np 2` and `-np 4`
 * (--oversubscribe: this machine has 2 cores) and checks exit codes and
 * messages: exact collectives (all-reduce, broadcast, gather, all-gather,
 * barrier); point to point steps around the ring with 1 to
 * COMM_MAILBOX_SLOTS in flight, and all-reduces in split groups; a tag
 * mismatch makes the job exit with
 * COMM_EXIT_TAG and messages naming both tags; a rank that SIGKILLs or
 * SIGSTOPs itself mid-collective makes the job end within the ranks'
 * deadline (1 s) plus a margin, with the survivors' deadline message.
 *
 * Every job runs with test_run_job (tests/testutil.h): in its own process
 * group with its own deadline; ranks that outlive mpirun are re-parented to
 * this test, and after each job every remaining one is killed by pid and
 * reaped.
 * Skips (77) when lockstep was built without MPI or mpirun is absent. */
#include "comm/comm.h"
#include "testutil.h"

#include <string.h>
#include <unistd.h>

#if defined(COMM_MPI_RANK) && defined(COMM_MPIRUN)

#define RANK_DEADLINE "1.0"
#define JOB_DEADLINE  60.0 /* the whole mpirun, should nothing else stop it */
/* From the job's start (mpirun's own start-up included, ~0.3 s), the
 * surviving ranks must have exited by FAULT_RANK_LIMIT: the 1 s deadline
 * plus a margin; mpirun itself, which waits a second or two before it
 * tears the job down, by FAULT_JOB_LIMIT. */
#define FAULT_RANK_LIMIT 2.5
#define FAULT_JOB_LIMIT  8.0

/* One mpirun job and, from the ranks' "exiting with code" lines, when the
 * last surviving rank exited. */
struct job {
    struct test_job run;
    double last_exit; /* seconds from the start to the last survivor's exit line, or -1 */
};

/* Runs `mpirun -np N comm_mpi_rank MODE 1.0` with a deadline. */
static struct job run_job(int np, const char *mode) {
    struct job job = {{0}, -1};
    char ranks[16];
    char *argv[24];
    int argc = test_mpirun_args(argv, COMM_MPIRUN, np, ranks, sizeof(ranks));
    argv[argc++] = COMM_MPI_RANK;
    argv[argc++] = (char *)mode;
    argv[argc++] = RANK_DEADLINE;
    argv[argc] = NULL;
    job.run = test_run_job(argv, JOB_DEADLINE, test_mpi_env);
    /* The faulty rank (the last) may log an exit too, when mpirun wakes it
     * to end the job: only the survivors are timed. */
    int faulty = strcmp(mode, "kill") == 0 || strcmp(mode, "stop") == 0 ? np - 1 : -1;
    for (const char *line = job.run.err; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        int rank = -1, code = 0;
        double when = 0;
        if (sscanf(line, "rank %d: exiting with code %d at %lf", &rank, &code, &when) == 3 &&
            rank != faulty && when - job.run.start > job.last_exit)
            job.last_exit = when - job.run.start;
    }
    printf("mpirun -np %d %s: exit %d after %.2f s (last rank exit after %.2f s)%s\n", np, mode,
           job.run.status, job.run.seconds, job.last_exit,
           job.run.timed_out ? " (killed at the test's deadline)" : "");
    return job;
}

/* A job of mode that must end with every rank printing "rank R: ok". */
static void test_clean_job(int np, const char *mode) {
    struct job job = run_job(np, mode);
    CHECK_MSG(job.run.status == 0 && !job.run.timed_out, "exit %d\n%s", job.run.status,
              job.run.err);
    for (int r = 0; r < np; r++) {
        char want[32];
        snprintf(want, sizeof(want), "rank %d: ok\n", r);
        CHECK_MSG(strstr(job.run.out, want) != NULL, "missing \"%s\" in:\n%s", want, job.run.out);
    }
    CHECK(job.run.leftovers == 0);
    test_job_free(&job.run);
}

static void test_tag(int np) {
    struct job job = run_job(np, "tag");
    CHECK_MSG(job.run.status == COMM_EXIT_TAG && !job.run.timed_out, "exit %d\n%s", job.run.status,
              job.run.err);
    CHECK_MSG(job.run.seconds < FAULT_JOB_LIMIT, "took %.2f s", job.run.seconds);
    CHECK_MSG(job.last_exit >= 0 && job.last_exit < FAULT_RANK_LIMIT, "last rank exit after %.2f s",
              job.last_exit);
    /* Each rank that got to print names the other side of the mismatch. */
    char last[200], other[200];
    snprintf(last, sizeof(last),
             "rank %d: collective tag mismatch: this rank is in (step 12, index 5), rank 0 is in "
             "(step 12, index 3)",
             np - 1);
    snprintf(other, sizeof(other),
             ": collective tag mismatch: this rank is in (step 12, index 3), rank %d is in (step "
             "12, index 5)",
             np - 1);
    CHECK_MSG(strstr(job.run.err, last) || strstr(job.run.err, other),
              "no tag mismatch message in:\n%s", job.run.err);
    test_job_free(&job.run);
}

static void test_fault(int np, const char *mode) {
    struct job job = run_job(np, mode);
    CHECK_MSG(job.run.status != 0 && !job.run.timed_out, "exit %d\n%s", job.run.status,
              job.run.err);
    CHECK_MSG(job.run.seconds < FAULT_JOB_LIMIT, "%s: the job took %.2f s", mode, job.run.seconds);
    /* A stopped rank never exits by itself: a survivor's deadline ends the
     * job, with its exit code and message. A killed rank is noticed by
     * mpirun too, which may end the survivors first (then they log
     * nothing); a survivor that logs reports its deadline or the MPI error. */
    int logged = job.last_exit >= 0;
    if (strcmp(mode, "stop") == 0)
        CHECK_MSG(job.run.status == COMM_EXIT_DEADLINE && logged, "exit %d\n%s", job.run.status,
                  job.run.err);
    if (logged) {
        CHECK_MSG(job.last_exit >= 0.9 && job.last_exit < FAULT_RANK_LIMIT,
                  "%s: last rank exit after %.2f s (rank deadline 1 s)", mode, job.last_exit);
        CHECK_MSG(
            strstr(job.run.err, ": deadline of 1.000 s passed in all-reduce (step 12, index 3)") ||
                strstr(job.run.err, ": MPI failed in all-reduce (step 12, index 3)"),
            "%s: no survivor message in:\n%s", mode, job.run.err);
    }
    test_job_free(&job.run);
}

int main(void) {
    if (access(COMM_MPIRUN, X_OK) != 0) {
        printf("skip: %s is absent (Debian package openmpi-bin)\n", COMM_MPIRUN);
        return TEST_SKIP_CODE;
    }
    for (int np = 2; np <= 4; np += 2) {
        test_clean_job(np, "collectives");
        test_clean_job(np, "links");
        test_tag(np);
        test_fault(np, "kill");
        test_fault(np, "stop");
    }
    int leftovers = test_kill_children();
    CHECK_MSG(leftovers == 0, "%d processes were left", leftovers);
    return test_status("test_comm_mpi");
}

#else

int main(void) {
    printf("skip: lockstep was built without MPI (Debian libopenmpi-dev, -DLOCKSTEP_MPI=ON)\n");
    return TEST_SKIP_CODE;
}

#endif
