/* server.c -- the runner protocol on a unix socket.
 *
 * Two threads. The I/O thread owns the sockets: it accepts connections,
 * reads and validates frames, queues the requests and cancels it decoded
 * in the inbox, and writes out whatever the step loop produced. The step
 * loop (the thread that calls runner_server_run) owns the runner: between
 * two steps it takes the whole inbox, then runs one step; the runner's
 * reports are encoded straight into the outbox. So a request that arrives
 * while step k runs enters step k+1, and the step in flight is never
 * disturbed by I/O. A malformed frame costs only its own connection: it gets
 * an ERROR frame and is closed.
 *
 * An idle leader must keep its followers' plan wait from timing out, so it
 * sends a keep-alive plan every keep_alive_seconds (docs/protocol
 * obligation 2). */
#include "runner_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <unistd.h>

/* Something the I/O thread hands to the step loop. */
struct server_command {
    enum { COMMAND_ADD, COMMAND_CANCEL, COMMAND_DISCONNECT, COMMAND_FAULT } kind;
    uint32_t client;
    uint64_t id;                   /* CANCEL */
    uint64_t arrival_us;           /* ADD: when its frame was complete */
    struct runner_request request; /* ADD */
    struct runner_fault fault;     /* FAULT */
};

/* Frames waiting to be written to one client. */
struct server_outgoing {
    uint32_t client;
    struct runner_buffer bytes;
};

struct server_connection {
    int fd;
    uint32_t client;                      /* number the runner knows it by */
    struct runner_buffer in;              /* received, not yet parsed */
    struct runner_buffer out;             /* to send */
    int closing;                          /* 1: close once out is sent (after an ERROR) */
    int authenticated;                    /* 1: it proved the cluster key (or none is asked) */
    uint8_t challenge[RUNNER_AUTH_BYTES]; /* the challenge its HELLO carried */
    uint64_t accepted_us;                 /* when it was accepted: its proof's deadline runs */
    char peer[64];                        /* its address, for the log */
};

#define SERVER_MAX_OUTPUT (64u << 20) /* a client that lets this much pile up is dropped */

struct runner_server {
    struct runner *runner;
    struct runner_server_params params;
    struct runner_hello hello; /* what every connection is told first */
    int listen_fd;
    int wake[2]; /* pipe: step loop or stop -> I/O thread */
    pthread_t io_thread;
    int io_started;
    atomic_int stopping; /* 1: runner_server_run should return */
    /* inbox: I/O thread -> step loop */
    pthread_mutex_t inbox_lock;
    pthread_cond_t inbox_ready;
    struct server_command *inbox; /* (inbox_capacity) */
    int inbox_count, inbox_capacity;
    /* outbox: step loop -> I/O thread */
    pthread_mutex_t outbox_lock;
    struct server_outgoing *outbox; /* (outbox_capacity) per-client frames */
    int outbox_count, outbox_capacity;
    struct runner_buffer broadcast; /* heartbeats for every connection */
    /* I/O thread only */
    struct server_connection *connections; /* (max_connections) */
    int close_all;                         /* a CLOSE fault: close every connection */
    int n_connections;
    uint32_t next_client;
};

static void wake_io(struct runner_server *server) {
    char byte = 1;
    ssize_t rc = write(server->wake[1], &byte, 1);
    (void)rc; /* a full pipe already means "wake up" */
}

void runner_server_stop(struct runner_server *server) {
    server->stopping = 1;
    wake_io(server);
}

/* ---------- the step loop's side: reports into the outbox ---------- */

static struct runner_buffer *outgoing_for(struct runner_server *server, uint32_t client) {
    for (int i = 0; i < server->outbox_count; i++)
        if (server->outbox[i].client == client) return &server->outbox[i].bytes;
    if (server->outbox_count == server->outbox_capacity) {
        int capacity = server->outbox_capacity ? 2 * server->outbox_capacity : 16;
        struct server_outgoing *grown =
            realloc(server->outbox, (size_t)capacity * sizeof(*server->outbox));
        if (!grown) return NULL;
        server->outbox = grown;
        server->outbox_capacity = capacity;
    }
    struct server_outgoing *o = &server->outbox[server->outbox_count++];
    *o = (struct server_outgoing){client, {0}};
    return &o->bytes;
}

static void sink_token(void *context, uint32_t client, const struct runner_token *token) {
    struct runner_server *server = context;
    char err[160];
    pthread_mutex_lock(&server->outbox_lock);
    struct runner_buffer *b = outgoing_for(server, client);
    if (b) runner_encode_token(b, token, err, sizeof(err));
    pthread_mutex_unlock(&server->outbox_lock);
}

static void sink_finished(void *context, uint32_t client, const struct runner_finished *finished) {
    struct runner_server *server = context;
    char err[160];
    pthread_mutex_lock(&server->outbox_lock);
    struct runner_buffer *b = outgoing_for(server, client);
    if (b) runner_encode_finished(b, finished, err, sizeof(err));
    pthread_mutex_unlock(&server->outbox_lock);
}

static void sink_embedding(void *context, uint32_t client,
                           const struct runner_embedding *embedding) {
    struct runner_server *server = context;
    char err[160];
    pthread_mutex_lock(&server->outbox_lock);
    struct runner_buffer *b = outgoing_for(server, client);
    if (b) runner_encode_embedding(b, embedding, err, sizeof(err));
    pthread_mutex_unlock(&server->outbox_lock);
}

static void sink_heartbeat(void *context, const struct runner_heartbeat *heartbeat) {
    struct runner_server *server = context;
    char err[160];
    pthread_mutex_lock(&server->outbox_lock);
    runner_encode_heartbeat(&server->broadcast, heartbeat, err, sizeof(err));
    pthread_mutex_unlock(&server->outbox_lock);
}

/* ---------- the I/O thread ---------- */

static int push_command(struct runner_server *server, struct server_command *command) {
    int rc = 0;
    pthread_mutex_lock(&server->inbox_lock);
    if (server->inbox_count == server->inbox_capacity) {
        int capacity = server->inbox_capacity ? 2 * server->inbox_capacity : 64;
        struct server_command *grown =
            realloc(server->inbox, (size_t)capacity * sizeof(*server->inbox));
        if (grown) {
            server->inbox = grown;
            server->inbox_capacity = capacity;
        }
    }
    if (server->inbox_count < server->inbox_capacity) {
        /* the arrival time is taken under the lock the step loop takes its
         * boundary time under, so "arrived before step k+1 began" is exact */
        command->arrival_us = clock_now_us();
        server->inbox[server->inbox_count++] = *command;
        pthread_cond_signal(&server->inbox_ready);
    } else {
        rc = -1;
    }
    pthread_mutex_unlock(&server->inbox_lock);
    return rc;
}

/* Sends ERROR and closes the connection once it is written. */
static void refuse_connection(struct server_connection *c, const char *message) {
    char err[160];
    runner_encode_error(&c->out, RUNNER_ERROR_BAD_REQUEST, message, err, sizeof(err));
    c->closing = 1;
    c->in.length = 0;
}

/* Refuses a connection that did not prove the cluster key, and says so in
 * the log: who, and why. */
static void refuse_intruder(struct server_connection *c, const char *why) {
    log_event(LOG_LEVEL_WARN, "runner", "refused a connection from %s: %s", c->peer, why);
    refuse_connection(c, "runner: the cluster key was not proved (--cluster-key-file)");
}

/* A frame from a connection that has not proved the key yet: only its
 * AUTH, which must prove it; -1 (refused) otherwise. */
static int authenticate(struct runner_server *server, struct server_connection *c,
                        const struct runner_frame *frame) {
    char err[200];
    struct runner_auth answer, reply;
    if (frame->type != RUNNER_MSG_AUTH) {
        snprintf(err, sizeof(err), "it sent a frame of type %d before proving the cluster key",
                 (int)frame->type);
    } else if (runner_decode_auth(frame, &answer, err, sizeof(err)) == 0) {
        if (runner_auth_accept(server->params.cluster_key, c->challenge, &answer, &reply) &&
            runner_encode_auth(&c->out, &reply, err, sizeof(err)) == 0) {
            c->authenticated = 1;
            return 0;
        }
        snprintf(err, sizeof(err), "its proof does not match the cluster key");
    }
    refuse_intruder(c, err);
    return -1;
}

/* Handles one received frame; -1 (after refuse_connection) if it is bad. */
static int handle_frame(struct runner_server *server, struct server_connection *c,
                        const struct runner_frame *frame) {
    char err[200];
    struct server_command command = {.client = c->client};
    if (!c->authenticated) return authenticate(server, c, frame);
    if (frame->type == RUNNER_MSG_ADD) {
        command.kind = COMMAND_ADD;
        if (runner_decode_add(frame, &command.request, err, sizeof(err))) goto bad;
    } else if (frame->type == RUNNER_MSG_CANCEL) {
        command.kind = COMMAND_CANCEL;
        if (runner_decode_cancel(frame, &command.id, err, sizeof(err))) goto bad;
    } else if (frame->type == RUNNER_MSG_FAULT && server->params.allow_faults) {
        command.kind = COMMAND_FAULT;
        if (runner_decode_fault(frame, &command.fault, err, sizeof(err))) goto bad;
        if (command.fault.kind == RUNNER_FAULT_CLOSE) {
            server->close_all = 1; /* the I/O thread's own fault: every connection goes */
            return 0;
        }
    } else if (frame->type == RUNNER_MSG_FAULT) {
        snprintf(err, sizeof(err), "runner: fault injection is off (--allow-faults)");
        goto bad;
    } else {
        snprintf(err, sizeof(err), "runner protocol: a client may not send message type %d",
                 (int)frame->type);
        goto bad;
    }
    if (push_command(server, &command) == 0) return 0;
    runner_request_free(&command.request);
    snprintf(err, sizeof(err), "runner: out of memory for the request queue");
bad:
    refuse_connection(c, err);
    return -1;
}

static void read_frames(struct runner_server *server, struct server_connection *c) {
    char err[200];
    struct runner_frame frame;
    size_t used = 0;
    size_t max = server->params.max_payload;
    for (;;) {
        int rc = runner_frame_next(c->in.data + used, c->in.length - used, max, &frame, err,
                                   sizeof(err));
        if (rc == 0) break;
        if (rc < 0) {
            refuse_connection(c, err);
            return;
        }
        used += frame.frame_length;
        if (handle_frame(server, c, &frame)) return;
    }
    runner_buffer_consume(&c->in, used);
}

static void close_connection(struct runner_server *server, int index) {
    struct server_connection *c = &server->connections[index];
    struct server_command command = {.kind = COMMAND_DISCONNECT, .client = c->client};
    close(c->fd);
    runner_buffer_free(&c->in);
    runner_buffer_free(&c->out);
    push_command(server, &command);
    server->connections[index] = server->connections[--server->n_connections];
}

/* "ADDRESS:PORT" of a TCP peer, or "the unix socket". */
static void describe_peer(const struct sockaddr_storage *address, char *out, size_t size) {
    char host[INET6_ADDRSTRLEN] = "";
    if (address->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)address;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        snprintf(out, size, "%s:%u", host, (unsigned)ntohs(a->sin_port));
    } else if (address->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)address;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        snprintf(out, size, "[%s]:%u", host, (unsigned)ntohs(a->sin6_port));
    } else {
        snprintf(out, size, "the unix socket");
    }
}

static void accept_connection(struct runner_server *server) {
    char err[160];
    struct sockaddr_storage address;
    socklen_t address_length = sizeof(address);
    memset(&address, 0, sizeof(address));
    int fd = accept4(server->listen_fd, (struct sockaddr *)&address, &address_length,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    runner_tune_connection(fd);
    struct server_connection c = {.fd = fd,
                                  .client = server->next_client++,
                                  .authenticated = server->params.cluster_key == NULL,
                                  .accepted_us = clock_now_us()};
    describe_peer(&address, c.peer, sizeof(c.peer));
    if (server->n_connections == server->params.max_connections) {
        runner_encode_error(&c.out, RUNNER_ERROR_OVER_CAPACITY, "runner: too many connections", err,
                            sizeof(err));
        ssize_t rc = send(fd, c.out.data, c.out.length, MSG_NOSIGNAL);
        (void)rc; /* best effort: the connection is closed either way */
        runner_buffer_free(&c.out);
        close(fd);
        return;
    }
    struct runner_hello hello = server->hello;
    if (!c.authenticated) {
        if (runner_auth_random(c.challenge, err, sizeof(err))) {
            log_event(LOG_LEVEL_ERROR, "runner", "%s", err);
            close(fd);
            return;
        }
        hello.has_challenge = 1;
        memcpy(hello.challenge, c.challenge, RUNNER_AUTH_BYTES);
    }
    runner_encode_hello(&c.out, &hello, err, sizeof(err));
    server->connections[server->n_connections++] = c;
}

/* Refuses the connections that did not prove the key in time; 1 if one
 * is still to prove it (the I/O loop then wakes to check again). */
static int expire_unproved(struct runner_server *server) {
    int pending = 0;
    uint64_t now = clock_now_us();
    for (int i = 0; i < server->n_connections; i++) {
        struct server_connection *c = &server->connections[i];
        if (c->authenticated || c->closing) continue;
        if ((double)(now - c->accepted_us) * 1e-6 < RUNNER_AUTH_SECONDS) {
            pending = 1;
            continue;
        }
        char why[96];
        snprintf(why, sizeof(why), "it did not prove the cluster key within %.0f s",
                 RUNNER_AUTH_SECONDS);
        refuse_intruder(c, why);
    }
    return pending;
}

/* Moves the outbox into the connections' output buffers. */
static void collect_outbox(struct runner_server *server) {
    pthread_mutex_lock(&server->outbox_lock);
    for (int i = 0; i < server->n_connections; i++) {
        struct server_connection *c = &server->connections[i];
        if (c->closing || !c->authenticated) continue;
        runner_buffer_append(&c->out, server->broadcast.data, server->broadcast.length);
        for (int j = 0; j < server->outbox_count; j++)
            if (server->outbox[j].client == c->client)
                runner_buffer_append(&c->out, server->outbox[j].bytes.data,
                                     server->outbox[j].bytes.length);
    }
    for (int j = 0; j < server->outbox_count; j++) runner_buffer_free(&server->outbox[j].bytes);
    server->outbox_count = 0;
    server->broadcast.length = 0;
    pthread_mutex_unlock(&server->outbox_lock);
}

/* Reads what arrived; 0 if the connection is still open. */
static int receive(struct runner_server *server, struct server_connection *c) {
    uint8_t chunk[65536];
    ssize_t n = recv(c->fd, chunk, sizeof(chunk), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return -1;
    if (n < 0 || c->closing) return 0;
    if (runner_buffer_append(&c->in, chunk, (size_t)n)) {
        refuse_connection(c, "runner: out of memory for received bytes");
        return 0;
    }
    read_frames(server, c);
    return 0;
}

/* Writes what is pending; 0 if the connection is still open. */
static int transmit(struct server_connection *c) {
    if (c->out.length > SERVER_MAX_OUTPUT) return -1; /* not reading: give up on it */
    while (c->out.length) {
        ssize_t n = send(c->fd, c->out.data, c->out.length, MSG_NOSIGNAL);
        if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
        runner_buffer_consume(&c->out, (size_t)n);
    }
    return c->closing ? -1 : 0;
}

static void io_loop(struct runner_server *server) {
    struct pollfd *fds = calloc((size_t)server->params.max_connections + 2, sizeof(*fds));
    if (!fds) return;
    int unproved = 0;
    while (!server->stopping) {
        int n = server->n_connections;
        fds[0] = (struct pollfd){server->listen_fd, POLLIN, 0};
        fds[1] = (struct pollfd){server->wake[0], POLLIN, 0};
        for (int i = 0; i < n; i++) {
            const struct server_connection *c = &server->connections[i];
            fds[i + 2] = (struct pollfd){c->fd, (short)(POLLIN | (c->out.length ? POLLOUT : 0)), 0};
        }
        /* a connection still to prove the key has a deadline to check */
        if (poll(fds, (nfds_t)n + 2, unproved ? 200 : -1) < 0 && errno != EINTR) break;
        if (fds[1].revents) {
            char drain[64];
            while (read(server->wake[0], drain, sizeof(drain)) > 0) continue;
        }
        collect_outbox(server);
        /* connections in reverse: closing one moves the last into its place */
        for (int i = n - 1; i >= 0; i--) {
            struct server_connection *c = &server->connections[i];
            int gone = 0;
            if (fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) gone = receive(server, c);
            if (!gone) gone = transmit(c);
            if (gone) close_connection(server, i);
        }
        while (server->close_all && server->n_connections > 0)
            close_connection(server, server->n_connections - 1);
        server->close_all = 0;
        if (fds[0].revents & POLLIN) accept_connection(server);
        unproved = expire_unproved(server);
    }
    free(fds);
}

static void *io_main(void *arg) {
    struct runner_server *server = arg;
    io_loop(server);
    server->stopping = 1;
    /* runner_server_stop runs in a signal handler, where the step loop's
     * condition variable cannot be signalled: wake it from here */
    pthread_mutex_lock(&server->inbox_lock);
    pthread_cond_broadcast(&server->inbox_ready);
    pthread_mutex_unlock(&server->inbox_lock);
    return NULL;
}

/* ---------- setup ---------- */

int runner_server_create(struct runner_server **out, struct runner *runner,
                         const struct runner_server_params *params, char *err, size_t errlen) {
    struct runner_server *s = calloc(1, sizeof(*s));
    *out = NULL;
    if (!s) {
        snprintf(err, errlen, "runner: out of memory");
        return -1;
    }
    s->runner = runner;
    s->params = *params;
    if (!s->params.max_payload) s->params.max_payload = RUNNER_FRAME_MAX;
    if (!s->params.max_connections) s->params.max_connections = 16;
    if (s->params.keep_alive_seconds <= 0) s->params.keep_alive_seconds = 1.0;
    s->next_client = 1;
    s->listen_fd = -1;
    s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->inbox_lock, NULL);
    pthread_cond_init(&s->inbox_ready, NULL);
    pthread_mutex_init(&s->outbox_lock, NULL);
    runner_describe(runner, &s->hello);
    snprintf(s->hello.model, sizeof(s->hello.model), "%s",
             params->model_name ? params->model_name : "");
    s->connections = calloc((size_t)s->params.max_connections, sizeof(*s->connections));
    if (!s->connections || pipe2(s->wake, O_NONBLOCK | O_CLOEXEC)) {
        snprintf(err, errlen, "runner: cannot set up the server: %s", strerror(errno));
        runner_server_free(s);
        return -1;
    }
    s->listen_fd = runner_listen(params->socket_path, err, errlen);
    if (s->listen_fd < 0) {
        runner_server_free(s);
        return -1;
    }
    runner->sink =
        (struct runner_sink){sink_token, sink_finished, sink_heartbeat, s, sink_embedding};
    *out = s;
    return 0;
}

void runner_server_free(struct runner_server *server) {
    if (!server) return;
    if (server->io_started) {
        runner_server_stop(server);
        pthread_join(server->io_thread, NULL);
    }
    for (int i = 0; server->connections && i < server->n_connections; i++) {
        close(server->connections[i].fd);
        runner_buffer_free(&server->connections[i].in);
        runner_buffer_free(&server->connections[i].out);
    }
    for (int i = 0; i < server->inbox_count; i++) runner_request_free(&server->inbox[i].request);
    for (int i = 0; i < server->outbox_count; i++) runner_buffer_free(&server->outbox[i].bytes);
    if (server->listen_fd >= 0) {
        close(server->listen_fd);
        runner_address_release(server->params.socket_path);
    }
    for (int i = 0; i < 2; i++)
        if (server->wake[i] >= 0) close(server->wake[i]);
    runner_buffer_free(&server->broadcast);
    free(server->inbox);
    free(server->outbox);
    free(server->connections);
    pthread_mutex_destroy(&server->inbox_lock);
    pthread_cond_destroy(&server->inbox_ready);
    pthread_mutex_destroy(&server->outbox_lock);
    free(server);
}

/* ---------- the step loop ---------- */

/* Applies the commands taken from the inbox. */
static void apply_commands(struct runner_server *server, struct server_command *commands, int n) {
    for (int i = 0; i < n; i++) {
        struct server_command *c = &commands[i];
        if (c->kind == COMMAND_ADD)
            runner_submit(server->runner, c->client, &c->request, c->arrival_us);
        else if (c->kind == COMMAND_CANCEL)
            runner_cancel(server->runner, c->client, c->id);
        else if (c->kind == COMMAND_FAULT)
            runner_inject_fault(server->runner, &c->fault);
        else
            runner_cancel_client(server->runner, c->client);
    }
}

/* Waits until there is something to do, sending keep-alive plans while
 * idle; takes the inbox and the step's start time under one lock. Returns
 * the number of commands moved to *taken, or -1 if a keep-alive failed. */
static int wait_for_work(struct runner_server *server, struct server_command **taken,
                         int *taken_capacity, uint64_t *start_us, char *err, size_t errlen) {
    pthread_mutex_lock(&server->inbox_lock);
    while (!server->stopping && server->inbox_count == 0 && !runner_has_work(server->runner)) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        double t =
            (double)deadline.tv_sec + deadline.tv_nsec * 1e-9 + server->params.keep_alive_seconds;
        deadline.tv_sec = (time_t)t;
        deadline.tv_nsec = (long)((t - (double)deadline.tv_sec) * 1e9);
        if (pthread_cond_timedwait(&server->inbox_ready, &server->inbox_lock, &deadline) ==
                ETIMEDOUT &&
            server->inbox_count == 0) {
            pthread_mutex_unlock(&server->inbox_lock);
            if (engine_keep_alive(server->runner->engine, err, errlen)) return -1;
            pthread_mutex_lock(&server->inbox_lock);
        }
    }
    int n = server->inbox_count;
    if (n > *taken_capacity) {
        struct server_command *grown = realloc(*taken, (size_t)n * sizeof(**taken));
        if (!grown)
            n = *taken_capacity; /* take what fits; the rest waits a step */
        else {
            *taken = grown;
            *taken_capacity = n;
        }
    }
    /* an inbox nothing ever entered is NULL: no pointer arithmetic on it */
    if (n > 0) {
        memcpy(*taken, server->inbox, (size_t)n * sizeof(**taken));
        memmove(server->inbox, server->inbox + n,
                (size_t)(server->inbox_count - n) * sizeof(*server->inbox));
    }
    server->inbox_count -= n;
    *start_us = clock_now_us();
    pthread_mutex_unlock(&server->inbox_lock);
    return n;
}

int runner_server_run(struct runner_server *server, char *err, size_t errlen) {
    struct server_command *taken = NULL;
    int taken_capacity = 0, rc = 0;
    if (pthread_create(&server->io_thread, NULL, io_main, server)) {
        snprintf(err, errlen, "runner: cannot start the I/O thread");
        return -1;
    }
    server->io_started = 1;
    while (!server->stopping) {
        uint64_t start_us;
        int n = wait_for_work(server, &taken, &taken_capacity, &start_us, err, errlen);
        if (n < 0) {
            rc = -1;
            break;
        }
        apply_commands(server, taken, n);
        int stepped = runner_step(server->runner, start_us, err, errlen);
        if (stepped < 0) {
            rc = -1;
            break;
        }
        if (stepped == 0 && n > 0) runner_report_state(server->runner);
        wake_io(server);
    }
    free(taken);
    return rc;
}
