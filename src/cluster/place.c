/* place.c -- the placement policy: which hosts an instance's ranks go to.
 *
 * A pure function of the hosts, what is placed on them and the request, so
 * that it is tested with tables and the gateway can ask it again whenever a
 * host is lost or drained. Fewest hosts first: ranks on one host are threads
 * of one process (the local backend), and every host more adds MPI traffic
 * to every step. Among placements on as many hosts, the least loaded hosts
 * win, in an order fixed by load, then slots used, then the hostfile, so
 * the same state always gives the same answer. A refusal says which host
 * stopped it and by how much.
 *
 * The ranks of one instance exchange partial sums every step, and a request
 * moved between placements resumes from its tokens: both give the tokens
 * they would alone only if every rank computes the same float bits, so an
 * instance's hosts share one numerics contract (CLUSTER_NUMERICS), whatever
 * their architecture. */
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

int64_t cluster_free_memory(const struct cluster_host *host, const struct cluster_usage *usage) {
    int64_t memory = host_memory(host), used = usage ? usage->memory_used : 0;
    if (memory < 0) return -1;
    return memory > used ? memory - used : 0;
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

/* 1 if host may hold ranks computing with contract numerics ("": any).
 * An unprobed host's contract is not known yet and counts as matching, as
 * its unknown memory counts as fitting: the gateway places its first
 * instances before the other machines' probes answer. */
int cluster_numerics_match(const struct cluster_host *host, const char *numerics) {
    return !numerics[0] || !host->numerics[0] || !strcmp(host->numerics, numerics);
}

/* 1 if host i may take ranks of r: not lost, drained or excluded. */
int cluster_host_open(const struct cluster_host *host, const struct cluster_request *r, int i) {
    return !host->lost && !host->drained && !r->exclude[i];
}

/* Why the hosts of contract numerics ("": all) cannot take tp ranks of
 * bytes_per_rank, host by host, appended at *used. */
static void explain_shortfall(const struct cluster_host *hosts, const struct candidate *all,
                              int n_hosts, const struct cluster_request *r, const char *numerics,
                              char *why, size_t whylen, size_t *at) {
    int free_slots = 0, open_hosts = 0;
    size_t used = *at;
    for (int i = 0; i < n_hosts; i++)
        if (cluster_host_open(&hosts[i], r, i) && cluster_numerics_match(&hosts[i], numerics) &&
            all[i].free_slots > 0) {
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
        if (!cluster_numerics_match(&hosts[i], numerics)) continue;
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
    *at = used;
}

/* Gives out tp ranks over the chosen hosts one at a time in turn, so they
 * are as even as capacities allow and earlier (less loaded) hosts take the
 * extra ones. */
static void spread_ranks(const struct candidate *chosen, int k, int tp,
                         struct cluster_placement *out) {
    memset(out, 0, sizeof(*out));
    out->tp = tp;
    out->pp = 1;
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

/* The policy's own choice (nothing pinned) among the hosts of contract
 * numerics ("": any); -1 if they cannot take the ranks (why: explain_shortfall). */
static int place_free(const struct cluster_host *hosts, const struct candidate *all, int n_hosts,
                      const struct cluster_request *r, const char *numerics,
                      struct cluster_placement *out) {
    struct candidate c[CLUSTER_HOSTS_MAX], chosen[CLUSTER_HOSTS_MAX];
    int n = 0, total = 0;
    for (int i = 0; i < n_hosts; i++)
        if (cluster_host_open(&hosts[i], r, i) && cluster_numerics_match(&hosts[i], numerics) &&
            all[i].capacity > 0) {
            c[n++] = all[i];
            total += all[i].capacity;
        }
    if (total < r->tp) return -1;
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
    const char *numerics = r->numerics; /* the contract every pinned host must share */
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
        else if (!cluster_numerics_match(&hosts[i], numerics))
            snprintf(why, whylen,
                     "host %s computes with numerics %s, the instance's other ranks with %s: "
                     "ranks of one instance must compute the same bits",
                     name, hosts[i].numerics, numerics);
        else if (c->free_slots < per)
            snprintf(why, whylen, "host %s: %d slots free, needs %d", name, c->free_slots, per);
        else if (c->capacity < per)
            snprintf(why, whylen, "host %s: %s free, needs %s per rank for %d ranks", name,
                     free_memory, per_rank, per);
        else {
            chosen[j] = *c;
            chosen[j].capacity = per;
            if (!numerics[0]) numerics = hosts[i].numerics; /* "" while unprobed */
            continue;
        }
        return -1;
    }
    spread_ranks(chosen, r->n_pinned, r->tp, out);
    return 0;
}

/* The contracts of the probed hosts r may use, each once in hostfile
 * order (only r->numerics when it names one); how many. */
static int contracts_of(const struct cluster_host *hosts, int n_hosts,
                        const struct cluster_request *r, const char **out) {
    int n = 0;
    if (r->numerics[0]) {
        out[0] = r->numerics;
        return 1;
    }
    for (int i = 0; i < n_hosts; i++) {
        if (!cluster_host_open(&hosts[i], r, i) || !hosts[i].numerics[0]) continue;
        int k = 0;
        while (k < n && strcmp(out[k], hosts[i].numerics) != 0) k++;
        if (k == n) out[n++] = hosts[i].numerics;
    }
    return n;
}

/* 1 if some open host is of a contract other than numerics: the contract
 * then narrowed the choice, and a refusal says so. */
static int contract_narrowed(const struct cluster_host *hosts, int n_hosts,
                             const struct cluster_request *r, const char *numerics) {
    for (int i = 0; i < n_hosts; i++)
        if (cluster_host_open(&hosts[i], r, i) && !cluster_numerics_match(&hosts[i], numerics))
            return 1;
    return 0;
}

/* Why no contract's hosts take the ranks: each contract, with its hosts'
 * shortfall. */
static void explain_contracts(const struct cluster_host *hosts, const struct candidate *all,
                              int n_hosts, const struct cluster_request *r, const char **contract,
                              int n_contracts, char *why, size_t whylen) {
    size_t used = 0;
    int narrowed = n_contracts == 1 && contract_narrowed(hosts, n_hosts, r, contract[0]);
    if (n_contracts == 1 && !narrowed) n_contracts = 0; /* one contract: every host, as ever */
    if (n_contracts > 1)
        append(why, whylen, &used,
               "%d ranks fit on the hosts of no one numerics contract (ranks of one instance "
               "must compute the same bits): ",
               r->tp);
    else if (narrowed)
        append(why, whylen, &used,
               "on the hosts of numerics %s (ranks of one instance must compute the same bits): ",
               contract[0]);
    for (int k = 0; k < n_contracts; k++) {
        if (n_contracts > 1) append(why, whylen, &used, "%s%s: ", k ? " / " : "", contract[k]);
        explain_shortfall(hosts, all, n_hosts, r, contract[k], why, whylen, &used);
    }
    if (n_contracts == 0) explain_shortfall(hosts, all, n_hosts, r, "", why, whylen, &used);
}

/* 1 if placement a goes before b: fewer hosts, then a less loaded leader. */
static int better_placement(const struct cluster_placement *a, const struct cluster_placement *b,
                            const struct candidate *all) {
    if (a->n_hosts != b->n_hosts) return a->n_hosts < b->n_hosts;
    return less_loaded(&all[a->host[0]], &all[b->host[0]]);
}

/* The policy's choice within each contract's hosts, the best of them
 * (better_placement; the contract seen first on a tie). */
static int place_contracts(const struct cluster_host *hosts, const struct candidate *all,
                           int n_hosts, const struct cluster_request *r,
                           struct cluster_placement *out, char *why, size_t whylen) {
    const char *contract[CLUSTER_HOSTS_MAX];
    int n_contracts = contracts_of(hosts, n_hosts, r, contract), found = 0;
    struct cluster_placement tried;
    if (n_contracts == 0) contract[n_contracts++] = ""; /* no host probed yet: any */
    for (int k = 0; k < n_contracts; k++) {
        if (place_free(hosts, all, n_hosts, r, contract[k], &tried)) continue;
        if (!found || better_placement(&tried, out, all)) *out = tried;
        found = 1;
    }
    if (found) return 0;
    memset(out, 0, sizeof(*out));
    explain_contracts(hosts, all, n_hosts, r, contract, n_contracts, why, whylen);
    return -1;
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
    if (request->pp > 1)
        return cluster_place_stages(hosts, usage, n_hosts, request, out, why, whylen);
    if (request->n_pinned > 0) return place_pinned(hosts, all, n_hosts, request, out, why, whylen);
    return place_contracts(hosts, all, n_hosts, request, out, why, whylen);
}

const char *cluster_placement_numerics(const struct cluster_host *hosts,
                                       const struct cluster_placement *p) {
    for (int k = 0; k < p->n_hosts; k++)
        if (hosts[p->host[k]].numerics[0]) return hosts[p->host[k]].numerics;
    return "";
}

int cluster_numerics_check(const struct cluster_host *hosts, const char *numerics, const int *to,
                           int n_to, char *why, size_t whylen) {
    for (int k = 0; k < n_to; k++)
        if (!cluster_numerics_match(&hosts[to[k]], numerics)) {
            snprintf(why, whylen, "host %s computes with numerics %s, not %s", hosts[to[k]].name,
                     hosts[to[k]].numerics, numerics);
            return -1;
        }
    return 0;
}
