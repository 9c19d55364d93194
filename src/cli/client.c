/* client.c -- `lockstep client`: speaks the runner protocol, for tests and
 * debugging.
 *
 * One request from the command line (token ids, or a text with -m to
 * tokenize it), streamed as text or ids; or a script of requests from a
 * JSON-lines file, each sent after its delay on one connection, with one
 * JSON line printed per finished request (its tokens, logprobs, finish
 * reason and timings), so tests can drive many concurrent requests. */
#include "cli.h"
#include "runner/runner.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* One scripted request and what came back. */
struct client_request {
    struct runner_request request;
    int delay_ms;     /* send this long after the start */
    int cancel_after; /* cancel once this many tokens came (-1: never) */
    int sent, cancelled, done;
    uint64_t sent_us, first_token_us, finished_us;
    int *tokens; /* (request.max_tokens) received */
    float *logprobs;
    int n_tokens;
    struct runner_finished finished;
};

struct client_options {
    const char *socket_path;
    const char *requests_path; /* --requests FILE */
    const char *model_path;    /* -m: tokenizer for -p and for printing text */
    const char *tokenizer_path;
    const char *prompt;
    const char *token_list;  /* --tokens 1,2,3 */
    int heartbeats;          /* --heartbeats: print them */
    double timeout;          /* seconds for the whole run */
    const char *cluster_key; /* --cluster-key-file's key, proved to the runner first */
    char cluster_key_text[CLI_KEY_MAX];
    struct runner_request request;
};

static void client_usage(FILE *out) {
    fprintf(out,
            "usage: lockstep client --socket ADDRESS (--tokens IDS | -m MODEL -p TEXT | --requests "
            "FILE) [options]\n"
            "  --tokens 1,2,3          prompt token ids\n"
            "  -m MODEL -p TEXT        tokenize TEXT with MODEL's vocabulary (output as text)\n"
            "  -n N                    tokens to generate (default 16)\n"
            "  --temp T --top-k K --top-p P --min-p P --repeat-penalty R --seed S\n"
            "  --logprobs, --top-logprobs N, --stop-tokens IDS, --ignore-eos\n"
            "  --requests FILE         JSON lines: {\"id\", \"tokens\", \"max_tokens\", "
            "\"temperature\",\n"
            "                          \"seed\", \"delay_ms\", \"cancel_after\", "
            "\"top_logprobs\"};\n"
            "                          prints one JSON line per finished request\n"
            "  --heartbeats            print each step's heartbeat as a JSON line\n"
            "  --timeout S             give up after S seconds (default 60)\n"
            "  --cluster-key-file FILE prove this key to a runner that asks for one\n");
}

/* Parses "1,2,3" into a malloc'ed array. */
static int parse_ids(const char *text, int **ids, int *n) {
    int count = 1;
    for (const char *p = text; *p; p++) count += *p == ',';
    *ids = malloc((size_t)count * sizeof(int));
    *n = 0;
    if (!*ids) return -1;
    for (const char *p = text; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1 << 30 || (*end && *end != ',')) return -1;
        (*ids)[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return *n > 0 ? 0 : -1;
}

static int parse_client_option(const char *a, int argc, char **argv, int *i,
                               struct client_options *o) {
    const char *cmd = "client", *text;
    struct runner_request *q = &o->request;
    struct runner_sampling *s = &q->sampling;
    int seed;
    float timeout;
    if (!strcmp(a, "--socket")) return cli_string_value(cmd, argc, argv, i, &o->socket_path);
    if (!strcmp(a, "--requests")) return cli_string_value(cmd, argc, argv, i, &o->requests_path);
    if (!strcmp(a, "-m")) return cli_string_value(cmd, argc, argv, i, &o->model_path);
    if (!strcmp(a, "-z")) return cli_string_value(cmd, argc, argv, i, &o->tokenizer_path);
    if (!strcmp(a, "-p")) return cli_string_value(cmd, argc, argv, i, &o->prompt);
    if (!strcmp(a, "--tokens")) return cli_string_value(cmd, argc, argv, i, &o->token_list);
    if (!strcmp(a, "-n")) return cli_int_value(cmd, argc, argv, i, 1, 1 << 24, &q->max_tokens);
    if (!strcmp(a, "--temp")) return cli_float_value(cmd, argc, argv, i, &s->temperature);
    if (!strcmp(a, "--top-k")) return cli_int_value(cmd, argc, argv, i, 0, 1 << 30, &s->top_k);
    if (!strcmp(a, "--top-p")) return cli_float_value(cmd, argc, argv, i, &s->top_p);
    if (!strcmp(a, "--min-p")) return cli_float_value(cmd, argc, argv, i, &s->min_p);
    if (!strcmp(a, "--repeat-penalty"))
        return cli_float_value(cmd, argc, argv, i, &s->repeat_penalty);
    if (!strcmp(a, "--top-logprobs"))
        return cli_int_value(cmd, argc, argv, i, 0, RUNNER_TOP_LOGPROBS_MAX, &q->top_logprobs);
    if (!strcmp(a, "--seed")) {
        if (cli_int_value(cmd, argc, argv, i, 0, 2147483647, &seed)) return -1;
        s->seed = (uint64_t)seed;
        return 0;
    }
    if (!strcmp(a, "--cluster-key-file")) {
        if (cli_key_file_value(cmd, argc, argv, i, o->cluster_key_text,
                               sizeof(o->cluster_key_text)))
            return -1;
        o->cluster_key = o->cluster_key_text;
        return 0;
    }
    if (!strcmp(a, "--timeout")) {
        if (cli_float_value(cmd, argc, argv, i, &timeout)) return -1;
        o->timeout = timeout;
        return 0;
    }
    if (!strcmp(a, "--logprobs")) return (q->logprobs = 1) - 1;
    if (!strcmp(a, "--ignore-eos")) return (q->ignore_eos = 1) - 1;
    if (!strcmp(a, "--heartbeats")) return (o->heartbeats = 1) - 1;
    if (!strcmp(a, "--stop-tokens")) {
        if (cli_string_value(cmd, argc, argv, i, &text)) return -1;
        free(q->stops);
        q->stops = calloc(1, sizeof(*q->stops));
        q->n_stops = 1;
        if (q->stops && parse_ids(text, &q->stops[0].tokens, &q->stops[0].n_tokens) == 0) return 0;
        fprintf(stderr, "lockstep client: --stop-tokens '%s' is not a list of ids\n", text);
        return -1;
    }
    fprintf(stderr, "lockstep client: unknown option '%s' (see --help)\n", a);
    return -1;
}

static int parse_client_options(int argc, char **argv, struct client_options *o) {
    memset(o, 0, sizeof(*o));
    runner_sampling_default(&o->request.sampling);
    o->request.sampling.temperature = 0.0f;
    o->request.max_tokens = 16;
    o->timeout = 60.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
        if (parse_client_option(argv[i], argc, argv, &i, o)) return -1;
    }
    if (!o->socket_path || (!o->token_list && !o->prompt && !o->requests_path)) {
        fprintf(stderr, "lockstep client: --socket and one of --tokens, -p or --requests are "
                        "required\n");
        return -1;
    }
    if (o->prompt && !o->model_path) {
        fprintf(stderr, "lockstep client: -p needs -m MODEL for its vocabulary\n");
        return -1;
    }
    return 0;
}

/* A blocking connection to a runner address (unix path or tcp:HOST:PORT);
 * -1 with err. */
static int connect_to(const char *address, char *err, size_t errlen) {
    int fd = runner_connect(address, 5.0, err, errlen);
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

/* Reads one request line of a --requests file into r (defaults: greedy). */
static int parse_request_line(const char *line, struct client_request *r, char *err,
                              size_t errlen) {
    cJSON *j = cJSON_Parse(line);
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    const cJSON *item;
    memset(r, 0, sizeof(*r));
    runner_sampling_default(&r->request.sampling);
    r->request.sampling.temperature = 0.0f;
    r->request.max_tokens = 16;
    r->cancel_after = -1;
    if (!j || !cJSON_IsArray(tokens) || cJSON_GetArraySize(tokens) < 1) {
        snprintf(err, errlen, "needs an object with a non-empty \"tokens\" array");
        cJSON_Delete(j);
        return -1;
    }
    r->request.n_prompt = cJSON_GetArraySize(tokens);
    r->request.prompt = malloc((size_t)r->request.n_prompt * sizeof(int));
    int n = 0;
    cJSON_ArrayForEach(item, tokens) if (r->request.prompt) r->request.prompt[n++] = item->valueint;
#define NUMBER(name) ((item = cJSON_GetObjectItemCaseSensitive(j, name)) && cJSON_IsNumber(item))
    if (NUMBER("id")) r->request.id = (uint64_t)item->valuedouble;
    if (NUMBER("max_tokens")) r->request.max_tokens = item->valueint;
    if (NUMBER("temperature")) r->request.sampling.temperature = (float)item->valuedouble;
    if (NUMBER("seed")) r->request.sampling.seed = (uint64_t)item->valuedouble;
    if (NUMBER("delay_ms")) r->delay_ms = item->valueint;
    if (NUMBER("cancel_after")) r->cancel_after = item->valueint;
    if (NUMBER("top_logprobs")) r->request.top_logprobs = item->valueint;
#undef NUMBER
    cJSON_Delete(j);
    r->tokens = malloc((size_t)r->request.max_tokens * sizeof(int) + 1);
    r->logprobs = malloc((size_t)r->request.max_tokens * sizeof(float) + 1);
    if (!r->request.prompt || !r->tokens || !r->logprobs) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    r->request.logprobs = 1;
    return 0;
}

static void print_result(const struct client_request *r) {
    printf("{\"id\":%llu,\"finish\":\"%s\",\"prompt\":%d,\"generated\":%d,\"sent_us\":%llu,"
           "\"first_token_us\":%llu,\"finished_us\":%llu,\"message\":\"%s\",\"tokens\":[",
           (unsigned long long)r->request.id, runner_finish_reason_name(r->finished.reason),
           r->finished.n_prompt, r->finished.n_generated, (unsigned long long)r->sent_us,
           (unsigned long long)r->first_token_us, (unsigned long long)r->finished_us,
           r->finished.message);
    for (int i = 0; i < r->n_tokens; i++) printf("%s%d", i ? "," : "", r->tokens[i]);
    printf("],\"logprobs\":[");
    for (int i = 0; i < r->n_tokens; i++) printf("%s%.9g", i ? "," : "", r->logprobs[i]);
    printf("]}\n");
    fflush(stdout);
}

/* The state of a run: requests, the connection and what a text stream needs. */
struct client_run {
    struct client_request *requests;
    int n_requests, n_done;
    int fd;
    struct runner_buffer in, out;
    const struct client_options *options;
    struct tokenizer_stream *stream; /* text mode: decode the one request's tokens */
    int linked;                      /* 1: HELLO came (and the runner proved the key) */
    struct runner_hello hello;       /* the runner's HELLO */
    struct runner_auth answer;       /* with a key: the proof sent for its challenge */
};

static struct client_request *find_request(struct client_run *run, uint64_t id) {
    for (int i = 0; i < run->n_requests; i++)
        if (run->requests[i].request.id == id && run->requests[i].sent) return &run->requests[i];
    return NULL;
}

static void on_token(struct client_run *run, const struct runner_token *t) {
    char err[160], text[1024];
    struct client_request *r = find_request(run, t->id);
    if (!r || r->done || r->n_tokens >= r->request.max_tokens) return;
    if (r->n_tokens == 0) r->first_token_us = clock_now_us();
    r->logprobs[r->n_tokens] = t->logprob;
    r->tokens[r->n_tokens++] = t->token;
    if (run->stream) {
        size_t n = tokenizer_stream_push(run->stream, t->token, text, sizeof(text));
        fwrite(text, 1, n, stdout);
        fflush(stdout);
    }
    if (r->cancel_after >= 0 && r->n_tokens >= r->cancel_after && !r->cancelled) {
        runner_encode_cancel(&run->out, r->request.id, err, sizeof(err));
        r->cancelled = 1;
    }
}

/* HELLO or AUTH: the link is up once the runner said HELLO and, when
 * either side has a key, both proved it; -1 (said) otherwise. */
static int on_link_frame(struct client_run *run, const struct runner_frame *f) {
    char err[300];
    const char *key = run->options->cluster_key;
    struct runner_auth reply;
    if (f->type == RUNNER_MSG_HELLO) {
        if (runner_decode_hello(f, &run->hello, err, sizeof(err))) goto fail;
        if (!key != !run->hello.has_challenge) {
            snprintf(err, sizeof(err), "%s",
                     key ? "the runner did not ask for the cluster key: refused"
                         : "the runner asks for a cluster key (--cluster-key-file)");
            goto fail;
        }
        if (key && (runner_auth_answer(key, run->hello.challenge, &run->answer, err, sizeof(err)) ||
                    runner_encode_auth(&run->out, &run->answer, err, sizeof(err))))
            goto fail;
        run->linked = !key;
        return 0;
    }
    if (runner_decode_auth(f, &reply, err, sizeof(err))) goto fail;
    if (key && run->hello.has_challenge && !run->linked &&
        runner_auth_confirm(key, run->hello.challenge, &run->answer, &reply)) {
        run->linked = 1;
        return 0;
    }
    snprintf(err, sizeof(err), "the runner did not prove the cluster key: refused");
fail:
    fprintf(stderr, "lockstep client: %s\n", err);
    return -1;
}

/* Handles one frame from the runner; -1 if the runner reported an error. */
static int on_frame(struct client_run *run, const struct runner_frame *f) {
    char err[200], message[256];
    struct runner_token token;
    struct runner_finished finished;
    struct runner_heartbeat h;
    if (f->type == RUNNER_MSG_HELLO || f->type == RUNNER_MSG_AUTH) return on_link_frame(run, f);
    if (f->type == RUNNER_MSG_TOKEN && runner_decode_token(f, &token, err, sizeof(err)) == 0) {
        on_token(run, &token);
    } else if (f->type == RUNNER_MSG_FINISHED &&
               runner_decode_finished(f, &finished, err, sizeof(err)) == 0) {
        struct client_request *r = find_request(run, finished.id);
        if (r && !r->done) {
            r->done = 1;
            r->finished = finished;
            r->finished_us = clock_now_us();
            run->n_done++;
            if (!run->stream) print_result(r);
        }
    } else if (f->type == RUNNER_MSG_HEARTBEAT &&
               runner_decode_heartbeat(f, &h, err, sizeof(err)) == 0) {
        if (run->options->heartbeats)
            printf("{\"heartbeat\":%llu,\"tokens\":%d,\"decode\":%d,\"running\":%d,"
                   "\"waiting\":%d,\"kv_used\":%d,\"kv_total\":%d}\n",
                   (unsigned long long)h.step, h.n_tokens, h.n_decode, h.n_running, h.n_waiting,
                   h.kv_blocks_used, h.kv_blocks_total);
    } else if (f->type == RUNNER_MSG_ERROR &&
               runner_decode_error(f, NULL, message, sizeof(message), err, sizeof(err)) == 0) {
        fprintf(stderr, "lockstep client: the runner says: %s\n", message);
        return -1;
    }
    return 0;
}

/* Sends the requests whose delay has passed. */
static void send_due(struct client_run *run, uint64_t start_us) {
    char err[200];
    uint64_t now = clock_now_us();
    /* the analyzer loses track of run->requests (free_run frees it) here */
    for (int i = 0; i < run->n_requests; i++) { /* NOLINT(clang-analyzer-unix.Malloc) */
        struct client_request *r = &run->requests[i];
        if (r->sent || now < start_us + (uint64_t)r->delay_ms * 1000u) continue;
        if (runner_encode_add(&run->out, &r->request, err, sizeof(err))) {
            fprintf(stderr, "lockstep client: request %llu: %s\n",
                    (unsigned long long)r->request.id, err);
            r->done = 1;
            run->n_done++;
        }
        r->sent = 1;
        r->sent_us = now;
    }
}

/* Reads frames until every request finished; 0, or -1 on error/timeout. */
static int exchange(struct client_run *run) {
    char err[200];
    uint64_t start = clock_now_us(), deadline = start + (uint64_t)(run->options->timeout * 1e6);
    while (run->n_done < run->n_requests) {
        if (run->linked) send_due(run, start);
        if (run->out.length) {
            ssize_t n = send(run->fd, run->out.data, run->out.length, MSG_NOSIGNAL);
            if (n < 0) break;
            runner_buffer_consume(&run->out, (size_t)n);
        }
        struct pollfd p = {run->fd, POLLIN, 0};
        if (clock_now_us() > deadline) {
            fprintf(stderr, "lockstep client: timed out after %.0f s\n", run->options->timeout);
            return -1;
        }
        if (poll(&p, 1, 5) <= 0) continue;
        uint8_t chunk[65536];
        ssize_t n = recv(run->fd, chunk, sizeof(chunk), 0);
        if (n <= 0) break;
        if (runner_buffer_append(&run->in, chunk, (size_t)n)) return -1;
        struct runner_frame f;
        size_t used = 0;
        int rc;
        while ((rc = runner_frame_next(run->in.data + used, run->in.length - used, RUNNER_FRAME_MAX,
                                       &f, err, sizeof(err))) == 1) {
            used += f.frame_length;
            if (on_frame(run, &f)) return -1;
        }
        if (rc < 0) {
            fprintf(stderr, "lockstep client: %s\n", err);
            return -1;
        }
        runner_buffer_consume(&run->in, used);
    }
    if (run->n_done < run->n_requests) {
        fprintf(stderr, "lockstep client: the runner closed the connection\n");
        return -1;
    }
    return 0;
}

static int load_requests(const char *path, struct client_run *run) {
    char err[200], line[1 << 16];
    FILE *f = fopen(path, "r");
    int line_number = 0;
    if (!f) {
        fprintf(stderr, "lockstep client: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        line_number++;
        if (line[strspn(line, " \t\r\n")] == '\0') continue;
        struct client_request *grown =
            realloc(run->requests, (size_t)(run->n_requests + 1) * sizeof(*grown));
        if (!grown) break;
        run->requests = grown;
        if (parse_request_line(line, &run->requests[run->n_requests++], err, sizeof(err))) {
            fprintf(stderr, "lockstep client: %s:%d: %s\n", path, line_number, err);
            fclose(f);
            return -1;
        }
    }
    fclose(f);
    return 0;
}

/* The one request of the command line; text mode with a tokenizer. */
static int single_request(struct client_options *o, const struct cli_model *m,
                          struct client_run *run) {
    char err[256];
    run->requests = calloc(1, sizeof(*run->requests));
    if (!run->requests) return -1;
    run->n_requests = 1; /* from here on free_run frees what it holds */
    struct client_request *r = &run->requests[0];
    r->request = o->request;
    memset(&o->request, 0, sizeof(o->request));
    r->cancel_after = -1;
    r->request.id = 1;
    if (o->token_list) {
        if (parse_ids(o->token_list, &r->request.prompt, &r->request.n_prompt)) {
            fprintf(stderr, "lockstep client: --tokens '%s' is not a list of ids\n", o->token_list);
            return -1;
        }
    } else {
        size_t len = strlen(o->prompt);
        int max_ids = tokenizer_max_ids(len);
        r->request.prompt = malloc((size_t)max_ids * sizeof(int));
        if (!r->request.prompt ||
            tokenizer_encode(m->tokenizer, o->prompt, len, tokenizer_adds_bos(m->tokenizer),
                             r->request.prompt, max_ids, &r->request.n_prompt, err, sizeof(err))) {
            fprintf(stderr, "lockstep client: %s\n", err);
            return -1;
        }
    }
    r->tokens = malloc((size_t)r->request.max_tokens * sizeof(int));
    r->logprobs = malloc((size_t)r->request.max_tokens * sizeof(float));
    return r->tokens && r->logprobs ? 0 : -1;
}

static void free_run(struct client_run *run) {
    for (int i = 0; i < run->n_requests; i++) {
        runner_request_free(&run->requests[i].request);
        free(run->requests[i].tokens);
        free(run->requests[i].logprobs);
    }
    free(run->requests);
    runner_buffer_free(&run->in);
    runner_buffer_free(&run->out);
    if (run->fd >= 0) close(run->fd);
}

static int run_client(struct client_options *o, const struct cli_model *m) {
    struct client_run run = {.fd = -1, .options = o};
    struct tokenizer_stream stream;
    int rc = -1;
    if (o->requests_path ? load_requests(o->requests_path, &run) : single_request(o, m, &run))
        goto done;
    char err[300];
    run.fd = connect_to(o->socket_path, err, sizeof(err));
    if (run.fd < 0) {
        fprintf(stderr, "lockstep client: %s\n", err);
        goto done;
    }
    if (m->tokenizer && !o->requests_path) {
        tokenizer_stream_init(&stream, m->tokenizer, 0);
        run.stream = &stream;
        fputs(o->prompt ? o->prompt : "", stdout);
    }
    rc = exchange(&run);
    if (rc == 0 && run.stream) {
        char text[64];
        size_t n = tokenizer_stream_flush(run.stream, text, sizeof(text));
        fwrite(text, 1, n, stdout);
        printf("\n[%s, %d tokens]\n", runner_finish_reason_name(run.requests[0].finished.reason),
               run.requests[0].n_tokens);
    }
done:
    free_run(&run);
    return rc ? 1 : 0;
}

int cli_client(int argc, char **argv) {
    struct client_options o;
    struct cli_model m = {0};
    int parsed = parse_client_options(argc, argv, &o);
    if (parsed) {
        runner_request_free(&o.request);
        client_usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    if (o.model_path && cli_model_load(&m, "client", o.model_path, o.tokenizer_path)) return 1;
    int rc = run_client(&o, &m);
    runner_request_free(&o.request);
    if (o.model_path) cli_model_free(&m);
    return rc;
}
