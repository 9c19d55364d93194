/* soak.c -- bench/soak's measuring tool (soak_tool): the measurement
 * protocol of issue 6, one part per invocation, against a running
 * `lockstep serve` (bench/soak starts the gateways and prints the tables).
 *
 * usage: soak_tool --port N --part a|b|c [options]   (--help)
 *        soak_tool --print-header a|b|c
 *
 *   a  --model NAME with --clients 6 streaming clients for --seconds:
 *      requests completed (and per 10 minutes) and stalls;
 *   b  single requests, one at a time: for each of --rounds 2 rounds, for
 *      each model of --models A,B in turn (the rounds alternate the models,
 *      so a drift of the machine touches both), --reps 20 requests of a
 *      --prompt-tokens P-token prompt and --max-tokens M tokens out: medians
 *      of prompt tok/s (usage.prompt_tokens / time to the first token) and
 *      generation tok/s (tokens after the first / time from the first to the
 *      last token);
 *   c  as a, plus --second NAME (another instance on the same cores) with
 *      --second-clients 4: requests per 10 minutes of each.
 *
 * The load of a and c: each request a fresh seed, a prompt of 16..48 words
 * drawn from the seed, --load-tokens 128 tokens at most, temperature 0.8.
 * After --seconds no client starts a request; requests still running are
 * read to their end (their failures and stalls count) but only those whose
 * data: [DONE] came in the window count as completed. A stall is a stream
 * with no token for more than --stall 5 seconds (the wait for the first
 * token included). Each part prints markdown table rows (--label names the
 * model file in them); exit status 1 when a request failed or stalled.
 *
 * With --move-every S (parts a and c; the gateway serves a cluster with
 * --enable-faults) a mover moves --model's instance every S seconds to the
 * next placement of --move-plan (POST /debug/fault's "move"), cycling, and
 * times each move until GET /v1/cluster shows the instance ready there.
 *
 * With --verify N (parts a and c) the load's requests cycle through N
 * fixed (prompt, seed) pairs: before the window each pair is asked once of
 * every instance, undisturbed, and every request of the window must give
 * exactly that text (seeded sampling resumes exactly through restarts,
 * moves and lost hosts: DESIGN.md I4, I8); one that differs counts as wrong
 * and fails the run. */
#include "loadgen.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SOAK_CLIENTS_MAX 256 /* clients of one instance */
#define SOAK_MODELS_MAX  4   /* models of part b */
#define SOAK_REPS_MAX    1000
#define SOAK_PLAN_MAX    8 /* placements of --move-plan */
#define SOAK_MOVES_MAX   1000
#define SOAK_VERIFY_MAX  256 /* (prompt, seed) pairs of --verify */

struct soak_options {
    int port;
    char part;          /* 'a', 'b' or 'c' */
    const char *label;  /* the model file, for the rows */
    const char *model;  /* a, c: the tensor-parallel instance */
    const char *second; /* c: the other instance */
    int clients, second_clients;
    double seconds;                     /* a, c: the measured window */
    int load_tokens;                    /* a, c: max_tokens of the load */
    double stall;                       /* seconds without a token that make a stall */
    double deadline;                    /* seconds a request may take */
    char *models[SOAK_MODELS_MAX];      /* b: models, in order (owned by argv) */
    int prompt_tokens[SOAK_MODELS_MAX]; /* b: prompt length of each */
    int max_tokens[SOAK_MODELS_MAX];    /* b: tokens out of each */
    int n_models;
    int reps, rounds;                  /* b */
    double move_every;                 /* a, c: seconds between moves (0: none) */
    int n_plan;                        /* placements the moves cycle through */
    int plan_tp[SOAK_PLAN_MAX];        /* each one's degree */
    char plan_host[SOAK_PLAN_MAX][64]; /* and host */
    int verify;                        /* a, c: pairs of --verify (0: fresh seeds, unchecked) */
};

/* The undisturbed texts of --verify's pairs, per instance: set before the
 * window, read by every client after. */
static char *reference[2][SOAK_VERIFY_MAX];

/* ------------------------------------------------------------ part a, c */

/* What the clients of one instance measured. */
struct soak_tally {
    long completed, failed, stalls, tokens; /* tokens: of the completed requests */
    long wrong;                             /* --verify: texts that differ from the reference */
    struct loadgen_samples ttft, itl;
    double longest_gap;
    char first_error[LOADGEN_ERROR_MAX];
};

struct soak_client {
    const struct soak_options *options;
    const char *model;
    int which;                /* 0: --model, 1: --second (its references) */
    double end;               /* the window's end: no request starts after it */
    atomic_ullong *next_seed; /* shared by every client */
    struct soak_tally tally;
    pthread_t thread;
};

/* The prompt and seed of a load request: a fresh one, or under --verify
 * one of the pairs (seed k + 1, k < verify). */
static uint64_t load_seed(const struct soak_options *o, uint64_t n) {
    return o->verify ? 1 + (n - 1) % (uint64_t)o->verify : n;
}

static void soak_request(struct soak_client *c) {
    const struct soak_options *o = c->options;
    uint64_t seed = load_seed(o, atomic_fetch_add(c->next_seed, 1)), state = seed;
    char *prompt = loadgen_prompt(seed, loadgen_random_range(&state, 16, 48));
    struct loadgen_request request = {.model = c->model,
                                      .prompt = prompt ? prompt : "",
                                      .seed = seed,
                                      .max_tokens = o->load_tokens,
                                      .temperature = 0.8};
    struct loadgen_result r;
    struct soak_tally *t = &c->tally;
    if (loadgen_complete(o->port, &request, loadgen_now() + o->deadline, &r) == 0) {
        if (r.first_token > 0) loadgen_samples_push(&t->ttft, r.first_token - r.sent);
        loadgen_samples_append(&t->itl, &r.itl);
        if (r.longest_gap > t->longest_gap) t->longest_gap = r.longest_gap;
        t->stalls += r.longest_gap > o->stall;
        if (r.outcome != LOADGEN_OK) {
            struct timespec backoff = {0, 100000000}; /* do not spin while the gateway is gone */
            if (t->failed++ == 0) snprintf(t->first_error, sizeof(t->first_error), "%s", r.error);
            nanosleep(&backoff, NULL);
        } else if (o->verify && strcmp(r.text, reference[c->which][seed - 1]) != 0) {
            if (t->wrong++ == 0 && !t->first_error[0])
                snprintf(t->first_error, sizeof(t->first_error),
                         "seed %llu gave '%.80s', undisturbed '%.80s'", (unsigned long long)seed,
                         r.text, reference[c->which][seed - 1]);
        } else if (r.done <= c->end) {
            t->completed++;
            t->tokens += r.completion_tokens >= 0 ? r.completion_tokens : r.chunks;
        }
        loadgen_result_free(&r);
    }
    free(prompt);
}

static void *soak_client_main(void *arg) {
    struct soak_client *c = arg;
    while (loadgen_now() < c->end) soak_request(c);
    return NULL;
}

static const char *format_ms(struct loadgen_samples *s, double p, char *text, size_t size) {
    double value = loadgen_samples_percentile(s, p);
    if (value < 0)
        snprintf(text, size, "-");
    else
        snprintf(text, size, "%.1f", value * 1e3);
    return text;
}

static void print_load_row(const struct soak_options *o, const char *instance, int clients,
                           struct soak_tally *t) {
    char t50[32], t99[32], i50[32], i99[32];
    printf("| %s | %s | %d | %ld | %.1f | %ld | %ld | %.1f | %.1f | %s / %s | %s / %s | %.2f |\n",
           o->label, instance, clients, t->completed, (double)t->completed * 600 / o->seconds,
           t->stalls, t->failed, (double)t->tokens / (double)(t->completed ? t->completed : 1),
           (double)t->tokens / o->seconds, format_ms(&t->ttft, 50, t50, sizeof(t50)),
           format_ms(&t->ttft, 99, t99, sizeof(t99)), format_ms(&t->itl, 50, i50, sizeof(i50)),
           format_ms(&t->itl, 99, i99, sizeof(i99)), t->longest_gap);
    if (t->failed || t->wrong)
        fprintf(stderr, "soak: %s: first failure: %s\n", instance, t->first_error);
}

/* ------------------------------------------------------------- moves */

struct soak_mover {
    const struct soak_options *options;
    double end;
    int moves, completed;                  /* posted; seen done */
    int refused;                           /* refused with 409 (the target host is lost or full) */
    char first_refusal[LOADGEN_ERROR_MAX]; /* why the first of them was */
    double seconds[SOAK_MOVES_MAX];        /* (completed) each one's time to complete */
    char first_error[LOADGEN_ERROR_MAX];
    pthread_t thread;
};

/* "HOST:TP" as the gateway spells a placement on one host ("HOST" at tp 1). */
static void placement_text(char *out, size_t size, const char *host, int tp) {
    if (tp == 1)
        snprintf(out, size, "%s", host);
    else
        snprintf(out, size, "%s:%d", host, tp);
}

/* 1 when GET /v1/cluster shows model's first instance ready on hosts. */
static int placed(const struct soak_options *o, const char *hosts) {
    struct loadgen_reply reply;
    char err[LOADGEN_ERROR_MAX];
    int done = 0;
    if (loadgen_http(o->port, "GET", "/v1/cluster", NULL, loadgen_now() + 5, &reply, err,
                     sizeof(err)))
        return 0;
    cJSON *root = reply.status == 200 ? cJSON_Parse(reply.body) : NULL, *in;
    cJSON_ArrayForEach(in, cJSON_GetObjectItem(root, "instances")) {
        const char *model = cJSON_GetStringValue(cJSON_GetObjectItem(in, "model"));
        const char *at = cJSON_GetStringValue(cJSON_GetObjectItem(in, "hosts"));
        const char *state = cJSON_GetStringValue(cJSON_GetObjectItem(in, "state"));
        if (model && at && state && !strcmp(model, o->model))
            done = !strcmp(at, hosts) && !strcmp(state, "ready");
    }
    cJSON_Delete(root);
    loadgen_reply_free(&reply);
    return done;
}

static void *soak_mover_main(void *arg) {
    struct soak_mover *m = arg;
    const struct soak_options *o = m->options;
    char body[256], err[LOADGEN_ERROR_MAX], hosts[80];
    for (double next = loadgen_now() + o->move_every; next < m->end; next += o->move_every) {
        struct timespec nap = {0, 0};
        double wait = next - loadgen_now();
        nap.tv_sec = (time_t)(wait > 0 ? wait : 0);
        nap.tv_nsec = wait > 0 ? (long)((wait - (double)nap.tv_sec) * 1e9) : 0;
        nanosleep(&nap, NULL);
        int k = m->moves % o->n_plan;
        struct loadgen_reply reply;
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"kind\":\"move\",\"tp\":%d,\"hosts\":[\"%s\"]}", o->model,
                 o->plan_tp[k], o->plan_host[k]);
        placement_text(hosts, sizeof(hosts), o->plan_host[k], o->plan_tp[k]);
        double start = loadgen_now();
        m->moves++;
        if (loadgen_http(o->port, "POST", "/debug/fault", body, start + 10, &reply, err,
                         sizeof(err)) == 0) {
            if (reply.status != 200)
                snprintf(err, sizeof(err), "HTTP %d: %.200s", reply.status, reply.body);
            /* a placement that cannot be had now (its host lost, or the
             * instance there already) is refused, which is right, not a
             * failure of the move */
            int posted = reply.status == 200, refused = reply.status == 409;
            loadgen_reply_free(&reply);
            if (refused) {
                if (m->refused++ == 0)
                    snprintf(m->first_refusal, sizeof(m->first_refusal), "%s", err);
                continue;
            }
            while (posted && loadgen_now() - start < 120 && !placed(o, hosts)) {
                struct timespec poll = {0, 50000000};
                nanosleep(&poll, NULL);
            }
            if (posted && placed(o, hosts) && m->completed < SOAK_MOVES_MAX) {
                m->seconds[m->completed++] = loadgen_now() - start;
                continue;
            }
        }
        if (!m->first_error[0]) snprintf(m->first_error, sizeof(m->first_error), "%s", err);
    }
    return NULL;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One line after the table: the moves and their times. */
static int print_moves(struct soak_mover *m) {
    qsort(m->seconds, (size_t)m->completed, sizeof(double), compare_doubles);
    printf("\nmoves of %s: %d posted, %d completed, %d refused (409); time to complete median "
           "%.2f s, max %.2f s%s%s\n",
           m->options->model, m->moves, m->completed, m->refused,
           m->completed ? m->seconds[m->completed / 2] : 0.0,
           m->completed ? m->seconds[m->completed - 1] : 0.0,
           m->first_error[0] ? "; first failure: " : "", m->first_error);
    if (m->refused) printf("the first refusal: %s\n", m->first_refusal);
    return m->completed + m->refused < m->moves;
}

/* --verify: every pair's text from each instance, before any fault; -1
 * (said) if one cannot be had. */
static int take_references(const struct soak_options *o, const char *const *names, int n_models) {
    for (int g = 0; g < n_models; g++)
        for (int k = 0; k < o->verify; k++) {
            uint64_t seed = (uint64_t)k + 1, state = seed;
            char *prompt = loadgen_prompt(seed, loadgen_random_range(&state, 16, 48));
            struct loadgen_request request = {.model = names[g],
                                              .prompt = prompt ? prompt : "",
                                              .seed = seed,
                                              .max_tokens = o->load_tokens,
                                              .temperature = 0.8};
            struct loadgen_result r;
            if (loadgen_complete(o->port, &request, loadgen_now() + o->deadline, &r)) {
                fprintf(stderr, "soak: out of memory\n");
                free(prompt);
                return -1;
            }
            if (r.outcome == LOADGEN_OK) reference[g][k] = strdup(r.text);
            if (!reference[g][k])
                fprintf(stderr, "soak: the reference of %s seed %d failed: %s\n", names[g], k + 1,
                        r.outcome == LOADGEN_OK ? "out of memory" : r.error);
            loadgen_result_free(&r);
            free(prompt);
            if (!reference[g][k]) return -1;
        }
    return 0;
}

/* Parts a and c: the clients of one or two instances for o->seconds. */
static int run_load(const struct soak_options *o) {
    static struct soak_client clients[2 * SOAK_CLIENTS_MAX];
    static atomic_ullong next_seed;
    const char *names[2] = {o->model, o->second};
    int counts[2] = {o->clients, o->part == 'c' ? o->second_clients : 0}, n = 0, rc = 0;
    if (o->verify && take_references(o, names, counts[1] ? 2 : 1)) return 1;
    double end = loadgen_now() + o->seconds;
    static struct soak_mover mover;
    atomic_init(&next_seed, 1);
    mover = (struct soak_mover){.options = o, .end = end};
    int moving =
        o->move_every > 0 && pthread_create(&mover.thread, NULL, soak_mover_main, &mover) == 0;
    for (int g = 0; g < 2; g++) {
        for (int i = 0; i < counts[g]; i++, n++) {
            clients[n] = (struct soak_client){
                .options = o, .model = names[g], .which = g, .end = end, .next_seed = &next_seed};
            if (pthread_create(&clients[n].thread, NULL, soak_client_main, &clients[n])) {
                fprintf(stderr, "soak: cannot start client thread %d\n", n);
                counts[g] = i;
                rc = 1;
                break;
            }
        }
    }
    for (int g = 0, k = 0; g < 2; g++) {
        struct soak_tally all = {0};
        for (int i = 0; i < counts[g]; i++, k++) {
            struct soak_tally *t = &clients[k].tally;
            pthread_join(clients[k].thread, NULL);
            all.completed += t->completed;
            all.failed += t->failed;
            all.stalls += t->stalls;
            all.wrong += t->wrong;
            all.tokens += t->tokens;
            loadgen_samples_append(&all.ttft, &t->ttft);
            loadgen_samples_append(&all.itl, &t->itl);
            if (t->longest_gap > all.longest_gap) all.longest_gap = t->longest_gap;
            if (t->failed && !all.first_error[0])
                snprintf(all.first_error, sizeof(all.first_error), "%s", t->first_error);
            loadgen_samples_free(&t->ttft);
            loadgen_samples_free(&t->itl);
        }
        if (counts[g] > 0) print_load_row(o, names[g], counts[g], &all);
        if (counts[g] > 0 && o->verify)
            fprintf(stderr,
                    "soak: %s: %ld outputs checked against their undisturbed run, %ld wrong\n",
                    names[g], all.completed + all.wrong, all.wrong);
        rc |= all.failed > 0 || all.stalls > 0 || all.wrong > 0;
        loadgen_samples_free(&all.ttft);
        loadgen_samples_free(&all.itl);
    }
    if (moving) {
        pthread_join(mover.thread, NULL);
        rc |= print_moves(&mover);
    }
    return rc;
}

/* --------------------------------------------------------------- part b */

/* One streamed request alone; 0, or -1 (said on stderr) if it failed. */
static int single_request(const struct soak_options *o, const char *model, const char *prompt,
                          uint64_t seed, int max_tokens, struct loadgen_result *r) {
    struct loadgen_request request = {.model = model,
                                      .prompt = prompt,
                                      .seed = seed,
                                      .max_tokens = max_tokens,
                                      .temperature = 0.8};
    if (loadgen_complete(o->port, &request, loadgen_now() + o->deadline, r)) {
        fprintf(stderr, "soak: out of memory\n");
        return -1;
    }
    if (r->outcome == LOADGEN_OK && r->prompt_tokens > 0) return 0;
    fprintf(stderr, "soak: %s: %s\n", model, r->outcome == LOADGEN_OK ? "no usage" : r->error);
    loadgen_result_free(r);
    return -1;
}

/* The prompt tokens of a `words`-word prompt (INT32_MAX when the gateway
 * refuses it, for example longer than the context). */
static int prompt_tokens(const struct soak_options *o, const char *model, int words) {
    char *prompt = loadgen_prompt(7, words);
    struct loadgen_result r;
    int tokens = INT32_MAX;
    if (prompt && single_request(o, model, prompt, 1, 1, &r) == 0) {
        tokens = r.prompt_tokens;
        loadgen_result_free(&r);
    }
    free(prompt);
    return tokens;
}

/* The smallest word count whose prompt has at least `target` tokens,
 * found from a probe's ratio and then by bisection; -1 if none fits. */
static int calibrate_words(const struct soak_options *o, const char *model, int target) {
    int probe = prompt_tokens(o, model, 32);
    if (probe == INT32_MAX) return -1;
    int estimate = 32 * target / (probe > 0 ? probe : 1);
    int low = estimate * 3 / 4, high = estimate * 5 / 4 + 2;
    while (low > 1 && prompt_tokens(o, model, low) >= target) low /= 2;
    while (prompt_tokens(o, model, high) < target)
        if ((high *= 2) > 64 * target) return -1;
    while (high - low > 1) { /* tokens(low) < target <= tokens(high) */
        int middle = low + (high - low) / 2;
        if (prompt_tokens(o, model, middle) >= target)
            high = middle;
        else
            low = middle;
    }
    return prompt_tokens(o, model, high) == INT32_MAX ? -1 : high;
}

/* The per-request rates of part b. */
struct soak_rates {
    struct loadgen_samples prompt, generation, ttft, total; /* tok/s, tok/s, s, s */
    int prompt_tokens, completion_tokens;                   /* of the last request */
};

static void add_rates(struct soak_rates *rates, const struct loadgen_result *r) {
    double ttft = r->first_token - r->sent, decode = r->last_token - r->first_token;
    loadgen_samples_push(&rates->prompt, (double)r->prompt_tokens / ttft);
    if (r->completion_tokens > 1 && decode > 0)
        loadgen_samples_push(&rates->generation, (double)(r->completion_tokens - 1) / decode);
    loadgen_samples_push(&rates->ttft, ttft);
    loadgen_samples_push(&rates->total, r->done - r->sent);
    rates->prompt_tokens = r->prompt_tokens;
    rates->completion_tokens = r->completion_tokens;
}

static void free_rates(struct soak_rates *rates) {
    loadgen_samples_free(&rates->prompt);
    loadgen_samples_free(&rates->generation);
    loadgen_samples_free(&rates->ttft);
    loadgen_samples_free(&rates->total);
}

/* A seed whose answer runs to max_tokens (end-of-sequence can come
 * earlier); the last one tried if none of 10 does. */
static uint64_t full_length_seed(const struct soak_options *o, int m, const char *prompt) {
    uint64_t seed = 1;
    for (; seed <= 10; seed++) {
        struct loadgen_result r;
        if (single_request(o, o->models[m], prompt, seed, o->max_tokens[m], &r)) continue;
        int full = r.completion_tokens == o->max_tokens[m];
        loadgen_result_free(&r);
        if (full) return seed;
    }
    return seed - 1;
}

static int run_singles(const struct soak_options *o) {
    char *prompts[SOAK_MODELS_MAX] = {0};
    uint64_t seeds[SOAK_MODELS_MAX];
    int failed = 0;
    for (int m = 0; m < o->n_models && !failed; m++) {
        int words = calibrate_words(o, o->models[m], o->prompt_tokens[m]);
        prompts[m] = words > 0 ? loadgen_prompt(7, words) : NULL;
        if (!prompts[m]) {
            fprintf(stderr, "soak: no prompt of %d tokens fits %s\n", o->prompt_tokens[m],
                    o->models[m]);
            failed = 1;
            break;
        }
        seeds[m] = full_length_seed(o, m, prompts[m]);
    }
    for (int round = 1; round <= o->rounds && !failed; round++) {
        for (int m = 0; m < o->n_models; m++) {
            struct soak_rates rates = {0};
            int errors = 0;
            for (int rep = 0; rep < o->reps; rep++) {
                struct loadgen_result r;
                if (single_request(o, o->models[m], prompts[m], seeds[m], o->max_tokens[m], &r)) {
                    errors++;
                    continue;
                }
                add_rates(&rates, &r);
                loadgen_result_free(&r);
            }
            printf("| %s | %d | %d | %d | %d | %d | %.1f | %.1f | %.1f | %.2f |\n", o->models[m],
                   round, rates.prompt_tokens, rates.completion_tokens, o->reps - errors, errors,
                   loadgen_samples_percentile(&rates.prompt, 50),
                   loadgen_samples_percentile(&rates.generation, 50),
                   loadgen_samples_percentile(&rates.ttft, 50) * 1e3,
                   loadgen_samples_percentile(&rates.total, 50));
            fflush(stdout);
            failed |= errors > 0;
            free_rates(&rates);
        }
    }
    for (int m = 0; m < o->n_models; m++) free(prompts[m]);
    return failed;
}

/* -------------------------------------------------------------- options */

static void usage(FILE *out) {
    fprintf(out, "usage: soak_tool --port N --part a|b|c [options]   (normally run by bench/soak)\n"
                 "       soak_tool --print-header a|b|c\n"
                 "  --label TEXT          the model file, for the rows of a and c\n"
                 "  --model NAME          a, c: the tensor-parallel instance (default main)\n"
                 "  --clients N           a, c: its clients (default 6)\n"
                 "  --second NAME         c: the other instance (default second)\n"
                 "  --second-clients N    c: its clients (default 4)\n"
                 "  --seconds S           a, c: the window (default 600)\n"
                 "  --load-tokens N       a, c: max_tokens of the load (default 128)\n"
                 "  --stall S             a stream with no token for S s is a stall (default 5)\n"
                 "  --models A,B          b: the models, alternated within each round\n"
                 "  --prompt-tokens P,Q   b: prompt tokens for each (default 731)\n"
                 "  --max-tokens M,N      b: tokens out for each (default 256)\n"
                 "  --reps N              b: requests per model and round (default 20)\n"
                 "  --rounds N            b: rounds (default 2)\n"
                 "  --deadline S          seconds a request may take (default 300)\n"
                 "  --move-every S        a, c: move --model's instance every S s (a cluster\n"
                 "                        gateway with --enable-faults)\n"
                 "  --move-plan P         the placements the moves cycle through: TP@HOST,...\n"
                 "                        (default 1@127.0.0.3,2@localhost)\n"
                 "  --verify N            a, c: cycle through N (prompt, seed) pairs and check\n"
                 "                        every output against its undisturbed run\n");
}

static void print_header(char part) {
    if (part == 'b') {
        printf("| model | round | prompt tokens | tokens out | requests | failed "
               "| prompt tok/s (median) | generation tok/s (median) | TTFT ms (median) "
               "| request s (median) |\n|---|---|---|---|---|---|---|---|---|---|\n");
        return;
    }
    printf("| model file | instance | clients | requests completed | per 10 min | stalls "
           "| failed | tokens / request | generated tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms "
           "| longest gap s |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

/* A number in [low, high]; -1 with a message if it is not one. */
static int number(const char *name, const char *text, double low, double high, double *value) {
    char *end;
    *value = strtod(text, &end);
    if (end == text || *end != '\0' || !(*value >= low && *value <= high)) {
        fprintf(stderr, "soak: %s '%s' is not a number in %g..%g\n", name, text, low, high);
        return -1;
    }
    return 0;
}

/* A comma-separated list of whole numbers >= 1 (at most SOAK_MODELS_MAX). */
static int number_list(const char *name, const char *text, int *values) {
    char copy[256], *save = NULL;
    int n = 0;
    snprintf(copy, sizeof(copy), "%s", text);
    for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        double value;
        if (n == SOAK_MODELS_MAX || number(name, p, 1, 1e6, &value)) return -1;
        values[n++] = (int)value;
    }
    for (int i = n; i < SOAK_MODELS_MAX; i++) values[i] = values[n > 0 ? n - 1 : 0];
    return n > 0 ? 0 : -1;
}

/* --move-plan TP@HOST,...: the placements the moves cycle through. */
static int parse_plan(const char *text, struct soak_options *o) {
    char copy[512], *save = NULL;
    o->n_plan = 0;
    snprintf(copy, sizeof(copy), "%s", text);
    for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        char *at = strchr(p, '@');
        int k = o->n_plan;
        if (!at || k == SOAK_PLAN_MAX || strlen(at + 1) == 0 || strlen(at + 1) >= 64 ||
            (o->plan_tp[k] = atoi(p)) < 1 || o->plan_tp[k] > 64) {
            fprintf(stderr, "soak: --move-plan '%s': TP@HOST,... (up to %d)\n", text,
                    SOAK_PLAN_MAX);
            return -1;
        }
        snprintf(o->plan_host[k], sizeof(o->plan_host[k]), "%s", at + 1);
        o->n_plan++;
    }
    return o->n_plan > 0 ? 0 : -1;
}

static int parse_option(const char *name, char *value, struct soak_options *o) {
    double v;
    const char **text = !strcmp(name, "--label")    ? &o->label
                        : !strcmp(name, "--model")  ? &o->model
                        : !strcmp(name, "--second") ? &o->second
                                                    : NULL;
    if (text) {
        *text = value;
        return 0;
    }
    if (!strcmp(name, "--part")) {
        o->part = value[0];
        return value[1] == '\0' && value[0] >= 'a' && value[0] <= 'c' ? 0 : -1;
    }
    if (!strcmp(name, "--models")) {
        char *save = NULL;
        o->n_models = 0;
        for (char *p = strtok_r(value, ",", &save); p && o->n_models < SOAK_MODELS_MAX;
             p = strtok_r(NULL, ",", &save))
            o->models[o->n_models++] = p;
        return o->n_models > 0 ? 0 : -1;
    }
    if (!strcmp(name, "--prompt-tokens")) return number_list(name, value, o->prompt_tokens);
    if (!strcmp(name, "--max-tokens")) return number_list(name, value, o->max_tokens);
    if (!strcmp(name, "--seconds")) return number(name, value, 0.1, 1e7, &o->seconds);
    if (!strcmp(name, "--move-every")) return number(name, value, 1, 1e6, &o->move_every);
    if (!strcmp(name, "--move-plan")) return parse_plan(value, o);
    if (!strcmp(name, "--stall")) return number(name, value, 0.01, 1e6, &o->stall);
    if (!strcmp(name, "--deadline")) return number(name, value, 0.1, 1e6, &o->deadline);
    if (!strcmp(name, "--verify")) {
        if (number(name, value, 1, SOAK_VERIFY_MAX, &v)) return -1;
        o->verify = (int)v;
        return 0;
    }
    int *whole = !strcmp(name, "--port")             ? &o->port
                 : !strcmp(name, "--clients")        ? &o->clients
                 : !strcmp(name, "--second-clients") ? &o->second_clients
                 : !strcmp(name, "--load-tokens")    ? &o->load_tokens
                 : !strcmp(name, "--reps")           ? &o->reps
                 : !strcmp(name, "--rounds")         ? &o->rounds
                                                     : NULL;
    if (!whole) {
        fprintf(stderr, "soak: unknown option '%s' (see --help)\n", name);
        return -1;
    }
    if (number(name, value, 0, 65535, &v)) return -1;
    *whole = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    struct soak_options o = {.label = "-",
                             .model = "main",
                             .second = "second",
                             .clients = 6,
                             .second_clients = 4,
                             .seconds = 600,
                             .load_tokens = 128,
                             .stall = 5,
                             .deadline = 300,
                             .prompt_tokens = {731, 731, 731, 731},
                             .max_tokens = {256, 256, 256, 256},
                             .reps = 20,
                             .rounds = 2,
                             .n_plan = 2,
                             .plan_tp = {1, 2},
                             .plan_host = {"127.0.0.3", "localhost"}};
    for (int i = 1; i < argc; i += 2) { /* every option takes one value */
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 == argc) {
            fprintf(stderr, "soak: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--print-header")) {
            print_header(argv[i + 1][0]);
            return 0;
        }
        if (parse_option(argv[i], argv[i + 1], &o)) {
            usage(stderr);
            return 2;
        }
    }
    if (o.port == 0 || !o.part || (o.part == 'b' && o.n_models == 0) || o.clients < 1 ||
        o.clients > SOAK_CLIENTS_MAX || o.second_clients > SOAK_CLIENTS_MAX ||
        o.reps > SOAK_REPS_MAX || o.load_tokens < 1) {
        fprintf(stderr, "soak: needs --port and --part (and --models for part b), clients in "
                        "1..256, --reps at most 1000\n");
        return 2;
    }
    int rc = o.part == 'b' ? run_singles(&o) : run_load(&o);
    fflush(stdout);
    return rc;
}
