/* views.c -- the fleet as JSON: GET /v1/cluster (hosts, models,
 * instances, events), GET /admin/instances, and GET /health's models,
 * each read under the cluster lock and each supervisor's view of itself. */
#include "gateway/fleet/fleet.h"

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
    cJSON_AddStringToObject(j, "arch", h->arch);         /* "" until probed */
    cJSON_AddStringToObject(j, "numerics", h->numerics); /* "" until probed */
    cJSON_AddNumberToObject(j, "memory_total", (double)h->memory_total);
    cJSON_AddNumberToObject(j, "memory_available", (double)h->memory_available);
    cJSON_AddNumberToObject(j, "memory_limit", (double)h->memory_limit);
    cJSON_AddNumberToObject(j, "memory_used", (double)u->memory_used);
    cJSON_AddNumberToObject(j, "load", h->load);
    return j;
}

static const char *instance_state_name(const struct fleet_instance *in,
                                       const struct supervisor_view *view) {
    if (in->deleting) return "draining";
    if (in->move.state == FLEET_MOVE_STARTING) return "moving";
    return supervisor_state_name(view->state);
}

static cJSON *move_json(const struct fleet_move *m) {
    static const char *const states[] = {"none", "starting", "done", "failed"};
    if (m->state == FLEET_MOVE_NONE) return cJSON_CreateNull();
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "state", states[m->state]);
    cJSON_AddNumberToObject(j, "tp", m->tp);
    cJSON_AddNumberToObject(j, "pp", m->pp > 1 ? m->pp : 1);
    cJSON_AddStringToObject(j, "to", m->to);
    cJSON_AddStringToObject(j, "reason", m->reason);
    if (m->finished_us)
        cJSON_AddNumberToObject(j, "seconds", (double)(m->finished_us - m->started_us) * 1e-6);
    return j;
}

/* An instance as GET /v1/cluster shows it (cluster lock held). */
static cJSON *instance_json(struct fleet *f, struct fleet_instance *in) {
    cJSON *j = cJSON_CreateObject(), *placement;
    cJSON_AddStringToObject(j, "id", in->id);
    cJSON_AddStringToObject(j, "model", in->name);
    cJSON_AddNumberToObject(j, "tp", in->placement.tp);
    placement = cJSON_AddArrayToObject(j, "placement");
    for (int k = 0; k < in->placement.n_hosts; k++) {
        cJSON *at = cJSON_CreateObject();
        cJSON_AddStringToObject(at, "host", f->hosts[in->placement.host[k]].name);
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
    /* after the older fields, whose order scripts match */
    cJSON_AddNumberToObject(j, "pp", in->placement.pp > 1 ? in->placement.pp : 1);
    if (in->placement.pp > 1) { /* each stage's layers, first to last */
        cJSON *layers = cJSON_AddArrayToObject(j, "layers");
        for (int s = 0; s < in->placement.pp; s++)
            cJSON_AddItemToArray(layers, cJSON_CreateNumber(in->placement.layers[s]));
    }
    return j;
}

static cJSON *models_json(const struct fleet *f) {
    cJSON *models = cJSON_CreateArray();
    char why[256];
    for (int i = 0; i < f->n_served; i++) {
        const struct gateway_served *s = &f->served[i];
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

/* The links the latest link probe measured, by host name. */
static cJSON *links_json(const struct fleet *f) {
    cJSON *links = cJSON_CreateArray();
    for (int a = 0; a < f->n_hosts; a++)
        for (int b = 0; b < f->n_hosts; b++) {
            const struct cluster_link *l = &f->links[a * f->n_hosts + b];
            if (a == b || l->latency_us <= 0) continue;
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "from", f->hosts[a].name);
            cJSON_AddStringToObject(j, "to", f->hosts[b].name);
            cJSON_AddNumberToObject(j, "latency_us", l->latency_us);
            cJSON_AddNumberToObject(j, "bytes_per_second", l->bytes_per_second);
            cJSON_AddItemToArray(links, j);
        }
    return links;
}

static cJSON *events_json(const struct fleet *f) {
    cJSON *events = cJSON_CreateArray();
    int first = f->n_events > FLEET_EVENTS ? f->n_events - FLEET_EVENTS : 0;
    for (int i = first; i < f->n_events; i++) {
        const struct fleet_event *e = &f->events[i % FLEET_EVENTS];
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

char *fleet_json(struct fleet *f) {
    struct cluster_usage usage[CLUSTER_HOSTS_MAX];
    cJSON *root = cJSON_CreateObject(), *hosts, *instances;
    cJSON_AddStringToObject(root, "object", "cluster");
    pthread_mutex_lock(&f->cluster_lock);
    fleet_usage(f, usage);
    hosts = cJSON_AddArrayToObject(root, "hosts");
    for (int i = 0; i < f->n_hosts; i++)
        cJSON_AddItemToArray(hosts, host_json(&f->hosts[i], &usage[i]));
    cJSON_AddItemToObject(root, "models", models_json(f));
    instances = cJSON_AddArrayToObject(root, "instances");
    for (int i = 0; i < f->n_instances; i++)
        cJSON_AddItemToArray(instances, instance_json(f, f->instances[i]));
    cJSON_AddItemToObject(root, "events", events_json(f));
    cJSON_AddItemToObject(root, "links", links_json(f));
    pthread_mutex_unlock(&f->cluster_lock);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

cJSON *fleet_instance_view(struct fleet *f, const char *id) {
    pthread_mutex_lock(&f->cluster_lock);
    struct fleet_instance *in = fleet_find(f, id);
    cJSON *j = in ? instance_json(f, in) : NULL;
    pthread_mutex_unlock(&f->cluster_lock);
    return j;
}

cJSON *fleet_move_view(struct fleet *f, const char *id) {
    pthread_mutex_lock(&f->cluster_lock);
    struct fleet_instance *in = fleet_find(f, id);
    cJSON *j = in ? move_json(&in->move) : NULL;
    pthread_mutex_unlock(&f->cluster_lock);
    return j;
}

char *fleet_instances_json(struct fleet *f) {
    cJSON *root = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(root, "instances");
    cJSON_AddStringToObject(root, "object", "list");
    pthread_mutex_lock(&f->cluster_lock);
    for (int i = 0; i < f->n_instances; i++)
        cJSON_AddItemToArray(list, instance_json(f, f->instances[i]));
    pthread_mutex_unlock(&f->cluster_lock);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

/* ---------- GET /health ---------- */

/* An instance as GET /health shows it; *ready: its runner is. */
static cJSON *health_json(struct fleet_instance *in, int *ready) {
    cJSON *m = cJSON_CreateObject();
    double oldest = supervisor_oldest(&in->supervisor, clock_now_us());
    struct supervisor_view view;
    supervisor_view(&in->supervisor, &view);
    *ready = view.state == SUPERVISOR_READY;
    cJSON_AddStringToObject(m, "model", in->name);
    cJSON_AddStringToObject(m, "id", in->id);
    cJSON_AddBoolToObject(m, "ready", *ready);
    cJSON_AddNumberToObject(m, "restarts", view.restarts);
    cJSON_AddNumberToObject(m, "runner_pid", (double)view.pid);
    cJSON_AddNumberToObject(m, "stuck_detections", view.stuck_detections);
    cJSON_AddNumberToObject(m, "oldest_request_seconds", oldest);
    cJSON_AddStringToObject(m, "status", *ready ? "ready" : view.status);
    return m;
}

cJSON *fleet_health_json(struct fleet *f, int *all_ready) {
    cJSON *models = cJSON_CreateArray();
    pthread_mutex_lock(&f->cluster_lock);
    *all_ready = f->n_instances > 0;
    for (int i = 0; i < f->n_instances; i++) {
        int ready;
        cJSON_AddItemToArray(models, health_json(f->instances[i], &ready));
        *all_ready &= ready;
    }
    pthread_mutex_unlock(&f->cluster_lock);
    return models;
}
