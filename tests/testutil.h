/* testutil.h -- tiny assertion helpers shared by the tests.
 *
 * A failed CHECK prints file:line and the expression and marks the test as
 * failed; the test keeps running so one run shows every failure. A test's
 * main returns test_status(). Exit code 77 tells CTest the test was skipped
 * (for example because ../shared is absent). */
#ifndef LOCKSTEP_TESTUTIL_H
#define LOCKSTEP_TESTUTIL_H

#include <stdio.h>

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

/* Maximum absolute difference between two float arrays. */
float test_max_abs_diff(const float *a, const float *b, int n);

/* Output of a command run by test_run. */
struct test_output {
    int status;    /* exit code; 128+signal if killed by one; -1 if it could not run */
    int timed_out; /* 1 if it passed its deadline and was killed */
    char *out;     /* its stdout, NUL-terminated (malloc'd) */
    char *err;     /* its stderr, NUL-terminated (malloc'd) */
};

/* Runs argv (argv[0] a path) with a deadline in seconds; the child is killed
 * (SIGKILL, by pid) when the deadline passes. Returns the output; free it with
 * test_output_free. */
struct test_output test_run(char *const argv[], double deadline_seconds);
void test_output_free(struct test_output *output);

/* Prints a summary line and returns the process exit status. */
int test_status(const char *name);

#endif
