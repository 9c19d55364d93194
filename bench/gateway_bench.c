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
 * table (bench/gateway --shared-prefix). */
#include "loadgen.h"

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

#define BENCH_MAX_LEVELS  16
#define BENCH_MAX_CLIENTS 1024
#define BENCH_BUFFER      16384     /* bytes received from the socket at once */
#define BENCH_LINE_MAX    (1 << 20) /* longest SSE line accepted */
#define BENCH_ERROR_MAX   256       /* bytes of an error message */
#define BENCH_MAX_TURNS   64        /* requests of one multi-turn conversation */
#define BENCH_MAX_WORDS   100000    /* generated words of one message */

static const char bench_default_prompt[] =
    "the sun rose over the hills and the river ran down to the sea in the morning";

/* The request shapes of --workload (see the top of the file). */
enum bench_workload {
    WORKLOAD_COMPLETIONS,
    WORKLOAD_SHORT,
    WORKLOAD_SHARED_PREFIX,
    WORKLOAD_MULTI_TURN,
};

static const char *const bench_workload_names[] = {"completions", "short", "shared-prefix",
                                                   "multi-turn"};

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
    enum bench_workload workload;
    int user_words;            /* words of each chat request's new user message */
    int system_words;          /* words of the generated system prompt (0: none) */
    unsigned long system_seed; /* seed the system prompt is generated from */
    const char *system_file;   /* or: the system prompt is this file's text */
    char *system;              /* the system prompt, or NULL (owned) */
    int turns;                 /* requests of a multi-turn conversation */
    int context_length;        /* the model's, from GET /v1/models (0: unknown) */
    int print_system;          /* 1: print the system prompt and exit */
    const char *label;         /* first column of the --tsv lines */
    const char *tsv;           /* append one line per level here, or NULL */
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
    int prompt_tokens; /* usage.prompt_tokens, -1 until the usage chunk */
    int keep_text;     /* 1: gather the chat text into text (multi-turn) */
    char *text;        /* (n_text + 1, text_capacity) what the deltas said */
    size_t n_text, text_capacity;
};

static int stream_append_text(struct bench_stream *s, const char *text) {
    size_t n = strlen(text);
    if (s->n_text + n + 1 > s->text_capacity) {
        size_t capacity = s->text_capacity ? 2 * s->text_capacity : 1024;
        while (capacity < s->n_text + n + 1) capacity *= 2;
        char *grown = realloc(s->text, capacity);
        if (!grown) return -1;
        s->text = grown;
        s->text_capacity = capacity;
    }
    memcpy(s->text + s->n_text, text, n + 1);
    s->n_text += n;
    return 0;
}

/* Adds a chat chunk's choices[0].delta.content to the text. Parsed as JSON
 * only when the text is wanted: the plain workloads keep reading chunks
 * with strstr, as they did before the multi-turn one existed. */
static int stream_keep_text(struct bench_stream *s, const char *payload) {
    cJSON *root = cJSON_Parse(payload);
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
    const cJSON *choice = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
    const cJSON *delta = cJSON_GetObjectItemCaseSensitive(choice, "delta");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(delta, "content");
    int rc = cJSON_IsString(content) ? stream_append_text(s, content->valuestring) : 0;
    cJSON_Delete(root);
    return rc;
}

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
    const char *prompt = strstr(payload, "\"prompt_tokens\":");
    if (prompt) s->prompt_tokens = (int)strtol(prompt + 16, NULL, 10);
    if (s->keep_text && strstr(payload, "\"delta\":") && stream_keep_text(s, payload)) return -1;
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
            snprintf(err, errlen, "out of memory for latency samples or the text");
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

/* One exchange of a multi-turn conversation: the user's turn and the
 * assistant's answer as it came back. */
struct bench_turn {
    char *user, *assistant; /* (owned) */
};

/* The conversation a multi-turn client holds. */
struct bench_conversation {
    struct bench_turn turns[BENCH_MAX_TURNS]; /* (n_turns) answered so far */
    int n_turns;
    int prompt_tokens, completion_tokens; /* the last answer's usage */
    int growth; /* the most prompt tokens one turn added so far (0: one turn) */
};

static void conversation_clear(struct bench_conversation *c) {
    for (int i = 0; i < c->n_turns; i++) {
        free(c->turns[i].user);
        free(c->turns[i].assistant);
    }
    *c = (struct bench_conversation){0};
}

/* One client thread and what it measured during one level. */
struct bench_client {
    struct bench_run *run;
    double deadline; /* no request starts after it */
    struct bench_connection connection;
    char *request; /* (request_capacity) the HTTP request being sent */
    size_t request_capacity;
    struct loadgen_samples ttft, itl;       /* seconds, observed before the deadline */
    long completed;                         /* requests whose [DONE] came before the deadline */
    long tokens;                            /* generated tokens received before the deadline */
    long chunks, chunk_tokens;              /* completed requests: token chunks, tokens in them */
    long errors;                            /* requests that failed */
    char first_error[BENCH_ERROR_MAX];      /* what the first failure said */
    long prompt_tokens, prompt_counted;     /* completed requests: usage.prompt_tokens, how many */
    struct bench_conversation conversation; /* multi-turn */
    char *user;                             /* the user message being sent (owned) */
    long conversations, context_resets;     /* multi-turn: started, started early for the context */
    pthread_t thread;
};

/* Adds {"role": role, "content": content} to messages; NULL if memory ran out. */
static cJSON *add_message(cJSON *messages, const char *role, const char *content) {
    cJSON *message = cJSON_CreateObject();
    if (!message || !cJSON_AddStringToObject(message, "role", role) ||
        !cJSON_AddStringToObject(message, "content", content) ||
        !cJSON_AddItemToArray(messages, message)) {
        cJSON_Delete(message);
        return NULL;
    }
    return message;
}

/* The body of a streaming chat request: the system prompt if any, the
 * conversation so far (multi-turn), then client->user. Owned by the
 * caller, or NULL if memory runs out. */
static char *chat_body(const struct bench_client *client, unsigned long seed) {
    const struct bench_options *o = client->run->options;
    const struct bench_conversation *c = &client->conversation;
    cJSON *root = cJSON_CreateObject(), *options = cJSON_CreateObject();
    cJSON *messages = cJSON_AddArrayToObject(root, "messages");
    char *text = NULL;
    int ok = root && options && messages && cJSON_AddStringToObject(root, "model", o->model) &&
             (!o->system || add_message(messages, "system", o->system));
    for (int i = 0; ok && i < c->n_turns; i++)
        ok = add_message(messages, "user", c->turns[i].user) &&
             add_message(messages, "assistant", c->turns[i].assistant);
    if (ok && add_message(messages, "user", client->user) &&
        cJSON_AddNumberToObject(root, "max_tokens", o->max_tokens) &&
        cJSON_AddNumberToObject(root, "temperature", 0.8) &&
        cJSON_AddNumberToObject(root, "seed", (double)seed) &&
        cJSON_AddTrueToObject(root, "stream") && cJSON_AddTrueToObject(options, "include_usage")) {
        cJSON_AddItemToObject(root, "stream_options", options);
        options = NULL;
        text = cJSON_PrintUnformatted(root);
    }
    cJSON_Delete(options);
    cJSON_Delete(root);
    return text;
}

/* Writes the HTTP request of a chat workload into client->request: its
 * length, or 0 if memory runs out. */
static size_t format_chat_request(struct bench_client *client, unsigned long seed) {
    const struct bench_options *o = client->run->options;
    char *body = chat_body(client, seed);
    if (!body) return 0;
    size_t body_length = strlen(body);
    size_t need = body_length + strlen(o->host) + (o->api_key ? strlen(o->api_key) : 0) + 512;
    if (need > client->request_capacity) {
        char *grown = realloc(client->request, need);
        if (!grown) {
            free(body);
            return 0;
        }
        client->request = grown;
        client->request_capacity = need;
    }
    int n = snprintf(client->request, client->request_capacity,
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\n"
                     "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                     "%s%s%sContent-Length: %zu\r\n\r\n%s",
                     o->host, o->port, o->api_key ? "Authorization: Bearer " : "",
                     o->api_key ? o->api_key : "", o->api_key ? "\r\n" : "", body_length, body);
    free(body);
    return n > 0 && (size_t)n < client->request_capacity ? (size_t)n : 0;
}

/* Writes the HTTP request for one completion into client->request; its
 * length, or 0 if memory runs out. */
static size_t format_request(struct bench_client *client, unsigned long seed) {
    const struct bench_options *o = client->run->options;
    if (o->workload != WORKLOAD_COMPLETIONS) return format_chat_request(client, seed);
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

/* Multi-turn: ends the conversation after --turns answers, or earlier when
 * the next request might not fit the model's context (a 400 would count as
 * a failure and say nothing about the cache). The next prompt is taken to
 * grow as much as the most one turn made it grow so far, plus 16 tokens.
 * After one turn that is unknown: then its answer at twice its tokens (an
 * answer comes back as text and is tokenized anew; the random model's text
 * holds characters cut in two, sent as U+FFFD, which take more tokens) plus
 * the first prompt again (a user turn with its template). */
static void conversation_prepare(struct bench_client *client) {
    const struct bench_options *o = client->run->options;
    struct bench_conversation *c = &client->conversation;
    if (c->n_turns > 0) {
        int over = c->n_turns >= o->turns;
        long growth = c->growth > 0 ? c->growth : 2L * c->completion_tokens + c->prompt_tokens;
        long next = (long)c->prompt_tokens + growth + 16;
        if (!over && o->context_length > 0 && next + o->max_tokens > o->context_length) {
            over = 1;
            client->context_resets++;
        }
        if (over) conversation_clear(c);
    }
    if (c->n_turns == 0) client->conversations++;
}

/* Multi-turn: the user turn and the answer become part of the conversation
 * (both taken from their owners). */
static void conversation_add(struct bench_client *client, struct bench_stream *s) {
    struct bench_conversation *c = &client->conversation;
    char *answer = s->text ? s->text : strdup("");
    if (!answer || c->n_turns == BENCH_MAX_TURNS) { /* no memory, or no room: start afresh */
        free(answer);
        conversation_clear(c);
    } else {
        c->turns[c->n_turns++] = (struct bench_turn){.user = client->user, .assistant = answer};
        client->user = NULL;
        if (c->n_turns > 1 && s->prompt_tokens - c->prompt_tokens > c->growth)
            c->growth = s->prompt_tokens - c->prompt_tokens;
        c->prompt_tokens = s->prompt_tokens;
        c->completion_tokens = s->usage_tokens >= 0 ? s->usage_tokens : s->chunks;
    }
    s->text = NULL;
}

/* One request: sends it, reads the stream, adds what it measured. */
static void client_request(struct bench_client *client) {
    const struct bench_options *o = client->run->options;
    char err[BENCH_ERROR_MAX] = "";
    unsigned long seed = atomic_fetch_add(&client->run->next_seed, 1);
    struct bench_stream s = {.deadline = client->deadline,
                             .usage_tokens = -1,
                             .prompt_tokens = -1,
                             .keep_text = o->workload == WORKLOAD_MULTI_TURN,
                             .ttft = &client->ttft,
                             .itl = &client->itl};
    int failed = 0;
    if (o->workload == WORKLOAD_MULTI_TURN) conversation_prepare(client);
    if (o->workload != WORKLOAD_COMPLETIONS) {
        /* a user message no other request of the run has (the seeds are
         * unique), and none of another workload's: a prefix cache must not
         * find the short workload's prompts inside the first turns of the
         * multi-turn one on the same server */
        client->user =
            loadgen_prompt((uint64_t)seed + ((uint64_t)o->workload << 40), o->user_words);
        if (!client->user) {
            snprintf(err, sizeof(err), "out of memory for the user message");
            failed = 1;
        }
    }
    if (!failed) failed = exchange(client, &s, seed, err, sizeof(err));
    free(s.line);
    if (!failed && o->workload == WORKLOAD_MULTI_TURN) conversation_add(client, &s);
    free(s.text);
    free(client->user);
    client->user = NULL;
    if (failed) {
        if (client->errors++ == 0)
            snprintf(client->first_error, sizeof(client->first_error), "%s", err);
        connection_close(&client->connection);
        conversation_clear(&client->conversation); /* a failed turn ends the conversation */
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
    if (s.prompt_tokens >= 0) {
        client->prompt_tokens += s.prompt_tokens;
        client->prompt_counted++;
    }
}

static void *client_main(void *arg) {
    struct bench_client *client = arg;
    while (loadgen_now() < client->deadline) client_request(client);
    connection_close(&client->connection);
    conversation_clear(&client->conversation);
    return NULL;
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
        !connection_open(&c, o, err, sizeof(err)) &&
        !connection_send(&c, request, (size_t)length, err, sizeof(err)) &&
        !read_head(&c, &head, err, sizeof(err)) && head.status == 200) {
        struct bench_body b = {.chunked = head.chunked,
                               .remaining = head.chunked ? 0 : head.length};
        while ((n = read_body(&c, &b, bytes, sizeof(bytes), err, sizeof(err))) > 0) {
            char *grown = realloc(body, n_body + (size_t)n + 1);
            if (!grown) break;
            body = grown;
            memcpy(body + n_body, bytes, (size_t)n);
            n_body += (size_t)n;
            body[n_body] = '\0';
        }
    }
    connection_close(&c);
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
