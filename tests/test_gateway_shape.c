/* test_gateway_shape.c -- the policy chooses an instance's shape when none
 * is asked for (cluster_choose_shape), through lockstep serve.
 *
 * The cluster is this machine under two names (localhost and 127.0.0.2),
 * each with a memory= limit of 140 MiB; the random model (8 layers of
 * about 12.6 MB in F32) needs some 169 MiB on one rank and some 120 on
 * each of two, so it fits neither host alone and both together.
 * `lockstep serve` is given no --tp and no --pp:
 *   - the instance starts across both hosts at pp 2 (placed before the
 *     link probe has measured the link, which then counts as slow), the
 *     event log says the policy chose it, and 4 seeded streams finish;
 *   - the other shape on the same two hosts, started once the first has
 *     stopped, gives the same streams exactly;
 *   - the link probe measures the link both ways (GET /v1/cluster shows
 *     it, and an event);
 *   - a second instance asked for with no shape is refused with the
 *     reason: the model fits no single host, nor the hosts left. */
#include "cluster_client.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEADLINE   180.0
#define N_STREAMS  4
#define MAX_TOKENS 48
#define ADMIN      "Authorization: Bearer admin-secret\r\n"
#define INFERENCE  "Authorization: Bearer inference-secret\r\n"

static struct cluster_client client = {0, ADMIN};
static struct cluster_client inference = {0, INFERENCE};

/* rand-1's tp and pp as GET /v1/cluster shows them; 0 with none. */
static int instance_shape(int *tp, int *pp) {
    cJSON *c = cluster_client_state(&client);
    cJSON *in = cluster_client_instance(c, "rand-1");
    *tp = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(in, "tp"));
    *pp = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(in, "pp"));
    cJSON_Delete(c);
    return in != NULL;
}

/* The links GET /v1/cluster shows once the link probe measured them:
 * both ways between the two hosts, each with a latency and a rate; 1 once
 * they are there, within seconds. */
static int links_measured(double seconds) {
    double start = test_now();
    for (;;) {
        cJSON *c = cluster_client_state(&client), *link;
        int found = 0;
        cJSON_ArrayForEach(link, cJSON_GetObjectItem(c, "links")) {
            const char *from = cJSON_GetStringValue(cJSON_GetObjectItem(link, "from"));
            double us = cJSON_GetNumberValue(cJSON_GetObjectItem(link, "latency_us"));
            double rate = cJSON_GetNumberValue(cJSON_GetObjectItem(link, "bytes_per_second"));
            found += from && us > 0 && rate > 0;
        }
        cJSON_Delete(c);
        if (found == 2) return 1;
        if (test_now() - start > seconds) return 0;
        struct timespec nap = {0, 100000000};
        nanosleep(&nap, NULL);
    }
}

/* 1 if an event of the cluster's log contains text. */
static int event_says(const char *text) {
    struct test_http h = test_http_request(client.port, "GET", "/v1/cluster", ADMIN, NULL, 10);
    int found = h.status == 200 && h.body && strstr(h.body, text);
    test_http_free(&h);
    return found;
}

static void run_checks(void) {
    struct cluster_stream reference[N_STREAMS], other_shape[N_STREAMS];
    int tp = 0, pp = 0;
    char *body = NULL;
    int placed = cluster_client_wait_placed(&client, "rand-1", "localhost+127.0.0.2", 120) ||
                 cluster_client_wait_placed(&client, "rand-1", "127.0.0.2+localhost", 5);
    CHECK_MSG(placed, "rand-1 is not placed across both hosts");
    CHECK(instance_shape(&tp, &pp));
    /* placed at start, before any link is measured: unmeasured links are slow */
    CHECK_MSG(tp == 1 && pp == 2, "chosen: tp %d, pp %d (expected pp 2)", tp, pp);
    CHECK_MSG(event_says("(tp 1, pp 2, chosen by the policy)"),
              "no event says the policy chose the shape");
    cluster_streams_start(reference, N_STREAMS, &inference, "rand", MAX_TOKENS);
    cluster_streams_join(reference, N_STREAMS);
    for (int i = 0; i < N_STREAMS; i++)
        CHECK_MSG(reference[i].status == 200 && reference[i].done && reference[i].text,
                  "stream %d at tp %d, pp %d failed (%d)", i, tp, pp, reference[i].status);
    /* the other shape on the same hosts gives the same text (a live move
     * would need room for both placements at once) */
    CHECK(cluster_client_admin(&client, "DELETE", "/admin/instances/rand-1", ADMIN, NULL, NULL) ==
          202);
    CHECK_MSG(cluster_client_wait_instances(&client, 0, 30), "rand-1 did not stop");
    const char *other =
        "{\"model\":\"rand\",\"tp\":2,\"pp\":1,\"hosts\":[\"localhost\",\"127.0.0.2\"]}";
    CHECK(cluster_client_admin(&client, "POST", "/admin/instances", ADMIN, other, NULL) == 201);
    CHECK_MSG(cluster_client_wait_placed(&client, "rand-2", "localhost+127.0.0.2", 120),
              "rand-2 is not placed as %s", other);
    cluster_streams_start(other_shape, N_STREAMS, &inference, "rand", MAX_TOKENS);
    cluster_streams_join(other_shape, N_STREAMS);
    cluster_streams_check(other_shape, reference, N_STREAMS, "the other shape");
    CHECK_MSG(links_measured(60), "GET /v1/cluster shows no measured links");
    CHECK_MSG(event_says("links between 2 hosts measured"),
              "no event says the links were measured");
    int status = cluster_client_admin(&client, "POST", "/admin/instances", ADMIN,
                                      "{\"model\":\"rand\"}", &body);
    CHECK_MSG(status == 409 && body && strstr(body, "the model fits no single host"),
              "a second instance: %d %s", status, body ? body : "");
    free(body);
    for (int i = 0; i < N_STREAMS; i++) free(reference[i].text);
}

int main(void) {
    char model[512], hostfile[512],
        *shape[] = {"--dim",  "512",        "--hidden", "1536",    "--layers", "8",     "--heads",
                    "8",      "--kv-heads", "4",        "--vocab", "300",      "--ctx", "512",
                    "--type", "f32",        "--seed",   "11",      NULL};
    test_tmp_path(model, sizeof(model), "shape-rand.gguf");
    if (!test_write_random_model(model, shape)) return test_status("test_gateway_shape");
    if (!cluster_client_hostfile(hostfile, sizeof(hostfile), "shape-hosts",
                                 "# this machine under two names, each too small alone\n"
                                 "localhost slots=4 memory=140M\n"
                                 "127.0.0.2 slots=4 memory=140M\n"))
        return 1;
    struct test_service server;
    char *const extra[] = {"--name",
                           "rand",
                           "--cluster",
                           hostfile,
                           "--api-key",
                           "inference-secret",
                           "--admin-key",
                           "admin-secret",
                           "--enable-faults",
                           "-t",
                           "1",
                           "--probe-interval",
                           "1",
                           NULL};
    int port = test_start_gateway(&server, model, extra, NULL, DEADLINE);
    client.port = inference.port = port;
    CHECK_MSG(port > 0, "the gateway did not start");
    if (port > 0) run_checks();
    int status = test_stop_service(&server, 20);
    CHECK_MSG(port <= 0 || status == 0, "lockstep serve exited with %d", status);
    CHECK_MSG(test_reap_children(10) == 0, "processes were left running");
    remove(model);
    return test_status("test_gateway_shape");
}
