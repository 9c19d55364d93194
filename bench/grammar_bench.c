/* grammar_bench.c -- what a grammar's token mask adds to a decode step
 * (issue 23's target: at most 10% of a decode step of one sequence of the
 * random 85M model with a 128,256-token vocabulary, for a JSON-object
 * grammar).
 *
 * usage: grammar_bench MODEL [THREADS]
 *   MODEL: a GGUF with its vocabulary, e.g.
 *     lockstep convert --random --dim 768 --hidden 2048 --layers 12 --heads 12 \
 *         --kv-heads 12 --vocab 128256 --ctx 1024 --type q8_0 --seed 1 -o m.gguf
 *   THREADS: the engine's threads (default 2)
 * Prints:
 *   1. the median time of a decode step of one sequence (one token through
 *      the model, logits included: engine_run_sequence), over DECODE_STEPS
 *      steps after a short prompt;
 *   2. the time of grammar_mask at every token of a JSON object being
 *      generated (keys, strings with escapes and non-ASCII characters,
 *      numbers, booleans, null, nested objects and arrays), tokenized by the
 *      model's tokenizer and taken token by token as a sampler would, each
 *      walk from a new state (so with an empty memo, as a new request
 *      starts): median, p99 and worst, and the same with the memo off
 *      (every mask walks the trie computing every transition);
 *   3. the ratios mask/decode (the target is median <= 0.10), and the time
 *      to build the vocabulary's trie (once per model). */
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DECODE_STEPS 48 /* timed decode steps */
#define PROMPT       16 /* tokens before them */
#define WALKS        5  /* walks of the JSON text, each from a new state */
#define MAX_IDS      4096

/* A JSON grammar in the manner of llama.cpp's json.gbnf. */
static const char json_gbnf[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" "
    "[0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

/* What the model writes: one JSON object. */
static const char json_text[] =
    "{\"id\": 12345, \"name\": \"Ada Lovelace\", \"email\": \"ada@example.com\", "
    "\"active\": true, \"score\": 97.25, \"tags\": [\"math\", \"poetry\", \"engines\"],\n"
    "  \"address\": {\"street\": \"12 St James's Square\", \"city\": \"London\", "
    "\"zip\": \"SW1Y 4JH\", \"geo\": {\"lat\": 51.5074, \"lon\": -0.1278}},\n"
    "  \"notes\": \"Wrote the first published algorithm; \\\"notes\\\" on the Analytical "
    "Engine (1843).\\nCaf\xc3\xa9 \xe2\x98\x95 r\xc3\xa9sum\xc3\xa9 \\u00e9\", "
    "\"children\": [{\"name\": \"Byron\", \"born\": 1836}, {\"name\": \"Anne\", \"born\": 1837}, "
    "{\"name\": \"Ralph\", \"born\": 1839}], \"spouse\": null, \"ratio\": 1.5e-3}";

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of n sorted times. */
static double quantile(const double *sorted, int n, double q) {
    int i = (int)(q * (n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

/* Median seconds of a decode step of one sequence; -1 on error. */
static double time_decode(const struct model *model, int n_threads) {
    char err[512];
    struct engine engine;
    struct engine_params params = {.n_threads = n_threads,
                                   .max_tokens = PROMPT,
                                   .context_length = PROMPT + DECODE_STEPS + 1,
                                   .kv_block_size = 16,
                                   .kv_type = TENSOR_F16};
    if (engine_init(&engine, model, &params, err, sizeof(err))) {
        fprintf(stderr, "grammar_bench: %s\n", err);
        return -1;
    }
    struct kv_sequence seq = {0};
    int tokens[PROMPT + DECODE_STEPS], vocab = model->config.vocab_size;
    double times[DECODE_STEPS], median = -1;
    for (int i = 0; i < PROMPT + DECODE_STEPS; i++) tokens[i] = (int)((i * 7919L + 11) % vocab);
    int rc = kv_sequence_reserve(&engine.kv, &seq, PROMPT + DECODE_STEPS) ||
             engine_run_sequence(&engine, &seq, tokens, PROMPT, 0, err, sizeof(err));
    for (int i = 0; rc == 0 && i < DECODE_STEPS; i++) {
        double t0 = now();
        rc = engine_run_sequence(&engine, &seq, &tokens[PROMPT + i], 1, PROMPT + i, err,
                                 sizeof(err));
        times[i] = now() - t0;
    }
    if (rc == 0) {
        qsort(times, DECODE_STEPS, sizeof(double), compare_doubles);
        median = times[DECODE_STEPS / 2];
    } else {
        fprintf(stderr, "grammar_bench: decode: %s\n", err);
    }
    kv_sequence_release(&engine.kv, &seq);
    engine_free(&engine);
    return median;
}

/* The vocabulary's trie (EOS as the end token); NULL on error. */
static struct grammar_vocab *build_vocab(const struct tokenizer *tok, double *seconds) {
    char err[256];
    int n = tokenizer_vocab_size(tok), eos = tokenizer_eos(tok);
    const char **bytes = malloc((size_t)n * sizeof(*bytes));
    size_t *lengths = malloc((size_t)n * sizeof(*lengths));
    struct grammar_vocab *v = NULL;
    for (int i = 0; bytes && lengths && i < n; i++)
        bytes[i] = tokenizer_token_bytes(tok, i, &lengths[i]);
    double t0 = now();
    if (bytes && lengths &&
        grammar_vocab_create(&v, n, bytes, lengths, &eos, eos >= 0, err, sizeof(err)))
        fprintf(stderr, "grammar_bench: %s\n", err);
    *seconds = now() - t0;
    free(bytes);
    free(lengths);
    return v;
}

/* Walks the JSON text's tokens from a new state: the time of each mask
 * into times (n of them). Returns the tokens allowed in all, or -1. */
static long walk_json(const struct grammar *g, const struct grammar_vocab *v,
                      const struct tokenizer *tok, const int *ids, int n, size_t memo_limit,
                      double *times) {
    struct grammar_state *s = grammar_state_create(g);
    uint8_t *allowed = malloc((size_t)grammar_vocab_size(v));
    long total = 0;
    if (!s || !allowed) total = -1;
    if (s) grammar_state_set_memo_limit(s, memo_limit);
    for (int i = 0; total >= 0 && i < n; i++) {
        size_t length;
        const char *bytes = tokenizer_token_bytes(tok, ids[i], &length);
        double t0 = now();
        int count = grammar_mask(s, v, allowed);
        times[i] = now() - t0;
        if (count < 0 || !allowed[ids[i]] || grammar_accept(s, bytes, length)) {
            fprintf(stderr, "grammar_bench: token %d (at %d) is not allowed\n", ids[i], i);
            total = -1;
        } else {
            total += count;
        }
    }
    if (total >= 0 && !grammar_can_end(s)) {
        fprintf(stderr, "grammar_bench: the JSON text does not end the grammar\n");
        total = -1;
    }
    free(allowed);
    grammar_state_free(s);
    return total;
}

/* Prints the mask times of WALKS walks (n masks each); median in *median. */
static int report_masks(const char *label, const struct grammar *g, const struct grammar_vocab *v,
                        const struct tokenizer *tok, const int *ids, int n, size_t memo_limit,
                        double decode, double *median) {
    double *times = malloc((size_t)n * WALKS * sizeof(double));
    long allowed = 0;
    for (int w = 0; times && w < WALKS && allowed >= 0; w++)
        allowed = walk_json(g, v, tok, ids, n, memo_limit, times + (size_t)w * n);
    if (!times || allowed < 0) {
        free(times);
        return -1;
    }
    int total = n * WALKS;
    qsort(times, (size_t)total, sizeof(double), compare_doubles);
    *median = quantile(times, total, 0.5);
    double p99 = quantile(times, total, 0.99);
    printf("| %s | %.1f | %.1f | %.1f | %.3f | %.3f | %ld |\n", label, *median * 1e6, p99 * 1e6,
           times[total - 1] * 1e6, *median / decode, p99 / decode, allowed / n);
    free(times);
    return 0;
}

/* The grammar part: the trie, the JSON walks with and without memo. */
static int bench_masks(const struct tokenizer *tok, double decode) {
    char err[512];
    struct grammar *g = NULL;
    double trie_seconds, median, median_off;
    int ids[MAX_IDS], n = 0, rc = -1;
    if (grammar_compile(&g, json_gbnf, strlen(json_gbnf), err, sizeof(err))) {
        fprintf(stderr, "grammar_bench: %s\n", err);
        return -1;
    }
    struct grammar_vocab *v = build_vocab(tok, &trie_seconds);
    if (v && tokenizer_encode(tok, json_text, strlen(json_text), 0, ids, MAX_IDS, &n, err,
                              sizeof(err)) == 0) {
        printf("vocabulary: %d tokens, trie built in %.1f ms; JSON object: %zu bytes, %d "
               "tokens\n",
               grammar_vocab_size(v), trie_seconds * 1e3, strlen(json_text), n);
        printf("| grammar_mask | median us | p99 us | worst us | median/decode | p99/decode | "
               "tokens allowed (mean) |\n|---|---|---|---|---|---|---|\n");
        rc = report_masks("memo on (default)", g, v, tok, ids, n, GRAMMAR_MEMO_BYTES, decode,
                          &median);
        if (rc == 0) rc = report_masks("memo off", g, v, tok, ids, n, 0, decode, &median_off);
        if (rc == 0)
            printf("target: median mask / decode step <= 0.10: %.3f, %s\n", median / decode,
                   median / decode <= 0.10 ? "met" : "NOT met");
    } else if (v) {
        fprintf(stderr, "grammar_bench: %s\n", err);
    }
    grammar_vocab_free(v);
    grammar_free(g);
    return rc;
}

int main(int argc, char **argv) {
    char err[512];
    struct model *model;
    struct tokenizer *tok = NULL;
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: grammar_bench MODEL [THREADS]\n");
        return 2;
    }
    int n_threads = argc == 3 ? atoi(argv[2]) : 2;
    if (model_load(&model, argv[1], err, sizeof(err)) ||
        (model->gguf && tokenizer_load_gguf(&tok, model->gguf, err, sizeof(err)))) {
        fprintf(stderr, "grammar_bench: %s\n", err);
        return 1;
    }
    int rc = 1;
    if (!tok) {
        fprintf(stderr, "grammar_bench: %s has no vocabulary (a GGUF is needed)\n", argv[1]);
    } else {
        double decode = time_decode(model, n_threads > 0 ? n_threads : 1);
        if (decode > 0) {
            printf("model: %s (vocab %d), threads %d: decode step median %.2f ms\n", argv[1],
                   model->config.vocab_size, n_threads, decode * 1e3);
            rc = bench_masks(tok, decode) ? 1 : 0;
        }
    }
    tokenizer_free(tok);
    model_free(model);
    return rc;
}
