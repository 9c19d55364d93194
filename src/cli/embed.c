/* embed.c -- `lockstep embed`: a text's embedding, as llama.cpp's
 * llama-embedding computes one: the prompt run through the model (BOS as
 * the vocabulary asks), each position's last-layer output after the final
 * RMS norm (engine_embed_sequence), pooled by the file's
 * {arch}.pooling_type or --pooling (mean over every position, BOS
 * included; the last position; or the first, CLS) and L2-normalized unless
 * --no-normalize. Prints one JSON array of floats. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum embed_pooling { POOLING_NONE = 0, POOLING_MEAN = 1, POOLING_CLS = 2, POOLING_LAST = 3 };

struct embed_options {
    const char *model_path, *tokenizer_path, *text;
    enum embed_pooling pooling; /* POOLING_NONE: the file's */
    int normalize;              /* 1 (default): L2-normalized */
    int n_threads;
};

static void embed_usage(FILE *out) {
    fprintf(out, "usage: lockstep embed -m MODEL [-z TOKENIZER] [--pooling mean|last|cls]\n"
                 "                      [--no-normalize] [-t THREADS] -p TEXT\n\n"
                 "Prints TEXT's embedding as a JSON array: each position's last hidden state\n"
                 "after the final norm, pooled (the file's {arch}.pooling_type, or --pooling)\n"
                 "and L2-normalized unless --no-normalize.\n");
}

static int parse_pooling(const char *name, enum embed_pooling *out) {
    static const char *const names[] = {"", "mean", "cls", "last"};
    for (int i = 1; i < 4; i++)
        if (!strcmp(name, names[i])) {
            *out = (enum embed_pooling)i;
            return 0;
        }
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

/* The file's {arch}.pooling_type (POOLING_NONE when it has none). */
static enum embed_pooling file_pooling(const struct model *m) {
    struct gguf_string arch;
    uint32_t type = 0;
    char key[96], err[128];
    if (!m->gguf || gguf_get_string(m->gguf, "general.architecture", &arch, err, sizeof(err)))
        return POOLING_NONE;
    snprintf(key, sizeof(key), "%.*s.pooling_type", (int)arch.len, arch.data);
    if (!gguf_find(m->gguf, key) || gguf_get_u32(m->gguf, key, &type, err, sizeof(err)))
        return POOLING_NONE;
    return type >= 1 && type <= 3 ? (enum embed_pooling)type : POOLING_NONE;
}

/* hidden (n, dim) pooled into out (dim), then normalized when asked. */
static void pool(const float *hidden, int n, int dim, enum embed_pooling pooling, int normalize,
                 float *out) {
    const float *row = hidden + (size_t)(pooling == POOLING_LAST ? n - 1 : 0) * dim;
    for (int d = 0; d < dim; d++) {
        double sum = 0;
        for (int t = 0; pooling == POOLING_MEAN && t < n; t++) sum += hidden[(size_t)t * dim + d];
        out[d] = pooling == POOLING_MEAN ? (float)(sum / n) : row[d];
    }
    double norm = 0;
    for (int d = 0; d < dim; d++) norm += (double)out[d] * out[d];
    for (int d = 0; normalize && norm > 0 && d < dim; d++) out[d] = (float)(out[d] / sqrt(norm));
}

/* Tokenizes, runs and pools; 0, or 1 (message printed). */
static int embed_text(const struct cli_model *m, const struct embed_options *o,
                      enum embed_pooling pooling) {
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
    float *out = malloc((size_t)dim * sizeof(float));
    struct kv_sequence seq = {0};
    if (n == 0 || !hidden || !out) {
        fprintf(stderr, "lockstep embed: %s\n", n ? "out of memory" : "the text is empty");
    } else if (engine_init(&engine, m->model, &params, err, sizeof(err))) {
        fprintf(stderr, "lockstep embed: %s\n", err);
    } else {
        if (kv_sequence_reserve(&engine.kv, &seq, n) ||
            engine_embed_sequence(&engine, &seq, tokens, n, hidden, err, sizeof(err))) {
            fprintf(stderr, "lockstep embed: %s\n", err[0] ? err : "KV cache too small");
        } else {
            pool(hidden, n, dim, pooling, o->normalize, out);
            for (int d = 0; d < dim; d++) printf("%s%.9g", d ? "," : "[", out[d]);
            printf("]\n");
            rc = fflush(stdout) == 0 ? 0 : 1;
        }
        kv_sequence_release(&engine.kv, &seq);
        engine_free(&engine);
    }
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
    enum embed_pooling pooling = o.pooling ? o.pooling : file_pooling(m.model);
    int rc = 1;
    if (pooling == POOLING_NONE)
        fprintf(stderr,
                "lockstep embed: %s names no pooling ({arch}.pooling_type): give "
                "--pooling mean, last or cls\n",
                o.model_path);
    else
        rc = embed_text(&m, &o, pooling);
    cli_model_free(&m);
    return rc;
}
