/* observe.c -- what the gateway measures, in Prometheus families: requests
 * by status, tokens in and out, time to first token and inter-token
 * latency, and each runner's queue, running sequences, KV blocks, step
 * time and restarts (from its heartbeats); and lockstep_build_info, which
 * build answers. */
#include "gateway/core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seconds: 1 ms to 60 s, roughly doubling. */
static const double latency_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                        0.5,   1,      2.5,   5,    10,    30,   60};
#define N_BOUNDS ((int)(sizeof(latency_bounds) / sizeof(latency_bounds[0])))

/* Seconds: detection and recovery, around the default 5 s watchdog. */
static const double fault_bounds[] = {0.05, 0.1, 0.25, 0.5, 1,  1.5, 2,  2.5, 3, 3.5,
                                      4,    5,   6,    8,   10, 15,  20, 30,  60};
#define N_FAULT_BOUNDS ((int)(sizeof(fault_bounds) / sizeof(fault_bounds[0])))

/* Seconds: 10 us to 100 ms, for the gateway's own work per token. */
static const double overhead_bounds[] = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
                                         1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1};
#define N_OVERHEAD_BOUNDS ((int)(sizeof(overhead_bounds) / sizeof(overhead_bounds[0])))

int gateway_metrics_init(struct gateway_metrics *m) {
    struct metrics_registry *r = &m->registry;
    char err[200];
    if (metrics_registry_init(r)) return -1;
    m->requests =
        metrics_register_counter(r, "lockstep_requests_total", "HTTP requests by model and status",
                                 "model", "status", err, sizeof(err));
    m->prompt_tokens =
        metrics_register_counter(r, "lockstep_prompt_tokens_total", "prompt tokens received",
                                 "model", "instance", err, sizeof(err));
    m->cached_tokens = metrics_register_counter(
        r, "lockstep_prompt_tokens_cached_total",
        "prompt tokens found in the runner's prefix cache (not computed again)", "model",
        "instance", err, sizeof(err));
    m->kv_cached = metrics_register_gauge(
        r, "lockstep_kv_blocks_cached",
        "KV cache blocks in the prefix cache (held by sequences or evictable)", "model", "instance",
        err, sizeof(err));
    m->generated_tokens =
        metrics_register_counter(r, "lockstep_generated_tokens_total", "tokens generated", "model",
                                 "instance", err, sizeof(err));
    m->time_to_first_token = metrics_register_histogram(
        r, "lockstep_time_to_first_token_seconds", "from arrival to the first token", "model",
        "instance", latency_bounds, N_BOUNDS, err, sizeof(err));
    m->inter_token_latency = metrics_register_histogram(
        r, "lockstep_inter_token_latency_seconds", "between two tokens of a stream", "model",
        "instance", latency_bounds, N_BOUNDS, err, sizeof(err));
    m->queue_depth = metrics_register_gauge(r, "lockstep_queue_depth",
                                            "requests waiting for admission in the runner", "model",
                                            "instance", err, sizeof(err));
    m->running =
        metrics_register_gauge(r, "lockstep_running_sequences", "sequences holding KV blocks",
                               "model", "instance", err, sizeof(err));
    m->kv_used = metrics_register_gauge(r, "lockstep_kv_blocks_used", "KV cache blocks in use",
                                        "model", "instance", err, sizeof(err));
    /* not "_total": that suffix is a counter's (promtool flags a gauge with it) */
    m->kv_total =
        metrics_register_gauge(r, "lockstep_kv_blocks_capacity", "KV cache blocks in the pool",
                               "model", "instance", err, sizeof(err));
    m->step_seconds =
        metrics_register_histogram(r, "lockstep_step_seconds", "duration of a runner step", "model",
                                   "instance", latency_bounds, N_BOUNDS, err, sizeof(err));
    m->restarts = metrics_register_counter(r, "lockstep_runner_restarts_total",
                                           "runners restarted after they exited or failed", "model",
                                           "instance", err, sizeof(err));
    m->overhead = metrics_register_histogram(
        r, "lockstep_gateway_overhead_seconds",
        "from a token's frame arriving from the runner to its bytes going to the client socket",
        "model", "instance", overhead_bounds, N_OVERHEAD_BOUNDS, err, sizeof(err));
    m->stuck = metrics_register_counter(r, "lockstep_stuck_detections_total",
                                        "runners the watchdog found stuck", "model", "instance",
                                        err, sizeof(err));
    m->detection_seconds = metrics_register_histogram(
        r, "lockstep_detection_seconds", "from a stuck runner's last progress to its detection",
        "model", "instance", fault_bounds, N_FAULT_BOUNDS, err, sizeof(err));
    m->recovery_seconds = metrics_register_histogram(
        r, "lockstep_recovery_seconds",
        "from a runner's death or stuck detection until its replacement is ready", "model",
        "instance", fault_bounds, N_FAULT_BOUNDS, err, sizeof(err));
    m->moves = metrics_register_counter(r, "lockstep_moves_total",
                                        "live moves of an instance, by outcome (done, failed)",
                                        "model", "outcome", err, sizeof(err));
    m->move_seconds = metrics_register_histogram(
        r, "lockstep_move_seconds", "from a move's start until its new placement took over",
        "model", NULL, fault_bounds, N_FAULT_BOUNDS, err, sizeof(err));
    m->host_up = metrics_register_gauge(r, "lockstep_host_up",
                                        "1 while a host's probes answer, 0 once it is lost", "host",
                                        NULL, err, sizeof(err));
    m->instance_state = metrics_register_gauge(
        r, "lockstep_instance_state", "1 for the state an instance is in, 0 for the others",
        "instance", "state", err, sizeof(err));
    m->queue_seconds = metrics_register_histogram(
        r, "lockstep_queue_seconds",
        "from a request's arrival until it was first sent to a ready runner", "model", "instance",
        latency_bounds, N_BOUNDS, err, sizeof(err));
    m->request_seconds = metrics_register_histogram(
        r, "lockstep_request_duration_seconds", "from a request's arrival to the end of its answer",
        "model", NULL, latency_bounds, N_BOUNDS, err, sizeof(err));
    m->prefix_hits = metrics_register_counter(
        r, "lockstep_prefix_cache_hits_total",
        "requests whose prompt began with blocks found in the runner's prefix cache", "model",
        "instance", err, sizeof(err));
    m->oldest_request = metrics_register_gauge(
        r, "lockstep_oldest_request_seconds",
        "age of the oldest request an instance holds (0: none): one that stops moving shows here",
        "model", "instance", err, sizeof(err));
    return m->requests && m->cached_tokens && m->kv_cached && m->restarts && m->step_seconds &&
                   m->overhead && m->stuck && m->detection_seconds && m->recovery_seconds &&
                   m->moves && m->move_seconds && m->host_up && m->instance_state &&
                   m->queue_seconds && m->request_seconds && m->prefix_hits && m->oldest_request
               ? 0
               : -1;
}

void gateway_metrics_free(struct gateway_metrics *m) {
    metrics_registry_free(&m->registry);
}

void gateway_observe_instance(struct gateway_metrics *m, const char *model, const char *instance,
                              const char *const *states, int n_states) {
    struct metrics_metric *families[] = {m->prompt_tokens,
                                         m->cached_tokens,
                                         m->kv_cached,
                                         m->generated_tokens,
                                         m->queue_depth,
                                         m->running,
                                         m->kv_used,
                                         m->kv_total,
                                         m->step_seconds,
                                         m->restarts,
                                         m->overhead,
                                         m->stuck,
                                         m->detection_seconds,
                                         m->recovery_seconds,
                                         m->queue_seconds,
                                         m->prefix_hits,
                                         m->oldest_request,
                                         m->time_to_first_token,
                                         m->inter_token_latency};
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
        metrics_series_get(families[i], model, instance);
    for (int k = 0; k < n_states; k++) metrics_series_get(m->instance_state, instance, states[k]);
    metrics_series_get(m->moves, model, "done");
    metrics_series_get(m->moves, model, "failed");
    metrics_series_get(m->move_seconds, model, NULL);
    metrics_series_get(m->request_seconds, model, NULL);
}

void gateway_observe_state(struct gateway_metrics *m, const char *model, const char *instance,
                           const char *const *states, int n_states, int k, double oldest) {
    for (int i = 0; i < n_states; i++)
        metrics_set_at(m->instance_state, instance, states[i], i == k);
    metrics_set_at(m->oldest_request, model, instance, oldest);
}

void gateway_observe_host(struct gateway_metrics *m, const char *host, int up) {
    metrics_set_at(m->host_up, host, NULL, up);
}

void gateway_observe_move(struct gateway_metrics *m, const char *model, int done, double seconds) {
    metrics_add_at(m->moves, model, done ? "done" : "failed", 1);
    if (done) metrics_observe_at(m->move_seconds, model, NULL, seconds);
}

void gateway_observe_queued(struct gateway_metrics *m, const char *model, const char *instance,
                            double seconds) {
    metrics_observe_at(m->queue_seconds, model, instance, seconds);
}

void gateway_observe_finished(struct gateway_metrics *m, const char *model, const char *instance,
                              double seconds, int cached) {
    metrics_observe_at(m->request_seconds, model, NULL, seconds);
    if (cached > 0) metrics_add_at(m->prefix_hits, model, instance, 1);
}

void gateway_observe_request(struct gateway_metrics *m, const char *model, int status) {
    char text[16];
    snprintf(text, sizeof(text), "%d", status);
    metrics_add_at(m->requests, model, text, 1);
}

void gateway_observe_tokens(struct gateway_metrics *m, const char *model, const char *instance,
                            int prompt, int generated) {
    if (prompt) metrics_add_at(m->prompt_tokens, model, instance, prompt);
    if (generated) metrics_add_at(m->generated_tokens, model, instance, generated);
}

void gateway_observe_cached(struct gateway_metrics *m, const char *model, const char *instance,
                            int cached) {
    if (cached) metrics_add_at(m->cached_tokens, model, instance, cached);
}

void gateway_observe_latency(struct gateway_metrics *m, const char *model, const char *instance,
                             double ttft, double itl) {
    if (ttft >= 0) metrics_observe_at(m->time_to_first_token, model, instance, ttft);
    if (itl >= 0) metrics_observe_at(m->inter_token_latency, model, instance, itl);
}

void gateway_observe_heartbeat(struct gateway_metrics *m, const char *model, const char *instance,
                               const struct runner_heartbeat *h) {
    metrics_set_at(m->queue_depth, model, instance, h->n_waiting);
    metrics_set_at(m->running, model, instance, h->n_running);
    metrics_set_at(m->kv_used, model, instance, h->kv_blocks_used);
    metrics_set_at(m->kv_total, model, instance, h->kv_blocks_total);
    metrics_set_at(m->kv_cached, model, instance, h->kv_blocks_cached);
    metrics_observe_at(m->step_seconds, model, instance, (double)(h->end_us - h->start_us) * 1e-6);
}

void gateway_observe_restart(struct gateway_metrics *m, const char *model, const char *instance) {
    metrics_add_at(m->restarts, model, instance, 1);
}

void gateway_observe_overhead(struct gateway_metrics *m, const char *model, const char *instance,
                              double seconds) {
    metrics_observe_at(m->overhead, model, instance, seconds);
}

void gateway_observe_stuck(struct gateway_metrics *m, const char *model, const char *instance,
                           double detection_seconds) {
    metrics_add_at(m->stuck, model, instance, 1);
    metrics_observe_at(m->detection_seconds, model, instance, detection_seconds);
}

void gateway_observe_recovery(struct gateway_metrics *m, const char *model, const char *instance,
                              double seconds) {
    metrics_observe_at(m->recovery_seconds, model, instance, seconds);
}

/* lockstep_build_info, first: Prometheus's info-metric idiom (a gauge of 1
 * whose labels say what runs). It has one more label than a registered
 * family may have, and never changes, so it is written here; the version and
 * the commit (digits, dots, hex, "-dirty") need no escaping. */
static int build_info_text(char *text, size_t size) {
    return snprintf(text, size,
                    "# HELP lockstep_build_info the lockstep build serving: version, git commit, "
                    "runner protocol version\n"
                    "# TYPE lockstep_build_info gauge\n"
                    "lockstep_build_info{version=\"%s\",commit=\"%s\",protocol=\"%d\"} 1\n",
                    version_string(), version_commit(), RUNNER_PROTOCOL_VERSION);
}

char *gateway_metrics_render(struct gateway_metrics *m) {
    size_t length;
    char *families = metrics_render(&m->registry, &length);
    if (families == NULL) return NULL;
    char info[512];
    int n = build_info_text(info, sizeof(info));
    char *text = n > 0 && (size_t)n < sizeof(info) ? malloc((size_t)n + length + 1) : NULL;
    if (text != NULL) {
        memcpy(text, info, (size_t)n);
        memcpy(text + n, families, length + 1);
    }
    free(families);
    return text;
}
