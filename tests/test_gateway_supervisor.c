/* test_gateway_supervisor.c -- src/gateway/supervisor alone: a supervisor
 * driven through events of the test's own (jobs that count their
 * references and record every token, finish and failure) and starting
 * tests/fake_runner instead of `lockstep runner`, so each case knows
 * exactly which tokens must come. Cases: a normal run; a crash and the
 * exact resumption of its job on the next runner (DESIGN.md I4); a cancel;
 * a run of failed starts ending in FAILED; a stuck runner found by the
 * watchdog; a move of jobs between two supervisors; and a stop that leaves
 * no process behind.
 *
 * ctest-labels: concurrency */
#include "gateway/supervisor/supervisor.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef FAKE_RUNNER_PATH
#error "FAKE_RUNNER_PATH names tests/fake_runner (test_gateway_supervisor.cmake)"
#endif

#define TJOB_TOKENS_MAX   512
#define TJOB_PROMPT_MAX   8
#define LOGGED_PROMPT_MAX 600
#define FAKE_VOCAB        1000 /* fake_runner's token ids are modulo this */

/* ---------- what the events saw ---------- */

/* Guards every field below, in jobs and sides: it is the jobs' owner
 * lock, taken inside the supervisor's (never the other way round). */
static pthread_mutex_t tlock = PTHREAD_MUTEX_INITIALIZER;
static atomic_ullong tnext_id = 1; /* the "gateway's" runner ids */

/* A job and everything the supervisor told about it. */
struct tjob {
    struct supervisor_job job;
    int prompt[TJOB_PROMPT_MAX];
    int n_prompt;
    int max_tokens;
    int tokens[TJOB_TOKENS_MAX];
    int n_tokens;
    int references; /* the table's (taken at submit) and hold's, less releases */
    int underflow;  /* 1: released more often than referenced */
    int over;       /* 1: the test says it produces nothing more (adopt refuses) */
    int finished;   /* FINISHED frames from its holder */
    enum runner_finish_reason reason;
    struct supervisor *finished_from;
    int n_failed;
    int failed_status;
    char failed_message[512];
};

/* The context events of one supervisor. */
struct tside {
    int ready, last_pid;
    int restarting, restarting_stuck;
    int stuck;
    char *stuck_report;
    int recovered, queued, heartbeats;
};

static struct tjob *tjob_of(struct supervisor_job *job) {
    return (struct tjob *)((char *)job - offsetof(struct tjob, job));
}

static void on_hold(struct supervisor_job *job) {
    pthread_mutex_lock(&tlock);
    tjob_of(job)->references++;
    pthread_mutex_unlock(&tlock);
}

static void on_release(struct supervisor_job *job) {
    struct tjob *j = tjob_of(job);
    pthread_mutex_lock(&tlock);
    if (--j->references < 0) j->underflow = 1;
    pthread_mutex_unlock(&tlock);
}

static int on_adopt(struct supervisor_job *job, struct supervisor *s) {
    struct tjob *j = tjob_of(job);
    pthread_mutex_lock(&tlock);
    int keep = !j->over && !j->finished && !j->n_failed;
    if (keep) job->holder = s;
    pthread_mutex_unlock(&tlock);
    return keep;
}

/* The job as the real gateway describes it: its prompt and the tokens so
 * far, of which the runner must skip as many random draws. */
static int on_request(struct supervisor_job *job, struct runner_request *q, char *err,
                      size_t errlen) {
    struct tjob *j = tjob_of(job);
    pthread_mutex_lock(&tlock);
    int n = j->n_prompt + j->n_tokens;
    int *prompt = malloc((size_t)n * sizeof(int));
    if (prompt) {
        memcpy(prompt, j->prompt, (size_t)j->n_prompt * sizeof(int));
        memcpy(prompt + j->n_prompt, j->tokens, (size_t)j->n_tokens * sizeof(int));
        int remaining = j->max_tokens - j->n_tokens;
        *q = (struct runner_request){.id = job->id,
                                     .max_tokens = remaining > 0 ? remaining : 1,
                                     .resumed = j->n_tokens,
                                     .n_prompt = n,
                                     .prompt = prompt};
        runner_sampling_default(&q->sampling);
    }
    pthread_mutex_unlock(&tlock);
    if (prompt) return 0;
    snprintf(err, errlen, "out of memory");
    return -1;
}

static int64_t on_outstanding(struct supervisor_job *job) {
    struct tjob *j = tjob_of(job);
    pthread_mutex_lock(&tlock);
    int64_t tokens = j->max_tokens - j->n_tokens + (j->n_tokens ? 0 : j->n_prompt);
    pthread_mutex_unlock(&tlock);
    return tokens;
}

/* Frames from a supervisor the job was moved off are not its own. */
static void on_token(struct supervisor_job *job, const struct runner_token *token,
                     struct supervisor *from) {
    struct tjob *j = tjob_of(job);
    pthread_mutex_lock(&tlock);
    if (job->holder == from && j->n_tokens < TJOB_TOKENS_MAX)
        j->tokens[j->n_tokens++] = token->token;
    pthread_mutex_unlock(&tlock);
}

static void on_finished(struct supervisor_job *job, const struct runner_finished *finished,
                        struct supervisor *from) {
    struct tjob *j = tjob_of(job);
    pthread_mutex_lock(&tlock);
    if (job->holder == from) {
        j->finished++;
        j->reason = finished->reason;
        j->finished_from = from;
    }
    pthread_mutex_unlock(&tlock);
}

static void on_failed(struct supervisor_job *job, int status, const char *message) {
    struct tjob *j = tjob_of(job);
    pthread_mutex_lock(&tlock);
    j->n_failed++;
    j->failed_status = status;
    snprintf(j->failed_message, sizeof(j->failed_message), "%s", message);
    pthread_mutex_unlock(&tlock);
}

static void on_ready(void *context, int pid) {
    struct tside *side = context;
    pthread_mutex_lock(&tlock);
    side->ready++;
    side->last_pid = pid;
    pthread_mutex_unlock(&tlock);
}

static void on_restarting(void *context, int stuck, const char *why) {
    struct tside *side = context;
    (void)why;
    pthread_mutex_lock(&tlock);
    side->restarting++;
    if (stuck) side->restarting_stuck++;
    pthread_mutex_unlock(&tlock);
}

static void on_queued(void *context, double seconds) {
    struct tside *side = context;
    pthread_mutex_lock(&tlock);
    if (seconds >= 0) side->queued++;
    pthread_mutex_unlock(&tlock);
}

static void on_heartbeat(void *context, const struct runner_heartbeat *heartbeat) {
    struct tside *side = context;
    (void)heartbeat;
    pthread_mutex_lock(&tlock);
    side->heartbeats++;
    pthread_mutex_unlock(&tlock);
}

/* Keeps the newest report (the callee's to free). */
static void on_stuck(void *context, double seconds, char *report) {
    struct tside *side = context;
    (void)seconds;
    pthread_mutex_lock(&tlock);
    side->stuck++;
    free(side->stuck_report);
    side->stuck_report = report;
    pthread_mutex_unlock(&tlock);
}

static void on_recovered(void *context, double seconds) {
    struct tside *side = context;
    (void)seconds;
    pthread_mutex_lock(&tlock);
    side->recovered++;
    pthread_mutex_unlock(&tlock);
}

/* ---------- waiting on conditions ---------- */

static void nap_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

typedef int (*test_condition)(const void *arg);

/* Polls cond every 5 ms up to seconds; a failed check names what did not
 * happen. Returns whether it held. */
static int wait_for(test_condition cond, const void *arg, double seconds, const char *what) {
    double end = test_now() + seconds;
    for (;;) {
        if (cond(arg)) return 1;
        if (test_now() > end) break;
        nap_ms(5);
    }
    fprintf(stderr, "timeout: %s did not happen within %.1f s\n", what, seconds);
    test_failures++;
    return 0;
}

/* An int the events write, and the value it must reach. */
struct counter_goal {
    const int *counter;
    int at_least;
};

static int counter_reached(const void *arg) {
    const struct counter_goal *g = arg;
    pthread_mutex_lock(&tlock);
    int ok = *g->counter >= g->at_least;
    pthread_mutex_unlock(&tlock);
    return ok;
}

static int wait_count(const int *counter, int at_least, double seconds, const char *what) {
    struct counter_goal goal = {counter, at_least};
    return wait_for(counter_reached, &goal, seconds, what);
}

static int job_ended(const void *arg) {
    const struct tjob *j = arg;
    pthread_mutex_lock(&tlock);
    int ok = j->finished > 0 || j->n_failed > 0;
    pthread_mutex_unlock(&tlock);
    return ok;
}

/* Also true once every reference the supervisor had is given back. */
static int job_released(const void *arg) {
    const struct tjob *j = arg;
    pthread_mutex_lock(&tlock);
    int ok = j->references == 0;
    pthread_mutex_unlock(&tlock);
    return ok;
}

struct state_goal {
    struct supervisor *s;
    enum supervisor_state state;
};

static int state_reached(const void *arg) {
    const struct state_goal *g = arg;
    struct supervisor_view view;
    supervisor_view(g->s, &view);
    return view.state == g->state;
}

static int pid_gone(const void *arg) {
    return kill(*(const int *)arg, 0) != 0 && errno == ESRCH;
}

/* ---------- the fake runner's log ---------- */

/* An ADD as fake_runner logged it. */
struct logged_add {
    int index, pid, n_prompt, resumed, max_tokens;
    unsigned long long id;
    int prompt[LOGGED_PROMPT_MAX];
    int n;
};

static int logged_add_parse(const char *line, struct logged_add *a) {
    int at = 0;
    if (sscanf(line, "add index=%d pid=%d id=%llu n_prompt=%d resumed=%d max_tokens=%d prompt=%n",
               &a->index, &a->pid, &a->id, &a->n_prompt, &a->resumed, &a->max_tokens, &at) < 6 ||
        at == 0)
        return -1;
    const char *p = line + at;
    char *end;
    for (a->n = 0; a->n < LOGGED_PROMPT_MAX; p = end + (*end == ',')) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        a->prompt[a->n++] = (int)v;
    }
    return 0;
}

/* Lines of the log that begin with prefix. */
static int log_count(const char *path, const char *prefix) {
    char *text = test_read_file(path, NULL);
    int n = 0;
    for (char *line = text; line && *line;) {
        if (!strncmp(line, prefix, strlen(prefix))) n++;
        char *next = strchr(line, '\n');
        line = next ? next + 1 : NULL;
    }
    free(text);
    return n;
}

/* The ADD of id the runner of pid (0: any) logged last, which must match
 * max_tokens when that is > 0; 1 if found. */
static int log_find_add(const char *path, int pid, uint64_t id, int max_tokens,
                        struct logged_add *out) {
    char *text = test_read_file(path, NULL);
    int found = 0;
    struct logged_add a;
    for (char *line = text; line && *line;) {
        if (logged_add_parse(line, &a) == 0 && a.id == id && (!pid || a.pid == pid) &&
            (max_tokens <= 0 || a.max_tokens == max_tokens)) {
            *out = a;
            found = 1;
        }
        char *next = strchr(line, '\n');
        line = next ? next + 1 : NULL;
    }
    free(text);
    return found;
}

struct log_goal {
    const char *path;
    const char *prefix;
    int at_least;
};

static int log_reached(const void *arg) {
    const struct log_goal *g = arg;
    return log_count(g->path, g->prefix) >= g->at_least;
}

static int wait_log(const char *path, const char *prefix, int at_least, double seconds,
                    const char *what) {
    struct log_goal goal = {path, prefix, at_least};
    return wait_for(log_reached, &goal, seconds, what);
}

/* ---------- a case's directory, supervisors and jobs ---------- */

/* One case: a fresh directory for the supervisors' sockets and status
 * files and the fake runner's log. */
struct harness {
    const char *name;
    char dir[64];
    char log[128];
    double start;
};

/* Makes the directory and chooses the fake's behaviour; the environment
 * changes only here, while no supervisor thread runs (its children inherit
 * it). -1 after a failed check. */
static int harness_begin(struct harness *h, const char *name, const char *mode, int step_ms) {
    char step[16];
    h->name = name;
    h->start = test_now();
    int n = snprintf(h->dir, sizeof(h->dir), "%s/supervisor-XXXXXX", LOCKSTEP_TEST_TMP);
    if (n < 0 || (size_t)n >= sizeof(h->dir)) /* a runtime_dir has 64 bytes */
        snprintf(h->dir, sizeof(h->dir), "/tmp/supervisor-XXXXXX");
    if (!mkdtemp(h->dir)) {
        CHECK_MSG(0, "mkdtemp %s: %s", h->dir, strerror(errno));
        return -1;
    }
    snprintf(h->log, sizeof(h->log), "%s/fake.log", h->dir);
    snprintf(step, sizeof(step), "%d", step_ms);
    setenv("FAKE_RUNNER_MODE", mode, 1);
    setenv("FAKE_RUNNER_LOG", h->log, 1);
    setenv("FAKE_RUNNER_STEP_MS", step, 1);
    return 0;
}

/* Removes the directory and what is left in it. */
static void harness_end(struct harness *h) {
    char path[512];
    DIR *d = opendir(h->dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof(path), "%s/%s", h->dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(h->dir);
    fprintf(stderr, "case %s: %.2f s\n", h->name, test_now() - h->start);
}

/* Sets up and starts supervisor `number` of the case, its context events
 * going to side; -1 after a failed check. */
static int supervisor_open(struct supervisor *s, struct tside *side, const struct harness *h,
                           int number) {
    char err[256];
    struct supervisor_config config = {
        .number = number, .alone = 1, .watchdog_seconds = 1.0, .next_id = &tnext_id};
    snprintf(config.id, sizeof(config.id), "fake-%d", number);
    snprintf(config.name, sizeof(config.name), "fake");
    snprintf(config.runtime_dir, sizeof(config.runtime_dir), "%s", h->dir);
    config.launch = (struct supervisor_launch){.lockstep_path = FAKE_RUNNER_PATH,
                                               .model_path = "fake.gguf",
                                               .tp = 1,
                                               .threads = 1,
                                               .n_layers = 1,
                                               .local = 1};
    struct supervisor_events events = {.context = side,
                                       .hold = on_hold,
                                       .release = on_release,
                                       .adopt = on_adopt,
                                       .request = on_request,
                                       .outstanding = on_outstanding,
                                       .token = on_token,
                                       .finished = on_finished,
                                       .failed = on_failed,
                                       .ready = on_ready,
                                       .restarting = on_restarting,
                                       .queued = on_queued,
                                       .heartbeat = on_heartbeat,
                                       .stuck = on_stuck,
                                       .recovered = on_recovered};
    if (supervisor_init(s, &config, &events, err, sizeof(err)) ||
        supervisor_start(s, err, sizeof(err))) {
        CHECK_MSG(0, "%s", err);
        return -1;
    }
    return 0;
}

static void supervisor_close(struct supervisor *s, struct tside *side) {
    supervisor_stop(s);
    supervisor_free(s);
    free(side->stuck_report);
    side->stuck_report = NULL;
}

static void tjob_setup(struct tjob *j, const void *group, const int *prompt, int n_prompt,
                       int max_tokens) {
    memset(j, 0, sizeof(*j));
    j->job.id = atomic_fetch_add(&tnext_id, 1);
    j->job.group = group;
    j->job.arrival_us = clock_now_us();
    memcpy(j->prompt, prompt, (size_t)n_prompt * sizeof(int));
    j->n_prompt = n_prompt;
    j->max_tokens = max_tokens;
}

/* Submits the jobs, each with the reference its owner takes for the table. */
static void tjob_submit(struct supervisor *s, struct tjob **jobs, int n) {
    struct supervisor_job *list[8];
    pthread_mutex_lock(&tlock);
    for (int i = 0; i < n; i++) {
        jobs[i]->references++;
        list[i] = &jobs[i]->job;
    }
    pthread_mutex_unlock(&tlock);
    supervisor_submit(s, list, n);
}

/* The token the fake runner sends k-th for the job. */
static int expected_token(const struct tjob *j, int k) {
    return (j->prompt[j->n_prompt - 1] + 1 + k) % FAKE_VOCAB;
}

/* Its first n tokens are those an uninterrupted run sends. */
static int tokens_match(const struct tjob *j, int n) {
    for (int k = 0; k < n; k++)
        if (j->tokens[k] != expected_token(j, k)) return 0;
    return 1;
}

/* The job ended by length with every token it asked for, exactly. */
static void check_complete(struct tjob *j, const char *what) {
    pthread_mutex_lock(&tlock);
    CHECK_MSG(j->finished == 1 && j->reason == RUNNER_FINISH_LENGTH,
              "%s: finished %d times, reason %d", what, j->finished, (int)j->reason);
    CHECK_MSG(j->n_tokens == j->max_tokens, "%s: %d tokens of %d", what, j->n_tokens,
              j->max_tokens);
    CHECK_MSG(tokens_match(j, j->n_tokens), "%s: tokens differ from an uninterrupted run", what);
    CHECK_MSG(j->n_failed == 0, "%s: failed (%d: %s)", what, j->failed_status, j->failed_message);
    pthread_mutex_unlock(&tlock);
}

/* Every reference the supervisor took is given back, none twice. */
static void check_released(struct tjob *j, const char *what) {
    pthread_mutex_lock(&tlock);
    CHECK_MSG(j->references == 0 && !j->underflow, "%s: %d references left%s", what, j->references,
              j->underflow ? " (released once too often)" : "");
    pthread_mutex_unlock(&tlock);
}

/* An int the events write, read under their lock. */
static int read_count(const int *counter) {
    pthread_mutex_lock(&tlock);
    int value = *counter;
    pthread_mutex_unlock(&tlock);
    return value;
}

/* ---------- the cases ---------- */

/* Two jobs of one group, submitted while the runner starts, each get
 * their tokens and FINISHED; ready is said once. */
static void test_normal(void) {
    struct harness h;
    struct supervisor s;
    struct tside side = {0};
    struct supervisor_view view;
    struct tjob a, b;
    static const int pa[] = {5, 6, 7}, pb[] = {998}; /* b's ids wrap around the vocabulary */
    if (harness_begin(&h, "normal", "normal", 2) || supervisor_open(&s, &side, &h, 0)) return;
    tjob_setup(&a, &h, pa, 3, 4);
    tjob_setup(&b, &h, pb, 1, 6);
    struct tjob *jobs[] = {&a, &b};
    tjob_submit(&s, jobs, 2);
    wait_for(job_ended, &a, 10, "normal: job a's FINISHED");
    wait_for(job_ended, &b, 10, "normal: job b's FINISHED");
    check_complete(&a, "normal a");
    check_complete(&b, "normal b");
    CHECK(read_count(&side.ready) == 1);
    CHECK(read_count(&side.queued) == 2);
    CHECK(read_count(&side.heartbeats) > 0);
    CHECK(read_count(&side.restarting) == 0);
    supervisor_view(&s, &view);
    CHECK_MSG(view.state == SUPERVISOR_READY && view.n_jobs == 0 && view.status[0] == '\0',
              "state %s, %d jobs, status '%s'", supervisor_state_name(view.state), view.n_jobs,
              view.status);
    CHECK(view.pid > 0 && view.pid == read_count(&side.last_pid));
    CHECK(supervisor_outstanding(&s) == 0);
    supervisor_close(&s, &side);
    check_released(&a, "normal a");
    check_released(&b, "normal b");
    harness_end(&h);
}

/* The first runner dies after 3 tokens: the next one gets the prompt and
 * those 3 tokens with resumed=3, and the job ends as if nothing happened
 * (I4). */
static void test_crash_resume(void) {
    struct harness h;
    struct supervisor s;
    struct tside side = {0};
    struct supervisor_view view;
    struct logged_add first = {0}, second = {0};
    struct tjob j;
    static const int prompt[] = {10, 20, 30};
    if (harness_begin(&h, "crash-resume", "crash-after=3", 2) || supervisor_open(&s, &side, &h, 0))
        return;
    tjob_setup(&j, &h, prompt, 3, 8);
    struct tjob *jobs[] = {&j};
    tjob_submit(&s, jobs, 1);
    wait_for(job_ended, &j, 10, "crash-resume: the job's FINISHED");
    check_complete(&j, "crash-resume");
    CHECK(read_count(&side.restarting) == 1 && read_count(&side.restarting_stuck) == 0);
    CHECK(read_count(&side.ready) == 2 && read_count(&side.recovered) == 1);
    CHECK(log_count(h.log, "start ") == 2 && log_count(h.log, "crash ") == 1);
    CHECK(log_find_add(h.log, 0, j.job.id, 8, &first) && first.index == 0 && first.resumed == 0 &&
          first.n_prompt == 3);
    int resumed_prompt[] = {10, 20, 30, 31, 32, 33};
    CHECK_MSG(log_find_add(h.log, 0, j.job.id, 5, &second) && second.index == 1 &&
                  second.resumed == 3 && second.n_prompt == 6 && second.n == 6 &&
                  !memcmp(second.prompt, resumed_prompt, sizeof(resumed_prompt)),
              "the second runner's ADD: index %d resumed %d n_prompt %d", second.index,
              second.resumed, second.n_prompt);
    supervisor_view(&s, &view);
    CHECK(view.state == SUPERVISOR_READY && view.restarts == 1 && view.failures == 0);
    supervisor_close(&s, &side);
    check_released(&j, "crash-resume");
    harness_end(&h);
}

/* A cancelled group (and a cancelled job of another group) get no token
 * after their release while the runner goes on for the rest. */
static void test_cancel(void) {
    struct harness h;
    struct supervisor s;
    struct tside side = {0};
    struct tjob a, b1, b2;
    char group_a, group_b;
    static const int pa[] = {1}, pb1[] = {100}, pb2[] = {200};
    if (harness_begin(&h, "cancel", "normal", 2) || supervisor_open(&s, &side, &h, 0)) return;
    tjob_setup(&a, &group_a, pa, 1, 300);
    tjob_setup(&b1, &group_b, pb1, 1, 300);
    tjob_setup(&b2, &group_b, pb2, 1, 300);
    struct tjob *first[] = {&a}, *second[] = {&b1, &b2};
    tjob_submit(&s, first, 1);
    tjob_submit(&s, second, 2);
    wait_count(&a.n_tokens, 1, 10, "cancel: job a's first token");
    wait_count(&b2.n_tokens, 1, 10, "cancel: job b2's first token");
    supervisor_cancel(&s, &group_a, NULL);
    supervisor_cancel(&s, &group_b, &b2.job);
    /* once released, no dispatch still holds them: their counts are final */
    wait_for(job_released, &a, 5, "cancel: job a's release");
    wait_for(job_released, &b2, 5, "cancel: job b2's release");
    wait_log(h.log, "cancel ", 2, 5, "cancel: the runner's two CANCELs");
    int tokens_a = read_count(&a.n_tokens), tokens_b2 = read_count(&b2.n_tokens);
    wait_for(job_ended, &b1, 10, "cancel: job b1's FINISHED");
    check_complete(&b1, "cancel b1");
    pthread_mutex_lock(&tlock);
    CHECK_MSG(a.n_tokens == tokens_a && a.n_tokens < a.max_tokens && tokens_match(&a, a.n_tokens),
              "job a: %d tokens after its cancel at %d", a.n_tokens, tokens_a);
    CHECK(b2.n_tokens == tokens_b2 && b2.n_tokens < b2.max_tokens);
    CHECK(side.restarting == 0 && side.stuck == 0);
    CHECK(a.finished == 0 && b2.finished == 0 && a.n_failed == 0 && b2.n_failed == 0);
    pthread_mutex_unlock(&tlock);
    supervisor_close(&s, &side);
    check_released(&a, "cancel a");
    check_released(&b1, "cancel b1");
    check_released(&b2, "cancel b2");
    harness_end(&h);
}

/* A runner that never says HELLO: after SUPERVISOR_START_ATTEMPTS starts
 * the supervisor is FAILED, its waiting job failed with 503, and a new job
 * is refused at once (alone). */
static void test_failed_starts(void) {
    struct harness h;
    struct supervisor s;
    struct tside side = {0};
    struct supervisor_view view;
    struct tjob waiting, late;
    static const int prompt[] = {3};
    if (harness_begin(&h, "failed-starts", "no-hello", 2) || supervisor_open(&s, &side, &h, 0))
        return;
    tjob_setup(&waiting, &h, prompt, 1, 4);
    struct tjob *first[] = {&waiting};
    tjob_submit(&s, first, 1);
    struct state_goal failed = {&s, SUPERVISOR_FAILED};
    wait_for(state_reached, &failed, 15, "failed-starts: state FAILED");
    wait_for(job_released, &waiting, 5, "failed-starts: the waiting job's release");
    pthread_mutex_lock(&tlock);
    CHECK_MSG(waiting.n_failed == 1 && waiting.failed_status == 503 &&
                  strstr(waiting.failed_message, "unavailable"),
              "waiting job: failed %d times, %d '%s'", waiting.n_failed, waiting.failed_status,
              waiting.failed_message);
    pthread_mutex_unlock(&tlock);
    supervisor_view(&s, &view);
    CHECK_MSG(view.failures == SUPERVISOR_START_ATTEMPTS && view.n_jobs == 0,
              "failures %d, %d jobs", view.failures, view.n_jobs);
    CHECK(log_count(h.log, "start ") == SUPERVISOR_START_ATTEMPTS);
    /* told after the state changed, outside the supervisor's lock */
    wait_count(&side.restarting, SUPERVISOR_START_ATTEMPTS, 5, "failed-starts: every restart told");
    CHECK(read_count(&side.restarting) == SUPERVISOR_START_ATTEMPTS);
    CHECK(read_count(&side.ready) == 0);
    tjob_setup(&late, &h, prompt, 1, 4);
    struct tjob *second[] = {&late};
    tjob_submit(&s, second, 1);
    pthread_mutex_lock(&tlock); /* refused before supervisor_submit returned */
    CHECK(late.n_failed == 1 && late.failed_status == 503 && late.references == 0);
    pthread_mutex_unlock(&tlock);
    supervisor_close(&s, &side);
    check_released(&waiting, "failed-starts waiting");
    check_released(&late, "failed-starts late");
    harness_end(&h);
}

/* The report names how long the runner made no progress. */
static void check_stuck_report(struct tside *side) {
    pthread_mutex_lock(&tlock);
    cJSON *report = side->stuck_report ? cJSON_Parse(side->stuck_report) : NULL;
    pthread_mutex_unlock(&tlock);
    const cJSON *quiet = cJSON_GetObjectItemCaseSensitive(report, "no_progress_seconds");
    CHECK_MSG(cJSON_IsNumber(quiet) && quiet->valuedouble >= 1.0,
              "the stuck report has no no_progress_seconds >= the 1 s deadline");
    cJSON_Delete(report);
}

/* A runner that takes the ADD and says nothing: the watchdog finds it
 * stuck within its deadline, and the next runner serves the job. */
static void test_stuck(void) {
    struct harness h;
    struct supervisor s;
    struct tside side = {0};
    struct supervisor_view view;
    struct logged_add add = {0};
    struct tjob j;
    static const int prompt[] = {42};
    if (harness_begin(&h, "stuck", "stall", 2) || supervisor_open(&s, &side, &h, 0)) return;
    tjob_setup(&j, &h, prompt, 1, 5);
    struct tjob *jobs[] = {&j};
    tjob_submit(&s, jobs, 1);
    wait_count(&side.stuck, 1, 5, "stuck: the watchdog's stuck report");
    check_stuck_report(&side);
    wait_count(&side.restarting_stuck, 1, 5, "stuck: a restart after the stuck runner");
    wait_for(job_ended, &j, 10, "stuck: the job's FINISHED on the next runner");
    check_complete(&j, "stuck");
    CHECK(log_count(h.log, "start ") == 2);
    CHECK(log_find_add(h.log, 0, j.job.id, 5, &add) && add.index == 1 && add.resumed == 0);
    CHECK(read_count(&side.stuck) == 1 && read_count(&side.recovered) == 1);
    supervisor_view(&s, &view);
    CHECK(view.state == SUPERVISOR_READY && view.stuck_detections == 1 && view.restarts == 1);
    supervisor_close(&s, &side);
    check_released(&j, "stuck");
    harness_end(&h);
}

static int warmed_up(const void *arg) {
    struct supervisor_view view;
    supervisor_view((struct supervisor *)arg, &view);
    return view.warm_pending == 0;
}

/* Moves the jobs of one supervisor to another (warm-up, take, give); the
 * tokens it had so far; -1 if the take failed. */
static int move_jobs(struct supervisor *from, struct supervisor *to, struct tjob *j) {
    struct supervisor_job **taken = NULL;
    CHECK(supervisor_warm(from, to) == 1);
    int n = supervisor_take(from, &taken);
    CHECK_MSG(n == 1 && taken[0] == &j->job, "took %d jobs", n);
    int so_far = read_count(&j->n_tokens);
    if (n > 0) supervisor_give(to, taken, n);
    free(taken);
    return n == 1 ? so_far : -1;
}

/* A job taken from one supervisor and given to another resumes there with
 * its tokens so far; the first runner is told to drop it. */
static void test_move(void) {
    struct harness h;
    struct supervisor one, two;
    struct tside side_one = {0}, side_two = {0};
    struct supervisor_view view;
    struct logged_add add = {0};
    struct tjob j;
    static const int prompt[] = {500};
    if (harness_begin(&h, "move", "normal", 5) || supervisor_open(&one, &side_one, &h, 0)) return;
    if (supervisor_open(&two, &side_two, &h, 1)) {
        supervisor_close(&one, &side_one);
        return;
    }
    wait_count(&side_one.ready, 1, 10, "move: the first runner's HELLO");
    wait_count(&side_two.ready, 1, 10, "move: the second runner's HELLO");
    tjob_setup(&j, &h, prompt, 1, 100);
    struct tjob *jobs[] = {&j};
    tjob_submit(&one, jobs, 1);
    wait_count(&j.n_tokens, 5, 10, "move: 5 tokens on the first runner");
    int pid_one = read_count(&side_one.last_pid), pid_two = read_count(&side_two.last_pid);
    int so_far = move_jobs(&one, &two, &j);
    wait_for(job_ended, &j, 10, "move: the job's FINISHED on the second runner");
    check_complete(&j, "move");
    pthread_mutex_lock(&tlock);
    CHECK(j.finished_from == &two && j.job.holder == &two);
    pthread_mutex_unlock(&tlock);
    wait_for(warmed_up, &two, 5, "move: the warm-up's FINISHED");
    /* the runner that said HELLO served it: no watchdog restart covered a lost ADD */
    CHECK(read_count(&side_one.restarting) == 0 && read_count(&side_two.restarting) == 0);
    CHECK(read_count(&side_two.stuck) == 0 && read_count(&side_two.last_pid) == pid_two);
    CHECK_MSG(so_far >= 5 && log_find_add(h.log, pid_two, j.job.id, 0, &add) &&
                  add.resumed >= so_far && add.n_prompt == 1 + add.resumed &&
                  add.max_tokens == 100 - add.resumed && add.prompt[0] == 500 &&
                  add.n == add.n_prompt,
              "the second runner's ADD: resumed %d (had %d), n_prompt %d", add.resumed, so_far,
              add.n_prompt);
    pthread_mutex_lock(&tlock);
    CHECK(!memcmp(add.prompt + 1, j.tokens, (size_t)add.resumed * sizeof(int)));
    pthread_mutex_unlock(&tlock);
    char cancel[64];
    snprintf(cancel, sizeof(cancel), "cancel id=%llu pid=%d ", (unsigned long long)j.job.id,
             pid_one);
    wait_log(h.log, cancel, 1, 5, "move: the first runner's CANCEL");
    supervisor_view(&one, &view);
    CHECK(view.n_jobs == 0);
    supervisor_close(&one, &side_one);
    supervisor_close(&two, &side_two);
    check_released(&j, "move");
    harness_end(&h);
}

/* supervisor_stop joins the thread and fails what is left with 503;
 * supervisor_free leaves no runner behind. */
static void test_stop(void) {
    struct harness h;
    struct supervisor s;
    struct tside side = {0};
    struct supervisor_view view;
    struct tjob j, late;
    static const int prompt[] = {7};
    if (harness_begin(&h, "stop", "normal", 20) || supervisor_open(&s, &side, &h, 0)) return;
    tjob_setup(&j, &h, prompt, 1, 400);
    struct tjob *jobs[] = {&j};
    tjob_submit(&s, jobs, 1);
    wait_count(&j.n_tokens, 1, 10, "stop: the job's first token");
    supervisor_view(&s, &view);
    int pid = view.pid;
    CHECK(pid > 0 && pid == read_count(&side.last_pid));
    supervisor_stop(&s);
    CHECK(supervisor_stopped(&s));
    pthread_mutex_lock(&tlock);
    CHECK_MSG(j.n_failed == 1 && j.failed_status == 503 && strstr(j.failed_message, "shutting"),
              "the job: failed %d times, %d '%s'", j.n_failed, j.failed_status, j.failed_message);
    CHECK(j.finished == 0 && j.n_tokens < j.max_tokens);
    pthread_mutex_unlock(&tlock);
    check_released(&j, "stop");
    supervisor_view(&s, &view);
    CHECK(view.state == SUPERVISOR_DRAINING && view.n_jobs == 0);
    tjob_setup(&late, &h, prompt, 1, 4);
    struct tjob *after[] = {&late};
    tjob_submit(&s, after, 1);
    pthread_mutex_lock(&tlock);
    CHECK(late.n_failed == 1 && late.failed_status == 503 && late.references == 0);
    pthread_mutex_unlock(&tlock);
    supervisor_free(&s);
    free(side.stuck_report);
    if (pid > 0) wait_for(pid_gone, &pid, 5, "stop: the runner's exit");
    harness_end(&h);
}

int main(void) {
    if (access(FAKE_RUNNER_PATH, X_OK) != 0) {
        printf("skip: %s is not built\n", FAKE_RUNNER_PATH);
        return TEST_SKIP_CODE;
    }
    test_normal();
    test_crash_resume();
    test_cancel();
    test_failed_starts();
    test_stuck();
    test_move();
    test_stop();
    return test_status("test_gateway_supervisor");
}
