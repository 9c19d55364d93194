/* chaos.c -- bench/chaos's measuring tool (chaos_tool): streaming clients
 * against a `lockstep serve` that runs two instances ("big", tensor
 * parallel, and "small"), first without faults, then while
 * chaos_faults.c injects one every few seconds (issue 6).
 *
 * usage: chaos_tool --port N [--duration 60] [--fault-every 5] ... (--help)
 *
 * Every client thread loops over requests drawn from a fixed set of items
 * (prompt, seed, max_tokens; temperature 0.8; every third one asks for
 * JSON under a schema, so a grammar's state must survive the faults too, and
 * its finished answers must be such JSON), so every output is
 * reproducible: phase 1 (baseline) records each item's output on each
 * instance as its reference and checks that repeats equal it; items phase
 * 1 did not reach are then run once alone. Phase 2 checks every completed
 * output against the reference: with seeded sampling a runner that died or
 * got stuck must cost a delay, never a different text. A request fails
 * when it errs, is wrong when its text, finish_reason or token count
 * differ from the reference, and is late when data: [DONE] has not come
 * within --deadline seconds. After each phase no client starts another
 * request and the ones in flight are read to their end, so rates are over
 * the phase's whole wall time, drain included. After phase 2 the tool waits
 * for every fault to recover and runs each item once more on each instance.
 *
 * Three faults of phase 2 send requests or connections of their own
 * (chaos_faults.c): stop+flood (a stopped runner under a flood of
 * long-prompt requests, checked against the floods that ran without
 * faults at the end of phase 1), stop-cancel (streams that leave at their
 * stop string) and half-open (connections closed mid-request).
 *
 * Output: one table per phase (per instance and in all), the faults by
 * kind with what their own checks measured and the requests they sent,
 * and the failures as they happen on stderr. Exit status 1 on any failed,
 * wrong, late or unverifiable request, unrecovered fault or failed check
 * of a fault, 2 on bad options. */
#include "chaos.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHAOS_CLIENTS_MAX 256 /* client threads per instance */

/* What a set of requests measured. */
struct chaos_tally {
    long completed, failed, wrong, late, unverified; /* requests by outcome */
    long prompt_tokens, generated_tokens;            /* usage of completed requests */
    struct loadgen_samples ttft, itl;                /* seconds */
    double longest_gap;                              /* longest time without a token, s */
};

/* One client thread. */
struct chaos_client {
    struct chaos_run *run;
    int model;          /* the instance it sends to */
    int index, n_peers; /* its index among the n_peers clients of that instance */
    double end;         /* loadgen_now() after which it starts no request */
    uint64_t rng;       /* its choice of items */
    struct chaos_tally tally;
    pthread_t thread;
};

double chaos_elapsed(const struct chaos_run *run) {
    return loadgen_now() - run->start;
}

void chaos_log(struct chaos_run *run, const char *format, ...) {
    va_list args;
    pthread_mutex_lock(&run->lock);
    fprintf(stderr, "[%7.1f s] ", chaos_elapsed(run));
    va_start(args, format);
    vfprintf(stderr, format, args);
    va_end(args);
    fputc('\n', stderr);
    pthread_mutex_unlock(&run->lock);
}

/* ---------------------------------------------------------------- items */

static int items_create(struct chaos_run *run) {
    const struct chaos_options *o = run->options;
    uint64_t rng = o->seed;
    run->items = calloc((size_t)o->n_items, sizeof(*run->items));
    if (!run->items) return -1;
    for (int i = 0; i < o->n_items; i++) {
        struct chaos_item *item = &run->items[i];
        item->prompt =
            loadgen_prompt(loadgen_random(&rng), loadgen_random_range(&rng, 3, o->max_words));
        item->seed = loadgen_random(&rng) % 1000000007ULL;
        item->max_tokens = loadgen_random_range(&rng, 8, o->max_tokens);
        item->constrained = i % 3 == 2; /* a grammar must survive every fault too */
        if (!item->prompt) return -1;
    }
    return 0;
}

/* The flood items: prompts of options->flood_prompt token ids each, drawn
 * from 3..500 (bench/chaos's random models have 512 tokens; the first few
 * are special), distinct, so that no prefix cache shortens the flood. */
static int flood_items_create(struct chaos_run *run) {
    const struct chaos_options *o = run->options;
    uint64_t rng = o->seed ^ 0x666c6f6f64ULL; /* their own stream */
    run->flood_items = calloc((size_t)(o->flood > 0 ? o->flood : 1), sizeof(*run->flood_items));
    if (!run->flood_items) return -1;
    for (int i = 0; i < o->flood; i++) {
        struct chaos_item *item = &run->flood_items[i];
        size_t used = 0, size = (size_t)o->flood_prompt * 4 + 1; /* ids have 1..3 digits */
        item->max_tokens = 8;
        item->prompt = malloc(size);
        if (!item->prompt) return -1;
        for (int t = 0; t < o->flood_prompt; t++)
            used += (size_t)snprintf(item->prompt + used, size - used, "%s%d", t ? "," : "",
                                     loadgen_random_range(&rng, 3, 500));
    }
    return 0;
}

static void item_list_free(struct chaos_item *items, int n) {
    for (int i = 0; items && i < n; i++) {
        free(items[i].prompt);
        for (int m = 0; m < CHAOS_MODELS; m++) free(items[i].reference[m]);
    }
    free(items);
}

static void items_free(struct chaos_run *run) {
    item_list_free(run->items, run->options->n_items);
    item_list_free(run->flood_items, run->options->flood);
}

/* Where two outputs first differ, for the failure line. */
static void describe_difference(const char *expected, const char *got, char *out, size_t size) {
    size_t at = 0;
    while (expected[at] && expected[at] == got[at]) at++;
    snprintf(out, size, "text differs at byte %zu: expected '%.40s', got '%.40s'", at,
             expected + at, got + at);
}

enum chaos_verdict chaos_check_output(struct chaos_run *run, struct chaos_item *item, int model,
                                      const char *text, const char *finish, int tokens,
                                      int may_record, char *why, size_t whylen) {
    enum chaos_verdict verdict = CHAOS_EQUAL;
    pthread_mutex_lock(&run->lock);
    if (!item->reference[model] && may_record) {
        item->reference[model] = strdup(text);
        snprintf(item->finish[model], sizeof(item->finish[model]), "%s", finish);
        item->completion_tokens[model] = tokens;
        verdict = item->reference[model] ? CHAOS_RECORDED : CHAOS_UNVERIFIED;
    } else if (!item->reference[model]) {
        snprintf(why, whylen, "no reference output: no fault-free run completed this item");
        verdict = CHAOS_UNVERIFIED;
    } else if (strcmp(item->reference[model], text) != 0) {
        describe_difference(item->reference[model], text, why, whylen);
        verdict = CHAOS_DIFFERENT;
    } else if (strcmp(item->finish[model], finish) != 0 ||
               item->completion_tokens[model] != tokens) {
        snprintf(why, whylen, "same text but finish_reason %s and %d tokens, expected %s and %d",
                 finish, tokens, item->finish[model], item->completion_tokens[model]);
        verdict = CHAOS_DIFFERENT;
    }
    pthread_mutex_unlock(&run->lock);
    return verdict;
}

/* ------------------------------------------------------------- requests */

void chaos_log_failure(struct chaos_run *run, const char *what, const char *request, double sent,
                       int tokens, const char *why) {
    pthread_mutex_lock(&run->lock);
    int show = run->failures_logged++ < CHAOS_LOG_FAILURE;
    if (show)
        fprintf(stderr, "[%7.1f s] %s: %s, sent at %.1f s, %d tokens came: %s\n",
                chaos_elapsed(run), what, request, sent - run->start, tokens, why);
    if (run->failures_logged == CHAOS_LOG_FAILURE + 1)
        fprintf(stderr, "(further failures are counted, not shown)\n");
    pthread_mutex_unlock(&run->lock);
}

/* Logs a client's failed request. */
static void log_failure(struct chaos_run *run, int model, int i, const char *what,
                        const struct loadgen_result *r, const char *why) {
    char request[160];
    snprintf(request, sizeof(request), "%s item %d (seed %llu, max_tokens %d)",
             run->options->names[model], i, (unsigned long long)run->items[i].seed,
             run->items[i].max_tokens);
    chaos_log_failure(run, what, request, r->sent, r->chunks, why);
}

/* 0 if a constrained item's answer finished ("stop") and is not a JSON
 * object: the grammar let through what its schema does not allow. */
static int fits_schema(const struct chaos_item *item, const struct loadgen_result *r) {
    if (!item->constrained || strcmp(r->finish_reason, "stop") != 0) return 1;
    cJSON *doc = cJSON_Parse(r->text);
    int fits = cJSON_IsObject(doc) && cJSON_IsString(cJSON_GetObjectItem(doc, "word")) &&
               cJSON_IsNumber(cJSON_GetObjectItem(doc, "n"));
    cJSON_Delete(doc);
    return fits;
}

/* Runs item i on the instance and adds its outcome to the tally. */
static int run_item(struct chaos_run *run, int model, int i, struct chaos_tally *t) {
    const struct chaos_options *o = run->options;
    const struct chaos_item *item = &run->items[i];
    struct loadgen_request request = {.model = o->names[model],
                                      .prompt = item->prompt,
                                      .seed = item->seed,
                                      .max_tokens = item->max_tokens,
                                      .temperature = 0.8,
                                      .response_format =
                                          item->constrained ? CHAOS_RESPONSE_FORMAT : NULL};
    struct loadgen_result r;
    char why[LOADGEN_ERROR_MAX] = "";
    if (loadgen_complete(o->port, &request, loadgen_now() + o->deadline, &r)) return -1;
    int failed = 0;
    if (r.first_token > 0) failed |= loadgen_samples_push(&t->ttft, r.first_token - r.sent);
    failed |= loadgen_samples_append(&t->itl, &r.itl);
    if (r.longest_gap > t->longest_gap) t->longest_gap = r.longest_gap;
    if (r.outcome == LOADGEN_LATE) {
        t->late++;
        log_failure(run, model, i, "late", &r, r.error);
    } else if (r.outcome == LOADGEN_FAILED) {
        t->failed++;
        log_failure(run, model, i, "failed", &r, r.error);
    } else {
        t->completed++;
        t->prompt_tokens += r.prompt_tokens > 0 ? r.prompt_tokens : 0;
        t->generated_tokens += r.completion_tokens >= 0 ? r.completion_tokens : r.chunks;
        enum chaos_verdict v =
            chaos_check_output(run, &run->items[i], model, r.text, r.finish_reason,
                               r.completion_tokens, run->phase == 0, why, sizeof(why));
        if (v == CHAOS_EQUAL && !fits_schema(item, &r)) {
            v = CHAOS_DIFFERENT;
            snprintf(why, sizeof(why), "finished under its schema, but is not a JSON object");
        }
        if (v == CHAOS_DIFFERENT) t->wrong++;
        if (v == CHAOS_UNVERIFIED) t->unverified++;
        if (v == CHAOS_DIFFERENT || v == CHAOS_UNVERIFIED)
            log_failure(run, model, i, v == CHAOS_DIFFERENT ? "wrong" : "unverified", &r, why);
    }
    if (r.outcome != LOADGEN_OK) { /* do not spin while the gateway is gone */
        struct timespec backoff = {0, 100000000};
        nanosleep(&backoff, NULL);
    }
    loadgen_result_free(&r);
    return failed ? -1 : 0;
}

static void *client_main(void *arg) {
    struct chaos_client *c = arg;
    int n_items = c->run->options->n_items;
    for (int k = 0; loadgen_now() < c->end; k++) {
        /* the first pass covers the items in order, so phase 1 has a reference for each */
        int first_pass = k * c->n_peers + c->index;
        int i = first_pass < n_items ? first_pass : loadgen_random_range(&c->rng, 0, n_items - 1);
        if (run_item(c->run, c->model, i, &c->tally)) {
            chaos_log(c->run, "client: out of memory");
            break;
        }
    }
    return NULL;
}

static void tally_add(struct chaos_tally *to, const struct chaos_tally *from) {
    to->completed += from->completed;
    to->failed += from->failed;
    to->wrong += from->wrong;
    to->late += from->late;
    to->unverified += from->unverified;
    to->prompt_tokens += from->prompt_tokens;
    to->generated_tokens += from->generated_tokens;
    loadgen_samples_append(&to->ttft, &from->ttft);
    loadgen_samples_append(&to->itl, &from->itl);
    if (from->longest_gap > to->longest_gap) to->longest_gap = from->longest_gap;
}

static void tally_free(struct chaos_tally *t) {
    loadgen_samples_free(&t->ttft);
    loadgen_samples_free(&t->itl);
}

/* --------------------------------------------------------------- phases */

/* What one phase measured: per instance, and the gateway's /metrics. */
struct chaos_phase {
    const char *title;
    double seconds;                          /* wall time, drain included */
    struct chaos_tally tally[CHAOS_MODELS];  /* the clients' requests, per instance */
    struct chaos_tally checks[CHAOS_MODELS]; /* items run alone after the clients */
    const char *checks_what;                 /* why those ran */
    char *metrics_before, *metrics_after;    /* GET /metrics texts (owned) */
};

static char *read_metrics(const struct chaos_run *run) {
    struct loadgen_reply reply;
    char err[LOADGEN_ERROR_MAX];
    if (loadgen_http(run->options->port, "GET", "/metrics", NULL, loadgen_now() + 10, &reply, err,
                     sizeof(err))) {
        fprintf(stderr, "chaos: GET /metrics: %s\n", err);
        return NULL;
    }
    return reply.body;
}

/* Runs the clients of both instances for options->duration seconds (and a
 * fault injector when faults is set), then drains. */
static int run_phase(struct chaos_run *run, struct chaos_phase *phase, int faults) {
    const struct chaos_options *o = run->options;
    static struct chaos_client clients[CHAOS_MODELS * CHAOS_CLIENTS_MAX];
    struct chaos_injector injector = {.run = run};
    int n = 0, rc = 0, injecting = 0;
    double start = loadgen_now(), end = start + o->duration;
    phase->metrics_before = read_metrics(run);
    chaos_log(run, "%s (%g s)", phase->title, o->duration);
    for (int m = 0; m < CHAOS_MODELS; m++) {
        for (int c = 0; c < o->clients[m]; c++, n++) {
            clients[n] = (struct chaos_client){.run = run,
                                               .model = m,
                                               .index = c,
                                               .n_peers = o->clients[m],
                                               .end = end,
                                               .rng = o->seed * 1000003ULL + (uint64_t)n};
            if (pthread_create(&clients[n].thread, NULL, client_main, &clients[n])) {
                chaos_log(run, "cannot start client thread %d", n);
                rc = -1;
                break;
            }
        }
        if (rc) break;
    }
    /* faults stop one interval before the end: the last one lands while clients still run */
    injector.end = end - (o->fault_every < o->duration / 2 ? o->fault_every : 0);
    if (faults && !rc)
        injecting = !pthread_create(&injector.thread, NULL, chaos_injector_main, &injector);
    if (faults && !rc && !injecting) rc = -1;
    if (injecting) pthread_join(injector.thread, NULL);
    for (int i = 0; i < n; i++) {
        pthread_join(clients[i].thread, NULL);
        tally_add(&phase->tally[clients[i].model], &clients[i].tally);
        tally_free(&clients[i].tally);
    }
    phase->seconds = loadgen_now() - start;
    return rc;
}

/* Runs once, alone, every item an instance has no reference for. */
static void fill_references(struct chaos_run *run, struct chaos_phase *phase) {
    int filled = 0;
    for (int m = 0; m < CHAOS_MODELS; m++) {
        for (int i = 0; i < run->options->n_items; i++) {
            pthread_mutex_lock(&run->lock);
            int missing = run->items[i].reference[m] == NULL;
            pthread_mutex_unlock(&run->lock);
            if (!missing) continue;
            run_item(run, m, i, &phase->checks[m]);
            filled++;
        }
    }
    if (filled) chaos_log(run, "ran %d items alone that phase 1 had not reached", filled);
}

/* The flood items' references: all at once on both instances, no fault
 * (the flood of a stop+flood fault is checked against them). */
static void flood_references(struct chaos_run *run) {
    const struct chaos_options *o = run->options;
    chaos_log(run, "flood references: %d requests of %d prompt tokens on each instance at once",
              o->flood, o->flood_prompt);
    if (chaos_flood(run, -1, 1, run->flood_references, &run->flood_reference_health))
        chaos_log(run, "flood references: not every request could start");
}

/* Every item once more on each instance, after the faults recovered. */
static void final_check(struct chaos_run *run, struct chaos_phase *phase) {
    for (int m = 0; m < CHAOS_MODELS; m++)
        for (int i = 0; i < run->options->n_items; i++) run_item(run, m, i, &phase->checks[m]);
}

/* ---------------------------------------------------------------- report */

static const char *format_ms(double seconds, char *text, size_t size) {
    if (seconds < 0)
        snprintf(text, size, "-");
    else
        snprintf(text, size, "%.1f", seconds * 1e3);
    return text;
}

/* A histogram's observations during the phase, on one instance (model >=
 * 0) or summed over both (-1); the instances share the bucket bounds. */
static void phase_histogram(const struct chaos_run *run, const struct chaos_phase *p,
                            const char *name, int model, struct loadgen_histogram *out) {
    *out = (struct loadgen_histogram){0};
    for (int m = 0; m < CHAOS_MODELS; m++) {
        struct loadgen_histogram before, after;
        if (model >= 0 && m != model) continue;
        loadgen_histogram_read(p->metrics_after ? p->metrics_after : "", name,
                               run->options->names[m], &after);
        loadgen_histogram_read(p->metrics_before ? p->metrics_before : "", name,
                               run->options->names[m], &before);
        loadgen_histogram_subtract(&after, &before);
        if (out->n == 0) {
            *out = after;
            continue;
        }
        for (int i = 0; i < out->n && i < after.n; i++) out->counts[i] += after.counts[i];
        out->sum += after.sum;
        out->count += after.count;
    }
}

/* "median / <= max" of a histogram over the phase, "-" when empty. */
static void format_histogram(const struct chaos_run *run, const struct chaos_phase *p,
                             const char *name, int model, char *out, size_t size) {
    struct loadgen_histogram h;
    phase_histogram(run, p, name, model, &h);
    if (h.count <= 0)
        snprintf(out, size, "-");
    else
        snprintf(out, size, "%.2f / <= %.2g", loadgen_histogram_quantile(&h, 0.5),
                 loadgen_histogram_max(&h));
}

/* A counter's increase over the phase, on one instance or both (-1). */
static double counter_delta(const struct chaos_run *run, const struct chaos_phase *p,
                            const char *name, int model) {
    double sum = 0;
    for (int m = 0; m < CHAOS_MODELS; m++) {
        if (model >= 0 && m != model) continue;
        sum +=
            loadgen_metric(p->metrics_after ? p->metrics_after : "", name, run->options->names[m]) -
            loadgen_metric(p->metrics_before ? p->metrics_before : "", name,
                           run->options->names[m]);
    }
    return sum;
}

static void print_row(const struct chaos_run *run, const struct chaos_phase *p, int model,
                      struct chaos_tally *t, int clients) {
    char t50[32], t99[32], i50[32], i99[32], detection[64], recovery[64];
    format_histogram(run, p, "lockstep_detection_seconds", model, detection, sizeof(detection));
    format_histogram(run, p, "lockstep_recovery_seconds", model, recovery, sizeof(recovery));
    printf("| %s | %d | %ld | %ld | %ld | %ld | %ld | %.0f | %.0f | %s | %s | %.1f | %.1f "
           "| %s / %s | %s / %s | %.2f |\n",
           model >= 0 ? run->options->names[model] : "all", clients, t->completed, t->failed,
           t->wrong, t->late, t->unverified,
           counter_delta(run, p, "lockstep_runner_restarts_total", model),
           counter_delta(run, p, "lockstep_stuck_detections_total", model), detection, recovery,
           (double)t->generated_tokens / p->seconds, (double)t->prompt_tokens / p->seconds,
           format_ms(loadgen_samples_percentile(&t->ttft, 50), t50, sizeof(t50)),
           format_ms(loadgen_samples_percentile(&t->ttft, 99), t99, sizeof(t99)),
           format_ms(loadgen_samples_percentile(&t->itl, 50), i50, sizeof(i50)),
           format_ms(loadgen_samples_percentile(&t->itl, 99), i99, sizeof(i99)), t->longest_gap);
}

static void print_phase(const struct chaos_run *run, struct chaos_phase *p) {
    const struct chaos_options *o = run->options;
    struct chaos_tally all = {0};
    printf("\n### %s: %.1f s (drain included)\n\n", p->title, p->seconds);
    printf("| instance | clients | completed | failed | wrong | late | unverified | restarts "
           "| stuck | detection s median / max | recovery s median / max | generated tok/s "
           "| prompt tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | longest gap s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int m = 0; m < CHAOS_MODELS; m++) {
        print_row(run, p, m, &p->tally[m], o->clients[m]);
        tally_add(&all, &p->tally[m]);
    }
    print_row(run, p, -1, &all, o->clients[0] + o->clients[1]);
    tally_free(&all);
    int first = 1;
    for (int m = 0; m < CHAOS_MODELS; m++) {
        const struct chaos_tally *c = &p->checks[m];
        long n = c->completed + c->failed + c->late;
        if (n == 0) continue;
        printf("%s%s: %ld items run alone (%s): %ld completed, %ld failed, %ld wrong, %ld late, "
               "%ld unverified\n",
               first ? "\n" : "", o->names[m], n, p->checks_what, c->completed, c->failed, c->wrong,
               c->late, c->unverified);
        first = 0;
    }
}

/* What GET /debug/stuck keeps: the number of reports, and the newest. */
static void print_stuck_reports(const struct chaos_run *run) {
    struct loadgen_reply reply;
    char err[LOADGEN_ERROR_MAX];
    if (loadgen_http(run->options->port, "GET", "/debug/stuck", NULL, loadgen_now() + 10, &reply,
                     err, sizeof(err))) {
        printf("\nGET /debug/stuck: %s\n", err);
        return;
    }
    if (reply.status != 200) {
        printf("\nGET /debug/stuck: HTTP %d\n", reply.status);
    } else {
        cJSON *root = cJSON_Parse(reply.body);
        const cJSON *reports = cJSON_GetObjectItemCaseSensitive(root, "reports");
        int n = cJSON_IsArray(reports) ? cJSON_GetArraySize(reports) : -1;
        char *last = n > 0 ? cJSON_PrintUnformatted(cJSON_GetArrayItem(reports, n - 1)) : NULL;
        printf("\nGET /debug/stuck: %d report%s kept%s%.1500s\n", n, n == 1 ? "" : "s",
               last ? "; the newest: " : "", last ? last : "");
        free(last);
        cJSON_Delete(root);
    }
    loadgen_reply_free(&reply);
}

/* ---------------------------------------------------------------- options */

static void usage(FILE *out) {
    fprintf(out, "usage: chaos_tool --port N [options]   (normally run by bench/chaos)\n"
                 "  --port N            the gateway's port (required)\n"
                 "  --duration D        seconds of each phase (default 60)\n"
                 "  --fault-every S     seconds between faults in phase 2 (default 5)\n"
                 "  --no-faults         phase 2 runs without faults (a control run)\n"
                 "  --clients-big N     clients on the instance \"big\" (default 6)\n"
                 "  --clients-small N   clients on the instance \"small\" (default 4)\n"
                 "  --tp-big N          its ranks (default 2); --tp-small N (default 1)\n"
                 "  --seed S            items, choices and faults derive from it (default 1)\n"
                 "  --items N           distinct requests (default 12)\n"
                 "  --max-words N       longest prompt in words (default 60)\n"
                 "  --max-tokens N      largest max_tokens of an item (default 96)\n"
                 "  --delay-ms N        delay faults sleep up to N ms per collective (default 20)\n"
                 "  --deadline S        seconds a request may take (default 120)\n"
                 "  --recovery-limit S  seconds a fault may take to recover (default 60)\n"
                 "  --flood N           requests a stop+flood fault sends (default 64)\n"
                 "  --flood-prompt N    prompt tokens of each (default 240)\n"
                 "  --cancels N         streams a stop-cancel fault leaves (default 8)\n"
                 "  --half-open N       connections a half-open fault leaves (default 200)\n"
                 "  --gateway-pid P     the gateway's pid: half-open counts its open files\n"
                 "  --watchdog S        the gateway's --watchdog (default 3): stop-cancel watches\n"
                 "                      S + 2 s (at least 3 s) for a runner restart\n"
                 "  --gateway-limits    print the --max-concurrent and --max-client-connections\n"
                 "                      the gateway needs for these options, and exit\n"
                 "  --hosts A,B,C       the cluster's hosts: adds the faults move (an instance to\n"
                 "                      a random placement on them), lose-host and drain-host\n");
}

/* --hosts A,B,C: the host names of the cluster. */
static int parse_hosts(const char *text, struct chaos_options *o) {
    o->n_hosts = 0;
    for (const char *at = text; *at;) {
        size_t n = strcspn(at, ",");
        if (n == 0 || n >= sizeof(o->hosts[0]) || o->n_hosts == CHAOS_HOSTS_MAX) {
            fprintf(stderr, "chaos: --hosts %s: up to %d names of 1..63 bytes, comma-separated\n",
                    text, CHAOS_HOSTS_MAX);
            return -1;
        }
        snprintf(o->hosts[o->n_hosts++], sizeof(o->hosts[0]), "%.*s", (int)n, at);
        at += n + (at[n] == ',');
    }
    return 0;
}

/* The integer options: name, where, bounds. */
struct int_option {
    const char *name;
    int *value;
    double low, high;
};

static int parse_option(const char *name, const char *value, struct chaos_options *o) {
    double number;
    const struct int_option ints[] = {
        {"--port", &o->port, 1, 65535},
        {"--clients-big", &o->clients[0], 0, CHAOS_CLIENTS_MAX},
        {"--clients-small", &o->clients[1], 0, CHAOS_CLIENTS_MAX},
        {"--tp-big", &o->tp[0], 1, 64},
        {"--tp-small", &o->tp[1], 1, 64},
        {"--items", &o->n_items, 1, 1000},
        {"--max-words", &o->max_words, 3, 100000},
        {"--max-tokens", &o->max_tokens, 8, 100000},
        {"--delay-ms", &o->delay_ms, 1, 100000},
        {"--flood", &o->flood, 1, CHAOS_FLOOD_MAX},
        {"--flood-prompt", &o->flood_prompt, 1, 100000},
        {"--cancels", &o->cancels, 1, CHAOS_CANCELS_MAX},
        {"--half-open", &o->half_open, 1, CHAOS_HALF_MAX},
        {"--gateway-pid", &o->gateway_pid, 1, 1 << 30},
    };
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        if (strcmp(name, ints[i].name) != 0) continue;
        if (loadgen_number_option("chaos", name, value, ints[i].low, ints[i].high, 1, &number))
            return -1;
        *ints[i].value = (int)number;
        return 0;
    }
    double *seconds = !strcmp(name, "--duration")         ? &o->duration
                      : !strcmp(name, "--fault-every")    ? &o->fault_every
                      : !strcmp(name, "--deadline")       ? &o->deadline
                      : !strcmp(name, "--recovery-limit") ? &o->recovery_limit
                      : !strcmp(name, "--watchdog")       ? &o->watchdog
                                                          : NULL;
    if (seconds) return loadgen_number_option("chaos", name, value, 0.1, 1e6, 0, seconds);
    if (!strcmp(name, "--seed")) {
        if (loadgen_number_option("chaos", name, value, 0, 9007199254740992.0, 1, &number))
            return -1;
        o->seed = (uint64_t)number;
        return 0;
    }
    fprintf(stderr, "chaos: unknown option '%s' (see --help)\n", name);
    return -1;
}

/* 0, 1 for --help, -1 on a bad option. */
static int parse_options(int argc, char **argv, struct chaos_options *o) {
    *o = (struct chaos_options){.names = {"big", "small"},
                                .tp = {2, 1},
                                .clients = {6, 4},
                                .duration = 60,
                                .fault_every = 5,
                                .deadline = 120,
                                .recovery_limit = 60,
                                .faults = 1,
                                .seed = 1,
                                .n_items = 12,
                                .max_words = 60,
                                .max_tokens = 96,
                                .delay_ms = 20,
                                .flood = 64,
                                .flood_prompt = 240,
                                .cancels = 8,
                                .half_open = 200,
                                .watchdog = 3};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
        if (!strcmp(argv[i], "--no-faults")) {
            o->faults = 0;
            continue;
        }
        if (!strcmp(argv[i], "--gateway-limits")) {
            o->limits = 1;
            continue;
        }
        if (i + 1 == argc) {
            fprintf(stderr, "chaos: %s needs a value\n", argv[i]);
            return -1;
        }
        if (!strcmp(argv[i], "--hosts")) {
            if (parse_hosts(argv[++i], o)) return -1;
            continue;
        }
        if (parse_option(argv[i], argv[i + 1], o)) return -1;
        i++;
    }
    if (o->port == 0 && !o->limits) {
        fprintf(stderr, "chaos: --port is required\n");
        return -1;
    }
    return 0;
}

static int larger(int a, int b) {
    return a > b ? a : b;
}

/* The gateway's --max-concurrent and --max-client-connections for a run,
 * each only where its default (256, 512) is too small. At once there are
 * the clients' streams and one fault's worker (the flood, the stop-cancel
 * streams or the half-open connections, which the gateway may still hold
 * a moment after they closed), or the fault-free floods on both instances;
 * 16 more for the monitor's, the injector's and the workers' GET /health. */
static void print_limits(const struct chaos_options *o) {
    int clients = o->clients[0] + o->clients[1];
    int requests = larger(clients + larger(o->flood, o->cancels), 2 * o->flood) + 16;
    int connections = larger(requests, clients + o->half_open + 16);
    if (requests > 256) printf("--max-concurrent %d ", requests);
    if (connections > 512) printf("--max-client-connections %d", connections);
    printf("\n");
}

/* What the tables show but no request suffered: restarts without faults,
 * and more stuck detections than faults that stop progress (a "delay"
 * fault, meant to be slow but not stuck, or a slow step tripped the
 * watchdog). Worth a look; not a failure. */
static void print_anomalies(const struct chaos_run *run, const struct chaos_phase *phases) {
    int stopping = 0;
    for (int i = 0; i < run->n_faults; i++)
        stopping += run->faults[i].status == 200 && (!strcmp(run->faults[i].kind, "stop") ||
                                                     !strcmp(run->faults[i].kind, "stall") ||
                                                     !strcmp(run->faults[i].kind, "stop+flood"));
    double restarts = counter_delta(run, &phases[0], "lockstep_runner_restarts_total", -1);
    double stuck = counter_delta(run, &phases[1], "lockstep_stuck_detections_total", -1);
    if (restarts > 0)
        printf("\nnote: %.0f runner restart%s in phase 1, which injects no fault\n", restarts,
               restarts == 1 ? "" : "s");
    if (run->options->faults && stuck > stopping)
        printf("\nnote: %.0f stuck detections in phase 2 but %d stop/stall/stop+flood faults: "
               "another fault or a slow step tripped the watchdog\n",
               stuck, stopping);
}

/* ------------------------------------------------------------------ main */

/* Waits up to `seconds` until /health says every instance is ready. */
static int wait_ready(struct chaos_run *run, double seconds) {
    const struct chaos_options *o = run->options;
    double give_up = loadgen_now() + seconds;
    char err[LOADGEN_ERROR_MAX] = "";
    while (loadgen_now() < give_up) {
        struct loadgen_health_model models[LOADGEN_MODELS_MAX];
        int n = loadgen_health(o->port, loadgen_now() + 5, models, LOADGEN_MODELS_MAX, err,
                               sizeof(err)),
            ready = 0;
        for (int m = 0; m < CHAOS_MODELS; m++)
            for (int i = 0; i < n; i++)
                ready += !strcmp(models[i].name, o->names[m]) && models[i].ready;
        if (ready == CHAOS_MODELS) return 0;
        if (n >= 0)
            snprintf(err, sizeof(err), "instances %s and %s are not both ready", o->names[0],
                     o->names[1]);
        struct timespec nap = {0, 100000000};
        nanosleep(&nap, NULL);
    }
    fprintf(stderr, "chaos: the gateway was not ready within %g s: %s\n", seconds, err);
    return -1;
}

/* The whole run once the options are read; the exit status. */
static int chaos_main(struct chaos_run *run) {
    const struct chaos_options *o = run->options;
    struct chaos_phase phases[2] = {
        {.title = "phase 1: baseline, no faults", .checks_what = "phase 1 had not reached them"},
        {.title = o->faults ? "phase 2: faults" : "phase 2: no faults (--no-faults)",
         .checks_what = "at the end, once each"}};
    pthread_t monitor;
    if (wait_ready(run, 300) || items_create(run) || flood_items_create(run)) return 1;
    if (pthread_create(&monitor, NULL, chaos_monitor_main, run)) return 1;
    char faults[64] = "no faults";
    if (o->faults)
        snprintf(faults, sizeof(faults), "a fault every %g s in phase 2", o->fault_every);
    printf("chaos: port %d, instances %s (%d clients, tp %d) and %s (%d clients, tp %d), "
           "%d items (temperature 0.8), %g s per phase, %s, request deadline %g s\n",
           o->port, o->names[0], o->clients[0], o->tp[0], o->names[1], o->clients[1], o->tp[1],
           o->n_items, o->duration, faults, o->deadline);
    if (o->faults)
        printf("chaos: stop+flood sends %d requests of %d prompt tokens, stop-cancel %d streams, "
               "half-open %d connections (gateway pid %d, watchdog %g s)\n",
               o->flood, o->flood_prompt, o->cancels, o->half_open, o->gateway_pid, o->watchdog);
    fflush(stdout);

    long bad = run_phase(run, &phases[0], 0) ? 1 : 0;
    fill_references(run, &phases[0]);
    if (o->faults) flood_references(run);
    phases[0].metrics_after = read_metrics(run);
    run->phase = 1;
    bad += run_phase(run, &phases[1], o->faults) ? 1 : 0;
    if (o->faults) chaos_wait_recovered(run);
    final_check(run, &phases[1]);
    phases[1].metrics_after = read_metrics(run);
    atomic_store(&run->stopping, 1);
    pthread_join(monitor, NULL);

    long completed = 0;
    for (int p = 0; p < 2; p++) {
        print_phase(run, &phases[p]);
        for (int m = 0; m < CHAOS_MODELS; m++) {
            const struct chaos_tally *t[2] = {&phases[p].tally[m], &phases[p].checks[m]};
            for (int k = 0; k < 2; k++) {
                bad += t[k]->failed + t[k]->wrong + t[k]->late + t[k]->unverified;
                completed += t[k]->completed;
            }
        }
    }
    printf("\nrestarts, stuck: from /metrics; detection and recovery: the gateway's histograms "
           "(median interpolated in the buckets, max = the upper bound of the highest non-empty "
           "bucket); TTFT, ITL, tok/s and longest gap: client-side.\n");
    struct chaos_fault_summary faults_summary = {0};
    if (o->faults) chaos_print_faults(run, &faults_summary);
    completed += faults_summary.completed;
    bad += faults_summary.bad;
    int not_recovered = faults_summary.not_recovered, checks = faults_summary.checks_failed;
    if (o->faults) print_stuck_reports(run);
    print_anomalies(run, phases);
    for (int p = 0; p < 2; p++) {
        for (int m = 0; m < CHAOS_MODELS; m++) {
            tally_free(&phases[p].tally[m]);
            tally_free(&phases[p].checks[m]);
        }
        free(phases[p].metrics_before);
        free(phases[p].metrics_after);
    }
    int pass = bad == 0 && not_recovered == 0 && checks == 0;
    printf("\nchaos: %s: %ld requests completed, %ld failed, wrong, late or unverified; "
           "%d faults posted, %d not recovered, %d failed their own checks\n",
           pass ? "PASS" : "FAIL", completed, bad, run->n_faults, not_recovered, checks);
    return pass ? 0 : 1;
}

int main(int argc, char **argv) {
    static struct chaos_options o;
    int parsed = parse_options(argc, argv, &o);
    if (parsed) {
        usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    if (o.limits) {
        print_limits(&o);
        return 0;
    }
    struct chaos_run *run = calloc(1, sizeof(*run));
    if (!run) return 1;
    run->options = &o;
    run->start = loadgen_now();
    pthread_mutex_init(&run->lock, NULL);
    int status = chaos_main(run);
    items_free(run);
    pthread_mutex_destroy(&run->lock);
    free(run);
    return status;
}
