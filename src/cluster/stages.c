/* stages.c -- where a pipeline's stages go and how many layers each runs.
 *
 * Pipeline parallelism exists for unequal machines and slow links: a 16 GB
 * and an 8 GB host hold a model between them, but not in halves. So the
 * stages go to as many hosts as there are stages (pinned ones in the order
 * given), each stage's tensor-parallel ranks together on one host, and
 * each stage gets layers in proportion to what its share of its host's
 * free memory holds. Like cluster_place, a pure function of the hosts,
 * what is placed on them and the request, tested with tables; a refusal
 * names each stage's host and the most layers it holds. */
#include "cluster_internal.h"

#include <stdio.h>
#include <string.h>

/* A host the stages may use. */
struct stage_host {
    int64_t free_memory; /* bytes; -1: unknown (counts as fitting) */
    double load;         /* for ordering */
    int index;           /* into hosts */
    int free_slots;      /* slots - slots_used */
    int stages;          /* stages it takes */
};

/* Bytes a stage's rank needs besides its layers. */
static int64_t stage_fixed(const struct cluster_request *r, int s) {
    int64_t bytes = r->stage.stage_bytes;
    if (s == 0) bytes += r->stage.first_bytes;
    if (s == r->pp - 1) bytes += r->stage.last_bytes;
    return bytes;
}

/* The most layers stage s holds when its ranks share `memory` bytes of
 * their host (-1: unknown, all of them). */
static int most_layers(const struct cluster_request *r, int s, int64_t memory) {
    if (memory < 0 || r->stage.layer_bytes <= 0) return r->n_layers;
    int64_t per_rank = memory / r->tp - stage_fixed(r, s);
    if (per_rank < r->stage.layer_bytes) return 0;
    int64_t n = per_rank / r->stage.layer_bytes;
    return n > r->n_layers ? r->n_layers : (int)n;
}

/* 1 if a goes before b: more free memory (unknown first), less load, file
 * order. */
static int roomier(const struct stage_host *a, const struct stage_host *b) {
    if (a->free_memory != b->free_memory) {
        if (a->free_memory < 0 || b->free_memory < 0) return a->free_memory < 0;
        return a->free_memory > b->free_memory;
    }
    if (a->load != b->load) return a->load < b->load;
    return a->index < b->index;
}

static struct stage_host stage_host_of(const struct cluster_host *hosts,
                                       const struct cluster_usage *usage, int i) {
    const struct cluster_usage *u = usage ? &usage[i] : NULL;
    struct stage_host h = {cluster_free_memory(&hosts[i], u), u ? u->load : 0.0, i,
                           hosts[i].slots - (u ? u->slots_used : 0), 0};
    if (h.free_slots < 0) h.free_slots = 0;
    return h;
}

/* The pinned hosts, in order, each checked; their count, or -1 (why). */
static int pinned_hosts(const struct cluster_host *hosts, const struct cluster_usage *usage,
                        int n_hosts, const struct cluster_request *r, struct stage_host *out,
                        char *why, size_t whylen) {
    const char *numerics = r->numerics;
    for (int j = 0; j < r->n_pinned; j++) {
        int i = r->pinned[j];
        if (i < 0 || i >= n_hosts) {
            snprintf(why, whylen, "pinned host index %d is not one of the %d hosts", i, n_hosts);
            return -1;
        }
        for (int k = 0; k < j; k++)
            if (r->pinned[k] == i) {
                snprintf(why, whylen, "host %s is pinned twice", hosts[i].name);
                return -1;
            }
        if (!cluster_host_open(&hosts[i], r, i)) {
            snprintf(why, whylen, "host %s is %s", hosts[i].name,
                     hosts[i].lost      ? "lost"
                     : hosts[i].drained ? "drained"
                                        : "excluded");
            return -1;
        }
        if (!cluster_numerics_match(&hosts[i], numerics)) {
            snprintf(why, whylen,
                     "host %s computes with numerics %s, the instance's other ranks with %s: "
                     "ranks of one instance must compute the same bits",
                     hosts[i].name, hosts[i].numerics, numerics);
            return -1;
        }
        if (!numerics[0]) numerics = hosts[i].numerics;
        out[j] = stage_host_of(hosts, usage, i);
    }
    return r->n_pinned;
}

/* The policy's hosts: open ones with a stage's slots free, of the contract
 * of the roomiest (or the request's), the roomiest first, at most pp. */
static int chosen_hosts(const struct cluster_host *hosts, const struct cluster_usage *usage,
                        int n_hosts, const struct cluster_request *r, struct stage_host *out) {
    struct stage_host all[CLUSTER_HOSTS_MAX];
    int n = 0;
    for (int i = 0; i < n_hosts; i++) {
        struct stage_host h = stage_host_of(hosts, usage, i);
        if (!cluster_host_open(&hosts[i], r, i) || h.free_slots < r->tp) continue;
        if (!cluster_numerics_match(&hosts[i], r->numerics)) continue;
        int k = n++;
        for (; k > 0 && roomier(&h, &all[k - 1]); k--) all[k] = all[k - 1];
        all[k] = h;
    }
    const char *numerics = "";
    int taken = 0;
    for (int k = 0; k < n && taken < r->pp; k++) {
        const struct cluster_host *host = &hosts[all[k].index];
        if (!cluster_numerics_match(host, numerics)) continue;
        if (!numerics[0]) numerics = host->numerics;
        out[taken++] = all[k];
    }
    return taken;
}

/* "stage 0 on a (3.0 GiB free) holds at most 5 layers, stage 1 on b ..." */
static void describe_limits(const struct cluster_host *hosts, const struct stage_host *on,
                            const int *most, int pp, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (int s = 0; s < pp && used < size; s++) {
        char memory[32] = "memory unknown";
        if (on[s].free_memory >= 0) {
            cluster_size_format(on[s].free_memory, memory, sizeof(memory));
            strncat(memory, " free", sizeof(memory) - strlen(memory) - 1);
        }
        int n = snprintf(out + used, size - used, "%sstage %d on %s (%s) holds at most %d",
                         s ? ", " : "", s, hosts[on[s].index].name, memory, most[s]);
        if (n > 0) used += (size_t)n;
    }
}

/* Layers in proportion to each stage's limit (equal where all are
 * unknown), each at least 1 and within its limit, n_layers in all; the
 * limits must hold n_layers between them. */
static void proportional_split(const struct cluster_request *r, const int *most, int *layers) {
    int64_t total = 0;
    int sum = 0;
    for (int s = 0; s < r->pp; s++) total += most[s];
    for (int s = 0; s < r->pp; s++) {
        layers[s] = (int)((int64_t)r->n_layers * most[s] / total);
        if (layers[s] < 1) layers[s] = 1;
        if (layers[s] > most[s]) layers[s] = most[s];
        sum += layers[s];
    }
    while (sum != r->n_layers) { /* the stage with the most room left takes, or gives */
        int best = -1;
        for (int s = 0; s < r->pp; s++) {
            int room = most[s] - layers[s];
            if (sum < r->n_layers ? room > 0 && (best < 0 || room > most[best] - layers[best])
                                  : layers[s] > 1 && (best < 0 || room < most[best] - layers[best]))
                best = s;
        }
        if (best < 0) break; /* (not when the limits hold n_layers: the caller checks) */
        layers[best] += sum < r->n_layers ? 1 : -1;
        sum += sum < r->n_layers ? 1 : -1;
    }
}

/* Checks a split asked for against the limits; -1 with why. */
static int check_split(const struct cluster_request *r, const int *most, const char *limits,
                       char *why, size_t whylen) {
    int sum = 0, fits = 1, held = 0, fitting[CLUSTER_STAGES_MAX];
    for (int s = 0; s < r->pp; s++) {
        sum += r->layers[s];
        held += most[s];
        fits = fits && r->layers[s] >= 1 && r->layers[s] <= most[s];
    }
    if (sum == r->n_layers && fits) return 0;
    if (sum != r->n_layers) {
        snprintf(why, whylen, "the layer split adds up to %d layers, the model has %d", sum,
                 r->n_layers);
        return -1;
    }
    if (held < r->n_layers) {
        snprintf(why, whylen, "the layer split does not fit: %s; no split fits %d layers", limits,
                 r->n_layers);
        return -1;
    }
    proportional_split(r, most, fitting);
    char split[96] = "";
    for (int s = 0; s < r->pp; s++)
        snprintf(split + strlen(split), sizeof(split) - strlen(split), "%s%d", s ? "," : "",
                 fitting[s]);
    snprintf(why, whylen, "the layer split does not fit: %s; a split that fits: %s", limits, split);
    return -1;
}

int64_t cluster_placement_host_bytes(const struct cluster_placement *p, int k,
                                     int64_t bytes_per_rank) {
    if (p->pp <= 1) return bytes_per_rank * p->ranks[k];
    int first = 0;
    for (int j = 0; j < k; j++) first += p->ranks[j];
    int64_t bytes = 0;
    for (int rank = first; rank < first + p->ranks[k]; rank++)
        bytes += p->stage_bytes[rank / p->tp];
    return bytes;
}

int cluster_place_stages(const struct cluster_host *hosts, const struct cluster_usage *usage,
                         int n_hosts, const struct cluster_request *r,
                         struct cluster_placement *out, char *why, size_t whylen) {
    struct stage_host chosen[CLUSTER_HOSTS_MAX] = {{0}}, on[CLUSTER_STAGES_MAX];
    int most[CLUSTER_STAGES_MAX];
    char limits[512];
    memset(out, 0, sizeof(*out));
    if (r->pp < 2 || r->pp > CLUSTER_STAGES_MAX || r->pp > r->n_layers || r->tp < 1 ||
        r->tp * r->pp > CLUSTER_RANKS_MAX) {
        snprintf(why, whylen,
                 "%d stages of %d ranks for %d layers is out of range (2 to %d "
                 "stages, a layer each, %d ranks in all)",
                 r->pp, r->tp, r->n_layers, CLUSTER_STAGES_MAX, CLUSTER_RANKS_MAX);
        return -1;
    }
    int k = r->n_pinned > 0 ? pinned_hosts(hosts, usage, n_hosts, r, chosen, why, whylen)
                            : chosen_hosts(hosts, usage, n_hosts, r, chosen);
    if (k < 0) return -1;
    if (k == 0) {
        snprintf(why, whylen, "no open host has %d free slots for a stage of %d ranks", r->tp,
                 r->tp);
        return -1;
    }
    if (k > r->pp) {
        snprintf(why, whylen, "%d pinned hosts for %d stages (a stage is on one host)", k, r->pp);
        return -1;
    }
    /* stage s on host s * k / pp: consecutive stages share a host */
    for (int s = 0; s < r->pp; s++) chosen[s * k / r->pp].stages++;
    for (int j = 0; j < k; j++)
        if (chosen[j].stages * r->tp > chosen[j].free_slots) {
            snprintf(why, whylen, "host %s: %d slots free, its %d stages of %d ranks need %d",
                     hosts[chosen[j].index].name, chosen[j].free_slots, chosen[j].stages, r->tp,
                     chosen[j].stages * r->tp);
            return -1;
        }
    int held = 0;
    for (int s = 0; s < r->pp; s++) {
        on[s] = chosen[s * k / r->pp];
        int64_t share = on[s].free_memory < 0 ? -1 : on[s].free_memory / on[s].stages;
        most[s] = most_layers(r, s, share);
        held += most[s];
    }
    describe_limits(hosts, on, most, r->pp, limits, sizeof(limits));
    int given = r->layers[0] > 0;
    if (given && check_split(r, most, limits, why, whylen)) return -1;
    if (!given && held < r->n_layers) {
        snprintf(why, whylen, "%d layers do not fit %d stages: %s", r->n_layers, r->pp, limits);
        return -1;
    }
    if (given)
        memcpy(out->layers, r->layers, sizeof(out->layers));
    else
        proportional_split(r, most, out->layers);
    out->tp = r->tp;
    out->pp = r->pp;
    out->n_hosts = k;
    for (int j = 0; j < k; j++) {
        out->host[j] = chosen[j].index;
        out->ranks[j] = chosen[j].stages * r->tp;
    }
    for (int s = 0; s < r->pp; s++)
        out->stage_bytes[s] = stage_fixed(r, s) + (int64_t)out->layers[s] * r->stage.layer_bytes;
    return 0;
}
