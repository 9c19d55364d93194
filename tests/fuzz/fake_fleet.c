/* fake_fleet.c -- the fleet fuzz_http's HTTP layer runs over: every
 * function of src/gateway/fleet/fleet.h that src/gateway/http calls, over
 * a real struct fleet that serves one model (its vocabulary and template
 * loaded from its file) with one instance, "NAME-1", on one host.
 *
 * The instance's supervisor is set up with the requests layer's job events
 * but never started: no runner process, no supervisor thread, and POST
 * /debug/fault on it gets the real 409 ("no ready runner"). In their place
 * a fake runner answers each request through the requests layer as a
 * runner's frames would: each choice is adopted by that supervisor (a
 * reference taken first, as its table takes one), gets tokens, then its
 * FINISHED. What it produces is a script drawn from the prompt's tokens,
 * so inputs choose it: the prompt echoed from some offset, often a '<'
 * that may start a tool call (the EOS token ends a choice, as a runner
 * ends on it), all of max_tokens (length) or fewer (eos or stop),
 * sometimes a keep-alive comment first and sometimes a runner error on the
 * last choice. Half the requests are answered in the HTTP thread before
 * fleet_submit returns (the handler finds them done: whole answers, and
 * streams that start complete); the other half by a worker thread, one
 * token per choice every 100 us, so connections are suspended and resumed
 * while their answers arrive.
 *
 * The admin operations validate what the real ones validate cheaply (an
 * unknown model, instance or host is a 404; an unknown host in a
 * placement, or a degree the model cannot split, a 400) and change
 * nothing, so that every input meets the same fleet: adding reports an
 * instance that never starts, deleting keeps the only one, a move has
 * nowhere to go (409). The views are small JSON in the real ones' shape. */
#include "fake_fleet.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The worker's step: long enough that a connection is suspended between
 * tokens, short enough that a whole answer of max_tokens comes well within
 * the harness's 10 ms of quiet (after which it may half-close). */
#define TICK_NS 100000L

/* What the fake runner produces for one choice: the prompt echoed from
 * start, count tokens, then FINISHED with reason. */
struct fake_script {
    int held; /* 1: adopted, with a reference on the request */
    int start;
    int count;
    enum runner_finish_reason reason;
    enum runner_error_category category; /* reason ERROR: the status it maps to */
    int n_cached;                        /* prompt tokens FINISHED says the cache held */
};

/* A request being answered, a step at a time. */
struct fake_answer {
    struct gateway_request *request;
    struct fake_script scripts[OPENAI_CHOICES_MAX];
    int n_scripts;
    int step;      /* the token every choice gets next; -1: a keep-alive comment first */
    int on_worker; /* 1: the worker answers it */
    struct fake_answer *next;
};

struct fake_fleet {
    struct fleet fleet; /* first: the struct fleet the HTTP layer is given is the fake */
    struct gateway_served served;
    struct fleet_instance instance;
    int served_ready, instance_ready;
    /* fleet.cluster_lock guards the fleet's events and what follows */
    pthread_cond_t wake;                     /* the worker has work, or must stop */
    struct fake_answer *inbox, **inbox_tail; /* for the worker, in submission order */
    pthread_t worker;
    int worker_running; /* 1: it takes answers (from create to stop) */
    int added;          /* instances fleet_add reported: their ids' numbers */
};

static struct fake_fleet *fake_of(struct fleet *f) {
    return (struct fake_fleet *)f;
}

/* ---------- the fake runner's scripts ---------- */

static uint64_t mix(uint64_t x) { /* splitmix64's finalizer */
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t prompt_hash(const struct gateway_request *r) {
    uint64_t h = 0xCBF29CE484222325ull;              /* FNV-1a over the token ids */
    const struct gateway_prompt *p = &r->prompts[0]; /* the first prompt: the script's */
    for (int i = 0; i < p->n_tokens; i++) h = (h ^ (uint32_t)p->tokens[i]) * 0x100000001B3ull;
    return mix(h ^ (uint64_t)r->n_choices);
}

/* Token k of a choice: the first prompt's, from the script's start on. */
static int echo_token(const struct gateway_request *r, const struct fake_script *s, int k) {
    return r->prompts[0].tokens[(s->start + k) % r->prompts[0].n_tokens];
}

/* 1 if the prompt's token at i starts with c (any 0), or holds it (any 1). */
static int token_has(const struct gateway_request *r, int i, char c, int any) {
    size_t length = 0;
    const char *bytes =
        tokenizer_token_bytes(r->served->tokenizer, r->prompts[0].tokens[i], &length);
    if (!bytes || length == 0) return 0;
    return any ? memchr(bytes, c, length) != NULL : bytes[0] == c;
}

static int starts_tag(const struct gateway_request *r, int i) {
    return token_has(r, i, '<', 0);
}

/* Where an echo starts: any prompt position, or (tag 1) one whose token
 * starts with '<', so that a tag the client wrote (a tool call, markup a
 * stop string cuts) can come back whole and the requests layer parses it. */
static int echo_start(const struct gateway_request *r, uint64_t pick, int tag) {
    int n_tags = 0;
    for (int i = 0; tag && i < r->prompts[0].n_tokens; i++) n_tags += starts_tag(r, i);
    if (n_tags == 0) return (int)(pick % (uint64_t)r->prompts[0].n_tokens);
    int nth = (int)(pick % (uint64_t)n_tags);
    for (int i = 0;; i++)
        if (starts_tag(r, i) && nth-- == 0) return i;
}

/* A choice's script of at most max tokens from x (its bits choose); eos
 * is the vocabulary's. */
static void plan_choice(struct fake_script *s, const struct gateway_request *r, int max, uint64_t x,
                        int eos) {
    s->count = (x & 3) == 0 ? (int)((x >> 8) % (uint64_t)(max + 1)) : max;
    s->reason = s->count == max  ? RUNNER_FINISH_LENGTH
                : ((x >> 4) & 1) ? RUNNER_FINISH_EOS
                                 : RUNNER_FINISH_STOP;
    int tag = (x >> 5) & 1;
    if (r->prompts[0].n_tokens == 0) { /* nothing to echo (the requests layer makes none) */
        s->count = 0;
        s->reason = RUNNER_FINISH_EOS;
        return;
    }
    s->start = echo_start(r, x >> 16, tag);
    s->n_cached = (int)((x >> 40) % (uint64_t)(r->prompts[0].n_tokens + 1));
    for (int k = 0; k < s->count; k++) {
        int i = (s->start + k) % r->prompts[0].n_tokens, ends = echo_token(r, s, k) == eos;
        /* a runner never sends its EOS token (sampling it ends the choice),
         * and a tool call ends its line, where the model stops (EOS) */
        if (r->body.ignore_eos || !(ends || (tag && k > 0 && token_has(r, i, '\n', 1)))) continue;
        s->count = k;
        s->reason = RUNNER_FINISH_EOS;
        break;
    }
}

static void plan(struct fake_fleet *fake, struct fake_answer *a) {
    const struct gateway_request *r = a->request;
    uint64_t h = prompt_hash(r);
    int eos = tokenizer_eos(fake->served.tokenizer);
    a->n_scripts = r->n_choices < OPENAI_CHOICES_MAX ? r->n_choices : OPENAI_CHOICES_MAX;
    a->on_worker = (h >> 1) & 1;
    a->step = (h >> 2) & 1 ? -1 : 0;
    for (int i = 0; i < a->n_scripts; i++) {
        plan_choice(&a->scripts[i], r, r->choices[i].max_tokens, mix(h + (uint64_t)i + 1), eos);
        if (r->body.kind == OPENAI_EMBEDDING) a->scripts[i].count = 0; /* it generates nothing */
    }
    if ((h & 7) == 7) { /* the runner fails the last choice: the request fails */
        a->scripts[a->n_scripts - 1].reason = RUNNER_FINISH_ERROR;
        a->scripts[a->n_scripts - 1].category = (enum runner_error_category)((h >> 8) & 3);
    }
}

/* ---------- the fake runner's frames ---------- */

/* Choice i's token of this step, with logprobs: the token first among its
 * alternatives, as a runner ranks them. */
static void send_token(struct fake_fleet *fake, struct fake_answer *a, int i) {
    const struct gateway_request *r = a->request;
    struct supervisor *s = &fake->instance.supervisor;
    struct supervisor_job *job = &a->request->choices[i].job;
    int vocab = tokenizer_vocab_size(fake->served.tokenizer);
    struct runner_token t = {.id = job->id, .token = echo_token(r, &a->scripts[i], a->step)};
    int top = r->body.top_logprobs;
    t.n_top = top < 0 ? 0 : top > RUNNER_TOP_LOGPROBS_MAX ? RUNNER_TOP_LOGPROBS_MAX : top;
    t.logprob = -0.25f;
    for (int j = 0; j < t.n_top; j++)
        t.top[j] = (struct runner_alternative){(t.token + j) % vocab, -0.25f * (float)(j + 1)};
    s->events.token(job, &t, s);
}

static void send_finished(struct fake_fleet *fake, struct fake_answer *a, int i) {
    const struct fake_script *script = &a->scripts[i];
    struct supervisor *s = &fake->instance.supervisor;
    struct supervisor_job *job = &a->request->choices[i].job;
    struct runner_finished f = {.id = job->id,
                                .reason = script->reason,
                                .n_prompt = a->request->choices[i].prompt->n_tokens,
                                .n_generated = script->count,
                                .category = script->category,
                                .n_cached = script->n_cached};
    if (script->reason == RUNNER_FINISH_ERROR)
        snprintf(f.message, sizeof(f.message), "the fake runner fails this choice (its script)");
    if (a->request->body.kind == OPENAI_EMBEDDING && script->reason != RUNNER_FINISH_ERROR) {
        /* an embed request's vector comes before its FINISHED: 16 values of its input */
        float values[16];
        const struct gateway_prompt *p = a->request->choices[i].prompt;
        for (int k = 0; k < 16; k++) values[k] = (float)p->tokens[k % p->n_tokens] - 8.0f * k;
        struct runner_embedding e = {job->id, 16, values};
        s->events.embedding(job, &e, s);
    }
    s->events.finished(job, &f, s);
}

/* One step: a keep-alive comment (step -1: the stream has been quiet for
 * the keep-alive period, it says, so the comment comes first), or every
 * choice's next token or its FINISHED. 1 once every choice ended. */
static int answer_step(struct fake_fleet *fake, struct fake_answer *a) {
    int over = 1;
    if (a->step < 0) {
        double period = fake->fleet.params->keep_alive_seconds;
        gateway_request_keep_alive(a->request, clock_now_us() + (uint64_t)(period * 1e6) + 1);
        a->step = 0;
        return 0;
    }
    for (int i = 0; i < a->n_scripts; i++) {
        const struct fake_script *s = &a->scripts[i];
        if (!s->held || a->step > s->count) continue;
        if (a->step < s->count) {
            send_token(fake, a, i);
            over = 0;
        } else {
            send_finished(fake, a, i);
        }
    }
    a->step++;
    return over;
}

/* Drops the references the answer holds (the last one may free its
 * request), and the answer. */
static void answer_free(struct fake_fleet *fake, struct fake_answer *a) {
    struct supervisor *s = &fake->instance.supervisor;
    for (int i = 0; i < a->n_scripts; i++)
        if (a->scripts[i].held) s->events.release(&a->request->choices[i].job);
    free(a);
}

/* A stopping supervisor fails what it still holds with 503. */
static void answer_fail(struct fake_fleet *fake, struct fake_answer *a) {
    struct supervisor *s = &fake->instance.supervisor;
    for (int i = 0; i < a->n_scripts; i++)
        if (a->scripts[i].held)
            s->events.failed(&a->request->choices[i].job, 503, "the gateway is stopping");
    answer_free(fake, a);
}

/* ---------- the worker ---------- */

/* One step of every answer in *list, freeing those that ended; returns
 * where the list now ends. */
static struct fake_answer **step_all(struct fake_fleet *fake, struct fake_answer **list) {
    struct fake_answer **at = list;
    while (*at) {
        struct fake_answer *a = *at;
        if (answer_step(fake, a)) {
            *at = a->next;
            answer_free(fake, a);
        } else {
            at = &a->next;
        }
    }
    return at;
}

static void *worker_main(void *arg) {
    struct fake_fleet *fake = arg;
    struct fake_answer *mine = NULL, **tail = &mine;
    struct timespec tick = {0, TICK_NS};
    pthread_mutex_lock(&fake->fleet.cluster_lock);
    for (;;) {
        if (fake->inbox) {
            *tail = fake->inbox;
            tail = fake->inbox_tail;
            fake->inbox = NULL;
            fake->inbox_tail = &fake->inbox;
        }
        if (!fake->worker_running) break;
        if (!mine) {
            pthread_cond_wait(&fake->wake, &fake->fleet.cluster_lock);
            continue;
        }
        /* no fleet lock while the requests' locks are taken (its lock order) */
        pthread_mutex_unlock(&fake->fleet.cluster_lock);
        nanosleep(&tick, NULL);
        tail = step_all(fake, &mine);
        pthread_mutex_lock(&fake->fleet.cluster_lock);
    }
    pthread_mutex_unlock(&fake->fleet.cluster_lock);
    while (mine) {
        struct fake_answer *a = mine;
        mine = a->next;
        answer_fail(fake, a);
    }
    return NULL;
}

/* Gives the answer to the worker; 0 if it stopped (the caller answers). */
static int to_worker(struct fake_fleet *fake, struct fake_answer *a) {
    pthread_mutex_lock(&fake->fleet.cluster_lock);
    int running = fake->worker_running;
    if (running) {
        *fake->inbox_tail = a;
        fake->inbox_tail = &a->next;
        pthread_cond_signal(&fake->wake);
    }
    pthread_mutex_unlock(&fake->fleet.cluster_lock);
    return running;
}

/* ---------- routing ---------- */

/* The supervisor takes the job as its table would: a reference first,
 * then adopt (which refuses a choice that ended); 1 if it holds it. */
static int take_job(struct supervisor *s, struct supervisor_job *job) {
    s->events.hold(job);
    if (s->events.adopt(job, s)) return 1;
    s->events.release(job);
    return 0;
}

void fleet_submit(struct fleet *f, struct gateway_request *r) {
    struct fake_fleet *fake = fake_of(f);
    struct fake_answer *a = calloc(1, sizeof(*a));
    int held = 0;
    snprintf(r->instance_id, sizeof(r->instance_id), "%s", fake->instance.id);
    if (!a) {
        gateway_request_fail(r, 503, "out of memory for the fake runner");
        return;
    }
    a->request = r;
    plan(fake, a);
    for (int i = 0; i < a->n_scripts; i++)
        held += a->scripts[i].held = take_job(&fake->instance.supervisor, &r->choices[i].job);
    /* on the worker only with a reference: the HTTP side may let go of it */
    if (a->on_worker && held && to_worker(fake, a)) return;
    while (!answer_step(fake, a)) continue;
    answer_free(fake, a);
}

struct fleet_instance *fleet_any(struct fleet *f, const struct gateway_served *s) {
    struct fake_fleet *fake = fake_of(f);
    if (s != &fake->served) return NULL;
    atomic_fetch_add(&fake->instance.references, 1);
    return &fake->instance;
}

/* The instance is the fake's own: its last reference goes in fake_fleet_free. */
void fleet_instance_release(struct fleet_instance *in) {
    if (in) atomic_fetch_sub(&in->references, 1);
}

/* requests_env's submit_more: the fake runner answers the first choices
 * of a request when it is submitted, and no more. */
void fleet_submit_more(void *fleet, struct gateway_request *r) {
    (void)fleet;
    (void)r;
}

/* requests_env's cancel. The real one drops the choices from their
 * supervisors' tables; the fake runner keeps its references until its
 * script ends, and the requests layer ignores frames for a choice or a
 * request that ended, as it ignores a runner's that crossed a cancel. */
void fleet_instance_cancel(void *fleet, struct gateway_request *r, struct gateway_choice *only) {
    (void)fleet;
    (void)r;
    (void)only;
}

/* ---------- events ---------- */

/* Records a cluster event (cluster lock held). */
static void record(struct fleet *f, const char *kind, const char *instance, const char *host,
                   const char *text) {
    struct fleet_event *e = &f->events[f->n_events++ % FLEET_EVENTS];
    e->time = (double)time(NULL);
    snprintf(e->kind, sizeof(e->kind), "%s", kind);
    snprintf(e->instance, sizeof(e->instance), "%s", instance ? instance : "");
    snprintf(e->host, sizeof(e->host), "%s", host ? host : "");
    snprintf(e->text, sizeof(e->text), "%s", text);
}

void fleet_note(struct fleet *f, const char *kind, const char *instance, const char *format, ...) {
    char text[256];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof(text), format, args);
    va_end(args);
    pthread_mutex_lock(&f->cluster_lock);
    record(f, kind, instance, NULL, text);
    pthread_mutex_unlock(&f->cluster_lock);
}

static void note_host(struct fleet *f, const char *kind, int host, const char *text) {
    pthread_mutex_lock(&f->cluster_lock);
    record(f, kind, NULL, f->hosts[host].name, text);
    pthread_mutex_unlock(&f->cluster_lock);
}

/* ---------- the admin operations ---------- */

static int find_host(const struct fleet *f, const char *name) {
    for (int i = 0; i < f->n_hosts; i++)
        if (!strcmp(f->hosts[i].name, name)) return i;
    return -1;
}

/* A host index the HTTP layer took from an instance's placement. */
static void check_host_index(const struct fleet *f, int host) {
    if (host >= 0 && host < f->n_hosts) return;
    fprintf(stderr, "fake_fleet: host index %d is not one of the cluster's\n", host);
    abort();
}

/* 400 unless every host is the cluster's, as the real placement says. */
static int check_hosts(const struct fleet *f, const char *const *hosts, int n, char *why,
                       size_t whylen) {
    for (int i = 0; i < n; i++)
        if (find_host(f, hosts[i]) < 0) {
            snprintf(why, whylen, "no host is called '%s' in the cluster", hosts[i]);
            return 400;
        }
    return 0;
}

static int is_instance(struct fleet *f, const char *id) {
    return !strcmp(fake_of(f)->instance.id, id);
}

int fleet_add(struct fleet *f, const char *model, const struct cluster_shape *shape,
              const char *const *hosts, int n_hosts, char *id, size_t idlen, char *why,
              size_t whylen) {
    int tp = shape->tp;
    const struct gateway_served *s = gateway_served_find(f->served, f->n_served, model);
    if (!s) {
        snprintf(why, whylen, "the model '%s' is not served (GET /v1/models)", model);
        return 404;
    }
    if (model_check_degree(s->file, tp, why, whylen)) return 400;
    int status = check_hosts(f, hosts, n_hosts, why, whylen);
    if (status) return status;
    /* reported, never started: GET /v1/cluster does not list it */
    pthread_mutex_lock(&f->cluster_lock);
    snprintf(id, idlen, "%s-%d", s->name, ++fake_of(f)->added + 1);
    pthread_mutex_unlock(&f->cluster_lock);
    return 0;
}

/* The fake keeps its instance (later inputs must find it) and says it drains. */
int fleet_delete(struct fleet *f, const char *id, char *why, size_t whylen) {
    if (is_instance(f, id)) return 0;
    snprintf(why, whylen, "no instance is called '%s' (GET /v1/cluster)", id);
    return 404;
}

int fleet_move(struct fleet *f, const char *id, const struct cluster_shape *shape,
               const char *const *hosts, int n_hosts, char *why, size_t whylen) {
    int tp = shape->tp;
    if (!is_instance(f, id)) {
        snprintf(why, whylen, "no instance is called '%s' (GET /v1/cluster)", id);
        return 404;
    }
    if (tp > 0 && model_check_degree(fake_of(f)->served.file, tp, why, whylen)) return 400;
    int status = check_hosts(f, hosts, n_hosts, why, whylen);
    if (status) return status;
    snprintf(why, whylen, "%s has nowhere to move: the cluster is one host", id);
    return 409;
}

/* Fault injection: nothing runs there to kill. */
int fleet_lose_host(struct fleet *f, int host, double seconds) {
    char text[128];
    check_host_index(f, host);
    snprintf(text, sizeof(text), "host lost (a fault, for %.0f s)", seconds);
    note_host(f, "lost", host, text);
    return 0;
}

void fleet_drain_for(struct fleet *f, int host, double seconds) {
    char text[128];
    check_host_index(f, host);
    snprintf(text, sizeof(text), "host drained (a fault, for %.0f s)", seconds);
    note_host(f, "drain", host, text);
}

int fleet_drain_host(struct fleet *f, const char *name, int drain, char *why, size_t whylen) {
    int host = find_host(f, name);
    if (host < 0) {
        snprintf(why, whylen, "no host is called '%s' in the cluster (GET /v1/cluster)", name);
        return 404;
    }
    note_host(f, drain ? "drain" : "undrain", host, drain ? "host drained" : "host undrained");
    return 0;
}

/* ---------- views ---------- */

static cJSON *instance_json(struct fake_fleet *fake) {
    const struct fleet_instance *in = &fake->instance;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", in->id);
    cJSON_AddStringToObject(j, "model", in->name);
    cJSON_AddNumberToObject(j, "tp", in->tp);
    cJSON_AddStringToObject(j, "hosts", in->hosts_text);
    cJSON_AddStringToObject(j, "state", "ready");
    cJSON_AddNumberToObject(j, "generated_tokens", (double)atomic_load(&in->stats.generated));
    cJSON_AddNullToObject(j, "move");
    return j;
}

static char *print_and_free(cJSON *j) {
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return text;
}

static cJSON *events_json(struct fleet *f) {
    cJSON *events = cJSON_CreateArray();
    pthread_mutex_lock(&f->cluster_lock);
    int first = f->n_events > FLEET_EVENTS ? f->n_events - FLEET_EVENTS : 0;
    for (int i = first; i < f->n_events; i++) {
        const struct fleet_event *e = &f->events[i % FLEET_EVENTS];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "time", e->time);
        cJSON_AddStringToObject(j, "kind", e->kind);
        cJSON_AddStringToObject(j, "instance", e->instance);
        cJSON_AddStringToObject(j, "host", e->host);
        cJSON_AddStringToObject(j, "text", e->text);
        cJSON_AddItemToArray(events, j);
    }
    pthread_mutex_unlock(&f->cluster_lock);
    return events;
}

char *fleet_json(struct fleet *f) {
    struct fake_fleet *fake = fake_of(f);
    cJSON *root = cJSON_CreateObject(), *host = cJSON_CreateObject(), *model = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "cluster");
    cJSON_AddStringToObject(host, "name", f->hosts[0].name);
    cJSON_AddBoolToObject(host, "local", 1);
    cJSON_AddStringToObject(host, "state", "up");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "hosts"), host);
    cJSON_AddStringToObject(model, "name", fake->served.name);
    cJSON_AddNumberToObject(model, "context_length", fake->served.context_length);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "models"), model);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "instances"), instance_json(fake));
    cJSON_AddItemToObject(root, "events", events_json(f));
    return print_and_free(root);
}

char *fleet_instances_json(struct fleet *f) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "instances"), instance_json(fake_of(f)));
    return print_and_free(root);
}

struct cJSON *fleet_instance_view(struct fleet *f, const char *id) {
    return is_instance(f, id) ? instance_json(fake_of(f)) : NULL;
}

struct cJSON *fleet_move_view(struct fleet *f, const char *id) {
    return is_instance(f, id) ? cJSON_CreateNull() : NULL; /* it never moved */
}

char *fleet_history_json(struct fleet *f) {
    cJSON *root = cJSON_CreateObject();
    (void)f;
    cJSON_AddStringToObject(root, "object", "cluster.history");
    cJSON_AddNumberToObject(root, "every_seconds", FLEET_HISTORY_EVERY);
    cJSON_AddObjectToObject(root, "instances");
    return print_and_free(root);
}

char *fleet_stuck_json(struct fleet *f) {
    (void)f;
    return strdup("{\"reports\":[]}");
}

/* The fake runner answers whenever asked: the instance is ready. */
struct cJSON *fleet_health_json(struct fleet *f, int *ready) {
    const struct fleet_instance *in = &fake_of(f)->instance;
    cJSON *models = cJSON_CreateArray(), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "model", in->name);
    cJSON_AddStringToObject(m, "id", in->id);
    cJSON_AddBoolToObject(m, "ready", 1);
    cJSON_AddStringToObject(m, "status", "ready");
    cJSON_AddItemToArray(models, m);
    *ready = 1;
    return models;
}

char *fleet_metrics_text(struct fleet *f) {
    const struct fleet_instance *in = &fake_of(f)->instance;
    gateway_observe_host(f->metrics, f->hosts[0].name, 1);
    gateway_observe_state(f->metrics, in->name, in->id, supervisor_state_names, SUPERVISOR_STATES,
                          SUPERVISOR_READY, 0);
    return gateway_metrics_render(f->metrics);
}

/* ---------- the instance ---------- */

/* A token as the real instance takes it: to its request, then counted. */
static void on_token(struct supervisor_job *job, const struct runner_token *token,
                     struct supervisor *from) {
    struct fleet_instance *in = from->events.context;
    struct gateway_latency latency;
    atomic_fetch_add(&in->stats.generated, 1);
    gateway_request_on_token(gateway_choice_of(job), token, from, &latency);
    gateway_observe_latency(in->fleet->metrics, in->name, in->id, latency.ttft, latency.itl);
}

static void on_finished(struct supervisor_job *job, const struct runner_finished *finished,
                        struct supervisor *from) {
    gateway_request_on_finished(gateway_choice_of(job), finished, from);
}

/* The instance on host 0 at tp 1, and its supervisor (not started). */
static int instance_init(struct fake_fleet *fake, char *err, size_t errlen) {
    struct fleet_instance *in = &fake->instance;
    struct fleet *f = &fake->fleet;
    atomic_init(&in->references, 1);
    in->fleet = f;
    in->served = &fake->served;
    in->tp = 1;
    in->placement = (struct cluster_placement){.tp = 1, .n_hosts = 1, .host = {0}, .ranks = {1}};
    in->routable = 1;
    snprintf(in->name, sizeof(in->name), "%s", fake->served.name);
    snprintf(in->id, sizeof(in->id), "%s-1", fake->served.name);
    snprintf(in->hosts_text, sizeof(in->hosts_text), "%s:1", f->hosts[0].name);
    struct supervisor_config config = {
        .number = 1,
        .alone = 1,
        .watchdog_seconds = f->params->watchdog_seconds,
        .stopping = f->stopping,
        .next_id = f->next_id,
        .launch = {.model_path = fake->served.model.path, .tp = 1, .threads = 1, .local = 1}};
    snprintf(config.id, sizeof(config.id), "%s", in->id);
    snprintf(config.name, sizeof(config.name), "%s", in->name);
    snprintf(config.runtime_dir, sizeof(config.runtime_dir), "%s", f->runtime_dir);
    struct supervisor_events events = {.context = in, .token = on_token, .finished = on_finished};
    gateway_request_events(&events);
    if (supervisor_init(&in->supervisor, &config, &events, err, errlen)) return -1;
    fake->instance_ready = 1;
    gateway_observe_instance(f->metrics, in->name, in->id, supervisor_state_names,
                             SUPERVISOR_STATES);
    return 0;
}

/* ---------- life ---------- */

/* Frees what create set up, as far as it got. */
static void destroy(struct fake_fleet *fake) {
    struct fleet *f = &fake->fleet;
    if (fake->instance_ready) supervisor_free(&fake->instance.supervisor);
    if (fake->served_ready) gateway_served_free(&fake->served);
    if (f->runtime_dir[0]) rmdir(f->runtime_dir);
    pthread_cond_destroy(&fake->wake);
    pthread_mutex_destroy(&f->cluster_lock);
    free(fake);
}

struct fleet *fake_fleet_create(const struct gateway_params *params,
                                struct gateway_metrics *metrics, atomic_int *stopping,
                                atomic_ullong *next_id, char *err, size_t errlen) {
    struct fake_fleet *fake = calloc(1, sizeof(*fake));
    if (!fake) {
        snprintf(err, errlen, "out of memory for the fake fleet");
        return NULL;
    }
    struct fleet *f = &fake->fleet;
    *f = (struct fleet){.params = params,
                        .served = &fake->served,
                        .n_served = 1,
                        .metrics = metrics,
                        .stopping = stopping,
                        .next_id = next_id,
                        .n_hosts = 1};
    pthread_mutex_init(&f->cluster_lock, NULL);
    pthread_cond_init(&fake->wake, NULL);
    fake->inbox_tail = &fake->inbox;
    f->hosts[0] = (struct cluster_host){.name = FAKE_FLEET_HOST, .slots = 1, .local = 1};
    /* the supervisor's socket and status paths: nothing is made there, but
     * supervisor_free unlinks them, so they name a directory of its own */
    snprintf(f->runtime_dir, sizeof(f->runtime_dir), "/tmp/fuzz_http-XXXXXX");
    if (!mkdtemp(f->runtime_dir)) {
        snprintf(err, errlen, "cannot make %s", f->runtime_dir);
        f->runtime_dir[0] = '\0';
        destroy(fake);
        return NULL;
    }
    fake->served_ready = gateway_served_init(&fake->served, &params->models[0], err, errlen) == 0;
    if (!fake->served_ready || instance_init(fake, err, errlen)) {
        if (!fake->served_ready) gateway_served_free(&fake->served); /* as far as it got */
        destroy(fake);
        return NULL;
    }
    /* set before the thread reads it; without a worker every answer is given at once */
    fake->worker_running = 1;
    if (pthread_create(&fake->worker, NULL, worker_main, fake)) fake->worker_running = 0;
    return f;
}

void fake_fleet_stop(struct fleet *f) {
    struct fake_fleet *fake = fake_of(f);
    pthread_mutex_lock(&f->cluster_lock);
    int joining = fake->worker_running;
    fake->worker_running = 0;
    pthread_cond_signal(&fake->wake);
    pthread_mutex_unlock(&f->cluster_lock);
    if (joining) pthread_join(fake->worker, NULL);
}

void fake_fleet_free(struct fleet *f) {
    struct fake_fleet *fake = fake_of(f);
    int references = atomic_load(&fake->instance.references);
    if (references != 1) {
        fprintf(stderr, "fake_fleet: %d reference%s from fleet_any never released\n",
                references - 1, references == 2 ? "" : "s");
        abort();
    }
    destroy(fake);
}
