/* instance.c -- a model instance: its vocabulary and its supervised runner.
 *
 * One supervisor thread per instance starts the runner (a `lockstep
 * runner` child in a process group of its own, or an mpirun job), connects
 * to its socket, reads HELLO and then every frame: tokens and finishes go
 * to their requests, heartbeats to the metrics. When the connection breaks
 * (the runner exited, crashed or was killed) the supervisor kills what is
 * left of the process group, waits with a growing backoff, starts a new
 * runner and resubmits every unfinished request with the tokens it has
 * already generated appended to its prompt, and the number of those tokens
 * so the runner's random stream resumes where it was (DESIGN.md I4). What
 * it tracks is runner requests: each choice of a client's request (its `n`)
 * is one, resumed with its own tokens.
 *
 * The supervisor is also the only thread that writes to the runner: the
 * socket is non-blocking, frames wait in the instance's outbox, and the
 * HTTP thread only registers requests and wakes the supervisor through a
 * pipe, so no thread ever waits for a runner (DESIGN.md I7). */
#include "gateway_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_DEADLINE_SECONDS 300.0 /* a runner must be ready (model loaded) in this time */
#define BACKOFF_MAX_SECONDS    5.0

/* 1 if every host of the placement is this machine. */
static int placement_is_local(const struct gateway *g, const struct cluster_placement *p) {
    for (int k = 0; k < p->n_hosts; k++)
        if (!g->hosts[p->host[k]].local) return 0;
    return 1;
}

/* How its runner is launched: as the model was configured when the
 * placement is one local host; under mpirun otherwise, on the placement's
 * hosts when any is another machine (mpirun's --host a:1,b:1). */
static void choose_launch(struct gateway_instance *in) {
    const struct gateway *g = in->gateway;
    const struct cluster_placement *p = &in->placement;
    int local = placement_is_local(g, p);
    in->model.tp = p->tp;
    cluster_placement_format(g->hosts, p, in->hosts_text, sizeof(in->hosts_text));
    if (local && p->n_hosts == 1) return;
    in->model.launcher = GATEWAY_LAUNCHER_MPI;
    in->model.hosts = NULL;
    if (local) return; /* every rank here: mpirun needs no host list */
    size_t used = 0;
    for (int k = 0; k < p->n_hosts && used < sizeof(in->host_list); k++)
        used += (size_t)snprintf(in->host_list + used, sizeof(in->host_list) - used, "%s%s:%d",
                                 k ? "," : "", g->hosts[p->host[k]].name, p->ranks[k]);
}

int gateway_instance_init(struct gateway_instance *in, struct gateway *gateway,
                          const struct gateway_served *served, const char *id,
                          const struct cluster_placement *placement, int number, char *err,
                          size_t errlen) {
    memset(in, 0, sizeof(*in));
    atomic_init(&in->references, 1);
    in->gateway = gateway;
    in->served = served;
    in->model = served->model;
    in->placement = *placement;
    in->fd = -1;
    in->wake[0] = in->wake[1] = -1;
    pthread_mutex_init(&in->lock, NULL);
    snprintf(in->name, sizeof(in->name), "%s", served->name);
    snprintf(in->id, sizeof(in->id), "%s", id);
    choose_launch(in);
    in->number = number;
    snprintf(in->socket_path, sizeof(in->socket_path), "%s/%d.sock", gateway->runtime_dir, number);
    snprintf(in->status_path, sizeof(in->status_path), "%s/%d.status", gateway->runtime_dir,
             number);
    snprintf(in->status, sizeof(in->status), "starting the runner");
    if (pipe2(in->wake, O_NONBLOCK | O_CLOEXEC)) {
        snprintf(err, errlen, "cannot make the supervisor's pipe for %s", in->id);
        return -1;
    }
    return 0;
}

/* 1 when the supervisor must stop its runner and return: the gateway
 * stops, or the instance is retired (moved or deleted). */
static int instance_stopping(const struct gateway_instance *in) {
    return atomic_load(&in->gateway->stopping) || atomic_load(&in->stop_requested);
}

/* ---------- the state machine ---------- */

const char *gateway_instance_state_name(enum instance_state state) {
    static const char *const names[] = {"starting", "ready", "stopping", "failed", "draining"};
    return names[state];
}

/* Whether the supervisor may go from one state to the other (the table in
 * gateway_internal.h). */
static int transition_allowed(enum instance_state from, enum instance_state to) {
    switch (to) {
    case INSTANCE_STARTING:
        return from == INSTANCE_STOPPING;
    case INSTANCE_READY:
        return from == INSTANCE_STARTING || from == INSTANCE_FAILED;
    case INSTANCE_STOPPING:
        return from != INSTANCE_STOPPING;
    case INSTANCE_FAILED:
        return from == INSTANCE_STOPPING;
    case INSTANCE_DRAINING:
        return 1;
    }
    return 0;
}

/* Moves the instance to state (lock held); a transition the table does not
 * have is a bug, reported and refused. DRAINING is final. */
static void set_state(struct gateway_instance *in, enum instance_state to) {
    if (in->state == INSTANCE_DRAINING && to != INSTANCE_DRAINING) return;
    if (!transition_allowed(in->state, to)) {
        log_event(LOG_LEVEL_ERROR, "gateway", "%s: no transition from %s to %s", in->id,
                  gateway_instance_state_name(in->state), gateway_instance_state_name(to));
        return;
    }
    in->state = to;
}

/* ---------- the outbox: everything the gateway sends a runner ---------- */

#define OUTBOX_MAX (8u << 20) /* bytes queued for one runner; past this ADDs wait */

/* Never blocks: a full pipe already wakes the supervisor. */
void gateway_instance_wake(struct gateway_instance *in) {
    char byte = 1;
    ssize_t rc = write(in->wake[1], &byte, 1);
    (void)rc;
}

/* Removes entry i from the table and drops its reference to its request
 * (lock held). */
static void forget(struct gateway_instance *in, int i) {
    struct gateway_request *r = in->requests[i]->request;
    in->requests[i] = in->requests[--in->n_requests];
    gateway_request_release(r);
}

/* Removes the choices of r from the table, or only `only` if not NULL, and
 * tells the runner that has them to drop them (lock held). */
static void drop(struct gateway_instance *in, struct gateway_request *r,
                 struct gateway_choice *only) {
    char err[200];
    for (int i = in->n_requests - 1; i >= 0; i--) {
        struct gateway_choice *c = in->requests[i];
        if (c->request != r || (only && c != only)) continue;
        /* the runner that has it drops it; a later one never gets it */
        if (in->state == INSTANCE_READY && c->queued_generation == in->generation)
            runner_encode_cancel(&in->outbox, c->id, err, sizeof(err));
        forget(in, i);
    }
}

/* A request's logit biases go to the runner as they were parsed. */
_Static_assert(sizeof(struct openai_bias) == sizeof(struct runner_bias) &&
                   offsetof(struct openai_bias, bias) == offsetof(struct runner_bias, bias),
               "struct openai_bias and struct runner_bias have one layout");
_Static_assert(OPENAI_GRAMMAR_MAX == RUNNER_GRAMMAR_MAX && OPENAI_BIASES_MAX == RUNNER_BIASES_MAX,
               "the gateway's limits are the runner protocol's");

/* Appends the ADD frame of a choice, the prompt plus what it generated so
 * far, to the outbox (lock held); -1 with err if it cannot be encoded. */
static int queue_add(struct gateway_instance *in, struct gateway_choice *c, char *err,
                     size_t errlen) {
    struct gateway_request *r = c->request;
    pthread_mutex_lock(&r->lock);
    int n = r->n_prompt + c->n_generated, rc = -1;
    int *prompt = malloc((size_t)n * sizeof(int));
    if (!prompt) {
        snprintf(err, errlen, "out of memory for the runner's copy of the prompt");
    } else {
        memcpy(prompt, r->prompt, (size_t)r->n_prompt * sizeof(int));
        memcpy(prompt + r->n_prompt, c->generated, (size_t)c->n_generated * sizeof(int));
        /* a choice whose last token came but not its FINISHED asks for one
         * more, which it ignores, and then ends by length as it would have */
        int remaining = r->max_tokens - c->n_generated;
        struct runner_request q = {.id = c->id,
                                   .sampling = c->sampling,
                                   .max_tokens = remaining > 0 ? remaining : 1,
                                   .ignore_eos = r->body.ignore_eos,
                                   .logprobs = 1,
                                   .top_logprobs = r->body.top_logprobs,
                                   .resumed = c->n_generated,
                                   .n_prompt = n,
                                   .prompt = prompt,
                                   .n_biases = r->body.n_biases,
                                   .biases = (struct runner_bias *)r->body.biases,
                                   .grammar = r->body.grammar,
                                   .grammar_trigger = r->body.grammar_trigger};
        rc = runner_encode_add(&in->outbox, &q, err, errlen);
    }
    pthread_mutex_unlock(&r->lock);
    free(prompt);
    return rc;
}

/* Queues the ADD of every choice the current runner has not been given,
 * while the outbox has room (lock held). A choice that cannot be encoded
 * fails its request with a 500 instead of waiting for ever, and its
 * request's other choices leave the table with it. */
static void queue_requests(struct gateway_instance *in) {
    char err[256], why[320];
    for (int i = 0; i < in->n_requests && in->outbox.length < OUTBOX_MAX;) {
        struct gateway_choice *c = in->requests[i];
        if (c->queued_generation == in->generation) {
            i++;
            continue;
        }
        if (queue_add(in, c, err, sizeof(err)) == 0) {
            if (!c->queued_once)
                gateway_observe_queued(in,
                                       (double)(clock_now_us() - c->request->arrival_us) * 1e-6);
            c->queued_once = 1;
            c->queued_generation = in->generation;
            i++;
            continue;
        }
        snprintf(why, sizeof(why), "the request could not be sent to the runner: %s", err);
        gateway_request_fail(c->request, 500, why);
        drop(in, c->request, NULL);
        i = 0; /* dropping moved entries around; those queued are passed over */
    }
}

/* Writes what the socket takes of the outbox (lock held; the socket is
 * non-blocking, so this never waits); -1 if the connection broke. */
static int flush_outbox(struct gateway_instance *in) {
    size_t before = in->outbox.length;
    while (in->outbox.length > 0) {
        ssize_t n = send(in->fd, in->outbox.data, in->outbox.length, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) return -1;
        runner_buffer_consume(&in->outbox, (size_t)n);
    }
    uint64_t now = clock_now_us();
    if (in->outbox.length == 0)
        in->outbox_stalled_us = 0;
    else if (in->outbox.length < before || in->outbox_stalled_us == 0)
        in->outbox_stalled_us = now;
    return 0;
}

void gateway_instance_submit(struct gateway_instance *in, struct gateway_request *r) {
    char why[512];
    pthread_mutex_lock(&in->lock);
    if ((in->state == INSTANCE_FAILED && in->gateway->n_hosts == 1) ||
        in->state == INSTANCE_DRAINING) {
        snprintf(why, sizeof(why), "model %s is unavailable: %s", in->name,
                 in->state == INSTANCE_DRAINING ? "the gateway is shutting down" : in->status);
        pthread_mutex_unlock(&in->lock);
        gateway_request_fail(r, 503, why);
        return;
    }
    /* an idle runner starts its watchdog clock when work arrives */
    if (in->n_requests == 0) in->progress_us = clock_now_us();
    if (in->n_requests + r->n_choices > in->capacity) {
        int capacity = in->capacity ? 2 * in->capacity : 64;
        while (capacity < in->n_requests + r->n_choices) capacity *= 2;
        struct gateway_choice **grown =
            realloc(in->requests, (size_t)capacity * sizeof(struct gateway_choice *));
        if (!grown) {
            pthread_mutex_unlock(&in->lock);
            gateway_request_fail(r, 500, "out of memory for the request table");
            return;
        }
        in->requests = grown;
        in->capacity = capacity;
    }
    /* all its choices at once: the runner may share their prompt's blocks */
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->n_choices; i++) {
        atomic_fetch_add(&r->references, 1);
        r->choices[i].holder = in;
        in->requests[in->n_requests++] = &r->choices[i];
    }
    pthread_mutex_unlock(&r->lock);
    pthread_mutex_unlock(&in->lock);
    gateway_instance_wake(in);
}

/* Drops r's choices (or only `only`) from one instance's table. */
static void cancel_on(struct gateway_instance *in, struct gateway_request *r,
                      struct gateway_choice *only) {
    pthread_mutex_lock(&in->lock);
    drop(in, r, only);
    pthread_mutex_unlock(&in->lock);
    gateway_instance_wake(in);
}

/* Drops r's choices (or only `only`) from every table that holds them.
 * Their holders are looked up under the cluster lock, which also keeps an
 * instance the cluster retires from going away meanwhile: a holder that
 * is no longer the cluster's has an empty table. */
static void cancel_held(struct gateway_request *r, struct gateway_choice *only) {
    struct gateway *g = r->gateway;
    struct gateway_instance *holders[OPENAI_CHOICES_MAX];
    int n = 0;
    pthread_mutex_lock(&g->cluster_lock);
    /* its choices may sit in several tables while a move hands them over;
     * a table they reach after this reads the request as over (give) */
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->n_choices; i++) {
        struct gateway_instance *h = r->choices[i].holder;
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= holders[k] == h;
        if (h && !seen && (!only || only == &r->choices[i]) && n < OPENAI_CHOICES_MAX)
            holders[n++] = h;
    }
    pthread_mutex_unlock(&r->lock);
    for (int k = 0; k < n; k++)
        if (gateway_cluster_has(g, holders[k])) cancel_on(holders[k], r, only);
    pthread_mutex_unlock(&g->cluster_lock);
}

void gateway_instance_cancel(struct gateway_request *r) {
    cancel_held(r, NULL);
}

void gateway_instance_cancel_choice(struct gateway_choice *c) {
    cancel_held(c->request, c);
}

void gateway_instance_each(struct gateway_instance *in,
                           void (*fn)(struct gateway_request *, uint64_t), uint64_t arg) {
    pthread_mutex_lock(&in->lock);
    for (int i = 0; i < in->n_requests; i++) fn(in->requests[i]->request, arg);
    pthread_mutex_unlock(&in->lock);
}

/* The choice with this runner id, with a reference to its request for the
 * caller, or NULL. */
static struct gateway_choice *find_choice(struct gateway_instance *in, uint64_t id, int forget_it) {
    struct gateway_choice *found = NULL;
    pthread_mutex_lock(&in->lock);
    for (int i = 0; i < in->n_requests && !found; i++)
        if (in->requests[i]->id == id) {
            found = in->requests[i];
            atomic_fetch_add(&found->request->references, 1);
            if (forget_it) forget(in, i);
        }
    pthread_mutex_unlock(&in->lock);
    return found;
}

static void dispatch(struct gateway_instance *in, const struct runner_frame *f) {
    char err[200], message[256];
    enum runner_error_category category;
    struct runner_token token;
    struct runner_finished finished;
    struct runner_heartbeat heartbeat;
    struct gateway_choice *c;
    if (f->type == RUNNER_MSG_TOKEN && !runner_decode_token(f, &token, err, sizeof(err))) {
        if ((c = find_choice(in, token.id, 0))) {
            atomic_fetch_add(&in->stats.generated, 1);
            gateway_request_on_token(c, &token, in);
            gateway_request_release(c->request);
        }
    } else if (f->type == RUNNER_MSG_FINISHED &&
               !runner_decode_finished(f, &finished, err, sizeof(err))) {
        pthread_mutex_lock(&in->lock);
        if (finished.id >= in->warm_first && finished.id <= in->warm_last && in->warm_pending > 0)
            in->warm_pending--; /* a move's warm-up: its token is not anyone's */
        pthread_mutex_unlock(&in->lock);
        if ((c = find_choice(in, finished.id, 1))) {
            gateway_request_on_finished(c, &finished, in);
            gateway_request_release(c->request);
        }
    } else if (f->type == RUNNER_MSG_ERROR &&
               !runner_decode_error(f, &category, message, sizeof(message), err, sizeof(err))) {
        /* the runner refused the connection itself (it closes it next):
         * what the gateway sent was malformed (a bug here), or it is full */
        static const char *const kinds[] = {"internal", "bad request", "over capacity",
                                            "out of memory"};
        log_event(LOG_LEVEL_ERROR, "gateway", "%s: the runner refused the connection (%s): %s",
                  in->id, kinds[category], message);
    } else if (f->type == RUNNER_MSG_HEARTBEAT &&
               !runner_decode_heartbeat(f, &heartbeat, err, sizeof(err))) {
        pthread_mutex_lock(&in->lock);
        in->last_heartbeat = heartbeat;
        gateway_watchdog_note(in, &heartbeat);
        /* a runner that completed a step is a good start, whatever came before */
        if (heartbeat.n_tokens > 0) in->failures = 0;
        pthread_mutex_unlock(&in->lock);
        gateway_observe_heartbeat(in, &heartbeat);
    }
}

/* ---------- the runner process ---------- */

static pid_t spawn_runner(struct gateway_instance *in) {
    const struct gateway_model *m = &in->model;
    const struct gateway_params *p = &in->gateway->params;
    char tp[16], threads[16], np[16];
    const char *argv[64];
    int n = 0;
    snprintf(tp, sizeof(tp), "%d", m->tp);
    snprintf(np, sizeof(np), "%d", m->tp);
    snprintf(threads, sizeof(threads), "%d", m->threads);
    if (m->launcher == GATEWAY_LAUNCHER_MPI) {
        argv[n++] = p->mpirun_path;
        if (geteuid() == 0) argv[n++] = "--allow-run-as-root";
        argv[n++] = "--bind-to";
        argv[n++] = "none";
        if (in->host_list[0]) {
            argv[n++] = "--host";
            argv[n++] = in->host_list;
        } else if (m->hosts) {
            argv[n++] = "--hostfile";
            argv[n++] = m->hosts;
        } else {
            argv[n++] = "--oversubscribe";
        }
        argv[n++] = "-np";
        argv[n++] = np;
    }
    argv[n++] = p->lockstep_path;
    argv[n++] = "runner";
    argv[n++] = "-m";
    argv[n++] = m->path;
    if (m->tokenizer_path) {
        argv[n++] = "-z";
        argv[n++] = m->tokenizer_path;
    }
    argv[n++] = "--socket";
    argv[n++] = in->socket_path;
    argv[n++] = "-t";
    argv[n++] = threads;
    argv[n++] = m->launcher == GATEWAY_LAUNCHER_MPI ? "--comm" : "--tp";
    argv[n++] = m->launcher == GATEWAY_LAUNCHER_MPI ? "mpi" : tp;
    /* ranks' status records name processes: only this machine's can be read and killed */
    if (placement_is_local(in->gateway, &in->placement) && gateway_watchdog_prepare(in) == 0) {
        argv[n++] = "--status";
        argv[n++] = in->status_path;
    }
    if (p->enable_faults) argv[n++] = "--allow-faults";
    if (p->cluster_key_file) {
        argv[n++] = "--cluster-key-file";
        argv[n++] = p->cluster_key_file;
    }
    int refuse = in->refuse_starts > 0;
    if (refuse) in->refuse_starts--;
    for (int i = 0; m->runner_args && m->runner_args[i] && n < 62; i++)
        argv[n++] = m->runner_args[i];
    argv[n] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        /* a runner never outlives its gateway: SIGTERM when the gateway
         * dies (mpirun passes it on to its ranks), and none was missed
         * between the fork and here */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) _exit(127);
        if (refuse) setenv("LOCKSTEP_FAULT_REFUSE_START", "1", 1);
        dup2(STDERR_FILENO, STDOUT_FILENO); /* its "ready" line goes to the log */
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (pid > 0) setpgid(pid, pid);
    return pid;
}

/* Connects to the runner's socket once it listens (non-blocking); -1 if
 * the runner exited (-2: reaped here, its status kept), the deadline
 * passed or the gateway stops. */
static int connect_runner(struct gateway_instance *in, pid_t pid) {
    char err[200];
    uint64_t start = clock_now_us();
    while (!instance_stopping(in) &&
           (double)(clock_now_us() - start) * 1e-6 < START_DEADLINE_SECONDS) {
        if (waitpid(pid, &in->last_exit, WNOHANG) == pid) return -2;
        int fd = runner_connect(in->socket_path, 0.2, err, sizeof(err));
        if (fd >= 0) return fd;
        struct timespec nap = {0, 20000000};
        nanosleep(&nap, NULL);
    }
    return -1;
}

/* The runner said HELLO (lock held): it is up; what it must do is queued
 * again from the start (the requests' ADDs name the older generation). */
static void runner_ready(struct gateway_instance *in) {
    uint64_t now = clock_now_us();
    set_state(in, INSTANCE_READY);
    in->status[0] = '\0';
    in->progress_us = now;
    in->steps_since_ready = 0;
    if (in->down_since_us) gateway_observe_recovery(in, (double)(now - in->down_since_us) * 1e-6);
    in->down_since_us = 0;
    queue_requests(in);
}

/* 1 if the watchdog finds the runner stuck (the report is made; lock held). */
static int check_watchdog(struct gateway_instance *in) {
    uint64_t now = clock_now_us();
    int stuck = gateway_watchdog_expired(in, now);
    if (stuck) {
        gateway_watchdog_report(in, now);
        gateway_observe_stuck(in, (double)(now - in->progress_us) * 1e-6);
        in->down_since_us = now;
    }
    return stuck;
}

/* The runner is up and, with a cluster key, proved it: requests flow. */
static void runner_proved(struct gateway_instance *in) {
    pthread_mutex_lock(&in->lock);
    in->linked = 1;
    runner_ready(in);
    int pid = (int)in->pid;
    pthread_mutex_unlock(&in->lock);
    gateway_cluster_note(in->gateway, "ready", in->id, "%s ready on %s (runner pid %d)", in->id,
                         in->hosts_text, pid);
}

/* HELLO: with a cluster key, the runner must ask for it and is answered
 * (it is ready once its own proof came: auth_frame); without one, it must
 * not ask. 0, or -1 with err. */
static int hello_frame(struct gateway_instance *in, const struct runner_frame *f, char *err,
                       size_t errlen) {
    const char *key = in->gateway->params.cluster_key;
    struct runner_hello hello;
    if (runner_decode_hello(f, &hello, err, errlen)) return -1;
    if (key && !hello.has_challenge) {
        snprintf(err, errlen,
                 "the runner at %s did not ask for the cluster key: refused (a runner without "
                 "--cluster-key-file, or something else listening there)",
                 in->socket_path);
        return -1;
    }
    if (!key && hello.has_challenge) {
        snprintf(err, errlen,
                 "the runner at %s asks for a cluster key: start the gateway with "
                 "--cluster-key-file",
                 in->socket_path);
        return -1;
    }
    pthread_mutex_lock(&in->lock);
    in->hello = hello;
    int rc = key ? runner_auth_answer(key, hello.challenge, &in->auth_answer, err, errlen) ||
                       runner_encode_auth(&in->outbox, &in->auth_answer, err, errlen)
                 : 0;
    pthread_mutex_unlock(&in->lock);
    if (rc) return -1;
    if (!key) runner_proved(in);
    return 0;
}

/* AUTH: the runner's proof of the cluster key, which makes it ready; 0, or
 * -1 with err (the link is then dropped and the runner restarted). */
static int auth_frame(struct gateway_instance *in, const struct runner_frame *f, char *err,
                      size_t errlen) {
    const char *key = in->gateway->params.cluster_key;
    struct runner_auth reply;
    if (runner_decode_auth(f, &reply, err, errlen)) return -1;
    pthread_mutex_lock(&in->lock);
    int proved = key && in->hello.has_challenge && !in->linked &&
                 runner_auth_confirm(key, in->hello.challenge, &in->auth_answer, &reply);
    pthread_mutex_unlock(&in->lock);
    if (!proved) {
        snprintf(err, errlen, "the runner at %s did not prove the cluster key: refused",
                 in->socket_path);
        return -1;
    }
    runner_proved(in);
    return 0;
}

/* Handles every whole frame in received; -1 if one is malformed. */
static int handle_frames(struct gateway_instance *in, struct runner_buffer *received) {
    char err[300];
    struct runner_frame f;
    size_t used = 0;
    int rc;
    while ((rc = runner_frame_next(received->data + used, received->length - used, RUNNER_FRAME_MAX,
                                   &f, err, sizeof(err))) == 1) {
        used += f.frame_length;
        if (f.type == RUNNER_MSG_HELLO || f.type == RUNNER_MSG_AUTH) {
            if ((f.type == RUNNER_MSG_HELLO ? hello_frame : auth_frame)(in, &f, err, sizeof(err))) {
                rc = -1;
                break;
            }
            continue;
        }
        pthread_mutex_lock(&in->lock);
        int linked = in->linked;
        pthread_mutex_unlock(&in->lock);
        if (!linked) { /* nothing counts before HELLO and the key's proof */
            snprintf(err, sizeof(err), "the runner at %s sent a frame of type %d before %s",
                     in->socket_path, (int)f.type,
                     in->gateway->params.cluster_key ? "proving the cluster key" : "HELLO");
            rc = -1;
            break;
        }
        dispatch(in, &f);
    }
    runner_buffer_consume(received, used);
    if (rc == 0) return 0;
    log_event(LOG_LEVEL_ERROR, "gateway", "%s: %s", in->id, err);
    return -1;
}

/* Reads what the runner sent (non-blocking); -1 when the connection ended
 * or carried a malformed frame. */
static int receive(struct gateway_instance *in, int fd, struct runner_buffer *received) {
    uint8_t chunk[65536];
    for (;;) {
        ssize_t n = recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (n <= 0 || runner_buffer_append(received, chunk, (size_t)n)) return -1;
        if (handle_frames(in, received)) return -1;
    }
}

/* Takes the bytes of the wake pipe (they only say "look"). */
static void drain_wake(struct gateway_instance *in) {
    char bytes[256];
    while (read(in->wake[0], bytes, sizeof(bytes)) > 0) continue;
}

/* Serves the runner on fd: reads frames, queues and writes requests and
 * cancels, and watches for a stuck runner, until the connection ends
 * (returns 0), the runner is stuck (1) or the gateway stops. Only this
 * thread touches fd. */
static int serve_runner(struct gateway_instance *in, int fd) {
    struct runner_buffer received = {0};
    int stuck = 0, broken = 0;
    while (!instance_stopping(in)) {
        pthread_mutex_lock(&in->lock);
        if (in->state == INSTANCE_READY) queue_requests(in);
        broken = flush_outbox(in) != 0;
        int writing = in->outbox.length > 0;
        stuck = !broken && check_watchdog(in);
        pthread_mutex_unlock(&in->lock);
        if (broken || stuck) break;
        struct pollfd p[2] = {{fd, (short)(POLLIN | (writing ? POLLOUT : 0)), 0},
                              {in->wake[0], POLLIN, 0}};
        if (poll(p, 2, 50) <= 0) continue;
        if (p[1].revents) drain_wake(in);
        if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && receive(in, fd, &received)) break;
    }
    runner_buffer_free(&received);
    return stuck;
}

/* Kills the runner's process group, and every rank process its status
 * file names (mpirun puts ranks in groups of their own), and reaps it;
 * returns its wait status. */
static int stop_runner(struct gateway_instance *in, pid_t pid, int gently) {
    int status = 0;
    if (gently) {
        kill(pid, SIGTERM);
        for (int i = 0; i < 250 && waitpid(pid, &status, WNOHANG) == 0; i++) {
            struct timespec nap = {0, 20000000};
            nanosleep(&nap, NULL);
        }
    }
    kill(-pid, SIGKILL);
    for (int rank = 0; rank < in->model.tp && rank < RUNNER_RANKS_MAX; rank++) {
        pid_t rank_pid = gateway_rank_pid(in, rank);
        if (rank_pid > 0 && rank_pid != pid) kill(rank_pid, SIGKILL);
    }
    /* connect_runner may have reaped it already, keeping its status */
    if (waitpid(pid, &status, 0) != pid) status = in->last_exit;
    runner_address_release(in->socket_path);
    return status;
}

/* After GATEWAY_START_ATTEMPTS failed starts in a row (lock held): the
 * requests fail with the reason instead of waiting forever. */
static void give_up_requests(struct gateway_instance *in) {
    char why[512];
    snprintf(why, sizeof(why), "model %s is unavailable: %s", in->name, in->status);
    set_state(in, INSTANCE_FAILED);
    /* with other hosts, the cluster places it elsewhere (cluster.c) and
     * its requests wait for that, as for a move */
    if (in->gateway->n_hosts > 1) return;
    for (int i = in->n_requests - 1; i >= 0; i--) {
        gateway_request_fail(in->requests[i]->request, 503, why);
        forget(in, i);
    }
}

/* What the last runner's wait status says, for /health and logs. */
static void describe_exit(char *out, size_t size, int status) {
    if (WIFEXITED(status))
        snprintf(out, size, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, size, "signal %d", WTERMSIG(status));
    else
        snprintf(out, size, "wait status %d", status);
}

/* Where the next runner listens: a unix socket here when its leader (the
 * placement's first host) is this machine, else a TCP port on the leader's
 * host, another one at each start (one an earlier runner holds, or that
 * something else took, only costs a failed start). */
static void choose_address(struct gateway_instance *in) {
    const struct cluster_host *leader = &in->gateway->hosts[in->placement.host[0]];
    if (leader->local) return;
    unsigned spread =
        (unsigned)getpid() * 7919u + (unsigned)in->number * 104729u + (unsigned)in->generation * 7u;
    snprintf(in->socket_path, sizeof(in->socket_path), "tcp:%s:%u", leader->name,
             20000u + spread % 40000u);
}

/* Starts a runner and waits until it listens (STARTING, or FAILED while
 * starts keep failing); returns its connection, or -1. */
static int start_runner(struct gateway_instance *in, pid_t *pid) {
    pthread_mutex_lock(&in->lock);
    if (in->state == INSTANCE_STOPPING)
        set_state(in, in->failures >= GATEWAY_START_ATTEMPTS ? INSTANCE_FAILED : INSTANCE_STARTING);
    in->generation++;
    in->linked = 0;
    choose_address(in);
    *pid = spawn_runner(in);
    in->pid = *pid;
    pthread_mutex_unlock(&in->lock);
    return *pid > 0 ? connect_runner(in, *pid) : -1;
}

/* The runner is gone or stuck: the instance stops it (lock held). Its
 * queued frames are dropped: its successor gets every request anew. */
static int runner_lost(struct gateway_instance *in, int stuck) {
    /* a runner that ends before it completes a step (say on the request it
     * was given back) counts as a failed start, so a crash loop backs off
     * and ends in an error, not in a restart a second forever */
    int was_ready =
        in->state == INSTANCE_READY && (in->steps_since_ready > 0 || in->n_requests == 0);
    set_state(in, INSTANCE_STOPPING);
    in->fd = -1;
    runner_buffer_consume(&in->outbox, in->outbox.length);
    in->outbox_stalled_us = 0;
    snprintf(in->status, sizeof(in->status), "runner %s; restarting",
             stuck ? "stuck and killed" : "gone");
    if (!in->down_since_us) in->down_since_us = clock_now_us();
    return was_ready;
}

/* After the runner was reaped: counts the failure, gives up the requests
 * after too many, and returns the backoff before the next start (lock held). */
static double plan_restart(struct gateway_instance *in, int stuck, int was_ready, int status) {
    char how[64];
    describe_exit(how, sizeof(how), status);
    in->pid = 0;
    in->failures = was_ready ? 0 : in->failures + 1;
    in->restarts++;
    snprintf(in->status, sizeof(in->status), "runner %s (%s); restarting (attempt %d)",
             stuck       ? "stuck and killed"
             : was_ready ? "ended"
                         : "failed before its first step",
             how, in->failures + 1);
    if (in->failures >= GATEWAY_START_ATTEMPTS) give_up_requests(in);
    double backoff = was_ready ? 0.05 : 0.1 * (double)(1 << (in->failures < 6 ? in->failures : 6));
    return backoff < BACKOFF_MAX_SECONDS ? backoff : BACKOFF_MAX_SECONDS;
}

/* The gateway stopped the runner: how it ended (told SIGTERM, it finishes
 * its step and exits 0; anything else is worth a look). */
static void log_stopped(const struct gateway_instance *in, pid_t pid, int status) {
    char how[64];
    if (pid <= 0) return;
    describe_exit(how, sizeof(how), status);
    log_event(LOG_LEVEL_INFO, "gateway", "%s: runner %d stopped (%s)", in->id, (int)pid, how);
}

/* The name of a host of the placement the cluster has marked lost (copied
 * into host), or 0 if none is (takes the cluster lock: no lock held). */
static int placement_lost(const struct gateway_instance *in, char *host, size_t size) {
    struct gateway *g = in->gateway;
    int lost = 0;
    pthread_mutex_lock(&g->cluster_lock);
    for (int k = 0; k < in->placement.n_hosts && !lost; k++) {
        const struct cluster_host *h = &g->hosts[in->placement.host[k]];
        if (h->lost) snprintf(host, size, "%s", h->name);
        lost = h->lost;
    }
    pthread_mutex_unlock(&g->cluster_lock);
    return lost;
}

/* Sleeps seconds, or until the supervisor must stop. */
static void back_off(const struct gateway_instance *in, double seconds) {
    for (double waited = 0; waited < seconds && !instance_stopping(in); waited += 0.02) {
        struct timespec nap = {0, 20000000};
        nanosleep(&nap, NULL);
    }
}

/* A host of its placement is lost: no runner is started there (mpirun
 * would wait for a daemon that never answers). The cluster moves the
 * instance elsewhere; meanwhile each look counts as a failed start, so
 * that with nowhere else to go its requests end with 503 as after any
 * run of failed starts, rather than wait for the host for ever. */
static void wait_for_host(struct gateway_instance *in, const char *host) {
    pthread_mutex_lock(&in->lock);
    if (in->state == INSTANCE_STARTING || in->state == INSTANCE_FAILED)
        set_state(in, INSTANCE_STOPPING);
    int first = in->failures == 0;
    in->failures++;
    snprintf(in->status, sizeof(in->status),
             "host %s is lost: no runner starts there until the cluster places it elsewhere", host);
    if (in->failures >= GATEWAY_START_ATTEMPTS) give_up_requests(in);
    double backoff = 0.1 * (double)(1 << (in->failures < 6 ? in->failures : 6));
    pthread_mutex_unlock(&in->lock);
    if (first)
        log_event(LOG_LEVEL_WARN, "gateway", "%s: host %s is lost; its runner is not restarted",
                  in->id, host);
    back_off(in, backoff < BACKOFF_MAX_SECONDS ? backoff : BACKOFF_MAX_SECONDS);
}

static void *supervise(void *arg) {
    struct gateway_instance *in = arg;
    char lost_host[CLUSTER_HOST_NAME_MAX];
    while (!instance_stopping(in)) {
        if (placement_lost(in, lost_host, sizeof(lost_host))) {
            wait_for_host(in, lost_host);
            continue;
        }
        pid_t pid;
        int fd = start_runner(in, &pid);
        pthread_mutex_lock(&in->lock);
        in->fd = fd;
        pthread_mutex_unlock(&in->lock);
        int stuck = fd >= 0 && serve_runner(in, fd);
        pthread_mutex_lock(&in->lock);
        int was_ready = runner_lost(in, stuck);
        pthread_mutex_unlock(&in->lock);
        if (fd >= 0) close(fd);
        int status = pid > 0 ? stop_runner(in, pid, instance_stopping(in)) : 0;
        if (instance_stopping(in)) {
            log_stopped(in, pid, status);
            break;
        }
        if (placement_lost(in, lost_host, sizeof(lost_host))) {
            /* not a restart: the next look waits for the cluster's move */
            log_stopped(in, pid, status);
            pthread_mutex_lock(&in->lock);
            in->pid = 0;
            pthread_mutex_unlock(&in->lock);
            continue;
        }
        char why[sizeof(in->status)];
        pthread_mutex_lock(&in->lock);
        double backoff = plan_restart(in, stuck, was_ready, status);
        snprintf(why, sizeof(why), "%s", in->status);
        pthread_mutex_unlock(&in->lock);
        gateway_cluster_note(in->gateway, stuck ? "stuck" : "restart", in->id, "%s: %s", in->id,
                             why);
        gateway_observe_restart(in);
        back_off(in, backoff);
    }
    atomic_store(&in->supervisor_done, 1);
    return NULL;
}

int gateway_instance_start(struct gateway_instance *in, char *err, size_t errlen) {
    if (pthread_create(&in->thread, NULL, supervise, in)) {
        snprintf(err, errlen, "cannot start the supervisor of %s", in->name);
        return -1;
    }
    in->thread_started = 1;
    return 0;
}

void gateway_instance_drain(struct gateway_instance *in) {
    pthread_mutex_lock(&in->lock);
    set_state(in, INSTANCE_DRAINING);
    pthread_mutex_unlock(&in->lock);
    gateway_instance_wake(in);
}

void gateway_instance_retire(struct gateway_instance *in) {
    atomic_store(&in->stop_requested, 1);
    gateway_instance_drain(in);
}

int gateway_instance_stopped(struct gateway_instance *in) {
    return !in->thread_started || atomic_load(&in->supervisor_done);
}

void gateway_instance_hold(struct gateway_instance *in) {
    atomic_fetch_add(&in->references, 1);
}

void gateway_instance_release(struct gateway_instance *in) {
    if (!in || atomic_fetch_sub(&in->references, 1) != 1) return;
    gateway_instance_free(in);
    free(in);
}

void gateway_instance_fail(struct gateway_instance *in, int status, const char *message) {
    pthread_mutex_lock(&in->lock);
    /* drop takes every choice of the request, so the table shrinks each time */
    while (in->n_requests > 0) {
        struct gateway_request *r = in->requests[in->n_requests - 1]->request;
        gateway_request_fail(r, status, message);
        drop(in, r, NULL);
    }
    pthread_mutex_unlock(&in->lock);
    gateway_instance_wake(in);
}

void gateway_instance_stop(struct gateway_instance *in) {
    gateway_instance_drain(in);
    if (in->thread_started) pthread_join(in->thread, NULL);
    in->thread_started = 0;
    gateway_instance_fail(in, 503, "the gateway is shutting down");
}

void gateway_instance_free(struct gateway_instance *in) {
    free(in->requests);
    runner_buffer_free(&in->outbox);
    gateway_watchdog_free(in);
    unlink(in->status_path);
    runner_address_release(in->socket_path);
    for (int i = 0; i < 2; i++)
        if (in->wake[i] >= 0) close(in->wake[i]);
    pthread_mutex_destroy(&in->lock);
}
