/* http.h -- the gateway's front door: the HTTP server (libmicrohttpd behind
 * a screen that holds each client address to a number of connections),
 * its routes (the OpenAI API, llama.cpp's /tokenize, /health, /metrics,
 * GET /v1/cluster and its history, the admin API, the dashboard, the debug
 * endpoints), authentication and CORS.
 *
 * The top layer below the gateway itself: it parses what clients send,
 * creates requests (src/gateway/requests) and gives them to the fleet,
 * which routes them; it streams what the requests produce. Nothing below
 * knows it: a request wakes its connection through the reader hook it was
 * given. */
#ifndef LOCKSTEP_GATEWAY_HTTP_H
#define LOCKSTEP_GATEWAY_HTTP_H

#include <stdatomic.h>
#include <stddef.h>

#include "gateway/core/core.h"
#include "gateway/fleet/fleet.h"
#include "gateway/requests/requests.h"
#include "openai/openai.h"

struct MHD_Daemon;
struct cJSON;
struct http_screen;
struct sockaddr;

#define HTTP_CONNECTION_TIMEOUT 30  /* seconds, when the parameters give none */
#define HTTP_CLIENT_CONNECTIONS 512 /* per client address, when the parameters give none */

/* The HTTP server. The caller fills the borrowed fields before http_start
 * (the gateway outlives the server); the rest is the server's. */
struct http_server {
    const struct gateway_params *params;
    struct fleet *fleet;                     /* where requests go; the models it serves */
    struct gateway_metrics *metrics;         /* requests by status, tokens, latency */
    const struct requests_env *requests_env; /* what requests are created with */
    atomic_int *stopping;       /* the gateway stops (http_stop sets it too): the screen returns */
    const atomic_int *draining; /* the gateway drains: new work gets 503 */
    atomic_int active;          /* requests being served */
    struct MHD_Daemon *daemon;
    int port;                   /* the port bound (params->port 0: the OS chose it) */
    struct http_screen *screen; /* screen.c: accepts and screens connections */
};

/* http.c */
/* Listens on params' host and port and serves until http_stop. */
int http_start(struct http_server *server, char *err, size_t errlen);
void http_stop(struct http_server *server);

/* screen.c: accepts on listen_fd (which it then owns), holds each client
 * address to per_client connections, and hands the connections whose first
 * request head is sound to the daemon. */
int http_screen_start(struct http_server *server, int listen_fd, int per_client, char *err,
                      size_t errlen);
/* Stops accepting and closes what is still being screened. */
void http_screen_stop(struct http_server *server);
/* The daemon closed a connection from address (its count drops). */
void http_screen_closed(struct http_server *server, const struct sockaddr *address);
/* After the daemon stopped: frees the screen. */
void http_screen_free(struct http_server *server);

/* admin.c */
/* POST /debug/fault's cluster kinds on instance's model: "move" (to
 * body's "tp" and "hosts"), "lose-host" and "drain-host" (its leader's
 * host, for body's "seconds", default 15); 1 if kind is one of them (done,
 * or e set with its status), else 0. */
int http_admin_fault(struct http_server *server, struct fleet_instance *instance, const char *kind,
                     const struct cJSON *body, struct openai_error *e, int *failed);
/* An admin API call (/admin/instances..., /admin/hosts/NAME/drain and
 * /undrain): the HTTP status with *json (free() it), or -1 with e (405
 * for a method the path does not take). */
int http_admin_call(struct http_server *server, const char *method, const char *url,
                    const char *body, size_t length, char **json, struct openai_error *e);
/* The methods an admin path takes ("GET, POST"), for a 405's Allow, or
 * NULL for a path that is not one. */
const char *http_admin_allowed(const char *url);

#endif
