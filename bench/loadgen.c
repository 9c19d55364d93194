/* loadgen.c -- the HTTP/SSE client, samples and /health and /metrics
 * readers that bench/chaos and bench/soak share (see loadgen.h).
 *
 * Every exchange opens its own connection and sends "Connection: close":
 * a request that failed half-way then never leaves a connection in an
 * unknown state for the next one, and a runner restart never meets a
 * stale keep-alive. Every read waits with poll() until an absolute
 * deadline, so a request that the gateway never finishes is reported as
 * late instead of hanging the tool. */
#include "loadgen.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LOADGEN_BUFFER   16384     /* bytes received from the socket at once */
#define LOADGEN_LINE_MAX (1 << 20) /* longest SSE line accepted */

/* READ_STOPPED: the sink had what it wanted; the exchange ends there */
enum { READ_OK = 0, READ_STOPPED = 1, READ_FAILED = -1, READ_LATE = -2 };

double loadgen_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

uint64_t loadgen_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int loadgen_random_range(uint64_t *state, int low, int high) {
    return low + (int)(loadgen_random(state) % (uint64_t)(high - low + 1));
}

/* Words of the prompts: plain, KJV-flavoured English, so the tiny real
 * model (trained on the King James Bible) sees text like its own. */
static const char *const loadgen_words[] = {
    "and",     "the",    "of",       "LORD",  "said",     "unto",     "him",    "them",
    "land",    "people", "house",    "king",  "God",      "shall",    "not",    "for",
    "his",     "was",    "in",       "that",  "day",      "children", "son",    "father",
    "came",    "went",   "into",     "out",   "upon",     "all",      "earth",  "heaven",
    "water",   "bread",  "mountain", "city",  "gate",     "spake",    "saying", "behold",
    "go",      "up",     "down",     "men",   "brethren", "there",    "were",   "they",
    "with",    "by",     "great",    "hand",  "before",   "after",    "light",  "night",
    "morning", "river",  "sea",      "field", "sheep",    "gold",     "temple", "word"};

char *loadgen_prompt(uint64_t seed, int words) {
    size_t n_words = sizeof(loadgen_words) / sizeof(loadgen_words[0]), used = 0;
    char *text = malloc((size_t)(words > 0 ? words : 0) * 10 + 1); /* words are < 9 bytes */
    uint64_t state = seed;
    if (!text) return NULL;
    text[0] = '\0';
    for (int i = 0; i < words; i++) {
        const char *word = loadgen_words[loadgen_random(&state) % n_words];
        used += (size_t)sprintf(text + used, "%s%s", i ? " " : "", word);
    }
    return text;
}

/* ------------------------------------------------------------- samples */

int loadgen_samples_push(struct loadgen_samples *s, double value) {
    if (s->n == s->capacity) {
        size_t capacity = s->capacity ? 2 * s->capacity : 256;
        double *grown = realloc(s->values, capacity * sizeof(double));
        if (!grown) return -1;
        s->values = grown;
        s->capacity = capacity;
    }
    s->values[s->n++] = value;
    return 0;
}

int loadgen_samples_append(struct loadgen_samples *to, const struct loadgen_samples *from) {
    for (size_t i = 0; i < from->n; i++)
        if (loadgen_samples_push(to, from->values[i])) return -1;
    return 0;
}

void loadgen_samples_free(struct loadgen_samples *s) {
    free(s->values);
    *s = (struct loadgen_samples){0};
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double loadgen_samples_percentile(struct loadgen_samples *s, double p) {
    if (s->n == 0) return -1;
    qsort(s->values, s->n, sizeof(double), compare_doubles);
    size_t rank = (size_t)ceil((double)s->n * p / 100.0);
    return s->values[rank > 0 ? (rank <= s->n ? rank - 1 : s->n - 1) : 0];
}

/* ---------------------------------------------------------- connection */

/* One connection to the gateway and the bytes received on it. */
struct http_connection {
    int fd;                    /* socket */
    double deadline;           /* loadgen_now() after which reading gives up */
    char data[LOADGEN_BUFFER]; /* received bytes; [start, end) not consumed yet */
    size_t start, end;
};

/* Receives more bytes: 1, 0 when the peer closed, READ_FAILED or READ_LATE. */
static int connection_fill(struct http_connection *c, char *err, size_t errlen) {
    if (c->start == c->end) {
        c->start = c->end = 0;
    } else if (c->end == sizeof(c->data)) {
        memmove(c->data, c->data + c->start, c->end - c->start);
        c->end -= c->start;
        c->start = 0;
    }
    for (;;) {
        double left = c->deadline - loadgen_now();
        if (left <= 0) {
            snprintf(err, errlen, "the deadline passed while waiting for the server");
            return READ_LATE;
        }
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int ready = poll(&p, 1, (int)(left * 1000) + 1);
        if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
        if (ready < 0) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return READ_FAILED;
        }
        ssize_t n = recv(c->fd, c->data + c->end, sizeof(c->data) - c->end, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            snprintf(err, errlen, "recv: %s", strerror(errno));
            return READ_FAILED;
        }
        c->end += (size_t)n;
        return n > 0;
    }
}

/* Reads a header or chunk-size line (without its CRLF) into line. */
static int connection_line(struct http_connection *c, char *line, size_t size, char *err,
                           size_t errlen) {
    size_t used = 0;
    for (;;) {
        while (c->start < c->end) {
            char ch = c->data[c->start++];
            if (ch == '\n') {
                if (used > 0 && line[used - 1] == '\r') used--;
                line[used] = '\0';
                return READ_OK;
            }
            if (used + 1 >= size) {
                snprintf(err, errlen, "an HTTP line is longer than %zu bytes", size - 1);
                return READ_FAILED;
            }
            line[used++] = ch;
        }
        int got = connection_fill(c, err, errlen);
        if (got < 0) return got;
        if (got == 0) {
            snprintf(err, errlen, "the server closed the connection inside a line");
            return READ_FAILED;
        }
    }
}

static int connection_send(struct http_connection *c, const char *bytes, size_t n, char *err,
                           size_t errlen) {
    while (n > 0) {
        ssize_t sent = send(c->fd, bytes, n, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent <= 0) {
            snprintf(err, errlen, "send: %s", sent < 0 ? strerror(errno) : "nothing sent");
            return READ_FAILED;
        }
        bytes += sent;
        n -= (size_t)sent;
    }
    return READ_OK;
}

static int connection_open(struct http_connection *c, int port, char *err, size_t errlen) {
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int one = 1;
    double left = c->deadline - loadgen_now();
    struct timeval send_timeout = {.tv_sec = left > 1 ? (time_t)left : 1};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return READ_FAILED;
    }
    /* small requests and small SSE chunks: Nagle must not delay them */
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
    if (connect(c->fd, (const struct sockaddr *)&address, sizeof(address)) != 0) {
        snprintf(err, errlen, "connect to 127.0.0.1:%d: %s", port, strerror(errno));
        close(c->fd);
        c->fd = -1;
        return READ_FAILED;
    }
    return READ_OK;
}

/* ------------------------------------------------------------ exchange */

/* Where body bytes go; returns 0, 1 to stop reading (READ_STOPPED), or -1
 * to give up. */
typedef int (*http_sink)(void *context, const char *bytes, size_t n);

/* Reads the status line and headers: the status, whether the body is
 * chunked, and its Content-Length (-1: none). */
static int read_head(struct http_connection *c, int *status, int *chunked, long long *length,
                     char *err, size_t errlen) {
    char line[1024];
    int rc = connection_line(c, line, sizeof(line), err, errlen);
    if (rc) return rc;
    char *end = NULL;
    if (strncmp(line, "HTTP/1.", 7) != 0 || (*status = (int)strtol(line + 9, &end, 10)) < 100 ||
        end == line + 9) {
        snprintf(err, errlen, "the status line '%.80s' is not HTTP/1.x", line);
        return READ_FAILED;
    }
    *chunked = 0;
    *length = -1;
    for (;;) {
        if ((rc = connection_line(c, line, sizeof(line), err, errlen))) return rc;
        if (line[0] == '\0') return READ_OK;
        if (!strncasecmp(line, "Transfer-Encoding:", 18))
            *chunked = strcasestr(line + 18, "chunked") != NULL;
        else if (!strncasecmp(line, "Content-Length:", 15))
            *length = strtoll(line + 15, NULL, 10);
    }
}

/* Passes up to `limit` bytes (-1: until the server closes) to sink. */
static int read_bytes(struct http_connection *c, long long limit, http_sink sink, void *context,
                      char *err, size_t errlen) {
    while (limit != 0) {
        if (c->start == c->end) {
            int got = connection_fill(c, err, errlen);
            if (got < 0) return got;
            if (got == 0 && limit < 0) return READ_OK;
            if (got == 0) {
                snprintf(err, errlen, "the server closed the connection inside a response");
                return READ_FAILED;
            }
        }
        size_t n = c->end - c->start;
        if (limit > 0 && (long long)n > limit) n = (size_t)limit;
        int taken = sink(context, c->data + c->start, n);
        if (taken < 0) {
            snprintf(err, errlen, "out of memory for a response");
            return READ_FAILED;
        }
        c->start += n;
        if (limit > 0) limit -= (long long)n;
        if (taken > 0) return READ_STOPPED;
    }
    return READ_OK;
}

static int read_chunked(struct http_connection *c, http_sink sink, void *context, char *err,
                        size_t errlen) {
    char line[256], *end;
    for (;;) {
        int rc = connection_line(c, line, sizeof(line), err, errlen);
        if (rc) return rc;
        long long size = strtoll(line, &end, 16);
        if (end == line || size < 0 || (*end != '\0' && *end != ';' && *end != ' ')) {
            snprintf(err, errlen, "the chunk size line '%.80s' is not hexadecimal", line);
            return READ_FAILED;
        }
        if (size == 0) break;
        if ((rc = read_bytes(c, size, sink, context, err, errlen))) return rc;
        if ((rc = connection_line(c, line, sizeof(line), err, errlen))) return rc;
        if (line[0] != '\0') {
            snprintf(err, errlen, "chunk data is not followed by CRLF");
            return READ_FAILED;
        }
    }
    do { /* trailer fields up to an empty line */
        int rc = connection_line(c, line, sizeof(line), err, errlen);
        if (rc) return rc;
    } while (line[0] != '\0');
    return READ_OK;
}

/* One request on a new connection; *status is set before the body goes to
 * sink. READ_OK, READ_STOPPED, READ_FAILED or READ_LATE (err says why). */
static int http_exchange(int port, const char *method, const char *path, const char *body,
                         double deadline, int *status, http_sink sink, void *context, char *err,
                         size_t errlen) {
    struct http_connection *c = malloc(sizeof(*c));
    char head[512];
    int chunked, rc;
    long long length;
    size_t n_body = body ? strlen(body) : 0;
    if (!c) {
        snprintf(err, errlen, "out of memory for a connection");
        return READ_FAILED;
    }
    *c = (struct http_connection){.fd = -1, .deadline = deadline};
    int n_head =
        snprintf(head, sizeof(head),
                 "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n"
                 "%sContent-Length: %zu\r\n\r\n",
                 method, path, port, body ? "Content-Type: application/json\r\n" : "", n_body);
    rc = connection_open(c, port, err, errlen);
    if (!rc) rc = connection_send(c, head, (size_t)n_head, err, errlen);
    if (!rc && body) rc = connection_send(c, body, n_body, err, errlen);
    if (!rc) rc = read_head(c, status, &chunked, &length, err, errlen);
    if (!rc && chunked) rc = read_chunked(c, sink, context, err, errlen);
    if (!rc && !chunked) rc = read_bytes(c, length, sink, context, err, errlen);
    if (c->fd >= 0) close(c->fd);
    free(c);
    return rc;
}

static int reply_sink(void *context, const char *bytes, size_t n) {
    struct loadgen_reply *reply = context;
    char *grown = realloc(reply->body, reply->n_body + n + 1);
    if (!grown) return -1;
    memcpy(grown + reply->n_body, bytes, n);
    reply->body = grown;
    reply->n_body += n;
    reply->body[reply->n_body] = '\0';
    return 0;
}

int loadgen_http(int port, const char *method, const char *path, const char *body, double deadline,
                 struct loadgen_reply *reply, char *err, size_t errlen) {
    *reply = (struct loadgen_reply){0};
    int rc = http_exchange(port, method, path, body, deadline, &reply->status, reply_sink, reply,
                           err, errlen);
    if (!rc && !reply->body) rc = reply_sink(reply, "", 0);
    if (rc) loadgen_reply_free(reply);
    return rc ? -1 : 0;
}

void loadgen_reply_free(struct loadgen_reply *reply) {
    free(reply->body);
    *reply = (struct loadgen_reply){0};
}

/* ------------------------------------------------------------- streams */

/* The server-sent-event reader of one completion. */
struct stream_reader {
    struct loadgen_result *result;
    int status; /* HTTP status, set before the body arrives */
    char *line; /* (line_capacity) the SSE line being received */
    size_t n_line, line_capacity;
    double last_event;   /* when the request was sent or the last token came */
    int done;            /* 1: data: [DONE] came */
    int leave_at_finish; /* 1: stop reading once a finish_reason came */
    int error_event;     /* 1: an event carried an error */
};

static int result_append_text(struct loadgen_result *r, const char *text, size_t n) {
    if (r->n_text + n + 1 > r->text_capacity) {
        size_t capacity = r->text_capacity ? 2 * r->text_capacity : 1024;
        while (capacity < r->n_text + n + 1) capacity *= 2;
        char *grown = realloc(r->text, capacity);
        if (!grown) return -1;
        r->text = grown;
        r->text_capacity = capacity;
    }
    memcpy(r->text + r->n_text, text, n);
    r->n_text += n;
    r->text[r->n_text] = '\0';
    return 0;
}

/* A token arrived at `now`: first-token time, inter-token gap, longest gap. */
static int stream_token(struct stream_reader *s, double now) {
    struct loadgen_result *r = s->result;
    if (now - s->last_event > r->longest_gap) r->longest_gap = now - s->last_event;
    s->last_event = now;
    if (r->chunks++ == 0) {
        r->first_token = now;
    } else if (loadgen_samples_push(&r->itl, now - r->last_token)) {
        return -1;
    }
    r->last_token = now;
    return 0;
}

/* One chunk's choices[0]: its text, and finish_reason (null: a token);
 * 1 when the reader leaves at the finish. */
static int stream_choice(struct stream_reader *s, const cJSON *choice, double now) {
    struct loadgen_result *r = s->result;
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(choice, "text");
    const cJSON *finish = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
    if (cJSON_IsString(text) && result_append_text(r, text->valuestring, strlen(text->valuestring)))
        return -1;
    if (cJSON_IsString(finish)) {
        snprintf(r->finish_reason, sizeof(r->finish_reason), "%s", finish->valuestring);
        return s->leave_at_finish;
    }
    return stream_token(s, now);
}

/* Handles the payload of one "data:" line: 0, 1 when the reader leaves at
 * the finish, -1 when memory runs out. */
static int stream_event(struct stream_reader *s, const char *payload, double now) {
    struct loadgen_result *r = s->result;
    if (!strcmp(payload, "[DONE]")) {
        s->done = 1;
        return 0;
    }
    cJSON *root = cJSON_Parse(payload);
    if (!root) {
        snprintf(r->error, sizeof(r->error), "an event is not JSON: %.120s", payload);
        s->error_event = 1;
        return 0;
    }
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(root, "usage");
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
    int rc = 0;
    if (error) {
        const cJSON *message = cJSON_GetObjectItemCaseSensitive(error, "message");
        snprintf(r->error, sizeof(r->error), "error event: %.240s",
                 cJSON_IsString(message) ? message->valuestring : payload);
        s->error_event = 1;
    }
    if (cJSON_IsObject(usage)) {
        const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
        const cJSON *completion = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
        if (cJSON_IsNumber(prompt)) r->prompt_tokens = prompt->valueint;
        if (cJSON_IsNumber(completion)) r->completion_tokens = completion->valueint;
    }
    if (cJSON_IsArray(choices) && cJSON_GetArraySize(choices) > 0)
        rc = stream_choice(s, cJSON_GetArrayItem(choices, 0), now);
    cJSON_Delete(root);
    return rc;
}

/* Splits body bytes into SSE lines and handles the data lines (comments
 * such as keep-alives and the blank lines between events are skipped). An
 * error answer (not 200) is kept as the error text instead. */
static int stream_sink(void *context, const char *bytes, size_t n) {
    struct stream_reader *s = context;
    struct loadgen_result *r = s->result;
    double now = loadgen_now();
    if (s->status != 200) {
        size_t used = strlen(r->error), room = sizeof(r->error) - 1 - used;
        memcpy(r->error + used, bytes, n < room ? n : room);
        r->error[used + (n < room ? n : room)] = '\0';
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (bytes[i] != '\n') {
            if (s->n_line + 1 >= s->line_capacity) {
                size_t capacity = s->line_capacity ? 2 * s->line_capacity : 4096;
                char *grown = capacity <= LOADGEN_LINE_MAX ? realloc(s->line, capacity) : NULL;
                if (!grown) return -1;
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
        int rc = stream_event(s, s->line + (length > 5 && s->line[5] == ' ' ? 6 : 5), now);
        if (rc) return rc;
    }
    return 0;
}

/* The request body as JSON (owned by the caller), or NULL. */
static char *completion_body(const struct loadgen_request *request) {
    cJSON *root = cJSON_CreateObject(), *options = cJSON_CreateObject();
    char *text = NULL;
    if (root && options && cJSON_AddStringToObject(root, "model", request->model) &&
        cJSON_AddStringToObject(root, "prompt", request->prompt) &&
        cJSON_AddNumberToObject(root, "max_tokens", request->max_tokens) &&
        cJSON_AddNumberToObject(root, "temperature", request->temperature) &&
        cJSON_AddNumberToObject(root, "seed", (double)request->seed) &&
        cJSON_AddTrueToObject(root, "stream") && cJSON_AddTrueToObject(options, "include_usage") &&
        (!request->stop || cJSON_AddStringToObject(root, "stop", request->stop))) {
        cJSON_AddItemToObject(root, "stream_options", options);
        options = NULL;
        if (request->response_format)
            cJSON_AddItemToObject(root, "response_format", cJSON_Parse(request->response_format));
        text = cJSON_PrintUnformatted(root);
    }
    cJSON_Delete(options);
    cJSON_Delete(root);
    return text;
}

int loadgen_complete(int port, const struct loadgen_request *request, double deadline,
                     struct loadgen_result *out) {
    char err[LOADGEN_ERROR_MAX] = "";
    char *body = completion_body(request);
    *out = (struct loadgen_result){.prompt_tokens = -1, .completion_tokens = -1};
    if (!body || result_append_text(out, "", 0)) {
        free(body);
        return -1;
    }
    struct stream_reader s = {.result = out, .leave_at_finish = request->leave_at_finish};
    out->sent = s.last_event = loadgen_now();
    int rc = http_exchange(port, "POST", "/v1/completions", body, deadline, &s.status, stream_sink,
                           &s, err, sizeof(err));
    out->done = loadgen_now();
    free(body);
    free(s.line);
    if (out->done - s.last_event > out->longest_gap) out->longest_gap = out->done - s.last_event;
    int left = rc == READ_STOPPED; /* at the finish, as asked */
    if (left) rc = READ_OK;
    if (rc == READ_LATE) {
        out->outcome = LOADGEN_LATE;
        snprintf(out->error, sizeof(out->error),
                 "no data: [DONE] within the deadline (%.1f s after the request; %d tokens came)",
                 out->done - out->sent, out->chunks);
    } else if (rc || s.status != 200 || s.error_event || (!s.done && !left)) {
        char detail[LOADGEN_ERROR_MAX];
        snprintf(detail, sizeof(detail), "%s", out->error);
        out->outcome = LOADGEN_FAILED;
        if (rc)
            snprintf(out->error, sizeof(out->error), "%s (after %d tokens)", err, out->chunks);
        else if (s.status != 200)
            snprintf(out->error, sizeof(out->error), "HTTP %d: %.240s", s.status, detail);
        else if (!s.error_event)
            snprintf(out->error, sizeof(out->error), "the stream ended without data: [DONE]");
    }
    return 0;
}

void loadgen_result_free(struct loadgen_result *result) {
    free(result->text);
    loadgen_samples_free(&result->itl);
    result->text = NULL;
    result->n_text = result->text_capacity = 0;
}

/* ------------------------------------------------------------- /health */

static void copy_string(char *out, size_t size, const cJSON *item) {
    snprintf(out, size, "%s", cJSON_IsString(item) ? item->valuestring : "");
}

int loadgen_health(int port, double deadline, struct loadgen_health_model *models, int max,
                   char *err, size_t errlen) {
    struct loadgen_reply reply;
    if (loadgen_http(port, "GET", "/health", NULL, deadline, &reply, err, errlen)) return -1;
    cJSON *root = cJSON_Parse(reply.body);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "models");
    int n = 0;
    if (!cJSON_IsArray(list)) {
        snprintf(err, errlen, "GET /health answered %d '%.120s' without a models array",
                 reply.status, reply.body);
        n = -1;
    }
    for (const cJSON *m = list ? list->child : NULL; m && n >= 0 && n < max; m = m->next, n++) {
        struct loadgen_health_model *h = &models[n];
        const cJSON *ready = cJSON_GetObjectItemCaseSensitive(m, "ready");
        const cJSON *restarts = cJSON_GetObjectItemCaseSensitive(m, "restarts");
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(m, "runner_pid");
        copy_string(h->name, sizeof(h->name), cJSON_GetObjectItemCaseSensitive(m, "model"));
        copy_string(h->status, sizeof(h->status), cJSON_GetObjectItemCaseSensitive(m, "status"));
        h->ready = cJSON_IsTrue(ready);
        h->restarts = cJSON_IsNumber(restarts) ? restarts->valueint : 0;
        h->pid = cJSON_IsNumber(pid) ? (long)pid->valuedouble : 0;
    }
    cJSON_Delete(root);
    loadgen_reply_free(&reply);
    return n;
}

/* ------------------------------------------------------------ /metrics */

/* If line is a sample of `name` whose labels are model="M" and, perhaps,
 * its instance and, for buckets, le: its value, and its le in *le (NAN
 * without one); else 0. */
static int metric_sample(const char *line, const char *name, const char *model, double *le,
                         double *value) {
    size_t n_name = strlen(name), n_model = strlen(model);
    int matched = 0;
    *le = NAN;
    if (strncmp(line, name, n_name) != 0 || line[n_name] != '{') return 0;
    const char *p = line + n_name + 1;
    while (*p && *p != '}') {
        if (!strncmp(p, "model=\"", 7) && !strncmp(p + 7, model, n_model) &&
            p[7 + n_model] == '"') {
            matched = 1;
        } else if (!strncmp(p, "le=\"", 4)) {
            *le = strtod(p + 4, NULL);
        } else if (strncmp(p, "model=\"", 7) != 0 && strncmp(p, "instance=\"", 10) != 0) {
            return 0; /* another label: not a per-model (or per-instance) series */
        }
        const char *quote = strchr(p, '"');
        quote = quote ? strchr(quote + 1, '"') : NULL;
        if (!quote) return 0;
        p = quote[1] == ',' ? quote + 2 : quote + 1;
    }
    if (!matched || *p != '}') return 0;
    *value = strtod(p + 1, NULL);
    return 1;
}

/* Calls fn on every sample line of `name` for model. */
static void each_sample(const char *text, const char *name, const char *model,
                        void (*fn)(void *, double le, double value), void *context) {
    for (const char *line = text; line && *line;) {
        const char *next = strchr(line, '\n');
        double le, value;
        if (line[0] != '#' && metric_sample(line, name, model, &le, &value)) fn(context, le, value);
        line = next ? next + 1 : NULL;
    }
}

/* A model's instances add up. */
static void take_value(void *context, double le, double value) {
    if (isnan(le)) *(double *)context += value;
}

double loadgen_metric(const char *text, const char *name, const char *model) {
    double value = 0;
    each_sample(text, name, model, take_value, &value);
    return value;
}

static void take_bucket(void *context, double le, double value) {
    struct loadgen_histogram *h = context;
    if (isnan(le)) return;
    for (int i = 0; i < h->n; i++)
        if (h->bounds[i] == le) { /* another instance's bucket of the same bound */
            h->counts[i] += value;
            return;
        }
    if (h->n < LOADGEN_BUCKETS_MAX) {
        h->bounds[h->n] = le;
        h->counts[h->n++] = value;
    }
}

void loadgen_histogram_read(const char *text, const char *name, const char *model,
                            struct loadgen_histogram *h) {
    char series[160];
    *h = (struct loadgen_histogram){0};
    snprintf(series, sizeof(series), "%s_bucket", name);
    each_sample(text, series, model, take_bucket, h);
    snprintf(series, sizeof(series), "%s_sum", name);
    h->sum = loadgen_metric(text, series, model);
    snprintf(series, sizeof(series), "%s_count", name);
    h->count = loadgen_metric(text, series, model);
}

void loadgen_histogram_subtract(struct loadgen_histogram *h,
                                const struct loadgen_histogram *before) {
    for (int i = 0; i < h->n && i < before->n; i++) h->counts[i] -= before->counts[i];
    h->sum -= before->sum;
    h->count -= before->count;
}

double loadgen_histogram_quantile(const struct loadgen_histogram *h, double q) {
    double total = h->n > 0 ? h->counts[h->n - 1] : 0, rank = q * total;
    double lower = 0, below = 0;
    if (total <= 0) return -1;
    for (int i = 0; i < h->n; i++) {
        if (h->counts[i] >= rank) {
            if (isinf(h->bounds[i])) return lower; /* above the largest finite bound */
            double inside = h->counts[i] - below;
            return lower + (h->bounds[i] - lower) * (inside > 0 ? (rank - below) / inside : 1);
        }
        lower = h->bounds[i];
        below = h->counts[i];
    }
    return lower;
}

double loadgen_histogram_max(const struct loadgen_histogram *h) {
    double below = 0;
    int highest = -1;
    for (int i = 0; i < h->n; i++) {
        if (h->counts[i] > below) highest = i;
        below = h->counts[i];
    }
    if (highest < 0) return -1;
    if (isinf(h->bounds[highest])) return highest > 0 ? h->bounds[highest - 1] : -1;
    return h->bounds[highest];
}

int loadgen_number_option(const char *program, const char *name, const char *text, double low,
                          double high, int whole, double *value) {
    char *end;
    *value = strtod(text, &end);
    if (end == text || *end != '\0' || !(*value >= low && *value <= high) ||
        (whole && *value != (double)(long long)*value)) {
        fprintf(stderr, "%s: %s '%s' is not %s in %g..%g\n", program, name, text,
                whole ? "an integer" : "a number", low, high);
        return -1;
    }
    return 0;
}
