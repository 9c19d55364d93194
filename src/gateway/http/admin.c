/* admin.c -- the admin API: starting, stopping and moving instances, and
 * draining hosts, as HTTP calls.
 *
 * The admin API (POST /admin/instances, DELETE /admin/instances/ID, POST
 * /admin/instances/ID/move) takes only the admin key (--admin-key), which
 * is not the inference key: a client that may generate text may not
 * rearrange the cluster. GET /v1/cluster is read-only and takes either
 * key. POST /admin/hosts/NAME/drain cordons a host (its instances move
 * elsewhere, nothing new is placed there) and /undrain ends that. The
 * operations themselves are the fleet's; this file parses their bodies and
 * says what happened. */
#include "gateway/http/http.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- the admin API ---------- */

/* An optional integer member from 1 to max into *out (0 when absent); -1
 * with e. */
static int read_count(const cJSON *j, const char *name, int max, const char *what, int *out,
                      struct openai_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    *out = 0;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)v->valueint || v->valueint < 1 ||
        v->valueint > max) {
        openai_error_set(e, 400, "invalid_request_error", name, NULL,
                         "%s must be an integer from 1 to %d (%s)", name, max, what);
        return -1;
    }
    *out = v->valueint;
    return 0;
}

/* "layers": [A, B, ...], one count per stage, into shape; -1 with e. */
static int read_layers(const cJSON *j, struct cluster_shape *shape, struct openai_error *e) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "layers"), *item;
    int n = 0;
    if (!list) return 0;
    if (!cJSON_IsArray(list)) n = -1;
    cJSON_ArrayForEach(item, list) {
        if (n < 0 || n == CLUSTER_STAGES_MAX || !cJSON_IsNumber(item) || item->valueint < 1 ||
            item->valuedouble != (double)item->valueint) {
            n = -1;
            break;
        }
        shape->layers[n++] = item->valueint;
    }
    if (n > 0 && n == (shape->pp > 1 ? shape->pp : 1)) return 0;
    openai_error_set(e, 400, "invalid_request_error", "layers", NULL,
                     "layers must be an array of positive layer counts, one for each of the pp "
                     "stages");
    return -1;
}

/* Reads {"model"?, "tp"?, "pp"?, "layers"?, "hosts"?} (what each call
 * takes; a start without tp, pp or layers is placed at the shape the
 * policy chooses); -1 with e. */
static int read_body(const cJSON *j, int need_model, const char **model,
                     struct cluster_shape *shape, const char **hosts, int *n_hosts,
                     struct openai_error *e) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "hosts"), *item;
    *n_hosts = 0;
    memset(shape, 0, sizeof(*shape));
    if (need_model && !cJSON_IsString(m)) {
        openai_error_set(e, 400, "invalid_request_error", "model", NULL,
                         "model must be the name of a served model");
        return -1;
    }
    *model = need_model ? m->valuestring : NULL;
    if (read_count(j, "tp", CLUSTER_RANKS_MAX, "ranks per stage", &shape->tp, e) ||
        read_count(j, "pp", CLUSTER_STAGES_MAX, "pipeline stages", &shape->pp, e))
        return -1;
    if (read_layers(j, shape, e)) return -1;
    /* a start with no shape asked for gets the policy's */
    if (need_model && !shape->tp && !shape->pp && !shape->layers[0]) shape->chosen = 1;
    if (need_model && shape->tp == 0) shape->tp = 1;
    if (need_model && shape->pp == 0) shape->pp = 1;
    if (list && !cJSON_IsArray(list)) {
        openai_error_set(e, 400, "invalid_request_error", "hosts", NULL,
                         "hosts must be an array of host names");
        return -1;
    }
    cJSON_ArrayForEach(item, list) {
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
static int add_instance(struct http_server *server, const cJSON *body, char **json,
                        struct openai_error *e) {
    const char *model, *hosts[CLUSTER_HOSTS_MAX];
    char why[512], id[160];
    struct cluster_shape shape;
    int n_hosts;
    if (read_body(body, 1, &model, &shape, hosts, &n_hosts, e)) return -1;
    int status =
        fleet_add(server->fleet, model, &shape, hosts, n_hosts, id, sizeof(id), why, sizeof(why));
    if (status) {
        openai_error_set(e, status, "invalid_request_error", status == 404 ? "model" : NULL, NULL,
                         "%s", why);
        return -1;
    }
    cJSON *j = fleet_instance_view(server->fleet, id);
    if (!j) { /* stopped already: only its id */
        j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "id", id);
    }
    *json = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return 201;
}

/* POST /admin/instances/ID/move. */
static int move_instance(struct http_server *server, const char *id, const cJSON *body, char **json,
                         struct openai_error *e) {
    const char *model, *hosts[CLUSTER_HOSTS_MAX];
    char why[512];
    struct cluster_shape shape;
    int n_hosts;
    if (read_body(body, 0, &model, &shape, hosts, &n_hosts, e)) return -1;
    int status = fleet_move(server->fleet, id, &shape, hosts, n_hosts, why, sizeof(why));
    if (status) {
        openai_error_set(e, status, "invalid_request_error", NULL, NULL, "%s", why);
        return -1;
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", id);
    cJSON *move = fleet_move_view(server->fleet, id);
    if (move) cJSON_AddItemToObject(j, "move", move);
    *json = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return 202;
}

/* DELETE /admin/instances/ID. */
static int delete_instance(struct http_server *server, const char *id, char **json,
                           struct openai_error *e) {
    char why[256];
    int status = fleet_delete(server->fleet, id, why, sizeof(why));
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

static int host_call(struct http_server *server, const char *method, const char *url, size_t length,
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
    int status = fleet_drain_host(server->fleet, host, drain, why, sizeof(why));
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

const char *http_admin_allowed(const char *url) {
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

int http_admin_call(struct http_server *server, const char *method, const char *url,
                    const char *body, size_t length, char **json, struct openai_error *e) {
    static const char *const add_keys[] = {"model", "tp", "pp", "layers", "hosts", NULL};
    static const char *const move_keys[] = {"tp", "pp", "layers", "hosts", NULL};
    char id[160] = "";
    enum admin_path path = admin_path_of(url, id, sizeof(id));
    const char *allowed = http_admin_allowed(url);
    *json = NULL;
    if (path == ADMIN_HOST) return host_call(server, method, url, length, json, e);
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
    if (path == ADMIN_INSTANCES && !strcmp(method, "GET")) {
        *json = fleet_instances_json(server->fleet);
        return 200;
    }
    if (path == ADMIN_INSTANCE) return delete_instance(server, id, json, e);
    cJSON *j = admin_body(body, length, path == ADMIN_MOVE ? move_keys : add_keys, e);
    int status = !j                   ? -1
                 : path == ADMIN_MOVE ? move_instance(server, id, j, json, e)
                                      : add_instance(server, j, json, e);
    cJSON_Delete(j);
    return status;
}

/* ---------- fault injection (POST /debug/fault, --enable-faults) ---------- */

int http_admin_fault(struct http_server *server, struct fleet_instance *in, const char *kind,
                     const cJSON *body, struct openai_error *e, int *failed) {
    const char *model, *hosts[CLUSTER_HOSTS_MAX];
    char why[512];
    struct cluster_shape shape;
    int n_hosts;
    *failed = 0;
    if (!strcmp(kind, "move")) {
        *failed = read_body(body, 0, &model, &shape, hosts, &n_hosts, e);
        int status =
            *failed ? 0
                    : fleet_move(server->fleet, in->id, &shape, hosts, n_hosts, why, sizeof(why));
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
            fleet_lose_host(server->fleet, in->placement.host[0], lasting);
        else
            fleet_drain_for(server->fleet, in->placement.host[0], lasting);
        return 1;
    }
    return 0;
}
