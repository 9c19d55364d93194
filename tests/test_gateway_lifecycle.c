/* test_gateway_lifecycle.c -- what an instance's life leaves behind and
 * how the cluster's operations combine, with streams running through them:
 *   - descriptors: moves and create+delete cycles leave the gateway with
 *     the descriptors it had (a retired instance is freed, pipes and all,
 *     once no request names it);
 *   - a DELETE during a move wins: the moved instance finishes its streams
 *     (whole, with the undisturbed texts) and stops, and the model then
 *     answers 503;
 *   - a host lost (the lose-host fault) gets no runner restarted on it: the
 *     instance is placed elsewhere with no "restart" event in between, and
 *     the restart count of an earlier kill survives the move;
 *   - a drained host (POST /admin/hosts/NAME/drain) sends its instance
 *     elsewhere under streaming load, takes no new placement (409 naming
 *     it) until /undrain, and the endpoint's errors.
 * The cluster is this machine under three names, as in
 * test_gateway_cluster.c, on a random model with seeded sampling.
 * ctest-labels: concurrency */
#include "cluster_client.h"
#include "testutil.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEADLINE   180.0
#define N_STREAMS  4
#define MAX_TOKENS 160
#define ADMIN      "Authorization: Bearer admin-secret\r\n"
#define INFERENCE  "Authorization: Bearer inference-secret\r\n"

static struct cluster_client client = {0, ADMIN};
static struct cluster_client inference = {0, INFERENCE};
static struct cluster_stream reference[N_STREAMS];
static int gateway_pid;

static void nap_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Open descriptors of the gateway process. */
static int count_descriptors(void) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", gateway_pid);
    DIR *d = opendir(path);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The id of the only instance of rand, copied into id; 1 if there is one. */
static int only_instance(char *id, size_t size) {
    cJSON *c = cluster_client_state(&client), *list = cJSON_GetObjectItem(c, "instances");
    int n = cJSON_GetArraySize(list);
    const char *its = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(list, 0), "id"));
    if (n == 1 && its) snprintf(id, size, "%s", its);
    cJSON_Delete(c);
    return n == 1 && its;
}

/* Starts an instance of rand at tp 1 on host and waits until it is ready;
 * its id in id, 1 on success. */
static int create_on(const char *host, char *id, size_t size) {
    char json[128], *body = NULL, hosts[64];
    snprintf(json, sizeof(json), "{\"model\":\"rand\",\"tp\":1,\"hosts\":[\"%s\"]}", host);
    int status = cluster_client_admin(&client, "POST", "/admin/instances", ADMIN, json, &body);
    cJSON *j = body ? cJSON_Parse(body) : NULL;
    const char *its = cJSON_GetStringValue(cJSON_GetObjectItem(j, "id"));
    snprintf(id, size, "%s", its ? its : "");
    cJSON_Delete(j);
    CHECK_MSG(status == 201, "create on %s: %d %s", host, status, body ? body : "");
    free(body);
    snprintf(hosts, sizeof(hosts), "%s", host);
    return status == 201 && cluster_client_wait_placed(&client, id, hosts, 60);
}

/* Events of kind about instance id in GET /v1/cluster's latest ones. */
static int count_events(const char *kind, const char *id) {
    cJSON *c = cluster_client_state(&client), *e;
    int n = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "events")) {
        const char *k = cJSON_GetStringValue(cJSON_GetObjectItem(e, "kind"));
        const char *in = cJSON_GetStringValue(cJSON_GetObjectItem(e, "instance"));
        n += k && !strcmp(k, kind) && (!id || (in && !strcmp(in, id)));
    }
    cJSON_Delete(c);
    return n;
}

/* The value of the /metrics sample line that starts with prefix (its
 * labels closed by "} "), or -1 when there is none. */
static double metric(const char *prefix) {
    struct test_http h = test_http_request(client.port, "GET", "/metrics", INFERENCE, NULL, 10);
    const char *at = h.body ? strstr(h.body, prefix) : NULL;
    double value = at ? atof(at + strlen(prefix)) : -1;
    test_http_free(&h);
    return value;
}

/* Every series an operator graphs is there at 0 before anything happened. */
static void test_metrics_from_start(void) {
    static const char *const zero[] = {
        "lockstep_runner_restarts_total{model=\"rand\",instance=\"rand-1\"} ",
        "lockstep_stuck_detections_total{model=\"rand\",instance=\"rand-1\"} ",
        "lockstep_recovery_seconds_count{model=\"rand\",instance=\"rand-1\"} ",
        "lockstep_detection_seconds_count{model=\"rand\",instance=\"rand-1\"} ",
        "lockstep_moves_total{model=\"rand\",outcome=\"done\"} ",
        "lockstep_moves_total{model=\"rand\",outcome=\"failed\"} ",
        "lockstep_move_seconds_count{model=\"rand\"} ",
        "lockstep_prefix_cache_hits_total{model=\"rand\",instance=\"rand-1\"} ",
        "lockstep_queue_seconds_count{model=\"rand\",instance=\"rand-1\"} ",
        "lockstep_request_duration_seconds_count{model=\"rand\"} ",
        "lockstep_oldest_request_seconds{model=\"rand\",instance=\"rand-1\"} ",
        "lockstep_instance_state{instance=\"rand-1\",state=\"failed\"} "};
    for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++)
        CHECK_MSG(metric(zero[i]) == 0, "%s: %g at the start", zero[i], metric(zero[i]));
    CHECK(metric("lockstep_instance_state{instance=\"rand-1\",state=\"ready\"} ") == 1);
    CHECK(metric("lockstep_host_up{host=\"127.0.0.3\"} ") == 1);
}

/* A request held where nothing moves (its runner stopped) shows its age
 * in /health and /metrics until the watchdog's new runner finishes it. */
static void *held_request(void *arg) {
    struct test_http *h = arg;
    *h = test_http_request(client.port, "POST", "/v1/completions", INFERENCE,
                           "{\"model\":\"rand\",\"prompt\":\"held\",\"max_tokens\":4}", 60);
    return NULL;
}

static double health_oldest(void) {
    struct test_http h = test_http_request(client.port, "GET", "/health", NULL, NULL, 10);
    cJSON *j = h.body ? cJSON_Parse(h.body) : NULL;
    double value = cJSON_GetNumberValue(cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(j, "models"), 0), "oldest_request_seconds"));
    cJSON_Delete(j);
    test_http_free(&h);
    return value;
}

static void test_oldest_request(void) {
    struct test_http h = test_http_request(client.port, "POST", "/debug/fault", INFERENCE,
                                           "{\"model\":\"rand\",\"kind\":\"stop\"}", 10);
    CHECK_MSG(h.status == 200, "stop: %d %s", h.status, h.body ? h.body : "");
    test_http_free(&h);
    struct test_http answer = {0};
    pthread_t thread;
    pthread_create(&thread, NULL, held_request, &answer);
    double oldest = 0;
    for (double start = test_now(); oldest < 0.5 && test_now() - start < 20; nap_ms(20))
        oldest = health_oldest();
    CHECK_MSG(oldest >= 0.5, "the held request's age never showed in /health (%g)", oldest);
    CHECK(metric("lockstep_oldest_request_seconds{model=\"rand\",instance=\"rand-1\"} ") > 0);
    pthread_join(thread, NULL);
    CHECK_MSG(answer.status == 200, "the held request: %d %s", answer.status,
              answer.body ? answer.body : "");
    test_http_free(&answer);
    CHECK_MSG(health_oldest() == 0, "an instance with no request: oldest %g s", health_oldest());
    CHECK(metric("lockstep_oldest_request_seconds{model=\"rand\",instance=\"rand-1\"} ") == 0);
    CHECK(metric("lockstep_stuck_detections_total{model=\"rand\",instance=\"rand-1\"} ") == 1);
}

static void test_descriptors(void) {
    char id[160], other[160], path[256];
    CHECK(only_instance(id, sizeof(id)));
    int before = count_descriptors();
    snprintf(path, sizeof(path), "/admin/instances/%s/move", id);
    for (int i = 0; i < 4; i++) {
        const char *to = i % 2 ? "localhost" : "127.0.0.2";
        char json[96];
        snprintf(json, sizeof(json), "{\"tp\":1,\"hosts\":[\"%s\"]}", to);
        CHECK(cluster_client_admin(&client, "POST", path, ADMIN, json, NULL) == 202);
        CHECK_MSG(cluster_client_wait_placed(&client, id, to, 60), "move %d to %s", i, to);
    }
    for (int i = 0; i < 3; i++) {
        CHECK(create_on("127.0.0.3", other, sizeof(other)));
        snprintf(path, sizeof(path), "/admin/instances/%s", other);
        CHECK(cluster_client_admin(&client, "DELETE", path, ADMIN, NULL, NULL) == 202);
        CHECK_MSG(cluster_client_wait_instances(&client, 1, 30), "%s was not stopped", other);
        /* a deleted instance's series go with it: label sets do not grow */
        char series[256];
        snprintf(series, sizeof(series),
                 "lockstep_runner_restarts_total{model=\"rand\",instance=\"%s\"} ", other);
        CHECK_MSG(metric(series) == -1, "%s is still in /metrics", series);
    }
    /* a retired instance goes when its supervisor is joined: soon after */
    int after = count_descriptors();
    for (double start = test_now(); after > before && test_now() - start < 10; nap_ms(50))
        after = count_descriptors();
    fprintf(stderr, "descriptors: %d before, %d after 4 moves and 3 create+delete cycles\n", before,
            after);
    CHECK_MSG(before > 0 && after <= before + 2, "descriptors grew from %d to %d", before, after);
    CHECK(metric("lockstep_moves_total{model=\"rand\",outcome=\"done\"} ") == 4);
    CHECK(metric("lockstep_move_seconds_count{model=\"rand\"} ") == 4);
}

static void test_delete_during_move(void) {
    struct cluster_stream s[N_STREAMS];
    char id[160], path[256], *body = NULL;
    CHECK(only_instance(id, sizeof(id)));
    CHECK(cluster_client_slow_down(&inference, "rand"));
    cluster_streams_start(s, N_STREAMS, &inference, "rand", MAX_TOKENS);
    cluster_client_wait_in_flight(&client, id, N_STREAMS / 2);
    int moves = count_events("move", id);
    snprintf(path, sizeof(path), "/admin/instances/%s/move", id);
    CHECK(cluster_client_admin(&client, "POST", path, ADMIN, "{\"tp\":1,\"hosts\":[\"127.0.0.3\"]}",
                               NULL) == 202);
    snprintf(path, sizeof(path), "/admin/instances/%s", id);
    int status = cluster_client_admin(&client, "DELETE", path, ADMIN, NULL, &body);
    /* 202 (the delete wins once the move is done) or 409 with the reason */
    CHECK_MSG(status == 202 || (status == 409 && body && strstr(body, "mov")),
              "DELETE during a move: %d %s", status, body ? body : "");
    free(body);
    cluster_streams_join(s, N_STREAMS);
    cluster_streams_check(s, reference, N_STREAMS, "delete during a move");
    if (status == 202) {
        CHECK_MSG(cluster_client_wait_instances(&client, 0, 30),
                  "%s is still there after a DELETE during its move", id);
        CHECK_MSG(count_events("move", id) >= moves + 2, "the move did not complete first");
        struct test_http h =
            test_http_request(client.port, "POST", "/v1/completions", INFERENCE,
                              "{\"model\":\"rand\",\"prompt\":\"x\",\"max_tokens\":2}", 30);
        CHECK_MSG(h.status == 503, "a request after the delete: %d %s", h.status,
                  h.body ? h.body : "");
        test_http_free(&h);
    }
}

static void test_lost_host(void) {
    struct cluster_stream s[N_STREAMS];
    char id[160];
    CHECK(create_on("127.0.0.2", id, sizeof(id)));
    /* a restart first, which the count must keep through the move */
    struct test_http k = test_http_request(client.port, "POST", "/debug/fault", INFERENCE,
                                           "{\"model\":\"rand\",\"kind\":\"kill\"}", 10);
    CHECK_MSG(k.status == 200, "kill: %d %s", k.status, k.body ? k.body : "");
    test_http_free(&k);
    int restarts_before = 0;
    cJSON *c = NULL;
    for (double start = test_now(); test_now() - start < 30; nap_ms(50)) {
        c = cluster_client_state(&client);
        cJSON *in = cluster_client_instance(c, id);
        const char *state = cJSON_GetStringValue(cJSON_GetObjectItem(in, "state"));
        restarts_before = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(in, "restarts"));
        int ready = state && !strcmp(state, "ready") && restarts_before >= 1;
        cJSON_Delete(c);
        if (ready) break;
    }
    CHECK_MSG(restarts_before >= 1, "%s was not restarted after a kill", id);
    int restart_events = count_events("restart", id) + count_events("stuck", id);
    cluster_streams_start(s, N_STREAMS, &inference, "rand", MAX_TOKENS);
    cluster_client_wait_in_flight(&client, id, N_STREAMS / 2);
    struct test_http h =
        test_http_request(client.port, "POST", "/debug/fault", INFERENCE,
                          "{\"model\":\"rand\",\"kind\":\"lose-host\",\"seconds\":30}", 10);
    CHECK_MSG(h.status == 200, "lose-host: %d %s", h.status, h.body ? h.body : "");
    test_http_free(&h);
    double start = test_now();
    int away = 0;
    while (!away && test_now() - start < 60) {
        c = cluster_client_state(&client);
        cJSON *in = cluster_client_instance(c, id);
        const char *at = cJSON_GetStringValue(cJSON_GetObjectItem(in, "hosts"));
        const char *state = cJSON_GetStringValue(cJSON_GetObjectItem(in, "state"));
        away = at && state && !strstr(at, "127.0.0.2") && !strcmp(state, "ready");
        cJSON_Delete(c);
        if (!away) nap_ms(50);
    }
    CHECK_MSG(away, "%s did not leave the lost host", id);
    fprintf(stderr, "lost host: %s ready elsewhere %.2f s after the fault\n", id,
            test_now() - start);
    cluster_streams_join(s, N_STREAMS);
    cluster_streams_check(s, reference, N_STREAMS, "lost host");
    CHECK_MSG(count_events("restart", id) + count_events("stuck", id) == restart_events,
              "a runner was restarted on the lost host");
    c = cluster_client_state(&client);
    int restarts =
        (int)cJSON_GetNumberValue(cJSON_GetObjectItem(cluster_client_instance(c, id), "restarts"));
    cJSON_Delete(c);
    CHECK_MSG(restarts == restarts_before, "restarts went from %d to %d over the move",
              restarts_before, restarts);
    /* the dashboard's count and the metric's agree */
    char series[256];
    snprintf(series, sizeof(series),
             "lockstep_runner_restarts_total{model=\"rand\",instance=\"%s\"} ", id);
    CHECK_MSG(metric(series) == restarts, "%s%g, /v1/cluster says %d", series, metric(series),
              restarts);
}

static void test_drain_host(void) {
    struct cluster_stream s[N_STREAMS];
    char id[160], *body = NULL;
    CHECK(only_instance(id, sizeof(id)));
    CHECK(cluster_client_admin(&client, "POST", "/admin/hosts/localhost/drain", INFERENCE, NULL,
                               NULL) == 403);
    CHECK(cluster_client_admin(&client, "POST", "/admin/hosts/nohost/drain", ADMIN, NULL, &body) ==
          404);
    CHECK_MSG(body && strstr(body, "nohost"), "unknown host: %s", body ? body : "");
    free(body);
    CHECK(cluster_client_admin(&client, "POST", "/admin/hosts/localhost/cordon", ADMIN, NULL,
                               &body) == 404);
    free(body);
    CHECK(cluster_client_admin(&client, "POST", "/admin/hosts/localhost/drain", ADMIN, "{}",
                               &body) == 400);
    free(body);
    /* move it to localhost first, then drain localhost under load */
    char path[256];
    snprintf(path, sizeof(path), "/admin/instances/%s/move", id);
    int moved = cluster_client_admin(&client, "POST", path, ADMIN,
                                     "{\"tp\":1,\"hosts\":[\"localhost\"]}", &body);
    CHECK_MSG(moved == 202 || (moved == 409 && body && strstr(body, "nothing moves")),
              "a move to localhost: %d %s", moved, body ? body : "");
    free(body);
    CHECK(cluster_client_wait_placed(&client, id, "localhost", 60));
    CHECK(cluster_client_slow_down(&inference, "rand"));
    cluster_streams_start(s, N_STREAMS, &inference, "rand", MAX_TOKENS);
    cluster_client_wait_in_flight(&client, id, N_STREAMS / 2);
    CHECK(cluster_client_admin(&client, "POST", "/admin/hosts/localhost/drain", ADMIN, NULL,
                               NULL) == 202);
    int away = 0;
    for (double start = test_now(); !away && test_now() - start < 60; nap_ms(50)) {
        cJSON *c = cluster_client_state(&client), *in = cluster_client_instance(c, id);
        const char *at = cJSON_GetStringValue(cJSON_GetObjectItem(in, "hosts"));
        const char *state = cJSON_GetStringValue(cJSON_GetObjectItem(in, "state"));
        away = at && state && !strstr(at, "localhost") && !strcmp(state, "ready");
        cJSON_Delete(c);
    }
    CHECK_MSG(away, "%s did not leave the drained host", id);
    cluster_streams_join(s, N_STREAMS);
    cluster_streams_check(s, reference, N_STREAMS, "drained host");
    cJSON *c = cluster_client_state(&client);
    const char *state = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "hosts"), 0), "state"));
    CHECK_MSG(state && !strcmp(state, "drained"), "localhost's state: %s", state ? state : "-");
    cJSON_Delete(c);
    CHECK(cluster_client_admin(&client, "POST", "/admin/instances", ADMIN,
                               "{\"model\":\"rand\",\"tp\":1,\"hosts\":[\"localhost\"]}",
                               &body) == 409);
    CHECK_MSG(body && strstr(body, "drained"), "placed on a drained host: %s", body ? body : "");
    free(body);
    CHECK(cluster_client_admin(&client, "POST", "/admin/hosts/localhost/undrain", ADMIN, NULL,
                               NULL) == 200);
    CHECK(create_on("localhost", id, sizeof(id)));
}

int main(void) {
    char model[512], hostfile[512];
    if (!cluster_client_model(model, sizeof(model), "lifecycle-rand.gguf"))
        return test_status("test_gateway_lifecycle");
    if (!cluster_client_hostfile(hostfile, sizeof(hostfile), "lifecycle-hosts",
                                 "localhost slots=4\n127.0.0.2 slots=4\n127.0.0.3 slots=4\n"))
        return 1;
    struct test_service server;
    char *const extra[] = {"--name",
                           "rand",
                           "--cluster",
                           hostfile,
                           "--place",
                           "rand=tp:1,hosts:localhost",
                           "--api-key",
                           "inference-secret",
                           "--admin-key",
                           "admin-secret",
                           "--enable-faults",
                           "-t",
                           "1",
                           "--watchdog",
                           "2",
                           NULL};
    int port = test_start_gateway(&server, model, extra, NULL, DEADLINE);
    CHECK_MSG(port > 0, "the gateway did not start");
    client.port = inference.port = port;
    gateway_pid = server.pid;
    if (port > 0) {
        test_metrics_from_start();
        cluster_streams_start(reference, N_STREAMS, &inference, "rand", MAX_TOKENS);
        cluster_streams_join(reference, N_STREAMS);
        for (int i = 0; i < N_STREAMS; i++)
            CHECK_MSG(reference[i].status == 200 && reference[i].done && reference[i].text,
                      "reference stream %d failed (%d)", i, reference[i].status);
        CHECK(metric("lockstep_request_duration_seconds_count{model=\"rand\"} ") == N_STREAMS);
        CHECK(metric("lockstep_queue_seconds_count{model=\"rand\",instance=\"rand-1\"} ") ==
              N_STREAMS);
        test_oldest_request();
        test_descriptors();
        test_delete_during_move();
        test_lost_host();
        test_drain_host();
        for (int i = 0; i < N_STREAMS; i++) free(reference[i].text);
    }
    int status = test_stop_service(&server, 20);
    CHECK_MSG(port <= 0 || status == 0, "lockstep serve exited with %d", status);
    CHECK_MSG(test_reap_children(10) == 0, "processes were left running");
    return test_status("test_gateway_lifecycle");
}
