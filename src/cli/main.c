/* main.c -- the lockstep command: dispatches to its subcommands. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        printf("usage: lockstep <generate|bench|convert|tokenize> [options]\n");
        return argc < 2 ? 2 : 0;
    }
    fprintf(stderr, "lockstep: unknown subcommand '%s'\n", argv[1]);
    return 2;
}
