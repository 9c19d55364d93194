/* gateway_internal.h -- the gateway itself: what gateway.c wires together
 * from its layers (core, supervisor, requests, fleet, http), each with a
 * header of its own. */
#ifndef LOCKSTEP_GATEWAY_INTERNAL_H
#define LOCKSTEP_GATEWAY_INTERNAL_H

#include <stdatomic.h>

#include "gateway/core/core.h"
#include "gateway/fleet/fleet.h"
#include "gateway/gateway.h"
#include "gateway/http/http.h"
#include "gateway/requests/requests.h"

struct gateway {
    struct gateway_params params;
    atomic_int stopping;
    atomic_int draining;           /* 1: gateway_drain was called: new requests get 503 */
    int wake[2];                   /* pipe: gateway_stop, gateway_drain -> gateway_run */
    struct gateway_served *served; /* (n_served) the models, fixed at start */
    int n_served;
    atomic_ullong next_id;            /* runner ids */
    struct gateway_metrics metrics;   /* GET /metrics */
    struct requests_env requests_env; /* what its requests are created with */
    char runtime_dir[64];             /* /tmp/lockstep-PID: the runners' sockets and status files */
    struct fleet fleet;               /* its instances across the cluster's hosts */
    int fleet_ready;                  /* 1: fleet_init succeeded (fleet_free is due) */
    struct http_server http;
};

#define GATEWAY_DRAIN_SECONDS 30  /* gateway_drain's bound, when the parameters give none */
#define GATEWAY_FLUSH_SECONDS 1.0 /* for clients to read the errors a stop ends requests with */

#endif
