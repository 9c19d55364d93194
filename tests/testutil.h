/* testutil.h -- tiny assertion helpers shared by the tests.
 *
 * A failed CHECK prints file:line and the expression and marks the test as
 * failed; the test keeps running so one run shows every failure. A test's
 * main returns test_status(). Exit code 77 tells CTest the test was skipped
 * (for example because ../shared is absent). */
#ifndef LOCKSTEP_TESTUTIL_H
#define LOCKSTEP_TESTUTIL_H

#include "tensor/tensor.h"

#include <stdint.h>
#include <stdio.h>

struct tokenizer;

extern int test_failures; /* number of failed checks so far */

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

#define TEST_SKIP_CODE 77

/* Path of a file under ../shared (LOCKSTEP_SHARED_DIR), written to buf. */
const char *test_shared_path(char *buf, size_t size, const char *relative);

/* 1 if the file exists; otherwise prints "skip: <why>" and returns 0. */
int test_require_file(const char *path);

/* Path for a scratch file in the test build directory, unique per name. */
const char *test_tmp_path(char *buf, size_t size, const char *name);

/* 1 if the n floats at a and b have the same bit patterns. */
int test_same_bits(const float *a, const float *b, size_t n);

/* The next float in [-1, 1) of the pseudo-random sequence *state (one
 * fixed sequence for each seed). */
float test_random_float(uint64_t *state);

/* n such floats in new memory (the caller frees them). */
float *test_random_floats(int n, uint64_t *state);

/* A rows x cols matrix of type (F32, F16, Q8_0 or Q4_0), row layout, made
 * from such floats, in new 64-byte aligned memory (the caller frees .data).
 * Every third Q8_0 row holds a -128 quant: ggml never writes one, but a
 * file may, and kernels must take it. */
struct tensor_matrix test_random_weights(enum tensor_type type, int rows, int cols,
                                         uint64_t *state);

/* Maximum absolute difference between two float arrays. */
float test_max_abs_diff(const float *a, const float *b, int n);

/* A job: a command that may start processes of its own (mpirun and its
 * ranks), run by test_run_job. */
struct test_job {
    int status;      /* exit code; 128+signal if killed by one; -1 if it could not run */
    int timed_out;   /* 1 if it passed its deadline and its process group was killed */
    double start;    /* test_now() when it started */
    double seconds;  /* wall-clock time until its first process exited */
    int leftovers;   /* its processes still running after the first one exited */
    char *out;       /* stdout of all its processes, NUL-terminated (malloc'd) */
    size_t out_size; /* bytes in out (generated text may hold NUL bytes) */
    char *err;       /* stderr of all its processes, NUL-terminated (malloc'd) */
};

/* CLOCK_MONOTONIC in seconds. */
double test_now(void);

/* Runs argv (argv[0] a path) in a process group of its own, with env
 * (NULL, or "NAME=VALUE" entries ending with NULL) added to its
 * environment. Past the deadline (seconds) the group is killed. This
 * process becomes a child subreaper, so processes that outlive argv[0]
 * (ranks that mpirun left behind) are re-parented here; once argv[0] has
 * exited they get 2 s to exit too, then every child this process did not
 * have before the job is killed with SIGKILL, by pid, reaped and counted in
 * leftovers. Free the job with test_job_free. */
struct test_job test_run_job(char *const argv[], double deadline_seconds, const char *const env[]);
void test_job_free(struct test_job *job);

/* A server started in the background (a runner, mpirun of a runner), in a
 * process group of its own, its output in files. */
struct test_service {
    int pid;            /* its first process; 0 once stopped */
    char out_path[512]; /* its stdout */
    char err_path[512]; /* its stderr */
    int status;         /* exit status once stopped (128+signal if killed) */
};

/* Starts argv like test_run_job but returns at once; 1 if it started. */
int test_start_service(struct test_service *service, char *const argv[], const char *const env[]);
/* Waits until its stdout contains text: 1, or 0 if it exited first or the
 * deadline (seconds) passed (its stderr is printed then). */
int test_wait_for_output(struct test_service *service, const char *text, double deadline_seconds);
/* 1 while its first process has not exited. */
int test_service_running(struct test_service *service);
/* SIGTERM to its group, up to grace seconds to exit, then SIGKILL to the
 * group; reaps it and returns its exit status. Safe to call twice. */
int test_stop_service(struct test_service *service, double grace_seconds);
/* Contents of a file (malloc'd, NUL-terminated), or NULL. */
char *test_read_file(const char *path, size_t *size);

/* Reaps children of this process as they exit, for up to seconds; returns
 * how many are still running then (processes a stopped job leaves to exit
 * on their own, such as mpirun's ranks). */
int test_reap_children(double seconds);

/* Kills every child of this process with SIGKILL, by pid, and reaps them;
 * returns how many were still running. */
int test_kill_children(void);

/* Writes `mpirun [--allow-run-as-root] --oversubscribe --bind-to none --mca
 * btl self,vader,tcp -np NP` into argv (room for 12 entries; np_text, of
 * size bytes, holds NP's digits) and returns the number of entries. */
int test_mpirun_args(char **argv, const char *mpirun, int np, char *np_text, size_t size);

/* Environment for MPI jobs: ranks yield when idle (this machine's cores
 * are shared) and AddressSanitizer does not report Open MPI's memory,
 * which it keeps until exit. */
extern const char *const test_mpi_env[];

/* Writes a random model with `lockstep convert --random OPTIONS... -o path`
 * (options ends with NULL; at most 30). Returns 1, or 0 after a failed
 * check. */
int test_write_random_model(const char *path, char *const options[]);

/* An HTTP/1.1 exchange over loopback (Connection: close). */
struct test_http {
    int status;    /* response status, or -1 if the exchange failed */
    char *headers; /* the header block (malloc'd) */
    char *body;    /* the body, de-chunked, NUL-terminated (malloc'd) */
    size_t length; /* bytes in body */
};

/* Sends method path to 127.0.0.1:port with the extra header lines (each
 * ending "\r\n"; may be NULL) and body (may be NULL), and reads the whole
 * answer within deadline seconds. Free with test_http_free. */
struct test_http test_http_request(int port, const char *method, const char *path,
                                   const char *headers, const char *body, double deadline);
void test_http_free(struct test_http *response);
/* Starts `lockstep serve -m model --port 0` with extra options (NULL-
 * terminated, or NULL) and env, and waits up to deadline seconds for the
 * address it bound and for GET /health to answer 200 (every runner ready).
 * Returns its port, or 0. */
int test_start_gateway(struct test_service *service, const char *model, char *const extra[],
                       const char *const env[], double deadline);
/* Opens a connection and sends the request; returns the socket (the caller
 * reads), or -1. */
int test_http_send(int port, const char *method, const char *path, const char *headers,
                   const char *body);

/* The vocabulary of a GGUF file (the file is closed at once, so this also
 * checks that the tokenizer does not point into it), or NULL after a failed
 * check. */
struct tokenizer *test_load_vocabulary(const char *path);

/* Prints a summary line and returns the process exit status. */
int test_status(const char *name);

#endif
