/* supervisor.c -- a supervisor's life: its runner process and the state
 * machine around it.
 *
 * One thread per supervisor starts the runner (a `lockstep runner` child in
 * a process group of its own, or an mpirun job), connects to its socket,
 * reads HELLO (and with a cluster key, the runner's proof of it) and then
 * every frame: what is about a job goes to its owner through the events
 * (jobs.c), heartbeats to the watchdog and the layer above. When the
 * connection breaks (the runner exited, crashed or was killed) or the
 * watchdog finds it stuck, the thread kills what is left of the process
 * group, waits with a growing backoff, starts a new runner and queues every
 * unfinished job again with the tokens it has, so the runner resumes it
 * where it was (DESIGN.md I4). A run of failed starts ends in FAILED,
 * where jobs fail with the reason instead of waiting for ever. The thread
 * is also the only one that writes to the runner (I7). */
#include "gateway/supervisor/supervisor_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_DEADLINE_SECONDS 300.0 /* a runner must be ready (model loaded) in this time */
#define BACKOFF_MAX_SECONDS    5.0

int supervisor_init(struct supervisor *s, const struct supervisor_config *config,
                    const struct supervisor_events *events, char *err, size_t errlen) {
    memset(s, 0, sizeof(*s));
    s->config = *config;
    s->events = *events;
    s->fd = -1;
    s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->lock, NULL);
    snprintf(s->socket_path, sizeof(s->socket_path), "%s/%d.sock", config->runtime_dir,
             config->number);
    snprintf(s->status_path, sizeof(s->status_path), "%s/%d.status", config->runtime_dir,
             config->number);
    snprintf(s->status, sizeof(s->status), "starting the runner");
    if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC)) {
        snprintf(err, errlen, "cannot make the supervisor's pipe for %s", config->id);
        return -1;
    }
    return 0;
}

/* 1 when the thread must stop its runner and return: the gateway stops,
 * or the supervisor is retired (its instance moved or deleted). */
static int supervisor_must_stop(const struct supervisor *s) {
    return (s->config.stopping && atomic_load(s->config.stopping)) ||
           atomic_load(&s->stop_requested);
}

/* ---------- the state machine ---------- */

const char *const supervisor_state_names[SUPERVISOR_STATES] = {"starting", "ready", "stopping",
                                                               "failed", "draining"};

const char *supervisor_state_name(enum supervisor_state state) {
    return supervisor_state_names[state];
}

/* Whether a supervisor may go from one state to the other (the table in
 * supervisor.h). */
static int transition_allowed(enum supervisor_state from, enum supervisor_state to) {
    switch (to) {
    case SUPERVISOR_STARTING:
        return from == SUPERVISOR_STOPPING;
    case SUPERVISOR_READY:
        return from == SUPERVISOR_STARTING || from == SUPERVISOR_FAILED;
    case SUPERVISOR_STOPPING:
        return from != SUPERVISOR_STOPPING;
    case SUPERVISOR_FAILED:
        return from == SUPERVISOR_STOPPING;
    case SUPERVISOR_DRAINING:
        return 1;
    }
    return 0;
}

void supervisor_set_state(struct supervisor *s, enum supervisor_state to) {
    if (s->state == SUPERVISOR_DRAINING && to != SUPERVISOR_DRAINING) return;
    if (!transition_allowed(s->state, to)) {
        log_event(LOG_LEVEL_ERROR, "gateway", "%s: no transition from %s to %s", s->config.id,
                  supervisor_state_name(s->state), supervisor_state_name(to));
        return;
    }
    s->state = to;
}

/* ---------- the runner process ---------- */

/* Appends a word to a; 0, or -1 when a is full (its last entry is kept for NULL). */
static int put(struct supervisor_argv *a, const char *word) {
    if (a->n >= SUPERVISOR_ARGV_MAX - 1) return -1;
    a->argv[a->n++] = word;
    return 0;
}

/* [wrapper] lockstep runner and its options. */
static int put_runner(struct supervisor_argv *a, const struct supervisor_launch *m,
                      const char *wrapper, const char *lockstep, const char *socket_path,
                      const char *status_path, const char *tp, const char *threads) {
    const char *pp = a->numbers[SUPERVISOR_PARTS_MAX + 2];
    int rc = (wrapper ? put(a, wrapper) : 0) | put(a, lockstep) | put(a, "runner") | put(a, "-m") |
             put(a, m->model_path);
    if (m->tokenizer_path) rc |= put(a, "-z") | put(a, m->tokenizer_path);
    rc |= put(a, "--socket") | put(a, socket_path) | put(a, "-t") | put(a, threads);
    /* under mpirun without stages the job's size is the degree */
    if (!m->mpi || m->pp > 1) rc |= put(a, "--tp") | put(a, tp);
    if (m->mpi) rc |= put(a, "--comm") | put(a, "mpi");
    if (m->pp > 1) rc |= put(a, "--pp") | put(a, pp) | put(a, "--layers-split") | put(a, a->layers);
    if (status_path) rc |= put(a, "--status") | put(a, status_path);
    if (m->allow_faults) rc |= put(a, "--allow-faults");
    if (m->cluster_key_file) rc |= put(a, "--cluster-key-file") | put(a, m->cluster_key_file);
    for (int i = 0; m->runner_args && m->runner_args[i]; i++) rc |= put(a, m->runner_args[i]);
    return rc;
}

int supervisor_runner_argv(const struct supervisor_launch *m, const char *socket_path,
                           const char *status_path, struct supervisor_argv *a) {
    char *tp = a->numbers[0], *threads = a->numbers[1];
    char *ranks = a->numbers[SUPERVISOR_PARTS_MAX + 3];
    int rc = 0;
    a->n = 0;
    snprintf(tp, sizeof(a->numbers[0]), "%d", m->tp);
    snprintf(threads, sizeof(a->numbers[1]), "%d", m->threads);
    snprintf(a->numbers[SUPERVISOR_PARTS_MAX + 2], sizeof(a->numbers[0]), "%d", m->pp);
    snprintf(ranks, sizeof(a->numbers[0]), "%d", supervisor_launch_ranks(m));
    a->layers[0] = '\0';
    for (int s = 0; m->pp > 1 && s < m->pp && s < CLUSTER_STAGES_MAX; s++)
        snprintf(a->layers + strlen(a->layers), sizeof(a->layers) - strlen(a->layers), "%s%d",
                 s ? "," : "", m->layers[s]);
    if (m->mpi) {
        rc |= put(a, m->mpirun_path);
        if (geteuid() == 0) rc |= put(a, "--allow-run-as-root");
        rc |= put(a, "--bind-to") | put(a, "none");
        /* every rank on this machine: no --host (its other names are not
         * Open MPI's), and as many ranks as asked whatever its cores */
        int here = m->n_parts > 0 ? !m->parts[0].host : !m->host_list[0] && !m->hostfile;
        if (here) rc |= put(a, "--oversubscribe");
    }
    if (m->mpi && m->n_parts > 0) {
        /* Hosts that run different programs (another architecture's binary
         * at its own path, or one under an emulator) need one app context
         * each: mpirun's MPMD form, `-np R --host NAME:R PROGRAM ARGS : ...`.
         * It is the only way to give Open MPI a program per host (a
         * hostfile cannot, and --host a:1,b:1 runs one program on all);
         * the contexts take their ranks in order, so rank 0, the leader,
         * is the first host's, and each --host pins its program to the
         * host it was built for. Global options come before the first. */
        if (m->n_parts > SUPERVISOR_PARTS_MAX) return -1;
        for (int k = 0; k < m->n_parts; k++) {
            const struct supervisor_part *part = &m->parts[k];
            snprintf(a->numbers[2 + k], sizeof(a->numbers[2 + k]), "%d", part->ranks);
            if (k) rc |= put(a, ":");
            rc |= put(a, "-np") | put(a, a->numbers[2 + k]);
            if (part->host) {
                snprintf(a->hosts[k], sizeof(a->hosts[k]), "%s:%d", part->host, part->ranks);
                rc |= put(a, "--host") | put(a, a->hosts[k]);
            }
            rc |= put_runner(a, m, part->wrapper, part->lockstep, socket_path, status_path, tp,
                             threads);
        }
    } else {
        if (m->mpi && m->host_list[0]) {
            rc |= put(a, "--host") | put(a, m->host_list);
        } else if (m->mpi && m->hostfile) {
            rc |= put(a, "--hostfile") | put(a, m->hostfile);
        }
        if (m->mpi) rc |= put(a, "-np") | put(a, ranks);
        rc |= put_runner(a, m, m->wrapper, m->lockstep_path, socket_path, status_path, tp, threads);
    }
    a->argv[a->n] = NULL;
    return rc ? -1 : 0;
}

static pid_t spawn_runner(struct supervisor *s) {
    const struct supervisor_launch *m = &s->config.launch;
    struct supervisor_argv *a = malloc(sizeof(*a));
    if (!a) return -1;
    /* ranks' status records name processes: only this machine's can be read and killed */
    const char *status = m->local && supervisor_watchdog_prepare(s) == 0 ? s->status_path : NULL;
    if (supervisor_runner_argv(m, s->socket_path, status, a)) {
        log_event(LOG_LEVEL_ERROR, "gateway", "%s: the runner's command is too long", s->config.id);
        free(a);
        return -1;
    }
    const char *const *argv = a->argv;
    int refuse = s->refuse_starts > 0;
    if (refuse) s->refuse_starts--;
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
    free(a);
    return pid;
}

/* Connects to the runner's socket once it listens (non-blocking); -1 if
 * the runner exited (-2: reaped here, its status kept), the deadline
 * passed or the gateway stops. */
static int connect_runner(struct supervisor *s, pid_t pid) {
    char err[200];
    uint64_t start = clock_now_us();
    while (!supervisor_must_stop(s) &&
           (double)(clock_now_us() - start) * 1e-6 < START_DEADLINE_SECONDS) {
        if (waitpid(pid, &s->last_exit, WNOHANG) == pid) return -2;
        int fd = runner_connect(s->socket_path, 0.2, err, sizeof(err));
        if (fd >= 0) return fd;
        struct timespec nap = {0, 20000000};
        nanosleep(&nap, NULL);
    }
    return -1;
}

/* The runner said HELLO (lock held): it is up; what it must do is queued
 * again from the start (the jobs' ADDs name the older generation). */
static void runner_ready(struct supervisor *s) {
    uint64_t now = clock_now_us();
    supervisor_set_state(s, SUPERVISOR_READY);
    s->status[0] = '\0';
    s->progress_us = now;
    s->steps_since_ready = 0;
    if (s->down_since_us && s->events.recovered)
        s->events.recovered(s->events.context, (double)(now - s->down_since_us) * 1e-6);
    s->down_since_us = 0;
    supervisor_queue_jobs(s);
}

/* 1 if the watchdog finds the runner stuck (the report is made; lock held). */
static int check_watchdog(struct supervisor *s) {
    uint64_t now = clock_now_us();
    int stuck = supervisor_watchdog_expired(s, now);
    if (stuck) {
        char *report = supervisor_watchdog_report(s, now);
        double seconds = (double)(now - s->progress_us) * 1e-6;
        if (s->events.stuck)
            s->events.stuck(s->events.context, seconds, report);
        else
            free(report);
        s->down_since_us = now;
    }
    return stuck;
}

/* The runner is up and, with a cluster key, proved it: requests flow. */
static void runner_proved(struct supervisor *s) {
    pthread_mutex_lock(&s->lock);
    s->linked = 1;
    runner_ready(s);
    int pid = (int)s->pid;
    pthread_mutex_unlock(&s->lock);
    if (s->events.ready) s->events.ready(s->events.context, pid);
}

/* HELLO: with a cluster key, the runner must ask for it and is answered
 * (it is ready once its own proof came: auth_frame); without one, it must
 * not ask. 0, or -1 with err. */
static int hello_frame(struct supervisor *s, const struct runner_frame *f, char *err,
                       size_t errlen) {
    const char *key = s->config.launch.cluster_key;
    struct runner_hello hello;
    if (runner_decode_hello(f, &hello, err, errlen)) return -1;
    if (key && !hello.has_challenge) {
        snprintf(err, errlen,
                 "the runner at %s did not ask for the cluster key: refused (a runner without "
                 "--cluster-key-file, or something else listening there)",
                 s->socket_path);
        return -1;
    }
    if (!key && hello.has_challenge) {
        snprintf(err, errlen,
                 "the runner at %s asks for a cluster key: start the gateway with "
                 "--cluster-key-file",
                 s->socket_path);
        return -1;
    }
    pthread_mutex_lock(&s->lock);
    s->hello = hello;
    int rc = key ? runner_auth_answer(key, hello.challenge, &s->auth_answer, err, errlen) ||
                       runner_encode_auth(&s->outbox, &s->auth_answer, err, errlen)
                 : 0;
    pthread_mutex_unlock(&s->lock);
    if (rc) return -1;
    if (!key) runner_proved(s);
    return 0;
}

/* AUTH: the runner's proof of the cluster key, which makes it ready; 0, or
 * -1 with err (the link is then dropped and the runner restarted). */
static int auth_frame(struct supervisor *s, const struct runner_frame *f, char *err,
                      size_t errlen) {
    const char *key = s->config.launch.cluster_key;
    struct runner_auth reply;
    if (runner_decode_auth(f, &reply, err, errlen)) return -1;
    pthread_mutex_lock(&s->lock);
    int proved = key && s->hello.has_challenge && !s->linked &&
                 runner_auth_confirm(key, s->hello.challenge, &s->auth_answer, &reply);
    pthread_mutex_unlock(&s->lock);
    if (!proved) {
        snprintf(err, errlen, "the runner at %s did not prove the cluster key: refused",
                 s->socket_path);
        return -1;
    }
    runner_proved(s);
    return 0;
}

/* Handles every whole frame in received; -1 if one is malformed. */
static int handle_frames(struct supervisor *s, struct runner_buffer *received) {
    char err[300];
    struct runner_frame f;
    size_t used = 0;
    int rc;
    while ((rc = runner_frame_next(received->data + used, received->length - used, RUNNER_FRAME_MAX,
                                   &f, err, sizeof(err))) == 1) {
        used += f.frame_length;
        if (f.type == RUNNER_MSG_HELLO || f.type == RUNNER_MSG_AUTH) {
            if ((f.type == RUNNER_MSG_HELLO ? hello_frame : auth_frame)(s, &f, err, sizeof(err))) {
                rc = -1;
                break;
            }
            continue;
        }
        pthread_mutex_lock(&s->lock);
        int linked = s->linked;
        pthread_mutex_unlock(&s->lock);
        if (!linked) { /* nothing counts before HELLO and the key's proof */
            snprintf(err, sizeof(err), "the runner at %s sent a frame of type %d before %s",
                     s->socket_path, (int)f.type,
                     s->config.launch.cluster_key ? "proving the cluster key" : "HELLO");
            rc = -1;
            break;
        }
        supervisor_dispatch(s, &f);
    }
    runner_buffer_consume(received, used);
    if (rc == 0) return 0;
    log_event(LOG_LEVEL_ERROR, "gateway", "%s: %s", s->config.id, err);
    return -1;
}

/* Reads what the runner sent (non-blocking); -1 when the connection ended
 * or carried a malformed frame. */
static int receive(struct supervisor *s, int fd, struct runner_buffer *received) {
    uint8_t chunk[65536];
    for (;;) {
        ssize_t n = recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (n <= 0 || runner_buffer_append(received, chunk, (size_t)n)) return -1;
        if (handle_frames(s, received)) return -1;
    }
}

/* Takes the bytes of the wake pipe (they only say "look"). */
static void drain_wake(struct supervisor *s) {
    char bytes[256];
    while (read(s->wake[0], bytes, sizeof(bytes)) > 0) continue;
}

/* Serves the runner on fd: reads frames, queues and writes jobs and
 * cancels, and watches for a stuck runner, until the connection ends
 * (returns 0), the runner is stuck (1) or the gateway stops. Only this
 * thread touches fd. */
static int serve_runner(struct supervisor *s, int fd) {
    struct runner_buffer received = {0};
    int stuck = 0, broken = 0;
    while (!supervisor_must_stop(s)) {
        pthread_mutex_lock(&s->lock);
        if (s->state == SUPERVISOR_READY) supervisor_queue_jobs(s);
        broken = supervisor_flush(s) != 0;
        int writing = s->outbox.length > 0;
        stuck = !broken && check_watchdog(s);
        pthread_mutex_unlock(&s->lock);
        if (broken || stuck) break;
        struct pollfd p[2] = {{fd, (short)(POLLIN | (writing ? POLLOUT : 0)), 0},
                              {s->wake[0], POLLIN, 0}};
        if (poll(p, 2, 50) <= 0) continue;
        if (p[1].revents) drain_wake(s);
        if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && receive(s, fd, &received)) break;
    }
    runner_buffer_free(&received);
    return stuck;
}

/* Kills the runner's process group, and every rank process its status
 * file names (mpirun puts ranks in groups of their own), and reaps it;
 * returns its wait status. */
static int stop_runner(struct supervisor *s, pid_t pid, int gently) {
    int status = 0;
    if (gently) {
        kill(pid, SIGTERM);
        for (int i = 0; i < 250 && waitpid(pid, &status, WNOHANG) == 0; i++) {
            struct timespec nap = {0, 20000000};
            nanosleep(&nap, NULL);
        }
    }
    kill(-pid, SIGKILL);
    for (int rank = 0; rank < supervisor_launch_ranks(&s->config.launch) && rank < RUNNER_RANKS_MAX;
         rank++) {
        pid_t rank_pid = supervisor_rank_pid(s, rank);
        if (rank_pid > 0 && rank_pid != pid) kill(rank_pid, SIGKILL);
    }
    /* connect_runner may have reaped it already, keeping its status */
    if (waitpid(pid, &status, 0) != pid) status = s->last_exit;
    runner_address_release(s->socket_path);
    return status;
}

/* After SUPERVISOR_START_ATTEMPTS failed starts in a row (lock held): the
 * jobs fail with the reason instead of waiting forever. */
static void give_up_jobs(struct supervisor *s) {
    char why[512];
    snprintf(why, sizeof(why), "model %s is unavailable: %s", s->config.name, s->status);
    supervisor_set_state(s, SUPERVISOR_FAILED);
    /* with other hosts, the cluster places it elsewhere and its jobs wait
     * for that, as for a move */
    if (s->config.alone) supervisor_fail_locked(s, 503, why);
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
static void choose_address(struct supervisor *s) {
    const char *leader = s->config.launch.leader;
    if (!leader[0]) return;
    unsigned spread = (unsigned)getpid() * 7919u + (unsigned)s->config.number * 104729u +
                      (unsigned)s->generation * 7u;
    snprintf(s->socket_path, sizeof(s->socket_path), "tcp:%s:%u", leader, 20000u + spread % 40000u);
}

/* Starts a runner and waits until it listens (STARTING, or FAILED while
 * starts keep failing); returns its connection, or -1. */
static int start_runner(struct supervisor *s, pid_t *pid) {
    pthread_mutex_lock(&s->lock);
    if (s->state == SUPERVISOR_STOPPING)
        supervisor_set_state(s, s->failures >= SUPERVISOR_START_ATTEMPTS ? SUPERVISOR_FAILED
                                                                         : SUPERVISOR_STARTING);
    s->generation++;
    s->linked = 0;
    choose_address(s);
    *pid = spawn_runner(s);
    s->pid = *pid;
    pthread_mutex_unlock(&s->lock);
    return *pid > 0 ? connect_runner(s, *pid) : -1;
}

/* The runner is gone or stuck: the supervisor stops it (lock held). Its
 * queued frames are dropped: its successor gets every job anew. */
static int runner_lost(struct supervisor *s, int stuck) {
    /* a runner that ends before it completes a step (say on the job it
     * was given back) counts as a failed start, so a crash loop backs off
     * and ends in an error, not in a restart a second forever */
    int was_ready = s->state == SUPERVISOR_READY && (s->steps_since_ready > 0 || s->n_jobs == 0);
    supervisor_set_state(s, SUPERVISOR_STOPPING);
    s->fd = -1;
    runner_buffer_consume(&s->outbox, s->outbox.length);
    s->outbox_stalled_us = 0;
    s->warm_pending = 0; /* a move's warm-ups went with it: nothing to wait for */
    snprintf(s->status, sizeof(s->status), "runner %s; restarting",
             stuck ? "stuck and killed" : "gone");
    if (!s->down_since_us) s->down_since_us = clock_now_us();
    return was_ready;
}

/* After the runner was reaped: counts the failure, gives up the jobs
 * after too many, and returns the backoff before the next start (lock held). */
static double plan_restart(struct supervisor *s, int stuck, int was_ready, int status) {
    char how[64];
    describe_exit(how, sizeof(how), status);
    s->pid = 0;
    s->failures = was_ready ? 0 : s->failures + 1;
    s->restarts++;
    snprintf(s->status, sizeof(s->status), "runner %s (%s); restarting (attempt %d)",
             stuck       ? "stuck and killed"
             : was_ready ? "ended"
                         : "failed before its first step",
             how, s->failures + 1);
    if (s->failures >= SUPERVISOR_START_ATTEMPTS) give_up_jobs(s);
    double backoff = was_ready ? 0.05 : 0.1 * (double)(1 << (s->failures < 6 ? s->failures : 6));
    return backoff < BACKOFF_MAX_SECONDS ? backoff : BACKOFF_MAX_SECONDS;
}

/* The gateway stopped the runner: how it ended (told SIGTERM, it finishes
 * its step and exits 0; anything else is worth a look). */
static void log_stopped(const struct supervisor *s, pid_t pid, int status) {
    char how[64];
    if (pid <= 0) return;
    describe_exit(how, sizeof(how), status);
    log_event(LOG_LEVEL_INFO, "gateway", "%s: runner %d stopped (%s)", s->config.id, (int)pid, how);
}

/* The name of a lost host of its placement (into host), or 0 (no lock held). */
static int placement_lost(const struct supervisor *s, char *host, size_t size) {
    return s->events.placement_lost && s->events.placement_lost(s->events.context, host, size);
}

/* Sleeps seconds, or until the supervisor must stop. */
static void back_off(const struct supervisor *s, double seconds) {
    for (double waited = 0; waited < seconds && !supervisor_must_stop(s); waited += 0.02) {
        struct timespec nap = {0, 20000000};
        nanosleep(&nap, NULL);
    }
}

/* A host of its placement is lost: no runner is started there (mpirun
 * would wait for a daemon that never answers). The cluster moves the
 * instance elsewhere; meanwhile each look counts as a failed start, so
 * that with nowhere else to go its jobs end with 503 as after any
 * run of failed starts, rather than wait for the host for ever. */
static void wait_for_host(struct supervisor *s, const char *host) {
    pthread_mutex_lock(&s->lock);
    if (s->state == SUPERVISOR_STARTING || s->state == SUPERVISOR_FAILED)
        supervisor_set_state(s, SUPERVISOR_STOPPING);
    int first = s->failures == 0;
    s->failures++;
    snprintf(s->status, sizeof(s->status),
             "host %s is lost: no runner starts there until the cluster places it elsewhere", host);
    if (s->failures >= SUPERVISOR_START_ATTEMPTS) give_up_jobs(s);
    double backoff = 0.1 * (double)(1 << (s->failures < 6 ? s->failures : 6));
    pthread_mutex_unlock(&s->lock);
    if (first)
        log_event(LOG_LEVEL_WARN, "gateway", "%s: host %s is lost; its runner is not restarted",
                  s->config.id, host);
    back_off(s, backoff < BACKOFF_MAX_SECONDS ? backoff : BACKOFF_MAX_SECONDS);
}

static void *supervise(void *arg) {
    struct supervisor *s = arg;
    char lost_host[SUPERVISOR_HOST_MAX];
    while (!supervisor_must_stop(s)) {
        if (placement_lost(s, lost_host, sizeof(lost_host))) {
            wait_for_host(s, lost_host);
            continue;
        }
        pid_t pid;
        int fd = start_runner(s, &pid);
        pthread_mutex_lock(&s->lock);
        s->fd = fd;
        pthread_mutex_unlock(&s->lock);
        int stuck = fd >= 0 && serve_runner(s, fd);
        pthread_mutex_lock(&s->lock);
        int was_ready = runner_lost(s, stuck);
        pthread_mutex_unlock(&s->lock);
        if (fd >= 0) close(fd);
        int status = pid > 0 ? stop_runner(s, pid, supervisor_must_stop(s)) : 0;
        if (supervisor_must_stop(s)) {
            log_stopped(s, pid, status);
            break;
        }
        if (placement_lost(s, lost_host, sizeof(lost_host))) {
            /* not a restart: the next look waits for the cluster's move */
            log_stopped(s, pid, status);
            pthread_mutex_lock(&s->lock);
            s->pid = 0;
            pthread_mutex_unlock(&s->lock);
            continue;
        }
        char why[sizeof(s->status)];
        pthread_mutex_lock(&s->lock);
        double backoff = plan_restart(s, stuck, was_ready, status);
        snprintf(why, sizeof(why), "%s", s->status);
        pthread_mutex_unlock(&s->lock);
        if (s->events.restarting) s->events.restarting(s->events.context, stuck, why);
        back_off(s, backoff);
    }
    atomic_store(&s->done, 1);
    return NULL;
}

int supervisor_start(struct supervisor *s, char *err, size_t errlen) {
    if (pthread_create(&s->thread, NULL, supervise, s)) {
        snprintf(err, errlen, "cannot start the supervisor of %s", s->config.id);
        return -1;
    }
    s->thread_started = 1;
    return 0;
}

void supervisor_drain(struct supervisor *s) {
    pthread_mutex_lock(&s->lock);
    supervisor_set_state(s, SUPERVISOR_DRAINING);
    pthread_mutex_unlock(&s->lock);
    supervisor_wake(s);
}

void supervisor_retire(struct supervisor *s) {
    atomic_store(&s->stop_requested, 1);
    supervisor_drain(s);
}

int supervisor_stopped(struct supervisor *s) {
    return !s->thread_started || atomic_load(&s->done);
}

void supervisor_stop(struct supervisor *s) {
    /* the thread returns only when told to: draining alone would leave it
     * serving its runner, and the join waiting for ever, unless the
     * gateway's `stopping` was set (it may be NULL) */
    supervisor_retire(s);
    if (s->thread_started) pthread_join(s->thread, NULL);
    s->thread_started = 0;
    supervisor_fail(s, 503, "the gateway is shutting down");
}

void supervisor_free(struct supervisor *s) {
    free(s->jobs);
    runner_buffer_free(&s->outbox);
    supervisor_watchdog_free(s);
    unlink(s->status_path);
    runner_address_release(s->socket_path);
    for (int i = 0; i < 2; i++)
        if (s->wake[i] >= 0) close(s->wake[i]);
    pthread_mutex_destroy(&s->lock);
}

void supervisor_view(struct supervisor *s, struct supervisor_view *out) {
    pthread_mutex_lock(&s->lock);
    out->state = s->state;
    snprintf(out->status, sizeof(out->status), "%s", s->state == SUPERVISOR_READY ? "" : s->status);
    out->restarts = s->restarts;
    out->failures = s->failures;
    out->stuck_detections = s->stuck_detections;
    out->n_jobs = s->n_jobs;
    out->pid = (int)s->pid;
    out->warm_pending = s->warm_pending;
    out->heartbeat = s->last_heartbeat;
    pthread_mutex_unlock(&s->lock);
}

void supervisor_inherit(struct supervisor *s, int restarts, int stuck_detections) {
    pthread_mutex_lock(&s->lock);
    s->restarts += restarts;
    s->stuck_detections += stuck_detections;
    pthread_mutex_unlock(&s->lock);
}
