/* embed.c -- `lockstep embed`: a text's embedding, as llama.cpp's
 * llama-embedding computes one: the prompt run through the model (BOS as
 * the vocabulary asks), each position's last-layer output after the final
 * RMS norm (engine_embed_sequence), pooled by the file's
 * {arch}.pooling_type or --pooling (mean over every position, BOS
 * included; the last position; or the first, CLS) and L2-normalized unless
 * --no-normalize. Prints one JSON array of floats. */
#include "cli.h"
#include "protocol/protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct embed_options {
    const char *model_path, *tokenizer_path, *text;
    enum runner_pooling pooling; /* RUNNER_POOLING_NONE: the file's */
    int normalize;               /* 1 (default): L2-normalized */
    int n_threads;
};

static void embed_usage(FILE *out) {
    fprintf(out, "usage: lockstep embed -m MODEL [-z TOKENIZER] [--pooling mean|last|cls]\n"
                 "                      [--no-normalize] [-t THREADS] -p TEXT\n\n"
                 "Prints TEXT's embedding as a JSON array: each position's last hidden state\n"
                 "after the final norm, pooled (the file's {arch}.pooling_type, or --pooling)\n"
                 "and L2-normalized unless --no-normalize.\n");
}

static int parse_pooling(const char *name, enum runner_pooling *out) {
    if (runner_pooling_parse(name, out) == 0) return 0;
    fprintf(stderr, "lockstep embed: --pooling must be mean, last or cls, not '%s'\n", name);
    return -1;
}

static int parse_embed_options(int argc, char **argv, struct embed_options *o) {
    const char *cmd = "embed", *pooling = NULL;
    *o = (struct embed_options){.normalize = 1, .n_threads = 2};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->model_path);
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->tokenizer_path);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->text);
        else if (!strcmp(a, "--pooling"))
            rc = cli_string_value(cmd, argc, argv, &i, &pooling) ||
                 parse_pooling(pooling, &o->pooling);
        else if (!strcmp(a, "--no-normalize"))
            o->normalize = 0;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            rc = cli_int_value(cmd, argc, argv, &i, 1, 256, &o->n_threads);
        else {
            fprintf(stderr, "lockstep embed: unknown option '%s' (see --help)\n", a);
            return -1;
        }
        if (rc) return -1;
    }
    if (!o->model_path || !o->text) {
        fprintf(stderr, "lockstep embed: need -m MODEL and -p TEXT\n");
        return -1;
    }
    return 0;
}

/* hidden (n, dim) pooled into out (dim), then normalized when asked. */
static void pool(const float *hidden, int n, int dim, enum engine_pooling pooling, int normalize,
                 double *sum, float *out) {
    for (int t = 0; t < n; t++)
        if (engine_pooling_wants(pooling, t, n))
            engine_pooling_add(sum, hidden + (size_t)t * dim, dim);
    engine_pooling_finish(pooling, sum, n, dim, out);
    if (normalize) runner_embedding_normalize(out, dim);
}

/* Tokenizes, runs and pools; 0, or 1 (message printed). */
static int embed_text(const struct cli_model *m, const struct embed_options *o,
                      enum engine_pooling pooling) {
    char err[512];
    size_t length = strlen(o->text);
    int max_ids = tokenizer_max_ids(length), n = 0, dim = m->model->config.dim, rc = 1;
    int *tokens = malloc((size_t)(max_ids + 1) * sizeof(int));
    if (!tokens || tokenizer_encode(m->tokenizer, o->text, length, tokenizer_adds_bos(m->tokenizer),
                                    tokens, max_ids, &n, err, sizeof(err))) {
        fprintf(stderr, "lockstep embed: %s\n", tokens ? err : "out of memory");
        free(tokens);
        return 1;
    }
    if (n == 0 && tokenizer_bos(m->tokenizer) >= 0) tokens[n++] = tokenizer_bos(m->tokenizer);
    struct engine engine;
    struct engine_params params = {
        .n_threads = o->n_threads, .max_tokens = n, .context_length = n, .kv_block_size = 16};
    float *hidden = malloc((size_t)(n > 0 ? n : 1) * dim * sizeof(float));
    float *out = calloc((size_t)dim, sizeof(float));
    double *sum = calloc((size_t)dim, sizeof(double));
    struct kv_sequence seq = {0};
    if (n == 0 || !hidden || !out || !sum) {
        fprintf(stderr, "lockstep embed: %s\n", n ? "out of memory" : "the text is empty");
    } else if (engine_init(&engine, m->model, &params, err, sizeof(err))) {
        fprintf(stderr, "lockstep embed: %s\n", err);
    } else {
        if (kv_sequence_reserve(&engine.kv, &seq, n) ||
            engine_embed_sequence(&engine, &seq, tokens, n, hidden, err, sizeof(err))) {
            fprintf(stderr, "lockstep embed: %s\n", err[0] ? err : "KV cache too small");
        } else {
            pool(hidden, n, dim, pooling, o->normalize, sum, out);
            for (int d = 0; d < dim; d++) printf("%s%.9g", d ? "," : "[", out[d]);
            printf("]\n");
            rc = fflush(stdout) == 0 ? 0 : 1;
        }
        kv_sequence_release(&engine.kv, &seq);
        engine_free(&engine);
    }
    free(sum);
    free(out);
    free(hidden);
    free(tokens);
    return rc;
}

int cli_embed(int argc, char **argv) {
    struct embed_options o;
    struct cli_model m;
    int parsed = parse_embed_options(argc, argv, &o);
    if (parsed) {
        embed_usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    if (cli_model_load(&m, "embed", o.model_path, o.tokenizer_path)) return 1;
    enum engine_pooling pooling =
        o.pooling ? (enum engine_pooling)o.pooling : engine_model_pooling(m.model);
    int rc = 1;
    if (pooling == ENGINE_POOLING_NONE)
        fprintf(stderr,
                "lockstep embed: %s names no pooling ({arch}.pooling_type): give "
                "--pooling mean, last or cls\n",
                o.model_path);
    else
        rc = embed_text(&m, &o, pooling);
    cli_model_free(&m);
    return rc;
}
