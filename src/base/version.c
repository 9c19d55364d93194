/* version.c -- which lockstep this is: the project version CMake sets and the
 * git commit it was built from (both from a header written at every build by
 * cmake/commit.cmake, so only this file recompiles on a new commit). The
 * runner says it in HELLO, `lockstep --version` prints it, the gateway shows
 * it in /v1/models and /metrics. */
#include "base/base.h"

#include "lockstep_version.h"

_Static_assert(sizeof(LOCKSTEP_BUILD) <= VERSION_BUILD_MAX, "the build's name fits HELLO's field");

const char *version_string(void) {
    return LOCKSTEP_VERSION;
}

const char *version_commit(void) {
    return LOCKSTEP_COMMIT;
}

const char *version_build(void) {
    return LOCKSTEP_BUILD;
}
