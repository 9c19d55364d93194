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
#include "gateway/fleet/fleet.h"

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

void fleet_record(struct fleet *f, const char *kind, const char *instance, const char *host,
                  const char *format, ...) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct fleet_event *e = &f->events[f->n_events % FLEET_EVENTS];
    memset(e, 0, sizeof(*e));
    e->time = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
    snprintf(e->kind, sizeof(e->kind), "%s", kind);
    snprintf(e->instance, sizeof(e->instance), "%s", instance ? instance : "");
    snprintf(e->host, sizeof(e->host), "%s", host ? host : "");
    va_list args;
    va_start(args, format);
    vsnprintf(e->text, sizeof(e->text), format, args);
    va_end(args);
    f->n_events++;
    log_event(LOG_LEVEL_INFO, "gateway", "%s", e->text);
}

void fleet_note(struct fleet *f, const char *kind, const char *instance, const char *format, ...) {
    char text[256];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof(text), format, args);
    va_end(args);
    pthread_mutex_lock(&f->cluster_lock);
    fleet_record(f, kind, instance, NULL, "%s", text);
    pthread_mutex_unlock(&f->cluster_lock);
}

/* ---------- the list ---------- */

static int append(struct fleet_instance ***list, int *n, int *capacity, struct fleet_instance *in) {
    if (*n == *capacity) {
        int grown_capacity = *capacity ? 2 * *capacity : 8;
        struct fleet_instance **grown =
            realloc(*list, (size_t)grown_capacity * sizeof(struct fleet_instance *));
        if (!grown) return -1;
        *list = grown;
        *capacity = grown_capacity;
    }
    (*list)[(*n)++] = in;
    return 0;
}

struct fleet_instance *fleet_find(struct fleet *f, const char *id) {
    for (int i = 0; i < f->n_instances; i++)
        if (!strcmp(f->instances[i]->id, id)) return f->instances[i];
    return NULL;
}

int fleet_has(const struct fleet *f, const struct fleet_instance *in) {
    for (int i = 0; i < f->n_instances; i++)
        if (f->instances[i] == in || f->instances[i]->move.successor == in) return 1;
    return 0;
}

/* 1 if the placement has a rank on host. */
static int placed_on(const struct cluster_placement *p, int host) {
    for (int k = 0; k < p->n_hosts; k++)
        if (p->host[k] == host) return 1;
    return 0;
}

/* 1 if the placement has a rank on a lost host (or, with drained, on a
 * drained one). */
static int placed_on_lost(const struct fleet *f, const struct cluster_placement *p, int drained) {
    for (int k = 0; k < p->n_hosts; k++) {
        const struct cluster_host *h = &f->hosts[p->host[k]];
        if (drained ? h->drained : h->lost) return 1;
    }
    return 0;
}

/* Makes and starts an instance of served at placement (cluster lock
 * held); NULL with why. */
static struct fleet_instance *start_instance(struct fleet *f, const struct gateway_served *s,
                                             const char *id,
                                             const struct cluster_placement *placement,
                                             int64_t bytes_per_rank, char *why, size_t whylen) {
    struct fleet_instance *in = calloc(1, sizeof(*in));
    int number = ++f->next_instance;
    if (!in) {
        snprintf(why, whylen, "out of memory for an instance");
        return NULL;
    }
    char own_id[160];
    snprintf(own_id, sizeof(own_id), "%s-%d", s->name, number);
    if (fleet_instance_init(in, f, s, id ? id : own_id, placement, number, why, whylen) ||
        supervisor_start(&in->supervisor, why, whylen)) {
        fleet_instance_release(in);
        return NULL;
    }
    in->bytes_per_rank = bytes_per_rank;
    gateway_observe_instance(f->metrics, in->name, in->id, supervisor_state_names,
                             SUPERVISOR_STATES);
    return in;
}

/* ---------- routing ---------- */

/* The routable instance of s to send work to: a ready replica first, then
 * the one with the least work (cluster lock held); NULL if there is none. */
static struct fleet_instance *least_loaded(struct fleet *f, const struct gateway_served *s) {
    struct fleet_instance *best = NULL;
    int64_t best_load = 0;
    int best_ready = 0;
    for (int i = 0; i < f->n_instances; i++) {
        struct fleet_instance *in = f->instances[i];
        if (in->served != s || !in->routable) continue;
        struct supervisor_view view;
        supervisor_view(&in->supervisor, &view);
        int ready = view.state == SUPERVISOR_READY;
        int64_t load = supervisor_outstanding(&in->supervisor);
        if (!best || ready > best_ready || (ready == best_ready && load < best_load)) {
            best = in;
            best_load = load;
            best_ready = ready;
        }
    }
    return best;
}

/* Routes r's choices not yet submitted; first: r's are all new, and its
 * metrics become the chosen instance's. */
static void route(struct fleet *f, struct gateway_request *r, int first) {
    const struct gateway_served *s = r->served;
    pthread_mutex_lock(&f->cluster_lock);
    struct fleet_instance *best = least_loaded(f, s);
    if (best && first) /* its metrics are the instance's that serves it */
        snprintf(r->instance_id, sizeof(r->instance_id), "%s", best->id);
    if (best) fleet_instance_submit(best, r);
    pthread_mutex_unlock(&f->cluster_lock);
    if (!best) {
        char why[256];
        snprintf(why, sizeof(why), "model %s has no instance (all were stopped)", s->name);
        gateway_request_fail(r, 503, why);
    }
}

void fleet_submit(struct fleet *f, struct gateway_request *r) {
    route(f, r, 1);
}

void fleet_submit_more(void *gateway, struct gateway_request *r) {
    route(gateway, r, 0);
}

struct fleet_instance *fleet_any(struct fleet *f, const struct gateway_served *s) {
    struct fleet_instance *found = NULL;
    pthread_mutex_lock(&f->cluster_lock);
    for (int i = 0; i < f->n_instances && !found; i++)
        if (f->instances[i]->served == s && f->instances[i]->routable) found = f->instances[i];
    if (found) fleet_instance_hold(found);
    pthread_mutex_unlock(&f->cluster_lock);
    return found;
}

void fleet_each(struct fleet *f, void (*fn)(struct gateway_request *, uint64_t), uint64_t arg) {
    pthread_mutex_lock(&f->cluster_lock);
    for (int i = 0; i < f->n_instances; i++) {
        fleet_instance_each(f->instances[i], fn, arg);
        if (f->instances[i]->move.state == FLEET_MOVE_STARTING)
            fleet_instance_each(f->instances[i]->move.successor, fn, arg);
    }
    pthread_mutex_unlock(&f->cluster_lock);
}

void fleet_fail(struct fleet *f, int status, const char *message) {
    pthread_mutex_lock(&f->cluster_lock);
    for (int i = 0; i < f->n_instances; i++) {
        supervisor_fail(&f->instances[i]->supervisor, status, message);
        if (f->instances[i]->move.state == FLEET_MOVE_STARTING)
            supervisor_fail(&f->instances[i]->move.successor->supervisor, status, message);
    }
    pthread_mutex_unlock(&f->cluster_lock);
}

/* ---------- the admin API's operations ---------- */

int fleet_add(struct fleet *f, const char *model, const struct cluster_shape *shape,
              const char *const *hosts, int n_hosts, char *id, size_t idlen, char *why,
              size_t whylen) {
    const struct gateway_served *s = gateway_served_find(f->served, f->n_served, model);
    struct cluster_placement placement;
    int64_t bytes = 0;
    if (!s) {
        snprintf(why, whylen, "the model '%s' is not served (GET /v1/models)", model);
        return 404;
    }
    pthread_mutex_lock(&f->cluster_lock);
    int status = fleet_choose_placement(f, s, shape, hosts, n_hosts, NULL, "", &placement, &bytes,
                                        why, whylen);
    struct fleet_instance *in =
        status ? NULL : start_instance(f, s, NULL, &placement, bytes, why, whylen);
    if (!status && !in) status = 500;
    if (in && append(&f->instances, &f->n_instances, &f->instances_capacity, in)) {
        pthread_mutex_unlock(&f->cluster_lock);
        supervisor_retire(&in->supervisor);
        supervisor_stop(&in->supervisor);
        fleet_instance_release(in);
        snprintf(why, whylen, "out of memory for the instance list");
        return 500;
    }
    if (in) {
        in->routable = 1;
        in->shape_chosen = shape->chosen;
        snprintf(id, idlen, "%s", in->id);
        fleet_record(f, "start", in->id, NULL, "%s started on %s (tp %d, pp %d%s)", in->id,
                     in->hosts_text, placement.tp, placement.pp,
                     shape->chosen ? ", chosen by the policy" : "");
    }
    pthread_mutex_unlock(&f->cluster_lock);
    return status;
}

int fleet_delete(struct fleet *f, const char *id, char *why, size_t whylen) {
    pthread_mutex_lock(&f->cluster_lock);
    struct fleet_instance *in = fleet_find(f, id);
    if (in && !in->deleting) {
        in->deleting = 1;
        in->routable = 0;
        fleet_record(f, "stop", in->id, NULL, "%s is draining to stop", in->id);
    }
    pthread_mutex_unlock(&f->cluster_lock);
    if (in) return 0;
    snprintf(why, whylen, "no instance is called '%s' (GET /v1/cluster)", id);
    return 404;
}

/* 1 if the placement has shape's degrees on the named hosts, in that
 * order, with its layer split when one is asked for. */
static int placed_at(const struct fleet *f, const struct cluster_placement *p,
                     const struct cluster_shape *shape, const char *const *hosts, int n_hosts) {
    if (n_hosts == 0 || n_hosts != p->n_hosts || shape->tp != p->tp || shape->pp != p->pp) return 0;
    if (shape->layers[0] && memcmp(shape->layers, p->layers, sizeof(p->layers)) != 0) return 0;
    for (int k = 0; k < n_hosts; k++)
        if (strcmp(f->hosts[p->host[k]].name, hosts[k]) != 0) return 0;
    return 1;
}

/* 1 (with why) if a named host of a move of `in` computes with another
 * numerics contract than its ranks do now. Refused rather than warned:
 * the move hands every unfinished request to the new placement, which
 * resumes it from its tokens (DESIGN.md I4, I8); ranks of another contract
 * reduce in another order, so every token after the move could differ from
 * the one the client would have had, silently and with no way to tell
 * afterwards. To run a model there, start an instance there instead. */
static int numerics_differ(const struct fleet *f, const struct fleet_instance *in,
                           const char *numerics, const char *const *hosts, int n_hosts, char *why,
                           size_t whylen) {
    int to[CLUSTER_HOSTS_MAX], n_to = 0;
    char reason[192];
    for (int k = 0; k < n_hosts && n_to < CLUSTER_HOSTS_MAX; k++) {
        int h = cluster_host_find(f->hosts, f->n_hosts, hosts[k]);
        if (h >= 0) to[n_to++] = h; /* an unknown name is choose_placement's 400 */
    }
    if (cluster_numerics_check(f->hosts, numerics, to, n_to, reason, sizeof(reason)) == 0) return 0;
    snprintf(why, whylen,
             "moving %s would change its requests' later tokens: %s, as %s's hosts do (start "
             "an instance there instead)",
             in->id, reason, in->id);
    return 1;
}

/* A move that keeps the instance's degrees and split. */
static const struct cluster_shape fleet_same_shape = {0, 0, {0}, 0};

/* Starts moving in to shape (tp, pp 0: its own) on hosts (none: where the
 * policy says, elsewhere; or, when anywhere, where it is if nowhere else
 * fits); 0, or an HTTP status with why (cluster lock held). */
static int start_move(struct fleet *f, struct fleet_instance *in, const struct cluster_shape *asked,
                      const char *const *hosts, int n_hosts, int anywhere, char *why,
                      size_t whylen) {
    struct cluster_placement placement;
    struct cluster_shape shape = *asked;
    int64_t bytes = 0;
    if (in->deleting || in->move.state == FLEET_MOVE_STARTING) {
        snprintf(why, whylen, "%s is %s", in->id,
                 in->deleting ? "being stopped" : "already moving");
        return 409;
    }
    shape.chosen =
        in->shape_chosen && shape.tp <= 0 && shape.pp <= 0 && !shape.layers[0] && n_hosts == 0;
    if (shape.tp <= 0) shape.tp = in->placement.tp;
    if (shape.pp <= 0) shape.pp = in->placement.pp;
    if (!anywhere && placed_at(f, &in->placement, &shape, hosts, n_hosts)) {
        char stages[16] = "";
        if (shape.pp > 1) snprintf(stages, sizeof(stages), ", pp %d", shape.pp);
        snprintf(why, whylen, "%s is already placed at %s (tp %d%s): nothing moves", in->id,
                 in->hosts_text, shape.tp, stages);
        return 409;
    }
    const char *numerics = cluster_placement_numerics(f->hosts, &in->placement);
    if (numerics_differ(f, in, numerics, hosts, n_hosts, why, whylen)) return 409;
    /* without hosts, a move at the same degree goes elsewhere; a failed
     * instance that has nowhere else starts anew where it was */
    int same = shape.chosen || (shape.tp == in->placement.tp && shape.pp == in->placement.pp);
    const struct cluster_placement *avoid = same ? &in->placement : NULL;
    int status = fleet_choose_placement(f, in->served, &shape, hosts, n_hosts, avoid, numerics,
                                        &placement, &bytes, why, whylen);
    if (status == 409 && avoid && anywhere)
        status = fleet_choose_placement(f, in->served, &shape, hosts, n_hosts, NULL, numerics,
                                        &placement, &bytes, why, whylen);
    struct fleet_instance *next =
        status ? NULL : start_instance(f, in->served, in->id, &placement, bytes, why, whylen);
    if (!next) return status ? status : 500;
    next->shape_chosen = shape.chosen;
    in->move = (struct fleet_move){.state = FLEET_MOVE_STARTING,
                                   .tp = placement.tp,
                                   .pp = placement.pp,
                                   .started_us = clock_now_us(),
                                   .successor = next};
    snprintf(in->move.to, sizeof(in->move.to), "%s", next->hosts_text);
    fleet_record(f, "move", in->id, NULL, "%s moving from %s to %s", in->id, in->hosts_text,
                 next->hosts_text);
    return 0;
}

int fleet_move(struct fleet *f, const char *id, const struct cluster_shape *shape,
               const char *const *hosts, int n_hosts, char *why, size_t whylen) {
    pthread_mutex_lock(&f->cluster_lock);
    struct fleet_instance *in = fleet_find(f, id);
    int status = in ? start_move(f, in, shape, hosts, n_hosts, 0, why, whylen) : 404;
    if (!in) snprintf(why, whylen, "no instance is called '%s' (GET /v1/cluster)", id);
    pthread_mutex_unlock(&f->cluster_lock);
    return status;
}

/* ---------- the cluster thread: completing moves and deletions ---------- */

/* Stops an instance the cluster no longer uses (moved off, deleted, a
 * move's failed placement): its supervisor is told to stop its runner,
 * which may take seconds (a runner finishing its step, mpirun passing the
 * signal on), so it is only reaped by a later step (reap_retired): the
 * cluster thread never waits for it (cluster lock held). */
static void retire(struct fleet *f, struct fleet_instance *in) {
    supervisor_retire(&in->supervisor);
    if (append(&f->retiring, &f->n_retiring, &f->retiring_capacity, in) == 0) return;
    /* no room to keep it: it is reaped when the gateway ends instead */
    log_event(LOG_LEVEL_ERROR, "gateway", "%s: out of memory for the retiring list", in->id);
}

/* Joins the retired instances whose supervisor returned, and drops the
 * cluster's reference: each is freed, pipes and all, once no request names
 * it (no lock held). */
static void reap_retired(struct fleet *f) {
    struct fleet_instance *done[64];
    int n = 0;
    pthread_mutex_lock(&f->cluster_lock);
    for (int i = 0; i < f->n_retiring && n < 64;)
        if (supervisor_stopped(&f->retiring[i]->supervisor)) {
            done[n++] = f->retiring[i];
            f->retiring[i] = f->retiring[--f->n_retiring];
        } else {
            i++;
        }
    pthread_mutex_unlock(&f->cluster_lock);
    for (int i = 0; i < n; i++) {
        supervisor_stop(&done[i]->supervisor); /* returns at once: its supervisor is done */
        fleet_instance_release(done[i]);
    }
}

/* Hands every choice of `from` to `to` (cluster lock held). */
static void hand_over(struct fleet_instance *from, struct fleet_instance *to) {
    struct supervisor_job **jobs;
    int n = supervisor_take(&from->supervisor, &jobs);
    if (n < 0) return; /* out of memory: they stay and finish where they are */
    supervisor_give(&to->supervisor, jobs, n);
    free(jobs);
}

/* The move's new placement is ready: it takes the old one's place in the
 * list, its requests, and its counters (cluster lock held). */
static void complete_move(struct fleet *f, int i) {
    struct fleet_instance *old = f->instances[i], *next = old->move.successor;
    uint64_t now = clock_now_us();
    next->move = old->move;
    next->move.state = FLEET_MOVE_DONE;
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
    f->instances[i] = next;
    hand_over(old, next);
    retire(f, old);
    fleet_record(f, "move", next->id, NULL, "%s moved from %s to %s in %.1f s", next->id,
                 old->hosts_text, next->hosts_text, (double)(now - next->move.started_us) * 1e-6);
    gateway_observe_move(f->metrics, next->name, 1, (double)(now - next->move.started_us) * 1e-6);
}

/* The move's new placement failed (cluster lock held): the old one serves on. */
static void fail_move(struct fleet *f, struct fleet_instance *in, const char *reason) {
    retire(f, in->move.successor);
    in->move.successor = NULL;
    in->move.state = FLEET_MOVE_FAILED;
    in->move.finished_us = clock_now_us();
    snprintf(in->move.reason, sizeof(in->move.reason), "%s", reason);
    fleet_record(f, "move_failed", in->id, NULL, "%s did not move to %s: %s", in->id, in->move.to,
                 reason);
    gateway_observe_move(f->metrics, in->name, 0, 0);
}

/* Looks at a move in progress (cluster lock held). */
static void check_move(struct fleet *f, int i) {
    struct fleet_instance *in = f->instances[i], *next = in->move.successor;
    struct supervisor_view to, from;
    supervisor_view(&next->supervisor, &to);
    supervisor_view(&in->supervisor, &from);
    int ready = to.state == SUPERVISOR_READY, failed = to.failures > 0 || to.restarts > 0;
    int warm = to.warm_pending == 0;
    int serving = from.state == SUPERVISOR_READY && !placed_on_lost(f, &in->placement, 0);
    uint64_t now = clock_now_us();
    double waited = (double)(now - in->move.started_us) * 1e-6;
    if (ready && !serving) {
        /* the old placement is down (a host lost, its runner failing): its
         * clients wait already, and a warm-up would only add to it */
        complete_move(f, i);
    } else if (ready && !in->move.warming) {
        /* the old placement serves on while the new one computes the
         * requests' KV; they then move with only a few tokens to compute */
        in->move.warming = 1;
        in->move.warm_started_us = now;
        supervisor_warm(&in->supervisor, &next->supervisor);
    } else if (ready && (warm || (double)(now - in->move.warm_started_us) * 1e-6 > WARM_SECONDS))
        complete_move(f, i);
    else if (failed)
        fail_move(f, in, to.status);
    else if (waited > MOVE_START_SECONDS)
        fail_move(f, in, "its runner was not ready in time");
}

/* The ready routable replica of in with the least work, or NULL. */
static struct fleet_instance *replica_of(struct fleet *f, const struct fleet_instance *in) {
    struct fleet_instance *best = NULL;
    int64_t best_load = 0;
    for (int i = 0; i < f->n_instances; i++) {
        struct fleet_instance *other = f->instances[i];
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
static int check_delete(struct fleet *f, int i) {
    struct fleet_instance *in = f->instances[i], *replica = replica_of(f, in);
    if (in->move.state == FLEET_MOVE_STARTING) return 0; /* the move ends first */
    if (replica) hand_over(in, replica);
    struct supervisor_view view;
    supervisor_view(&in->supervisor, &view);
    int empty = view.n_jobs == 0;
    if (!empty) return 0;
    f->instances[i] = f->instances[--f->n_instances];
    retire(f, in);
    /* its id is gone for good (a move keeps it): so are its series */
    metrics_drop(&f->metrics->registry, "instance", in->id);
    fleet_record(f, "stop", in->id, NULL, "%s stopped%s%s", in->id,
                 replica ? "; its requests went to " : "", replica ? replica->id : "");
    return 1;
}

/* An instance whose runner failed every start (a host lost or broken) is
 * placed elsewhere, once in a while (cluster lock held). */
static void replace_failed(struct fleet *f, struct fleet_instance *in) {
    char why[512];
    uint64_t now = clock_now_us();
    if (f->n_hosts < 2 || in->deleting || in->move.state == FLEET_MOVE_STARTING ||
        now - in->replaced_us < REPLACE_EVERY_US)
        return;
    struct supervisor_view view;
    supervisor_view(&in->supervisor, &view);
    int failed = view.state == SUPERVISOR_FAILED;
    if (!failed) return;
    /* the last placement elsewhere failed too: its requests end (503)
     * rather than wait for ever, as on a cluster of one host */
    if (in->replaced_us && in->move.state == FLEET_MOVE_FAILED) {
        snprintf(why, sizeof(why), "model %s is unavailable: no placement starts (%s)", in->name,
                 in->move.reason);
        supervisor_fail(&in->supervisor, 503, why);
    }
    in->replaced_us = now;
    char reason[800];
    if (start_move(f, in, &fleet_same_shape, NULL, 0, 1, why, sizeof(why)) == 0) return;
    log_event(LOG_LEVEL_ERROR, "gateway", "%s failed and has no other placement now: %s", in->id,
              why);
    snprintf(reason, sizeof(reason), "model %s is unavailable: it has no other placement (%s)",
             in->name, why);
    supervisor_fail(&in->supervisor, 503, reason);
}

void fleet_drain_for(struct fleet *f, int host, double seconds) {
    pthread_mutex_lock(&f->cluster_lock);
    f->drained_until_us[host] = clock_now_us() + (uint64_t)(seconds * 1e6);
    if (!f->hosts[host].drained) {
        f->hosts[host].drained = 1;
        fleet_record(f, "drain", NULL, f->hosts[host].name,
                     "host %s is drained (a fault, for %.0f s)", f->hosts[host].name, seconds);
    }
    pthread_mutex_unlock(&f->cluster_lock);
}

/* Ends the drains a fault asked for once their time is over (cluster lock
 * held). */
static void end_drain_faults(struct fleet *f) {
    uint64_t now = clock_now_us();
    for (int i = 0; i < f->n_hosts; i++) {
        if (!f->drained_until_us[i] || now < f->drained_until_us[i]) continue;
        f->drained_until_us[i] = 0;
        f->hosts[i].drained = 0;
        fleet_record(f, "undrain", NULL, f->hosts[i].name, "host %s takes instances again",
                     f->hosts[i].name);
    }
}

/* An instance with a rank on a drained host moves elsewhere, tried again
 * once in a while when nothing else fits (cluster lock held). */
static void leave_drained(struct fleet *f, struct fleet_instance *in) {
    char why[512];
    uint64_t now = clock_now_us();
    if (in->deleting || in->move.state == FLEET_MOVE_STARTING ||
        !placed_on_lost(f, &in->placement, 1) || now - in->left_us < REPLACE_EVERY_US)
        return;
    in->left_us = now;
    if (start_move(f, in, &fleet_same_shape, NULL, 0, 1, why, sizeof(why)))
        log_event(LOG_LEVEL_WARN, "gateway", "%s cannot leave its drained host: %s", in->id, why);
}

void fleet_step(struct fleet *f) {
    pthread_mutex_lock(&f->cluster_lock);
    end_drain_faults(f);
    fleet_history_sample(f);
    for (int i = 0; i < f->n_instances; i++) {
        replace_failed(f, f->instances[i]);
        leave_drained(f, f->instances[i]);
        if (f->instances[i]->move.state == FLEET_MOVE_STARTING) check_move(f, i);
        if (f->instances[i]->deleting && check_delete(f, i)) i--;
    }
    pthread_mutex_unlock(&f->cluster_lock);
    reap_retired(f);
}

void fleet_leave_host(struct fleet *f, int host) {
    char ids[64][160], why[512];
    int n = 0;
    pthread_mutex_lock(&f->cluster_lock);
    for (int i = 0; i < f->n_instances && n < 64; i++) {
        const struct fleet_instance *in = f->instances[i];
        if (placed_on(&in->placement, host) && !in->deleting &&
            in->move.state != FLEET_MOVE_STARTING)
            snprintf(ids[n++], sizeof(ids[0]), "%s", in->id);
    }
    pthread_mutex_unlock(&f->cluster_lock);
    /* the policy never places on a lost host; one that cannot be placed
     * now is tried again at the next probe, and keeps restarting meanwhile */
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&f->cluster_lock);
        struct fleet_instance *in = fleet_find(f, ids[i]);
        int status = in ? start_move(f, in, &fleet_same_shape, NULL, 0, 1, why, sizeof(why)) : 0;
        pthread_mutex_unlock(&f->cluster_lock);
        if (status)
            log_event(LOG_LEVEL_WARN, "gateway", "%s cannot leave host %s: %s", ids[i],
                      f->hosts[host].name, why);
    }
}

int fleet_lose_host(struct fleet *f, int host, double seconds) {
    pid_t pids[128] = {0};
    int n = 0;
    pthread_mutex_lock(&f->cluster_lock);
    struct cluster_host *h = &f->hosts[host];
    f->lost_until_us[host] = clock_now_us() + (uint64_t)(seconds * 1e6);
    if (!h->lost) {
        cluster_host_update(h, NULL);
        fleet_record(f, "lost", NULL, h->name, "host %s is lost (a fault, for %.0f s)", h->name,
                     seconds);
    }
    for (int i = 0; i < f->n_instances; i++)
        for (int pass = 0; pass < 2; pass++) {
            struct fleet_instance *in = f->instances[i];
            struct fleet_instance *at = in && pass ? in->move.successor : in;
            if (!at || !placed_on(&at->placement, host) || n == 128) continue;
            struct supervisor_view view;
            supervisor_view(&at->supervisor, &view);
            if (view.pid > 0) pids[n++] = view.pid;
        }
    pthread_mutex_unlock(&f->cluster_lock);
    /* what ran there dies with it */
    for (int i = 0; i < n; i++) kill(-pids[i], SIGKILL);
    fleet_leave_host(f, host);
    return n;
}

int fleet_drain_host(struct fleet *f, const char *name, int drain, char *why, size_t whylen) {
    pthread_mutex_lock(&f->cluster_lock);
    int host = cluster_host_find(f->hosts, f->n_hosts, name);
    if (host >= 0) f->drained_until_us[host] = 0; /* the operator's word over a fault's */
    if (host >= 0 && f->hosts[host].drained != drain) {
        f->hosts[host].drained = drain;
        fleet_record(f, drain ? "drain" : "undrain", NULL, name,
                     drain ? "host %s is drained: its instances move elsewhere"
                           : "host %s takes instances again",
                     name);
    }
    pthread_mutex_unlock(&f->cluster_lock);
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
static int start_initial(struct fleet *f, char *err, size_t errlen) {
    const struct gateway_params *p = f->params;
    char id[160], why[512];
    for (int i = 0; i < (p->n_places ? p->n_places : f->n_served); i++) {
        const struct cluster_place_spec *spec = p->n_places ? &p->places[i] : NULL;
        const char *model = spec ? spec->model : f->served[i].name;
        const struct gateway_served *s = gateway_served_find(f->served, f->n_served, model);
        const char *hosts[CLUSTER_HOSTS_MAX];
        int n_hosts = spec ? spec->n_hosts : 0;
        struct cluster_shape shape = {.tp = f->served[i].model.tp,
                                      .pp = f->served[i].model.pp,
                                      .chosen = f->served[i].model.shape_chosen};
        memcpy(shape.layers, f->served[i].model.layers, sizeof(shape.layers));
        if (spec) {
            shape = (struct cluster_shape){.tp = spec->tp, .pp = spec->pp};
            memcpy(shape.layers, spec->layers, sizeof(shape.layers));
        }
        for (int k = 0; k < n_hosts; k++) hosts[k] = spec->hosts[k];
        int status =
            s ? fleet_add(f, model, &shape, hosts, n_hosts, id, sizeof(id), why, sizeof(why)) : 404;
        if (!s) snprintf(why, sizeof(why), "no model is called '%s' (--name)", model);
        if (status) {
            snprintf(err, errlen, "cannot start %s at tp %d, pp %d: %s", model, shape.tp, shape.pp,
                     why);
            return -1;
        }
    }
    return 0;
}

/* ---------- the hosts, as the probes hear them ---------- */

static int probe_hosts_copy(void *context, struct cluster_host *hosts) {
    struct fleet *f = context;
    pthread_mutex_lock(&f->cluster_lock);
    int n = f->n_hosts;
    memcpy(hosts, f->hosts, (size_t)n * sizeof(*hosts));
    pthread_mutex_unlock(&f->cluster_lock);
    return n;
}

/* A probe's answer (p), or its absence (NULL): a host just found lost has
 * its instances moved elsewhere; one that answers again is used for new
 * placements. */
static void probe_answered(void *context, int host, const struct cluster_probe *p) {
    struct fleet *f = context;
    pthread_mutex_lock(&f->cluster_lock);
    struct cluster_host *h = &f->hosts[host];
    int was_lost = h->lost;
    /* a host a fault took down stays down for its time, whatever it says */
    if (clock_now_us() < f->lost_until_us[host]) p = NULL;
    cluster_host_update(h, p);
    if (h->lost && !was_lost)
        fleet_record(f, "lost", NULL, h->name, "host %s is lost: it did not answer", h->name);
    if (!h->lost && was_lost)
        fleet_record(f, "back", NULL, h->name, "host %s answers again", h->name);
    int lost = h->lost;
    pthread_mutex_unlock(&f->cluster_lock);
    if (lost) fleet_leave_host(f, host);
}

/* The link probe's figures between hosts on[0..n): what the shape policy
 * weighs from now on. */
static void probe_links_measured(void *context, const int *on, int n,
                                 const struct cluster_link *links) {
    struct fleet *f = context;
    double slowest_us = 0, slowest_rate = 0;
    pthread_mutex_lock(&f->cluster_lock);
    memset(f->links, 0, sizeof(f->links));
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            if (a == b || on[a] >= f->n_hosts || on[b] >= f->n_hosts) continue;
            const struct cluster_link *l = &links[a * n + b];
            f->links[on[a] * f->n_hosts + on[b]] = *l;
            if (l->latency_us > slowest_us) slowest_us = l->latency_us;
            if (slowest_rate == 0 || l->bytes_per_second < slowest_rate)
                slowest_rate = l->bytes_per_second;
        }
    if (!f->links_measured)
        fleet_record(f, "links", NULL, NULL,
                     "links between %d hosts measured: at most %.0f us one way, at least %.1f "
                     "MB/s",
                     n, slowest_us, slowest_rate / 1e6);
    f->links_measured = 1;
    pthread_mutex_unlock(&f->cluster_lock);
}

int fleet_init(struct fleet *f, const struct gateway_params *params,
               const struct gateway_served *served, int n_served, struct gateway_metrics *metrics,
               atomic_int *stopping, atomic_ullong *next_id, const char *runtime_dir, char *err,
               size_t errlen) {
    memset(f, 0, sizeof(*f));
    f->params = params;
    f->served = served;
    f->n_served = n_served;
    f->metrics = metrics;
    f->stopping = stopping;
    f->next_id = next_id;
    snprintf(f->runtime_dir, sizeof(f->runtime_dir), "%s", runtime_dir);
    f->prober = (struct fleet_prober){
        .mpirun_path = params->mpirun_path,
        .lockstep_path = params->lockstep_path,
        .every_seconds = params->probe_seconds,
        .stopping = stopping,
        .events = {f, probe_hosts_copy, probe_answered, probe_links_measured}};
    pthread_mutex_init(&f->cluster_lock, NULL);
    pthread_mutex_init(&f->reports_lock, NULL);
    if (fleet_history_init(f) == 0) return 0;
    snprintf(err, errlen, "out of memory for the cluster's history");
    pthread_mutex_destroy(&f->reports_lock);
    pthread_mutex_destroy(&f->cluster_lock);
    return -1;
}

int fleet_start(struct fleet *f, char *err, size_t errlen) {
    const struct gateway_params *p = f->params;
    if (p->n_hosts > 0) {
        f->n_hosts = p->n_hosts < CLUSTER_HOSTS_MAX ? p->n_hosts : CLUSTER_HOSTS_MAX;
        memcpy(f->hosts, p->hosts, (size_t)f->n_hosts * sizeof(*f->hosts));
    } else {
        /* this machine alone, as without a cluster: its ranks are not
         * limited to its cores */
        cluster_host_local(&f->hosts[0]);
        f->hosts[0].slots = CLUSTER_RANKS_MAX;
        f->n_hosts = 1;
    }
    fleet_probe_hosts(&f->prober, 1); /* this machine now; the others from the probe thread */
    if (start_initial(f, err, errlen)) return -1;
    return fleet_probe_start(&f->prober, err, errlen);
}

void fleet_stop(struct fleet *f) {
    fleet_probe_stop(&f->prober);
    /* what is still moving stops with the rest: a move's new placement
     * holds no request of its own */
    for (int i = 0; i < f->n_instances; i++) {
        struct fleet_instance *next = f->instances[i]->move.successor;
        if (next) supervisor_stop(&next->supervisor);
        supervisor_stop(&f->instances[i]->supervisor);
    }
    for (int i = 0; i < f->n_retiring; i++) supervisor_stop(&f->retiring[i]->supervisor);
}

void fleet_free(struct fleet *f) {
    for (int i = 0; i < f->n_instances; i++) {
        fleet_instance_release(f->instances[i]->move.successor);
        fleet_instance_release(f->instances[i]);
    }
    for (int i = 0; i < f->n_retiring; i++) fleet_instance_release(f->retiring[i]);
    free(f->instances);
    free(f->retiring);
    f->instances = f->retiring = NULL;
    f->n_instances = f->n_retiring = 0;
    for (int i = 0; i < 16; i++) free(f->stuck_reports[i]);
    fleet_history_free(f);
    pthread_mutex_destroy(&f->reports_lock);
    pthread_mutex_destroy(&f->cluster_lock);
}
