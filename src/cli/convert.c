/* convert.c -- `lockstep convert`: writes GGUF files.
 *
 *   --random: a seeded random model of any shape (tests and benchmarks);
 *   IN.gguf: a GGUF model requantized to --type, its tokenizer kept;
 *   IN.bin -z tok.bin: a llama2.c checkpoint and its tokenizer, with the
 *   weights quantized on the way if --type asks (see convert_llama2c.c). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void convert_usage(FILE *out) {
    fprintf(out,
            "usage: lockstep convert --random [--arch llama|qwen2|qwen3] [--dim N] [--hidden N]\n"
            "           [--layers N] [--heads N] [--kv-heads N] [--vocab N] [--ctx N]\n"
            "           [--type TYPE] [--seed N] -o FILE.gguf\n"
            "       lockstep convert IN.gguf --type TYPE -o FILE.gguf\n"
            "       lockstep convert IN.bin -z TOKENIZER.bin [--type TYPE] -o FILE.gguf\n"
            "TYPE: f32 f16 bf16 q8_0 q6_k q5_k q5_k_m q5_1 q5_0 q4_k q4_k_m q4_1 q4_0\n"
            "      iq4_xs iq4_nl q3_k q2_k (default f32)\n");
}

struct convert_options {
    int random;
    const char *input;          /* llama2.c checkpoint */
    const char *tokenizer_path; /* its tokenizer.bin */
    const char *output;
    const char *type_name;
    const char *arch_name;
    struct model_random_params shape;
};

static int parse_arch(const char *name, enum model_arch *arch) {
    for (int a = MODEL_ARCH_LLAMA; a <= MODEL_ARCH_QWEN3; a++)
        if (!strcmp(name, model_arch_name((enum model_arch)a))) {
            *arch = (enum model_arch)a;
            return 0;
        }
    fprintf(stderr, "lockstep convert: --arch '%s' is not one of llama, qwen2, qwen3\n", name);
    return -1;
}

/* Shape options of --random; *matched is 0 if arg is not one. */
static int parse_shape_option(const char *a, int argc, char **argv, int *i,
                              struct model_random_params *s, int *matched) {
    const char *cmd = "convert";
    int seed;
    *matched = 1;
    if (!strcmp(a, "--dim")) return cli_int_value(cmd, argc, argv, i, 1, 1 << 16, &s->dim);
    if (!strcmp(a, "--hidden"))
        return cli_int_value(cmd, argc, argv, i, 1, 1 << 18, &s->hidden_dim);
    if (!strcmp(a, "--layers")) return cli_int_value(cmd, argc, argv, i, 1, 1024, &s->n_layers);
    if (!strcmp(a, "--heads")) return cli_int_value(cmd, argc, argv, i, 1, 1024, &s->n_heads);
    if (!strcmp(a, "--kv-heads")) return cli_int_value(cmd, argc, argv, i, 1, 1024, &s->n_kv_heads);
    if (!strcmp(a, "--vocab")) return cli_int_value(cmd, argc, argv, i, 1, 1 << 22, &s->vocab_size);
    if (!strcmp(a, "--ctx"))
        return cli_int_value(cmd, argc, argv, i, 1, 1 << 24, &s->context_length);
    if (!strcmp(a, "--seed")) {
        if (cli_int_value(cmd, argc, argv, i, 0, 2147483647, &seed)) return -1;
        s->seed = (uint64_t)seed;
        return 0;
    }
    *matched = 0;
    return 0;
}

static int parse_convert_options(int argc, char **argv, struct convert_options *o) {
    const char *cmd = "convert";
    memset(o, 0, sizeof(*o));
    o->shape = (struct model_random_params){MODEL_ARCH_LLAMA, 64, 128,           2, 4, 0, 512, 256,
                                            TENSOR_F32,       1,  MODEL_MIX_NONE};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int matched, rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (parse_shape_option(a, argc, argv, &i, &o->shape, &matched)) return -1;
        if (matched) continue;
        if (!strcmp(a, "--random"))
            o->random = 1;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->output);
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->tokenizer_path);
        else if (!strcmp(a, "--type"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->type_name);
        else if (!strcmp(a, "--arch"))
            rc = cli_string_value(cmd, argc, argv, &i, &o->arch_name);
        else if (a[0] == '-') {
            fprintf(stderr, "lockstep convert: unknown option '%s' (see --help)\n", a);
            return -1;
        } else if (o->input) {
            fprintf(stderr, "lockstep convert: more than one input file ('%s')\n", a);
            return -1;
        } else
            o->input = a;
        if (rc) return -1;
    }
    if (o->type_name &&
        model_file_type_from_name(o->type_name, &o->shape.type, &o->shape.mix) != 0) {
        fprintf(stderr,
                "lockstep convert: --type '%s' is not a type lockstep writes (see --help)\n",
                o->type_name);
        return -1;
    }
    if (o->arch_name && parse_arch(o->arch_name, &o->shape.arch)) return -1;
    if (o->shape.n_kv_heads == 0) o->shape.n_kv_heads = o->shape.n_heads;
    if (!o->output || o->random == !!o->input) {
        fprintf(stderr, "lockstep convert: need -o FILE and either --random or an input file\n");
        return -1;
    }
    return 0;
}

/* IN.gguf requantized: its config, tensors and tokenizer keys, the
 * matrices in the type asked for. */
static int convert_gguf(const struct convert_options *o) {
    char err[512];
    struct model *model;
    if (model_load(&model, o->input, err, sizeof(err))) {
        fprintf(stderr, "lockstep convert: %s\n", err);
        return -1;
    }
    int rc = model_write_gguf(model, o->shape.type, o->shape.mix, NULL, o->type_name, o->output,
                              err, sizeof(err));
    if (rc) fprintf(stderr, "lockstep convert: %s\n", err);
    model_free(model);
    return rc;
}

int cli_convert(int argc, char **argv) {
    struct convert_options o;
    char err[512];
    int parsed = parse_convert_options(argc, argv, &o);
    if (parsed) {
        convert_usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    if (o.random) {
        if (model_write_random(&o.shape, o.output, err, sizeof(err))) {
            fprintf(stderr, "lockstep convert: %s\n", err);
            return 1;
        }
    } else if (model_is_gguf(o.input) ? convert_gguf(&o)
                                      : convert_llama2c(o.input, o.tokenizer_path, o.shape.type,
                                                        o.shape.mix, o.output)) {
        return 1;
    }
    printf("wrote %s\n", o.output);
    return 0;
}
