/* jobs.c -- a supervisor's table of jobs and its outbox: everything the
 * gateway sends a runner and everything the runner says about a job.
 *
 * Jobs come from the layer above (supervisor_submit), with a reference on
 * their owner that the table keeps until the job finishes, is cancelled,
 * fails or is taken away by a move. The supervisor's thread queues each
 * job's ADD for the current runner (the prompt plus the tokens generated so
 * far, so that a new runner resumes it exactly: DESIGN.md I4) and writes
 * the outbox when the non-blocking socket takes it: no thread ever waits
 * for a runner (I7). A move takes every job from one supervisor and gives
 * them to another after warm-ups that fill its prefix cache (I8). Locks:
 * the supervisor's, then (inside the events that say so) a job owner's;
 * never two supervisors' at once. */
#include "gateway/supervisor/supervisor_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define OUTBOX_MAX (8u << 20) /* bytes queued for one runner; past this ADDs wait */

void supervisor_wake(struct supervisor *s) {
    char byte = 1;
    ssize_t rc = write(s->wake[1], &byte, 1); /* a full pipe already wakes the thread */
    (void)rc;
}

/* Removes entry i from the table and drops its reference to its owner. */
static void forget(struct supervisor *s, int i) {
    struct supervisor_job *job = s->jobs[i];
    s->jobs[i] = s->jobs[--s->n_jobs];
    s->events.release(job);
}

/* Tells the runner that has the job to drop it: a later one never gets it. */
static void cancel_queued(struct supervisor *s, const struct supervisor_job *job) {
    char err[200];
    if (s->state == SUPERVISOR_READY && job->queued_generation == s->generation)
        runner_encode_cancel(&s->outbox, job->id, err, sizeof(err));
}

/* Removes the jobs of group, or only `only`, and tells the runner. */
static void drop(struct supervisor *s, const void *group, const struct supervisor_job *only) {
    for (int i = s->n_jobs - 1; i >= 0; i--) {
        struct supervisor_job *job = s->jobs[i];
        if (job->group != group || (only && job != only)) continue;
        cancel_queued(s, job);
        forget(s, i);
    }
}

/* Appends the ADD frame of a job, as its owner describes it now; -1 with
 * err if it cannot be encoded. */
static int queue_add(struct supervisor *s, struct supervisor_job *job, char *err, size_t errlen) {
    struct runner_request q;
    if (s->events.request(job, &q, err, errlen)) return -1;
    q.id = job->id;
    int rc = runner_encode_add(&s->outbox, &q, err, errlen);
    free((void *)q.prompt);
    return rc;
}

void supervisor_queue_jobs(struct supervisor *s) {
    char err[256], why[320];
    for (int i = 0; i < s->n_jobs && s->outbox.length < OUTBOX_MAX;) {
        struct supervisor_job *job = s->jobs[i];
        if (job->queued_generation == s->generation) {
            i++;
            continue;
        }
        if (queue_add(s, job, err, sizeof(err)) == 0) {
            if (!job->queued_once && s->events.queued)
                s->events.queued(s->events.context,
                                 (double)(clock_now_us() - job->arrival_us) * 1e-6);
            job->queued_once = 1;
            job->queued_generation = s->generation;
            i++;
            continue;
        }
        /* one that cannot be encoded fails at once rather than wait for
         * ever, and the other jobs of its group leave with it */
        snprintf(why, sizeof(why), "the request could not be sent to the runner: %s", err);
        s->events.failed(job, 500, why);
        drop(s, job->group, NULL);
        i = 0; /* dropping moved entries around; those queued are passed over */
    }
}

int supervisor_flush(struct supervisor *s) {
    size_t before = s->outbox.length;
    while (s->outbox.length > 0) {
        ssize_t n = send(s->fd, s->outbox.data, s->outbox.length, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) return -1;
        runner_buffer_consume(&s->outbox, (size_t)n);
    }
    uint64_t now = clock_now_us();
    if (s->outbox.length == 0)
        s->outbox_stalled_us = 0;
    else if (s->outbox.length < before || s->outbox_stalled_us == 0)
        s->outbox_stalled_us = now;
    return 0;
}

/* Room for n more jobs in the table; -1 if memory ran out. */
static int make_room(struct supervisor *s, int n) {
    if (s->n_jobs + n <= s->capacity) return 0;
    int capacity = s->capacity ? 2 * s->capacity : 64;
    while (capacity < s->n_jobs + n) capacity *= 2;
    struct supervisor_job **grown =
        realloc(s->jobs, (size_t)capacity * sizeof(struct supervisor_job *));
    if (!grown) return -1;
    s->jobs = grown;
    s->capacity = capacity;
    return 0;
}

/* Fails the jobs with status and why, and releases them. */
static void refuse(struct supervisor *s, struct supervisor_job **jobs, int n, int status,
                   const char *why) {
    for (int i = 0; i < n; i++) {
        s->events.failed(jobs[i], status, why);
        s->events.release(jobs[i]);
    }
}

void supervisor_submit(struct supervisor *s, struct supervisor_job **jobs, int n) {
    char why[512];
    pthread_mutex_lock(&s->lock);
    if ((s->state == SUPERVISOR_FAILED && s->config.alone) || s->state == SUPERVISOR_DRAINING) {
        snprintf(why, sizeof(why), "model %s is unavailable: %s", s->config.name,
                 s->state == SUPERVISOR_DRAINING ? "the gateway is shutting down" : s->status);
        pthread_mutex_unlock(&s->lock);
        refuse(s, jobs, n, 503, why);
        return;
    }
    if (make_room(s, n)) {
        pthread_mutex_unlock(&s->lock);
        refuse(s, jobs, n, 500, "out of memory for the request table");
        return;
    }
    /* an idle runner starts its watchdog clock when work arrives */
    if (s->n_jobs == 0) s->progress_us = clock_now_us();
    /* all of them at once: the runner may share their prompt's blocks */
    for (int i = 0; i < n; i++)
        if (s->events.adopt(jobs[i], s))
            s->jobs[s->n_jobs++] = jobs[i];
        else
            s->events.release(jobs[i]);
    pthread_mutex_unlock(&s->lock);
    supervisor_wake(s);
}

void supervisor_cancel(struct supervisor *s, const void *group, const struct supervisor_job *only) {
    pthread_mutex_lock(&s->lock);
    drop(s, group, only);
    pthread_mutex_unlock(&s->lock);
    supervisor_wake(s);
}

void supervisor_fail_locked(struct supervisor *s, int status, const char *message) {
    /* drop takes every job of the group, so the table shrinks each time */
    while (s->n_jobs > 0) {
        struct supervisor_job *job = s->jobs[s->n_jobs - 1];
        s->events.failed(job, status, message);
        drop(s, job->group, NULL);
    }
}

void supervisor_fail(struct supervisor *s, int status, const char *message) {
    pthread_mutex_lock(&s->lock);
    supervisor_fail_locked(s, status, message);
    pthread_mutex_unlock(&s->lock);
    supervisor_wake(s);
}

void supervisor_each(struct supervisor *s, void (*fn)(struct supervisor_job *, void *), void *arg) {
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_jobs; i++) fn(s->jobs[i], arg);
    pthread_mutex_unlock(&s->lock);
}

/* The job with this runner id, with a reference for the caller, or NULL. */
static struct supervisor_job *find_job(struct supervisor *s, uint64_t id, int forget_it) {
    struct supervisor_job *found = NULL;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_jobs && !found; i++)
        if (s->jobs[i]->id == id) {
            found = s->jobs[i];
            s->events.hold(found);
            if (forget_it) forget(s, i);
        }
    pthread_mutex_unlock(&s->lock);
    return found;
}

/* A HEARTBEAT: progress for the watchdog, and the layer above's gauges. */
static void heartbeat_frame(struct supervisor *s, const struct runner_heartbeat *h) {
    pthread_mutex_lock(&s->lock);
    s->last_heartbeat = *h;
    supervisor_watchdog_note(s, h);
    /* a runner that completed a step is a good start, whatever came before */
    if (h->n_tokens > 0) s->failures = 0;
    pthread_mutex_unlock(&s->lock);
    if (s->events.heartbeat) s->events.heartbeat(s->events.context, h);
}

void supervisor_dispatch(struct supervisor *s, const struct runner_frame *f) {
    char err[200], message[256];
    enum runner_error_category category;
    struct runner_token token;
    struct runner_finished finished;
    struct runner_heartbeat heartbeat;
    struct runner_embedding embedding;
    struct supervisor_job *job;
    if (f->type == RUNNER_MSG_TOKEN && !runner_decode_token(f, &token, err, sizeof(err))) {
        if ((job = find_job(s, token.id, 0))) {
            s->events.token(job, &token, s);
            s->events.release(job);
        }
    } else if (f->type == RUNNER_MSG_EMBEDDING &&
               !runner_decode_embedding(f, &embedding, err, sizeof(err))) {
        if ((job = find_job(s, embedding.id, 0))) {
            if (s->events.embedding) s->events.embedding(job, &embedding, s);
            s->events.release(job);
        }
        free(embedding.values);
    } else if (f->type == RUNNER_MSG_FINISHED &&
               !runner_decode_finished(f, &finished, err, sizeof(err))) {
        pthread_mutex_lock(&s->lock);
        if (finished.id >= s->warm_first && finished.id <= s->warm_last && s->warm_pending > 0)
            s->warm_pending--; /* a move's warm-up: its token is not anyone's */
        pthread_mutex_unlock(&s->lock);
        if ((job = find_job(s, finished.id, 1))) {
            s->events.finished(job, &finished, s);
            s->events.release(job);
        }
    } else if (f->type == RUNNER_MSG_ERROR &&
               !runner_decode_error(f, &category, message, sizeof(message), err, sizeof(err))) {
        /* the runner refused the connection itself (it closes it next):
         * what the gateway sent was malformed (a bug here), or it is full */
        static const char *const kinds[] = {"internal", "bad request", "over capacity",
                                            "out of memory"};
        log_event(LOG_LEVEL_ERROR, "gateway", "%s: the runner refused the connection (%s): %s",
                  s->config.id, kinds[category], message);
    } else if (f->type == RUNNER_MSG_HEARTBEAT &&
               !runner_decode_heartbeat(f, &heartbeat, err, sizeof(err))) {
        heartbeat_frame(s, &heartbeat);
    }
}

/* ---------- moves ---------- */

int supervisor_take(struct supervisor *s, struct supervisor_job ***out) {
    pthread_mutex_lock(&s->lock);
    int n = s->n_jobs;
    struct supervisor_job **taken = malloc((size_t)(n ? n : 1) * sizeof(struct supervisor_job *));
    if (!taken) {
        pthread_mutex_unlock(&s->lock);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        cancel_queued(s, s->jobs[i]);
        taken[i] = s->jobs[i];
    }
    s->n_jobs = 0;
    pthread_mutex_unlock(&s->lock);
    supervisor_wake(s);
    *out = taken;
    return n;
}

void supervisor_give(struct supervisor *s, struct supervisor_job **jobs, int n) {
    pthread_mutex_lock(&s->lock);
    int room = make_room(s, n) == 0;
    if (s->n_jobs == 0) s->progress_us = clock_now_us();
    for (int i = 0; i < n; i++) {
        if (room) jobs[i]->queued_generation = 0;
        if (room && s->events.adopt(jobs[i], s)) {
            s->jobs[s->n_jobs++] = jobs[i];
            continue;
        }
        if (!room) s->events.failed(jobs[i], 500, "out of memory for the request table");
        s->events.release(jobs[i]);
    }
    pthread_mutex_unlock(&s->lock);
    supervisor_wake(s);
}

int supervisor_warm(struct supervisor *from, struct supervisor *to) {
    int n = 0, *lengths = NULL;
    int **prompts = NULL;
    char err[200];
    pthread_mutex_lock(&from->lock);
    if (from->n_jobs > 0) {
        prompts = calloc((size_t)from->n_jobs, sizeof(int *));
        lengths = calloc((size_t)from->n_jobs, sizeof(int));
    }
    for (int i = 0; prompts && lengths && i < from->n_jobs; i++) {
        struct runner_request q;
        if (from->events.request(from->jobs[i], &q, err, sizeof(err))) continue;
        prompts[n] = (int *)q.prompt;
        lengths[n++] = q.n_prompt;
    }
    pthread_mutex_unlock(&from->lock);
    uint64_t first = atomic_fetch_add(from->config.next_id, (unsigned long long)(n ? n : 1));
    pthread_mutex_lock(&to->lock);
    to->warm_first = first;
    to->warm_last = first + (uint64_t)n - 1;
    to->warm_pending = n;
    for (int i = 0; i < n; i++) {
        /* greedy, one token: only the prompt's KV matters */
        struct runner_request q = {.id = first + (uint64_t)i,
                                   .max_tokens = 1,
                                   .n_prompt = lengths[i],
                                   .prompt = prompts[i]};
        runner_sampling_default(&q.sampling);
        q.sampling.temperature = 0;
        if (runner_encode_add(&to->outbox, &q, err, sizeof(err))) to->warm_pending--;
        free(prompts[i]);
    }
    pthread_mutex_unlock(&to->lock);
    supervisor_wake(to);
    free(prompts);
    free(lengths);
    return n;
}

int64_t supervisor_outstanding(struct supervisor *s) {
    int64_t tokens = 0;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_jobs; i++) tokens += s->events.outstanding(s->jobs[i]);
    pthread_mutex_unlock(&s->lock);
    return tokens;
}

double supervisor_oldest(struct supervisor *s, uint64_t now_us) {
    uint64_t oldest = now_us;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_jobs; i++) /* arrival_us is set once, before submission */
        if (s->jobs[i]->arrival_us < oldest) oldest = s->jobs[i]->arrival_us;
    pthread_mutex_unlock(&s->lock);
    return (double)(now_us - oldest) * 1e-6;
}
