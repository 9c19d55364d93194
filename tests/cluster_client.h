/* cluster_client.h -- what the cluster tests do to a running gateway: read
 * GET /v1/cluster, call the admin API, wait for an instance to be placed,
 * and run seeded completion streams whose texts are compared with an
 * undisturbed run. Every wait has a deadline. */
#ifndef LOCKSTEP_TESTS_CLUSTER_CLIENT_H
#define LOCKSTEP_TESTS_CLUSTER_CLIENT_H

#include <cjson/cJSON.h>
#include <pthread.h>

/* Writes the cluster tests' small random model (f32, seed 7) to a
 * temporary path named after file (path: size bytes); 1 if written. */
int cluster_client_model(char *path, size_t size, const char *file);
/* Writes text to a temporary file named after file (path: size bytes);
 * 1 if written. */
int cluster_client_hostfile(char *path, size_t size, const char *file, const char *text);

/* The gateway the helpers talk to and the key they send (a header line
 * ending "\r\n"). */
struct cluster_client {
    int port;
    const char *key;
};

/* GET /v1/cluster, parsed (cJSON_Delete it), or NULL. */
cJSON *cluster_client_state(const struct cluster_client *c);
/* The instance with this id in a /v1/cluster answer, or NULL. */
cJSON *cluster_client_instance(cJSON *cluster, const char *id);
/* Waits until the cluster has n instances; 1, or 0 at the deadline. */
int cluster_client_wait_instances(const struct cluster_client *c, int n, double deadline);
/* Waits until instance id is ready on hosts (its "hosts" text) with no
 * move in progress; 1, or 0 at the deadline. */
int cluster_client_wait_placed(const struct cluster_client *c, const char *id, const char *hosts,
                               double deadline);
/* An admin call's status (and its body in *body when asked: free() it);
 * with key NULL, the call carries no key. */
int cluster_client_admin(const struct cluster_client *c, const char *method, const char *path,
                         const char *key, const char *json, char **body);
/* Waits until instance id holds at least n unfinished requests; how many
 * it held when it returned. */
double cluster_client_wait_in_flight(const struct cluster_client *c, const char *id, int n);
/* Slows the runner of model's instance down (a delay fault on its steps),
 * so that streams are mid-way when the cluster changes; 1 if taken. */
int cluster_client_slow_down(const struct cluster_client *c, const char *model);

/* One seeded completion stream (temperature 0.9, ignore_eos) of model. */
struct cluster_stream {
    pthread_t thread;
    const struct cluster_client *client;
    const char *model;
    int index; /* its prompt and seed */
    int max_tokens;
    char *text;      /* the deltas joined */
    char finish[16]; /* the last finish_reason ("error" for an error event) */
    int done;        /* 1: [DONE] arrived */
    int status;
};

/* Starts n streams of model in threads of their own. */
void cluster_streams_start(struct cluster_stream *s, int n, const struct cluster_client *c,
                           const char *model, int max_tokens);
void cluster_streams_join(struct cluster_stream *s, int n);
/* Checks that every stream ended whole with the reference's text (what
 * names the case); frees their texts. */
void cluster_streams_check(struct cluster_stream *s, const struct cluster_stream *reference, int n,
                           const char *what);

#endif
