/* history.c -- the last 15 minutes of every instance, kept by the gateway
 * so that a dashboard opened now draws what happened before it came.
 *
 * Every GATEWAY_HISTORY_EVERY seconds the cluster thread appends one sample
 * per instance (its cumulative token and latency counters and its latest
 * heartbeat's queue, running sequences and KV blocks) to a ring of
 * GATEWAY_HISTORY_SAMPLES kept under the instance's id, which a move keeps.
 * Rates are the page's to compute from the counters. The tracks live under
 * the cluster lock; a track whose instance is gone is reused last. */
#include "gateway_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int gateway_history_init(struct gateway *g) {
    g->history = calloc(1, sizeof(*g->history));
    return g->history ? 0 : -1;
}

void gateway_history_free(struct gateway *g) {
    free(g->history);
    g->history = NULL;
}

/* The track of id, made (or the least recently written one taken) if it
 * has none; NULL only if there can be no track at all. */
static struct gateway_history_track *track_of(struct gateway_history *h, const char *id,
                                              double now) {
    struct gateway_history_track *oldest = NULL;
    for (int i = 0; i < h->n_tracks; i++) {
        struct gateway_history_track *t = &h->tracks[i];
        if (!strcmp(t->id, id)) return t;
        if (!oldest || t->written < oldest->written) oldest = t;
    }
    struct gateway_history_track *t =
        h->n_tracks < GATEWAY_HISTORY_INSTANCES ? &h->tracks[h->n_tracks++] : oldest;
    if (!t) return NULL;
    memset(t, 0, sizeof(*t));
    snprintf(t->id, sizeof(t->id), "%s", id);
    t->written = now;
    return t;
}

void gateway_history_sample(struct gateway *g) {
    struct timespec wall;
    uint64_t now = clock_now_us();
    if (!g->history || now - g->history->last_us < (uint64_t)(GATEWAY_HISTORY_EVERY * 1e6)) return;
    g->history->last_us = now;
    clock_gettime(CLOCK_REALTIME, &wall);
    double time = (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9;
    for (int i = 0; i < g->n_instances; i++) {
        struct gateway_instance *in = g->instances[i];
        struct gateway_history_track *t = track_of(g->history, in->id, time);
        if (!t) continue;
        struct gateway_history_sample *s = &t->samples[t->next];
        s->time = time;
        s->generated = (double)atomic_load(&in->stats.generated);
        s->ttft_sum = (double)atomic_load(&in->stats.ttft_us) * 1e-6;
        s->ttft_count = (double)atomic_load(&in->stats.ttft_count);
        s->itl_sum = (double)atomic_load(&in->stats.itl_us) * 1e-6;
        s->itl_count = (double)atomic_load(&in->stats.itl_count);
        struct supervisor_view view;
        supervisor_view(&in->supervisor, &view);
        s->queue = view.heartbeat.n_waiting;
        s->running = view.heartbeat.n_running;
        s->kv_used = view.heartbeat.kv_blocks_used;
        s->kv_total = view.heartbeat.kv_blocks_total;
        t->next = (t->next + 1) % GATEWAY_HISTORY_SAMPLES;
        if (t->n < GATEWAY_HISTORY_SAMPLES) t->n++;
        t->written = time;
    }
}

/* One track as columns, oldest sample first. */
static cJSON *track_json(const struct gateway_history_track *t) {
    static const char *const names[] = {
        "time",      "generated",   "ttft_seconds_sum", "ttft_count", "itl_seconds_sum",
        "itl_count", "queue_depth", "running",          "kv_used",    "kv_total"};
    enum { N_COLUMNS = sizeof(names) / sizeof(names[0]) };
    cJSON *j = cJSON_CreateObject(), *columns[N_COLUMNS];
    for (int c = 0; c < N_COLUMNS; c++) columns[c] = cJSON_AddArrayToObject(j, names[c]);
    for (int k = 0; k < t->n; k++) {
        const struct gateway_history_sample *s =
            &t->samples[(t->next - t->n + k + GATEWAY_HISTORY_SAMPLES) % GATEWAY_HISTORY_SAMPLES];
        const double values[N_COLUMNS] = {s->time,    s->generated, s->ttft_sum, s->ttft_count,
                                          s->itl_sum, s->itl_count, s->queue,    s->running,
                                          s->kv_used, s->kv_total};
        for (int c = 0; c < N_COLUMNS; c++)
            cJSON_AddItemToArray(columns[c], cJSON_CreateNumber(values[c]));
    }
    return j;
}

char *gateway_history_json(struct gateway *g) {
    cJSON *root = cJSON_CreateObject(), *instances;
    cJSON_AddStringToObject(root, "object", "cluster.history");
    cJSON_AddNumberToObject(root, "every_seconds", GATEWAY_HISTORY_EVERY);
    instances = cJSON_AddObjectToObject(root, "instances");
    pthread_mutex_lock(&g->cluster_lock);
    for (int i = 0; g->history && i < g->n_instances; i++) {
        const char *id = g->instances[i]->id;
        for (int k = 0; k < g->history->n_tracks; k++)
            if (!strcmp(g->history->tracks[k].id, id))
                cJSON_AddItemToObject(instances, id, track_json(&g->history->tracks[k]));
    }
    pthread_mutex_unlock(&g->cluster_lock);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}
