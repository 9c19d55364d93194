/* test_gateway_launch.c -- the command lines that start runners
 * (supervisor_runner_argv), word for word:
 *   - a runner of threads, alone and under a wrapper (qemu-aarch64 running
 *     another architecture's binary);
 *   - one mpirun app context for every rank: on this machine
 *     (--oversubscribe, no --host), on hosts (--host a:1,b:1), from a
 *     hostfile;
 *   - hosts that run different programs: mpirun's MPMD form, an app
 *     context per host in rank order (`-np 1 --host a:1 A ... : -np 1
 *     --host b:1 qemu-aarch64 B ...`), global options first, each with the
 *     runner's whole option list; on this machine without --host;
 *   - a command that does not fit is refused, not cut. */
#include "gateway/supervisor/supervisor.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The words joined by spaces (static buffer). */
static const char *joined(const struct supervisor_argv *a) {
    static char text[8192];
    size_t used = 0;
    text[0] = '\0';
    for (int i = 0; i < a->n && used < sizeof(text); i++)
        used +=
            (size_t)snprintf(text + used, sizeof(text) - used, "%s%s", i ? " " : "", a->argv[i]);
    return text;
}

/* mpirun's global options as supervisor_runner_argv writes them. */
static const char *mpirun_prefix(void) {
    return geteuid() == 0 ? "mpirun --allow-run-as-root --bind-to none" : "mpirun --bind-to none";
}

static void expect(const struct supervisor_launch *l, const char *status, const char *want,
                   const char *what) {
    static struct supervisor_argv a;
    CHECK_MSG(supervisor_runner_argv(l, "/run/1.sock", status, &a) == 0, "%s: refused", what);
    CHECK_MSG(a.argv[a.n] == NULL, "%s: not NULL-ended", what);
    CHECK_MSG(!strcmp(joined(&a), want), "%s:\n  got  %s\n  want %s", what, joined(&a), want);
}

static struct supervisor_launch base(void) {
    return (struct supervisor_launch){.lockstep_path = "/usr/bin/lockstep",
                                      .mpirun_path = "mpirun",
                                      .model_path = "m.gguf",
                                      .tp = 2,
                                      .threads = 3};
}

#define RUNNER(BIN, TAIL) BIN " runner -m m.gguf --socket /run/1.sock -t 3 " TAIL

static void test_threads(void) {
    struct supervisor_launch l = base();
    expect(&l, NULL, RUNNER("/usr/bin/lockstep", "--tp 2"), "threads");
    l.wrapper = "qemu-aarch64";
    l.lockstep_path = "/opt/arm64/lockstep";
    l.allow_faults = 1;
    l.cluster_key_file = "/etc/k";
    expect(&l, "/run/1.status",
           RUNNER("qemu-aarch64 /opt/arm64/lockstep",
                  "--tp 2 --status /run/1.status --allow-faults --cluster-key-file /etc/k"),
           "threads under a wrapper");
}

static void test_one_context(void) {
    char want[1024];
    struct supervisor_launch l = base();
    l.mpi = 1;
    snprintf(want, sizeof(want), "%s --oversubscribe -np 2 %s", mpirun_prefix(),
             RUNNER("/usr/bin/lockstep", "--comm mpi --status s"));
    expect(&l, "s", want, "mpirun here");
    snprintf(l.host_list, sizeof(l.host_list), "a:1,b:1");
    snprintf(want, sizeof(want), "%s --host a:1,b:1 -np 2 %s", mpirun_prefix(),
             RUNNER("/usr/bin/lockstep", "--comm mpi"));
    expect(&l, NULL, want, "mpirun on hosts");
    l.host_list[0] = '\0';
    l.hostfile = "hosts.txt";
    snprintf(want, sizeof(want), "%s --hostfile hosts.txt -np 2 %s", mpirun_prefix(),
             RUNNER("/usr/bin/lockstep", "--comm mpi"));
    expect(&l, NULL, want, "mpirun from a hostfile");
}

/* A pipeline: its degrees and layer split; under mpirun tp * pp ranks. */
static void test_stages(void) {
    char want[1024];
    struct supervisor_launch l = base();
    l.pp = 3;
    l.layers[0] = 4, l.layers[1] = 6, l.layers[2] = 6;
    expect(&l, NULL, RUNNER("/usr/bin/lockstep", "--tp 2 --pp 3 --layers-split 4,6,6"),
           "threads in stages");
    l.mpi = 1;
    snprintf(l.host_list, sizeof(l.host_list), "a:2,b:4");
    snprintf(want, sizeof(want), "%s --host a:2,b:4 -np 6 %s", mpirun_prefix(),
             RUNNER("/usr/bin/lockstep", "--tp 2 --comm mpi --pp 3 --layers-split 4,6,6"));
    expect(&l, NULL, want, "mpirun in stages");
}

static void test_parts(void) {
    char want[2048];
    const char *const extra[] = {"--log-format", "json", NULL};
    struct supervisor_launch l = base();
    l.mpi = 1;
    l.tp = 3;
    l.runner_args = extra;
    l.n_parts = 2;
    l.parts[0] = (struct supervisor_part){"x86-a", 2, "/usr/bin/lockstep", NULL};
    l.parts[1] = (struct supervisor_part){"arm-b", 1, "/opt/arm64/lockstep", "qemu-aarch64"};
    snprintf(want, sizeof(want), "%s -np 2 --host x86-a:2 %s : -np 1 --host arm-b:1 %s",
             mpirun_prefix(), RUNNER("/usr/bin/lockstep", "--comm mpi --log-format json"),
             RUNNER("qemu-aarch64 /opt/arm64/lockstep", "--comm mpi --log-format json"));
    expect(&l, NULL, want, "an app context per host");
    /* this machine under two names: no --host, as many ranks as asked */
    l.parts[0].host = l.parts[1].host = NULL;
    snprintf(want, sizeof(want), "%s --oversubscribe -np 2 %s : -np 1 %s", mpirun_prefix(),
             RUNNER("/usr/bin/lockstep", "--comm mpi --status s --log-format json"),
             RUNNER("qemu-aarch64 /opt/arm64/lockstep", "--comm mpi --status s --log-format json"));
    expect(&l, "s", want, "app contexts here");
}

/* 64 hosts, each with many runner options: more words than a command
 * holds, refused. */
static void test_too_long(void) {
    static struct supervisor_argv a;
    static const char *extra[64];
    for (int i = 0; i < 63; i++) extra[i] = "--x";
    extra[63] = NULL;
    struct supervisor_launch l = base();
    l.mpi = 1;
    l.tp = SUPERVISOR_PARTS_MAX;
    l.runner_args = extra;
    l.n_parts = SUPERVISOR_PARTS_MAX;
    for (int k = 0; k < l.n_parts; k++)
        l.parts[k] = (struct supervisor_part){"h", 1, "/usr/bin/lockstep", NULL};
    CHECK(supervisor_runner_argv(&l, "/run/1.sock", NULL, &a) == -1);
    CHECK(a.n < SUPERVISOR_ARGV_MAX && a.argv[a.n] == NULL);
    l.n_parts = 4; /* fits */
    CHECK(supervisor_runner_argv(&l, "/run/1.sock", NULL, &a) == 0);
}

int main(void) {
    test_threads();
    test_one_context();
    test_parts();
    test_stages();
    test_too_long();
    return test_status("test_gateway_launch");
}
