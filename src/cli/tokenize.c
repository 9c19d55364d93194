/* tokenize.c -- `lockstep tokenize`: the token ids of the exact bytes given,
 * like llama.cpp's llama-tokenize. Works on vocabulary-only GGUF files too. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tokenize_options {
    const char *model_path;
    const char *tokenizer_path;
    const char *file_path; /* -f: read the text from this file */
    const char *text;      /* or the text itself */
    int add_bos;           /* -1: as the vocabulary says */
    int pieces;            /* print "id 'piece'" lines instead of one line of ids */
};

static void tokenize_usage(FILE *out) {
    fprintf(out, "usage: lockstep tokenize -m MODEL [-z TOKENIZER] [--no-bos] [--pieces] "
                 "(-f FILE | TEXT)\n");
}

static int parse_tokenize_options(int argc, char **argv, struct tokenize_options *o) {
    const char *cmd = "tokenize";
    *o = (struct tokenize_options){NULL, NULL, NULL, NULL, -1, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->model_path);
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->tokenizer_path);
        else if (!strcmp(a, "-f") || !strcmp(a, "--file"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->file_path);
        else if (!strcmp(a, "--no-bos"))
            o->add_bos = 0;
        else if (!strcmp(a, "--pieces"))
            o->pieces = 1;
        else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "lockstep tokenize: unknown option '%s' (see --help)\n", a);
            return -1;
        } else if (o->text) {
            fprintf(stderr, "lockstep tokenize: give one TEXT argument (quote it)\n");
            return -1;
        } else
            o->text = a;
        if (rc) return -1;
    }
    if (!o->model_path || (!o->text == !o->file_path)) {
        fprintf(stderr, "lockstep tokenize: need -m MODEL and either -f FILE or TEXT\n");
        return -1;
    }
    return 0;
}

/* Reads a whole file; NULL (message printed) on failure. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *data = NULL;
    long size;
    if (!f || fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) ||
        !(data = malloc((size_t)size + 1)) || fread(data, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "lockstep tokenize: cannot read %s\n", path);
        free(data);
        data = NULL;
    } else {
        *len = (size_t)size;
    }
    if (f) fclose(f);
    return data;
}

/* Loads just the vocabulary: from a GGUF's metadata (the file stays open:
 * the vocabulary may point into it), or a tokenizer.bin sized by a llama2.c
 * checkpoint's header. */
static int load_vocabulary(const struct tokenize_options *o, struct gguf_file **gguf,
                           struct tokenizer **tok) {
    char err[512];
    int failed;
    *gguf = NULL;
    if (!o->tokenizer_path) {
        failed = gguf_open(gguf, o->model_path, err, sizeof(err)) ||
                 tokenizer_load_gguf(tok, *gguf, err, sizeof(err));
    } else {
        struct model *model;
        failed = model_load(&model, o->model_path, err, sizeof(err));
        if (!failed) {
            failed = tokenizer_load_llama2c(tok, o->tokenizer_path, model->config.vocab_size, err,
                                            sizeof(err));
            model_free(model);
        }
    }
    if (failed) {
        fprintf(stderr, "lockstep tokenize: %s\n", err);
        if (*gguf) gguf_close(*gguf);
        return -1;
    }
    return 0;
}

static void print_tokens(const struct tokenizer *tok, const int *ids, int n, int pieces) {
    for (int i = 0; i < n; i++) {
        if (pieces) {
            size_t len;
            const char *piece = tokenizer_piece(tok, ids[i], &len);
            printf("%6d -> '%.*s'\n", ids[i], (int)len, piece);
        } else {
            printf("%s%d", i ? " " : "", ids[i]);
        }
    }
    if (!pieces) printf("\n");
}

int cli_tokenize(int argc, char **argv) {
    struct tokenize_options o;
    struct gguf_file *gguf;
    struct tokenizer *tok;
    char err[512], *owned = NULL;
    size_t len = 0;
    int parsed = parse_tokenize_options(argc, argv, &o), n_ids = 0, rc = 1;
    if (parsed) {
        tokenize_usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    const char *text = o.text;
    if (o.file_path) {
        if (!(owned = read_file(o.file_path, &len))) return 1;
        text = owned;
    } else {
        len = strlen(text);
    }
    if (load_vocabulary(&o, &gguf, &tok) == 0) {
        int add_bos = o.add_bos >= 0 ? o.add_bos : tokenizer_adds_bos(tok);
        int max_ids = tokenizer_max_ids(len);
        int *ids = malloc((size_t)max_ids * sizeof(int));
        if (ids && tokenizer_encode(tok, text, len, add_bos, ids, max_ids, &n_ids, err,
                                    sizeof(err)) == 0) {
            print_tokens(tok, ids, n_ids, o.pieces);
            rc = 0;
        } else {
            fprintf(stderr, "lockstep tokenize: %s\n", ids ? err : "out of memory");
        }
        free(ids);
        tokenizer_free(tok);
        if (gguf) gguf_close(gguf);
    }
    free(owned);
    return rc;
}
