/* gateway.h -- `lockstep serve`: the OpenAI-compatible HTTP API in front of
 * supervised runners.
 *
 * The gateway owns every request (DESIGN.md I4): its prompt tokens, the
 * tokens generated so far and its sampling parameters. It starts one runner
 * per model instance (a `lockstep runner` child process, or an mpirun job),
 * talks to it over the runner protocol, and when a runner exits it starts a
 * new one and resubmits the unfinished requests with their generated tokens
 * appended, so a client's stream goes on with the tokens it would have got.
 * It tokenizes, applies chat templates, detokenizes incrementally, matches
 * stop strings, streams server-sent events and keeps Prometheus metrics. It
 * never touches weights. */
#ifndef LOCKSTEP_GATEWAY_H
#define LOCKSTEP_GATEWAY_H

#include "gateway/core/core.h"

struct gateway;

/* Loads each model's vocabulary, starts its runner and listens; the port
 * actually bound is gateway_port's. */
int gateway_create(struct gateway **out, const struct gateway_params *params, char *err,
                   size_t errlen);
int gateway_port(const struct gateway *gateway);
/* Serves until gateway_stop, or until a drain ends; runs the housekeeping
 * (keep-alive comments). */
void gateway_run(struct gateway *gateway);
/* Asks gateway_run to return at once; async-signal-safe. */
void gateway_stop(struct gateway *gateway);
/* Asks gateway_run to drain: new requests get 503 and /health says
 * "draining", those in flight finish, and gateway_run returns when none is
 * left or after drain_seconds, when those left end with an error event
 * naming the shutdown (streams: then [DONE]); async-signal-safe. */
void gateway_drain(struct gateway *gateway);
/* Stops the runners and the HTTP server and frees everything. */
void gateway_free(struct gateway *gateway);

#endif
