/* history.c -- the last 15 minutes of every instance, kept by the gateway
 * so that a dashboard opened now draws what happened before it came.
 *
 * Every FLEET_HISTORY_EVERY seconds the cluster thread appends one sample
 * per instance (its cumulative token and latency counters and its latest
 * heartbeat's queue, running sequences and KV blocks) to a ring of
 * FLEET_HISTORY_SAMPLES kept under the instance's id, which a move keeps.
 * Rates are the page's to compute from the counters. The tracks live under
 * the cluster lock; a track whose instance is gone is reused last. */
#include "gateway/fleet/fleet.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int fleet_history_init(struct fleet *f) {
    f->history = calloc(1, sizeof(*f->history));
    return f->history ? 0 : -1;
}

void fleet_history_free(struct fleet *f) {
    free(f->history);
    f->history = NULL;
}

/* The track of id, made (or the least recently written one taken) if it
 * has none; NULL only if there can be no track at all. */
static struct fleet_history_track *track_of(struct fleet_history *h, const char *id, double now) {
    struct fleet_history_track *oldest = NULL;
    for (int i = 0; i < h->n_tracks; i++) {
        struct fleet_history_track *t = &h->tracks[i];
        if (!strcmp(t->id, id)) return t;
        if (!oldest || t->written < oldest->written) oldest = t;
    }
    struct fleet_history_track *t =
        h->n_tracks < FLEET_HISTORY_INSTANCES ? &h->tracks[h->n_tracks++] : oldest;
    if (!t) return NULL;
    memset(t, 0, sizeof(*t));
    snprintf(t->id, sizeof(t->id), "%s", id);
    t->written = now;
    return t;
}

void fleet_history_sample(struct fleet *f) {
    struct timespec wall;
    uint64_t now = clock_now_us();
    if (!f->history || now - f->history->last_us < (uint64_t)(FLEET_HISTORY_EVERY * 1e6)) return;
    f->history->last_us = now;
    clock_gettime(CLOCK_REALTIME, &wall);
    double time = (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9;
    for (int i = 0; i < f->n_instances; i++) {
        struct fleet_instance *in = f->instances[i];
        struct fleet_history_track *t = track_of(f->history, in->id, time);
        if (!t) continue;
        struct fleet_history_sample *s = &t->samples[t->next];
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
        t->next = (t->next + 1) % FLEET_HISTORY_SAMPLES;
        if (t->n < FLEET_HISTORY_SAMPLES) t->n++;
        t->written = time;
    }
}

/* One track as columns, oldest sample first. */
static cJSON *track_json(const struct fleet_history_track *t) {
    static const char *const names[] = {
        "time",      "generated",   "ttft_seconds_sum", "ttft_count", "itl_seconds_sum",
        "itl_count", "queue_depth", "running",          "kv_used",    "kv_total"};
    enum { N_COLUMNS = sizeof(names) / sizeof(names[0]) };
    cJSON *j = cJSON_CreateObject(), *columns[N_COLUMNS];
    for (int c = 0; c < N_COLUMNS; c++) columns[c] = cJSON_AddArrayToObject(j, names[c]);
    for (int k = 0; k < t->n; k++) {
        const struct fleet_history_sample *s =
            &t->samples[(t->next - t->n + k + FLEET_HISTORY_SAMPLES) % FLEET_HISTORY_SAMPLES];
        const double values[N_COLUMNS] = {s->time,    s->generated, s->ttft_sum, s->ttft_count,
                                          s->itl_sum, s->itl_count, s->queue,    s->running,
                                          s->kv_used, s->kv_total};
        for (int c = 0; c < N_COLUMNS; c++)
            cJSON_AddItemToArray(columns[c], cJSON_CreateNumber(values[c]));
    }
    return j;
}

char *fleet_history_json(struct fleet *f) {
    cJSON *root = cJSON_CreateObject(), *instances;
    cJSON_AddStringToObject(root, "object", "cluster.history");
    cJSON_AddNumberToObject(root, "every_seconds", FLEET_HISTORY_EVERY);
    instances = cJSON_AddObjectToObject(root, "instances");
    pthread_mutex_lock(&f->cluster_lock);
    for (int i = 0; f->history && i < f->n_instances; i++) {
        const char *id = f->instances[i]->id;
        for (int k = 0; k < f->history->n_tracks; k++)
            if (!strcmp(f->history->tracks[k].id, id))
                cJSON_AddItemToObject(instances, id, track_json(&f->history->tracks[k]));
    }
    pthread_mutex_unlock(&f->cluster_lock);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}
