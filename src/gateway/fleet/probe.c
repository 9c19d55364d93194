/* probe.c -- what the gateway knows of its hosts: cores, memory,
 * instruction set, and whether they answer.
 *
 * A thread asks every host every few seconds: this machine in-process,
 * another through Open MPI's launcher (`mpirun -np 1 --host H lockstep
 * probe`, which prints one JSON line), a host whose own program the
 * cluster file names (lockstep=, wrapper=) by running that program, there
 * or through mpirun, since its build's arch and numerics are what
 * placement must know, not the gateway's; with a deadline after which the
 * probe is killed and the host counts as lost. The prober knows the
 * hosts only through its events: it asks for a copy of them, and tells
 * each answer (or its absence) back; the fleet decides what a lost host
 * means (cluster.c: its instances move elsewhere). No lock is held while a
 * probe runs.
 *
 * A second thread measures the links between the hosts that answer (two
 * or more) every minute, so that a job stuck on a cut link never delays
 * the news of a lost host: one mpirun job with a rank on each (`lockstep
 * probe --links`, one app context per host, as a launch of ranks on
 * them), whose rank 0 prints every pair's latency and rate; what the
 * shape policy weighs (cluster_choose_shape). */
#include "gateway/fleet/fleet.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROBE_DEADLINE_SECONDS 10.0 /* a probe that has not answered by then failed */
#define LINKS_DEADLINE_SECONDS 30.0 /* the link probe's job is killed by then */
#define LINKS_EVERY_SECONDS    60.0 /* between link probes */

/* Starts argv in a process group of its own, killed with the gateway,
 * with its stdout on *out. */
static pid_t spawn_argv(const char *const *argv, int *out) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC)) return -1;
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
        dup2(pipe_fds[1], STDOUT_FILENO);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pipe_fds[1]);
    if (pid < 0) {
        close(pipe_fds[0]);
        return -1;
    }
    setpgid(pid, pid);
    *out = pipe_fds[0];
    return pid;
}

/* Starts `[mpirun ...] [wrapper] lockstep probe` for host h (mpirun for
 * another machine) with its stdout on *out. */
static pid_t spawn_probe(const struct fleet_prober *prober, const struct cluster_host *h,
                         int *out) {
    const char *argv[16];
    int n = 0;
    if (!h->local) {
        argv[n++] = prober->mpirun_path;
        if (geteuid() == 0) argv[n++] = "--allow-run-as-root";
        argv[n++] = "-np";
        argv[n++] = "1";
        argv[n++] = "--host";
        argv[n++] = h->name;
    }
    if (h->wrapper[0]) argv[n++] = h->wrapper;
    argv[n++] = h->lockstep[0] ? h->lockstep : prober->lockstep_path;
    argv[n++] = "probe";
    argv[n] = NULL;
    return spawn_argv(argv, out);
}

/* Reads a probe's output into text (size bytes) until it ends or
 * `deadline` seconds pass; its last line, or NULL. */
static const char *read_last_line(int fd, char *text, size_t size, double deadline,
                                  const struct fleet_prober *prober) {
    size_t used = 0;
    uint64_t start = clock_now_us();
    for (;;) {
        double left = deadline - (double)(clock_now_us() - start) * 1e-6;
        if (left <= 0 || atomic_load(prober->stopping)) return NULL;
        struct pollfd pfd = {fd, POLLIN, 0};
        int ready = poll(&pfd, 1, left < 0.1 ? 1 : 100);
        if (ready < 0 && errno != EINTR) return NULL;
        if (ready <= 0) continue;
        ssize_t n = read(fd, text + used, size - 1 - used);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        used += (size_t)n;
        if (used == size - 1) break;
    }
    text[used] = '\0';
    while (used > 0 && (text[used - 1] == '\n' || text[used - 1] == '\r')) text[--used] = '\0';
    return strrchr(text, '\n') ? strrchr(text, '\n') + 1 : text;
}

/* Reads the probe's output; the last line is the answer. 0 with *p, or -1. */
static int read_probe(int fd, struct cluster_probe *p, const struct fleet_prober *prober) {
    char text[4096], err[200];
    const char *line = read_last_line(fd, text, sizeof(text), PROBE_DEADLINE_SECONDS, prober);
    return line ? cluster_probe_parse(line, p, err, sizeof(err)) : -1;
}

/* Probes one host; 0 with *p, or -1 when it did not answer in time. */
static int probe_host(const struct fleet_prober *prober, const struct cluster_host *h,
                      struct cluster_probe *p) {
    char err[200];
    if (h->local && !cluster_host_own_program(h)) return cluster_probe_local(p, err, sizeof(err));
    int fd = -1, status = 0;
    pid_t pid = spawn_probe(prober, h, &fd);
    if (pid < 0) return -1;
    int rc = read_probe(fd, p, prober);
    close(fd);
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
    return rc;
}

/* The argv of the link probe of hosts[on[0..n)]: mpirun with an app
 * context per host, `-np 1 [--host NAME:1] [wrapper] lockstep probe
 * --links`, so that rank k is on host on[k] (no --host when every one is
 * this machine, as for an instance's ranks). names holds the NAME:1s.
 * NULL-terminated; 0, or -1 if it does not fit in max entries. */
static int links_argv(const struct fleet_prober *prober, const struct cluster_host *hosts,
                      const int *on, int n, const char **argv, int max,
                      char (*names)[CLUSTER_HOST_NAME_MAX + 4]) {
    int k = 0, local = 1;
    for (int i = 0; i < n; i++) local = local && hosts[on[i]].local;
    if (max < 5 + 9 * n) return -1;
    argv[k++] = prober->mpirun_path;
    if (geteuid() == 0) argv[k++] = "--allow-run-as-root";
    argv[k++] = "--bind-to";
    argv[k++] = "none";
    if (local) argv[k++] = "--oversubscribe";
    for (int i = 0; i < n; i++) {
        const struct cluster_host *h = &hosts[on[i]];
        if (i) argv[k++] = ":";
        argv[k++] = "-np";
        argv[k++] = "1";
        if (!local) {
            snprintf(names[i], sizeof(names[i]), "%s:1", h->name);
            argv[k++] = "--host";
            argv[k++] = names[i];
        }
        if (h->wrapper[0]) argv[k++] = h->wrapper;
        argv[k++] = h->lockstep[0] ? h->lockstep : prober->lockstep_path;
        argv[k++] = "probe";
        argv[k++] = "--links";
    }
    argv[k] = NULL;
    return 0;
}

/* Measures the links between the hosts that answer (two or more) and
 * tells them; a job that fails or says nothing valid tells nothing. */
static void probe_links(struct fleet_prober *prober, const struct cluster_host *hosts,
                        int n_hosts) {
    int on[CLUSTER_HOSTS_MAX], n = 0, fd = -1, status = 0;
    for (int i = 0; i < n_hosts; i++)
        if (hosts[i].probed && !hosts[i].lost) on[n++] = i;
    if (n < 2 || !prober->events.links) return;
    const char **argv = calloc(8 + 9 * (size_t)n, sizeof(*argv));
    char(*names)[CLUSTER_HOST_NAME_MAX + 4] = calloc((size_t)n, sizeof(*names));
    size_t text_size = (size_t)n * (size_t)n * 96 + 4096;
    char *text = malloc(text_size), err[200];
    struct cluster_link *links = calloc((size_t)n * (size_t)n, sizeof(*links));
    pid_t pid = -1;
    if (argv && names && text && links &&
        links_argv(prober, hosts, on, n, argv, 8 + 9 * n, names) == 0)
        pid = spawn_argv(argv, &fd);
    if (pid > 0) {
        const char *line = read_last_line(fd, text, text_size, LINKS_DEADLINE_SECONDS, prober);
        close(fd);
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
        if (line && cluster_links_parse(line, n, links, err, sizeof(err)) == 0)
            prober->events.links(prober->events.context, on, n, links);
    }
    free(links);
    free(text);
    free(names);
    free(argv);
}

void fleet_probe_hosts(struct fleet_prober *prober, int local_only) {
    struct cluster_host hosts[CLUSTER_HOSTS_MAX];
    int n = prober->events.hosts(prober->events.context, hosts);
    for (int i = 0; i < n && !atomic_load(prober->stopping); i++) {
        struct cluster_probe p;
        if (local_only && !hosts[i].local) continue;
        int ok = probe_host(prober, &hosts[i], &p) == 0;
        prober->events.answered(prober->events.context, i, ok ? &p : NULL);
    }
}

/* Naps until seconds have passed or the gateway stops. */
static void nap_unless_stopping(const struct fleet_prober *prober, double seconds) {
    for (double waited = 0; waited < seconds && !atomic_load(prober->stopping); waited += 0.05) {
        struct timespec nap = {0, 50000000};
        nanosleep(&nap, NULL);
    }
}

static void *probe_loop(void *arg) {
    struct fleet_prober *prober = arg;
    double every = prober->every_seconds > 0 ? prober->every_seconds : 5.0;
    fleet_probe_hosts(prober, 0); /* the other machines, at once */
    while (!atomic_load(prober->stopping)) {
        nap_unless_stopping(prober, every);
        if (!atomic_load(prober->stopping)) fleet_probe_hosts(prober, 0);
    }
    return NULL;
}

static void *links_loop(void *arg) {
    struct fleet_prober *prober = arg;
    struct cluster_host *hosts = malloc(CLUSTER_HOSTS_MAX * sizeof(*hosts));
    double every = prober->every_seconds > 0 ? prober->every_seconds : 5.0;
    nap_unless_stopping(prober, 2 * every); /* after the hosts' first answers */
    while (hosts && !atomic_load(prober->stopping)) {
        int n = prober->events.hosts(prober->events.context, hosts);
        probe_links(prober, hosts, n);
        nap_unless_stopping(prober, LINKS_EVERY_SECONDS);
    }
    free(hosts);
    return NULL;
}

int fleet_probe_start(struct fleet_prober *prober, char *err, size_t errlen) {
    if (pthread_create(&prober->thread, NULL, probe_loop, prober)) {
        snprintf(err, errlen, "cannot start the host probes");
        return -1;
    }
    prober->started = 1;
    if (pthread_create(&prober->links_thread, NULL, links_loop, prober) == 0)
        prober->links_started = 1;
    return 0;
}

void fleet_probe_stop(struct fleet_prober *prober) {
    atomic_store(prober->stopping, 1);
    if (prober->started) pthread_join(prober->thread, NULL);
    if (prober->links_started) pthread_join(prober->links_thread, NULL);
    prober->started = prober->links_started = 0;
}
