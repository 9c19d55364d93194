/* http.c -- the gateway's HTTP server (libmicrohttpd): routing, API keys,
 * body limits, and answers whole or streamed.
 *
 * One epoll thread serves every connection. A streamed answer is a
 * callback response whose reader hands out the request's pending SSE bytes;
 * when there are none it suspends the connection, and the request resumes
 * it when its runner sends more (or a keep-alive comment is due), so
 * hundreds of open streams cost no threads. A whole answer suspends the
 * connection in the handler until the request is done. Every error is a
 * JSON body in OpenAI's shape, and nothing a client sends is more than that
 * client's problem (DESIGN.md I6). */
#include "gateway/http/http.h"
#include "gateway/http/dashboard.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum route {
    ROUTE_NONE,
    ROUTE_HEALTH,
    ROUTE_MODELS,
    ROUTE_MODEL,
    ROUTE_METRICS,
    ROUTE_CHAT,
    ROUTE_COMPLETIONS,
    ROUTE_RESPONSES,  /* POST /v1/responses: OpenAI's Responses API */
    ROUTE_MESSAGES,   /* POST /v1/messages: Anthropic's Messages API */
    ROUTE_COUNT,      /* POST /v1/messages/count_tokens */
    ROUTE_EMBEDDINGS, /* POST /v1/embeddings */
    ROUTE_STUCK,      /* GET /debug/stuck: the latest stuck reports */
    ROUTE_FAULT,      /* POST /debug/fault: fault injection (only with --enable-faults) */
    ROUTE_TOKENIZE,   /* POST /tokenize (llama.cpp's) */
    ROUTE_DETOKENIZE, /* POST /detokenize (llama.cpp's) */
    ROUTE_CLUSTER,    /* GET /v1/cluster and /v1/cluster/history (either key) */
    ROUTE_ADMIN,      /* /admin/...: the admin API (the admin key only; admin.c routes it) */
};

/* One HTTP request in progress (MHD's per-request pointer). */
struct http_call {
    enum route route;
    struct runner_buffer body;       /* POST body received so far */
    int too_large;                   /* 1: the body passed the limit */
    int status;                      /* status sent (for the metrics) */
    int counted;                     /* 1: counts against max_concurrent */
    struct gateway_request *request; /* completions: the request it serves */
    const char *origin;              /* the request's Origin when CORS allows it, or NULL */
    int post;                        /* 1: a POST (answered early when refused) */
    const char *model;               /* the instance a call without a request served, or NULL */
    uint64_t start_us;               /* when its first byte was read (the request log) */
    const char *allow;               /* a 405's Allow header, or NULL */
    struct http_server *server;      /* the server it came to */
};

/* The allowed origin a browser's request came from, or NULL. */
static const char *cors_origin(const struct http_server *server, struct MHD_Connection *c) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    for (int i = 0; origin && i < server->params->n_cors_origins; i++)
        if (!strcmp(server->params->cors_origins[i], "*") ||
            !strcmp(server->params->cors_origins[i], origin))
            return origin;
    return NULL;
}

/* Headers every answer carries: CORS for an allowed origin, when to try
 * again after a 429 or 503 (both are passing states), and while the
 * gateway drains, that the connection closes (a client's next request goes
 * through its load balancer again, to a gateway that takes it). */
static void add_common_headers(const struct http_call *call, struct MHD_Response *r, int status) {
    if (call->origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", call->origin);
        MHD_add_response_header(r, "Vary", "Origin");
    }
    if (status == 429 || status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 405 && call->allow) MHD_add_response_header(r, "Allow", call->allow);
    if (atomic_load(call->server->draining))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
}

static enum MHD_Result send_text(struct MHD_Connection *c, struct http_call *call, int status,
                                 const char *type, char *text) {
    const char *body = text ? text : "{\"error\":{\"message\":\"out of memory\"}}";
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    free(text);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    add_common_headers(call, r, status);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    call->status = status;
    return rc;
}

/* An error in the shape the route's clients read: Anthropic's for the
 * Messages API, OpenAI's for the rest. */
static enum MHD_Result send_error(struct MHD_Connection *c, struct http_call *call,
                                  const struct openai_error *e) {
    int anthropic = call->route == ROUTE_MESSAGES || call->route == ROUTE_COUNT;
    return send_text(c, call, e->status, "application/json",
                     anthropic ? openai_messages_error_json(e) : openai_error_json(e));
}

static enum route find_route(const struct http_server *server, const char *method,
                             const char *url) {
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (get && !strcmp(url, "/health")) return ROUTE_HEALTH;
    if (get && !strcmp(url, "/metrics")) return ROUTE_METRICS;
    if (get && !strcmp(url, "/v1/models")) return ROUTE_MODELS;
    if (get && !strncmp(url, "/v1/models/", 11)) return ROUTE_MODEL;
    if (post && !strcmp(url, "/v1/chat/completions")) return ROUTE_CHAT;
    if (post && !strcmp(url, "/v1/completions")) return ROUTE_COMPLETIONS;
    if (post && !strcmp(url, "/v1/responses")) return ROUTE_RESPONSES;
    if (post && !strcmp(url, "/v1/messages")) return ROUTE_MESSAGES;
    if (post && !strcmp(url, "/v1/messages/count_tokens")) return ROUTE_COUNT;
    if (post && !strcmp(url, "/v1/embeddings")) return ROUTE_EMBEDDINGS;
    if (get && !strcmp(url, "/debug/stuck")) return ROUTE_STUCK;
    if (post && !strcmp(url, "/debug/fault") && server->params->enable_faults) return ROUTE_FAULT;
    if (post && !strcmp(url, "/tokenize")) return ROUTE_TOKENIZE;
    if (post && !strcmp(url, "/detokenize")) return ROUTE_DETOKENIZE;
    if (get && (!strcmp(url, "/v1/cluster") || !strcmp(url, "/v1/cluster/history")))
        return ROUTE_CLUSTER;
    if (!strncmp(url, "/admin/", 7)) return ROUTE_ADMIN; /* its methods are admin.c's */
    return ROUTE_NONE;
}

/* 1 if the request carries key. The scheme's name is case-insensitive
 * (RFC 9110); the comparison of the key takes the same time wherever the
 * first difference is. */
static int carries_key(struct MHD_Connection *c, const char *key) {
    const char *header = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    /* Anthropic's clients send the key as x-api-key */
    const char *given = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (header && strncasecmp(header, "Bearer ", 7) == 0) given = header + 7;
    if (!given) return 0;
    while (*given == ' ') given++;
    size_t n = strlen(key), m = strlen(given);
    unsigned difference = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++) difference |= (unsigned)(key[i] ^ given[i < m ? i : 0]);
    return difference == 0;
}

/* Whether the call may go on: the inference key (when set) for the
 * inference API; either key for GET /v1/cluster; the admin key alone for
 * the admin API, which is off without one. 0, or -1 with e. */
static int check_key(const struct http_server *server, struct MHD_Connection *c, enum route route,
                     struct openai_error *e) {
    const char *key = server->params->api_key, *admin = server->params->admin_key;
    int admin_given = admin && carries_key(c, admin);
    if (route == ROUTE_HEALTH) return 0;
    if (route == ROUTE_ADMIN && !admin) {
        openai_error_set(e, 403, "permission_error", NULL, "admin_disabled",
                         "the admin API is off: start lockstep serve with --admin-key");
        return -1;
    }
    if (route == ROUTE_ADMIN && !admin_given && key && carries_key(c, key)) {
        openai_error_set(e, 403, "permission_error", NULL, "admin_key_required",
                         "the admin API takes the admin key, not the inference key");
        return -1;
    }
    int allowed = route == ROUTE_ADMIN     ? admin_given
                  : route == ROUTE_CLUSTER ? admin_given || !key || carries_key(c, key)
                                           : !key || carries_key(c, key);
    if (route == ROUTE_CLUSTER && !key && admin && !admin_given) allowed = 0;
    if (allowed) return 0;
    openai_error_set(e, 401, "invalid_request_error", NULL, "invalid_api_key",
                     "a valid %s key is required: Authorization: Bearer KEY (or x-api-key: KEY)",
                     route == ROUTE_ADMIN ? "admin" : "API");
    return -1;
}

/* Counts the Content-Length headers and whether any two differ. */
struct length_headers {
    int count;
    const char *first;
    int differ;
};

static enum MHD_Result count_length(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
    struct length_headers *h = cls;
    (void)kind;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0) return MHD_YES;
    if (h->count++ == 0)
        h->first = value;
    else if (!value || !h->first || strcmp(value, h->first) != 0)
        h->differ = 1;
    return MHD_YES;
}

/* 1 if the request has two Content-Length headers that disagree: which
 * one frames the body is ambiguous (a request-smuggling vector, RFC 9112
 * 6.3), so it is refused. */
static int conflicting_lengths(struct MHD_Connection *c) {
    struct length_headers h = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_length, &h);
    return h.differ;
}

/* ---------- GET endpoints ---------- */

static enum MHD_Result answer_health(struct http_server *server, struct MHD_Connection *c,
                                     struct http_call *call) {
    cJSON *health = cJSON_CreateObject();
    int all_ready;
    cJSON_AddItemToObject(health, "models", fleet_health_json(server->fleet, &all_ready));
    /* a draining gateway is unhealthy, so that load balancers send nothing more */
    int draining = atomic_load(server->draining), ok = all_ready && !draining;
    cJSON_AddStringToObject(health, "status",
                            draining    ? "draining"
                            : all_ready ? "ok"
                                        : "unavailable");
    char *text = cJSON_PrintUnformatted(health);
    cJSON_Delete(health);
    return send_text(c, call, ok ? 200 : 503, "application/json", text);
}

static enum MHD_Result answer_models(struct http_server *server, struct MHD_Connection *c,
                                     struct http_call *call, const char *url) {
    const char *ids[64];
    int contexts[64], n = server->fleet->n_served < 64 ? server->fleet->n_served : 64;
    for (int i = 0; i < n; i++) {
        ids[i] = server->fleet->served[i].name;
        contexts[i] = server->fleet->served[i].context_length;
    }
    if (call->route == ROUTE_MODELS)
        return send_text(c, call, 200, "application/json",
                         openai_models_json(ids, contexts, n, (int64_t)time(NULL)));
    const char *name = url + strlen("/v1/models/");
    const struct gateway_served *s =
        gateway_served_find(server->fleet->served, server->fleet->n_served, name);
    if (s)
        return send_text(c, call, 200, "application/json",
                         openai_model_json(name, s->context_length, (int64_t)time(NULL)));
    struct openai_error e;
    openai_error_set(&e, 404, "invalid_request_error", "model", "model_not_found",
                     "the model '%s' does not exist", name);
    return send_error(c, call, &e);
}

/* ---------- completions ---------- */

static ssize_t read_stream(void *cls, uint64_t position, char *buffer, size_t max) {
    struct gateway_request *r = cls;
    ssize_t n = 0;
    (void)position;
    pthread_mutex_lock(&r->lock);
    if (r->out.length) {
        n = (ssize_t)(r->out.length < max ? r->out.length : max);
        memcpy(buffer, r->out.data, (size_t)n);
        runner_buffer_consume(&r->out, (size_t)n);
        if (r->unsent_since_us) {
            gateway_observe_overhead(r->env->metrics, r->served->name, r->instance_id,
                                     (double)(clock_now_us() - r->unsent_since_us) * 1e-6);
            r->unsent_since_us = 0;
        }
    } else if (r->done) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (r->reader) {
        /* nothing yet: park the connection until the request wakes it */
        r->suspended = 1;
        MHD_suspend_connection(r->reader);
    }
    pthread_mutex_unlock(&r->lock);
    return n;
}

/* Wakes a connection its request parked (request_wake's reader). */
static void resume_connection(void *connection) {
    MHD_resume_connection(connection);
}

static enum MHD_Result start_stream(struct MHD_Connection *c, struct http_call *call) {
    struct MHD_Response *response = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 16384, read_stream, call->request, NULL);
    if (!response) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    add_common_headers(call, response, 200);
    enum MHD_Result rc = MHD_queue_response(c, 200, response);
    MHD_destroy_response(response);
    call->status = 200;
    return rc;
}

/* The whole answer of a finished request, every choice (lock held). */
static enum MHD_Result send_whole(struct MHD_Connection *c, struct http_call *call) {
    struct gateway_request *r = call->request;
    struct openai_result results[OPENAI_REQUEST_CHOICES_MAX];
    struct openai_usage usage = gateway_request_usage(r);
    if (r->failed) {
        char *copy = strdup(r->error_json ? r->error_json : "{}");
        return send_text(c, call, r->failed, "application/json", copy);
    }
    if (r->body.kind == OPENAI_EMBEDDING)
        return send_text(c, call, 200, "application/json", gateway_embeddings_whole(r));
    if (r->body.responses || r->body.anthropic)
        return send_text(c, call, 200, "application/json",
                         r->body.responses ? gateway_responses_whole(r)
                                           : gateway_messages_whole(r));
    for (int i = 0; i < r->n_choices && i < OPENAI_REQUEST_CHOICES_MAX; i++) {
        const struct gateway_choice *choice = &r->choices[i];
        results[i] = (struct openai_result){
            .text = choice->text.data ? (const char *)choice->text.data : "",
            .length = choice->text.length,
            .finish = choice->finish,
            .usage = usage,
            .n_tokens = r->body.logprobs ? choice->n_shown : 0,
            .tokens = choice->token_reports,
            .n_tool_calls = choice->n_calls,
            .tool_calls = choice->calls,
        };
    }
    int n = r->n_choices < OPENAI_REQUEST_CHOICES_MAX ? r->n_choices : OPENAI_REQUEST_CHOICES_MAX;
    return send_text(c, call, 200, "application/json",
                     openai_choices_json(&r->response, results, n, &usage));
}

/* A whole answer once the request is done; a stream once it has its first
 * bytes (a token, or a keep-alive comment), so that a request refused before
 * it started (model unavailable, over capacity, bad request) gets its own
 * HTTP status, not a 200 with an error inside. Until then the connection
 * waits (suspended) until the request wakes it and the handler is called
 * again. */
static enum MHD_Result answer_when_ready(struct MHD_Connection *c, struct http_call *call) {
    struct gateway_request *r = call->request;
    enum MHD_Result rc = MHD_YES;
    pthread_mutex_lock(&r->lock);
    int streaming = r->body.stream && !r->failed;
    if (streaming && (r->out.length > 0 || r->done)) {
        pthread_mutex_unlock(&r->lock); /* read_stream takes it */
        return start_stream(c, call);
    }
    if (r->done) {
        rc = send_whole(c, call);
    } else {
        r->suspended = 1;
        MHD_suspend_connection(c);
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* An instance of the model the request names (without a name, the only
 * one served), with a reference for the caller: its vocabulary prepares
 * the request, which the cluster routes to the replica with the least work
 * when it is submitted. */
static struct fleet_instance *choose_instance(struct http_server *server, const char *name,
                                              struct openai_error *e) {
    const struct gateway_served *s =
        name ? gateway_served_find(server->fleet->served, server->fleet->n_served, name) : NULL;
    if (!name && server->fleet->n_served == 1) s = &server->fleet->served[0];
    struct fleet_instance *in = s ? fleet_any(server->fleet, s) : NULL;
    if (!name && !s)
        openai_error_set(e, 400, "invalid_request_error", "model", NULL,
                         "model is required: %d models are served (GET /v1/models)",
                         server->fleet->n_served);
    else if (!s)
        openai_error_set(e, 404, "invalid_request_error", "model", "model_not_found",
                         "the model '%s' does not exist", name);
    else if (!in)
        openai_error_set(e, 503, "server_error", "model", NULL,
                         "model %s has no instance (all were stopped)", s->name);
    return in;
}

/* 1 if the gateway drains and the call would start work (completions,
 * tokens, admin changes): it gets a 503 in e. What only reads the
 * gateway's state is still answered. */
static int refused_while_draining(struct http_server *server, const struct http_call *call,
                                  struct openai_error *e) {
    enum route r = call->route;
    if (!atomic_load(server->draining) ||
        !(r == ROUTE_CHAT || r == ROUTE_COMPLETIONS || r == ROUTE_RESPONSES ||
          r == ROUTE_MESSAGES || r == ROUTE_COUNT || r == ROUTE_EMBEDDINGS || r == ROUTE_TOKENIZE ||
          r == ROUTE_DETOKENIZE || r == ROUTE_ADMIN))
        return 0;
    openai_error_set(e, 503, "server_error", NULL, "shutting_down",
                     "the gateway is shutting down (draining): it takes no new requests; "
                     "retry on another gateway or later");
    return 1;
}

/* Parses, checks limits, creates and submits the request. */
static enum MHD_Result start_completion(struct http_server *server, struct MHD_Connection *c,
                                        struct http_call *call) {
    struct openai_request body;
    struct openai_error e;
    enum openai_kind kind = call->route == ROUTE_CHAT ? OPENAI_CHAT : OPENAI_COMPLETION;
    /* its head came before the drain began, its body after */
    if (refused_while_draining(server, call, &e)) return send_error(c, call, &e);
    if (call->too_large) {
        openai_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                         "the body is larger than %zu bytes", server->params->max_body_bytes);
        return send_error(c, call, &e);
    }
    const char *text = call->body.data ? (const char *)call->body.data : "";
    int refused = call->route == ROUTE_RESPONSES
                      ? openai_parse_responses(text, call->body.length, &body, &e)
                  : call->route == ROUTE_EMBEDDINGS
                      ? openai_parse_embeddings(text, call->body.length, &body, &e)
                  : call->route == ROUTE_MESSAGES
                      ? openai_parse_messages(text, call->body.length, 0, &body, &e)
                      : openai_parse_request(text, call->body.length, kind, &body, &e);
    if (refused) return send_error(c, call, &e);
    struct fleet_instance *in = choose_instance(server, body.model, &e);
    if (!in) {
        openai_request_free(&body);
        return send_error(c, call, &e);
    }
    if (atomic_fetch_add(&server->active, 1) >= server->params->max_concurrent) {
        atomic_fetch_sub(&server->active, 1);
        fleet_instance_release(in);
        openai_error_set(&e, 429, "rate_limit_error", NULL, "too_many_requests",
                         "%d requests are in progress; try again later",
                         server->params->max_concurrent);
        openai_request_free(&body);
        return send_error(c, call, &e);
    }
    call->counted = 1;
    const struct gateway_served *served = in->served; /* the gateway's: it outlives in */
    call->request = gateway_request_create(server->requests_env, served, in->id, &body, &e);
    fleet_instance_release(in);
    if (!call->request) return send_error(c, call, &e);
    call->request->reader = c;
    call->request->wake_reader = resume_connection;
    fleet_submit(server->fleet, call->request);
    gateway_observe_tokens(server->metrics, served->name, call->request->instance_id,
                           call->request->n_prompt_tokens, 0);
    return answer_when_ready(c, call);
}

/* POST /v1/messages/count_tokens: the prompt a Messages request would
 * make, counted without running it ({"input_tokens": N}). */
static enum MHD_Result answer_count(struct http_server *server, struct MHD_Connection *c,
                                    struct http_call *call) {
    struct openai_request body;
    struct openai_error e;
    char json[64];
    if (call->too_large) {
        openai_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                         "the body is larger than %zu bytes", server->params->max_body_bytes);
        return send_error(c, call, &e);
    }
    if (openai_parse_messages(call->body.data ? (const char *)call->body.data : "",
                              call->body.length, 1, &body, &e))
        return send_error(c, call, &e);
    struct fleet_instance *in = choose_instance(server, body.model, &e);
    if (!in) {
        openai_request_free(&body);
        return send_error(c, call, &e);
    }
    call->model = in->served->name;
    body.max_tokens = 1; /* nothing runs: no room kept for an answer */
    struct gateway_request *r =
        gateway_request_create(server->requests_env, in->served, in->id, &body, &e);
    fleet_instance_release(in);
    if (!r) return send_error(c, call, &e);
    snprintf(json, sizeof(json), "{\"input_tokens\":%d}", r->n_prompt_tokens);
    gateway_request_release(r);
    return send_text(c, call, 200, "application/json", strdup(json));
}

/* POST /tokenize and /detokenize (tokenize.c): answered at once. */
static enum MHD_Result answer_tokens(struct http_server *server, struct MHD_Connection *c,
                                     struct http_call *call) {
    struct openai_error e;
    struct gateway_tokens_body body;
    if (call->too_large) {
        openai_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                         "the body is larger than %zu bytes", server->params->max_body_bytes);
        return send_error(c, call, &e);
    }
    if (gateway_tokens_parse((const char *)call->body.data, call->body.length,
                             call->route == ROUTE_DETOKENIZE, &body, &e))
        return send_error(c, call, &e);
    struct fleet_instance *in = choose_instance(server, body.model, &e);
    char *json = in ? gateway_tokens_answer(in->served, &body, &e) : NULL;
    gateway_tokens_free(&body);
    if (in) call->model = in->served->name;
    fleet_instance_release(in);
    return json ? send_text(c, call, 200, "application/json", json) : send_error(c, call, &e);
}

/* POST /debug/fault {"model", "kind", "rank", "delay_ms", "steps", "count"}. */
static enum MHD_Result answer_fault(struct http_server *server, struct MHD_Connection *c,
                                    struct http_call *call) {
    struct openai_error e;
    cJSON *j = cJSON_ParseWithLength(call->body.data ? (const char *)call->body.data : "",
                                     call->body.length);
    const char *model = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "model"));
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "kind"));
    const cJSON *rank = cJSON_GetObjectItemCaseSensitive(j, "rank");
    const cJSON *delay = cJSON_GetObjectItemCaseSensitive(j, "delay_ms");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "steps");
    const cJSON *count = cJSON_GetObjectItemCaseSensitive(j, "count");
    const struct gateway_served *s =
        model ? gateway_served_find(server->fleet->served, server->fleet->n_served, model) : NULL;
    struct fleet_instance *in = s ? fleet_any(server->fleet, s) : NULL;
    enum MHD_Result rc;
    int failed = 0;
    char why[200];
    if (kind && in && http_admin_fault(server, in, kind, j, &e, &failed)) {
        if (!failed)
            fleet_note(server->fleet, "fault", in->id, "fault %s injected into %s", kind, in->id);
        rc = failed ? send_error(c, call, &e)
                    : send_text(c, call, 200, "application/json", strdup("{\"ok\":true}"));
    } else if (!kind || !model) {
        openai_error_set(&e, 400, "invalid_request_error", NULL, NULL,
                         "a fault needs \"model\" and \"kind\" strings");
        rc = send_error(c, call, &e);
    } else if (!in) {
        openai_error_set(&e, 404, "invalid_request_error", "model", "model_not_found",
                         "the model does not exist");
        rc = send_error(c, call, &e);
    } else if ((failed = supervisor_fault(
                    &in->supervisor, kind, cJSON_IsNumber(rank) ? rank->valueint : 0,
                    cJSON_IsNumber(delay) ? delay->valueint : 0,
                    cJSON_IsNumber(steps) ? steps->valueint : 0,
                    cJSON_IsNumber(count) ? count->valueint : 1, why, sizeof(why)))) {
        openai_error_set(&e, failed, "invalid_request_error", NULL, NULL, "%s", why);
        rc = send_error(c, call, &e);
    } else {
        fleet_note(server->fleet, "fault", in->id, "fault %s injected into %s", kind, in->id);
        rc = send_text(c, call, 200, "application/json", strdup("{\"ok\":true}"));
    }
    fleet_instance_release(in);
    cJSON_Delete(j);
    return rc;
}

/* /admin/instances...: the admin API (admin.c). */
static enum MHD_Result answer_admin(struct http_server *server, struct MHD_Connection *c,
                                    struct http_call *call, const char *url, const char *method) {
    struct openai_error e;
    char *json = NULL;
    if (call->too_large) {
        openai_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                         "the body is larger than %zu bytes", server->params->max_body_bytes);
        return send_error(c, call, &e);
    }
    int status = http_admin_call(server, method, url, (const char *)call->body.data,
                                 call->body.length, &json, &e);
    call->allow = status < 0 && e.status == 405 ? http_admin_allowed(url) : NULL;
    return status < 0 ? send_error(c, call, &e)
                      : send_text(c, call, status, "application/json", json);
}

/* ---------- the handler ---------- */

/* OPTIONS from an allowed origin: the CORS preflight's answer. */
static enum MHD_Result answer_preflight(struct MHD_Connection *c, struct http_call *call) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    add_common_headers(call, r, 204);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    enum MHD_Result rc = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    call->status = 204;
    return rc;
}

/* GET /, /dashboard and the page's files (dashboard.c), without a key: the
 * page holds no data, and reads the API with the key its user types in.
 * 0 when url is not the dashboard's; else 1 and *rc. */
static int answer_dashboard(struct MHD_Connection *c, struct http_call *call, const char *url,
                            enum MHD_Result *rc) {
    const unsigned char *body;
    size_t length;
    const char *type;
    struct openai_error e;
    int found = http_dashboard_asset(url, &body, &length, &type);
    if (found < 0) {
        openai_error_set(&e, 404, "invalid_request_error", NULL, "not_found",
                         "no dashboard file %s", url);
        *rc = send_error(c, call, &e);
    }
    if (found <= 0) return found != 0;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(length, (void *)body, MHD_RESPMEM_PERSISTENT);
    *rc = MHD_NO;
    if (!r) return 1;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, DASHBOARD_CACHE_CONTROL);
    MHD_add_response_header(r, "Content-Security-Policy", DASHBOARD_CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    add_common_headers(call, r, 200);
    *rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    call->status = 200;
    return 1;
}

static enum MHD_Result first_call(struct http_server *server, struct MHD_Connection *c,
                                  const char *url, const char *method, struct http_call *call) {
    struct openai_error e;
    call->origin = cors_origin(server, c);
    call->route = find_route(server, method, url);
    if (conflicting_lengths(c)) {
        openai_error_set(&e, 400, "invalid_request_error", NULL, NULL,
                         "the request has two Content-Length headers that disagree");
        return send_error(c, call, &e);
    }
    if (!strcmp(method, "OPTIONS") && call->origin) return answer_preflight(c, call);
    enum MHD_Result rc;
    if (!strcmp(method, "GET") && answer_dashboard(c, call, url, &rc)) return rc;
    /* with a key set, nothing but /health tells a stranger what exists */
    if (check_key(server, c, call->route, &e)) return send_error(c, call, &e);
    if (call->route == ROUTE_NONE) {
        openai_error_set(&e, 404, "invalid_request_error", NULL, "not_found", "no endpoint %s %s",
                         method, url);
        return send_error(c, call, &e);
    }
    if (refused_while_draining(server, call, &e)) return send_error(c, call, &e);
    if (call->route == ROUTE_HEALTH) return answer_health(server, c, call);
    if (call->route == ROUTE_METRICS)
        return send_text(c, call, 200, "text/plain; version=0.0.4",
                         fleet_metrics_text(server->fleet));
    if (call->route == ROUTE_MODELS || call->route == ROUTE_MODEL)
        return answer_models(server, c, call, url);
    if (call->route == ROUTE_STUCK)
        return send_text(c, call, 200, "application/json", fleet_stuck_json(server->fleet));
    if (call->route == ROUTE_CLUSTER)
        return send_text(c, call, 200, "application/json",
                         strcmp(url, "/v1/cluster") != 0 ? fleet_history_json(server->fleet)
                                                         : fleet_json(server->fleet));
    if (call->route == ROUTE_ADMIN && !call->post)
        return answer_admin(server, c, call, url, method);
    return MHD_YES; /* a completion: the body comes next */
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **state) {
    struct http_server *server = cls;
    struct http_call *call = *state;
    (void)version;
    if (!call) {
        call = calloc(1, sizeof(*call));
        if (!call) return MHD_NO;
        *state = call;
        call->start_us = clock_now_us();
        call->server = server;
        /* a POST may be refused before its body is read (the connection
         * closes then); anything else is answered once the request is
         * whole, which keeps the connection open for the next one */
        call->post = !strcmp(method, "POST");
        return call->post ? first_call(server, c, url, method, call) : MHD_YES;
    }
    if (call->status) { /* answered already (an error before the body): drop the body */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (call->body.length + *upload_data_size > server->params->max_body_bytes)
            call->too_large = 1;
        else if (runner_buffer_append(&call->body, upload_data, *upload_data_size))
            return MHD_NO;
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (!call->post) return first_call(server, c, url, method, call);
    if (call->route == ROUTE_FAULT) return answer_fault(server, c, call);
    if (call->route == ROUTE_ADMIN) return answer_admin(server, c, call, url, method);
    if (call->route == ROUTE_TOKENIZE || call->route == ROUTE_DETOKENIZE)
        return answer_tokens(server, c, call);
    if (call->route == ROUTE_COUNT) return answer_count(server, c, call);
    if (!call->request) return start_completion(server, c, call);
    return answer_when_ready(c, call); /* resumed: the answer may be ready */
}

/* --log-requests: one line per finished call, without its prompt or output
 * (they may be private). ttft (the first token's wait, from first_token_us)
 * is 0 for a call that produced no token. */
static void log_request(struct MHD_Connection *c, const struct http_call *call,
                        const struct gateway_request *r, const struct openai_usage *usage,
                        uint64_t first, int status) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char client[INET6_ADDRSTRLEN] = "";
    if (info && info->client_addr && info->client_addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)info->client_addr)->sin_addr, client,
                  sizeof(client));
    else if (info && info->client_addr && info->client_addr->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)info->client_addr)->sin6_addr, client,
                  sizeof(client));
    uint64_t now = clock_now_us();
    const char *model = call->model ? call->model : "";
    struct log_field fields[] = {
        {"id", r ? r->response_id : "", 0},
        {"model", r ? r->served->name : model, 0},
        {"status", NULL, status},
        {"prompt_tokens", NULL, usage ? usage->prompt_tokens : 0},
        {"generated_tokens", NULL, usage ? usage->completion_tokens : 0},
        {"ttft", NULL, first > call->start_us ? (double)(first - call->start_us) * 1e-6 : 0.0},
        {"duration", NULL, (double)(now - call->start_us) * 1e-6},
        {"client", client, 0},
    };
    log_event_fields(LOG_LEVEL_INFO, "request", "finished", fields,
                     (int)(sizeof(fields) / sizeof(fields[0])));
}

/* The request is over for MHD (answered, or the client went away). */
static void completed(void *cls, struct MHD_Connection *c, void **state,
                      enum MHD_RequestTerminationCode why) {
    struct http_server *server = cls;
    struct http_call *call = *state;
    if (!call) return;
    struct gateway_request *r = call->request;
    if (r) {
        pthread_mutex_lock(&r->lock);
        r->reader = NULL;
        int abandoned = !r->done || why != MHD_REQUEST_TERMINATED_COMPLETED_OK;
        r->abandoned = abandoned;
        if (!r->done) r->done = 1;
        struct openai_usage usage = gateway_request_usage(r);
        uint64_t first_token_us = r->first_token_us;
        pthread_mutex_unlock(&r->lock);
        /* every choice goes with the client */
        if (abandoned) fleet_instance_cancel(server->fleet, r, NULL);
        const char *model = r->served->name, *instance = r->instance_id;
        gateway_observe_tokens(server->metrics, model, instance, 0, usage.completion_tokens);
        gateway_observe_cached(server->metrics, model, instance, usage.cached_tokens);
        gateway_observe_request(server->metrics, model, abandoned ? 499 : call->status);
        gateway_observe_finished(server->metrics, model, instance,
                                 (double)(clock_now_us() - r->arrival_us) * 1e-6,
                                 usage.cached_tokens);
        if (server->params->log_requests)
            log_request(c, call, r, &usage, first_token_us, abandoned ? 499 : call->status);
        gateway_request_release(r);
    } else if (call->status) {
        gateway_observe_request(server->metrics, call->model ? call->model : "", call->status);
        if (server->params->log_requests) log_request(c, call, NULL, NULL, 0, call->status);
    }
    if (call->counted) atomic_fetch_sub(&server->active, 1);
    runner_buffer_free(&call->body);
    free(call);
    *state = NULL;
}

/* The daemon closed a connection: its address holds one fewer. */
static void connection_closed(void *cls, struct MHD_Connection *c, void **socket_context,
                              enum MHD_ConnectionNotificationCode code) {
    (void)socket_context;
    if (code != MHD_CONNECTION_NOTIFY_CLOSED) return;
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    http_screen_closed(cls, info ? info->client_addr : NULL);
}

/* Connections at once: what the descriptor limit leaves after the
 * gateway's own files and runner sockets, so that accepting one more never
 * fails for want of a descriptor. */
static unsigned connection_limit(void) {
    struct rlimit limit;
    rlim_t n = 4096;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
        limit.rlim_cur < n + 64)
        n = limit.rlim_cur > 128 ? limit.rlim_cur - 64 : limit.rlim_cur / 2;
    return (unsigned)n;
}

/* The listening socket on host:port (port 0: any free one); -1 with err. */
static int listen_on(const struct http_server *server, int *port, char *err, size_t errlen) {
    struct sockaddr_in address = {.sin_family = AF_INET,
                                  .sin_port = htons((uint16_t)server->params->port)};
    const char *host = server->params->host;
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &address.sin_addr) != 1) {
        snprintf(err, errlen, "--host %s is not an IPv4 address", server->params->host);
        return -1;
    }
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    socklen_t length = sizeof(address);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(fd, (struct sockaddr *)&address, sizeof(address)) || listen(fd, 1024) ||
        getsockname(fd, (struct sockaddr *)&address, &length)) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", server->params->host,
                 server->params->port, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    *port = ntohs(address.sin_port);
    return fd;
}

int http_start(struct http_server *server, char *err, size_t errlen) {
    int timeout = server->params->connection_timeout_seconds > 0
                      ? server->params->connection_timeout_seconds
                      : HTTP_CONNECTION_TIMEOUT;
    int per_client = server->params->max_client_connections > 0
                         ? server->params->max_client_connections
                         : HTTP_CLIENT_CONNECTIONS;
    int fd = listen_on(server, &server->port, err, errlen);
    if (fd < 0) return -1;
    /* poll, not epoll: libmicrohttpd 0.9.75's epoll loop misses a client's
     * close that arrives with its last bytes, and such connections stayed
     * in CLOSE_WAIT until the timeout (430 of 500 half-sent requests); the
     * connections come from the screen (screen.c), not a socket of its own */
    server->daemon = MHD_start_daemon(
        MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_NO_LISTEN_SOCKET |
            MHD_USE_ERROR_LOG,
        0, NULL, NULL, handle, server, MHD_OPTION_NOTIFY_COMPLETED, completed, server,
        MHD_OPTION_NOTIFY_CONNECTION, connection_closed, server, MHD_OPTION_CONNECTION_LIMIT,
        connection_limit(), MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)per_client,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)timeout, MHD_OPTION_END);
    if (!server->daemon) {
        snprintf(err, errlen, "cannot start the HTTP server");
        close(fd);
        return -1;
    }
    if (http_screen_start(server, fd, per_client, err, errlen)) {
        close(fd);
        return -1;
    }
    return 0;
}

void http_stop(struct http_server *server) {
    http_screen_stop(server); /* nothing new reaches the daemon from here */
    if (server->daemon) MHD_stop_daemon(server->daemon);
    http_screen_free(server);
    server->daemon = NULL;
}
