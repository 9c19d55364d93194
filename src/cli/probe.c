/* probe.c -- `lockstep probe`: what this machine can hold (cores, memory,
 * instruction set, architecture, numerics contract) as one JSON line on
 * stdout. The gateway runs it on each host of the cluster as `mpirun -np 1
 * --host H lockstep probe` and parses the last line of the output
 * (cluster_probe_parse). */
#include "cli.h"
#include "cluster/cluster.h"

#include <stdio.h>
#include <string.h>

static void probe_usage(FILE *out) {
    fprintf(out, "usage: lockstep probe\n\n"
                 "Prints one JSON line describing this machine, for `lockstep serve --cluster`:\n"
                 "  {\"hostname\":\"node1\",\"cores\":8,\"memory_total\":BYTES,"
                 "\"memory_available\":BYTES,\"isa\":\"avx2\",\"load\":0.50,\"arch\":\"x86_64\",\n"
                 "   \"numerics\":\"" CLUSTER_NUMERICS "\"}\n"
                 "isa is the instruction set a runner here would use (LOCKSTEP_ISA caps it),\n"
                 "arch the machine (x86_64, aarch64, ...), numerics the float reduction order\n"
                 "of this build's kernels: only hosts of one numerics share an instance.\n"
                 "Exits 0, or 1 with the reason on stderr.\n");
}

int cli_probe(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            probe_usage(stdout);
            return 0;
        }
        fprintf(stderr, "lockstep probe: unknown argument '%s' (see --help)\n", argv[i]);
        return 2;
    }
    struct cluster_probe probe;
    char err[256] = "", line[512];
    if (cluster_probe_local(&probe, err, sizeof(err)) ||
        cluster_probe_format(&probe, line, sizeof(line)) < 0) {
        fprintf(stderr, "lockstep probe: %s\n", err[0] ? err : "cannot describe this machine");
        return 1;
    }
    printf("%s\n", line);
    return fflush(stdout) == 0 ? 0 : 1;
}
