/* instance.c -- a model instance: one placement of a served model around
 * the supervisor of its runner.
 *
 * The instance decides how its runner is launched (as the model was
 * configured on one local host, under mpirun otherwise) and answers its
 * supervisor's events: a choice's tokens and finish go to its request
 * (with the instance's counters and latency metrics), the runner's life
 * (ready, restarting, stuck, recovered) to the cluster's events and the
 * metrics, and the question whether a host of its placement is lost to
 * the cluster's hosts. It also cancels a request's choices wherever they
 * are now, for the requests layer, under the cluster lock that keeps an
 * instance being retired from going away meanwhile. */
#include "gateway/fleet/fleet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(SUPERVISOR_HOST_MAX == CLUSTER_HOST_NAME_MAX, "a supervisor holds a host's name");
_Static_assert(SUPERVISOR_PARTS_MAX >= CLUSTER_RANKS_MAX,
               "a placement's hosts each get an app context");

/* 1 if every host of the placement is this machine. */
static int placement_is_local(const struct fleet *f, const struct cluster_placement *p) {
    for (int k = 0; k < p->n_hosts; k++)
        if (!f->hosts[p->host[k]].local) return 0;
    return 1;
}

/* What runs lockstep on host h: its own lockstep= and wrapper= when the
 * cluster file names either, else the gateway's binary under
 * --runner-wrapper (for local runners only, as that option says). */
static void host_program(const struct fleet *f, const struct cluster_host *h, int mpi,
                         const char **lockstep, const char **wrapper) {
    const struct gateway_params *p = f->params;
    if (cluster_host_own_program(h)) {
        *lockstep = h->lockstep[0] ? h->lockstep : p->lockstep_path;
        *wrapper = h->wrapper[0] ? h->wrapper : NULL;
    } else {
        *lockstep = p->lockstep_path;
        *wrapper = mpi ? NULL : p->runner_wrapper;
    }
}

/* How its runner is launched: as the model was configured when the
 * placement is one local host; under mpirun otherwise, on the placement's
 * hosts when any is another machine (mpirun's --host a:1,b:1). Each host
 * runs its own program (host_program): when the placement's hosts run
 * different ones, the mpirun job has an app context per host (MPMD,
 * supervisor_runner_argv says why). The strings are borrowed from the
 * fleet's hosts and parameters, which outlive the instance. */
static void choose_launch(const struct fleet_instance *in, struct supervisor_launch *l) {
    const struct fleet *f = in->fleet;
    const struct gateway_params *p = f->params;
    const struct gateway_model *m = &in->served->model;
    const struct cluster_placement *placement = &in->placement;
    const struct cluster_host *leader = &f->hosts[placement->host[0]];
    int local = placement_is_local(f, placement);
    *l = (struct supervisor_launch){.mpirun_path = p->mpirun_path,
                                    .model_path = m->path,
                                    .tokenizer_path = m->tokenizer_path,
                                    .tp = placement->tp,
                                    .pp = placement->pp,
                                    .threads = m->threads,
                                    .n_layers = in->served->file->config.n_layers,
                                    .mpi = m->launcher == GATEWAY_LAUNCHER_MPI,
                                    .hostfile = m->hosts,
                                    .runner_args = m->runner_args,
                                    .allow_faults = p->enable_faults,
                                    .cluster_key = p->cluster_key,
                                    .cluster_key_file = p->cluster_key_file,
                                    .local = local};
    memcpy(l->layers, placement->layers, sizeof(l->layers));
    if (!leader->local) snprintf(l->leader, sizeof(l->leader), "%s", leader->name);
    int alone = local && placement->n_hosts == 1; /* launched as the model was configured */
    if (!alone) {
        l->mpi = 1;
        l->hostfile = NULL;
    }
    host_program(f, leader, l->mpi, &l->lockstep_path, &l->wrapper);
    if (alone) return;
    int same = 1; /* every host runs the leader's program */
    for (int k = 0; k < placement->n_hosts && k < SUPERVISOR_PARTS_MAX; k++) {
        struct supervisor_part *part = &l->parts[k];
        host_program(f, &f->hosts[placement->host[k]], 1, &part->lockstep, &part->wrapper);
        part->host = local ? NULL : f->hosts[placement->host[k]].name;
        part->ranks = placement->ranks[k];
        same = same && !strcmp(part->lockstep, l->lockstep_path) &&
               !strcmp(part->wrapper ? part->wrapper : "", l->wrapper ? l->wrapper : "");
    }
    if (!same) {
        l->n_parts = placement->n_hosts;
        return;
    }
    if (local) return; /* every rank here: mpirun needs no host list */
    size_t used = 0;
    for (int k = 0; k < placement->n_hosts && used < sizeof(l->host_list); k++)
        used +=
            (size_t)snprintf(l->host_list + used, sizeof(l->host_list) - used, "%s%s:%d",
                             k ? "," : "", f->hosts[placement->host[k]].name, placement->ranks[k]);
}

/* ---------- the supervisor's events ---------- */

static void on_token(struct supervisor_job *job, const struct runner_token *token,
                     struct supervisor *from) {
    struct fleet_instance *in = from->events.context;
    struct gateway_latency latency;
    atomic_fetch_add(&in->stats.generated, 1);
    gateway_request_on_token(gateway_choice_of(job), token, from, &latency);
    if (latency.ttft >= 0) {
        atomic_fetch_add(&in->stats.ttft_us, (unsigned long long)(latency.ttft * 1e6));
        atomic_fetch_add(&in->stats.ttft_count, 1);
    }
    if (latency.itl >= 0) {
        atomic_fetch_add(&in->stats.itl_us, (unsigned long long)(latency.itl * 1e6));
        atomic_fetch_add(&in->stats.itl_count, 1);
    }
    gateway_observe_latency(in->fleet->metrics, in->name, in->id, latency.ttft, latency.itl);
}

static void on_finished(struct supervisor_job *job, const struct runner_finished *finished,
                        struct supervisor *from) {
    gateway_request_on_finished(gateway_choice_of(job), finished, from);
}

static void on_ready(void *context, int pid) {
    struct fleet_instance *in = context;
    fleet_note(in->fleet, "ready", in->id, "%s ready on %s (runner pid %d)", in->id, in->hosts_text,
               pid);
}

static void on_restarting(void *context, int stuck, const char *why) {
    struct fleet_instance *in = context;
    fleet_note(in->fleet, stuck ? "stuck" : "restart", in->id, "%s: %s", in->id, why);
    gateway_observe_restart(in->fleet->metrics, in->name, in->id);
}

static void on_queued(void *context, double seconds) {
    struct fleet_instance *in = context;
    gateway_observe_queued(in->fleet->metrics, in->name, in->id, seconds);
}

static void on_heartbeat(void *context, const struct runner_heartbeat *heartbeat) {
    struct fleet_instance *in = context;
    gateway_observe_heartbeat(in->fleet->metrics, in->name, in->id, heartbeat);
}

/* Keeps the report for GET /debug/stuck (the newest 16). */
static void on_stuck(void *context, double seconds, char *report) {
    struct fleet_instance *in = context;
    struct fleet *f = in->fleet;
    gateway_observe_stuck(f->metrics, in->name, in->id, seconds);
    if (!report) return;
    pthread_mutex_lock(&f->reports_lock);
    int slot = f->n_stuck_reports % 16;
    free(f->stuck_reports[slot]);
    f->stuck_reports[slot] = report;
    f->n_stuck_reports++;
    pthread_mutex_unlock(&f->reports_lock);
}

static void on_recovered(void *context, double seconds) {
    struct fleet_instance *in = context;
    gateway_observe_recovery(in->fleet->metrics, in->name, in->id, seconds);
}

/* The name of a host of the placement the cluster has marked lost (copied
 * into host), or 0 if none is (takes the cluster lock). */
static int on_placement_lost(void *context, char *host, size_t size) {
    const struct fleet_instance *in = context;
    struct fleet *f = in->fleet;
    int lost = 0;
    pthread_mutex_lock(&f->cluster_lock);
    for (int k = 0; k < in->placement.n_hosts && !lost; k++) {
        const struct cluster_host *h = &f->hosts[in->placement.host[k]];
        if (h->lost) snprintf(host, size, "%s", h->name);
        lost = h->lost;
    }
    pthread_mutex_unlock(&f->cluster_lock);
    return lost;
}

char *fleet_stuck_json(struct fleet *f) {
    size_t size = 64;
    pthread_mutex_lock(&f->reports_lock);
    int n = f->n_stuck_reports < 16 ? f->n_stuck_reports : 16;
    for (int i = 0; i < n; i++) size += strlen(f->stuck_reports[i]) + 1;
    char *out = malloc(size);
    if (out) {
        size_t used = (size_t)sprintf(out, "{\"reports\":[");
        for (int k = 0; k < n; k++) { /* oldest first */
            int slot = (f->n_stuck_reports - n + k) % 16;
            used += (size_t)sprintf(out + used, "%s%s", k ? "," : "", f->stuck_reports[slot]);
        }
        sprintf(out + used, "]}");
    }
    pthread_mutex_unlock(&f->reports_lock);
    return out;
}

/* ---------- life ---------- */

int fleet_instance_init(struct fleet_instance *in, struct fleet *fleet,
                        const struct gateway_served *served, const char *id,
                        const struct cluster_placement *placement, int number, char *err,
                        size_t errlen) {
    memset(in, 0, sizeof(*in));
    atomic_init(&in->references, 1);
    in->fleet = fleet;
    in->served = served;
    in->placement = *placement;
    in->tp = placement->tp;
    snprintf(in->name, sizeof(in->name), "%s", served->name);
    snprintf(in->id, sizeof(in->id), "%s", id);
    cluster_placement_format(fleet->hosts, placement, in->hosts_text, sizeof(in->hosts_text));
    struct supervisor_config config = {.number = number,
                                       .alone = fleet->n_hosts <= 1,
                                       .watchdog_seconds = fleet->params->watchdog_seconds,
                                       .stopping = fleet->stopping,
                                       .next_id = fleet->next_id};
    snprintf(config.id, sizeof(config.id), "%s", in->id);
    snprintf(config.name, sizeof(config.name), "%s", in->name);
    snprintf(config.runtime_dir, sizeof(config.runtime_dir), "%s", fleet->runtime_dir);
    choose_launch(in, &config.launch);
    struct supervisor_events events = {.context = in,
                                       .token = on_token,
                                       .finished = on_finished,
                                       .ready = on_ready,
                                       .restarting = on_restarting,
                                       .queued = on_queued,
                                       .heartbeat = on_heartbeat,
                                       .stuck = on_stuck,
                                       .recovered = on_recovered,
                                       .placement_lost = on_placement_lost};
    gateway_request_events(&events);
    return supervisor_init(&in->supervisor, &config, &events, err, errlen);
}

void fleet_instance_free(struct fleet_instance *in) {
    supervisor_free(&in->supervisor);
}

void fleet_instance_hold(struct fleet_instance *in) {
    atomic_fetch_add(&in->references, 1);
}

void fleet_instance_release(struct fleet_instance *in) {
    if (!in || atomic_fetch_sub(&in->references, 1) != 1) return;
    fleet_instance_free(in);
    free(in);
}

void fleet_instance_submit(struct fleet_instance *in, struct gateway_request *request) {
    gateway_request_submit(request, &in->supervisor);
}

/* Drops r's choices (or only `only`) from every supervisor that holds them.
 * Their holders are looked up under the cluster lock, which also keeps an
 * instance the cluster retires from going away meanwhile: a holder that is
 * no longer the cluster's has an empty table. */
void fleet_instance_cancel(void *gateway, struct gateway_request *r, struct gateway_choice *only) {
    struct fleet *f = gateway;
    struct supervisor *holders[OPENAI_REQUEST_CHOICES_MAX];
    int n = 0;
    pthread_mutex_lock(&f->cluster_lock);
    /* its choices may sit in several tables while a move hands them over;
     * a table they reach after this reads the request as over (adopt) */
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->n_choices; i++) {
        struct supervisor *h = r->choices[i].job.holder;
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= holders[k] == h;
        if (h && !seen && (!only || only == &r->choices[i]) && n < OPENAI_REQUEST_CHOICES_MAX)
            holders[n++] = h;
    }
    pthread_mutex_unlock(&r->lock);
    for (int k = 0; k < n; k++) {
        struct fleet_instance *in = holders[k]->events.context;
        if (fleet_has(f, in)) supervisor_cancel(holders[k], r, only ? &only->job : NULL);
    }
    pthread_mutex_unlock(&f->cluster_lock);
}

/* supervisor_each's callback: fn and its argument ride in a struct. */
struct each_call {
    void (*fn)(struct gateway_request *, uint64_t);
    uint64_t arg;
};

static void each_job(struct supervisor_job *job, void *call) {
    const struct each_call *each = call;
    each->fn(gateway_choice_of(job)->request, each->arg);
}

void fleet_instance_each(struct fleet_instance *in, void (*fn)(struct gateway_request *, uint64_t),
                         uint64_t arg) {
    struct each_call call = {fn, arg};
    supervisor_each(&in->supervisor, each_job, &call);
}
