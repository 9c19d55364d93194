/* netns_wire.c -- the wire between two network namespaces, for
 * bench/pipeline_netns on kernels without sch_netem: it carries IP packets
 * between a TUN device in each namespace and gives each one what a link of
 * the given rate and one-way delay would (serialization behind the packets
 * before it, then the delay), in order, both ways.
 *
 * usage: netns_wire [--rate-mbit N] [--delay-us N] NS1 DEV1 NS2 DEV2
 * NS names a namespace in /var/run/netns, DEV a TUN device there (made by
 * `ip tuntap add mode tun`). Runs until SIGTERM or SIGINT, then prints what
 * it carried each way and how late it delivered. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

/* The largest packet a TUN device hands over (its MTU is at most 65535). */
#define WIRE_SLOT 65536u
/* Packets a direction holds: bounds memory (16 MiB a direction) and the
 * queue; when it is full the wire stops reading, and the sender's TUN
 * queue fills and drops as a NIC's would. */
#define WIRE_SLOTS 256u

struct wire_dir {
    const char *name;           /* "NS1 -> NS2", for the summary */
    int in, out;                /* TUN descriptors: read from in, write to out */
    unsigned char *buf;         /* WIRE_SLOTS slots of WIRE_SLOT bytes */
    size_t len[WIRE_SLOTS];     /* bytes of the packet in each slot */
    int64_t due[WIRE_SLOTS];    /* CLOCK_MONOTONIC ns at which it leaves the wire */
    unsigned head, count;       /* oldest slot, slots in use */
    int64_t free_at;            /* when the link has serialized what it holds */
    uint64_t packets, bytes;    /* delivered */
    uint64_t lost;              /* refused by the receiving TUN device */
    int64_t late_sum, late_max; /* delivery after the due time, ns */
};

static volatile sig_atomic_t wire_stop;

static void wire_on_signal(int sig) {
    (void)sig;
    wire_stop = 1;
}

static int64_t wire_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Attaches to TUN device dev in namespace ns: the device is looked up in
 * the namespace of the task that opens /dev/net/tun, so the wire enters ns
 * first and stays there. Returns the descriptor, or -1 with a message. */
static int wire_attach(const char *ns, const char *dev) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "/var/run/netns/%s", ns);
    int nsfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) {
        fprintf(stderr, "netns_wire: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (setns(nsfd, CLONE_NEWNET) != 0) {
        fprintf(stderr, "netns_wire: cannot enter namespace %s: %s\n", ns, strerror(errno));
        close(nsfd);
        return -1;
    }
    close(nsfd);
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "netns_wire: cannot open /dev/net/tun: %s\n", strerror(errno));
        return -1;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    if (strlen(dev) >= sizeof ifr.ifr_name) {
        fprintf(stderr, "netns_wire: device name %s is too long\n", dev);
        close(fd);
        return -1;
    }
    memcpy(ifr.ifr_name, dev, strlen(dev));
    if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
        fprintf(stderr, "netns_wire: cannot attach to TUN device %s in %s: %s\n", dev, ns,
                strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads every packet waiting on d->in while there is room, each one due
 * when the link has serialized it after those before it, plus the delay.
 * now is when the wire woke, the closest it knows to their arrival.
 * 0, or -1 with a message when the device fails. */
static int wire_take(struct wire_dir *d, int64_t now, int64_t rate_mbit, int64_t delay_ns) {
    while (d->count < WIRE_SLOTS) {
        unsigned slot = (d->head + d->count) % WIRE_SLOTS;
        ssize_t n = read(d->in, d->buf + (size_t)slot * WIRE_SLOT, WIRE_SLOT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return 0;
        if (n <= 0) {
            fprintf(stderr, "netns_wire: %s: read: %s\n", d->name,
                    n < 0 ? strerror(errno) : "device closed");
            return -1;
        }
        int64_t start = d->free_at > now ? d->free_at : now;
        /* bits / (Mbit/s) = microseconds, so bits * 1000 / rate is ns */
        d->free_at = start + (rate_mbit > 0 ? (int64_t)n * 8 * 1000 / rate_mbit : 0);
        d->len[slot] = (size_t)n;
        d->due[slot] = d->free_at + delay_ns;
        d->count++;
    }
    return 0;
}

/* Writes every packet of d that is due by now to d->out, oldest first. A
 * packet the receiving device refuses (it is down) is lost, as on a wire. */
static void wire_give(struct wire_dir *d, int64_t now) {
    while (d->count > 0 && d->due[d->head] <= now) {
        unsigned slot = d->head;
        ssize_t n = write(d->out, d->buf + (size_t)slot * WIRE_SLOT, d->len[slot]);
        if (n == (ssize_t)d->len[slot]) {
            d->packets++;
            d->bytes += (uint64_t)n;
            int64_t late = now - d->due[slot];
            d->late_sum += late;
            if (late > d->late_max) d->late_max = late;
        } else {
            d->lost++;
        }
        d->head = (d->head + 1) % WIRE_SLOTS;
        d->count--;
    }
}

/* Carries packets both ways until a signal asks it to stop. 0, or -1 with
 * a message. SIGTERM and SIGINT stay blocked except inside ppoll, so a
 * signal between the check of wire_stop and the wait is not missed. */
static int wire_run(struct wire_dir dir[2], int64_t rate_mbit, int64_t delay_ns) {
    sigset_t block, waiting;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    if (sigprocmask(SIG_BLOCK, &block, &waiting) != 0) {
        fprintf(stderr, "netns_wire: sigprocmask: %s\n", strerror(errno));
        return -1;
    }
    sigdelset(&waiting, SIGTERM);
    sigdelset(&waiting, SIGINT);
    while (!wire_stop) {
        int64_t now = wire_now();
        for (int i = 0; i < 2; i++)
            if (wire_take(&dir[i], now, rate_mbit, delay_ns) != 0) return -1;
        now = wire_now();
        int64_t next = INT64_MAX;
        struct pollfd fds[2];
        for (int i = 0; i < 2; i++) {
            wire_give(&dir[i], now);
            if (dir[i].count > 0 && dir[i].due[dir[i].head] < next) next = dir[i].due[dir[i].head];
            /* a full direction is not read: its sender's queue holds the rest */
            fds[i].fd = dir[i].count < WIRE_SLOTS ? dir[i].in : -1;
            fds[i].events = POLLIN;
        }
        struct timespec wait, *timeout = NULL;
        if (next != INT64_MAX) {
            int64_t ns = next > now ? next - now : 0;
            wait.tv_sec = ns / 1000000000;
            wait.tv_nsec = ns % 1000000000;
            timeout = &wait;
        }
        if (ppoll(fds, 2, timeout, &waiting) < 0 && errno != EINTR) {
            fprintf(stderr, "netns_wire: ppoll: %s\n", strerror(errno));
            return -1;
        }
    }
    return 0;
}

static int wire_usage(void) {
    fprintf(stderr, "usage: netns_wire [--rate-mbit N] [--delay-us N] NS1 DEV1 NS2 DEV2\n");
    return 2;
}

/* The value of option argv[*i] into *out (non-negative). 0, or -1. */
static int wire_number(int argc, char **argv, int *i, int64_t *out) {
    if (*i + 1 >= argc) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(argv[*i + 1], &end, 10);
    if (errno != 0 || *end != '\0' || end == argv[*i + 1] || v < 0) {
        fprintf(stderr, "netns_wire: %s wants a non-negative integer, not %s\n", argv[*i],
                argv[*i + 1]);
        return -1;
    }
    *out = v;
    *i += 1;
    return 0;
}

int main(int argc, char **argv) {
    int64_t rate_mbit = 0, delay_us = 0;
    const char *arg[4];
    int nargs = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rate-mbit") == 0) {
            if (wire_number(argc, argv, &i, &rate_mbit) != 0) return wire_usage();
        } else if (strcmp(argv[i], "--delay-us") == 0) {
            if (wire_number(argc, argv, &i, &delay_us) != 0) return wire_usage();
        } else if (argv[i][0] == '-' || nargs == 4) {
            return wire_usage();
        } else {
            arg[nargs++] = argv[i];
        }
    }
    if (nargs != 4) return wire_usage();

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = wire_on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* A wire outliving the script that started it (killed with SIGKILL)
     * would hold both namespaces alive. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    /* The default 50 us timer slack would lengthen every hold by up to 10%
     * of a 500 us delay. */
    prctl(PR_SET_TIMERSLACK, 1UL);

    /* The second end first: the wire stays in the first namespace, so
     * removing that namespace (which kills its processes) ends the wire. */
    int fd2 = wire_attach(arg[2], arg[3]);
    if (fd2 < 0) return 1;
    int fd1 = wire_attach(arg[0], arg[1]);
    if (fd1 < 0) return 1;

    /* A link takes no CPU time, so the wire must not wait behind the ranks
     * it carries for on a busy machine (measured: packets 0.6 ms late on
     * average with two busy cores, 0.04 ms in the real-time class). It
     * preempts them only for the copies. */
    struct sched_param param = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_FIFO, &param) != 0)
        fprintf(stderr, "netns_wire: no real-time priority (%s): late when cores are busy\n",
                strerror(errno));

    static struct wire_dir dir[2];
    char names[2][2 * NAME_MAX + 8];
    snprintf(names[0], sizeof names[0], "%s -> %s", arg[0], arg[2]);
    snprintf(names[1], sizeof names[1], "%s -> %s", arg[2], arg[0]);
    dir[0].name = names[0], dir[0].in = fd1, dir[0].out = fd2;
    dir[1].name = names[1], dir[1].in = fd2, dir[1].out = fd1;
    for (int i = 0; i < 2; i++) {
        dir[i].buf = malloc((size_t)WIRE_SLOTS * WIRE_SLOT);
        if (dir[i].buf == NULL) {
            fprintf(stderr, "netns_wire: out of memory\n");
            return 1;
        }
    }
    fprintf(stderr, "netns_wire: %s:%s <-> %s:%s, %lld Mbit/s, %lld us each way\n", arg[0], arg[1],
            arg[2], arg[3], (long long)rate_mbit, (long long)delay_us);
    int rc = wire_run(dir, rate_mbit, delay_us * 1000);
    for (int i = 0; i < 2; i++) {
        const struct wire_dir *d = &dir[i];
        fprintf(stderr,
                "netns_wire: %s: %llu packets, %llu bytes, %llu lost, %u held at exit;"
                " late by %.1f us on average, %.1f us at most\n",
                d->name, (unsigned long long)d->packets, (unsigned long long)d->bytes,
                (unsigned long long)d->lost, d->count,
                d->packets ? (double)d->late_sum / (double)d->packets / 1000 : 0.0,
                (double)d->late_max / 1000);
        free(dir[i].buf);
    }
    close(fd1);
    close(fd2);
    return rc == 0 ? 0 : 1;
}
