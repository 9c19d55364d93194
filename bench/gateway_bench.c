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
 * 1 when any request failed (the table is printed all the same).
 *
 * --workload picks the request shape (issue 22, prefix caching):
 *   completions    the above (the default)
 *   short          a streaming chat request whose only message is a user
 *                  message of --user-words words drawn from the request's
 *                  seed: every prompt is new, nothing to reuse (the
 *                  baseline of "a cached prefix costs no more than its new
 *                  tokens")
 *   shared-prefix  the same with a system message before it that every
 *                  request shares (--system-words generated from
 *                  --system-seed, or --system-file): what a prefix cache
 *                  can skip is the system prompt, the rest must be prefilled
 *   multi-turn     each client holds a conversation: every request is all
 *                  earlier user turns with the assistant's answers as they
 *                  came back, plus a new user turn; after --turns requests
 *                  (or when the next would not fit the model's context) a
 *                  fresh conversation starts. The system message is sent
 *                  too when one is given.
 * Messages are counted in words of loadgen_prompt's list (about 2.4 tokens
 * a word with the byte-level BPE of the random models); bench/gateway sizes
 * them in tokens with `lockstep tokenize`, and the notes give the mean
 * usage.prompt_tokens the server reported.
 * --tsv appends one line per level for a script to gather runs into one
 * table (bench/gateway --shared-prefix).
 *
 * The clients and their request kinds are gateway_workloads.c's;
 * gateway_bench.h is what the two share. */
#include "gateway_bench.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
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

#define BENCH_MAX_CLIENTS 1024
#define BENCH_MAX_WORDS   100000 /* generated words of one message */

static const char bench_default_prompt[] =
    "the sun rose over the hills and the river ran down to the sea in the morning";

static const char *const bench_workload_names[] = {"completions", "short", "shared-prefix",
                                                   "multi-turn"};

/* ---------------------------------------------------------- connection */

void bench_connection_close(struct bench_connection *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->start = c->end = 0;
}

int bench_connection_open(struct bench_connection *c, const struct bench_options *o, char *err,
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
        bench_connection_close(c);
        return -1;
    }
    c->start = c->end = 0;
    return 0;
}

int bench_connection_send(struct bench_connection *c, const char *bytes, size_t n, char *err,
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

int bench_read_head(struct bench_connection *c, struct bench_head *h, char *err, size_t errlen) {
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

long bench_read_body(struct bench_connection *c, struct bench_body *b, char *out, size_t max,
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

/* -------------------------------------------------------------- levels */

/* What one concurrency level measured. */
struct bench_result {
    int clients;                        /* concurrent clients */
    double seconds;                     /* measured window */
    long completed, tokens, errors;     /* sums over the clients */
    long chunks, chunk_tokens;          /* completed requests: token chunks, tokens */
    struct loadgen_samples ttft, itl;   /* every client's samples */
    char first_error[BENCH_ERROR_MAX];  /* the first failure a client reported */
    long prompt_tokens, prompt_counted; /* completed requests' usage.prompt_tokens, how many */
    long conversations, context_resets; /* multi-turn: started, ended early for the context */
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
        int e = pthread_create(&c->thread, NULL, bench_client_main, c);
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
        out->prompt_tokens += c->prompt_tokens;
        out->prompt_counted += c->prompt_counted;
        out->conversations += c->conversations;
        out->context_resets += c->context_resets;
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
static void print_notes(const struct bench_result *results, int n, enum bench_workload workload) {
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
        /* the completions workload's notes stay as they were */
        if (r->prompt_counted > 0 && workload != WORKLOAD_COMPLETIONS)
            printf("%d client%s: %.1f prompt tokens per completed request (usage.prompt_tokens)\n",
                   r->clients, r->clients == 1 ? "" : "s",
                   (double)r->prompt_tokens / (double)r->prompt_counted);
        if (r->conversations > 0)
            printf("%d client%s: %ld conversations started, %ld of them because the previous one "
                   "would have outgrown the context\n",
                   r->clients, r->clients == 1 ? "" : "s", r->conversations, r->context_resets);
        if (r->errors)
            printf("%d client%s: first error: %s\n", r->clients, r->clients == 1 ? "" : "s",
                   r->first_error);
    }
}

/* Appends a level's line to --tsv: label, workload, clients, requests,
 * generated tok/s, TTFT p50 and p99 (ms), ITL p50 and p99 (ms), errors,
 * mean prompt tokens ("-" for a missing figure). The file is opened for
 * each line, so the lines of an interrupted run are kept. */
static int write_tsv(const struct bench_options *o, struct bench_result *r) {
    char t50[32], t99[32], i50[32], i99[32], prompt[32] = "-";
    FILE *f = fopen(o->tsv, "a");
    if (!f) {
        fprintf(stderr, "gateway_bench: cannot open %s: %s\n", o->tsv, strerror(errno));
        return -1;
    }
    if (r->prompt_counted > 0)
        snprintf(prompt, sizeof(prompt), "%.1f",
                 (double)r->prompt_tokens / (double)r->prompt_counted);
    fprintf(
        f, "%s\t%s\t%d\t%ld\t%.1f\t%s\t%s\t%s\t%s\t%ld\t%s\n", o->label ? o->label : "-",
        bench_workload_names[o->workload], r->clients, r->completed, (double)r->tokens / r->seconds,
        format_ms(loadgen_samples_percentile(&r->ttft, 50), t50, sizeof(t50)),
        format_ms(loadgen_samples_percentile(&r->ttft, 99), t99, sizeof(t99)),
        format_ms(loadgen_samples_percentile(&r->itl, 50), i50, sizeof(i50)),
        format_ms(loadgen_samples_percentile(&r->itl, 99), i99, sizeof(i99)), r->errors, prompt);
    return fclose(f) ? -1 : 0;
}

/* ----------------------------------------------------- model, prompts */

/* The model's context length from GET /v1/models (multi-turn keeps its
 * conversations inside it), or 0 when it cannot be read: conversations are
 * then bounded by --turns alone. */
static int fetch_context_length(const struct bench_options *o) {
    struct bench_connection c = {.fd = -1, .timeout = o->timeout};
    struct bench_head head;
    char err[BENCH_ERROR_MAX], request[1024], bytes[BENCH_BUFFER];
    char *body = NULL;
    size_t n_body = 0;
    long n = -1;
    int context = 0;
    int length = snprintf(request, sizeof(request),
                          "GET /v1/models HTTP/1.1\r\nHost: %s:%d\r\n%s%s%s"
                          "Connection: close\r\n\r\n",
                          o->host, o->port, o->api_key ? "Authorization: Bearer " : "",
                          o->api_key ? o->api_key : "", o->api_key ? "\r\n" : "");
    if (length > 0 && (size_t)length < sizeof(request) &&
        !bench_connection_open(&c, o, err, sizeof(err)) &&
        !bench_connection_send(&c, request, (size_t)length, err, sizeof(err)) &&
        !bench_read_head(&c, &head, err, sizeof(err)) && head.status == 200) {
        struct bench_body b = {.chunked = head.chunked,
                               .remaining = head.chunked ? 0 : head.length};
        while ((n = bench_read_body(&c, &b, bytes, sizeof(bytes), err, sizeof(err))) > 0) {
            char *grown = realloc(body, n_body + (size_t)n + 1);
            if (!grown) break;
            body = grown;
            memcpy(body + n_body, bytes, (size_t)n);
            n_body += (size_t)n;
            body[n_body] = '\0';
        }
    }
    bench_connection_close(&c);
    cJSON *root = n == 0 && body ? cJSON_Parse(body) : NULL;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data"), *model;
    cJSON_ArrayForEach(model, data) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(model, "id");
        const cJSON *length_item = cJSON_GetObjectItemCaseSensitive(model, "context_length");
        if (cJSON_IsString(id) && !strcmp(id->valuestring, o->model) && cJSON_IsNumber(length_item))
            context = length_item->valueint;
    }
    cJSON_Delete(root);
    free(body);
    return context;
}

/* A whole file's text (owned by the caller), or NULL with a message. */
static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t n = 0, capacity = 0;
    if (!f) {
        fprintf(stderr, "gateway_bench: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        if (n + 4096 + 1 > capacity) {
            capacity = capacity ? 2 * capacity : 65536;
            char *grown = realloc(text, capacity);
            if (!grown) break;
            text = grown;
        }
        size_t got = fread(text + n, 1, capacity - n - 1, f);
        n += got;
        if (got == 0) {
            text[n] = '\0';
            fclose(f);
            return text;
        }
    }
    fprintf(stderr, "gateway_bench: out of memory reading %s\n", path);
    free(text);
    fclose(f);
    return NULL;
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
                 "  --timeout S        give a request up after S s without a byte (default 120)\n"
                 "  --workload W       completions (default), or streaming chat: short,\n"
                 "                     shared-prefix or multi-turn (see the top of the source)\n"
                 "  --user-words N     words of each chat request's new user message (default 20)\n"
                 "  --system-words N   a system prompt of N generated words\n"
                 "  --system-seed S    the seed it is generated from (default 1)\n"
                 "  --system-file F    or: the system prompt is F's text\n"
                 "  --turns N          requests of a multi-turn conversation (default 8)\n"
                 "  --tsv FILE         append a tab-separated line per level to FILE\n"
                 "  --label TEXT       its first column (default -)\n"
                 "  --print-system-prompt  print the system prompt and exit (no --port needed)\n");
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
    } else if (!strcmp(name, "--workload")) {
        size_t n = sizeof(bench_workload_names) / sizeof(bench_workload_names[0]), i = 0;
        while (i < n && strcmp(value, bench_workload_names[i]) != 0) i++;
        if (i == n) {
            fprintf(stderr,
                    "gateway_bench: --workload '%s' is not completions, short, shared-prefix or "
                    "multi-turn\n",
                    value);
            rc = -1;
        }
        o->workload = (enum bench_workload)i;
    } else if (!strcmp(name, "--user-words")) {
        rc = loadgen_number_option("gateway_bench", name, value, 1, BENCH_MAX_WORDS, 1, &number);
        o->user_words = rc ? 0 : (int)number;
    } else if (!strcmp(name, "--system-words")) {
        rc = loadgen_number_option("gateway_bench", name, value, 0, BENCH_MAX_WORDS, 1, &number);
        o->system_words = rc ? 0 : (int)number;
    } else if (!strcmp(name, "--system-seed")) {
        rc = loadgen_number_option("gateway_bench", name, value, 0, 4294967295.0, 1, &number);
        o->system_seed = rc ? 0 : (unsigned long)number;
    } else if (!strcmp(name, "--system-file")) {
        o->system_file = value;
    } else if (!strcmp(name, "--turns")) {
        rc = loadgen_number_option("gateway_bench", name, value, 1, BENCH_MAX_TURNS, 1, &number);
        o->turns = rc ? 0 : (int)number;
    } else if (!strcmp(name, "--tsv")) {
        o->tsv = value;
    } else if (!strcmp(name, "--label")) {
        o->label = value;
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

/* 0, 1 for --help, -1 on a bad option; o->system is set (or NULL) either
 * way, for the caller to free. */
static int parse_options(int argc, char **argv, struct bench_options *o) {
    *o = (struct bench_options){.host = "127.0.0.1",
                                .model = "bench",
                                .prompt = bench_default_prompt,
                                .levels = {1, 8, 32},
                                .n_levels = 3,
                                .seconds = 30,
                                .max_tokens = 64,
                                .seed = 1,
                                .timeout = 120,
                                .user_words = 20,
                                .system_seed = 1,
                                .turns = 8};
    for (int i = 1; i < argc; i += 2) { /* every option but the flags takes one value */
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
        if (!strcmp(argv[i], "--print-system-prompt")) {
            o->print_system = 1;
            i--;
            continue;
        }
        if (i + 1 == argc) {
            fprintf(stderr, "gateway_bench: %s needs a value\n", argv[i]);
            return -1;
        }
        if (parse_option(argv[i], argv[i + 1], o)) return -1;
    }
    if (o->system_file && o->system_words > 0) {
        fprintf(stderr, "gateway_bench: --system-file and --system-words exclude each other\n");
        return -1;
    }
    /* the same text for the same seed and length, so that both servers of
     * bench/gateway --shared-prefix (cache on, cache off) get one prompt */
    if (o->system_file)
        o->system = read_file(o->system_file);
    else if (o->system_words > 0)
        o->system = loadgen_prompt(o->system_seed, o->system_words);
    if ((o->system_file || o->system_words > 0) && !o->system) {
        if (!o->system_file) fprintf(stderr, "gateway_bench: out of memory\n");
        return -1;
    }
    if (o->print_system) return 0;
    if (o->workload == WORKLOAD_SHARED_PREFIX && !o->system) {
        fprintf(stderr, "gateway_bench: --workload shared-prefix needs --system-words or "
                        "--system-file\n");
        return -1;
    }
    if (o->system && o->workload != WORKLOAD_SHARED_PREFIX && o->workload != WORKLOAD_MULTI_TURN) {
        fprintf(stderr, "gateway_bench: a system prompt is sent by the shared-prefix and "
                        "multi-turn workloads only\n");
        return -1;
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
        free(o.system); /* parse_options leaves it to us */
        usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    if (o.print_system) {
        printf("%s\n", o.system ? o.system : "");
        free(o.system);
        return 0;
    }
    struct bench_run run = {.options = &o};
    atomic_init(&run.next_seed, o.seed);
    if (o.workload == WORKLOAD_MULTI_TURN) o.context_length = fetch_context_length(&o);
    printf("gateway_bench: http://%s:%d model %s, max_tokens %d, temperature 0.8, %g s per "
           "level\n",
           o.host, o.port, o.model, o.max_tokens, o.seconds);
    if (o.workload != WORKLOAD_COMPLETIONS) {
        printf("workload %s: streaming chat, a new user message of %d words a request",
               bench_workload_names[o.workload], o.user_words);
        if (o.system) printf(", a system prompt of %zu bytes shared by all", strlen(o.system));
        if (o.workload == WORKLOAD_MULTI_TURN)
            printf(", %d turns a conversation (context %d)", o.turns, o.context_length);
        printf("\n");
    }
    printf("\n");
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
        if (o.tsv && write_tsv(&o, r)) rc = 1;
    }
    print_notes(results, n_done, o.workload);
    for (int i = 0; i < n_done; i++) {
        loadgen_samples_free(&results[i].ttft);
        loadgen_samples_free(&results[i].itl);
    }
    free(o.prompt_json);
    free(o.model_json);
    free(o.system);
    return rc;
}
