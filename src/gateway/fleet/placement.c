/* placement.c -- where the gateway puts an instance: what the hosts hold
 * already (fleet_usage), what a model needs at a shape or, when the
 * policy chooses the shape, at every shape it may choose (with the links
 * measured between the hosts), and the policy's answer (cluster_place,
 * cluster_choose_shape) for the hosts named or any. cluster.c starts and
 * moves instances where this says. */
#include "gateway/fleet/fleet.h"

#include <stdio.h>
#include <string.h>

/* What the hosts hold already: every live instance's ranks and memory,
 * and a move's new placement too (cluster lock held). */
void fleet_usage(struct fleet *f, struct cluster_usage *usage) {
    memset(usage, 0, sizeof(*usage) * (size_t)f->n_hosts);
    for (int i = 0; i < f->n_instances; i++) {
        struct fleet_instance *in = f->instances[i];
        if (!in) continue;
        for (int pass = 0; pass < 2; pass++) {
            const struct fleet_instance *at = pass ? in->move.successor : in;
            if (!at || (pass && in->move.state != FLEET_MOVE_STARTING)) continue;
            for (int k = 0; k < at->placement.n_hosts; k++) {
                struct cluster_usage *u = &usage[at->placement.host[k]];
                u->slots_used += at->placement.ranks[k];
                u->memory_used +=
                    cluster_placement_host_bytes(&at->placement, k, at->bytes_per_rank);
            }
        }
        double load = (double)supervisor_outstanding(&in->supervisor);
        for (int k = 0; k < in->placement.n_hosts; k++) usage[in->placement.host[k]].load += load;
    }
}

/* The request's memory per rank for served at shape: one figure for a
 * model in one stage, what each layer and each end costs for a pipeline;
 * 0, or 400 with why. */
static int request_need(const struct gateway_served *s, const struct cluster_shape *shape,
                        struct cluster_request *request, char *why, size_t whylen) {
    struct cluster_need need;
    request->tp = shape->tp;
    request->pp = shape->pp;
    if (cluster_degree_check(s->file, shape->tp, why, whylen)) return 400;
    if (cluster_model_need(s->file, shape->tp, s->context_length, &need, why, whylen)) return 400;
    request->bytes_per_rank = need.total_bytes;
    if (shape->pp <= 1) return 0;
    request->n_layers = s->file->config.n_layers;
    memcpy(request->layers, shape->layers, sizeof(request->layers));
    if (cluster_model_stage_need(s->file, shape->tp, s->context_length, TENSOR_F16, &request->stage,
                                 why, whylen))
        return 400;
    return 0;
}

/* The request for the policy to choose served's shape: its need at every
 * degree it splits into, each stage's, what a token reads and sums; 0,
 * or 400 with why. */
static int shape_request_need(const struct fleet *f, const struct gateway_served *s,
                              struct cluster_shape_request *r, char *why, size_t whylen) {
    struct cluster_need need;
    char reason[256];
    for (int tp = 1; tp <= CLUSTER_STAGES_MAX; tp++)
        if (cluster_degree_check(s->file, tp, reason, sizeof(reason)) == 0 &&
            cluster_model_need(s->file, tp, s->context_length, &need, reason, sizeof(reason)) == 0)
            r->bytes_per_rank[tp] = need.total_bytes;
    if (cluster_model_need(s->file, 1, s->context_length, &need, why, whylen) ||
        cluster_model_stage_need(s->file, 1, s->context_length, TENSOR_F16, &r->stage, why, whylen))
        return 400;
    r->n_layers = s->file->config.n_layers;
    r->weight_bytes = need.weight_bytes;
    r->hidden_bytes = (int64_t)s->file->config.dim * (int64_t)sizeof(float);
    r->links = f->links_measured ? f->links : NULL;
    return 0;
}

int fleet_choose_placement(struct fleet *f, const struct gateway_served *s,
                           const struct cluster_shape *shape, const char *const *hosts, int n_hosts,
                           const struct cluster_placement *avoid, const char *numerics,
                           struct cluster_placement *out, int64_t *bytes_per_rank, char *why,
                           size_t whylen) {
    struct cluster_shape_request chooser = {0};
    struct cluster_request request = {0};
    snprintf(request.numerics, sizeof(request.numerics), "%s", numerics);
    struct cluster_usage usage[CLUSTER_HOSTS_MAX];
    int status = shape->chosen ? shape_request_need(f, s, &chooser, why, whylen)
                               : request_need(s, shape, &request, why, whylen);
    if (status) return status;
    for (int i = 0; i < n_hosts; i++) {
        int h = cluster_host_find(f->hosts, f->n_hosts, hosts[i]);
        if (h < 0) {
            snprintf(why, whylen, "no host is called '%s' in the cluster", hosts[i]);
            return 400;
        }
        if (request.n_pinned == CLUSTER_HOSTS_MAX) break;
        request.pinned[request.n_pinned++] = h;
    }
    for (int k = 0; avoid && n_hosts == 0 && k < avoid->n_hosts; k++)
        request.exclude[avoid->host[k]] = 1;
    fleet_usage(f, usage);
    if (shape->chosen) {
        chooser.place = request;
        if (cluster_choose_shape(f->hosts, usage, f->n_hosts, &chooser, out, why, whylen))
            return 409;
        request.bytes_per_rank = chooser.bytes_per_rank[out->tp];
    } else if (cluster_place(f->hosts, usage, f->n_hosts, &request, out, why, whylen)) {
        return 409;
    }
    if (out->pp < 1) out->pp = 1;
    *bytes_per_rank = request.bytes_per_rank;
    return 0;
}
