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
 * probe runs. */
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

/* Starts `[mpirun ...] [wrapper] lockstep probe` for host h (mpirun for
 * another machine) with its stdout on *out. */
static pid_t spawn_probe(const struct fleet_prober *prober, const struct cluster_host *h,
                         int *out) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC)) return -1;
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

/* Reads the probe's output until it ends or the deadline passes; the
 * last line is the answer. 0 with *p, or -1. */
static int read_probe(int fd, struct cluster_probe *p, const struct fleet_prober *prober) {
    char text[4096], err[200];
    size_t used = 0;
    uint64_t start = clock_now_us();
    for (;;) {
        double left = PROBE_DEADLINE_SECONDS - (double)(clock_now_us() - start) * 1e-6;
        if (left <= 0 || atomic_load(prober->stopping)) return -1;
        struct pollfd pfd = {fd, POLLIN, 0};
        int ready = poll(&pfd, 1, left < 0.1 ? 1 : 100);
        if (ready < 0 && errno != EINTR) return -1;
        if (ready <= 0) continue;
        ssize_t n = read(fd, text + used, sizeof(text) - 1 - used);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        used += (size_t)n;
        if (used == sizeof(text) - 1) break;
    }
    text[used] = '\0';
    while (used > 0 && (text[used - 1] == '\n' || text[used - 1] == '\r')) text[--used] = '\0';
    const char *line = strrchr(text, '\n') ? strrchr(text, '\n') + 1 : text;
    return cluster_probe_parse(line, p, err, sizeof(err));
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

static void *probe_loop(void *arg) {
    struct fleet_prober *prober = arg;
    double every = prober->every_seconds > 0 ? prober->every_seconds : 5.0;
    fleet_probe_hosts(prober, 0); /* the other machines, at once */
    while (!atomic_load(prober->stopping)) {
        for (double waited = 0; waited < every && !atomic_load(prober->stopping); waited += 0.05) {
            struct timespec nap = {0, 50000000};
            nanosleep(&nap, NULL);
        }
        if (!atomic_load(prober->stopping)) fleet_probe_hosts(prober, 0);
    }
    return NULL;
}

int fleet_probe_start(struct fleet_prober *prober, char *err, size_t errlen) {
    if (pthread_create(&prober->thread, NULL, probe_loop, prober)) {
        snprintf(err, errlen, "cannot start the host probes");
        return -1;
    }
    prober->started = 1;
    return 0;
}

void fleet_probe_stop(struct fleet_prober *prober) {
    atomic_store(prober->stopping, 1);
    if (prober->started) pthread_join(prober->thread, NULL);
    prober->started = 0;
}
