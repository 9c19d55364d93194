/* gateway_bench.c -- load generator for `lockstep serve` (issue 5's gateway
 * figures): requests per minute, generated tokens per second, time to first
 * token and inter-token latency with 1, 8, 32, ... streaming clients.
 *
 * usage: gateway_bench --port N [--clients 1,8,32] [--seconds 30] ... (--help)
 *
 * For each concurrency level, that many threads each play one client: a raw
 * HTTP/1.1 connection (kept alive between requests) that POSTs a streaming
 * /v1/completions request (temperature 0.8, a seed no other request of the
 * run uses, stream_options.include_usage so the last chunk says how many
 * tokens were generated), reads the server-sent events to "data: [DONE]",
 * and starts the next. There is no way to ignore end-of-sequence, so a
 * request counts the tokens it actually got.
 *
 * After --seconds no client starts another request. The ones in flight are
 * read to their end, so the next level starts on an idle server, but only
 * what arrived before the deadline counts:
 *   requests  those whose [DONE] arrived before it;
 *   tokens    usage.completion_tokens of those, plus the token chunks that
 *             requests still in flight had received by then;
 *   TTFT      request written -> first token chunk;
 *   ITL       between consecutive token chunks of one stream.
 * The gateway sends a chunk per token, except that a token ending inside a
 * UTF-8 character is held back and goes out with the next one; the note
 * under the table says how often that happened (such a gap spans 2 steps).
 * Percentiles are nearest-rank over every sample of the level. Exit status
 * 1 when any request failed (the table is printed all the same). */
#include "loadgen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_LEVELS  16
#define BENCH_MAX_CLIENTS 1024
#define BENCH_BUFFER      16384     /* bytes received from the socket at once */
#define BENCH_LINE_MAX    (1 << 20) /* longest SSE line accepted */
#define BENCH_ERROR_MAX   256       /* bytes of an error message */

static const char bench_default_prompt[] =
    "the sun rose over the hills and the river ran down to the sea in the morning";

struct bench_options {
    const char *host;             /* server address (IPv4 dotted quad, or localhost) */
    int port;                     /* server port */
    const char *model;            /* "model" of every request */
    const char *prompt;           /* prompt text */
    const char *api_key;          /* sent as Authorization: Bearer, or NULL */
    int levels[BENCH_MAX_LEVELS]; /* (n_levels) concurrent clients of each level */
    int n_levels;
    double seconds;      /* measured time per level */
    int max_tokens;      /* max_tokens of every request */
    unsigned long seed;  /* seed of the first request; each next one adds 1 */
    double timeout;      /* seconds a client waits for a byte before giving up */
    char *prompt_json;   /* prompt escaped for a JSON string (owned) */
    char *model_json;    /* model escaped for a JSON string (owned) */
    struct in_addr addr; /* host, parsed */
};

/* ---------------------------------------------------------- connection */

/* One keep-alive connection to the gateway and the bytes received on it. */
struct bench_connection {
    int fd;                  /* socket, -1 while closed */
    double timeout;          /* seconds to wait for a byte */
    char data[BENCH_BUFFER]; /* received bytes; [start, end) not consumed yet */
    size_t start, end;
};

static void connection_close(struct bench_connection *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->start = c->end = 0;
}

static int connection_open(struct bench_connection *c, const struct bench_options *o, char *err,
                           size_t errlen) {
    struct sockaddr_in address = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)o->port), .sin_addr = o->addr};
    int one = 1;
    struct timeval send_timeout = {(time_t)o->timeout, 0};
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    /* small requests and small SSE chunks: do not let Nagle delay them */
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
    if (connect(c->fd, (const struct sockaddr *)&address, sizeof(address)) != 0) {
        snprintf(err, errlen, "connect to %s:%d: %s", o->host, o->port, strerror(errno));
        connection_close(c);
        return -1;
    }
    c->start = c->end = 0;
    return 0;
}

static int connection_send(struct bench_connection *c, const char *bytes, size_t n, char *err,
                           size_t errlen) {
    while (n > 0) {
        ssize_t sent = send(c->fd, bytes, n, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent <= 0) {
            snprintf(err, errlen, "send: %s", sent < 0 ? strerror(errno) : "nothing sent");
            return -1;
        }
        bytes += sent;
        n -= (size_t)sent;
    }
    return 0;
}

/* Receives more bytes: their count, 0 when the server closed, -1 on an
 * error or when nothing came within the timeout. */
static long connection_fill(struct bench_connection *c, char *err, size_t errlen) {
    if (c->start == c->end) {
        c->start = c->end = 0;
    } else if (c->end == sizeof(c->data)) {
        memmove(c->data, c->data + c->start, c->end - c->start);
        c->end -= c->start;
        c->start = 0;
    }
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int ready;
    do ready = poll(&p, 1, (int)(c->timeout * 1000));
    while (ready < 0 && errno == EINTR);
    if (ready <= 0) {
        snprintf(err, errlen, "%s",
                 ready == 0 ? "no byte from the server within the timeout" : strerror(errno));
        return -1;
    }
    ssize_t n = recv(c->fd, c->data + c->end, sizeof(c->data) - c->end, 0);
    if (n < 0) {
        snprintf(err, errlen, "recv: %s", strerror(errno));
        return -1;
    }
    c->end += (size_t)n;
    return (long)n;
}

/* Reads a header or chunk-size line into line without its CRLF. */
static int connection_line(struct bench_connection *c, char *line, size_t size, char *err,
                           size_t errlen) {
    size_t used = 0;
    for (;;) {
        while (c->start < c->end) {
            char ch = c->data[c->start++];
            if (ch == '\n') {
                if (used > 0 && line[used - 1] == '\r') used--;
                line[used] = '\0';
                return 0;
            }
            if (used + 1 >= size) {
                snprintf(err, errlen, "an HTTP header line is longer than %zu bytes", size - 1);
                return -1;
            }
            line[used++] = ch;
        }
        long n = connection_fill(c, err, errlen);
        if (n <= 0) {
            if (n == 0) snprintf(err, errlen, "the server closed the connection inside a line");
            return -1;
        }
    }
}

/* ------------------------------------------------------------ response */

/* What the status line and headers of a response say. */
struct bench_head {
    int status;       /* HTTP status code */
    int chunked;      /* 1: Transfer-Encoding: chunked */
    long long length; /* Content-Length, or -1 */
    int close;        /* 1: the server closes the connection after it */
};

/* Where the body reader is. */
struct bench_body {
    int chunked;         /* 1: chunked transfer coding */
    long long remaining; /* bytes left in the current chunk (chunked) or the body; -1: to EOF */
    int finished;        /* 1: the body's end was read */
};

static int read_head(struct bench_connection *c, struct bench_head *h, char *err, size_t errlen) {
    char line[1024];
    int minor;
    *h = (struct bench_head){.length = -1};
    if (connection_line(c, line, sizeof(line), err, errlen)) return -1;
    if (sscanf(line, "HTTP/1.%d %d", &minor, &h->status) != 2) {
        snprintf(err, errlen, "the status line '%.80s' is not HTTP/1.x", line);
        return -1;
    }
    h->close = minor == 0;
    for (;;) {
        if (connection_line(c, line, sizeof(line), err, errlen)) return -1;
        if (line[0] == '\0') return 0;
        if (!strncasecmp(line, "Transfer-Encoding:", 18))
            h->chunked = strcasestr(line + 18, "chunked") != NULL;
        else if (!strncasecmp(line, "Content-Length:", 15))
            h->length = strtoll(line + 15, NULL, 10);
        else if (!strncasecmp(line, "Connection:", 11))
            h->close = strcasestr(line + 11, "close") != NULL;
    }
}

/* Starts a chunk of a chunked body; 1 at the body's (empty) last chunk. */
static int start_chunk(struct bench_connection *c, struct bench_body *b, char *err, size_t errlen) {
    char line[256], *end;
    if (connection_line(c, line, sizeof(line), err, errlen)) return -1;
    long long size = strtoll(line, &end, 16);
    if (end == line || size < 0 || (*end != '\0' && *end != ';' && *end != ' ')) {
        snprintf(err, errlen, "the chunk size line '%.80s' is not hexadecimal", line);
        return -1;
    }
    if (size > 0) {
        b->remaining = size;
        return 0;
    }
    do { /* trailer fields up to an empty line */
        if (connection_line(c, line, sizeof(line), err, errlen)) return -1;
    } while (line[0] != '\0');
    b->finished = 1;
    return 1;
}

/* Reads up to max bytes of the body into out: their count, 0 at its end,
 * -1 on an error. */
static long read_body(struct bench_connection *c, struct bench_body *b, char *out, size_t max,
                      char *err, size_t errlen) {
    if (b->finished) return 0;
    if (b->chunked && b->remaining == 0) {
        int last = start_chunk(c, b, err, errlen);
        if (last) return last < 0 ? -1 : 0;
    }
    if (!b->chunked && b->remaining == 0) {
        b->finished = 1;
        return 0;
    }
    if (c->start == c->end) {
        long n = connection_fill(c, err, errlen);
        if (n < 0) return -1;
        if (n == 0 && !b->chunked && b->remaining < 0) {
            b->finished = 1; /* a body delimited by the connection's end */
            return 0;
        }
        if (n == 0) {
            snprintf(err, errlen, "the server closed the connection inside a response");
            return -1;
        }
    }
    size_t n = c->end - c->start;
    if (n > max) n = max;
    if (b->remaining >= 0 && (long long)n > b->remaining) n = (size_t)b->remaining;
    memcpy(out, c->data + c->start, n);
    c->start += n;
    if (b->remaining > 0) b->remaining -= (long long)n;
    if (b->chunked && b->remaining == 0) {
        char crlf[8];
        if (connection_line(c, crlf, sizeof(crlf), err, errlen)) return -1;
        if (crlf[0] != '\0') {
            snprintf(err, errlen, "chunk data is not followed by CRLF");
            return -1;
        }
    }
    return (long)n;
}

/* ------------------------------------------------------------- streams */

/* One streamed request as the client sees it. */
struct bench_stream {
    double deadline;                    /* samples and tokens after it do not count */
    double sent;                        /* when the request was written */
    double last_chunk;                  /* when the previous token chunk arrived */
    int chunks;                         /* token chunks received */
    int chunks_counted;                 /* of them, before the deadline */
    int usage_tokens;                   /* usage.completion_tokens, -1 until the usage chunk */
    int done;                           /* 1: "data: [DONE]" arrived */
    double done_at;                     /* when it did */
    struct loadgen_samples *ttft, *itl; /* where samples before the deadline go */
    char error[BENCH_ERROR_MAX];        /* an error event's body, if one came */
    char *line;                         /* (capacity) the SSE line being received */
    size_t n_line, line_capacity;
};

/* Handles the payload of one "data:" line. */
static int stream_data(struct bench_stream *s, const char *payload, double now) {
    if (!strcmp(payload, "[DONE]")) {
        s->done = 1;
        s->done_at = now;
        return 0;
    }
    if (!strncmp(payload, "{\"error\"", 8)) {
        snprintf(s->error, sizeof(s->error), "error event: %.200s", payload);
        return 0;
    }
    /* quotes inside JSON strings are escaped, so these keys cannot come from the text */
    const char *usage = strstr(payload, "\"completion_tokens\":");
    if (usage) s->usage_tokens = (int)strtol(usage + 20, NULL, 10);
    if (!strstr(payload, "\"choices\":[{") || !strstr(payload, "\"finish_reason\":null"))
        return 0; /* not a token chunk: the usage chunk, or the one with finish_reason */
    int counted = now <= s->deadline, rc = 0;
    if (counted && s->chunks == 0) rc = loadgen_samples_push(s->ttft, now - s->sent);
    if (counted && s->chunks > 0) rc = loadgen_samples_push(s->itl, now - s->last_chunk);
    s->chunks++;
    s->chunks_counted += counted;
    s->last_chunk = now;
    return rc;
}

/* Splits body bytes into SSE lines; handles data lines, skips comments
 * (keep-alives) and the blank lines between events. */
static int stream_feed(struct bench_stream *s, const char *bytes, size_t n, char *err,
                       size_t errlen) {
    double now = loadgen_now();
    for (size_t i = 0; i < n; i++) {
        if (bytes[i] != '\n') {
            if (s->n_line + 1 >= s->line_capacity) {
                size_t capacity = s->line_capacity ? 2 * s->line_capacity : 4096;
                char *grown = capacity <= BENCH_LINE_MAX ? realloc(s->line, capacity) : NULL;
                if (!grown) {
                    snprintf(err, errlen, "an SSE line is longer than %d bytes", BENCH_LINE_MAX);
                    return -1;
                }
                s->line = grown;
                s->line_capacity = capacity;
            }
            s->line[s->n_line++] = bytes[i];
            continue;
        }
        size_t length = s->n_line;
        s->n_line = 0;
        if (length > 0 && s->line[length - 1] == '\r') length--;
        if (length < 5 || memcmp(s->line, "data:", 5) != 0) continue;
        s->line[length] = '\0';
        size_t start = length > 5 && s->line[5] == ' ' ? 6 : 5;
        if (stream_data(s, s->line + start, now)) {
            snprintf(err, errlen, "out of memory for latency samples");
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------- clients */

/* What every client of a run shares. */
struct bench_run {
    const struct bench_options *options;
    atomic_ulong next_seed; /* seed of the next request */
};

/* One client thread and what it measured during one level. */
struct bench_client {
    struct bench_run *run;
    double deadline; /* no request starts after it */
    struct bench_connection connection;
    char *request; /* (request_capacity) the HTTP request being sent */
    size_t request_capacity;
    struct loadgen_samples ttft, itl;  /* seconds, observed before the deadline */
    long completed;                    /* requests whose [DONE] came before the deadline */
    long tokens;                       /* generated tokens received before the deadline */
    long chunks, chunk_tokens;         /* completed requests: token chunks, tokens in them */
    long errors;                       /* requests that failed */
    char first_error[BENCH_ERROR_MAX]; /* what the first failure said */
    pthread_t thread;
};

/* Writes the HTTP request for one completion into client->request; its
 * length, or 0 if memory runs out. */
static size_t format_request(struct bench_client *client, unsigned long seed) {
    const struct bench_options *o = client->run->options;
    char body[256]; /* the JSON body after the prompt */
    size_t prompt_length = strlen(o->prompt_json), model_length = strlen(o->model_json);
    size_t need = prompt_length + model_length + strlen(o->host) +
                  (o->api_key ? strlen(o->api_key) : 0) + sizeof(body) + 512;
    if (need > client->request_capacity) {
        char *grown = realloc(client->request, need);
        if (!grown) return 0;
        client->request = grown;
        client->request_capacity = need;
    }
    int body_rest = snprintf(body, sizeof(body),
                             "\",\"max_tokens\":%d,\"temperature\":0.8,\"seed\":%lu,"
                             "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
                             o->max_tokens, seed);
    size_t body_length =
        strlen("{\"model\":\"\",\"prompt\":\"") + model_length + prompt_length + (size_t)body_rest;
    int n = snprintf(client->request, client->request_capacity,
                     "POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\n"
                     "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                     "%s%s%sContent-Length: %zu\r\n\r\n"
                     "{\"model\":\"%s\",\"prompt\":\"%s%s",
                     o->host, o->port, o->api_key ? "Authorization: Bearer " : "",
                     o->api_key ? o->api_key : "", o->api_key ? "\r\n" : "", body_length,
                     o->model_json, o->prompt_json, body);
    return n > 0 && (size_t)n < client->request_capacity ? (size_t)n : 0;
}

/* Sends one request and reads its answer into s; -1 with err on failure. */
static int exchange(struct bench_client *client, struct bench_stream *s, unsigned long seed,
                    char *err, size_t errlen) {
    struct bench_connection *c = &client->connection;
    struct bench_head head;
    char bytes[BENCH_BUFFER];
    long n;
    size_t length = format_request(client, seed);
    if (length == 0) {
        snprintf(err, errlen, "out of memory for the request");
        return -1;
    }
    if (c->fd < 0 && connection_open(c, client->run->options, err, errlen)) return -1;
    s->sent = loadgen_now();
    if (connection_send(c, client->request, length, err, errlen) ||
        read_head(c, &head, err, errlen))
        return -1;
    struct bench_body body = {.chunked = head.chunked, .remaining = head.chunked ? 0 : head.length};
    if (head.status != 200) {
        n = read_body(c, &body, bytes, sizeof(bytes) - 1, err, errlen);
        bytes[n > 0 ? n : 0] = '\0';
        snprintf(err, errlen, "HTTP %d: %.200s", head.status, bytes);
        return -1;
    }
    /* read to the body's end, past [DONE], so the connection can carry the next request */
    while ((n = read_body(c, &body, bytes, sizeof(bytes), err, errlen)) > 0)
        if (stream_feed(s, bytes, (size_t)n, err, errlen)) return -1;
    if (n < 0) return -1;
    if (head.close || body.remaining < 0) connection_close(c); /* < 0: it ended with EOF */
    if (s->error[0]) {
        snprintf(err, errlen, "%s", s->error);
        return -1;
    }
    if (!s->done) {
        snprintf(err, errlen, "the stream ended without data: [DONE]");
        return -1;
    }
    return 0;
}

/* One request: sends it, reads the stream, adds what it measured. */
static void client_request(struct bench_client *client) {
    char err[BENCH_ERROR_MAX] = "";
    unsigned long seed = atomic_fetch_add(&client->run->next_seed, 1);
    struct bench_stream s = {.deadline = client->deadline,
                             .usage_tokens = -1,
                             .ttft = &client->ttft,
                             .itl = &client->itl};
    int failed = exchange(client, &s, seed, err, sizeof(err));
    free(s.line);
    if (failed) {
        if (client->errors++ == 0)
            snprintf(client->first_error, sizeof(client->first_error), "%s", err);
        connection_close(&client->connection);
        client->tokens += s.chunks_counted;
        struct timespec backoff = {0, 50000000}; /* 50 ms: do not spin when the server is gone */
        nanosleep(&backoff, NULL);
        return;
    }
    if (s.done_at > client->deadline) { /* still running at the deadline */
        client->tokens += s.chunks_counted;
        return;
    }
    int tokens = s.usage_tokens >= 0 ? s.usage_tokens : s.chunks;
    client->completed++;
    client->tokens += tokens;
    client->chunks += s.chunks;
    client->chunk_tokens += tokens;
}

static void *client_main(void *arg) {
    struct bench_client *client = arg;
    while (loadgen_now() < client->deadline) client_request(client);
    connection_close(&client->connection);
    return NULL;
}

/* -------------------------------------------------------------- levels */

/* What one concurrency level measured. */
struct bench_result {
    int clients;                       /* concurrent clients */
    double seconds;                    /* measured window */
    long completed, tokens, errors;    /* sums over the clients */
    long chunks, chunk_tokens;         /* completed requests: token chunks, tokens */
    struct loadgen_samples ttft, itl;  /* every client's samples */
    char first_error[BENCH_ERROR_MAX]; /* the first failure a client reported */
};

static int run_level(struct bench_run *run, int n_clients, struct bench_result *out, char *err,
                     size_t errlen) {
    struct bench_client *clients = calloc((size_t)n_clients, sizeof(*clients));
    int started = 0, rc = 0;
    *out = (struct bench_result){.clients = n_clients, .seconds = run->options->seconds};
    if (!clients) {
        snprintf(err, errlen, "out of memory for %d clients", n_clients);
        return -1;
    }
    double deadline = loadgen_now() + run->options->seconds;
    for (; started < n_clients; started++) {
        struct bench_client *c = &clients[started];
        c->run = run;
        c->deadline = deadline;
        c->connection.fd = -1;
        c->connection.timeout = run->options->timeout;
        int e = pthread_create(&c->thread, NULL, client_main, c);
        if (e) {
            snprintf(err, errlen, "cannot start client thread %d: %s", started, strerror(e));
            rc = -1;
            break;
        }
    }
    for (int i = 0; i < started; i++) {
        struct bench_client *c = &clients[i];
        pthread_join(c->thread, NULL);
        out->completed += c->completed;
        out->tokens += c->tokens;
        out->errors += c->errors;
        out->chunks += c->chunks;
        out->chunk_tokens += c->chunk_tokens;
        if (c->errors && !out->first_error[0])
            snprintf(out->first_error, sizeof(out->first_error), "%s", c->first_error);
        if (loadgen_samples_append(&out->ttft, &c->ttft) ||
            loadgen_samples_append(&out->itl, &c->itl)) {
            snprintf(err, errlen, "out of memory for latency samples");
            rc = -1;
        }
        loadgen_samples_free(&c->ttft);
        loadgen_samples_free(&c->itl);
        free(c->request);
    }
    free(clients);
    return rc;
}

/* Milliseconds with one decimal, or "-" when there is no sample. */
static const char *format_ms(double seconds, char *text, size_t size) {
    if (seconds < 0)
        snprintf(text, size, "-");
    else
        snprintf(text, size, "%.1f", seconds * 1e3);
    return text;
}

static void print_row(struct bench_result *r) {
    char t50[32], t99[32], i50[32], i99[32];
    printf("| %d | %ld | %.1f | %.1f | %s | %s | %s | %s | %ld |\n", r->clients, r->completed,
           (double)r->completed * 60 / r->seconds, (double)r->tokens / r->seconds,
           format_ms(loadgen_samples_percentile(&r->ttft, 50), t50, sizeof(t50)),
           format_ms(loadgen_samples_percentile(&r->ttft, 99), t99, sizeof(t99)),
           format_ms(loadgen_samples_percentile(&r->itl, 50), i50, sizeof(i50)),
           format_ms(loadgen_samples_percentile(&r->itl, 99), i99, sizeof(i99)), r->errors);
}

/* The notes under the table: tokens per request, held-back tokens, failures. */
static void print_notes(const struct bench_result *results, int n) {
    printf("\n");
    for (int i = 0; i < n; i++) {
        const struct bench_result *r = &results[i];
        if (r->completed > 0)
            printf("%d client%s: %.1f tokens per completed request; %.1f%% of their tokens "
                   "came in a chunk with the next one\n",
                   r->clients, r->clients == 1 ? "" : "s",
                   (double)r->chunk_tokens / (double)r->completed,
                   r->chunk_tokens > 0
                       ? 100.0 * (double)(r->chunk_tokens - r->chunks) / (double)r->chunk_tokens
                       : 0.0);
        if (r->errors)
            printf("%d client%s: first error: %s\n", r->clients, r->clients == 1 ? "" : "s",
                   r->first_error);
    }
}

/* ------------------------------------------------------------- options */

static void usage(FILE *out) {
    fprintf(out, "usage: gateway_bench --port N [options]\n"
                 "  --host ADDR        gateway address (default 127.0.0.1)\n"
                 "  --port N           gateway port (required)\n"
                 "  --model NAME       model name in the requests (default bench)\n"
                 "  --clients LIST     concurrency levels, comma-separated (default 1,8,32)\n"
                 "  --seconds D        measured seconds per level (default 30)\n"
                 "  --max-tokens M     max_tokens per request (default 64)\n"
                 "  --prompt TEXT      prompt (default: 16 words of English)\n"
                 "  --api-key KEY      send Authorization: Bearer KEY\n"
                 "  --seed S           seed of the first request (default 1)\n"
                 "  --timeout S        give a request up after S s without a byte (default 120)\n");
}

static int parse_levels(const char *text, struct bench_options *o) {
    const char *p = text;
    o->n_levels = 0;
    while (*p) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p || n < 1 || n > BENCH_MAX_CLIENTS || o->n_levels == BENCH_MAX_LEVELS ||
            (*end != ',' && *end != '\0')) {
            fprintf(stderr,
                    "gateway_bench: --clients '%s' is not a list of at most %d numbers in "
                    "1..%d\n",
                    text, BENCH_MAX_LEVELS, BENCH_MAX_CLIENTS);
            return -1;
        }
        o->levels[o->n_levels++] = (int)n;
        p = *end ? end + 1 : end;
    }
    return o->n_levels > 0 ? 0 : -1;
}

static int parse_option(const char *name, const char *value, struct bench_options *o) {
    double number;
    int rc = 0;
    if (!strcmp(name, "--host")) {
        o->host = value;
    } else if (!strcmp(name, "--model")) {
        o->model = value;
    } else if (!strcmp(name, "--prompt")) {
        o->prompt = value;
    } else if (!strcmp(name, "--api-key")) {
        o->api_key = value;
    } else if (!strcmp(name, "--clients")) {
        rc = parse_levels(value, o);
    } else if (!strcmp(name, "--seconds")) {
        rc = loadgen_number_option("gateway_bench", name, value, 0.1, 86400, 0, &o->seconds);
    } else if (!strcmp(name, "--timeout")) {
        rc = loadgen_number_option("gateway_bench", name, value, 0.1, 86400, 0, &o->timeout);
    } else if (!strcmp(name, "--port")) {
        rc = loadgen_number_option("gateway_bench", name, value, 1, 65535, 1, &number);
        o->port = rc ? 0 : (int)number;
    } else if (!strcmp(name, "--max-tokens")) {
        rc = loadgen_number_option("gateway_bench", name, value, 1, 1 << 24, 1, &number);
        o->max_tokens = rc ? 0 : (int)number;
    } else if (!strcmp(name, "--seed")) {
        rc = loadgen_number_option("gateway_bench", name, value, 0, 4294967295.0, 1, &number);
        o->seed = rc ? 0 : (unsigned long)number;
    } else {
        fprintf(stderr, "gateway_bench: unknown option '%s' (see --help)\n", name);
        rc = -1;
    }
    return rc;
}

/* text as the inside of a JSON string (owned by the caller), or NULL. */
static char *escape_json(const char *text) {
    size_t n = strlen(text), used = 0;
    char *out = malloc(6 * n + 1);
    if (!out) return NULL;
    for (const unsigned char *s = (const unsigned char *)text; *s; s++) {
        if (*s == '"' || *s == '\\') {
            out[used++] = '\\';
            out[used++] = (char)*s;
        } else if (*s < 0x20) {
            used += (size_t)snprintf(out + used, 7, "\\u%04x", *s);
        } else {
            out[used++] = (char)*s;
        }
    }
    out[used] = '\0';
    return out;
}

/* 0, 1 for --help, -1 on a bad option. */
static int parse_options(int argc, char **argv, struct bench_options *o) {
    *o = (struct bench_options){.host = "127.0.0.1",
                                .model = "bench",
                                .prompt = bench_default_prompt,
                                .levels = {1, 8, 32},
                                .n_levels = 3,
                                .seconds = 30,
                                .max_tokens = 64,
                                .seed = 1,
                                .timeout = 120};
    for (int i = 1; i < argc; i += 2) { /* every option takes one value */
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
        if (i + 1 == argc) {
            fprintf(stderr, "gateway_bench: %s needs a value\n", argv[i]);
            return -1;
        }
        if (parse_option(argv[i], argv[i + 1], o)) return -1;
    }
    if (o->port == 0) {
        fprintf(stderr, "gateway_bench: --port is required\n");
        return -1;
    }
    const char *host = !strcmp(o->host, "localhost") ? "127.0.0.1" : o->host;
    if (inet_pton(AF_INET, host, &o->addr) != 1) {
        fprintf(stderr, "gateway_bench: --host '%s' is not an IPv4 address\n", o->host);
        return -1;
    }
    o->prompt_json = escape_json(o->prompt);
    o->model_json = escape_json(o->model);
    if (!o->prompt_json || !o->model_json) {
        free(o->prompt_json);
        free(o->model_json);
        fprintf(stderr, "gateway_bench: out of memory\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    static struct bench_result results[BENCH_MAX_LEVELS];
    struct bench_options o;
    char err[BENCH_ERROR_MAX];
    int parsed = parse_options(argc, argv, &o), n_done = 0, rc = 0;
    if (parsed) {
        usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    struct bench_run run = {.options = &o};
    atomic_init(&run.next_seed, o.seed);
    printf("gateway_bench: http://%s:%d model %s, max_tokens %d, temperature 0.8, %g s per "
           "level\n\n",
           o.host, o.port, o.model, o.max_tokens, o.seconds);
    printf("| clients | requests | requests/min | generated tok/s | TTFT p50 ms | TTFT p99 ms "
           "| ITL p50 ms | ITL p99 ms | errors |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);
    for (; n_done < o.n_levels; n_done++) {
        struct bench_result *r = &results[n_done];
        if (run_level(&run, o.levels[n_done], r, err, sizeof(err))) {
            fprintf(stderr, "gateway_bench: %s\n", err);
            rc = 1;
        }
        print_row(r);
        fflush(stdout);
        if (r->errors) rc = 1;
    }
    print_notes(results, n_done);
    for (int i = 0; i < n_done; i++) {
        loadgen_samples_free(&results[i].ttft);
        loadgen_samples_free(&results[i].itl);
    }
    free(o.prompt_json);
    free(o.model_json);
    return rc;
}
