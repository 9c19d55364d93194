/* test_comm_mpi.c -- the mpi backend of src/comm under a real mpirun.
 *
 * Runs tests/comm_mpi_rank.c under `mpirun -np 2` and `-np 4`
 * (--oversubscribe: this machine has 2 cores) and checks exit codes and
 * messages: exact collectives; a tag mismatch makes the job exit with
 * COMM_EXIT_TAG and messages naming both tags; a rank that SIGKILLs or
 * SIGSTOPs itself mid-collective makes the job end within the ranks'
 * deadline (1 s) plus a margin, with the survivors' deadline message.
 *
 * Every job runs in its own process group with its own deadline. This test
 * is a child subreaper, so ranks that outlive mpirun are re-parented here;
 * after each job every remaining descendant is killed by pid and reaped.
 * Skips (77) when lockstep was built without MPI or mpirun is absent. */
#include "comm/comm.h"
#include "testutil.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
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

struct job {
    int status;       /* mpirun's exit code, 128+signal if killed */
    int timed_out;    /* 1 if JOB_DEADLINE passed and the job was killed */
    double seconds;   /* wall-clock time of the job */
    int leftovers;    /* processes still alive after mpirun exited */
    double last_exit; /* seconds from the start to the last "exiting with code" line, or -1 */
    char *out;        /* stdout of all ranks */
    char *err;        /* stderr of all ranks and of mpirun */
};

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    char *text = calloc(1, 1 << 16);
    if (text && f) {
        size_t got = fread(text, 1, (1 << 16) - 1, f);
        text[got] = '\0';
    }
    if (f) fclose(f);
    return text;
}

/* Kills every child of this process (mpirun, or ranks re-parented to this
 * subreaper) with SIGKILL, by pid, and reaps them; returns how many. */
static int kill_children(void) {
    int killed = 0;
    for (int round = 0; round < 50; round++) {
        DIR *proc = opendir("/proc");
        if (!proc) return killed;
        int found = 0;
        struct dirent *entry;
        while ((entry = readdir(proc)) != NULL) {
            pid_t pid = (pid_t)atoi(entry->d_name);
            if (pid <= 0) continue;
            char path[64], stat[512];
            snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
            FILE *f = fopen(path, "r");
            if (!f) continue;
            size_t got = fread(stat, 1, sizeof(stat) - 1, f);
            fclose(f);
            stat[got] = '\0';
            const char *close_paren = strrchr(stat, ')');
            int ppid = 0;
            char state = 0;
            if (!close_paren || sscanf(close_paren + 1, " %c %d", &state, &ppid) != 2) continue;
            if (ppid != (int)getpid()) continue;
            found++;
            if (state != 'Z') {
                kill(pid, SIGKILL);
                killed++;
            }
            waitpid(pid, NULL, 0);
        }
        closedir(proc);
        if (!found) break;
    }
    return killed;
}

/* Runs `mpirun -np N comm_mpi_rank MODE 1.0` with a deadline. */
static struct job run_job(int np, const char *mode) {
    struct job job = {-1, 0, 0, 0, -1, NULL, NULL};
    char out_path[512], err_path[512], ranks[16];
    test_tmp_path(out_path, sizeof(out_path), "mpi.out");
    test_tmp_path(err_path, sizeof(err_path), "mpi.err");
    snprintf(ranks, sizeof(ranks), "%d", np);
    char *argv[24];
    int argc = 0;
    argv[argc++] = COMM_MPIRUN;
    if (geteuid() == 0) argv[argc++] = "--allow-run-as-root";
    char *options[] = {"--oversubscribe", "--bind-to", "none", "--mca", "btl",
                       "self,vader,tcp",  "-np"};
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) argv[argc++] = options[i];
    argv[argc++] = ranks;
    argv[argc++] = COMM_MPI_RANK;
    argv[argc++] = (char *)mode;
    argv[argc++] = RANK_DEADLINE;
    argv[argc] = NULL;

    fflush(NULL);
    double start = now_seconds();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        if (!freopen(out_path, "wb", stdout) || !freopen(err_path, "wb", stderr)) _exit(126);
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 1);
        setenv("ASAN_OPTIONS", "detect_leaks=0", 1); /* Open MPI keeps memory to the end */
        execv(argv[0], argv);
        _exit(127);
    }
    if (pid < 0) return job;
    setpgid(pid, pid);
    int status = 0;
    for (;;) {
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid) break;
        if (done < 0 || now_seconds() - start > JOB_DEADLINE) {
            job.timed_out = 1;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        struct timespec nap = {0, 5000000};
        nanosleep(&nap, NULL);
    }
    job.seconds = now_seconds() - start;
    job.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    job.leftovers = kill_children();
    job.out = read_all(out_path);
    job.err = read_all(err_path);
    remove(out_path);
    remove(err_path);
    /* The faulty rank (the last) may log an exit too, when mpirun wakes it
     * to end the job: only the survivors are timed. */
    int faulty = strcmp(mode, "kill") == 0 || strcmp(mode, "stop") == 0 ? np - 1 : -1;
    for (const char *line = job.err; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        int rank = -1, code = 0;
        double when = 0;
        if (sscanf(line, "rank %d: exiting with code %d at %lf", &rank, &code, &when) == 3 &&
            rank != faulty && when - start > job.last_exit)
            job.last_exit = when - start;
    }
    printf("mpirun -np %d %s: exit %d after %.2f s (last rank exit after %.2f s)%s\n", np, mode,
           job.status, job.seconds, job.last_exit,
           job.timed_out ? " (killed at the test's deadline)" : "");
    return job;
}

static void free_job(struct job *job) {
    free(job->out);
    free(job->err);
}

static void test_collectives(int np) {
    struct job job = run_job(np, "collectives");
    CHECK_MSG(job.status == 0 && !job.timed_out, "exit %d\n%s", job.status, job.err);
    for (int r = 0; r < np; r++) {
        char want[32];
        snprintf(want, sizeof(want), "rank %d: ok\n", r);
        CHECK_MSG(strstr(job.out, want) != NULL, "missing \"%s\" in:\n%s", want, job.out);
    }
    CHECK(job.leftovers == 0);
    free_job(&job);
}

static void test_tag(int np) {
    struct job job = run_job(np, "tag");
    CHECK_MSG(job.status == COMM_EXIT_TAG && !job.timed_out, "exit %d\n%s", job.status, job.err);
    CHECK_MSG(job.seconds < FAULT_JOB_LIMIT, "took %.2f s", job.seconds);
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
    CHECK_MSG(strstr(job.err, last) || strstr(job.err, other), "no tag mismatch message in:\n%s",
              job.err);
    free_job(&job);
}

static void test_fault(int np, const char *mode) {
    struct job job = run_job(np, mode);
    CHECK_MSG(job.status != 0 && !job.timed_out, "exit %d\n%s", job.status, job.err);
    CHECK_MSG(job.seconds < FAULT_JOB_LIMIT, "%s: the job took %.2f s", mode, job.seconds);
    /* A stopped rank never exits by itself: a survivor's deadline ends the
     * job, with its exit code and message. A killed rank is noticed by
     * mpirun too, which may end the survivors first (then they log
     * nothing); a survivor that logs reports its deadline or the MPI error. */
    int logged = job.last_exit >= 0;
    if (strcmp(mode, "stop") == 0)
        CHECK_MSG(job.status == COMM_EXIT_DEADLINE && logged, "exit %d\n%s", job.status, job.err);
    if (logged) {
        CHECK_MSG(job.last_exit >= 0.9 && job.last_exit < FAULT_RANK_LIMIT,
                  "%s: last rank exit after %.2f s (rank deadline 1 s)", mode, job.last_exit);
        CHECK_MSG(
            strstr(job.err, ": deadline of 1.000 s passed in all-reduce (step 12, index 3)") ||
                strstr(job.err, ": MPI failed in all-reduce (step 12, index 3)"),
            "%s: no survivor message in:\n%s", mode, job.err);
    }
    free_job(&job);
}

int main(void) {
    if (access(COMM_MPIRUN, X_OK) != 0) {
        printf("skip: %s is absent (Debian package openmpi-bin)\n", COMM_MPIRUN);
        return TEST_SKIP_CODE;
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    for (int np = 2; np <= 4; np += 2) {
        test_collectives(np);
        test_tag(np);
        test_fault(np, "kill");
        test_fault(np, "stop");
    }
    int leftovers = kill_children();
    CHECK_MSG(leftovers == 0, "%d processes were left", leftovers);
    return test_status("test_comm_mpi");
}

#else

int main(void) {
    printf("skip: lockstep was built without MPI (Debian libopenmpi-dev, -DLOCKSTEP_MPI=ON)\n");
    return TEST_SKIP_CODE;
}

#endif
