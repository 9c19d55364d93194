/* cluster.c -- the gateway's instances across the cluster's hosts: which
 * exist, where their ranks are, which one a request goes to, and how they
 * change while requests flow.
 *
 * An instance is a model at a placement (a degree and the hosts of its
 * ranks); several of one model are replicas, and a request goes to the
 * ready one with the fewest outstanding tokens. Instances are started at
 * start (pinned with --place, or placed by the policy) and by the admin
 * API, which also deletes and moves them. A move starts the new placement
 * as a second instance that gets no requests; once its runner said HELLO,
 * the cluster thread hands it every unfinished choice of the old one,
 * with the tokens generated so far (the runner resumes them exactly as
 * after a runner death: DESIGN.md I4, I5, I8), routes new requests to it,
 * and retires the old one. If the new placement fails to start, the old
 * one keeps serving and the move says why. A deleted instance hands its
 * choices to a replica, or finishes them itself when it has none, then
 * stops. The cluster thread also learns the hosts' state (probe.c) and
 * moves the instances of a lost host elsewhere.
 *
 * Lock order: cluster_lock, then an instance's lock, then a request's.
 * Nothing under cluster_lock waits on a runner or a child, and the cluster
 * thread never waits for a retired instance's runner to stop: it joins
 * its supervisor once that has returned. */
#include "gateway_internal.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOVE_START_SECONDS 300.0    /* a move's placement must be ready in this time */
#define REPLACE_EVERY_US   5000000u /* a failed instance is placed elsewhere this often */
#define WARM_SECONDS       10.0     /* a move waits this long at most for its warm-ups */

/* ---------- events ---------- */

void gateway_cluster_event(struct gateway *g, const char *kind, const char *instance,
                           const char *host, const char *format, ...) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct gateway_event *e = &g->events[g->n_events % GATEWAY_EVENTS];
    memset(e, 0, sizeof(*e));
    e->time = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
    snprintf(e->kind, sizeof(e->kind), "%s", kind);
    snprintf(e->instance, sizeof(e->instance), "%s", instance ? instance : "");
    snprintf(e->host, sizeof(e->host), "%s", host ? host : "");
    va_list args;
    va_start(args, format);
    vsnprintf(e->text, sizeof(e->text), format, args);
    va_end(args);
    g->n_events++;
    log_event(LOG_LEVEL_INFO, "gateway", "%s", e->text);
}

void gateway_cluster_note(struct gateway *g, const char *kind, const char *instance,
                          const char *format, ...) {
    char text[256];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof(text), format, args);
    va_end(args);
    pthread_mutex_lock(&g->cluster_lock);
    gateway_cluster_event(g, kind, instance, NULL, "%s", text);
    pthread_mutex_unlock(&g->cluster_lock);
}

/* ---------- the list ---------- */

static int append(struct gateway_instance ***list, int *n, int *capacity,
                  struct gateway_instance *in) {
    if (*n == *capacity) {
        int grown_capacity = *capacity ? 2 * *capacity : 8;
        struct gateway_instance **grown =
            realloc(*list, (size_t)grown_capacity * sizeof(struct gateway_instance *));
        if (!grown) return -1;
        *list = grown;
        *capacity = grown_capacity;
    }
    (*list)[(*n)++] = in;
    return 0;
}

/* The live instance with this id, or NULL (cluster lock held). */
static struct gateway_instance *find_live(struct gateway *g, const char *id) {
    for (int i = 0; i < g->n_instances; i++)
        if (!strcmp(g->instances[i]->id, id)) return g->instances[i];
    return NULL;
}

int gateway_cluster_has(const struct gateway *g, const struct gateway_instance *in) {
    for (int i = 0; i < g->n_instances; i++)
        if (g->instances[i] == in || g->instances[i]->move.successor == in) return 1;
    return 0;
}

/* What the hosts hold already: every live instance's ranks and memory,
 * and a move's new placement too (cluster lock held). */
void gateway_cluster_usage(struct gateway *g, struct cluster_usage *usage) {
    memset(usage, 0, sizeof(*usage) * (size_t)g->n_hosts);
    for (int i = 0; i < g->n_instances; i++) {
        struct gateway_instance *in = g->instances[i];
        if (!in) continue;
        for (int pass = 0; pass < 2; pass++) {
            const struct gateway_instance *at = pass ? in->move.successor : in;
            if (!at || (pass && in->move.state != GATEWAY_MOVE_STARTING)) continue;
            for (int k = 0; k < at->placement.n_hosts; k++) {
                struct cluster_usage *u = &usage[at->placement.host[k]];
                u->slots_used += at->placement.ranks[k];
                u->memory_used += at->bytes_per_rank * at->placement.ranks[k];
            }
        }
        double load = (double)supervisor_outstanding(&in->supervisor);
        for (int k = 0; k < in->placement.n_hosts; k++) usage[in->placement.host[k]].load += load;
    }
}

/* 1 if the placement has a rank on host. */
static int placed_on(const struct cluster_placement *p, int host) {
    for (int k = 0; k < p->n_hosts; k++)
        if (p->host[k] == host) return 1;
    return 0;
}

/* 1 if the placement has a rank on a lost host (or, with drained, on a
 * drained one). */
static int placed_on_lost(const struct gateway *g, const struct cluster_placement *p, int drained) {
    for (int k = 0; k < p->n_hosts; k++) {
        const struct cluster_host *h = &g->hosts[p->host[k]];
        if (drained ? h->drained : h->lost) return 1;
    }
    return 0;
}

/* The host called name, or -1. */
static int find_host(const struct gateway *g, const char *name) {
    for (int i = 0; i < g->n_hosts; i++)
        if (!strcmp(g->hosts[i].name, name)) return i;
    return -1;
}

/* Chooses a placement for served at degree tp: on the named hosts when
 * some are given, else where the policy says, never on `avoid` (a
 * placement being left, or NULL). 0, or an HTTP status with why (cluster
 * lock held). */
static int choose_placement(struct gateway *g, const struct gateway_served *s, int tp,
                            const char *const *hosts, int n_hosts,
                            const struct cluster_placement *avoid, struct cluster_placement *out,
                            int64_t *bytes_per_rank, char *why, size_t whylen) {
    struct cluster_need need;
    struct cluster_request request = {.tp = tp};
    struct cluster_usage usage[CLUSTER_HOSTS_MAX];
    if (cluster_degree_check(s->file, tp, why, whylen)) return 400;
    if (cluster_model_need(s->file, tp, s->context_length, &need, why, whylen)) return 400;
    request.bytes_per_rank = need.total_bytes;
    for (int i = 0; i < n_hosts; i++) {
        int h = find_host(g, hosts[i]);
        if (h < 0) {
            snprintf(why, whylen, "no host is called '%s' in the cluster", hosts[i]);
            return 400;
        }
        if (request.n_pinned == CLUSTER_HOSTS_MAX) break;
        request.pinned[request.n_pinned++] = h;
    }
    for (int k = 0; avoid && n_hosts == 0 && k < avoid->n_hosts; k++)
        request.exclude[avoid->host[k]] = 1;
    gateway_cluster_usage(g, usage);
    if (cluster_place(g->hosts, usage, g->n_hosts, &request, out, why, whylen)) return 409;
    *bytes_per_rank = need.total_bytes;
    return 0;
}

/* Makes and starts an instance of served at placement (cluster lock
 * held); NULL with why. */
static struct gateway_instance *start_instance(struct gateway *g, const struct gateway_served *s,
                                               const char *id,
                                               const struct cluster_placement *placement,
                                               int64_t bytes_per_rank, char *why, size_t whylen) {
    struct gateway_instance *in = calloc(1, sizeof(*in));
    int number = ++g->next_instance;
    if (!in) {
        snprintf(why, whylen, "out of memory for an instance");
        return NULL;
    }
    char own_id[160];
    snprintf(own_id, sizeof(own_id), "%s-%d", s->name, number);
    if (gateway_instance_init(in, g, s, id ? id : own_id, placement, number, why, whylen) ||
        supervisor_start(&in->supervisor, why, whylen)) {
        gateway_instance_release(in);
        return NULL;
    }
    in->bytes_per_rank = bytes_per_rank;
    gateway_observe_instance(&g->metrics, in->name, in->id, supervisor_state_names,
                             SUPERVISOR_STATES);
    return in;
}

/* ---------- routing ---------- */

void gateway_cluster_submit(struct gateway *g, struct gateway_request *r) {
    const struct gateway_served *s = r->served;
    struct gateway_instance *best = NULL;
    int64_t best_load = 0;
    int best_ready = 0;
    pthread_mutex_lock(&g->cluster_lock);
    for (int i = 0; i < g->n_instances; i++) {
        struct gateway_instance *in = g->instances[i];
        if (in->served != s || !in->routable) continue;
        struct supervisor_view view;
        supervisor_view(&in->supervisor, &view);
        int ready = view.state == SUPERVISOR_READY;
        int64_t load = supervisor_outstanding(&in->supervisor);
        /* a ready replica first; then the one with the least work */
        if (!best || ready > best_ready || (ready == best_ready && load < best_load)) {
            best = in;
            best_load = load;
            best_ready = ready;
        }
    }
    if (best) { /* its metrics are the instance's that serves it */
        snprintf(r->instance_id, sizeof(r->instance_id), "%s", best->id);
        gateway_instance_submit(best, r);
    }
    pthread_mutex_unlock(&g->cluster_lock);
    if (!best) {
        char why[256];
        snprintf(why, sizeof(why), "model %s has no instance (all were stopped)", s->name);
        gateway_request_fail(r, 503, why);
    }
}

struct gateway_instance *gateway_cluster_any(struct gateway *g, const struct gateway_served *s) {
    struct gateway_instance *found = NULL;
    pthread_mutex_lock(&g->cluster_lock);
    for (int i = 0; i < g->n_instances && !found; i++)
        if (g->instances[i]->served == s && g->instances[i]->routable) found = g->instances[i];
    if (found) gateway_instance_hold(found);
    pthread_mutex_unlock(&g->cluster_lock);
    return found;
}

void gateway_cluster_each(struct gateway *g, void (*fn)(struct gateway_request *, uint64_t),
                          uint64_t arg) {
    pthread_mutex_lock(&g->cluster_lock);
    for (int i = 0; i < g->n_instances; i++) {
        gateway_instance_each(g->instances[i], fn, arg);
        if (g->instances[i]->move.state == GATEWAY_MOVE_STARTING)
            gateway_instance_each(g->instances[i]->move.successor, fn, arg);
    }
    pthread_mutex_unlock(&g->cluster_lock);
}

void gateway_cluster_fail(struct gateway *g, int status, const char *message) {
    pthread_mutex_lock(&g->cluster_lock);
    for (int i = 0; i < g->n_instances; i++) {
        supervisor_fail(&g->instances[i]->supervisor, status, message);
        if (g->instances[i]->move.state == GATEWAY_MOVE_STARTING)
            supervisor_fail(&g->instances[i]->move.successor->supervisor, status, message);
    }
    pthread_mutex_unlock(&g->cluster_lock);
}

/* ---------- the admin API's operations ---------- */

int gateway_cluster_add(struct gateway *g, const char *model, int tp, const char *const *hosts,
                        int n_hosts, char *id, size_t idlen, char *why, size_t whylen) {
    const struct gateway_served *s = gateway_served_find(g->served, g->n_served, model);
    struct cluster_placement placement;
    int64_t bytes = 0;
    if (!s) {
        snprintf(why, whylen, "the model '%s' is not served (GET /v1/models)", model);
        return 404;
    }
    pthread_mutex_lock(&g->cluster_lock);
    int status = choose_placement(g, s, tp, hosts, n_hosts, NULL, &placement, &bytes, why, whylen);
    struct gateway_instance *in =
        status ? NULL : start_instance(g, s, NULL, &placement, bytes, why, whylen);
    if (!status && !in) status = 500;
    if (in && append(&g->instances, &g->n_instances, &g->instances_capacity, in)) {
        pthread_mutex_unlock(&g->cluster_lock);
        supervisor_retire(&in->supervisor);
        supervisor_stop(&in->supervisor);
        gateway_instance_release(in);
        snprintf(why, whylen, "out of memory for the instance list");
        return 500;
    }
    if (in) {
        in->routable = 1;
        snprintf(id, idlen, "%s", in->id);
        gateway_cluster_event(g, "start", in->id, NULL, "%s started on %s (tp %d)", in->id,
                              in->hosts_text, tp);
    }
    pthread_mutex_unlock(&g->cluster_lock);
    return status;
}

int gateway_cluster_delete(struct gateway *g, const char *id, char *why, size_t whylen) {
    pthread_mutex_lock(&g->cluster_lock);
    struct gateway_instance *in = find_live(g, id);
    if (in && !in->deleting) {
        in->deleting = 1;
        in->routable = 0;
        gateway_cluster_event(g, "stop", in->id, NULL, "%s is draining to stop", in->id);
    }
    pthread_mutex_unlock(&g->cluster_lock);
    if (in) return 0;
    snprintf(why, whylen, "no instance is called '%s' (GET /v1/cluster)", id);
    return 404;
}

/* 1 if the placement is tp ranks on the named hosts, in that order. */
static int placed_at(const struct gateway *g, const struct cluster_placement *p, int tp,
                     const char *const *hosts, int n_hosts) {
    if (n_hosts == 0 || n_hosts != p->n_hosts || tp != p->tp) return 0;
    for (int k = 0; k < n_hosts; k++)
        if (strcmp(g->hosts[p->host[k]].name, hosts[k]) != 0) return 0;
    return 1;
}

/* Starts moving in to degree tp (0: its own) on hosts (none: where the
 * policy says, elsewhere; or, when anywhere, where it is if nowhere else
 * fits); 0, or an HTTP status with why (cluster lock held). */
static int start_move(struct gateway *g, struct gateway_instance *in, int tp,
                      const char *const *hosts, int n_hosts, int anywhere, char *why,
                      size_t whylen) {
    struct cluster_placement placement;
    int64_t bytes = 0;
    if (in->deleting || in->move.state == GATEWAY_MOVE_STARTING) {
        snprintf(why, whylen, "%s is %s", in->id,
                 in->deleting ? "being stopped" : "already moving");
        return 409;
    }
    if (tp <= 0) tp = in->placement.tp;
    if (!anywhere && placed_at(g, &in->placement, tp, hosts, n_hosts)) {
        snprintf(why, whylen, "%s is already placed at %s (tp %d): nothing moves", in->id,
                 in->hosts_text, tp);
        return 409;
    }
    /* without hosts, a move at the same degree goes elsewhere; a failed
     * instance that has nowhere else starts anew where it was */
    const struct cluster_placement *avoid = tp == in->placement.tp ? &in->placement : NULL;
    int status =
        choose_placement(g, in->served, tp, hosts, n_hosts, avoid, &placement, &bytes, why, whylen);
    if (status == 409 && avoid && anywhere)
        status = choose_placement(g, in->served, tp, hosts, n_hosts, NULL, &placement, &bytes, why,
                                  whylen);
    struct gateway_instance *next =
        status ? NULL : start_instance(g, in->served, in->id, &placement, bytes, why, whylen);
    if (!next) return status ? status : 500;
    in->move = (struct gateway_move){
        .state = GATEWAY_MOVE_STARTING, .tp = tp, .started_us = clock_now_us(), .successor = next};
    snprintf(in->move.to, sizeof(in->move.to), "%s", next->hosts_text);
    gateway_cluster_event(g, "move", in->id, NULL, "%s moving from %s to %s", in->id,
                          in->hosts_text, next->hosts_text);
    return 0;
}

int gateway_cluster_move(struct gateway *g, const char *id, int tp, const char *const *hosts,
                         int n_hosts, char *why, size_t whylen) {
    pthread_mutex_lock(&g->cluster_lock);
    struct gateway_instance *in = find_live(g, id);
    int status = in ? start_move(g, in, tp, hosts, n_hosts, 0, why, whylen) : 404;
    if (!in) snprintf(why, whylen, "no instance is called '%s' (GET /v1/cluster)", id);
    pthread_mutex_unlock(&g->cluster_lock);
    return status;
}

/* ---------- the cluster thread: completing moves and deletions ---------- */

/* Stops an instance the cluster no longer uses (moved off, deleted, a
 * move's failed placement): its supervisor is told to stop its runner,
 * which may take seconds (a runner finishing its step, mpirun passing the
 * signal on), so it is only reaped by a later step (reap_retired): the
 * cluster thread never waits for it (cluster lock held). */
static void retire(struct gateway *g, struct gateway_instance *in) {
    supervisor_retire(&in->supervisor);
    if (append(&g->retiring, &g->n_retiring, &g->retiring_capacity, in) == 0) return;
    /* no room to keep it: it is reaped when the gateway ends instead */
    log_event(LOG_LEVEL_ERROR, "gateway", "%s: out of memory for the retiring list", in->id);
}

/* Joins the retired instances whose supervisor returned, and drops the
 * cluster's reference: each is freed, pipes and all, once no request names
 * it (no lock held). */
static void reap_retired(struct gateway *g) {
    struct gateway_instance *done[64];
    int n = 0;
    pthread_mutex_lock(&g->cluster_lock);
    for (int i = 0; i < g->n_retiring && n < 64;)
        if (supervisor_stopped(&g->retiring[i]->supervisor)) {
            done[n++] = g->retiring[i];
            g->retiring[i] = g->retiring[--g->n_retiring];
        } else {
            i++;
        }
    pthread_mutex_unlock(&g->cluster_lock);
    for (int i = 0; i < n; i++) {
        supervisor_stop(&done[i]->supervisor); /* returns at once: its supervisor is done */
        gateway_instance_release(done[i]);
    }
}

/* Hands every choice of `from` to `to` (cluster lock held). */
static void hand_over(struct gateway_instance *from, struct gateway_instance *to) {
    struct supervisor_job **jobs;
    int n = supervisor_take(&from->supervisor, &jobs);
    if (n < 0) return; /* out of memory: they stay and finish where they are */
    supervisor_give(&to->supervisor, jobs, n);
    free(jobs);
}

/* The move's new placement is ready: it takes the old one's place in the
 * list, its requests, and its counters (cluster lock held). */
static void complete_move(struct gateway *g, int i) {
    struct gateway_instance *old = g->instances[i], *next = old->move.successor;
    uint64_t now = clock_now_us();
    next->move = old->move;
    next->move.state = GATEWAY_MOVE_DONE;
    next->move.successor = NULL;
    next->move.finished_us = now;
    atomic_store(&next->stats.generated, atomic_load(&old->stats.generated));
    atomic_store(&next->stats.ttft_us, atomic_load(&old->stats.ttft_us));
    atomic_store(&next->stats.ttft_count, atomic_load(&old->stats.ttft_count));
    atomic_store(&next->stats.itl_us, atomic_load(&old->stats.itl_us));
    atomic_store(&next->stats.itl_count, atomic_load(&old->stats.itl_count));
    struct supervisor_view view;
    supervisor_view(&old->supervisor, &view);
    supervisor_inherit(&next->supervisor, view.restarts, view.stuck_detections);
    /* a DELETE that came while it moved wins: the new placement finishes
     * the requests (or hands them to a replica), then stops */
    next->deleting = old->deleting;
    next->routable = !old->deleting;
    old->routable = 0;
    old->move.successor = NULL;
    g->instances[i] = next;
    hand_over(old, next);
    retire(g, old);
    gateway_cluster_event(g, "move", next->id, NULL, "%s moved from %s to %s in %.1f s", next->id,
                          old->hosts_text, next->hosts_text,
                          (double)(now - next->move.started_us) * 1e-6);
    gateway_observe_move(&g->metrics, next->name, 1, (double)(now - next->move.started_us) * 1e-6);
}

/* The move's new placement failed (cluster lock held): the old one serves on. */
static void fail_move(struct gateway *g, struct gateway_instance *in, const char *reason) {
    retire(g, in->move.successor);
    in->move.successor = NULL;
    in->move.state = GATEWAY_MOVE_FAILED;
    in->move.finished_us = clock_now_us();
    snprintf(in->move.reason, sizeof(in->move.reason), "%s", reason);
    gateway_cluster_event(g, "move_failed", in->id, NULL, "%s did not move to %s: %s", in->id,
                          in->move.to, reason);
    gateway_observe_move(&g->metrics, in->name, 0, 0);
}

/* Looks at a move in progress (cluster lock held). */
static void check_move(struct gateway *g, int i) {
    struct gateway_instance *in = g->instances[i], *next = in->move.successor;
    struct supervisor_view to, from;
    supervisor_view(&next->supervisor, &to);
    supervisor_view(&in->supervisor, &from);
    int ready = to.state == SUPERVISOR_READY, failed = to.failures > 0 || to.restarts > 0;
    int warm = to.warm_pending == 0;
    int serving = from.state == SUPERVISOR_READY && !placed_on_lost(g, &in->placement, 0);
    uint64_t now = clock_now_us();
    double waited = (double)(now - in->move.started_us) * 1e-6;
    if (ready && !serving) {
        /* the old placement is down (a host lost, its runner failing): its
         * clients wait already, and a warm-up would only add to it */
        complete_move(g, i);
    } else if (ready && !in->move.warming) {
        /* the old placement serves on while the new one computes the
         * requests' KV; they then move with only a few tokens to compute */
        in->move.warming = 1;
        in->move.warm_started_us = now;
        supervisor_warm(&in->supervisor, &next->supervisor);
    } else if (ready && (warm || (double)(now - in->move.warm_started_us) * 1e-6 > WARM_SECONDS))
        complete_move(g, i);
    else if (failed)
        fail_move(g, in, to.status);
    else if (waited > MOVE_START_SECONDS)
        fail_move(g, in, "its runner was not ready in time");
}

/* The ready routable replica of in with the least work, or NULL. */
static struct gateway_instance *replica_of(struct gateway *g, const struct gateway_instance *in) {
    struct gateway_instance *best = NULL;
    int64_t best_load = 0;
    for (int i = 0; i < g->n_instances; i++) {
        struct gateway_instance *other = g->instances[i];
        if (other == in || other->served != in->served || !other->routable) continue;
        int64_t load = supervisor_outstanding(&other->supervisor);
        if (!best || load < best_load) {
            best = other;
            best_load = load;
        }
    }
    return best;
}

/* A deleted instance leaves the list once a replica took its requests, or
 * once it finished them (cluster lock held); 1 if it left. */
static int check_delete(struct gateway *g, int i) {
    struct gateway_instance *in = g->instances[i], *replica = replica_of(g, in);
    if (in->move.state == GATEWAY_MOVE_STARTING) return 0; /* the move ends first */
    if (replica) hand_over(in, replica);
    struct supervisor_view view;
    supervisor_view(&in->supervisor, &view);
    int empty = view.n_jobs == 0;
    if (!empty) return 0;
    g->instances[i] = g->instances[--g->n_instances];
    retire(g, in);
    /* its id is gone for good (a move keeps it): so are its series */
    metrics_drop(&g->metrics.registry, "instance", in->id);
    gateway_cluster_event(g, "stop", in->id, NULL, "%s stopped%s%s", in->id,
                          replica ? "; its requests went to " : "", replica ? replica->id : "");
    return 1;
}

/* An instance whose runner failed every start (a host lost or broken) is
 * placed elsewhere, once in a while (cluster lock held). */
static void replace_failed(struct gateway *g, struct gateway_instance *in) {
    char why[512];
    uint64_t now = clock_now_us();
    if (g->n_hosts < 2 || in->deleting || in->move.state == GATEWAY_MOVE_STARTING ||
        now - in->replaced_us < REPLACE_EVERY_US)
        return;
    struct supervisor_view view;
    supervisor_view(&in->supervisor, &view);
    int failed = view.state == SUPERVISOR_FAILED;
    if (!failed) return;
    /* the last placement elsewhere failed too: its requests end (503)
     * rather than wait for ever, as on a cluster of one host */
    if (in->replaced_us && in->move.state == GATEWAY_MOVE_FAILED) {
        snprintf(why, sizeof(why), "model %s is unavailable: no placement starts (%s)", in->name,
                 in->move.reason);
        supervisor_fail(&in->supervisor, 503, why);
    }
    in->replaced_us = now;
    char reason[800];
    if (start_move(g, in, 0, NULL, 0, 1, why, sizeof(why)) == 0) return;
    log_event(LOG_LEVEL_ERROR, "gateway", "%s failed and has no other placement now: %s", in->id,
              why);
    snprintf(reason, sizeof(reason), "model %s is unavailable: it has no other placement (%s)",
             in->name, why);
    supervisor_fail(&in->supervisor, 503, reason);
}

void gateway_cluster_drain_for(struct gateway *g, int host, double seconds) {
    pthread_mutex_lock(&g->cluster_lock);
    g->drained_until_us[host] = clock_now_us() + (uint64_t)(seconds * 1e6);
    if (!g->hosts[host].drained) {
        g->hosts[host].drained = 1;
        gateway_cluster_event(g, "drain", NULL, g->hosts[host].name,
                              "host %s is drained (a fault, for %.0f s)", g->hosts[host].name,
                              seconds);
    }
    pthread_mutex_unlock(&g->cluster_lock);
}

/* Ends the drains a fault asked for once their time is over (cluster lock
 * held). */
static void end_drain_faults(struct gateway *g) {
    uint64_t now = clock_now_us();
    for (int i = 0; i < g->n_hosts; i++) {
        if (!g->drained_until_us[i] || now < g->drained_until_us[i]) continue;
        g->drained_until_us[i] = 0;
        g->hosts[i].drained = 0;
        gateway_cluster_event(g, "undrain", NULL, g->hosts[i].name, "host %s takes instances again",
                              g->hosts[i].name);
    }
}

/* An instance with a rank on a drained host moves elsewhere, tried again
 * once in a while when nothing else fits (cluster lock held). */
static void leave_drained(struct gateway *g, struct gateway_instance *in) {
    char why[512];
    uint64_t now = clock_now_us();
    if (in->deleting || in->move.state == GATEWAY_MOVE_STARTING ||
        !placed_on_lost(g, &in->placement, 1) || now - in->left_us < REPLACE_EVERY_US)
        return;
    in->left_us = now;
    if (start_move(g, in, 0, NULL, 0, 1, why, sizeof(why)))
        log_event(LOG_LEVEL_WARN, "gateway", "%s cannot leave its drained host: %s", in->id, why);
}

void gateway_cluster_step(struct gateway *g) {
    pthread_mutex_lock(&g->cluster_lock);
    end_drain_faults(g);
    gateway_history_sample(g);
    for (int i = 0; i < g->n_instances; i++) {
        replace_failed(g, g->instances[i]);
        leave_drained(g, g->instances[i]);
        if (g->instances[i]->move.state == GATEWAY_MOVE_STARTING) check_move(g, i);
        if (g->instances[i]->deleting && check_delete(g, i)) i--;
    }
    pthread_mutex_unlock(&g->cluster_lock);
    reap_retired(g);
}

void gateway_cluster_leave_host(struct gateway *g, int host) {
    char ids[64][160], why[512];
    int n = 0;
    pthread_mutex_lock(&g->cluster_lock);
    for (int i = 0; i < g->n_instances && n < 64; i++) {
        const struct gateway_instance *in = g->instances[i];
        if (placed_on(&in->placement, host) && !in->deleting &&
            in->move.state != GATEWAY_MOVE_STARTING)
            snprintf(ids[n++], sizeof(ids[0]), "%s", in->id);
    }
    pthread_mutex_unlock(&g->cluster_lock);
    /* the policy never places on a lost host; one that cannot be placed
     * now is tried again at the next probe, and keeps restarting meanwhile */
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&g->cluster_lock);
        struct gateway_instance *in = find_live(g, ids[i]);
        int status = in ? start_move(g, in, 0, NULL, 0, 1, why, sizeof(why)) : 0;
        pthread_mutex_unlock(&g->cluster_lock);
        if (status)
            log_event(LOG_LEVEL_WARN, "gateway", "%s cannot leave host %s: %s", ids[i],
                      g->hosts[host].name, why);
    }
}

int gateway_cluster_lose_host(struct gateway *g, int host, double seconds) {
    pid_t pids[128] = {0};
    int n = 0;
    pthread_mutex_lock(&g->cluster_lock);
    struct cluster_host *h = &g->hosts[host];
    g->lost_until_us[host] = clock_now_us() + (uint64_t)(seconds * 1e6);
    if (!h->lost) {
        cluster_host_update(h, NULL);
        gateway_cluster_event(g, "lost", NULL, h->name, "host %s is lost (a fault, for %.0f s)",
                              h->name, seconds);
    }
    for (int i = 0; i < g->n_instances; i++)
        for (int pass = 0; pass < 2; pass++) {
            struct gateway_instance *in = g->instances[i];
            struct gateway_instance *at = in && pass ? in->move.successor : in;
            if (!at || !placed_on(&at->placement, host) || n == 128) continue;
            struct supervisor_view view;
            supervisor_view(&at->supervisor, &view);
            if (view.pid > 0) pids[n++] = view.pid;
        }
    pthread_mutex_unlock(&g->cluster_lock);
    /* what ran there dies with it */
    for (int i = 0; i < n; i++) kill(-pids[i], SIGKILL);
    gateway_cluster_leave_host(g, host);
    return n;
}

int gateway_cluster_drain_host(struct gateway *g, const char *name, int drain, char *why,
                               size_t whylen) {
    pthread_mutex_lock(&g->cluster_lock);
    int host = find_host(g, name);
    if (host >= 0) g->drained_until_us[host] = 0; /* the operator's word over a fault's */
    if (host >= 0 && g->hosts[host].drained != drain) {
        g->hosts[host].drained = drain;
        gateway_cluster_event(g, drain ? "drain" : "undrain", NULL, name,
                              drain ? "host %s is drained: its instances move elsewhere"
                                    : "host %s takes instances again",
                              name);
    }
    pthread_mutex_unlock(&g->cluster_lock);
    if (host < 0) {
        snprintf(why, whylen, "no host is called '%s' in the cluster (GET /v1/cluster)", name);
        return 404;
    }
    /* the cluster thread moves what is there (leave_drained) */
    return 0;
}

/* ---------- start and end ---------- */

/* The instances the gateway starts with: those --place pins, else one
 * per model at its configured degree where the policy puts it. */
static int start_initial(struct gateway *g, char *err, size_t errlen) {
    const struct gateway_params *p = &g->params;
    char id[160], why[512];
    for (int i = 0; i < (p->n_places ? p->n_places : g->n_served); i++) {
        const struct cluster_place_spec *spec = p->n_places ? &p->places[i] : NULL;
        const char *model = spec ? spec->model : g->served[i].name;
        const struct gateway_served *s = gateway_served_find(g->served, g->n_served, model);
        const char *hosts[CLUSTER_HOSTS_MAX];
        int n_hosts = spec ? spec->n_hosts : 0, tp = spec ? spec->tp : g->served[i].model.tp;
        for (int k = 0; k < n_hosts; k++) hosts[k] = spec->hosts[k];
        int status =
            s ? gateway_cluster_add(g, model, tp, hosts, n_hosts, id, sizeof(id), why, sizeof(why))
              : 404;
        if (!s) snprintf(why, sizeof(why), "no model is called '%s' (--name)", model);
        if (status) {
            snprintf(err, errlen, "cannot start %s at tp %d: %s", model, tp, why);
            return -1;
        }
    }
    return 0;
}

int gateway_cluster_start(struct gateway *g, char *err, size_t errlen) {
    const struct gateway_params *p = &g->params;
    if (p->n_hosts > 0) {
        g->n_hosts = p->n_hosts < CLUSTER_HOSTS_MAX ? p->n_hosts : CLUSTER_HOSTS_MAX;
        memcpy(g->hosts, p->hosts, (size_t)g->n_hosts * sizeof(*g->hosts));
    } else {
        /* this machine alone, as without a cluster: its ranks are not
         * limited to its cores */
        cluster_host_local(&g->hosts[0]);
        g->hosts[0].slots = CLUSTER_RANKS_MAX;
        g->n_hosts = 1;
    }
    gateway_probe_hosts(g, 1); /* this machine now; the others from the probe thread */
    if (start_initial(g, err, errlen)) return -1;
    return gateway_probe_start(g, err, errlen);
}

void gateway_cluster_stop(struct gateway *g) {
    gateway_probe_stop(g);
    /* what is still moving stops with the rest: a move's new placement
     * holds no request of its own */
    for (int i = 0; i < g->n_instances; i++) {
        struct gateway_instance *next = g->instances[i]->move.successor;
        if (next) supervisor_stop(&next->supervisor);
        supervisor_stop(&g->instances[i]->supervisor);
    }
    for (int i = 0; i < g->n_retiring; i++) supervisor_stop(&g->retiring[i]->supervisor);
}

void gateway_cluster_free(struct gateway *g) {
    for (int i = 0; i < g->n_instances; i++) {
        gateway_instance_release(g->instances[i]->move.successor);
        gateway_instance_release(g->instances[i]);
    }
    for (int i = 0; i < g->n_retiring; i++) gateway_instance_release(g->retiring[i]);
    free(g->instances);
    free(g->retiring);
    g->instances = g->retiring = NULL;
    g->n_instances = g->n_retiring = 0;
}
