/* screen.c -- the gateway's front door: accepts each connection and reads
 * (without consuming) its first request's head before libmicrohttpd sees
 * it.
 *
 * libmicrohttpd answers some malformed requests itself, with HTML bodies
 * no hook can change: a header block or a URI larger than its memory pool
 * (431, 414), an HTTP version it does not speak (505), a broken chunked
 * body (400). The screen answers those in the OpenAI error shape instead,
 * from the bytes it peeks, and hands every other connection to the daemon
 * (MHD_add_connection) untouched. The screen also keeps how many
 * connections each client address holds, screened or served, and closes a
 * new one past --max-client-connections at once. A request's body is framed by its
 * Content-Length: a chunked one gets 411, since its framing could only be
 * judged by the library. One thread polls the listening socket and the
 * connections being screened; a connection whose head does not arrive
 * within the connection timeout is closed, and nothing here waits on a
 * client (DESIGN.md I6, I7). */
#include "gateway_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#define SCREEN_PENDING_MAX 1024    /* connections screened at once; more wait in the backlog */
#define SCREEN_HEAD_MAX    (16384) /* bytes of a request's line and headers at most */
#define SCREEN_URI_MAX     (8192)  /* bytes of a request target at most */

/* A connection whose first request head is still arriving. */
struct screen_pending {
    int fd;
    struct sockaddr_storage address;
    socklen_t address_length;
    uint64_t since_us; /* when it was accepted */
};

/* Connections one client address holds, screened or served. */
struct screen_address {
    uint32_t address; /* IPv4, network order */
    int count;
};

struct gateway_screen {
    struct gateway *gateway;
    int listen_fd;
    int per_client;       /* connections one address may hold */
    pthread_mutex_t lock; /* guards addresses (the daemon's thread closes connections) */
    struct screen_address *addresses; /* (n_addresses) the addresses holding any */
    int n_addresses, addresses_capacity;
    pthread_t thread;
    struct screen_pending pending[SCREEN_PENDING_MAX];
    int n_pending;
    struct pollfd fds[SCREEN_PENDING_MAX + 1]; /* the listener, then the pending ones */
    char head[SCREEN_HEAD_MAX + 1];            /* what a pending connection sent, peeked */
};

static uint32_t address_of(const struct sockaddr_storage *a) {
    return a->ss_family == AF_INET ? ((const struct sockaddr_in *)a)->sin_addr.s_addr : 0;
}

/* Adds change to the count of address; returns the count before, or -1
 * when the table cannot grow (the address is then not limited). */
static int count_address(struct gateway_screen *s, uint32_t address, int change) {
    int i = 0, before = -1;
    pthread_mutex_lock(&s->lock);
    while (i < s->n_addresses && s->addresses[i].address != address) i++;
    if (i == s->n_addresses && change > 0 && s->n_addresses == s->addresses_capacity) {
        int capacity = s->addresses_capacity ? 2 * s->addresses_capacity : 64;
        struct screen_address *grown =
            realloc(s->addresses, (size_t)capacity * sizeof(*s->addresses));
        if (grown) {
            s->addresses = grown;
            s->addresses_capacity = capacity;
        }
    }
    if (i == s->n_addresses && i < s->addresses_capacity && change > 0)
        s->addresses[s->n_addresses++] = (struct screen_address){address, 0};
    if (i < s->n_addresses) {
        before = s->addresses[i].count;
        s->addresses[i].count += change;
        if (s->addresses[i].count <= 0) s->addresses[i] = s->addresses[--s->n_addresses];
    }
    pthread_mutex_unlock(&s->lock);
    return before;
}

void gateway_screen_closed(struct gateway *g, const struct sockaddr *address) {
    if (g->screen && address && address->sa_family == AF_INET)
        count_address(g->screen, ((const struct sockaddr_in *)address)->sin_addr.s_addr, -1);
}

/* Closes a connection the screen still holds. */
static void drop(struct gateway_screen *s, struct screen_pending *p) {
    close(p->fd);
    count_address(s, address_of(&p->address), -1);
}

/* Sends an OpenAI-shaped error and closes: what was received is read
 * first, so the close does not reset the connection before the answer. */
static void refuse(int fd, int status, const char *reason, const char *message) {
    char discard[4096], body[512], response[1024];
    struct openai_error e;
    openai_error_set(&e, status, "invalid_request_error", NULL, NULL, "%s", message);
    char *json = openai_error_json(&e);
    snprintf(body, sizeof(body), "%s", json ? json : "{}");
    free(json);
    int n = snprintf(response, sizeof(response),
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     status, reason, strlen(body), body);
    while (recv(fd, discard, sizeof(discard), MSG_DONTWAIT) > 0) continue;
    if (n > 0 && send(fd, response, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* the client is gone: nothing to tell it */
    }
    shutdown(fd, SHUT_WR);
    close(fd);
}

/* The value of header name in head (length bytes), or NULL; *length gets
 * the value's length. Header names are case-insensitive. */
static const char *find_header(const char *head, size_t size, const char *name, size_t *length) {
    size_t n = strlen(name);
    for (const char *line = memchr(head, '\n', size); line && line + 1 < head + size;) {
        line++;
        const char *end = memchr(line, '\n', (size_t)(head + size - line));
        if (!end) return NULL;
        if ((size_t)(end - line) > n && line[n] == ':' && !strncasecmp(line, name, n)) {
            const char *value = line + n + 1;
            while (value < end && (*value == ' ' || *value == '\t')) value++;
            *length = (size_t)(end - value);
            return value;
        }
        line = end;
    }
    return NULL;
}

/* What is wrong with a whole request head, as a status (0: nothing the
 * screen answers for), with its reason phrase and message. */
static int judge_head(const char *head, size_t size, const char **reason, const char **message) {
    const char *line_end = memchr(head, '\n', size);
    if (!line_end) return 0;
    const char *target = memchr(head, ' ', (size_t)(line_end - head));
    const char *version = target ? memchr(target + 1, ' ', (size_t)(line_end - target - 1)) : NULL;
    size_t value_length;
    if (!target || !version) return 0; /* not HTTP at all: the library closes it */
    if ((size_t)(version - target - 1) > SCREEN_URI_MAX) {
        *reason = "URI Too Long";
        *message = "the request target is longer than 8192 bytes";
        return 414;
    }
    size_t version_length = (size_t)(line_end - version - 1);
    if (version_length > 0 && version[version_length] == '\r') version_length--;
    if (version_length != 8 ||
        (strncmp(version + 1, "HTTP/1.1", 8) != 0 && strncmp(version + 1, "HTTP/1.0", 8) != 0)) {
        *reason = "HTTP Version Not Supported";
        *message = "only HTTP/1.0 and HTTP/1.1 are served";
        return 505;
    }
    if (find_header(head, size, "Transfer-Encoding", &value_length)) {
        *reason = "Length Required";
        *message = "send the request body with a Content-Length, not a Transfer-Encoding";
        return 411;
    }
    return 0;
}

/* Looks at what pending connection p has sent: 1 when it is done with
 * (handed to the daemon, refused or closed), 0 to wait for more. */
static int screen_one(struct gateway_screen *s, struct screen_pending *p, uint64_t now_us) {
    char *head = s->head;
    const char *reason = NULL, *message = NULL;
    ssize_t n = recv(p->fd, head, sizeof(s->head), MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        double timeout = s->gateway->params.connection_timeout_seconds > 0
                             ? s->gateway->params.connection_timeout_seconds
                             : GATEWAY_CONNECTION_TIMEOUT;
        if ((double)(now_us - p->since_us) * 1e-6 < timeout) return 0;
        drop(s, p); /* its request never came */
        return 1;
    }
    if (n <= 0) {
        drop(s, p);
        return 1;
    }
    const char *end = memmem(head, (size_t)n, "\r\n\r\n", 4);
    size_t terminator = 4;
    if (!end) {
        end = memmem(head, (size_t)n, "\n\n", 2);
        terminator = 2;
    }
    const char *line_end = memchr(head, '\n', (size_t)n);
    int status = 0;
    if (!line_end && n > SCREEN_URI_MAX) {
        status = 414, reason = "URI Too Long";
        message = "the request target is longer than 8192 bytes";
    } else if (!end && n > SCREEN_HEAD_MAX) {
        status = 431, reason = "Request Header Fields Too Large";
        message = "the request's line and headers are longer than 16384 bytes";
    } else if (!end) {
        return 0; /* more is coming */
    } else {
        status = judge_head(head, (size_t)(end - head) + terminator, &reason, &message);
    }
    if (status) {
        refuse(p->fd, status, reason, message);
        count_address(s, address_of(&p->address), -1);
        return 1;
    }
    /* the daemon owns the socket from here (and closes it if it refuses
     * it); its close is counted by gateway_screen_closed */
    if (MHD_add_connection(s->gateway->daemon, p->fd, (const struct sockaddr *)&p->address,
                           p->address_length) != MHD_YES)
        count_address(s, address_of(&p->address), -1);
    return 1;
}

/* Accepts what the backlog holds while there is room. */
static void accept_new(struct gateway_screen *s, uint64_t now_us) {
    while (s->n_pending < SCREEN_PENDING_MAX) {
        struct screen_pending *p = &s->pending[s->n_pending];
        p->address_length = sizeof(p->address);
        p->fd = accept4(s->listen_fd, (struct sockaddr *)&p->address, &p->address_length,
                        SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (p->fd < 0) return;
        p->since_us = now_us;
        if (count_address(s, address_of(&p->address), 1) >= s->per_client) {
            drop(s, p); /* one client may not hold every connection */
            continue;
        }
        s->n_pending++;
    }
}

static void *screen_main(void *arg) {
    struct gateway_screen *s = arg;
    struct pollfd *fds = s->fds;
    while (!atomic_load(&s->gateway->stopping)) {
        fds[0] = (struct pollfd){s->n_pending < SCREEN_PENDING_MAX ? s->listen_fd : -1, POLLIN, 0};
        for (int i = 0; i < s->n_pending; i++)
            fds[i + 1] = (struct pollfd){s->pending[i].fd, POLLIN, 0};
        poll(fds, (nfds_t)s->n_pending + 1, 100);
        uint64_t now = runner_now_us();
        for (int i = s->n_pending - 1; i >= 0; i--)
            if (screen_one(s, &s->pending[i], now)) s->pending[i] = s->pending[--s->n_pending];
        if (fds[0].revents & POLLIN) accept_new(s, now);
    }
    for (int i = 0; i < s->n_pending; i++) drop(s, &s->pending[i]);
    s->n_pending = 0;
    return NULL;
}

int gateway_screen_start(struct gateway *g, int listen_fd, int per_client, char *err,
                         size_t errlen) {
    struct gateway_screen *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory for the connection screen");
        return -1;
    }
    s->gateway = g;
    s->listen_fd = listen_fd;
    s->per_client = per_client;
    pthread_mutex_init(&s->lock, NULL);
    g->screen = s;
    if (pthread_create(&s->thread, NULL, screen_main, s)) {
        g->screen = NULL;
        pthread_mutex_destroy(&s->lock);
        free(s);
        snprintf(err, errlen, "cannot start the connection screen's thread");
        return -1;
    }
    return 0;
}

void gateway_screen_stop(struct gateway *g) {
    struct gateway_screen *s = g->screen;
    if (!s) return;
    atomic_store(&g->stopping, 1);
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
}

void gateway_screen_free(struct gateway *g) {
    struct gateway_screen *s = g->screen;
    if (!s) return;
    g->screen = NULL;
    pthread_mutex_destroy(&s->lock);
    free(s->addresses);
    free(s);
}
