/* loadgen.h -- what bench/chaos and bench/soak share: a raw-socket HTTP/1.1
 * client for `lockstep serve` (one connection per exchange, every wait
 * bounded by an absolute deadline), streaming completions read as
 * server-sent events with their timings, latency samples, and readers for
 * GET /health and the Prometheus text of GET /metrics.
 *
 * Nothing here keeps global state, so client threads call it freely. */
#ifndef LOCKSTEP_BENCH_LOADGEN_H
#define LOCKSTEP_BENCH_LOADGEN_H

#include <stddef.h>
#include <stdint.h>

#define LOADGEN_ERROR_MAX   320 /* bytes of an error message */
#define LOADGEN_MODELS_MAX  8   /* model instances /health is read for */
#define LOADGEN_BUCKETS_MAX 40  /* buckets of one histogram */
#define LOADGEN_FINISH_MAX  24  /* bytes of a finish_reason */
#define LOADGEN_NAME_MAX    64  /* bytes of a model name */
#define LOADGEN_STATUS_MAX  160 /* bytes of a /health status text */

/* Seconds on the monotonic clock. */
double loadgen_now(void);

/* A 64-bit generator (splitmix64): deterministic streams from a seed. */
uint64_t loadgen_random(uint64_t *state);
/* A uniform integer in [low, high]. */
int loadgen_random_range(uint64_t *state, int low, int high);

/* A prompt of `words` words of plain English, the same for the same seed
 * (owned by the caller), or NULL when memory runs out. */
char *loadgen_prompt(uint64_t seed, int words);

/* ------------------------------------------------------------- samples */

/* A growing list of durations in seconds. */
struct loadgen_samples {
    double *values; /* (n, room for capacity) */
    size_t n, capacity;
};

int loadgen_samples_push(struct loadgen_samples *s, double value);
int loadgen_samples_append(struct loadgen_samples *to, const struct loadgen_samples *from);
void loadgen_samples_free(struct loadgen_samples *s);
/* Nearest-rank percentile (0 < p <= 100), sorting the samples; -1 if none. */
double loadgen_samples_percentile(struct loadgen_samples *s, double p);

/* ---------------------------------------------------------------- HTTP */

/* A whole (non-streaming) answer. */
struct loadgen_reply {
    int status; /* HTTP status code */
    char *body; /* (n_body + 1 bytes, NUL-terminated; owned) */
    size_t n_body;
};

/* Sends method path (with a JSON body, or none when body is NULL) to
 * 127.0.0.1:port and reads the whole answer before `deadline` (loadgen_now
 * seconds): 0, or -1 with err. */
int loadgen_http(int port, const char *method, const char *path, const char *body, double deadline,
                 struct loadgen_reply *reply, char *err, size_t errlen);
void loadgen_reply_free(struct loadgen_reply *reply);

/* ---------------------------------------------------------- completions */

/* One /v1/completions request. */
struct loadgen_request {
    const char *model;           /* "model" */
    const char *prompt;          /* "prompt" text */
    uint64_t seed;               /* "seed" */
    int max_tokens;              /* "max_tokens" */
    double temperature;          /* "temperature" */
    const char *stop;            /* "stop" string (NULL: none) */
    const char *response_format; /* "response_format" as JSON text (NULL: none) */
    int leave_at_finish;         /* 1: close the connection as soon as the chunk with finish_reason
                                  * came, before data: [DONE] (a client that cancels at the end) */
};

enum loadgen_outcome {
    LOADGEN_OK = 0,     /* data: [DONE] (or, leaving at finish, a finish_reason) arrived */
    LOADGEN_FAILED = 1, /* an HTTP error, an error event, a broken stream */
    LOADGEN_LATE = 2,   /* the deadline passed before [DONE] */
};

/* What a streamed completion delivered, and when. */
struct loadgen_result {
    enum loadgen_outcome outcome;
    char *text; /* (n_text + 1 bytes) the concatenated text of every chunk (owned) */
    size_t n_text, text_capacity;
    char finish_reason[LOADGEN_FINISH_MAX]; /* the last chunk's, "" if none came */
    int prompt_tokens, completion_tokens;   /* from the usage chunk; -1 if it did not come */
    int chunks;                             /* chunks with finish_reason null: one per token */
    double sent;                            /* when the request was written */
    double first_token;                     /* when the first token chunk came (0: none) */
    double last_token;                      /* when the last one came (0: none) */
    double done;                            /* when [DONE] (or the failure) came */
    double longest_gap;         /* longest time without a token: sent -> first, between, -> end */
    struct loadgen_samples itl; /* seconds between consecutive token chunks (owned) */
    char error[LOADGEN_ERROR_MAX]; /* why it failed or was late */
};

/* Streams one completion (stream_options.include_usage on) and fills out;
 * out->outcome says how it ended. Returns -1 only when memory runs out. */
int loadgen_complete(int port, const struct loadgen_request *request, double deadline,
                     struct loadgen_result *out);
void loadgen_result_free(struct loadgen_result *result);

/* ------------------------------------------------------- /health, /metrics */

/* One model instance as GET /health describes it. */
struct loadgen_health_model {
    char name[LOADGEN_NAME_MAX];
    int ready;    /* 1: its runner said HELLO */
    int restarts; /* runners started after the first */
    long pid;     /* runner process (0: none) */
    char status[LOADGEN_STATUS_MAX];
};

/* Reads GET /health (200 or 503 both carry the models): the number of
 * models filled in, or -1 with err. */
int loadgen_health(int port, double deadline, struct loadgen_health_model *models, int max,
                   char *err, size_t errlen);

/* The value of the samples `name{model="M"}` (over its instances, when
 * they are labelled) in a Prometheus text, or 0 when absent. */
double loadgen_metric(const char *text, const char *name, const char *model);

/* A histogram's cumulative buckets for one model. */
struct loadgen_histogram {
    double bounds[LOADGEN_BUCKETS_MAX]; /* (n) upper bounds; the last may be +Inf */
    double counts[LOADGEN_BUCKETS_MAX]; /* (n) observations <= bounds[i] */
    int n;
    double sum, count; /* _sum and _count */
};

/* Reads histogram `name` (its _bucket/_sum/_count samples) for one model;
 * an absent histogram reads as empty. */
void loadgen_histogram_read(const char *text, const char *name, const char *model,
                            struct loadgen_histogram *h);
/* h -= before, bucket by bucket (a phase's observations from two reads). */
void loadgen_histogram_subtract(struct loadgen_histogram *h,
                                const struct loadgen_histogram *before);
/* The q-quantile (0 < q <= 1) by linear interpolation inside the bucket
 * that holds the rank (as Prometheus' histogram_quantile), -1 if empty. */
double loadgen_histogram_quantile(const struct loadgen_histogram *h, double q);
/* The upper bound of the highest non-empty bucket (the maximum is at most
 * that), the largest finite bound when it is +Inf, -1 if empty. */
double loadgen_histogram_max(const struct loadgen_histogram *h);

/* A number option's value in [low, high] (whole: an integer); -1 with a
 * message on stderr, prefixed with program, if it is not. */
int loadgen_number_option(const char *program, const char *name, const char *text, double low,
                          double high, int whole, double *value);

#endif
