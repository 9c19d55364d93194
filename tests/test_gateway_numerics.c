/* test_gateway_numerics.c -- a cluster whose hosts compute with two
 * numerics contracts: this machine (localhost) and foreign.test, whose
 * probe reports an aarch64 machine of another contract (a fake mpirun,
 * first in the gateway's PATH, prints that probe and runs nothing else).
 *   - GET /v1/cluster shows each host's arch, isa and numerics as probed;
 *   - moving the instance to foreign.test is refused (409) saying that it
 *     would change its requests' later tokens, and a move the policy
 *     chooses finds no host of the instance's contract elsewhere (409
 *     naming it);
 *   - an instance pinned across both hosts is refused (409 naming both
 *     contracts);
 *   - the instance serves on where it was, and never started moving. */
#include "cluster/cluster.h"
#include "cluster_client.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define DEADLINE 120.0
#define ADMIN    "Authorization: Bearer admin-secret\r\n"
#define FOREIGN  "other-contract-9"

static struct cluster_client client = {0, ADMIN};

/* Writes an mpirun into dir that answers `mpirun ... lockstep probe` with
 * foreign.test's probe and fails anything else; 1 if written. */
static int write_fake_mpirun(const char *dir) {
    char path[600];
    snprintf(path, sizeof(path), "%s/mpirun", dir);
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    fprintf(f, "#!/bin/sh\n"
               "# test_gateway_numerics: foreign.test is an arm64 host of another build\n"
               "case \"$*\" in\n"
               "*\" probe\") echo '{\"hostname\":\"foreign\",\"cores\":4,"
               "\"memory_total\":8589934592,\"memory_available\":8589934592,\"isa\":\"i8mm\","
               "\"load\":0.5,\"arch\":\"aarch64\",\"numerics\":\"" FOREIGN "\"}'; exit 0 ;;\n"
               "esac\n"
               "exit 1\n");
    return fclose(f) == 0 && chmod(path, 0755) == 0;
}

/* The host called name in a /v1/cluster answer, or NULL. */
static cJSON *host_of(cJSON *cluster, const char *name) {
    cJSON *host;
    cJSON_ArrayForEach(host, cJSON_GetObjectItem(cluster, "hosts")) {
        const char *at = cJSON_GetStringValue(cJSON_GetObjectItem(host, "name"));
        if (at && !strcmp(at, name)) return host;
    }
    return NULL;
}

static const char *field(cJSON *object, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(object, key));
    return s ? s : "(none)";
}

/* Waits until foreign.test's probe answered; 1, or 0 at the deadline. */
static int wait_probed(void) {
    for (double start = test_now(); test_now() - start < 30;) {
        cJSON *c = cluster_client_state(&client);
        int up = c && !strcmp(field(host_of(c, "foreign.test"), "state"), "up");
        cJSON_Delete(c);
        if (up) return 1;
        struct timespec nap = {0, 100000000};
        nanosleep(&nap, NULL);
    }
    return 0;
}

static void test_shows_hosts(void) {
    cJSON *c = cluster_client_state(&client);
    cJSON *local = host_of(c, "localhost"), *foreign = host_of(c, "foreign.test");
    CHECK(local && foreign);
    CHECK_MSG(!strcmp(field(local, "numerics"), CLUSTER_NUMERICS), "%s", field(local, "numerics"));
    CHECK(strcmp(field(local, "arch"), "(none)") != 0 && field(local, "arch")[0]);
    CHECK_MSG(!strcmp(field(foreign, "arch"), "aarch64") &&
                  !strcmp(field(foreign, "isa"), "i8mm") &&
                  !strcmp(field(foreign, "numerics"), FOREIGN),
              "foreign.test: %s %s %s", field(foreign, "arch"), field(foreign, "isa"),
              field(foreign, "numerics"));
    cJSON_Delete(c);
}

/* An admin call's status, with its body holding want. */
static void expect_admin(const char *path, const char *json, int status, const char *want) {
    char *body = NULL;
    int got = cluster_client_admin(&client, "POST", path, ADMIN, json, &body);
    CHECK_MSG(got == status && body && strstr(body, want), "POST %s %s: %d %s (expected %d, '%s')",
              path, json, got, body ? body : "", status, want);
    free(body);
}

static void test_refusals(void) {
    expect_admin("/admin/instances/rand-1/move", "{\"hosts\":[\"foreign.test\"]}", 409,
                 "moving rand-1 would change its requests' later tokens: host foreign.test "
                 "computes with numerics " FOREIGN ", not " CLUSTER_NUMERICS);
    expect_admin("/admin/instances/rand-1/move", "{}", 409,
                 "on the hosts of numerics " CLUSTER_NUMERICS);
    expect_admin("/admin/instances",
                 "{\"model\":\"rand\",\"tp\":2,\"hosts\":[\"localhost\","
                 "\"foreign.test\"]}",
                 409,
                 "host foreign.test computes with numerics " FOREIGN
                 ", the instance's other ranks with " CLUSTER_NUMERICS);
    cJSON *c = cluster_client_state(&client), *in = cluster_client_instance(c, "rand-1");
    CHECK_MSG(in && !strcmp(field(in, "hosts"), "localhost"), "rand-1 on %s", field(in, "hosts"));
    CHECK_MSG(in && cJSON_IsNull(cJSON_GetObjectItem(in, "move")), "rand-1 moved");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(c, "instances")) == 1);
    cJSON_Delete(c);
}

int main(void) {
    char model[512], hostfile[512], dir[512], path_env[4200];
    if (!cluster_client_model(model, sizeof(model), "numerics-rand.gguf"))
        return test_status("test_gateway_numerics");
    if (!cluster_client_hostfile(hostfile, sizeof(hostfile), "numerics-hosts",
                                 "localhost slots=2\nforeign.test slots=2\n"))
        return 1;
    test_tmp_path(dir, sizeof(dir), "numerics-bin");
    mkdir(dir, 0755);
    CHECK(write_fake_mpirun(dir));
    const char *path = getenv("PATH");
    snprintf(path_env, sizeof(path_env), "PATH=%s:%s", dir, path ? path : "/usr/bin:/bin");
    const char *const env[] = {path_env, NULL};
    struct test_service server;
    char *const extra[] = {"--name",      "rand",         "--cluster",
                           hostfile,      "--place",      "rand=tp:1,hosts:localhost",
                           "--admin-key", "admin-secret", "--probe-interval",
                           "1",           "-t",           "1",
                           NULL};
    int port = test_start_gateway(&server, model, extra, env, DEADLINE);
    client.port = port;
    CHECK_MSG(port > 0, "the gateway did not start");
    if (port > 0) {
        CHECK_MSG(wait_probed(), "foreign.test was not probed");
        test_shows_hosts();
        test_refusals();
    }
    int status = test_stop_service(&server, 20);
    CHECK_MSG(port <= 0 || status == 0, "lockstep serve exited with %d", status);
    CHECK_MSG(test_reap_children(10) == 0, "processes were left running");
    return test_status("test_gateway_numerics");
}
