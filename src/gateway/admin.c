/* admin.c -- GET /v1/cluster and the admin API: the cluster's hosts and
 * instances as JSON, and starting, stopping and moving instances.
 *
 * The admin API (POST /admin/instances, DELETE /admin/instances/ID, POST
 * /admin/instances/ID/move) takes only the admin key (--admin-key), which
 * is not the inference key: a client that may generate text may not
 * rearrange the cluster. GET /v1/cluster is read-only and takes either
 * key. POST /admin/hosts/NAME/drain cordons a host (its instances move
 * elsewhere, nothing new is placed there) and /undrain ends that. The
 * operations themselves are cluster.c's; this file parses their bodies and
 * says what happened. */
#include "gateway_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- GET /v1/cluster ---------- */

static const char *host_state(const struct cluster_host *h) {
    return h->lost ? "lost" : h->drained ? "drained" : h->probed ? "up" : "unprobed";
}

static cJSON *host_json(const struct cluster_host *h, const struct cluster_usage *u) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", h->name);
    cJSON_AddBoolToObject(j, "local", h->local);
    cJSON_AddStringToObject(j, "state", host_state(h));
    cJSON_AddNumberToObject(j, "slots", h->slots);
    cJSON_AddNumberToObject(j, "slots_used", u->slots_used);
    cJSON_AddNumberToObject(j, "cores", h->cores);
    cJSON_AddStringToObject(j, "isa", h->isa);
    cJSON_AddNumberToObject(j, "memory_total", (double)h->memory_total);
    cJSON_AddNumberToObject(j, "memory_available", (double)h->memory_available);
    cJSON_AddNumberToObject(j, "memory_limit", (double)h->memory_limit);
    cJSON_AddNumberToObject(j, "memory_used", (double)u->memory_used);
    cJSON_AddNumberToObject(j, "load", h->load);
    return j;
}

static const char *instance_state_name(const struct gateway_instance *in,
                                       const struct supervisor_view *view) {
    if (in->deleting) return "draining";
    if (in->move.state == GATEWAY_MOVE_STARTING) return "moving";
    return supervisor_state_name(view->state);
}

static cJSON *move_json(const struct gateway_move *m) {
    static const char *const states[] = {"none", "starting", "done", "failed"};
    if (m->state == GATEWAY_MOVE_NONE) return cJSON_CreateNull();
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "state", states[m->state]);
    cJSON_AddNumberToObject(j, "tp", m->tp);
    cJSON_AddStringToObject(j, "to", m->to);
    cJSON_AddStringToObject(j, "reason", m->reason);
    if (m->finished_us)
        cJSON_AddNumberToObject(j, "seconds", (double)(m->finished_us - m->started_us) * 1e-6);
    return j;
}

/* An instance as GET /v1/cluster shows it (cluster lock held). */
static cJSON *instance_json(struct gateway *g, struct gateway_instance *in) {
    cJSON *j = cJSON_CreateObject(), *placement;
    cJSON_AddStringToObject(j, "id", in->id);
    cJSON_AddStringToObject(j, "model", in->name);
    cJSON_AddNumberToObject(j, "tp", in->placement.tp);
    placement = cJSON_AddArrayToObject(j, "placement");
    for (int k = 0; k < in->placement.n_hosts; k++) {
        cJSON *at = cJSON_CreateObject();
        cJSON_AddStringToObject(at, "host", g->hosts[in->placement.host[k]].name);
        cJSON_AddNumberToObject(at, "ranks", in->placement.ranks[k]);
        cJSON_AddItemToArray(placement, at);
    }
    cJSON_AddStringToObject(j, "hosts", in->hosts_text);
    int64_t outstanding = supervisor_outstanding(&in->supervisor);
    struct supervisor_view view;
    supervisor_view(&in->supervisor, &view);
    cJSON_AddStringToObject(j, "state", instance_state_name(in, &view));
    cJSON_AddStringToObject(j, "status", view.status);
    cJSON_AddNumberToObject(j, "restarts", view.restarts);
    cJSON_AddNumberToObject(j, "requests", view.n_jobs);
    cJSON_AddNumberToObject(j, "outstanding_tokens", (double)outstanding);
    cJSON_AddNumberToObject(j, "queue_depth", view.heartbeat.n_waiting);
    cJSON_AddNumberToObject(j, "running", view.heartbeat.n_running);
    cJSON_AddNumberToObject(j, "kv_used", view.heartbeat.kv_blocks_used);
    cJSON_AddNumberToObject(j, "kv_total", view.heartbeat.kv_blocks_total);
    cJSON_AddNumberToObject(j, "runner_pid", (double)view.pid);
    cJSON_AddNumberToObject(j, "generated_tokens", (double)atomic_load(&in->stats.generated));
    cJSON_AddNumberToObject(j, "ttft_seconds_sum", (double)atomic_load(&in->stats.ttft_us) * 1e-6);
    cJSON_AddNumberToObject(j, "ttft_count", (double)atomic_load(&in->stats.ttft_count));
    cJSON_AddNumberToObject(j, "itl_seconds_sum", (double)atomic_load(&in->stats.itl_us) * 1e-6);
    cJSON_AddNumberToObject(j, "itl_count", (double)atomic_load(&in->stats.itl_count));
    cJSON_AddItemToObject(j, "move", move_json(&in->move));
    return j;
}

static cJSON *models_json(const struct gateway *g) {
    cJSON *models = cJSON_CreateArray();
    char why[256];
    for (int i = 0; i < g->n_served; i++) {
        const struct gateway_served *s = &g->served[i];
        cJSON *m = cJSON_CreateObject(), *degrees;
        cJSON_AddStringToObject(m, "name", s->name);
        cJSON_AddStringToObject(m, "path", s->model.path);
        cJSON_AddNumberToObject(m, "context_length", s->context_length);
        degrees = cJSON_AddArrayToObject(m, "tp_degrees");
        for (int tp = 1; tp <= CLUSTER_RANKS_MAX; tp *= 2)
            if (cluster_degree_check(s->file, tp, why, sizeof(why)) == 0)
                cJSON_AddItemToArray(degrees, cJSON_CreateNumber(tp));
        cJSON_AddItemToArray(models, m);
    }
    return models;
}

static cJSON *events_json(const struct gateway *g) {
    cJSON *events = cJSON_CreateArray();
    int first = g->n_events > GATEWAY_EVENTS ? g->n_events - GATEWAY_EVENTS : 0;
    for (int i = first; i < g->n_events; i++) {
        const struct gateway_event *e = &g->events[i % GATEWAY_EVENTS];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "time", e->time);
        cJSON_AddStringToObject(j, "kind", e->kind);
        if (e->instance[0])
            cJSON_AddStringToObject(j, "instance", e->instance);
        else
            cJSON_AddNullToObject(j, "instance");
        if (e->host[0])
            cJSON_AddStringToObject(j, "host", e->host);
        else
            cJSON_AddNullToObject(j, "host");
        cJSON_AddStringToObject(j, "text", e->text);
        cJSON_AddItemToArray(events, j);
    }
    return events;
}

char *gateway_cluster_json(struct gateway *g) {
    struct cluster_usage usage[CLUSTER_HOSTS_MAX];
    cJSON *root = cJSON_CreateObject(), *hosts, *instances;
    cJSON_AddStringToObject(root, "object", "cluster");
    pthread_mutex_lock(&g->cluster_lock);
    gateway_cluster_usage(g, usage);
    hosts = cJSON_AddArrayToObject(root, "hosts");
    for (int i = 0; i < g->n_hosts; i++)
        cJSON_AddItemToArray(hosts, host_json(&g->hosts[i], &usage[i]));
    cJSON_AddItemToObject(root, "models", models_json(g));
    instances = cJSON_AddArrayToObject(root, "instances");
    for (int i = 0; i < g->n_instances; i++)
        cJSON_AddItemToArray(instances, instance_json(g, g->instances[i]));
    cJSON_AddItemToObject(root, "events", events_json(g));
    pthread_mutex_unlock(&g->cluster_lock);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

/* ---------- the admin API ---------- */

/* Reads {"model"?, "tp"?, "hosts"?} (what each call takes); -1 with e. */
static int read_body(const cJSON *j, int need_model, const char **model, int *tp,
                     const char **hosts, int *n_hosts, struct openai_error *e) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tp");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "hosts"), *item;
    *n_hosts = 0;
    if (need_model && !t) {
        openai_error_set(e, 400, "invalid_request_error", "tp", NULL,
                         "tp is required: the instance's tensor-parallel degree");
        return -1;
    }
    if (need_model && !cJSON_IsString(m)) {
        openai_error_set(e, 400, "invalid_request_error", "model", NULL,
                         "model must be the name of a served model");
        return -1;
    }
    *model = need_model ? m->valuestring : NULL;
    if (t && (!cJSON_IsNumber(t) || t->valuedouble != (double)t->valueint || t->valueint < 1 ||
              t->valueint > CLUSTER_RANKS_MAX)) {
        openai_error_set(e, 400, "invalid_request_error", "tp", NULL,
                         "tp must be an integer from 1 to %d", CLUSTER_RANKS_MAX);
        return -1;
    }
    *tp = t ? t->valueint : 0;
    if (h && !cJSON_IsArray(h)) {
        openai_error_set(e, 400, "invalid_request_error", "hosts", NULL,
                         "hosts must be an array of host names");
        return -1;
    }
    cJSON_ArrayForEach(item, h) {
        if (!cJSON_IsString(item) || *n_hosts == CLUSTER_HOSTS_MAX) {
            openai_error_set(e, 400, "invalid_request_error", "hosts", NULL,
                             "hosts must be at most %d host names", CLUSTER_HOSTS_MAX);
            return -1;
        }
        hosts[(*n_hosts)++] = item->valuestring;
    }
    return 0;
}

/* POST /admin/instances. */
static int add_instance(struct gateway *g, const cJSON *body, char **json, struct openai_error *e) {
    const char *model, *hosts[CLUSTER_HOSTS_MAX];
    char why[512], id[160];
    int tp, n_hosts;
    if (read_body(body, 1, &model, &tp, hosts, &n_hosts, e)) return -1;
    int status =
        gateway_cluster_add(g, model, tp, hosts, n_hosts, id, sizeof(id), why, sizeof(why));
    if (status) {
        openai_error_set(e, status, "invalid_request_error", status == 404 ? "model" : NULL, NULL,
                         "%s", why);
        return -1;
    }
    pthread_mutex_lock(&g->cluster_lock);
    cJSON *j = NULL;
    for (int i = 0; i < g->n_instances && !j; i++)
        if (!strcmp(g->instances[i]->id, id)) j = instance_json(g, g->instances[i]);
    pthread_mutex_unlock(&g->cluster_lock);
    if (!j) { /* stopped already: only its id */
        j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "id", id);
    }
    *json = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return 201;
}

/* POST /admin/instances/ID/move. */
static int move_instance(struct gateway *g, const char *id, const cJSON *body, char **json,
                         struct openai_error *e) {
    const char *model, *hosts[CLUSTER_HOSTS_MAX];
    char why[512];
    int tp, n_hosts;
    if (read_body(body, 0, &model, &tp, hosts, &n_hosts, e)) return -1;
    int status = gateway_cluster_move(g, id, tp, hosts, n_hosts, why, sizeof(why));
    if (status) {
        openai_error_set(e, status, "invalid_request_error", NULL, NULL, "%s", why);
        return -1;
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", id);
    pthread_mutex_lock(&g->cluster_lock);
    for (int i = 0; i < g->n_instances; i++)
        if (!strcmp(g->instances[i]->id, id))
            cJSON_AddItemToObject(j, "move", move_json(&g->instances[i]->move));
    pthread_mutex_unlock(&g->cluster_lock);
    *json = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return 202;
}

/* DELETE /admin/instances/ID. */
static int delete_instance(struct gateway *g, const char *id, char **json, struct openai_error *e) {
    char why[256];
    int status = gateway_cluster_delete(g, id, why, sizeof(why));
    if (status) {
        openai_error_set(e, status, "invalid_request_error", NULL, NULL, "%s", why);
        return -1;
    }
    cJSON *answer = cJSON_CreateObject();
    cJSON_AddStringToObject(answer, "id", id);
    cJSON_AddStringToObject(answer, "state", "draining");
    *json = cJSON_PrintUnformatted(answer);
    cJSON_Delete(answer);
    return 202;
}

/* ---------- hosts: POST /admin/hosts/NAME/drain and /undrain ---------- */

static int host_call(struct gateway *g, const char *method, const char *url, size_t length,
                     char **json, struct openai_error *e) {
    static const char prefix[] = "/admin/hosts/";
    const char *name = url + sizeof(prefix) - 1, *slash = strrchr(name, '/');
    char host[CLUSTER_HOST_NAME_MAX], why[256];
    *json = NULL;
    int drain = slash && !strcmp(slash, "/drain"), undrain = slash && !strcmp(slash, "/undrain");
    if (strcmp(method, "POST") != 0 || (!drain && !undrain) || slash == name ||
        (size_t)(slash - name) >= sizeof(host)) {
        openai_error_set(e, 404, "invalid_request_error", NULL, "not_found",
                         "no endpoint %s %s (POST /admin/hosts/NAME/drain or /undrain)", method,
                         url);
        return -1;
    }
    if (length) {
        openai_error_set(e, 400, "invalid_request_error", NULL, NULL, "POST %s takes no body", url);
        return -1;
    }
    snprintf(host, sizeof(host), "%.*s", (int)(slash - name), name);
    int status = gateway_cluster_drain_host(g, host, drain, why, sizeof(why));
    if (status) {
        openai_error_set(e, status, "invalid_request_error", NULL, NULL, "%s", why);
        return -1;
    }
    cJSON *answer = cJSON_CreateObject();
    cJSON_AddStringToObject(answer, "host", host);
    cJSON_AddBoolToObject(answer, "drained", drain);
    *json = cJSON_PrintUnformatted(answer);
    cJSON_Delete(answer);
    return drain ? 202 : 200;
}

/* GET /admin/instances: the instances, as GET /v1/cluster shows them. */
static int list_instances(struct gateway *g, char **json) {
    cJSON *root = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(root, "instances");
    cJSON_AddStringToObject(root, "object", "list");
    pthread_mutex_lock(&g->cluster_lock);
    for (int i = 0; i < g->n_instances; i++)
        cJSON_AddItemToArray(list, instance_json(g, g->instances[i]));
    pthread_mutex_unlock(&g->cluster_lock);
    *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return 200;
}

/* The admin paths and what each takes. */
enum admin_path { ADMIN_INSTANCES, ADMIN_INSTANCE, ADMIN_MOVE, ADMIN_HOST, ADMIN_UNKNOWN };

static enum admin_path admin_path_of(const char *url, char *id, size_t idlen) {
    static const char instances[] = "/admin/instances", hosts[] = "/admin/hosts/";
    if (!strncmp(url, hosts, sizeof(hosts) - 1)) return ADMIN_HOST;
    if (strncmp(url, instances, sizeof(instances) - 1) != 0) return ADMIN_UNKNOWN;
    const char *rest = url + sizeof(instances) - 1;
    if (*rest == '\0') return ADMIN_INSTANCES;
    if (*rest != '/' || rest[1] == '\0') return ADMIN_UNKNOWN;
    const char *slash = strchr(rest + 1, '/');
    size_t n = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
    snprintf(id, idlen, "%.*s", (int)n, rest + 1);
    if (!slash) return ADMIN_INSTANCE;
    return !strcmp(slash, "/move") ? ADMIN_MOVE : ADMIN_UNKNOWN;
}

/* 1 if method is one of allowed's ("GET, POST"). */
static int allows(const char *allowed, const char *method) {
    size_t n = strlen(method);
    for (const char *at = allowed; at; at = strchr(at, ' ') ? strchr(at, ' ') + 1 : NULL)
        if (!strncmp(at, method, n) && (at[n] == ',' || at[n] == '\0')) return 1;
    return 0;
}

const char *gateway_admin_allowed(const char *url) {
    char id[160];
    static const char *const allowed[] = {"GET, POST", "DELETE", "POST", "POST", NULL};
    return allowed[admin_path_of(url, id, sizeof(id))];
}

/* The body of a call that takes one, with only the keys it may have
 * (none given: the policy chooses, for a move); NULL with e. */
static cJSON *admin_body(const char *body, size_t length, const char *const *keys,
                         struct openai_error *e) {
    cJSON *j = length ? openai_parse_object(body, length, "the body", e) : cJSON_CreateObject();
    if (j && openai_check_keys(j, "the body", keys, e)) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

int gateway_admin_call(struct gateway *g, const char *method, const char *url, const char *body,
                       size_t length, char **json, struct openai_error *e) {
    static const char *const add_keys[] = {"model", "tp", "hosts", NULL};
    static const char *const move_keys[] = {"tp", "hosts", NULL};
    char id[160] = "";
    enum admin_path path = admin_path_of(url, id, sizeof(id));
    const char *allowed = gateway_admin_allowed(url);
    *json = NULL;
    if (path == ADMIN_HOST) return host_call(g, method, url, length, json, e);
    if (path == ADMIN_UNKNOWN) {
        openai_error_set(e, 404, "invalid_request_error", NULL, "not_found", "no endpoint %s %s",
                         method, url);
        return -1;
    }
    if (!allows(allowed, method)) {
        openai_error_set(e, 405, "invalid_request_error", NULL, "method_not_allowed",
                         "%s takes %s, not %s", url, allowed, method);
        return -1;
    }
    if (path == ADMIN_INSTANCES && !strcmp(method, "GET")) return list_instances(g, json);
    if (path == ADMIN_INSTANCE) return delete_instance(g, id, json, e);
    cJSON *j = admin_body(body, length, path == ADMIN_MOVE ? move_keys : add_keys, e);
    int status = !j                   ? -1
                 : path == ADMIN_MOVE ? move_instance(g, id, j, json, e)
                                      : add_instance(g, j, json, e);
    cJSON_Delete(j);
    return status;
}

/* ---------- fault injection (POST /debug/fault, --enable-faults) ---------- */

int gateway_admin_fault(struct gateway *g, struct gateway_instance *in, const char *kind,
                        const cJSON *body, struct openai_error *e, int *failed) {
    const char *model, *hosts[CLUSTER_HOSTS_MAX];
    char why[512];
    int tp, n_hosts;
    *failed = 0;
    if (!strcmp(kind, "move")) {
        *failed = read_body(body, 0, &model, &tp, hosts, &n_hosts, e);
        int status =
            *failed ? 0 : gateway_cluster_move(g, in->id, tp, hosts, n_hosts, why, sizeof(why));
        if (status) {
            openai_error_set(e, status, "invalid_request_error", NULL, NULL, "%s", why);
            *failed = 1;
        }
        return 1;
    }
    if (!strcmp(kind, "lose-host") || !strcmp(kind, "drain-host")) {
        const cJSON *seconds = cJSON_GetObjectItemCaseSensitive(body, "seconds");
        double lasting =
            cJSON_IsNumber(seconds) && seconds->valuedouble > 0 ? seconds->valuedouble : 15.0;
        if (kind[0] == 'l')
            gateway_cluster_lose_host(g, in->placement.host[0], lasting);
        else
            gateway_cluster_drain_for(g, in->placement.host[0], lasting);
        return 1;
    }
    return 0;
}
