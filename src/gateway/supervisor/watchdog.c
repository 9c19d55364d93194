/* watchdog.c -- stuck runners: detection, the report that says why, and
 * the faults tests inject to provoke them.
 *
 * A runner with work pending that completes no step for longer than its
 * deadline -- the larger of --watchdog and 20 times its median step time --
 * is stuck: a rank that died, stopped, or blocks in a collective. Before the
 * supervisor kills its process group, the report reads what every rank was
 * doing from the status file the ranks mirror their collective state into
 * (runner_status_read): the step and tag it waits in and for how long, or
 * how long ago it last completed one. No debugger is needed, and a stopped
 * process cannot hide: its record simply stops changing. A runner that does
 * not take what the gateway writes to it (its outbox) within the deadline
 * is stuck the same way. */
#include "gateway/supervisor/supervisor_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int supervisor_watchdog_prepare(struct supervisor *s) {
    supervisor_watchdog_free(s);
    unlink(s->status_path);
    int fd = open(s->status_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    void *p = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)runner_status_bytes()) == 0)
        p = mmap(NULL, runner_status_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    s->rank_status = p == MAP_FAILED ? NULL : p;
    return s->rank_status ? 0 : -1;
}

void supervisor_watchdog_free(struct supervisor *s) {
    if (s->rank_status) munmap(s->rank_status, runner_status_bytes());
    s->rank_status = NULL;
}

void supervisor_watchdog_note(struct supervisor *s, const struct runner_heartbeat *h) {
    s->progress_us = clock_now_us();
    if (h->n_tokens == 0) return; /* a state report, not a step */
    s->steps_since_ready++;
    s->step_seconds[s->next_step_second] = (double)(h->end_us - h->start_us) * 1e-6;
    s->next_step_second = (s->next_step_second + 1) % 64;
    if (s->n_step_seconds < 64) s->n_step_seconds++;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double supervisor_watchdog_deadline(const struct supervisor *s) {
    double sorted[64], floor = s->config.watchdog_seconds;
    int n = s->n_step_seconds;
    if (n == 0) return floor;
    memcpy(sorted, s->step_seconds, (size_t)n * sizeof(double));
    qsort(sorted, (size_t)n, sizeof(double), by_value);
    double twenty_medians = 20.0 * sorted[n / 2];
    return twenty_medians > floor ? twenty_medians : floor;
}

int supervisor_watchdog_expired(const struct supervisor *s, uint64_t now_us) {
    if (s->state != SUPERVISOR_READY) return 0;
    double deadline = supervisor_watchdog_deadline(s);
    if (s->outbox_stalled_us && now_us > s->outbox_stalled_us &&
        (double)(now_us - s->outbox_stalled_us) * 1e-6 > deadline)
        return 1;
    if (s->n_jobs == 0 || now_us < s->progress_us) return 0;
    return (double)(now_us - s->progress_us) * 1e-6 > deadline;
}

pid_t supervisor_rank_pid(const struct supervisor *s, int rank) {
    struct runner_rank_status status = {0};
    if (s->rank_status && rank >= 0 && rank < RUNNER_RANKS_MAX)
        runner_status_read(s->rank_status, rank, s->config.launch.n_layers, &status);
    return status.pid > 0 ? (pid_t)status.pid : (rank == 0 ? s->pid : 0);
}

/* One rank's line of the report, and its JSON object. */
static cJSON *report_rank(const struct supervisor *s, int rank, char *line, size_t size) {
    struct runner_rank_status r;
    runner_status_read(s->rank_status, rank, s->config.launch.n_layers, &r);
    cJSON *o = cJSON_CreateObject();
    unsigned long long step = r.step;
    cJSON_AddNumberToObject(o, "rank", rank);
    cJSON_AddNumberToObject(o, "pid", r.pid);
    if (r.pid == 0) {
        cJSON_AddStringToObject(o, "state", "no status");
        snprintf(line, size, "rank %d: no status (it never reached a collective)", rank);
        return o;
    }
    if (kill(r.pid, 0) != 0 && errno == ESRCH) {
        cJSON_AddStringToObject(o, "state", "gone");
        snprintf(line, size,
                 "rank %d (pid %d): its process is gone (last seen in step %llu, "
                 "collective %u, %s)",
                 rank, r.pid, step, r.index, r.collective);
        return o;
    }
    cJSON_AddStringToObject(o, "state", r.waiting ? "waiting" : "computing");
    cJSON_AddNumberToObject(o, "step", (double)step);
    cJSON_AddNumberToObject(o, "index", r.index);
    cJSON_AddStringToObject(o, "collective", r.collective);
    cJSON_AddNumberToObject(o, "seconds", r.seconds);
    if (r.waiting)
        snprintf(line, size,
                 "rank %d (pid %d): waiting in step %llu, collective %u (%s) for %.2f s", rank,
                 r.pid, step, r.index, r.collective, r.seconds);
    else
        snprintf(line, size,
                 "rank %d (pid %d): outside any collective for %.2f s, since its last "
                 "one (step %llu, collective %u, %s) completed: computing, stopped or stalled",
                 rank, r.pid, r.seconds, step, r.index, r.collective);
    return o;
}

char *supervisor_watchdog_report(struct supervisor *s, uint64_t now_us) {
    char text[4096], line[256];
    double quiet = (double)(now_us - s->progress_us) * 1e-6;
    int n = snprintf(text, sizeof(text),
                     "model %s: runner (pid %d) stuck: no step completed for %.2f s with %d "
                     "requests pending (deadline %.2f s; last step %llu)",
                     s->config.name, (int)s->pid, quiet, s->n_jobs, supervisor_watchdog_deadline(s),
                     (unsigned long long)s->last_heartbeat.step);
    cJSON *report = cJSON_CreateObject(), *ranks = cJSON_AddArrayToObject(report, "ranks");
    cJSON_AddStringToObject(report, "model", s->config.name);
    cJSON_AddNumberToObject(report, "unix_time", (double)time(NULL));
    cJSON_AddNumberToObject(report, "no_progress_seconds", quiet);
    cJSON_AddNumberToObject(report, "deadline_seconds", supervisor_watchdog_deadline(s));
    cJSON_AddNumberToObject(report, "pending_requests", s->n_jobs);
    cJSON_AddNumberToObject(report, "last_step", (double)s->last_heartbeat.step);
    /* a single rank has no collectives, so no record */
    int n_ranks = supervisor_launch_ranks(&s->config.launch);
    for (int rank = 0; n_ranks > 1 && s->rank_status && rank < n_ranks && rank < RUNNER_RANKS_MAX;
         rank++) {
        cJSON_AddItemToArray(ranks, report_rank(s, rank, line, sizeof(line)));
        if (n >= 0 && (size_t)n < sizeof(text))
            n += snprintf(text + n, sizeof(text) - (size_t)n, "\n  %s", line);
    }
    if (n_ranks == 1 && n >= 0 && (size_t)n < sizeof(text))
        snprintf(text + n, sizeof(text) - (size_t)n,
                 "\n  rank 0 (pid %d): a single rank has no collectives; its last step ended "
                 "%.2f s ago",
                 (int)s->pid, quiet);
    cJSON_AddStringToObject(report, "text", text);
    log_event(LOG_LEVEL_WARN, "gateway", "%s", text);
    char *json = cJSON_PrintUnformatted(report);
    cJSON_Delete(report);
    s->stuck_detections++;
    return json;
}

/* Queues a FAULT frame for the runner (lock held); -1 if it has none ready. */
static int send_fault(struct supervisor *s, const struct runner_fault *fault) {
    char err[200];
    if (s->state != SUPERVISOR_READY || runner_encode_fault(&s->outbox, fault, err, sizeof(err)))
        return -1;
    supervisor_wake(s);
    return 0;
}

/* Applies a fault to the runner (lock held): 0, or the HTTP status of the
 * refusal with its message in why. */
static int apply_fault(struct supervisor *s, const char *kind, int rank, int delay_ms, int steps,
                       char *why, size_t size) {
    struct runner_fault f = {RUNNER_FAULT_STALL, rank, delay_ms, steps};
    if (rank < 0 || rank >= supervisor_launch_ranks(&s->config.launch)) {
        snprintf(why, size, "rank %d is not one of model %s's ranks 0..%d", rank, s->config.name,
                 supervisor_launch_ranks(&s->config.launch) - 1);
        return 400;
    }
    if (s->state != SUPERVISOR_READY) {
        snprintf(why, size, "model %s has no ready runner now", s->config.name);
        return 409;
    }
    if (!strcmp(kind, "kill") || !strcmp(kind, "stop")) {
        pid_t pid = supervisor_rank_pid(s, rank);
        if (pid > 0 && kill(pid, !strcmp(kind, "kill") ? SIGKILL : SIGSTOP) == 0) return 0;
        snprintf(why, size, "rank %d of model %s has no process to signal", rank, s->config.name);
        return 409;
    }
    if (!strcmp(kind, "delay"))
        f.kind = RUNNER_FAULT_DELAY;
    else if (!strcmp(kind, "close"))
        f.kind = RUNNER_FAULT_CLOSE;
    else if (strcmp(kind, "stall") != 0) {
        snprintf(why, size, "fault '%s' is not one of kill, stop, stall, delay, close, refuse",
                 kind);
        return 400;
    }
    if (f.kind == RUNNER_FAULT_DELAY && (delay_ms < 1 || delay_ms > 60000 || steps < 1)) {
        snprintf(why, size, "delay needs delay_ms in 1..60000 and steps >= 1");
        return 400;
    }
    if (send_fault(s, &f) == 0) return 0;
    snprintf(why, size, "the runner of model %s did not take the fault", s->config.name);
    return 409;
}

int supervisor_fault(struct supervisor *s, const char *kind, int rank, int delay_ms, int steps,
                     int count, char *why, size_t size) {
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    if (!strcmp(kind, "refuse")) {
        /* bounded, so that no count can wrap around */
        unsigned more = count > 0 ? (unsigned)count : 1u;
        s->refuse_starts = more > 1000u - s->refuse_starts ? 1000u : s->refuse_starts + more;
    } else
        rc = apply_fault(s, kind, rank, delay_ms, steps, why, size);
    pthread_mutex_unlock(&s->lock);
    return rc;
}
