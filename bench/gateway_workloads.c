/* gateway_workloads.c -- the clients of bench/gateway_bench: each thread
 * sends the requests of the run's --workload (completions; short,
 * shared-prefix and multi-turn chat requests, the multi-turn conversation
 * kept and restarted before it outgrows the model's context) one after
 * another on its keep-alive connection until the level's deadline, reads
 * each server-sent event stream and adds what it measured (requests,
 * tokens, TTFT and ITL samples, prompt tokens, failures) to its struct
 * bench_client. gateway_bench.c (the options, the connection and response
 * reader, the levels and the table) starts the threads and sums them;
 * gateway_bench.h is what the two share, and the top of gateway_bench.c
 * says what each workload and figure means. */
#include "gateway_bench.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_LINE_MAX (1 << 20) /* longest SSE line accepted */

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

static void conversation_clear(struct bench_conversation *c) {
    for (int i = 0; i < c->n_turns; i++) {
        free(c->turns[i].user);
        free(c->turns[i].assistant);
    }
    *c = (struct bench_conversation){0};
}

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
    if (c->fd < 0 && bench_connection_open(c, client->run->options, err, errlen)) return -1;
    s->sent = loadgen_now();
    if (bench_connection_send(c, client->request, length, err, errlen) ||
        bench_read_head(c, &head, err, errlen))
        return -1;
    struct bench_body body = {.chunked = head.chunked, .remaining = head.chunked ? 0 : head.length};
    if (head.status != 200) {
        n = bench_read_body(c, &body, bytes, sizeof(bytes) - 1, err, errlen);
        bytes[n > 0 ? n : 0] = '\0';
        snprintf(err, errlen, "HTTP %d: %.200s", head.status, bytes);
        return -1;
    }
    /* read to the body's end, past [DONE], so the connection can carry the next request */
    while ((n = bench_read_body(c, &body, bytes, sizeof(bytes), err, errlen)) > 0)
        if (stream_feed(s, bytes, (size_t)n, err, errlen)) return -1;
    if (n < 0) return -1;
    if (head.close || body.remaining < 0) bench_connection_close(c); /* < 0: it ended with EOF */
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
        bench_connection_close(&client->connection);
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

void *bench_client_main(void *arg) {
    struct bench_client *client = arg;
    while (loadgen_now() < client->deadline) client_request(client);
    bench_connection_close(&client->connection);
    conversation_clear(&client->conversation);
    return NULL;
}
