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
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);             \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);              \
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

/* Prints a summary line and returns the process exit status. */
int test_status(const char *name);

#endif
