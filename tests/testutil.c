/* testutil.c -- see testutil.h. */
#include "testutil.h"

#include <math.h>
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
