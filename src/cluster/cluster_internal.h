/* cluster_internal.h -- what the files of the cluster module share and the
 * rest of the program does not see. */
#ifndef LOCKSTEP_CLUSTER_INTERNAL_H
#define LOCKSTEP_CLUSTER_INTERNAL_H

#include <stddef.h>

#include "cluster/cluster.h"

/* 1 if the length bytes at name are a host name this module takes: 1 to
 * CLUSTER_HOST_NAME_MAX - 1 letters, digits, '.', '-' or '_'. Other
 * characters would be ambiguous in a placement's spelling ("a:2+b") or in
 * mpirun's --host list, or would need quoting in a shell. */
int cluster_name_valid(const char *name, size_t length);

/* The memory placement may still use on host (its limit, else its probed
 * memory, less what usage says is placed there); -1 if unknown. */
int64_t cluster_free_memory(const struct cluster_host *host, const struct cluster_usage *usage);
/* 1 if host may hold ranks computing with contract numerics ("": any);
 * an unprobed host matches any. */
int cluster_numerics_match(const struct cluster_host *host, const char *numerics);
/* 1 if host i may take ranks of r: not lost, drained or excluded. */
int cluster_host_open(const struct cluster_host *host, const struct cluster_request *r, int i);

#endif
