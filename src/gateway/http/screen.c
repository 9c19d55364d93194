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
#include "gateway/http/http.h"

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
    size_t seen;       /* bytes of an unfinished head peeked so far (0: none yet) */
    short revents;     /* what the last poll said of it */
};

/* Connections one client address holds, screened or served. */
struct screen_address {
    uint32_t address; /* IPv4, network order */
    int count;
};

struct http_screen {
    struct http_server *server;
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
static int count_address(struct http_screen *s, uint32_t address, int change) {
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

void http_screen_closed(struct http_server *server, const struct sockaddr *address) {
    if (server->screen && address && address->sa_family == AF_INET)
        count_address(server->screen, ((const struct sockaddr_in *)address)->sin_addr.s_addr, -1);
}

/* Closes a connection the screen still holds. */
static void drop(struct http_screen *s, struct screen_pending *p) {
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

/* A token character (RFC 9110 5.6.2): methods and header names. */
static int token_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A verdict on a request head: a status (0: let the daemon have it), its
 * reason phrase and a message for the client. */
struct screen_verdict {
    int status;
    const char *reason, *message;
};

static int verdict(struct screen_verdict *v, int status, const char *reason, const char *message) {
    *v = (struct screen_verdict){status, reason, message};
    return status;
}

/* The request line: METHOD SP TARGET SP HTTP/1.x. */
static int judge_request_line(const char *line, size_t length, struct screen_verdict *v) {
    size_t i = 0;
    while (i < length && token_char(line[i])) i++;
    if (i == 0 || i == length || line[i] != ' ')
        return verdict(v, 400, "Bad Request", "the request line is not METHOD TARGET HTTP/1.1");
    size_t target = ++i;
    while (i < length && line[i] > ' ' && line[i] != 0x7F) i++;
    if (i - target > SCREEN_URI_MAX)
        return verdict(v, 414, "URI Too Long", "the request target is longer than 8192 bytes");
    if (i == target || i == length || line[i] != ' ')
        return verdict(v, 400, "Bad Request", "the request line is not METHOD TARGET HTTP/1.1");
    const char *version = line + i + 1;
    size_t version_length = length - i - 1;
    if (version_length != 8 || strncmp(version, "HTTP/1.", 7) != 0 ||
        (version[7] != '0' && version[7] != '1'))
        return verdict(v, 505, "HTTP Version Not Supported",
                       "only HTTP/1.0 and HTTP/1.1 are served");
    return 0;
}

/* One header line "Name: value": a token, a colon, a value of visible
 * characters, spaces and tabs; Content-Length's value is digits, and every
 * Content-Length of the request says the same (*length keeps it, -1: none
 * yet). */
static int judge_header(const char *line, size_t length, size_t max_body, long long *body,
                        struct screen_verdict *v) {
    size_t name = 0;
    while (name < length && token_char(line[name])) name++;
    if (name == 0 || name == length || line[name] != ':')
        return verdict(v, 400, "Bad Request", "a header line is not 'Name: value'");
    for (size_t i = name + 1; i < length; i++)
        if (((unsigned char)line[i] < ' ' && line[i] != '\t') || line[i] == 0x7F)
            return verdict(v, 400, "Bad Request", "a header value has a control character");
    if (name == 17 && !strncasecmp(line, "Transfer-Encoding", 17))
        return verdict(v, 411, "Length Required",
                       "send the request body with a Content-Length, not a Transfer-Encoding");
    if (name != 14 || strncasecmp(line, "Content-Length", 14) != 0) return 0;
    /* spaces after the digits are refused: libmicrohttpd refuses them too,
     * with two response heads */
    size_t i = name + 1, end = length;
    while (i < end && (line[i] == ' ' || line[i] == '\t')) i++;
    long long value = 0;
    if (i == end || end - i > 18)
        return verdict(v, 400, "Bad Request", "Content-Length is not a number of bytes");
    for (; i < end; i++) {
        if (line[i] < '0' || line[i] > '9')
            return verdict(v, 400, "Bad Request", "Content-Length is not a number of bytes");
        value = value * 10 + (line[i] - '0');
    }
    if (*body >= 0 && *body != value)
        return verdict(v, 400, "Bad Request",
                       "the request has two Content-Length headers that disagree");
    *body = value;
    if ((unsigned long long)value > max_body)
        return verdict(v, 413, "Content Too Large", "the body is larger than the server takes");
    return 0;
}

/* What is wrong with a whole request head (size bytes, its blank line
 * included), if anything the screen answers for. */
static int judge_head(const char *head, size_t size, size_t max_body, struct screen_verdict *v) {
    long long body = -1;
    int first = 1;
    for (const char *line = head; line < head + size;) {
        const char *newline = memchr(line, '\n', (size_t)(head + size - line));
        size_t length = (size_t)(newline - line);
        if (length > 0 && line[length - 1] == '\r') length--;
        if (length == 0) break; /* the blank line: the head is over */
        int status = first ? judge_request_line(line, length, v)
                     : (line[0] == ' ' || line[0] == '\t')
                         ? verdict(v, 400, "Bad Request", "folded header lines are obsolete")
                         : judge_header(line, length, max_body, &body, v);
        if (status) return status;
        first = 0;
        line = newline + 1;
    }
    return 0;
}

/* The connection timeout has passed since p was accepted. */
static int timed_out(const struct http_screen *s, const struct screen_pending *p, uint64_t now_us) {
    double timeout = s->server->params->connection_timeout_seconds > 0
                         ? s->server->params->connection_timeout_seconds
                         : HTTP_CONNECTION_TIMEOUT;
    return (double)(now_us - p->since_us) * 1e-6 >= timeout;
}

/* Looks at what pending connection p has sent: 1 when it is done with
 * (handed to the daemon, refused or closed), 0 to wait for more. The bytes
 * are peeked, never taken: the daemon reads them again. */
static int screen_one(struct http_screen *s, struct screen_pending *p, uint64_t now_us) {
    char *head = s->head;
    struct screen_verdict v = {0, NULL, NULL};
    ssize_t n = recv(p->fd, head, sizeof(s->head), MSG_PEEK | MSG_DONTWAIT);
    int waiting = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    if (waiting && !timed_out(s, p, now_us)) return 0;
    if (n <= 0) { /* its request never came, or it left */
        drop(s, p);
        return 1;
    }
    /* empty lines before the request line are skipped, as the library
     * skips them (RFC 9112 2.2) */
    size_t skip = 0;
    while (skip < (size_t)n && (head[skip] == '\r' || head[skip] == '\n')) skip++;
    head += skip;
    n -= (ssize_t)skip;
    const char *end = memmem(head, (size_t)n, "\n\r\n", 3);
    const char *bare = memmem(head, (size_t)n, "\n\n", 2);
    if (!end || (bare && bare < end)) end = bare;
    if (!end) {
        if (!memchr(head, '\n', (size_t)n) && n > SCREEN_URI_MAX)
            verdict(&v, 414, "URI Too Long", "the request target is longer than 8192 bytes");
        else if (n > SCREEN_HEAD_MAX)
            verdict(&v, 431, "Request Header Fields Too Large",
                    "the request's line and headers are longer than 16384 bytes");
        else if ((p->revents & (POLLRDHUP | POLLHUP | POLLERR)) || timed_out(s, p, now_us)) {
            drop(s, p); /* it stopped before its head was whole */
            return 1;
        } else {
            p->seen = (size_t)n + skip; /* more may come: looked at again next round */
            return 0;
        }
    } else {
        size_t size = (size_t)(end - head) + (end == bare ? 2 : 3);
        judge_head(head, size, s->server->params->max_body_bytes, &v);
    }
    if (v.status) {
        refuse(p->fd, v.status, v.reason, v.message);
        count_address(s, address_of(&p->address), -1);
        return 1;
    }
    /* the daemon owns the socket from here (and closes it if it refuses
     * it); its close is counted by http_screen_closed */
    if (MHD_add_connection(s->server->daemon, p->fd, (const struct sockaddr *)&p->address,
                           p->address_length) != MHD_YES)
        count_address(s, address_of(&p->address), -1);
    return 1;
}

/* Accepts what the backlog holds while there is room. */
static void accept_new(struct http_screen *s, uint64_t now_us) {
    while (s->n_pending < SCREEN_PENDING_MAX) {
        struct screen_pending *p = &s->pending[s->n_pending];
        p->address_length = sizeof(p->address);
        p->fd = accept4(s->listen_fd, (struct sockaddr *)&p->address, &p->address_length,
                        SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (p->fd < 0) return;
        p->since_us = now_us;
        p->seen = 0;
        p->revents = 0;
        if (count_address(s, address_of(&p->address), 1) >= s->per_client) {
            drop(s, p); /* one client may not hold every connection */
            continue;
        }
        s->n_pending++;
    }
}

static void *screen_main(void *arg) {
    struct http_screen *s = arg;
    struct pollfd *fds = s->fds;
    while (!atomic_load(s->server->stopping)) {
        int unfinished = 0;
        fds[0] = (struct pollfd){s->n_pending < SCREEN_PENDING_MAX ? s->listen_fd : -1, POLLIN, 0};
        /* a connection whose head is half there stays readable: it is
         * watched for its close only, and peeked again every round */
        for (int i = 0; i < s->n_pending; i++) {
            short events = s->pending[i].seen ? POLLRDHUP : (POLLIN | POLLRDHUP);
            unfinished += s->pending[i].seen > 0;
            fds[i + 1] = (struct pollfd){s->pending[i].fd, events, 0};
        }
        poll(fds, (nfds_t)s->n_pending + 1, unfinished ? 20 : 100);
        uint64_t now = clock_now_us();
        for (int i = s->n_pending - 1; i >= 0; i--) {
            s->pending[i].revents = fds[i + 1].revents;
            if (screen_one(s, &s->pending[i], now)) s->pending[i] = s->pending[--s->n_pending];
        }
        if (fds[0].revents & POLLIN) accept_new(s, now);
    }
    for (int i = 0; i < s->n_pending; i++) drop(s, &s->pending[i]);
    s->n_pending = 0;
    return NULL;
}

int http_screen_start(struct http_server *server, int listen_fd, int per_client, char *err,
                      size_t errlen) {
    struct http_screen *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory for the connection screen");
        return -1;
    }
    s->server = server;
    s->listen_fd = listen_fd;
    s->per_client = per_client;
    pthread_mutex_init(&s->lock, NULL);
    server->screen = s;
    if (pthread_create(&s->thread, NULL, screen_main, s)) {
        server->screen = NULL;
        pthread_mutex_destroy(&s->lock);
        free(s);
        snprintf(err, errlen, "cannot start the connection screen's thread");
        return -1;
    }
    return 0;
}

void http_screen_stop(struct http_server *server) {
    struct http_screen *s = server->screen;
    if (!s) return;
    atomic_store(server->stopping, 1);
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
}

void http_screen_free(struct http_server *server) {
    struct http_screen *s = server->screen;
    if (!s) return;
    server->screen = NULL;
    pthread_mutex_destroy(&s->lock);
    free(s->addresses);
    free(s);
}
