/* test_tp_faults.c -- faults injected into one rank of `lockstep generate`
 * end to end (DESIGN.md I2, I3): the other ranks report them and the whole
 * job ends within its collective deadline plus a margin, never hangs.
 *
 * The faults (LOCKSTEP_FAULT=KIND:RANK:STEP, src/engine/fault.c) hit rank 1
 * when it enters step 3:
 *   local --tp 2, tag:   exit COMM_EXIT_TAG at once, with a message naming
 *                        both tags (deadline 10 s: not waited for);
 *   local --tp 2, stall: exit COMM_EXIT_DEADLINE after the 1 s deadline;
 *   mpirun -np 2, tag:   the same as local;
 *   mpirun -np 2, kill:  the job ends non-zero within the deadline + margin;
 *   mpirun -np 2, stop:  rank 0 passes its deadline and the job exits with
 *                        COMM_EXIT_DEADLINE.
 * The same with two pipeline stages (--pp 2), rank 1 being stage 1:
 *   local, tag:          exit COMM_EXIT_TAG at once (its handoff's tag);
 *   local, stall:        the leader, waiting for step 3's logits, exits
 *                        COMM_EXIT_DEADLINE after 1 s;
 *   mpirun, tag and kill: as above.
 * Every job runs with test_run_job: after it, no process of it may be left
 * (the test kills leftovers by pid and counts them as failures). The model
 * is a random F32 one written by the test. The mpirun parts are skipped
 * when lockstep was built without MPI or mpirun is absent. */
#include "comm/comm.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define JOB_DEADLINE 15.0 /* the test's own deadline for one job */
/* A job with a 1 s collective deadline must have ended by DEADLINE_LIMIT
 * (mpirun's start-up, the deadline, mpirun tearing the job down); one that
 * must fail at once by IMMEDIATE_LIMIT, well below its 10 s deadline. */
#define DEADLINE_LIMIT  8.0
#define IMMEDIATE_LIMIT 5.0

static char model_path[512];

/* Runs `generate` on the test model with the fault, locally with --tp 2 or
 * (mpirun non-NULL) under mpirun -np 2 with --comm mpi, or as two pipeline
 * stages (--pp 2) when pipeline is set; deadline is the collective
 * deadline (--comm-deadline). */
static int pipeline;
static struct test_job run_fault(const char *mpirun, const char *fault, const char *deadline) {
    char np_text[16], fault_env[64];
    char *argv[48];
    int argc = 0;
    if (mpirun) {
        argc = test_mpirun_args(argv, mpirun, 2, np_text, sizeof(np_text));
        argv[argc++] = "-x";
        argv[argc++] = "LOCKSTEP_FAULT";
    }
    char *args[] = {LOCKSTEP_BIN,
                    "generate",
                    "-m",
                    model_path,
                    "-p",
                    "In the beginning",
                    "-n",
                    "32",
                    "--temp",
                    "0",
                    "--comm-deadline",
                    (char *)deadline};
    for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++) argv[argc++] = args[i];
    if (mpirun) {
        argv[argc++] = "--comm";
        argv[argc++] = "mpi";
    }
    if (pipeline) {
        argv[argc++] = "--pp";
        argv[argc++] = "2";
    } else if (!mpirun) {
        argv[argc++] = "--tp";
        argv[argc++] = "2";
    }
    argv[argc] = NULL;
    snprintf(fault_env, sizeof(fault_env), "LOCKSTEP_FAULT=%s", fault);
    const char *env[] = {fault_env, test_mpi_env[0], test_mpi_env[1], NULL};
    struct test_job job = test_run_job(argv, JOB_DEADLINE, env);
    printf("%s%s %s: exit %d after %.2f s%s\n", mpirun ? "mpirun -np 2" : "",
           pipeline ? " --pp 2" : " --tp 2", fault, job.status, job.seconds,
           job.timed_out ? " (killed at the test's deadline)" : "");
    CHECK_MSG(!job.timed_out, "%s: still running after %.0f s\n%s", fault, JOB_DEADLINE, job.err);
    CHECK_MSG(job.leftovers == 0, "%s: %d processes were left", fault, job.leftovers);
    return job;
}

/* Rank 1 uses index 1000 for the first collective of step 3 (the step
 * plan's broadcast, index 0): whichever rank reports first names both. */
static void test_tag(const char *mpirun) {
    struct test_job job = run_fault(mpirun, "tag:1:3", "10");
    CHECK_MSG(job.status == COMM_EXIT_TAG, "tag: exit %d\n%s", job.status, job.err);
    CHECK_MSG(job.seconds < IMMEDIATE_LIMIT, "tag: took %.2f s", job.seconds);
    /* a stage receives step 3's handoff (index 0) where it expects 1000 */
    CHECK_MSG(strstr(job.err, "collective tag mismatch: this rank is in (step 3, index 0), rank 1 "
                              "is in (step 3, index 1000)") ||
                  strstr(job.err, "collective tag mismatch: this rank is in (step 3, index 1000), "
                                  "rank 0 is in (step 3, index 0)"),
              "tag: no message naming both tags in:\n%s", job.err);
    test_job_free(&job);
}

/* Stage 1 stalls before its handoff of step 3: the leader waits for the
 * step's logits and passes its 1 s deadline. */
static void test_stage_stall(void) {
    struct test_job job = run_fault(NULL, "stall:1:3", "1");
    CHECK_MSG(job.status == COMM_EXIT_DEADLINE, "stage stall: exit %d\n%s", job.status, job.err);
    CHECK_MSG(job.seconds >= 1.0 && job.seconds < 4.0, "stage stall: took %.2f s", job.seconds);
    CHECK_MSG(strstr(job.err, "rank 0: deadline of 1.000 s passed in a receive from rank 1 (step "
                              "3, index 1): nothing arrived"),
              "stage stall: no deadline message from rank 0 in:\n%s", job.err);
    test_job_free(&job);
}

/* A rank that stops making progress: rank 0 passes its 1 s deadline. */
static void test_deadline(const char *mpirun, const char *fault) {
    struct test_job job = run_fault(mpirun, fault, "1");
    CHECK_MSG(job.status == COMM_EXIT_DEADLINE, "%s: exit %d\n%s", fault, job.status, job.err);
    CHECK_MSG(job.seconds >= 1.0 && job.seconds < (mpirun ? DEADLINE_LIMIT : 4.0),
              "%s: took %.2f s (deadline 1 s)", fault, job.seconds);
    CHECK_MSG(strstr(job.err, "rank 0: deadline of 1.000 s passed in broadcast (step 3, index 0)"),
              "%s: no deadline message from rank 0 in:\n%s", fault, job.err);
    test_job_free(&job);
}

/* A rank killed mid-step: mpirun or rank 0's deadline ends the job. */
static void test_kill(const char *mpirun) {
    struct test_job job = run_fault(mpirun, "kill:1:3", "1");
    CHECK_MSG(job.status != 0, "kill: exit %d\n%s", job.status, job.err);
    CHECK_MSG(job.seconds < DEADLINE_LIMIT, "kill: took %.2f s (deadline 1 s)", job.seconds);
    test_job_free(&job);
}

int main(void) {
    test_tmp_path(model_path, sizeof(model_path), "tp-faults-random.gguf");
    char *shape[] = {"--dim",      "256", "--hidden", "512", "--layers", "2",   "--heads", "8",
                     "--kv-heads", "4",   "--vocab",  "300", "--type",   "f32", NULL};
    if (!test_write_random_model(model_path, shape)) return test_status("test_tp_faults");
    test_tag(NULL);
    test_deadline(NULL, "stall:1:3");
    pipeline = 1;
    test_tag(NULL);
    test_stage_stall();
    pipeline = 0;
    const char *mpirun = NULL;
#if defined(TEST_MPIRUN)
    mpirun = TEST_MPIRUN;
#endif
    if (!mpirun) {
        printf("skip: the mpirun parts: lockstep was built without MPI (Debian libopenmpi-dev)\n");
    } else if (access(mpirun, X_OK) != 0) {
        printf("skip: the mpirun parts: %s is absent (Debian package openmpi-bin)\n", mpirun);
    } else {
        test_tag(mpirun);
        test_kill(mpirun);
        test_deadline(mpirun, "stop:1:3");
        pipeline = 1; /* two stages, a process each */
        test_tag(mpirun);
        test_kill(mpirun);
        pipeline = 0;
    }
    remove(model_path);
    int leftovers = test_kill_children();
    CHECK_MSG(leftovers == 0, "%d processes were left", leftovers);
    return test_status("test_tp_faults");
}
