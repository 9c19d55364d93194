/* testutil.c -- see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int test_failures;

const char *test_shared_path(char *buf, size_t size, const char *relative) {
    snprintf(buf, size, "%s/%s", LOCKSTEP_SHARED_DIR, relative);
    return buf;
}

int test_require_file(const char *path) {
    if (access(path, R_OK) == 0) return 1;
    printf("skip: %s is absent (tests read ../shared beside the repository)\n", path);
    return 0;
}

const char *test_tmp_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/tmp-%d-%s", LOCKSTEP_TEST_TMP, (int)getpid(), name);
    return buf;
}

float test_max_abs_diff(const float *a, const float *b, int n) {
    float worst = 0.0f;
    for (int i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= worst)) worst = d; /* also catches NaN */
    }
    return worst;
}

int test_status(const char *name) {
    if (test_failures == 0) {
        printf("%s: ok\n", name);
        return 0;
    }
    printf("%s: %d check(s) failed\n", name, test_failures);
    return 1;
}

/* Reads a whole file into a NUL-terminated malloc'd string ("" on error). */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    size_t size = 0, cap = 4096;
    char *data = malloc(cap);
    if (!data) return NULL;
    if (f) {
        size_t got;
        while ((got = fread(data + size, 1, cap - size - 1, f)) > 0) {
            size += got;
            if (cap - size - 1 == 0) {
                char *grown = realloc(data, cap * 2);
                if (!grown) break;
                data = grown;
                cap *= 2;
            }
        }
        fclose(f);
    }
    data[size] = '\0';
    return data;
}

struct test_output test_run(char *const argv[], double deadline_seconds) {
    struct test_output result = {-1, 0, NULL, NULL};
    char out_path[512], err_path[512];
    static int counter;
    char name[64];
    snprintf(name, sizeof(name), "run%d.out", counter);
    test_tmp_path(out_path, sizeof(out_path), name);
    snprintf(name, sizeof(name), "run%d.err", counter++);
    test_tmp_path(err_path, sizeof(err_path), name);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(out_path, "wb", stdout) || !freopen(err_path, "wb", stderr)) _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    if (pid > 0) {
        int status = 0;
        struct timespec start, now;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (;;) {
            pid_t done = waitpid(pid, &status, WNOHANG);
            if (done == pid) break;
            clock_gettime(CLOCK_MONOTONIC, &now);
            double elapsed =
                (double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) * 1e-9;
            if (done < 0 || elapsed > deadline_seconds) {
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
                result.timed_out = done >= 0;
                break;
            }
            struct timespec nap = {0, 2000000};
            nanosleep(&nap, NULL);
        }
        result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    result.out = slurp(out_path);
    result.err = slurp(err_path);
    remove(out_path);
    remove(err_path);
    return result;
}

void test_output_free(struct test_output *output) {
    free(output->out);
    free(output->err);
    output->out = output->err = NULL;
}
