/* cluster_client.c -- the cluster tests' calls to a running gateway (see
 * cluster_client.h). */
#include "cluster_client.h"

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STREAM_DEADLINE 180.0 /* seconds a stream may take */

static void nap_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

int cluster_client_model(char *path, size_t size, const char *file) {
    char *const options[] = {
        "--dim",   "128", "--hidden", "256", "--layers", "2",   "--heads", "4", "--kv-heads", "2",
        "--vocab", "300", "--ctx",    "512", "--type",   "f32", "--seed",  "7", NULL};
    test_tmp_path(path, size, file);
    return test_write_random_model(path, options);
}

int cluster_client_hostfile(char *path, size_t size, const char *file, const char *text) {
    test_tmp_path(path, size, file);
    FILE *f = fopen(path, "w");
    int written = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0) written = 0;
    return written;
}

cJSON *cluster_client_state(const struct cluster_client *c) {
    struct test_http h = test_http_request(c->port, "GET", "/v1/cluster", c->key, NULL, 10);
    cJSON *j = h.status == 200 ? cJSON_Parse(h.body) : NULL;
    test_http_free(&h);
    return j;
}

cJSON *cluster_client_instance(cJSON *cluster, const char *id) {
    cJSON *in;
    cJSON_ArrayForEach(in, cJSON_GetObjectItem(cluster, "instances")) {
        const char *its = cJSON_GetStringValue(cJSON_GetObjectItem(in, "id"));
        if (its && !strcmp(its, id)) return in;
    }
    return NULL;
}

int cluster_client_wait_placed(const struct cluster_client *c, const char *id, const char *hosts,
                               double deadline) {
    double start = test_now();
    while (test_now() - start < deadline) {
        cJSON *state = cluster_client_state(c), *in = cluster_client_instance(state, id);
        const char *at = cJSON_GetStringValue(cJSON_GetObjectItem(in, "hosts"));
        const char *how = cJSON_GetStringValue(cJSON_GetObjectItem(in, "state"));
        int done = how && at && !strcmp(how, "ready") && !strcmp(at, hosts);
        cJSON_Delete(state);
        if (done) return 1;
        nap_ms(50);
    }
    return 0;
}

int cluster_client_wait_instances(const struct cluster_client *c, int n, double deadline) {
    for (double start = test_now(); test_now() - start < deadline; nap_ms(50)) {
        cJSON *state = cluster_client_state(c);
        int have = state ? cJSON_GetArraySize(cJSON_GetObjectItem(state, "instances")) : -1;
        cJSON_Delete(state);
        if (have == n) return 1;
    }
    return 0;
}

int cluster_client_admin(const struct cluster_client *c, const char *method, const char *path,
                         const char *key, const char *json, char **body) {
    struct test_http h = test_http_request(c->port, method, path, key, json, 30);
    int status = h.status;
    if (body) *body = h.body ? strdup(h.body) : NULL;
    if (status >= 400 && !body) fprintf(stderr, "%s %s: %d %s\n", method, path, status, h.body);
    test_http_free(&h);
    return status;
}

double cluster_client_wait_in_flight(const struct cluster_client *c, const char *id, int n) {
    double start = test_now(), held = 0;
    while (test_now() - start < 30 && held < n) {
        cJSON *state = cluster_client_state(c);
        held = cJSON_GetNumberValue(
            cJSON_GetObjectItem(cluster_client_instance(state, id), "requests"));
        cJSON_Delete(state);
        if (held < n) nap_ms(5);
    }
    return held;
}

int cluster_client_slow_down(const struct cluster_client *c, const char *model) {
    char body[256];
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"kind\":\"delay\",\"delay_ms\":25,\"steps\":40}", model);
    struct test_http h = test_http_request(c->port, "POST", "/debug/fault", c->key, body, 10);
    int ok = h.status == 200;
    if (!ok) fprintf(stderr, "delay fault: %d %s\n", h.status, h.body ? h.body : "");
    test_http_free(&h);
    return ok;
}

/* ---------- streams ---------- */

/* Appends a text delta to the stream's text. */
static void add_text(struct cluster_stream *s, size_t *length, const char *text) {
    size_t n = strlen(text);
    char *grown = realloc(s->text, *length + n + 1);
    if (!grown) return;
    s->text = grown;
    memcpy(s->text + *length, text, n + 1);
    *length += n;
}

/* Joins the text deltas of an SSE body and notes its end. */
static void read_events(struct cluster_stream *s, const char *body) {
    size_t length = 0;
    s->text = calloc(1, 1);
    for (const char *line = body; line && *line;) {
        const char *end = strchr(line, '\n');
        if (!strncmp(line, "data: [DONE]", 12)) s->done = 1;
        if (!strncmp(line, "data: {", 7)) {
            char *json = strndup(line + 6, end ? (size_t)(end - line - 6) : strlen(line + 6));
            cJSON *j = cJSON_Parse(json);
            cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
            const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(choice, "text"));
            const char *finish = cJSON_GetStringValue(cJSON_GetObjectItem(choice, "finish_reason"));
            if (text) add_text(s, &length, text);
            if (finish) snprintf(s->finish, sizeof(s->finish), "%s", finish);
            if (cJSON_GetObjectItem(j, "error")) snprintf(s->finish, sizeof(s->finish), "error");
            cJSON_Delete(j);
            free(json);
        }
        line = end ? end + 1 : NULL;
    }
}

static void *run_stream(void *arg) {
    struct cluster_stream *s = arg;
    char body[256];
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"prompt\":\"stream %d\",\"max_tokens\":%d,\"stream\":true,"
             "\"temperature\":0.9,\"seed\":%d,\"ignore_eos\":true}",
             s->model, s->index, s->max_tokens, 100 + s->index);
    struct test_http h = test_http_request(s->client->port, "POST", "/v1/completions",
                                           s->client->key, body, STREAM_DEADLINE);
    s->status = h.status;
    read_events(s, h.body);
    test_http_free(&h);
    return NULL;
}

void cluster_streams_start(struct cluster_stream *s, int n, const struct cluster_client *c,
                           const char *model, int max_tokens) {
    for (int i = 0; i < n; i++) {
        s[i] = (struct cluster_stream){
            .client = c, .model = model, .index = i, .max_tokens = max_tokens};
        pthread_create(&s[i].thread, NULL, run_stream, &s[i]);
    }
}

void cluster_streams_join(struct cluster_stream *s, int n) {
    for (int i = 0; i < n; i++) pthread_join(s[i].thread, NULL);
}

void cluster_streams_check(struct cluster_stream *s, const struct cluster_stream *reference, int n,
                           const char *what) {
    int same = 0;
    for (int i = 0; i < n; i++) {
        int whole = s[i].status == 200 && s[i].done && !strcmp(s[i].finish, "length");
        same += whole && s[i].text && reference[i].text && !strcmp(s[i].text, reference[i].text);
        if (!whole)
            fprintf(stderr, "%s: stream %d: status %d, finish '%s', done %d\n", what, i,
                    s[i].status, s[i].finish, s[i].done);
        free(s[i].text);
        s[i].text = NULL;
    }
    CHECK_MSG(same == n, "%s: %d of %d streams gave the undisturbed text", what, same, n);
}
