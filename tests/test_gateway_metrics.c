/* test_gateway_metrics.c -- the gateway's Prometheus metrics registry.
 *
 * Renders after known updates and compares the exact text (a counter, a
 * gauge, a labelled counter whose values need escaping, histograms with
 * and without labels, every kind of number); checks every refusal and its
 * message; runs every rendered text through a small parser of the 0.0.4
 * text format (each line a HELP/TYPE comment or `name{labels} value` with
 * a float Prometheus reads); drops every series of one label value (a
 * gone instance) and no other; and updates from 4 threads x 100000
 * times, with a renderer running alongside, for exact totals.
 *
 * ctest-labels: concurrency */
#include "gateway/core/metrics.h"
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int same_text(const char *got, const char *want) {
    if (got != NULL && strcmp(got, want) == 0) return 1;
    fprintf(stderr, "--- want:\n%s--- got:\n%s---\n", want, got ? got : "(null)");
    return 0;
}

/* ------------------------------- parser --------------------------------- */

static int is_name_char(char c, int first, int allow_colon) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return 1;
    if (allow_colon && c == ':') return 1;
    return !first && c >= '0' && c <= '9';
}

/* Length of the metric (or label) name at s, 0 if there is none. */
static size_t name_length(const char *s, int allow_colon) {
    size_t n = 0;
    while (s[n] != '\0' && is_name_char(s[n], n == 0, allow_colon)) n++;
    return n;
}

static size_t digits_length(const char *s) {
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9') n++;
    return n;
}

/* 1 if the whole of s is a float as Prometheus writes and reads them:
 * NaN, +Inf, -Inf, or [+-]digits[.digits][e[+-]digits]. */
static int is_float(const char *s) {
    if (strcmp(s, "NaN") == 0 || strcmp(s, "+Inf") == 0 || strcmp(s, "-Inf") == 0) return 1;
    if (*s == '+' || *s == '-') s++;
    size_t whole = digits_length(s), fraction = 0;
    s += whole;
    if (*s == '.') {
        fraction = digits_length(s + 1);
        s += 1 + fraction;
    }
    if (whole + fraction == 0) return 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        size_t exponent = digits_length(s);
        if (exponent == 0) return 0;
        s += exponent;
    }
    return *s == '\0';
}

/* Parses `{name="value",...}` at s; returns the bytes read, 0 if malformed.
 * Inside values only \\, \" and \n escapes and no raw newline. */
static size_t labels_length(const char *s) {
    const char *p = s + 1;
    if (*s != '{') return 0;
    while (*p != '}') {
        size_t n = name_length(p, 0);
        if (n == 0 || p[n] != '=' || p[n + 1] != '"') return 0;
        p += n + 2;
        while (*p != '"') {
            if (*p == '\0' || *p == '\n') return 0;
            if (*p == '\\') {
                if (p[1] != '\\' && p[1] != '"' && p[1] != 'n') return 0;
                p++;
            }
            p++;
        }
        p++;
        if (*p == ',')
            p++;
        else if (*p != '}')
            return 0;
    }
    return (size_t)(p + 1 - s);
}

static int parser_quiet; /* 1 while testing the parser on bad input */

/* What the parser remembers of the families seen so far. */
struct parse_state {
    char families[64][METRICS_NAME_MAX + 1]; /* names with a TYPE line, in order */
    int n_families;                          /* entries in families */
    char type[16];                           /* type of the last family */
    int samples;                             /* sample lines read */
};

/* 1 if a sample called name belongs to the current family. */
static int in_current_family(const struct parse_state *st, const char *name, size_t n) {
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    if (st->n_families == 0) return 0;
    const char *family = st->families[st->n_families - 1];
    size_t f = strlen(family);
    if (n == f && strncmp(name, family, n) == 0) return strcmp(st->type, "histogram") != 0;
    if (strcmp(st->type, "histogram") != 0 || n <= f || strncmp(name, family, f) != 0) return 0;
    for (int i = 0; i < 3; i++) {
        if (n - f == strlen(suffixes[i]) && strncmp(name + f, suffixes[i], n - f) == 0) return 1;
    }
    return 0;
}

/* Checks one comment line; 0, or -1 with a message. */
static int parse_comment(struct parse_state *st, const char *line) {
    int help = strncmp(line, "# HELP ", 7) == 0, type = strncmp(line, "# TYPE ", 7) == 0;
    if (!help && !type) return 0; /* other comments are ignored by Prometheus */
    const char *name = line + 7;
    size_t n = name_length(name, 1);
    if (n == 0 || n > METRICS_NAME_MAX || (name[n] != ' ' && name[n] != '\0')) return -1;
    if (help) return 0;
    const char *kind = name + n + 1;
    if (strcmp(kind, "counter") != 0 && strcmp(kind, "gauge") != 0 &&
        strcmp(kind, "histogram") != 0)
        return -1;
    for (int i = 0; i < st->n_families; i++) {
        if (strlen(st->families[i]) == n && strncmp(st->families[i], name, n) == 0) return -1;
    }
    if (st->n_families == 64) return -1;
    memcpy(st->families[st->n_families], name, n);
    st->families[st->n_families++][n] = '\0';
    snprintf(st->type, sizeof st->type, "%s", kind);
    return 0;
}

/* Checks one sample line `name[{labels}] value`; 0, or -1. */
static int parse_sample(struct parse_state *st, const char *line) {
    size_t n = name_length(line, 1);
    if (n == 0 || !in_current_family(st, line, n)) return -1;
    const char *p = line + n;
    if (*p == '{') {
        size_t labels = labels_length(p);
        if (labels == 0) return -1;
        p += labels;
    }
    if (*p != ' ' || !is_float(p + 1)) return -1;
    st->samples++;
    return 0;
}

/* Checks a whole exposition text; the number of sample lines, or -1 after
 * printing the first bad line. HELP and TYPE must come once per family,
 * before its samples, and every sample must follow its family's TYPE. */
static int parse_exposition(const char *text) {
    struct parse_state st = {0};
    size_t size = strlen(text);
    if (size > 0 && text[size - 1] != '\n') return -1;
    char *copy = strdup(text);
    if (copy == NULL) return -1;
    int result = 0;
    for (char *line = copy, *end; *line != '\0' && result == 0; line = end + 1) {
        end = strchr(line, '\n');
        *end = '\0';
        result = line[0] == '#' ? parse_comment(&st, line) : parse_sample(&st, line);
        if (result != 0 && !parser_quiet) fprintf(stderr, "bad exposition line: [%s]\n", line);
    }
    free(copy);
    return result == 0 ? st.samples : -1;
}

static void test_parser_itself(void) {
    /* The parser must refuse what Prometheus refuses, or it proves nothing. */
    parser_quiet = 1;
    CHECK(parse_exposition("# TYPE a counter\na 1\n") == 1);
    CHECK(parse_exposition("# TYPE a counter\na 1") == -1);             /* no final newline */
    CHECK(parse_exposition("a 1\n") == -1);                             /* no TYPE first */
    CHECK(parse_exposition("# TYPE a counter\na 1e\n") == -1);          /* bad float */
    CHECK(parse_exposition("# TYPE a counter\na inf\n") == -1);         /* Go wants +Inf */
    CHECK(parse_exposition("# TYPE a gauge\na{x=\"q\\t\"} 1\n") == -1); /* bad escape */
    CHECK(parse_exposition("# TYPE a gauge\na{x=\"q\"\"} 1\n") == -1);  /* raw quote */
    CHECK(parse_exposition("# TYPE a gauge\na{x=\"\\\"\"} -2.5e-3\n") == 1);
    CHECK(parse_exposition("# TYPE a gauge\n# TYPE a gauge\n") == -1); /* TYPE twice */
    CHECK(parse_exposition("# TYPE a gauge\na_sum 1\n") == -1);        /* not a histogram */
    CHECK(parse_exposition("# TYPE a histogram\na_sum 1\na_count 2\n") == 2);
    parser_quiet = 0;
}

/* -------------------------- exact renderings ---------------------------- */

static void test_counter_and_gauge(void) {
    struct metrics_registry registry;
    char err[256] = "";
    CHECK(metrics_registry_init(&registry) == 0);
    char *text = metrics_render(&registry, NULL);
    CHECK(same_text(text, ""));
    free(text);

    struct metrics_metric *restarts =
        metrics_register_counter(&registry, "lockstep_runner_restarts_total", "Runner restarts.",
                                 NULL, NULL, err, sizeof err);
    struct metrics_metric *depth =
        metrics_register_gauge(&registry, "lockstep_queue_depth",
                               "Requests waiting:\n \\ \"queued\"", NULL, NULL, err, sizeof err);
    CHECK_MSG(restarts != NULL && depth != NULL, "%s", err);
    text = metrics_render(&registry, NULL);
    CHECK(same_text(text, "# HELP lockstep_runner_restarts_total Runner restarts.\n"
                          "# TYPE lockstep_runner_restarts_total counter\n"
                          "lockstep_runner_restarts_total 0\n"
                          "# HELP lockstep_queue_depth Requests waiting:\\n \\\\ \"queued\"\n"
                          "# TYPE lockstep_queue_depth gauge\n"
                          "lockstep_queue_depth 0\n"));
    free(text);

    struct metrics_series *r = metrics_series_get(restarts, NULL, NULL);
    struct metrics_series *d = metrics_series_get(depth, NULL, NULL);
    CHECK(r != NULL && r == metrics_series_get(restarts, NULL, NULL));
    CHECK(metrics_add(r, 1) == 0 && metrics_add(r, 2) == 0);
    CHECK(metrics_set(d, 7) == 0 && metrics_add(d, -2.5) == 0);
    size_t length = 0;
    text = metrics_render(&registry, &length);
    const char *want = "# HELP lockstep_runner_restarts_total Runner restarts.\n"
                       "# TYPE lockstep_runner_restarts_total counter\n"
                       "lockstep_runner_restarts_total 3\n"
                       "# HELP lockstep_queue_depth Requests waiting:\\n \\\\ \"queued\"\n"
                       "# TYPE lockstep_queue_depth gauge\n"
                       "lockstep_queue_depth 4.5\n";
    CHECK(same_text(text, want));
    CHECK(length == strlen(want));
    CHECK(parse_exposition(text) == 2);
    free(text);

    double value = 0;
    uint64_t count = 99;
    CHECK(metrics_read(r, &value, &count) == 0 && value == 3 && count == 0);
    CHECK(metrics_read(d, &value, NULL) == 0 && value == 4.5);
    metrics_registry_free(&registry);
}

static void test_labelled_counter_escaping(void) {
    struct metrics_registry registry;
    char err[256] = "";
    CHECK(metrics_registry_init(&registry) == 0);
    struct metrics_metric *requests = metrics_register_counter(
        &registry, "lockstep_requests_total", "Requests answered, by model and HTTP status.",
        "model", "status", err, sizeof err);
    struct metrics_metric *help_less =
        metrics_register_counter(&registry, "x:y", NULL, "model", NULL, err, sizeof err);
    CHECK_MSG(requests != NULL && help_less != NULL, "%s", err);

    /* No series yet: the family renders HELP and TYPE only. */
    char *text = metrics_render(&registry, NULL);
    CHECK(same_text(text, "# HELP lockstep_requests_total Requests answered, by model and HTTP "
                          "status.\n"
                          "# TYPE lockstep_requests_total counter\n"
                          "# TYPE x:y counter\n"));
    free(text);

    CHECK(metrics_add(metrics_series_get(requests, "kjv2m", "200"), 1) == 0);
    CHECK(metrics_add(metrics_series_get(requests, "a\\b \"q\"\nz", "500"), 2) == 0);
    CHECK(metrics_add(metrics_series_get(requests, "kjv2m", "200"), 1) == 0);
    CHECK(metrics_add(metrics_series_get(requests, "kjv2m", "404"), 0) == 0);
    CHECK(metrics_add(metrics_series_get(requests, "", "200"), 0.5) == 0);
    CHECK(metrics_add(metrics_series_get(help_less, "\xC3\xB6", NULL), 12345678901.0) == 0);
    text = metrics_render(&registry, NULL);
    CHECK(same_text(text,
                    "# HELP lockstep_requests_total Requests answered, by model and HTTP status.\n"
                    "# TYPE lockstep_requests_total counter\n"
                    "lockstep_requests_total{model=\"kjv2m\",status=\"200\"} 2\n"
                    "lockstep_requests_total{model=\"a\\\\b \\\"q\\\"\\nz\",status=\"500\"} 2\n"
                    "lockstep_requests_total{model=\"kjv2m\",status=\"404\"} 0\n"
                    "lockstep_requests_total{model=\"\",status=\"200\"} 0.5\n"
                    "# TYPE x:y counter\n"
                    "x:y{model=\"\xC3\xB6\"} 12345678901\n"));
    CHECK(parse_exposition(text) == 5);
    free(text);
    metrics_registry_free(&registry);
}

static void test_histograms(void) {
    struct metrics_registry registry;
    char err[256] = "";
    static const double bounds[] = {0.125, 0.5, 1, 2.5};
    CHECK(metrics_registry_init(&registry) == 0);
    struct metrics_metric *step =
        metrics_register_histogram(&registry, "lockstep_step_seconds", "Seconds per step.", NULL,
                                   NULL, bounds, 4, err, sizeof err);
    struct metrics_metric *ttft = metrics_register_histogram(
        &registry, "lockstep_time_to_first_token_seconds", "Seconds until the first token.",
        "model", NULL, bounds, 2, err, sizeof err);
    struct metrics_metric *bare =
        metrics_register_histogram(&registry, "bare", "", NULL, NULL, NULL, 0, err, sizeof err);
    CHECK_MSG(step != NULL && ttft != NULL && bare != NULL, "%s", err);

    /* Exactly representable values, so _sum is exact: 104.1875. A value
     * equal to a bound counts into that bound's bucket (le: <=). */
    static const double observed[] = {0.0625, 0.125, 0.25, 0.75, 3, 100};
    struct metrics_series *s = metrics_series_get(step, NULL, NULL);
    for (int i = 0; i < 6; i++) CHECK(metrics_observe(s, observed[i]) == 0);
    CHECK(metrics_observe(metrics_series_get(ttft, "m\"1", NULL), 0.5) == 0);
    CHECK(metrics_observe(metrics_series_get(ttft, "m\"1", NULL), -1) == 0);
    CHECK(metrics_observe(metrics_series_get(bare, NULL, NULL), 1e300) == 0);

    char *text = metrics_render(&registry, NULL);
    CHECK(same_text(text,
                    "# HELP lockstep_step_seconds Seconds per step.\n"
                    "# TYPE lockstep_step_seconds histogram\n"
                    "lockstep_step_seconds_bucket{le=\"0.125\"} 2\n"
                    "lockstep_step_seconds_bucket{le=\"0.5\"} 3\n"
                    "lockstep_step_seconds_bucket{le=\"1\"} 4\n"
                    "lockstep_step_seconds_bucket{le=\"2.5\"} 4\n"
                    "lockstep_step_seconds_bucket{le=\"+Inf\"} 6\n"
                    "lockstep_step_seconds_sum 104.1875\n"
                    "lockstep_step_seconds_count 6\n"
                    "# HELP lockstep_time_to_first_token_seconds Seconds until the first token.\n"
                    "# TYPE lockstep_time_to_first_token_seconds histogram\n"
                    "lockstep_time_to_first_token_seconds_bucket{model=\"m\\\"1\",le=\"0.125\"} 1\n"
                    "lockstep_time_to_first_token_seconds_bucket{model=\"m\\\"1\",le=\"0.5\"} 2\n"
                    "lockstep_time_to_first_token_seconds_bucket{model=\"m\\\"1\",le=\"+Inf\"} 2\n"
                    "lockstep_time_to_first_token_seconds_sum{model=\"m\\\"1\"} -0.5\n"
                    "lockstep_time_to_first_token_seconds_count{model=\"m\\\"1\"} 2\n"
                    "# TYPE bare histogram\n"
                    "bare_bucket{le=\"+Inf\"} 1\n"
                    "bare_sum 1e+300\n"
                    "bare_count 1\n"));
    CHECK(parse_exposition(text) == 15);
    free(text);

    double sum = 0;
    uint64_t count = 0;
    CHECK(metrics_read(s, &sum, &count) == 0 && sum == 104.1875 && count == 6);
    CHECK(metrics_observe(s, NAN) == -1);
    CHECK(metrics_read(s, &sum, &count) == 0 && sum == 104.1875 && count == 6);
    metrics_registry_free(&registry);
}

/* Every kind of number a gauge can hold, as Prometheus must read it. */
static void test_numbers(void) {
    static const struct {
        double value;
        const char *text;
    } cases[] = {
        {0.0, "0"},
        {-0.0, "0"},
        {42, "42"},
        {-7, "-7"},
        {9007199254740993.0, "9007199254740992"}, /* 2^53 + 1 rounds to 2^53 */
        {123456789012345678.0, "123456789012345680"},
        {1e18, "1e+18"},
        {0.1, "0.1"},
        {1.0 / 3.0, "0.3333333333333333"},
        {-2.5e-7, "-2.5e-07"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {INFINITY, "+Inf"},
        {-INFINITY, "-Inf"},
        {NAN, "NaN"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    struct metrics_registry registry;
    char err[256] = "";
    CHECK(metrics_registry_init(&registry) == 0);
    struct metrics_metric *g =
        metrics_register_gauge(&registry, "g", "", NULL, NULL, err, sizeof err);
    CHECK_MSG(g != NULL, "%s", err);
    struct metrics_series *s = metrics_series_get(g, NULL, NULL);
    for (int i = 0; i < n; i++) {
        char want[128];
        CHECK(metrics_set(s, cases[i].value) == 0);
        char *text = metrics_render(&registry, NULL);
        snprintf(want, sizeof want, "# TYPE g gauge\ng %s\n", cases[i].text);
        CHECK_MSG(same_text(text, want), "case %d", i);
        CHECK(parse_exposition(text) == 1);
        /* What is printed reads back as the value itself. */
        if (isfinite(cases[i].value) && cases[i].value != 9007199254740993.0)
            CHECK_MSG(strtod(cases[i].text, NULL) == cases[i].value, "case %d", i);
        free(text);
    }
    metrics_registry_free(&registry);
}

/* ------------------------------- refusals ------------------------------- */

static void check_refused(struct metrics_metric *metric, const char *err, const char *want) {
    CHECK(metric == NULL);
    CHECK_MSG(strcmp(err, want) == 0, "got [%s], want [%s]", err, want);
}

static void test_refusals(void) {
    struct metrics_registry registry;
    char err[256];
    static const double bounds[] = {1, 2, 2};
    static const double infinite[] = {1, INFINITY};
    CHECK(metrics_registry_init(&registry) == 0);
    struct metrics_metric *h =
        metrics_register_histogram(&registry, "h", "", "model", NULL, bounds, 2, err, sizeof err);
    struct metrics_metric *c =
        metrics_register_counter(&registry, "c", "", "a", "b", err, sizeof err);
    CHECK(h != NULL && c != NULL);

    check_refused(metrics_register_counter(&registry, "9lives", "", NULL, NULL, err, sizeof err),
                  err,
                  "metrics: metric name \"9lives\" is not [a-zA-Z_:][a-zA-Z0-9_:]* of at most "
                  "128 bytes");
    check_refused(metrics_register_gauge(&registry, "a-b", "", NULL, NULL, err, sizeof err), err,
                  "metrics: metric name \"a-b\" is not [a-zA-Z_:][a-zA-Z0-9_:]* of at most 128 "
                  "bytes");
    check_refused(metrics_register_gauge(&registry, "", "", NULL, NULL, err, sizeof err), err,
                  "metrics: metric name \"\" is not [a-zA-Z_:][a-zA-Z0-9_:]* of at most 128 bytes");
    check_refused(metrics_register_counter(&registry, "h_count", "", NULL, NULL, err, sizeof err),
                  err, "metrics: metric name \"h_count\" collides with metric \"h\"");
    check_refused(
        metrics_register_histogram(&registry, "c", "", NULL, NULL, NULL, 0, err, sizeof err), err,
        "metrics: metric name \"c\" collides with metric \"c\"");
    CHECK(metrics_register_counter(&registry, "x_sum", "", NULL, NULL, err, sizeof err) != NULL);
    check_refused(
        metrics_register_histogram(&registry, "x", "", NULL, NULL, NULL, 0, err, sizeof err), err,
        "metrics: metric name \"x\" collides with metric \"x_sum\"");
    check_refused(metrics_register_gauge(&registry, "g", "", "model:x", NULL, err, sizeof err), err,
                  "metrics: g: label name \"model:x\" is not [a-zA-Z_][a-zA-Z0-9_]*");
    check_refused(metrics_register_gauge(&registry, "g", "", "__name", NULL, err, sizeof err), err,
                  "metrics: g: label name \"__name\" starts with the reserved \"__\"");
    check_refused(metrics_register_gauge(&registry, "g", "", NULL, "model", err, sizeof err), err,
                  "metrics: g: label1 \"model\" given without label0");
    check_refused(metrics_register_gauge(&registry, "g", "", "m", "m", err, sizeof err), err,
                  "metrics: g: label name \"m\" given twice");
    check_refused(
        metrics_register_histogram(&registry, "g", "", "le", NULL, NULL, 0, err, sizeof err), err,
        "metrics: g: label name \"le\" is reserved for histogram buckets");
    check_refused(
        metrics_register_histogram(&registry, "g", "", NULL, NULL, bounds, 3, err, sizeof err), err,
        "metrics: g: bucket bound 2 (2) is not above bound 1 (2)");
    check_refused(
        metrics_register_histogram(&registry, "g", "", NULL, NULL, infinite, 2, err, sizeof err),
        err, "metrics: g: bucket bound 1 is inf, not finite");
    check_refused(metrics_register_histogram(&registry, "g", "", NULL, NULL, bounds,
                                             METRICS_BUCKETS_MAX + 1, err, sizeof err),
                  err, "metrics: g: 33 bucket bounds (allowed: 0..32)");
    /* A label is allowed in a gauge as "le", just not in a histogram. */
    CHECK(metrics_register_gauge(&registry, "g", "", "le", NULL, err, sizeof err) != NULL);

    /* Series: the values must match the label names one for one. */
    CHECK(metrics_series_get(NULL, "m", NULL) == NULL);
    CHECK(metrics_series_get(h, NULL, NULL) == NULL);
    CHECK(metrics_series_get(h, "m", "extra") == NULL);
    CHECK(metrics_series_get(c, "a", NULL) == NULL);
    CHECK(metrics_series_get(c, NULL, "b") == NULL);

    /* Updates that do not fit the type change nothing. */
    struct metrics_series *hs = metrics_series_get(h, "m", NULL);
    struct metrics_series *cs = metrics_series_get(c, "a", "b");
    CHECK(metrics_add(NULL, 1) == -1 && metrics_set(NULL, 1) == -1);
    CHECK(metrics_observe(NULL, 1) == -1 && metrics_read(NULL, NULL, NULL) == -1);
    CHECK(metrics_add(cs, -1) == -1 && metrics_add(cs, NAN) == -1 &&
          metrics_add(cs, INFINITY) == -1);
    CHECK(metrics_set(cs, 5) == -1 && metrics_observe(cs, 5) == -1);
    CHECK(metrics_add(hs, 1) == -1 && metrics_set(hs, 1) == -1);
    double value = -1;
    CHECK(metrics_read(cs, &value, NULL) == 0 && value == 0);

    /* A family holds METRICS_SERIES_MAX series; the next one is refused
     * but existing ones still update. */
    for (int i = 1; i < METRICS_SERIES_MAX; i++) {
        char model[16];
        snprintf(model, sizeof model, "m%d", i);
        CHECK(metrics_series_get(h, model, NULL) != NULL);
    }
    CHECK(metrics_series_get(h, "one-too-many", NULL) == NULL);
    CHECK(metrics_series_get(h, "m", NULL) == hs);
    char *text = metrics_render(&registry, NULL);
    CHECK(parse_exposition(text) == METRICS_SERIES_MAX * 5 + 1 + 1);
    free(text);
    metrics_registry_free(&registry);
}

/* The gateway's whole standard set, registered and updated as the lead
 * will, renders to text the parser accepts line by line. */
static void test_gateway_set_parses(void) {
    static const double latency[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
    static const char *const counters[] = {"lockstep_prompt_tokens_total",
                                           "lockstep_generated_tokens_total",
                                           "lockstep_runner_restarts_total"};
    static const char *const gauges[] = {"lockstep_queue_depth", "lockstep_running_sequences",
                                         "lockstep_kv_blocks_used", "lockstep_kv_blocks_capacity"};
    static const char *const histograms[] = {"lockstep_time_to_first_token_seconds",
                                             "lockstep_inter_token_latency_seconds",
                                             "lockstep_step_seconds"};
    static const char *const models[] = {"kjv2m", "llama \"3\"\\8b\n"};
    struct metrics_registry registry;
    char err[256] = "";
    CHECK(metrics_registry_init(&registry) == 0);
    struct metrics_metric *requests = metrics_register_counter(
        &registry, "lockstep_requests_total", "Requests.", "model", "status", err, sizeof err);
    CHECK_MSG(requests != NULL, "%s", err);
    for (int m = 0; m < 2; m++) {
        metrics_add(metrics_series_get(requests, models[m], "200"), 3);
        metrics_add(metrics_series_get(requests, models[m], "503"), 1);
    }
    for (int i = 0; i < 3; i++) {
        struct metrics_metric *f = metrics_register_counter(&registry, counters[i], "A counter.",
                                                            "model", NULL, err, sizeof err);
        CHECK_MSG(f != NULL, "%s", err);
        for (int m = 0; m < 2; m++)
            CHECK(metrics_add(metrics_series_get(f, models[m], NULL), 17) == 0);
    }
    for (int i = 0; i < 4; i++) {
        struct metrics_metric *f = metrics_register_gauge(&registry, gauges[i], "A gauge.", "model",
                                                          NULL, err, sizeof err);
        CHECK_MSG(f != NULL, "%s", err);
        for (int m = 0; m < 2; m++)
            CHECK(metrics_set(metrics_series_get(f, models[m], NULL), 1.25 * i) == 0);
    }
    for (int i = 0; i < 3; i++) {
        struct metrics_metric *f = metrics_register_histogram(
            &registry, histograms[i], "A histogram.", "model", NULL, latency, 11, err, sizeof err);
        CHECK_MSG(f != NULL, "%s", err);
        for (int m = 0; m < 2; m++) {
            struct metrics_series *s = metrics_series_get(f, models[m], NULL);
            for (int k = 0; k < 50; k++) CHECK(metrics_observe(s, 0.003 * k * k) == 0);
        }
    }
    char *text = metrics_render(&registry, NULL);
    /* 4 requests + 2 x (3 counters + 4 gauges + 3 x (12 buckets + sum + count)) */
    CHECK(parse_exposition(text) == 4 + 2 * (3 + 4 + 3 * 14));
    free(text);
    metrics_registry_free(&registry);
}

/* ------------------------------ concurrency ----------------------------- */

#define THREADS    4
#define ITERATIONS 100000

/* What every updating thread touches. */
struct shared_metrics {
    struct metrics_registry registry; /* holds the families below */
    struct metrics_metric *requests;  /* counter {model,status}: looked up on every update */
    struct metrics_metric *tokens;    /* counter {model}: one series per thread */
    struct metrics_metric *depth;     /* gauge, no labels */
    struct metrics_metric *latency;   /* histogram {model}, bounds 0.5 and 1 */
    int thread_ids[THREADS];          /* argument of each thread */
};

static struct shared_metrics shared;

static void *update_thread(void *arg) {
    int id = *(const int *)arg;
    char model[16];
    snprintf(model, sizeof model, "t%d", id);
    struct metrics_series *own = metrics_series_get(shared.tokens, model, NULL);
    struct metrics_series *depth = metrics_series_get(shared.depth, NULL, NULL);
    for (int i = 0; i < ITERATIONS; i++) {
        /* The shared series is created by whichever thread comes first. */
        metrics_add(metrics_series_get(shared.requests, "shared", "200"), 1);
        metrics_add(own, 2);
        metrics_add(depth, i % 2 ? -1 : 1);
        if (i % 10 == 0)
            metrics_observe(metrics_series_get(shared.latency, "shared", NULL), (i / 10 % 4) * 0.5);
    }
    return NULL;
}

static void *render_thread(void *arg) {
    int *bad = arg;
    for (int i = 0; i < 50; i++) {
        char *text = metrics_render(&shared.registry, NULL);
        if (text == NULL || parse_exposition(text) < 0) (*bad)++;
        free(text);
    }
    return NULL;
}

static void test_concurrent_updates(void) {
    static const double bounds[] = {0.5, 1};
    char err[256] = "";
    pthread_t threads[THREADS], renderer;
    int bad_renders = 0;
    CHECK(metrics_registry_init(&shared.registry) == 0);
    shared.requests = metrics_register_counter(&shared.registry, "requests_total", "", "model",
                                               "status", err, sizeof err);
    shared.tokens = metrics_register_counter(&shared.registry, "tokens_total", "", "model", NULL,
                                             err, sizeof err);
    shared.depth =
        metrics_register_gauge(&shared.registry, "depth", "", NULL, NULL, err, sizeof err);
    shared.latency = metrics_register_histogram(&shared.registry, "latency", "", "model", NULL,
                                                bounds, 2, err, sizeof err);
    CHECK_MSG(shared.requests && shared.tokens && shared.depth && shared.latency, "%s", err);
    /* Each thread's own series exists before the threads start, so the
     * render order below is fixed; the shared ones are created in the race. */
    for (int t = 0; t < THREADS; t++) {
        char model[16];
        snprintf(model, sizeof model, "t%d", t);
        CHECK(metrics_series_get(shared.tokens, model, NULL) != NULL);
    }
    CHECK(pthread_create(&renderer, NULL, render_thread, &bad_renders) == 0);
    for (int t = 0; t < THREADS; t++) {
        shared.thread_ids[t] = t;
        CHECK(pthread_create(&threads[t], NULL, update_thread, &shared.thread_ids[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    pthread_join(renderer, NULL);
    CHECK(bad_renders == 0);

    double value = 0;
    uint64_t count = 0;
    CHECK(metrics_read(metrics_series_get(shared.requests, "shared", "200"), &value, NULL) == 0);
    CHECK_MSG(value == (double)THREADS * ITERATIONS, "requests %.17g", value);
    for (int t = 0; t < THREADS; t++) {
        char model[16];
        snprintf(model, sizeof model, "t%d", t);
        CHECK(metrics_read(metrics_series_get(shared.tokens, model, NULL), &value, NULL) == 0);
        CHECK_MSG(value == 2.0 * ITERATIONS, "%s %.17g", model, value);
    }
    CHECK(metrics_read(metrics_series_get(shared.depth, NULL, NULL), &value, NULL) == 0 &&
          value == 0);
    CHECK(metrics_read(metrics_series_get(shared.latency, "shared", NULL), &value, &count) == 0);
    /* Per thread 10000 observations, a quarter each of 0, 0.5, 1 and 1.5. */
    CHECK_MSG(count == THREADS * ITERATIONS / 10, "count %llu", (unsigned long long)count);
    CHECK_MSG(value == THREADS * 2500 * 3.0, "sum %.17g", value);

    char *text = metrics_render(&shared.registry, NULL);
    CHECK(same_text(text, "# TYPE requests_total counter\n"
                          "requests_total{model=\"shared\",status=\"200\"} 400000\n"
                          "# TYPE tokens_total counter\n"
                          "tokens_total{model=\"t0\"} 200000\n"
                          "tokens_total{model=\"t1\"} 200000\n"
                          "tokens_total{model=\"t2\"} 200000\n"
                          "tokens_total{model=\"t3\"} 200000\n"
                          "# TYPE depth gauge\n"
                          "depth 0\n"
                          "# TYPE latency histogram\n"
                          "latency_bucket{model=\"shared\",le=\"0.5\"} 20000\n"
                          "latency_bucket{model=\"shared\",le=\"1\"} 30000\n"
                          "latency_bucket{model=\"shared\",le=\"+Inf\"} 40000\n"
                          "latency_sum{model=\"shared\"} 30000\n"
                          "latency_count{model=\"shared\"} 40000\n"));
    free(text);
    metrics_registry_free(&shared.registry);
}

static void test_drop(void) {
    struct metrics_registry registry;
    char err[256] = "";
    CHECK(metrics_registry_init(&registry) == 0);
    struct metrics_metric *tokens =
        metrics_register_counter(&registry, "t_total", NULL, "model", "instance", err, sizeof err);
    struct metrics_metric *state =
        metrics_register_gauge(&registry, "s", NULL, "instance", "state", err, sizeof err);
    struct metrics_metric *up =
        metrics_register_gauge(&registry, "up", NULL, NULL, NULL, err, sizeof err);
    CHECK_MSG(tokens && state && up, "%s", err);
    CHECK(metrics_add(metrics_series_get(tokens, "m", "m-1"), 3) == 0);
    CHECK(metrics_add(metrics_series_get(tokens, "m", "m-2"), 4) == 0);
    CHECK(metrics_set(metrics_series_get(state, "m-1", "ready"), 1) == 0);
    CHECK(metrics_set(metrics_series_get(state, "m-1", "failed"), 0) == 0);
    CHECK(metrics_set(metrics_series_get(state, "m-2", "ready"), 1) == 0);
    CHECK(metrics_set(metrics_series_get(up, NULL, NULL), 1) == 0);
    /* every series of m-1, in whichever label position; nothing else */
    CHECK(metrics_drop(&registry, "instance", "m-1") == 3);
    CHECK(metrics_drop(&registry, "instance", "m-1") == 0);
    CHECK(metrics_drop(&registry, "model", "nope") == 0);
    char *text = metrics_render(&registry, NULL);
    CHECK(same_text(text, "# TYPE t_total counter\n"
                          "t_total{model=\"m\",instance=\"m-2\"} 4\n"
                          "# TYPE s gauge\n"
                          "s{instance=\"m-2\",state=\"ready\"} 1\n"
                          "# TYPE up gauge\n"
                          "up 1\n"));
    free(text);
    /* a gone value stays gone: a late update neither revives it nor fails
     * anyone else's */
    CHECK(metrics_series_get(tokens, "m", "m-1") == NULL);
    CHECK(metrics_add_at(tokens, "m", "m-1", 1) == -1);
    CHECK(metrics_set_at(state, "m-1", "ready", 1) == -1);
    CHECK(metrics_add_at(tokens, "m", "m-2", 1) == 0);
    CHECK(metrics_set_at(state, "m-3", "ready", 2) == 0);
    text = metrics_render(&registry, NULL);
    CHECK(text && strstr(text, "t_total{model=\"m\",instance=\"m-2\"} 5\n# TYPE s") &&
          strstr(text, "s{instance=\"m-3\",state=\"ready\"} 2\n") && !strstr(text, "m-1"));
    free(text);
    /* the memory of gone values is bounded: the oldest is forgotten first */
    char id[32];
    for (int i = 0; i < METRICS_GONE_MAX; i++) {
        snprintf(id, sizeof id, "x-%d", i);
        CHECK(metrics_drop(&registry, "instance", id) == 0);
    }
    CHECK(metrics_add_at(tokens, "m", "m-1", 1) == 0);
    CHECK(metrics_add_at(tokens, "m", "x-0", 1) == -1);
    snprintf(id, sizeof id, "x-%d", METRICS_GONE_MAX - 1);
    CHECK(metrics_add_at(tokens, "m", id, 1) == -1);
    metrics_registry_free(&registry);
}

int main(void) {
    test_parser_itself();
    test_counter_and_gauge();
    test_labelled_counter_escaping();
    test_histograms();
    test_numbers();
    test_refusals();
    test_drop();
    test_gateway_set_parses();
    test_concurrent_updates();
    return test_status("test_gateway_metrics");
}
