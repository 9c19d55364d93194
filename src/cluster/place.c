/* place.c -- the placement policy: which hosts an instance's ranks go to.
 *
 * A pure function of the hosts, what is placed on them and the request, so
 * that it is tested with tables and the gateway can ask it again whenever a
 * host is lost or drained. Fewest hosts first: ranks on one host are threads
 * of one process (the local backend), and every host more adds MPI traffic
 * to every step. Among placements on as many hosts, the least loaded hosts
 * win, in an order fixed by load, then slots used, then the hostfile, so
 * the same state always gives the same answer. A refusal says which host
 * stopped it and by how much. */
#include "cluster_internal.h"
#include "protocol/protocol.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

_Static_assert(CLUSTER_RANKS_MAX == RUNNER_RANKS_MAX, "a placement's ranks fit a runner");

/* What one host can take of this request. */
struct candidate {
    int64_t free_memory; /* bytes; -1: unknown (unprobed, no memory= given) */
    double load;         /* usage's load, for ordering */
    int index;           /* into hosts */
    int free_slots;      /* slots - slots_used, at least 0 */
    int capacity;        /* ranks it can take: free slots, capped by free memory */
    int slots_used;      /* usage's, for ordering */
};

/* Appends to why at *used (bounded by whylen). */
__attribute__((format(printf, 4, 5))) static void append(char *why, size_t whylen, size_t *used,
                                                         const char *fmt, ...) {
    if (*used >= whylen) return;
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(why + *used, whylen - *used, fmt, args);
    va_end(args);
    if (n > 0) *used += (size_t)n;
}

/* The memory placement may use on host: its limit, else what a probe saw;
 * -1 if neither is known. */
static int64_t host_memory(const struct cluster_host *host) {
    if (host->memory_limit > 0) return host->memory_limit;
    return host->probed ? host->memory_total : -1;
}

static struct candidate candidate_of(const struct cluster_host *hosts,
                                     const struct cluster_usage *usage, int i,
                                     int64_t bytes_per_rank) {
    struct cluster_usage none = {0, 0, 0.0};
    const struct cluster_usage *u = usage ? &usage[i] : &none;
    struct candidate c = {.free_memory = host_memory(&hosts[i]),
                          .load = u->load,
                          .index = i,
                          .free_slots = hosts[i].slots - u->slots_used,
                          .slots_used = u->slots_used};
    if (c.free_slots < 0) c.free_slots = 0;
    if (c.free_memory >= 0)
        c.free_memory = c.free_memory > u->memory_used ? c.free_memory - u->memory_used : 0;
    c.capacity = c.free_slots;
    if (c.free_memory >= 0 && bytes_per_rank > 0 && c.free_memory / bytes_per_rank < c.capacity)
        c.capacity = (int)(c.free_memory / bytes_per_rank);
    return c;
}

/* 1 if a goes before b: less load, then fewer slots used, then file order. */
static int less_loaded(const struct candidate *a, const struct candidate *b) {
    if (a->load != b->load) return a->load < b->load;
    if (a->slots_used != b->slots_used) return a->slots_used < b->slots_used;
    return a->index < b->index;
}

static void sort_by_load(struct candidate *c, int n) {
    for (int i = 1; i < n; i++) /* insertion sort: at most 64 hosts */
        for (int j = i; j > 0 && less_loaded(&c[j], &c[j - 1]); j--) {
            struct candidate t = c[j];
            c[j] = c[j - 1];
            c[j - 1] = t;
        }
}

/* The sum of the count largest capacities among c[from..n). */
static int best_sum(const struct candidate *c, int n, int from, int count) {
    int taken[CLUSTER_HOSTS_MAX] = {0}, sum = 0;
    for (int k = 0; k < count; k++) {
        int best = -1;
        for (int i = from; i < n; i++)
            if (!taken[i] && (best < 0 || c[i].capacity > c[best].capacity)) best = i;
        if (best < 0) break;
        taken[best] = 1;
        sum += c[best].capacity;
    }
    return sum;
}

/* 1 if host i may take ranks of r: not lost, drained or excluded. */
static int open_host(const struct cluster_host *host, const struct cluster_request *r, int i) {
    return !host->lost && !host->drained && !r->exclude[i];
}

/* Why the hosts cannot take tp ranks of bytes_per_rank, host by host. */
static void explain_shortfall(const struct cluster_host *hosts, const struct candidate *all,
                              int n_hosts, const struct cluster_request *r, char *why,
                              size_t whylen) {
    int free_slots = 0, open_hosts = 0;
    size_t used = 0;
    for (int i = 0; i < n_hosts; i++)
        if (open_host(&hosts[i], r, i) && all[i].free_slots > 0) {
            free_slots += all[i].free_slots;
            open_hosts++;
        }
    char per_rank[32], free_memory[32];
    cluster_size_format(r->bytes_per_rank, per_rank, sizeof(per_rank));
    if (free_slots < r->tp)
        append(why, whylen, &used, "%d ranks need %d slots; %d are free on %d hosts", r->tp, r->tp,
               free_slots, open_hosts);
    else
        append(why, whylen, &used, "%d ranks of %s do not fit", r->tp, per_rank);
    for (int i = 0; i < n_hosts; i++) {
        const struct candidate *c = &all[i];
        cluster_size_format(c->free_memory, free_memory, sizeof(free_memory));
        if (hosts[i].lost)
            append(why, whylen, &used, "; host %s is lost", hosts[i].name);
        else if (hosts[i].drained)
            append(why, whylen, &used, "; host %s is drained", hosts[i].name);
        else if (r->exclude[i])
            append(why, whylen, &used, "; host %s is excluded", hosts[i].name);
        else if (c->free_slots > 0 && c->capacity == 0)
            append(why, whylen, &used, "; host %s: %s free, needs %s per rank", hosts[i].name,
                   free_memory, per_rank);
        else if (c->capacity < c->free_slots)
            append(why, whylen, &used, "; host %s: %s free holds %d of %s", hosts[i].name,
                   free_memory, c->capacity, per_rank);
    }
}

/* Gives out tp ranks over the chosen hosts one at a time in turn, so they
 * are as even as capacities allow and earlier (less loaded) hosts take the
 * extra ones. */
static void spread_ranks(const struct candidate *chosen, int k, int tp,
                         struct cluster_placement *out) {
    out->tp = tp;
    out->n_hosts = k;
    for (int j = 0; j < k; j++) {
        out->host[j] = chosen[j].index;
        out->ranks[j] = 0;
    }
    for (int given = 0; given < tp;)
        for (int j = 0; j < k && given < tp; j++)
            if (out->ranks[j] < chosen[j].capacity) {
                out->ranks[j]++;
                given++;
            }
}

/* The policy's own choice (nothing pinned). */
static int place_free(const struct cluster_host *hosts, const struct candidate *all, int n_hosts,
                      const struct cluster_request *r, struct cluster_placement *out, char *why,
                      size_t whylen) {
    struct candidate c[CLUSTER_HOSTS_MAX], chosen[CLUSTER_HOSTS_MAX];
    int n = 0, total = 0;
    for (int i = 0; i < n_hosts; i++)
        if (open_host(&hosts[i], r, i) && all[i].capacity > 0) {
            c[n++] = all[i];
            total += all[i].capacity;
        }
    if (total < r->tp) {
        explain_shortfall(hosts, all, n_hosts, r, why, whylen);
        return -1;
    }
    sort_by_load(c, n);
    int k = 1;
    while (best_sum(c, n, 0, k) < r->tp) k++;
    /* the first k-subset in load order whose capacities reach tp */
    int need = r->tp, from = 0;
    for (int j = 0; j < k; j++) {
        int pick = from;
        while (c[pick].capacity + best_sum(c, n, pick + 1, k - j - 1) < need) pick++;
        chosen[j] = c[pick];
        need -= c[pick].capacity;
        from = pick + 1;
    }
    spread_ranks(chosen, k, r->tp, out);
    return 0;
}

/* Every pinned host takes tp / n_pinned ranks, or the request is refused
 * naming the first that cannot. */
static int place_pinned(const struct cluster_host *hosts, const struct candidate *all, int n_hosts,
                        const struct cluster_request *r, struct cluster_placement *out, char *why,
                        size_t whylen) {
    struct candidate chosen[CLUSTER_HOSTS_MAX];
    int per = r->tp / r->n_pinned, seen[CLUSTER_HOSTS_MAX] = {0};
    char per_rank[32], free_memory[32];
    cluster_size_format(r->bytes_per_rank, per_rank, sizeof(per_rank));
    if (r->tp % r->n_pinned) {
        snprintf(why, whylen, "%d ranks do not divide evenly over %d pinned hosts", r->tp,
                 r->n_pinned);
        return -1;
    }
    for (int j = 0; j < r->n_pinned; j++) {
        int i = r->pinned[j];
        if (i < 0 || i >= n_hosts) {
            snprintf(why, whylen, "pinned host index %d is not one of the %d hosts", i, n_hosts);
            return -1;
        }
        const char *name = hosts[i].name;
        const struct candidate *c = &all[i];
        cluster_size_format(c->free_memory, free_memory, sizeof(free_memory));
        if (seen[i]++)
            snprintf(why, whylen, "host %s is pinned twice", name);
        else if (hosts[i].lost)
            snprintf(why, whylen, "host %s is lost", name);
        else if (hosts[i].drained)
            snprintf(why, whylen, "host %s is drained (POST /admin/hosts/%s/undrain)", name, name);
        else if (r->exclude[i])
            snprintf(why, whylen, "host %s is excluded", name);
        else if (c->free_slots < per)
            snprintf(why, whylen, "host %s: %d slots free, needs %d", name, c->free_slots, per);
        else if (c->capacity < per)
            snprintf(why, whylen, "host %s: %s free, needs %s per rank for %d ranks", name,
                     free_memory, per_rank, per);
        else {
            chosen[j] = *c;
            chosen[j].capacity = per;
            continue;
        }
        return -1;
    }
    spread_ranks(chosen, r->n_pinned, r->tp, out);
    return 0;
}

int cluster_place(const struct cluster_host *hosts, const struct cluster_usage *usage, int n_hosts,
                  const struct cluster_request *request, struct cluster_placement *out, char *why,
                  size_t whylen) {
    struct candidate all[CLUSTER_HOSTS_MAX];
    memset(out, 0, sizeof(*out));
    if (n_hosts < 1 || n_hosts > CLUSTER_HOSTS_MAX) {
        snprintf(why, whylen, "%d hosts is out of range (1 to %d)", n_hosts, CLUSTER_HOSTS_MAX);
        return -1;
    }
    if (request->tp < 1 || request->tp > CLUSTER_RANKS_MAX) {
        snprintf(why, whylen, "%d ranks is out of range (1 to %d)", request->tp, CLUSTER_RANKS_MAX);
        return -1;
    }
    if (request->bytes_per_rank < 0 || request->n_pinned < 0 || request->n_pinned > n_hosts) {
        snprintf(why, whylen, "bad request: %lld bytes per rank, %d pinned hosts of %d",
                 (long long)request->bytes_per_rank, request->n_pinned, n_hosts);
        return -1;
    }
    for (int i = 0; i < n_hosts; i++)
        all[i] = candidate_of(hosts, usage, i, request->bytes_per_rank);
    if (request->n_pinned > 0) return place_pinned(hosts, all, n_hosts, request, out, why, whylen);
    return place_free(hosts, all, n_hosts, request, out, why, whylen);
}
