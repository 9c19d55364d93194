/* shape.c -- the policy's choice of an instance's shape: how many stages,
 * how many ranks each, and on which hosts, when the user named none.
 *
 * The rule, in order (cluster_choose_shape in cluster.h):
 *   1. One host if the model fits one: its ranks are threads of one
 *      process and nothing crosses a network.
 *   2. Else the fewest hosts that hold it, h = 2, 3, ...: pp h (one stage a
 *      host, layers by memory, cluster_place_stages), or tp h (equal
 *      shards, cluster_place) when it fits too and every link between its
 *      hosts is measured fast enough that the exchange tensor parallelism
 *      adds per token costs at most a quarter of the compute it saves.
 * Tensor parallelism sums every layer's partial results twice per token
 * over the network (2 * layers all-reduces, each 2(h-1) latencies); a
 * pipeline hands one activation per stage boundary. On the links of a home
 * cluster (1 GbE, Wi-Fi: 0.1 to several ms) the first costs more than the
 * token; on a fast rack link it pays for itself, so an unmeasured link
 * counts as slow. Like cluster_place, a pure function tested with tables. */
#include "cluster_internal.h"

#include <stdio.h>
#include <string.h>

/* What compute per token the policy assumes when it weighs an exchange
 * against the compute tensor parallelism saves: a token reads every
 * weight once, at about a desktop's or a server socket's memory read rate
 * (20 GB/s; the probe does not measure it). */
#define SHAPE_READ_BYTES_PER_SECOND 20e9
/* Tensor parallelism over a network must cost at most this share of the
 * compute it saves. */
#define SHAPE_EXCHANGE_SHARE 0.25

/* The exchange tp adds per token on placement p's hosts, microseconds: 2 *
 * layers ring all-reduces of hidden_bytes, each 2(h-1) steps of one
 * latency and hidden_bytes / h over the slowest link between its hosts;
 * -1 when a link between them is unmeasured. */
static double tp_exchange_us(const struct cluster_shape_request *r, int n_hosts,
                             const struct cluster_placement *p) {
    double latency = 0, rate = 0;
    if (p->n_hosts < 2) return 0; /* ranks on one host: threads */
    for (int a = 0; a < p->n_hosts; a++)
        for (int b = 0; b < p->n_hosts; b++) {
            if (a == b) continue;
            const struct cluster_link *link =
                r->links ? &r->links[p->host[a] * n_hosts + p->host[b]] : NULL;
            if (!link || link->latency_us <= 0 || link->bytes_per_second <= 0) return -1;
            if (link->latency_us > latency) latency = link->latency_us;
            if (rate == 0 || link->bytes_per_second < rate) rate = link->bytes_per_second;
        }
    int h = p->tp;
    double step_us = latency + (double)r->hidden_bytes / h / rate * 1e6;
    return 2.0 * r->n_layers * 2.0 * (h - 1) * step_us;
}

/* 1 if tp placement p pays for its exchange (see the top of the file). */
static int tp_pays(const struct cluster_shape_request *r, int n_hosts,
                   const struct cluster_placement *p) {
    double exchange = tp_exchange_us(r, n_hosts, p);
    double compute = (double)r->weight_bytes / SHAPE_READ_BYTES_PER_SECOND * 1e6;
    double saved = compute * (1.0 - 1.0 / p->tp);
    return exchange >= 0 && exchange <= SHAPE_EXCHANGE_SHARE * saved;
}

/* The request to place at tp ranks a stage in pp stages. */
static struct cluster_request request_at(const struct cluster_shape_request *r, int tp, int pp) {
    struct cluster_request request = r->place;
    request.tp = tp;
    request.pp = pp;
    request.bytes_per_rank = r->bytes_per_rank[tp];
    request.n_layers = r->n_layers;
    request.stage = r->stage;
    memset(request.layers, 0, sizeof(request.layers));
    return request;
}

/* The number of hosts an instance may use: open ones, or the pinned. */
static int usable_hosts(const struct cluster_host *hosts, int n_hosts,
                        const struct cluster_shape_request *r) {
    if (r->place.n_pinned > 0) return r->place.n_pinned;
    int n = 0;
    for (int i = 0; i < n_hosts; i++) n += cluster_host_open(&hosts[i], &r->place, i);
    return n;
}

int cluster_choose_shape(const struct cluster_host *hosts, const struct cluster_usage *usage,
                         int n_hosts, const struct cluster_shape_request *r,
                         struct cluster_placement *out, char *why, size_t whylen) {
    char one[256] = "", spread[256] = "";
    struct cluster_request request;
    int open = usable_hosts(hosts, n_hosts, r);
    if (r->place.n_pinned <= 1) {
        request = request_at(r, 1, 1);
        if (cluster_place(hosts, usage, n_hosts, &request, out, one, sizeof(one)) == 0) return 0;
    }
    int most = open;
    if (most > CLUSTER_STAGES_MAX) most = CLUSTER_STAGES_MAX;
    if (most > r->n_layers) most = r->n_layers;
    for (int h = r->place.n_pinned > 1 ? r->place.n_pinned : 2; h <= most; h++) {
        struct cluster_placement tp;
        request = request_at(r, 1, h);
        int pp_fits =
            cluster_place(hosts, usage, n_hosts, &request, out, spread, sizeof(spread)) == 0;
        request = request_at(r, h, 1);
        int tp_fits = h <= CLUSTER_STAGES_MAX && r->bytes_per_rank[h] > 0 &&
                      cluster_place(hosts, usage, n_hosts, &request, &tp, why, whylen) == 0;
        if (tp_fits && (!pp_fits || tp_pays(r, n_hosts, &tp))) {
            *out = tp;
            return 0;
        }
        if (pp_fits) return 0;
    }
    memset(out, 0, sizeof(*out));
    if (most < 2)
        snprintf(why, whylen,
                 "the model fits no single host (%s), and %d open host%s cannot "
                 "split it",
                 one, open, open == 1 ? "" : "s");
    else
        snprintf(why, whylen, "the model fits no single host (%s), nor %d stages on %d hosts (%s)",
                 one[0] ? one : "the hosts pinned are several", most, most, spread);
    return -1;
}
