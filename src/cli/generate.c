/* generate.c -- `lockstep generate`: one prompt, streamed text, speed.
 *
 * The prompt is prefilled in chunks of --batch tokens, then tokens are
 * sampled one at a time and printed as soon as they form whole UTF-8
 * characters. Prompt and generation speeds go to stderr at the end. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>

struct generate_options {
    const char *model_path;
    const char *tokenizer_path;
    const char *prompt;
    int n_predict; /* tokens to generate */
    int n_threads;
    int batch;                    /* prefill chunk */
    int context;                  /* 0: the model's */
    int add_bos;                  /* -1: as the vocabulary says */
    int print_ids;                /* also print the generated ids on a last line */
    const char *logits_path;      /* --logits: every step's logits written here, or NULL */
    struct cli_parallel parallel; /* --tp, --comm, --comm-deadline */
    struct sampler_params sampling;
    enum tensor_type kv_type; /* --kv-type */
};

static void generate_usage(FILE *out) {
    fprintf(out, "usage: lockstep generate -m MODEL [-z TOKENIZER] [-p PROMPT] [-n N] [options]\n"
                 "  -m, --model FILE        GGUF model or llama2.c checkpoint\n"
                 "  -z, --tokenizer FILE    llama2.c tokenizer.bin (for .bin checkpoints)\n"
                 "  -p, --prompt TEXT       prompt (default: empty)\n"
                 "  -n, --n-predict N       tokens to generate (default 128)\n"
                 "  -t, --threads N         threads (default 2)\n"
                 "  --temp T                temperature, 0 = greedy (default 0.8)\n"
                 "  --top-k K, --top-p P, --min-p P, --repeat-penalty R, --repeat-last-n N\n"
                 "  -s, --seed S            sampling seed (default 1)\n"
                 "  -c, --ctx N             context length (default: the model's)\n"
                 "  -b, --batch N           prompt tokens per forward pass (default 512)\n"
                 "  --no-bos                do not put BOS before the prompt\n" CLI_KV_TYPE_HELP
                 "  --print-ids             print the generated token ids on a last "
                 "line\n"
                 "  --logits FILE           write the logits of every generated position to FILE\n"
                 "                          (vocabulary-size little-endian floats each, in "
                 "order)\n" CLI_PARALLEL_HELP);
}

static int parse_sampling_option(const char *arg, int argc, char **argv, int *i,
                                 struct sampler_params *s, int *matched) {
    const char *cmd = "generate";
    int seed;
    *matched = 1;
    if (!strcmp(arg, "--temp")) return cli_float_value(cmd, argc, argv, i, &s->temperature);
    if (!strcmp(arg, "--top-k")) return cli_int_value(cmd, argc, argv, i, 0, 1 << 30, &s->top_k);
    if (!strcmp(arg, "--top-p")) return cli_float_value(cmd, argc, argv, i, &s->top_p);
    if (!strcmp(arg, "--min-p")) return cli_float_value(cmd, argc, argv, i, &s->min_p);
    if (!strcmp(arg, "--repeat-penalty"))
        return cli_float_value(cmd, argc, argv, i, &s->repeat_penalty);
    if (!strcmp(arg, "--repeat-last-n"))
        return cli_int_value(cmd, argc, argv, i, 0, 1 << 20, &s->repeat_last_n);
    if (!strcmp(arg, "-s") || !strcmp(arg, "--seed")) {
        if (cli_int_value(cmd, argc, argv, i, 0, 2147483647, &seed)) return -1;
        s->seed = (uint64_t)seed;
        return 0;
    }
    *matched = 0;
    return 0;
}

/* Returns 0, 1 for --help, or -1 on a bad option. */
static int parse_generate_options(int argc, char **argv, struct generate_options *o) {
    const char *cmd = "generate";
    memset(o, 0, sizeof(*o));
    o->prompt = "";
    o->n_predict = 128;
    o->n_threads = 2;
    o->batch = 512;
    o->add_bos = -1;
    o->kv_type = TENSOR_F16;
    sampler_params_default(&o->sampling);
    cli_parallel_default(&o->parallel);
    o->sampling.seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int matched, rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (parse_sampling_option(a, argc, argv, &i, &o->sampling, &matched)) return -1;
        if (matched) continue;
        if (cli_parallel_option(cmd, argc, argv, &i, &o->parallel, &matched)) return -1;
        if (matched) continue;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->model_path);
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->tokenizer_path);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->prompt);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            rc = cli_int_value(cmd, argc, argv, &i, 0, 1 << 24, &o->n_predict);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            rc = cli_int_value(cmd, argc, argv, &i, 1, 256, &o->n_threads);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx"))
            rc = cli_int_value(cmd, argc, argv, &i, 1, 1 << 24, &o->context);
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch"))
            rc = cli_int_value(cmd, argc, argv, &i, 1, 1 << 16, &o->batch);
        else if (!strcmp(a, "--kv-type"))
            rc = cli_kv_type_value(cmd, argc, argv, &i, &o->kv_type);
        else if (!strcmp(a, "--no-bos"))
            o->add_bos = 0;
        else if (!strcmp(a, "--print-ids"))
            o->print_ids = 1;
        else if (!strcmp(a, "--logits"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->logits_path);
        else {
            fprintf(stderr, "lockstep generate: unknown option '%s' (see --help)\n", a);
            return -1;
        }
        if (rc) return -1;
    }
    return 0;
}

/* Samples and prints up to n_predict tokens after the prompt in tokens[0..n_prompt).
 * Returns the number generated, or -1. */
static int decode(struct engine *engine, const struct cli_model *m, struct kv_sequence *seq,
                  int *tokens, int n_prompt, const struct generate_options *o) {
    char err[256], text[1024];
    FILE *logits = NULL;
    struct sampler sampler;
    struct sampler_scratch scratch;
    struct tokenizer_stream stream;
    int n = n_prompt, eos = tokenizer_eos(m->tokenizer);
    int limit = n_prompt + o->n_predict;
    if (limit > engine->context_length) limit = engine->context_length;
    if (o->logits_path && !(logits = fopen(o->logits_path, "wb"))) {
        fprintf(stderr, "lockstep generate: cannot write %s: %s\n", o->logits_path,
                strerror(errno));
        return -1;
    }
    if (sampler_scratch_init(&scratch, m->model->config.vocab_size)) {
        if (logits) fclose(logits);
        return -1;
    }
    sampler_init(&sampler, &o->sampling, m->model->config.vocab_size);
    /* text right after BOS starts the output: drop its SPM space prefix */
    int after_bos = n_prompt == 1 && tokens[0] == tokenizer_bos(m->tokenizer);
    tokenizer_stream_init(&stream, m->tokenizer, after_bos);
    int failed = 0;
    while (n < limit) {
        size_t vocab = (size_t)m->model->config.vocab_size;
        if (logits && fwrite(engine->logits, sizeof(float), vocab, logits) != vocab) {
            fprintf(stderr, "lockstep generate: writing %s failed\n", o->logits_path);
            failed = 1;
            break;
        }
        int next = sampler_sample(&sampler, &scratch, engine->logits, tokens, n);
        tokens[n++] = next;
        if (next == eos) break;
        size_t n_text = tokenizer_stream_push(&stream, next, text, sizeof(text));
        fwrite(text, 1, n_text, stdout);
        fflush(stdout);
        if (n == limit) break;
        if (engine_run_sequence(engine, seq, &tokens[n - 1], 1, n - 1, err, sizeof(err))) {
            fprintf(stderr, "lockstep generate: %s\n", err);
            failed = 1;
            break;
        }
    }
    size_t n_text = tokenizer_stream_flush(&stream, text, sizeof(text));
    fwrite(text, 1, n_text, stdout);
    sampler_scratch_free(&scratch);
    if (logits && fclose(logits) != 0 && !failed) {
        fprintf(stderr, "lockstep generate: writing %s failed\n", o->logits_path);
        failed = 1;
    }
    return failed ? -1 : n - n_prompt;
}

/* Tokenizes the prompt into *tokens (room for n_predict more); returns the
 * prompt's length, or -1 (message printed). */
static int encode_prompt(const struct cli_model *m, const struct generate_options *o, int context,
                         int **tokens) {
    char err[512];
    size_t prompt_len = strlen(o->prompt);
    int max_ids = tokenizer_max_ids(prompt_len), n_prompt = 0;
    int add_bos = o->add_bos >= 0 ? o->add_bos : tokenizer_adds_bos(m->tokenizer);
    *tokens = malloc((size_t)(max_ids + o->n_predict + 1) * sizeof(int));
    if (!*tokens || tokenizer_encode(m->tokenizer, o->prompt, prompt_len, add_bos, *tokens, max_ids,
                                     &n_prompt, err, sizeof(err))) {
        fprintf(stderr, "lockstep generate: %s\n", *tokens ? err : "out of memory");
        return -1;
    }
    if (n_prompt == 0 && tokenizer_bos(m->tokenizer) >= 0) {
        /* an empty prompt (and no BOS added): start from BOS, as text would */
        (*tokens)[n_prompt++] = tokenizer_bos(m->tokenizer);
    } else if (n_prompt == 0) {
        fprintf(stderr, "lockstep generate: the prompt is empty and the vocabulary has no BOS "
                        "token to start from; give a prompt (-p)\n");
        return -1;
    }
    if (n_prompt >= context) {
        fprintf(stderr, "lockstep generate: the prompt is %d tokens; the context holds %d\n",
                n_prompt, context);
        return -1;
    }
    return n_prompt;
}

static void print_result(const int *tokens, int n_prompt, int n_gen,
                         const struct generate_options *o, double prompt_seconds,
                         double generation_seconds) {
    printf("\n");
    if (o->print_ids) {
        for (int i = n_prompt; i < n_prompt + n_gen; i++)
            printf("%s%d", i > n_prompt ? " " : "", tokens[i]);
        printf("\n");
    }
    fflush(stdout);
    fprintf(stderr, "prompt: %d tokens, %.2f tok/s; generation: %d tokens, %.2f tok/s\n", n_prompt,
            n_prompt / prompt_seconds, n_gen, n_gen > 1 ? (n_gen - 1) / generation_seconds : 0.0);
}

/* Prefills the prompt and generates on the leader's engine; 0 or -1. */
static int generate_text(struct engine *engine, const struct cli_model *m, int *tokens,
                         int n_prompt, const struct generate_options *o) {
    char err[512];
    struct kv_sequence seq = {0};
    int total = n_prompt + o->n_predict;
    int rc = -1;
    if (total > engine->context_length) total = engine->context_length;
    if (kv_sequence_reserve(&engine->kv, &seq, total) != 0) {
        fprintf(stderr, "lockstep generate: KV cache too small for %d positions\n", total);
        return -1;
    }
    fputs(o->prompt, stdout);
    double t0 = cli_now();
    if (engine_run_sequence(engine, &seq, tokens, n_prompt, 0, err, sizeof(err)) != 0) {
        fprintf(stderr, "lockstep generate: %s\n", err);
    } else {
        double t1 = cli_now();
        int n_gen = decode(engine, m, &seq, tokens, n_prompt, o);
        if (n_gen >= 0) {
            print_result(tokens, n_prompt, n_gen, o, t1 - t0, cli_now() - t1);
            rc = 0;
        }
    }
    kv_sequence_release(&engine->kv, &seq);
    return rc;
}

/* Returns the process exit status. */
static int run_generation(const struct cli_model *m, const struct generate_options *o) {
    char err[512];
    int context = o->context > 0 ? o->context : m->model->config.context_length;
    int *tokens = NULL, rc = 1;
    int n_prompt = encode_prompt(m, o, context, &tokens);
    struct engine_group group = cli_parallel_group(&o->parallel);
    struct engine_params params = {.n_threads = o->n_threads,
                                   .max_tokens = o->batch < n_prompt ? o->batch : n_prompt,
                                   .context_length = context,
                                   .kv_block_size = 16,
                                   .kv_type = o->kv_type};
    if (n_prompt <= 0 || cli_read_fault("generate", &params.fault)) {
        rc = 1;
    } else if ((rc = engine_group_start(&group, m->model, &params, err, sizeof(err))) != 0) {
        fprintf(stderr, "lockstep generate: %s\n", err);
    } else {
        struct engine *leader = engine_group_leader(&group);
        rc = 0;
        if (leader && generate_text(leader, m, tokens, n_prompt, o) != 0)
            rc = engine_exit_code(leader);
        cli_leave_if_collective_failed(leader);
    }
    if (engine_group_stop(&group, err, sizeof(err)) != 0 && rc == 0) {
        fprintf(stderr, "lockstep generate: %s\n", err);
        rc = 1;
    }
    free(tokens);
    return rc;
}

int cli_generate(int argc, char **argv) {
    struct generate_options o;
    struct cli_model m;
    int parsed = parse_generate_options(argc, argv, &o);
    if (parsed) {
        generate_usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    if (cli_model_load(&m, "generate", o.model_path, o.tokenizer_path)) return 1;
    int rc = run_generation(&m, &o);
    cli_model_free(&m);
    return rc;
}
