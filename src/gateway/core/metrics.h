/* metrics.h -- the gateway's Prometheus metrics registry (internal to src/gateway).
 *
 * The gateway registers its metric families once at start (counters, gauges
 * and histograms, each with up to 2 label names), updates them from any
 * thread while it serves, and answers GET /metrics with metrics_render: the
 * Prometheus text exposition format, version 0.0.4 (send it with
 * METRICS_CONTENT_TYPE).
 *
 * A family with labels holds a small fixed set of series, one per distinct
 * tuple of label values, each created on first use; a family without labels
 * has exactly one series from the start. Label values must come from a
 * bounded set the gateway controls (configured model names, HTTP status
 * codes), never straight from client input: past METRICS_SERIES_MAX series a
 * family refuses new ones.
 *
 *     static const double ttft_bounds[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
 *     requests = metrics_register_counter(&registry, "lockstep_requests_total",
 *                                         "Requests answered.", "model", "status", err, n);
 *     ttft = metrics_register_histogram(&registry, "lockstep_time_to_first_token_seconds",
 *                                       "Seconds until the first token.", "model", NULL,
 *                                       ttft_bounds, 7, err, n);
 *     metrics_add(metrics_series_get(requests, "kjv2m", "200"), 1);
 *     metrics_observe(metrics_series_get(ttft, "kjv2m", NULL), 0.042);
 *
 * A hot path may look its series up once and keep the handle: a series lives
 * as long as its registry, unless metrics_drop removes it (series that may
 * be dropped are updated by label values, with the *_at forms). Every update takes the registry's
 * one mutex, so updates from many threads are exact and a render sees a consistent snapshot.
 * Numbers are printed with the C library in the "C" numeric locale (the gateway never calls
 * setlocale). */
#ifndef LOCKSTEP_GATEWAY_METRICS_H
#define LOCKSTEP_GATEWAY_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define METRICS_LABELS_MAX   2   /* label names per family */
#define METRICS_SERIES_MAX   256 /* label value tuples per family */
#define METRICS_BUCKETS_MAX  32  /* finite bucket bounds per histogram (+Inf comes on top) */
#define METRICS_NAME_MAX     128 /* bytes in a family or label name, without the NUL */
#define METRICS_GONE_MAX     256 /* dropped label values remembered (metrics_drop) */

/* What a family measures; decides which updates it accepts and how it renders. */
enum metrics_type {
    METRICS_COUNTER = 1,   /* only goes up: metrics_add with delta >= 0 */
    METRICS_GAUGE = 2,     /* goes up and down: metrics_set, metrics_add */
    METRICS_HISTOGRAM = 3, /* metrics_observe: _bucket{le=...}, _sum, _count */
};

struct metrics_metric; /* one family: name, help, type, label names, its series */
struct metrics_series; /* one tuple of label values of a family and its value(s) */

/* Every family the gateway exposes. */
struct metrics_registry {
    pthread_mutex_t lock; /* guards the families, their series and every value */
    struct metrics_metric *
        *metrics;  /* (n_metrics) families in registration order (= render order) */
    int n_metrics; /* families registered */
    int capacity;  /* entries allocated in metrics */
    struct {
        char *label;          /* label name (malloc'ed) */
        char *value;          /* its value, gone for good (malloc'ed) */
    } gone[METRICS_GONE_MAX]; /* (n_gone) dropped values, oldest first */
    int n_gone;               /* entries in gone */
};

/* Makes an empty registry; 0, or -1 if the mutex cannot be created. */
int metrics_registry_init(struct metrics_registry *registry);
/* Frees every family and series; handles taken from it become invalid. */
void metrics_registry_free(struct metrics_registry *registry);

/* Registers a family. name must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
 * [a-zA-Z_][a-zA-Z0-9_]* (not starting with "__", and not "le" for a
 * histogram); label0 and label1 may be NULL (label1 only when label0 is);
 * help is one line of text (may be "" or NULL for none). A name that
 * collides with another family's name or samples (a histogram "x" owns
 * x_bucket, x_sum and x_count) is refused. Histogram bounds are the upper
 * bounds of its buckets: 0..METRICS_BUCKETS_MAX finite values, strictly
 * increasing; the +Inf bucket is implied. Returns the family, owned by the
 * registry, or NULL with a message in err that names the bad field. */
struct metrics_metric *metrics_register_counter(struct metrics_registry *registry, const char *name,
                                                const char *help, const char *label0,
                                                const char *label1, char *err, size_t errlen);
struct metrics_metric *metrics_register_gauge(struct metrics_registry *registry, const char *name,
                                              const char *help, const char *label0,
                                              const char *label1, char *err, size_t errlen);
struct metrics_metric *metrics_register_histogram(struct metrics_registry *registry,
                                                  const char *name, const char *help,
                                                  const char *label0, const char *label1,
                                                  const double *bounds, int n_bounds, char *err,
                                                  size_t errlen);

/* The series of metric for these label values (one per label name, NULL for
 * the others), created with zero values on first use. NULL when metric is
 * NULL, the number of values does not match the label names, a value was
 * dropped (metrics_drop), memory runs out, or the family already holds
 * METRICS_SERIES_MAX series. Values are
 * bytes (UTF-8 expected); render escapes backslash, double quote and
 * newline. */
struct metrics_series *metrics_series_get(struct metrics_metric *metric, const char *value0,
                                          const char *value1);

/* Drops every series, in every family, whose label called `label` has
 * this value (an instance that is gone for good), so that label sets do not
 * grow without bound. The value is remembered (the last METRICS_GONE_MAX
 * of them): a late update for it, from a thread that has not heard yet,
 * neither revives the series nor touches freed memory when it goes through
 * the *_at forms below. Handles to dropped series become invalid. Returns
 * how many series went, or -1 (nothing dropped) if memory runs out. */
int metrics_drop(struct metrics_registry *registry, const char *label, const char *value);

/* Updates. Each returns 0, or -1 and changes nothing when series is NULL or
 * the update does not fit its type:
 * - metrics_add: counter (delta finite and >= 0) or gauge (delta finite);
 * - metrics_set: gauge only, any value (NaN and infinities render as such);
 * - metrics_observe: histogram only, value not NaN; counts into the first
 *   bucket whose bound is >= value (else only +Inf) and adds it to _sum.
 * Counters and gauges hold a double: integer counts are exact up to 2^53. */
int metrics_add(struct metrics_series *series, double delta);
int metrics_set(struct metrics_series *series, double value);
int metrics_observe(struct metrics_series *series, double value);

/* The same updates by label values: the series is looked up (made at zero
 * on first use) and updated under one hold of the lock, so a concurrent
 * metrics_drop cannot free it in between. Series that may be dropped are
 * updated only this way. -1 also when a value is gone or the series cannot
 * be made. */
int metrics_add_at(struct metrics_metric *metric, const char *value0, const char *value1,
                   double delta);
int metrics_set_at(struct metrics_metric *metric, const char *value0, const char *value1,
                   double value);
int metrics_observe_at(struct metrics_metric *metric, const char *value0, const char *value1,
                       double value);

/* Reads a series: value gets a counter's or gauge's value, or a histogram's
 * sum; count gets a histogram's number of observations (0 for the others).
 * Either may be NULL. 0, or -1 when series is NULL. */
int metrics_read(struct metrics_series *series, double *value, uint64_t *count);

/* The whole exposition text: for each family in registration order its
 * "# HELP" line (when help is not empty) and "# TYPE" line, then one sample
 * line per series in creation order (histograms: cumulative _bucket lines
 * in increasing le ending with le="+Inf", then _sum and _count). Numbers:
 * integers up to 1e18 without exponent, others with the fewest digits that
 * read back exactly, "+Inf", "-Inf" and "NaN". Returns a NUL-terminated
 * malloc'ed string (free it with free()), its length in *length when length
 * is not NULL, or NULL when memory runs out. */
char *metrics_render(struct metrics_registry *registry, size_t *length);

#endif
