/* metrics.c -- the gateway's Prometheus metrics registry and its text
 * exposition (format 0.0.4), behind GET /metrics.
 *
 * A registry is a list of families; a family is a fixed table of series
 * pointers, so a series never moves once created and a caller may keep its
 * handle. One mutex per registry guards everything: updates are a few
 * instructions, a render of a few hundred lines takes microseconds, and a
 * single lock keeps every count exact under any number of threads.
 * Histogram buckets are stored per bucket and summed into Prometheus's
 * cumulative counts only when rendering, so an observation touches one
 * bucket. */
#include "gateway/core/metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One tuple of label values and what has been measured for it. */
struct metrics_series {
    struct metrics_metric *metric;    /* the family it belongs to */
    char *values[METRICS_LABELS_MAX]; /* label values (malloc'ed), NULL past n_labels */
    double value;                     /* counter or gauge value; histogram: sum of observations */
    uint64_t count;                   /* histogram: number of observations */
    uint64_t *buckets;                /* histogram (n_bounds): observations in (bounds[i-1],
                                         bounds[i]], not cumulative; NULL for the others */
};

#define METRICS_NAME_SIZE (METRICS_NAME_MAX + 1) /* bytes of a name buffer */

/* One metric family. */
struct metrics_metric {
    struct metrics_registry *registry;                  /* owner: its lock guards the series */
    enum metrics_type type;                             /* counter, gauge or histogram */
    char name[METRICS_NAME_SIZE];                       /* family name */
    char *help;                                         /* help text (malloc'ed), may be "" */
    int n_labels;                                       /* label names in use, 0..2 */
    char labels[METRICS_LABELS_MAX][METRICS_NAME_SIZE]; /* (n_labels) label names */
    int n_bounds;                                       /* histogram: finite bucket bounds */
    double *bounds;                                     /* (n_bounds) increasing, or NULL */
    int n_series;                                       /* series created so far */
    struct metrics_series *series[METRICS_SERIES_MAX];  /* (n_series) in creation order */
};

/* ------------------------------ registry -------------------------------- */

int metrics_registry_init(struct metrics_registry *registry) {
    memset(registry, 0, sizeof *registry);
    return pthread_mutex_init(&registry->lock, NULL) == 0 ? 0 : -1;
}

static void metrics_series_free(struct metrics_series *series) {
    if (series == NULL) return;
    for (int i = 0; i < METRICS_LABELS_MAX; i++) free(series->values[i]);
    free(series->buckets);
    free(series);
}

static void metrics_metric_free(struct metrics_metric *metric) {
    for (int i = 0; i < metric->n_series; i++) metrics_series_free(metric->series[i]);
    free(metric->help);
    free(metric->bounds);
    free(metric);
}

void metrics_registry_free(struct metrics_registry *registry) {
    for (int i = 0; i < registry->n_metrics; i++) metrics_metric_free(registry->metrics[i]);
    for (int i = 0; i < registry->n_gone; i++) {
        free(registry->gone[i].label);
        free(registry->gone[i].value);
    }
    free(registry->metrics);
    pthread_mutex_destroy(&registry->lock);
    memset(registry, 0, sizeof *registry);
}

/* ------------------------------ validation ------------------------------ */

/* 1 if name is a valid metric name (colons allowed) or label name (not). */
static int metrics_valid_name(const char *name, int allow_colon) {
    if (name[0] == '\0' || (name[0] >= '0' && name[0] <= '9')) return 0;
    for (const char *p = name; *p; p++) {
        int ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                 *p == '_' || (allow_colon && *p == ':');
        if (!ok) return 0;
    }
    return 1;
}

/* The i-th sample name a family of this type and name writes (i = 0 is the
 * family name itself, which HELP and TYPE use); 0 past the last. */
static int metrics_owned_name(const char *name, enum metrics_type type, int i, char *buf,
                              size_t size) {
    static const char *const suffixes[] = {"", "_bucket", "_sum", "_count"};
    int n = type == METRICS_HISTOGRAM ? 4 : 1;
    if (i >= n) return 0;
    snprintf(buf, size, "%s%s", name, suffixes[i]);
    return 1;
}

/* 1 if a family (name, type) would share a name with an existing family. */
static int metrics_name_taken(const struct metrics_registry *registry, const char *name,
                              enum metrics_type type, char *clash, size_t clash_size) {
    char mine[METRICS_NAME_MAX + 16], theirs[METRICS_NAME_MAX + 16];
    for (int m = 0; m < registry->n_metrics; m++) {
        const struct metrics_metric *other = registry->metrics[m];
        for (int i = 0; metrics_owned_name(name, type, i, mine, sizeof mine); i++) {
            for (int j = 0; metrics_owned_name(other->name, other->type, j, theirs, sizeof theirs);
                 j++) {
                if (strcmp(mine, theirs) == 0) {
                    snprintf(clash, clash_size, "%s", other->name);
                    return 1;
                }
            }
        }
    }
    return 0;
}

/* Checks one label name; 0, or -1 with err. */
static int metrics_check_label(const char *name, const char *label, enum metrics_type type,
                               char *err, size_t errlen) {
    if (strlen(label) > METRICS_NAME_MAX || !metrics_valid_name(label, 0)) {
        snprintf(err, errlen, "metrics: %s: label name \"%s\" is not [a-zA-Z_][a-zA-Z0-9_]*", name,
                 label);
        return -1;
    }
    if (strncmp(label, "__", 2) == 0) {
        snprintf(err, errlen, "metrics: %s: label name \"%s\" starts with the reserved \"__\"",
                 name, label);
        return -1;
    }
    if (type == METRICS_HISTOGRAM && strcmp(label, "le") == 0) {
        snprintf(err, errlen, "metrics: %s: label name \"le\" is reserved for histogram buckets",
                 name);
        return -1;
    }
    return 0;
}

/* Checks a family's name and label names; 0, or -1 with err. */
static int metrics_check_names(const struct metrics_registry *registry, const char *name,
                               enum metrics_type type, const char *label0, const char *label1,
                               char *err, size_t errlen) {
    char clash[METRICS_NAME_MAX + 1];
    if (name == NULL || strlen(name) > METRICS_NAME_MAX || !metrics_valid_name(name, 1)) {
        snprintf(err, errlen,
                 "metrics: metric name \"%s\" is not [a-zA-Z_:][a-zA-Z0-9_:]* of at most %d bytes",
                 name ? name : "(null)", METRICS_NAME_MAX);
        return -1;
    }
    if (metrics_name_taken(registry, name, type, clash, sizeof clash)) {
        snprintf(err, errlen, "metrics: metric name \"%s\" collides with metric \"%s\"", name,
                 clash);
        return -1;
    }
    if (label0 == NULL && label1 != NULL) {
        snprintf(err, errlen, "metrics: %s: label1 \"%s\" given without label0", name, label1);
        return -1;
    }
    if (label0 != NULL && metrics_check_label(name, label0, type, err, errlen) != 0) return -1;
    if (label1 != NULL && metrics_check_label(name, label1, type, err, errlen) != 0) return -1;
    if (label0 != NULL && label1 != NULL && strcmp(label0, label1) == 0) {
        snprintf(err, errlen, "metrics: %s: label name \"%s\" given twice", name, label0);
        return -1;
    }
    return 0;
}

/* Checks histogram bounds; 0, or -1 with err. */
static int metrics_check_bounds(const char *name, const double *bounds, int n_bounds, char *err,
                                size_t errlen) {
    if (n_bounds < 0 || n_bounds > METRICS_BUCKETS_MAX || (n_bounds > 0 && bounds == NULL)) {
        snprintf(err, errlen, "metrics: %s: %d bucket bounds (allowed: 0..%d)", name, n_bounds,
                 METRICS_BUCKETS_MAX);
        return -1;
    }
    for (int i = 0; i < n_bounds; i++) {
        if (!isfinite(bounds[i])) {
            snprintf(err, errlen, "metrics: %s: bucket bound %d is %g, not finite", name, i,
                     bounds[i]);
            return -1;
        }
        if (i > 0 && !(bounds[i] > bounds[i - 1])) {
            snprintf(err, errlen, "metrics: %s: bucket bound %d (%g) is not above bound %d (%g)",
                     name, i, bounds[i], i - 1, bounds[i - 1]);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------ registration ---------------------------- */

/* Creates a series of metric with copies of its n_values label values (as
 * many as the metric has label names); NULL if memory runs out. */
static struct metrics_series *metrics_series_create(struct metrics_metric *metric,
                                                    const char *const values[], int n_values) {
    struct metrics_series *series = calloc(1, sizeof *series);
    if (series == NULL) return NULL;
    series->metric = metric;
    for (int i = 0; i < n_values; i++) {
        series->values[i] = strdup(values[i]);
        if (series->values[i] == NULL) goto fail;
    }
    if (metric->type == METRICS_HISTOGRAM && metric->n_bounds > 0) {
        series->buckets = calloc((size_t)metric->n_bounds, sizeof *series->buckets);
        if (series->buckets == NULL) goto fail;
    }
    return series;
fail:
    metrics_series_free(series);
    return NULL;
}

/* Builds a family from checked arguments; NULL if memory runs out. */
static struct metrics_metric *metrics_metric_create(struct metrics_registry *registry,
                                                    enum metrics_type type, const char *name,
                                                    const char *help, const char *label0,
                                                    const char *label1, const double *bounds,
                                                    int n_bounds) {
    struct metrics_metric *metric = calloc(1, sizeof *metric);
    if (metric == NULL) return NULL;
    metric->registry = registry;
    metric->type = type;
    snprintf(metric->name, sizeof metric->name, "%s", name);
    metric->help = strdup(help ? help : "");
    if (metric->help == NULL) goto fail;
    if (label0 != NULL)
        snprintf(metric->labels[metric->n_labels++], METRICS_NAME_SIZE, "%s", label0);
    if (label1 != NULL)
        snprintf(metric->labels[metric->n_labels++], METRICS_NAME_SIZE, "%s", label1);
    if (n_bounds > 0) {
        metric->bounds = malloc((size_t)n_bounds * sizeof *metric->bounds);
        if (metric->bounds == NULL) goto fail;
        memcpy(metric->bounds, bounds, (size_t)n_bounds * sizeof *bounds);
    }
    metric->n_bounds = n_bounds;
    /* A family without labels has its one series from the start, so it
     * renders as 0 before the first update. */
    if (metric->n_labels == 0) {
        metric->series[0] = metrics_series_create(metric, NULL, 0);
        if (metric->series[0] == NULL) goto fail;
        metric->n_series = 1;
    }
    return metric;
fail:
    metrics_metric_free(metric);
    return NULL;
}

/* Appends metric to the registry's list; 0, or -1 if memory runs out. */
static int metrics_append(struct metrics_registry *registry, struct metrics_metric *metric) {
    if (registry->n_metrics == registry->capacity) {
        int capacity = registry->capacity ? registry->capacity * 2 : 16;
        struct metrics_metric **grown =
            realloc(registry->metrics, (size_t)capacity * sizeof(struct metrics_metric *));
        if (grown == NULL) return -1;
        registry->metrics = grown;
        registry->capacity = capacity;
    }
    registry->metrics[registry->n_metrics++] = metric;
    return 0;
}

/* What the three metrics_register_* share: checks, builds and appends a
 * family under the lock, so concurrent registrations see each other. */
static struct metrics_metric *metrics_register(struct metrics_registry *registry,
                                               enum metrics_type type, const char *name,
                                               const char *help, const char *label0,
                                               const char *label1, const double *bounds,
                                               int n_bounds, char *err, size_t errlen) {
    struct metrics_metric *metric = NULL;
    pthread_mutex_lock(&registry->lock);
    if (metrics_check_names(registry, name, type, label0, label1, err, errlen) != 0) goto done;
    if (type == METRICS_HISTOGRAM && metrics_check_bounds(name, bounds, n_bounds, err, errlen) != 0)
        goto done;
    metric = metrics_metric_create(registry, type, name, help, label0, label1, bounds, n_bounds);
    if (metric != NULL && metrics_append(registry, metric) != 0) {
        metrics_metric_free(metric);
        metric = NULL;
    }
    if (metric == NULL) snprintf(err, errlen, "metrics: %s: out of memory", name);
done:
    pthread_mutex_unlock(&registry->lock);
    return metric;
}

struct metrics_metric *metrics_register_counter(struct metrics_registry *registry, const char *name,
                                                const char *help, const char *label0,
                                                const char *label1, char *err, size_t errlen) {
    return metrics_register(registry, METRICS_COUNTER, name, help, label0, label1, NULL, 0, err,
                            errlen);
}

struct metrics_metric *metrics_register_gauge(struct metrics_registry *registry, const char *name,
                                              const char *help, const char *label0,
                                              const char *label1, char *err, size_t errlen) {
    return metrics_register(registry, METRICS_GAUGE, name, help, label0, label1, NULL, 0, err,
                            errlen);
}

struct metrics_metric *metrics_register_histogram(struct metrics_registry *registry,
                                                  const char *name, const char *help,
                                                  const char *label0, const char *label1,
                                                  const double *bounds, int n_bounds, char *err,
                                                  size_t errlen) {
    return metrics_register(registry, METRICS_HISTOGRAM, name, help, label0, label1, bounds,
                            n_bounds, err, errlen);
}

/* -------------------------------- series -------------------------------- */

/* 1 if series holds exactly these n_values label values. */
static int metrics_series_matches(const struct metrics_series *series, const char *const values[],
                                  int n_values) {
    for (int i = 0; i < n_values; i++) {
        if (strcmp(series->values[i], values[i]) != 0) return 0;
    }
    return 1;
}

/* 1 if metric has a label `label` whose value in `values` was dropped for
 * good (lock held). */
static int metrics_value_gone(const struct metrics_metric *metric, const char *const values[]) {
    const struct metrics_registry *registry = metric->registry;
    for (int g = 0; g < registry->n_gone; g++) {
        for (int l = 0; l < metric->n_labels; l++) {
            if (strcmp(metric->labels[l], registry->gone[g].label) == 0 &&
                strcmp(values[l], registry->gone[g].value) == 0)
                return 1;
        }
    }
    return 0;
}

/* The series for these label values, made at zero on first use; NULL when
 * the arguments do not fit the family, a value is gone, memory runs out or
 * the family is full (lock held). */
static struct metrics_series *metrics_find_locked(struct metrics_metric *metric, const char *value0,
                                                  const char *value1) {
    const char *values[METRICS_LABELS_MAX] = {value0, value1};
    int n_values = value0 == NULL ? 0 : value1 == NULL ? 1 : 2;
    if ((value0 == NULL && value1 != NULL) || n_values != metric->n_labels) return NULL;
    for (int i = 0; i < metric->n_series; i++) {
        if (metrics_series_matches(metric->series[i], values, n_values)) return metric->series[i];
    }
    if (metric->n_series == METRICS_SERIES_MAX || metrics_value_gone(metric, values)) return NULL;
    struct metrics_series *made = metrics_series_create(metric, values, n_values);
    if (made != NULL) metric->series[metric->n_series++] = made;
    return made;
}

struct metrics_series *metrics_series_get(struct metrics_metric *metric, const char *value0,
                                          const char *value1) {
    if (metric == NULL) return NULL;
    pthread_mutex_lock(&metric->registry->lock);
    struct metrics_series *found = metrics_find_locked(metric, value0, value1);
    pthread_mutex_unlock(&metric->registry->lock);
    return found;
}

/* Remembers that label=value is gone, the oldest memory making room (lock
 * held); -1 if memory runs out. */
static int metrics_remember_gone(struct metrics_registry *registry, const char *label,
                                 const char *value) {
    char *label_copy = strdup(label), *value_copy = strdup(value);
    if (label_copy == NULL || value_copy == NULL) {
        free(label_copy);
        free(value_copy);
        return -1;
    }
    if (registry->n_gone == METRICS_GONE_MAX) {
        free(registry->gone[0].label);
        free(registry->gone[0].value);
        memmove(&registry->gone[0], &registry->gone[1],
                (METRICS_GONE_MAX - 1) * sizeof registry->gone[0]);
        registry->n_gone--;
    }
    registry->gone[registry->n_gone].label = label_copy;
    registry->gone[registry->n_gone].value = value_copy;
    registry->n_gone++;
    return 0;
}

int metrics_drop(struct metrics_registry *registry, const char *label, const char *value) {
    int dropped = 0;
    pthread_mutex_lock(&registry->lock);
    if (metrics_remember_gone(registry, label, value) != 0) dropped = -1;
    for (int m = 0; m < registry->n_metrics && dropped >= 0; m++) {
        struct metrics_metric *metric = registry->metrics[m];
        int at = -1, kept = 0;
        for (int l = 0; l < metric->n_labels; l++)
            if (strcmp(metric->labels[l], label) == 0) at = l;
        if (at < 0) continue;
        for (int i = 0; i < metric->n_series; i++) {
            struct metrics_series *series = metric->series[i];
            if (strcmp(series->values[at], value) == 0) {
                metrics_series_free(series);
                dropped++;
            } else {
                metric->series[kept++] = series; /* creation order stays */
            }
        }
        metric->n_series = kept;
    }
    pthread_mutex_unlock(&registry->lock);
    return dropped;
}

/* The updates proper (lock held); 0, or -1 when they do not fit. */
static int metrics_add_locked(struct metrics_series *series, double delta) {
    enum metrics_type type = series->metric->type;
    if (!isfinite(delta) || type == METRICS_HISTOGRAM || (type == METRICS_COUNTER && delta < 0))
        return -1;
    series->value += delta;
    return 0;
}

static int metrics_set_locked(struct metrics_series *series, double value) {
    if (series->metric->type != METRICS_GAUGE) return -1;
    series->value = value;
    return 0;
}

static int metrics_observe_locked(struct metrics_series *series, double value) {
    const struct metrics_metric *metric = series->metric;
    if (metric->type != METRICS_HISTOGRAM || isnan(value)) return -1;
    int bucket = 0;
    while (bucket < metric->n_bounds && value > metric->bounds[bucket]) bucket++;
    if (bucket < metric->n_bounds) series->buckets[bucket]++;
    series->count++;
    series->value += value;
    return 0;
}

typedef int (*metrics_update_fn)(struct metrics_series *series, double x);

/* One update of a held series, under the lock. */
static int metrics_update(struct metrics_series *series, metrics_update_fn update, double x) {
    if (series == NULL) return -1;
    pthread_mutex_lock(&series->metric->registry->lock);
    int status = update(series, x);
    pthread_mutex_unlock(&series->metric->registry->lock);
    return status;
}

/* Lookup and update under one hold of the lock. */
static int metrics_update_at(struct metrics_metric *metric, const char *value0, const char *value1,
                             metrics_update_fn update, double x) {
    if (metric == NULL) return -1;
    pthread_mutex_lock(&metric->registry->lock);
    struct metrics_series *series = metrics_find_locked(metric, value0, value1);
    int status = series ? update(series, x) : -1;
    pthread_mutex_unlock(&metric->registry->lock);
    return status;
}

int metrics_add(struct metrics_series *series, double delta) {
    return metrics_update(series, metrics_add_locked, delta);
}

int metrics_set(struct metrics_series *series, double value) {
    return metrics_update(series, metrics_set_locked, value);
}

int metrics_observe(struct metrics_series *series, double value) {
    return metrics_update(series, metrics_observe_locked, value);
}

int metrics_add_at(struct metrics_metric *metric, const char *value0, const char *value1,
                   double delta) {
    return metrics_update_at(metric, value0, value1, metrics_add_locked, delta);
}

int metrics_set_at(struct metrics_metric *metric, const char *value0, const char *value1,
                   double value) {
    return metrics_update_at(metric, value0, value1, metrics_set_locked, value);
}

int metrics_observe_at(struct metrics_metric *metric, const char *value0, const char *value1,
                       double value) {
    return metrics_update_at(metric, value0, value1, metrics_observe_locked, value);
}

int metrics_read(struct metrics_series *series, double *value, uint64_t *count) {
    if (series == NULL) return -1;
    pthread_mutex_lock(&series->metric->registry->lock);
    if (value != NULL) *value = series->value;
    if (count != NULL) *count = series->count;
    pthread_mutex_unlock(&series->metric->registry->lock);
    return 0;
}

/* -------------------------------- render -------------------------------- */

/* A growing text buffer; after a failed allocation it stays failed and
 * ignores further appends. */
struct metrics_text {
    char *data;      /* NUL-terminated text (malloc'ed) */
    size_t length;   /* bytes before the NUL */
    size_t capacity; /* bytes allocated */
    int failed;      /* 1 once memory ran out */
};

static void metrics_text_append(struct metrics_text *text, const char *s, size_t n) {
    if (text->failed) return;
    if (text->length + n + 1 > text->capacity) {
        size_t capacity = text->capacity ? text->capacity : 4096;
        while (text->length + n + 1 > capacity) capacity *= 2;
        char *grown = realloc(text->data, capacity);
        if (grown == NULL) {
            text->failed = 1;
            return;
        }
        text->data = grown;
        text->capacity = capacity;
    }
    memcpy(text->data + text->length, s, n);
    text->length += n;
    text->data[text->length] = '\0';
}

static void metrics_text_puts(struct metrics_text *text, const char *s) {
    metrics_text_append(text, s, strlen(s));
}

/* Appends s with backslash and newline escaped, and the double quote too
 * when quote is set (label values; HELP text keeps its quotes). */
static void metrics_text_escaped(struct metrics_text *text, const char *s, int quote) {
    const char *run = s;
    for (const char *p = s; *p; p++) {
        const char *escape = NULL;
        if (*p == '\\')
            escape = "\\\\";
        else if (*p == '\n')
            escape = "\\n";
        else if (*p == '"' && quote)
            escape = "\\\"";
        if (escape == NULL) continue;
        metrics_text_append(text, run, (size_t)(p - run));
        metrics_text_puts(text, escape);
        run = p + 1;
    }
    metrics_text_puts(text, run);
}

/* Writes v the way Prometheus (Go's ParseFloat) reads it back exactly:
 * "NaN", "+Inf", "-Inf"; integers below 1e18 in plain digits ("-0" as
 * "0"); anything else with the fewest significant digits that round-trip. */
static void metrics_format_number(double v, char *buf, size_t size) {
    if (isnan(v)) {
        snprintf(buf, size, "NaN");
    } else if (isinf(v)) {
        snprintf(buf, size, v > 0 ? "+Inf" : "-Inf");
    } else if (v == 0) {
        snprintf(buf, size, "0");
    } else if (v == floor(v) && fabs(v) < 1e18) {
        snprintf(buf, size, "%.0f", v);
    } else {
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(buf, size, "%.*g", digits, v);
            if (strtod(buf, NULL) == v) break;
        }
    }
}

static void metrics_text_number(struct metrics_text *text, double v) {
    char buf[40];
    metrics_format_number(v, buf, sizeof buf);
    metrics_text_puts(text, buf);
}

static void metrics_text_count(struct metrics_text *text, uint64_t v) {
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    metrics_text_puts(text, buf);
}

/* Writes `name<suffix>{label="value",...,le="<le>"} ` (no braces when there
 * are no labels); le is NULL except for buckets. */
static void metrics_text_sample(struct metrics_text *text, const struct metrics_series *series,
                                const char *suffix, const char *le) {
    const struct metrics_metric *metric = series->metric;
    metrics_text_puts(text, metric->name);
    metrics_text_puts(text, suffix);
    if (metric->n_labels > 0 || le != NULL) {
        metrics_text_puts(text, "{");
        for (int i = 0; i < metric->n_labels; i++) {
            if (i > 0) metrics_text_puts(text, ",");
            metrics_text_puts(text, metric->labels[i]);
            metrics_text_puts(text, "=\"");
            metrics_text_escaped(text, series->values[i], 1);
            metrics_text_puts(text, "\"");
        }
        if (le != NULL) {
            metrics_text_puts(text, metric->n_labels > 0 ? ",le=\"" : "le=\"");
            metrics_text_puts(text, le);
            metrics_text_puts(text, "\"");
        }
        metrics_text_puts(text, "}");
    }
    metrics_text_puts(text, " ");
}

/* The _bucket lines (cumulative), _sum and _count of one histogram series. */
static void metrics_text_histogram(struct metrics_text *text, const struct metrics_series *series) {
    const struct metrics_metric *metric = series->metric;
    uint64_t cumulative = 0;
    char le[40];
    for (int i = 0; i < metric->n_bounds; i++) {
        cumulative += series->buckets[i];
        metrics_format_number(metric->bounds[i], le, sizeof le);
        metrics_text_sample(text, series, "_bucket", le);
        metrics_text_count(text, cumulative);
        metrics_text_puts(text, "\n");
    }
    metrics_text_sample(text, series, "_bucket", "+Inf");
    metrics_text_count(text, series->count);
    metrics_text_puts(text, "\n");
    metrics_text_sample(text, series, "_sum", NULL);
    metrics_text_number(text, series->value);
    metrics_text_puts(text, "\n");
    metrics_text_sample(text, series, "_count", NULL);
    metrics_text_count(text, series->count);
    metrics_text_puts(text, "\n");
}

static void metrics_text_family(struct metrics_text *text, const struct metrics_metric *metric) {
    static const char *const type_names[] = {"", "counter", "gauge", "histogram"};
    if (metric->help[0] != '\0') {
        metrics_text_puts(text, "# HELP ");
        metrics_text_puts(text, metric->name);
        metrics_text_puts(text, " ");
        metrics_text_escaped(text, metric->help, 0);
        metrics_text_puts(text, "\n");
    }
    metrics_text_puts(text, "# TYPE ");
    metrics_text_puts(text, metric->name);
    metrics_text_puts(text, " ");
    metrics_text_puts(text, type_names[metric->type]);
    metrics_text_puts(text, "\n");
    for (int i = 0; i < metric->n_series; i++) {
        const struct metrics_series *series = metric->series[i];
        if (metric->type == METRICS_HISTOGRAM) {
            metrics_text_histogram(text, series);
            continue;
        }
        metrics_text_sample(text, series, "", NULL);
        metrics_text_number(text, series->value);
        metrics_text_puts(text, "\n");
    }
}

char *metrics_render(struct metrics_registry *registry, size_t *length) {
    struct metrics_text text = {0};
    metrics_text_append(&text, "", 0); /* an empty registry renders as "" */
    pthread_mutex_lock(&registry->lock);
    for (int i = 0; i < registry->n_metrics; i++) metrics_text_family(&text, registry->metrics[i]);
    pthread_mutex_unlock(&registry->lock);
    if (text.failed) {
        free(text.data);
        return NULL;
    }
    if (length != NULL) *length = text.length;
    return text.data;
}
