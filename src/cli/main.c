/* main.c -- the lockstep command: dispatches to its subcommands, and says
 * which build it is (--version). */
#include "cli.h"
#include "runner/runner.h"
#include "tensor/tensor.h"

#include <stdio.h>
#include <string.h>

struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

static const struct subcommand subcommands[] = {
    {"generate", cli_generate, "generate text from a prompt"},
    {"bench", cli_bench, "measure prompt processing and generation speed"},
    {"convert", cli_convert, "write a random model, or convert a llama2.c checkpoint, to GGUF"},
    {"tokenize", cli_tokenize, "print the token ids of a text"},
    {"embed", cli_embed, "print a text's embedding (pooled last hidden states) as JSON"},
    {"runner", cli_runner, "serve one model instance on a unix socket (runner protocol)"},
    {"client", cli_client, "send requests to a runner (for tests and debugging)"},
    {"serve", cli_serve, "serve models over an OpenAI-compatible HTTP API"},
    {"probe", cli_probe, "describe this machine (cores, memory, instruction set) as JSON"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: lockstep <command> [options]   (lockstep <command> --help)\n"
                 "       lockstep -V, --version\n\n");
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        fprintf(out, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
}

/* The build, the runner protocol it speaks (ranks and gateway must agree)
 * and the kernels' instruction sets: all are compiled in, the best the CPU
 * has is used. */
static void print_version(void) {
    printf("lockstep %s\n", version_build());
    printf("runner protocol %d\n", RUNNER_PROTOCOL_VERSION);
    printf("instruction sets (%s):", tensor_arch_name());
    for (int isa = 0; isa < TENSOR_ISA_COUNT; isa++)
        if (tensor_isa_built((enum tensor_isa)isa))
            printf(" %s", tensor_isa_name((enum tensor_isa)isa));
    printf(" (this machine: %s)\n", tensor_isa_name(tensor_isa_best()));
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        print_version();
        return 0;
    }
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        if (strcmp(argv[1], subcommands[i].name) == 0)
            return subcommands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "lockstep: unknown command '%s' (lockstep --help lists them)\n", argv[1]);
    return 2;
}
