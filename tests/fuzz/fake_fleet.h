/* fake_fleet.h -- a stand-in for src/gateway/fleet under fuzz_http: one
 * served model, one instance whose supervisor is set up but never started
 * (no runner process, no supervisor thread), and a fake runner that
 * answers every request at once through the requests layer, as a runner's
 * frames would.
 *
 * fake_fleet.c defines every function of fleet.h the HTTP layer calls, so
 * fuzz_http links src/gateway/http over it instead of over the real fleet:
 * what is fuzzed is the HTTP layer (and the requests below it), not the
 * life of runners. */
#ifndef LOCKSTEP_FUZZ_FAKE_FLEET_H
#define LOCKSTEP_FUZZ_FAKE_FLEET_H

#include <stdatomic.h>
#include <stddef.h>

#include "gateway/fleet/fleet.h"

#define FAKE_FLEET_HOST "localhost" /* the one host of its cluster */

/* A fleet serving params->models[0] (its vocabulary loaded from its file)
 * with one instance, "NAME-1", and the worker thread of its fake runner;
 * borrows what it is given, which must outlive it. NULL with err. */
struct fleet *fake_fleet_create(const struct gateway_params *params,
                                struct gateway_metrics *metrics, atomic_int *stopping,
                                atomic_ullong *next_id, char *err, size_t errlen);
/* Joins the worker; the requests it still held fail with 503, as a
 * stopping supervisor fails them. Later requests are answered at once. */
void fake_fleet_stop(struct fleet *fleet);
/* After fake_fleet_stop and http_stop; aborts if a reference fleet_any
 * gave out was never released. */
void fake_fleet_free(struct fleet *fleet);

#endif
