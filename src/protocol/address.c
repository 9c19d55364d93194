/* address.c -- where a runner serves the runner protocol: a unix socket
 * path on the gateway's machine, or "tcp:HOST:PORT" when its leader runs on
 * another host of the cluster. One parser for both ends: the runner listens
 * with runner_listen, the gateway connects with runner_connect.
 *
 * The TCP form carries the same frames, unauthenticated, like Open MPI's
 * own traffic between ranks: it belongs on the cluster's private network.
 * Small frames (one token each) go out at once (TCP_NODELAY). */
#include "protocol/protocol.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Splits "tcp:HOST:PORT" into host and port; 1 if address has that form,
 * 0 if it is a path, -1 (with err) if it is malformed. */
static int split_tcp(const char *address, char *host, size_t host_size, char *port,
                     size_t port_size, char *err, size_t errlen) {
    if (strncmp(address, "tcp:", 4) != 0) return 0;
    const char *colon = strrchr(address + 4, ':');
    size_t n = colon ? (size_t)(colon - address - 4) : 0;
    if (!colon || n == 0 || n >= host_size || !colon[1] || strlen(colon + 1) >= port_size ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1)) {
        snprintf(err, errlen, "runner: address %s is not tcp:HOST:PORT", address);
        return -1;
    }
    memcpy(host, address + 4, n);
    host[n] = '\0';
    snprintf(port, port_size, "%s", colon + 1);
    return 1;
}

static int unix_address(const char *path, struct sockaddr_un *a, char *err, size_t errlen) {
    *a = (struct sockaddr_un){.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(a->sun_path)) {
        snprintf(err, errlen, "runner: socket path %s is longer than %zu bytes", path,
                 sizeof(a->sun_path) - 1);
        return -1;
    }
    memcpy(a->sun_path, path, strlen(path) + 1);
    return 0;
}

/* The first address HOST:PORT resolves to, as a socket of its family
 * (non-blocking); -1 with err. */
static int tcp_socket(const char *host, const char *port, int passive, struct sockaddr_storage *a,
                      socklen_t *length, char *err, size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *found = NULL;
    if (passive) hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, port, &hints, &found);
    if (rc != 0 || !found) {
        snprintf(err, errlen, "runner: cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(a, found->ai_addr, found->ai_addrlen);
    *length = found->ai_addrlen;
    int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    freeaddrinfo(found);
    if (fd < 0) snprintf(err, errlen, "runner: cannot make a socket: %s", strerror(errno));
    return fd;
}

int runner_listen(const char *address, char *err, size_t errlen) {
    char host[256], port[16];
    int tcp = split_tcp(address, host, sizeof(host), port, sizeof(port), err, errlen), fd;
    if (tcp < 0) return -1;
    if (tcp) {
        struct sockaddr_storage a;
        socklen_t length;
        int on = 1;
        fd = tcp_socket(host, port, 1, &a, &length, err, errlen);
        if (fd < 0) return -1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
        if (bind(fd, (struct sockaddr *)&a, length) == 0 && listen(fd, 64) == 0) return fd;
    } else {
        struct sockaddr_un a;
        struct stat st;
        if (unix_address(address, &a, err, errlen)) return -1;
        if (lstat(address, &st) == 0) {
            if (!S_ISSOCK(st.st_mode)) {
                snprintf(err, errlen, "runner: %s exists and is not a socket", address);
                return -1;
            }
            unlink(address); /* a stale socket of an earlier runner */
        }
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 64) == 0)
            return fd;
    }
    snprintf(err, errlen, "runner: cannot listen on %s: %s", address, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
}

void runner_address_release(const char *address) {
    if (strncmp(address, "tcp:", 4) != 0) unlink(address);
}

void runner_tune_connection(int fd) {
    int on = 1;
    /* fails harmlessly on a unix socket */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

int runner_connect(const char *address, double wait_seconds, char *err, size_t errlen) {
    char host[256], port[16];
    int tcp = split_tcp(address, host, sizeof(host), port, sizeof(port), err, errlen), fd;
    struct sockaddr_storage a;
    socklen_t length = sizeof(struct sockaddr_un);
    if (tcp < 0) return -1;
    if (tcp) {
        fd = tcp_socket(host, port, 0, &a, &length, err, errlen);
    } else {
        if (unix_address(address, (struct sockaddr_un *)&a, err, errlen)) return -1;
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    }
    if (fd < 0) return -1;
    int rc = connect(fd, (struct sockaddr *)&a, length), error = rc == 0 ? 0 : errno;
    if (rc != 0 && errno == EINPROGRESS) {
        /* a TCP connection: wait a little for its handshake */
        struct pollfd p = {fd, POLLOUT, 0};
        socklen_t size = sizeof(error);
        error = poll(&p, 1, (int)(wait_seconds * 1000)) == 1 &&
                        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0
                    ? error
                    : ETIMEDOUT;
    }
    if (error == 0) {
        runner_tune_connection(fd);
        return fd;
    }
    snprintf(err, errlen, "runner: cannot connect to %s: %s", address, strerror(error));
    close(fd);
    return -1;
}
