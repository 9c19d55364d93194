/* cluster.h -- the machines `lockstep serve` may place ranks on, and where
 * an instance's ranks go.
 *
 * Hosts come from an Open MPI hostfile (`--cluster FILE`; without one the
 * cluster is this machine alone), and what each can hold is learnt by probing
 * it (`lockstep probe`, run on the host through mpirun, prints one JSON line).
 * A model's memory per rank at a tensor-parallel degree is known from its
 * file before loading (cluster_model_need), and the placement policy
 * (cluster_place) is a pure function of the hosts, what is already placed on
 * them and the request, so it is tested with tables.
 *
 * The module sits above runner and below gateway; this header includes
 * nothing of engine, comm or tensor (the gateway includes it). Functions that
 * can fail return 0, or -1 with a one-line message in err/why (errlen bytes)
 * for the caller to print. */
#ifndef LOCKSTEP_CLUSTER_H
#define LOCKSTEP_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

struct model;

#define CLUSTER_HOST_NAME_MAX 64
#define CLUSTER_HOSTS_MAX     64
#define CLUSTER_RANKS_MAX     64  /* RUNNER_RANKS_MAX (static-asserted in place.c) */
#define CLUSTER_ISA_MAX       16  /* an ISA name: [a-z0-9_]{1,15} */
#define CLUSTER_ARCH_MAX      16  /* an architecture: [a-z0-9_]{1,15} */
#define CLUSTER_NUMERICS_MAX  32  /* a numerics contract: [a-z0-9._-]{1,31} */
#define CLUSTER_PATH_MAX      256 /* a host's lockstep= and wrapper= (255 bytes at most) */

/* The numerics contract of this build: the name of the one reduction order
 * every tensor kernel of every instruction set follows (src/tensor), so
 * that hosts reporting the same name compute the same float bits whatever
 * their architecture or ISA, and the ranks of an instance (or a request
 * moved between placements) may be spread over them without changing a
 * token (DESIGN.md I5, I8). It must change whenever any kernel's float
 * order changes; this is the only place that spells it. */
#define CLUSTER_NUMERICS "lockstep-canonical-1"
/* What a probe from a build older than the field reports as its numerics
 * (and arch): such hosts share instances only with each other. */
#define CLUSTER_UNKNOWN "unknown"

/* ======================= hosts (hostfile.c) ======================= */

/* One host of the cluster: what the hostfile says, then what probes learn. */
struct cluster_host {
    char name[CLUSTER_HOST_NAME_MAX]; /* as in the hostfile: what mpirun's --host takes */
    int slots;                        /* ranks it may hold (slots=N; default 1 as Open MPI) */
    int max_slots;                    /* max_slots=N (0: not given); kept for mpirun */
    int64_t memory_limit;             /* memory=SIZE in bytes (0: not given; use the probe's) */
    int local;                        /* 1: this machine (localhost, 127.x, or gethostname()) */
    int drained; /* 1: cordoned (POST /admin/hosts/NAME/drain): nothing is placed here */
    /* what runs lockstep there, for a cluster whose hosts differ (another
     * architecture's build at its own path, or one run under an emulator):
     * both "" when the file names neither, and the host runs the gateway's
     * binary (under --runner-wrapper, for local runners) */
    char lockstep[CLUSTER_PATH_MAX]; /* lockstep=PATH: the binary there, absolute ("": the
                                        gateway's own path) */
    char wrapper[CLUSTER_PATH_MAX];  /* wrapper=PROGRAM: runs it there (qemu-aarch64), a name
                                        found on PATH or an absolute path ("": none) */
    /* learnt by probing */
    int probed;                  /* 1: a probe answered at least once */
    int lost;                    /* 1: the latest probe failed (unreachable) */
    int cores;                   /* online CPUs */
    int64_t memory_total;        /* bytes (MemTotal) */
    int64_t memory_available;    /* bytes (MemAvailable) */
    double load;                 /* the 1-minute load average the latest probe read */
    char isa[CLUSTER_ISA_MAX];   /* the instruction set a runner there uses ("avx2", "neon") */
    char arch[CLUSTER_ARCH_MAX]; /* its machine, "x86_64" or "aarch64" ("": unprobed) */
    char numerics[CLUSTER_NUMERICS_MAX]; /* its build's CLUSTER_NUMERICS ("": unprobed, which
                                            placement takes as matching any) */
};

/* Parses an Open MPI hostfile: one host per line, `NAME [slots=N] [max_slots=N]
 * [memory=SIZE] [lockstep=PATH] [wrapper=PROGRAM]`, `#` comments, blank
 * lines; SIZE takes K/M/G/T suffixes (powers of 1024, optional "iB"/"B"),
 * PATH is absolute, PROGRAM a name (found on PATH) or an absolute path,
 * both below CLUSTER_PATH_MAX bytes without control characters. An unknown
 * key, a bad number, size, path or program, a duplicate host, more than
 * CLUSTER_HOSTS_MAX hosts or no host at all is an error naming path:line
 * and the word. */
int cluster_hostfile_parse(const char *text, size_t length, const char *path,
                           struct cluster_host *hosts, int *n_hosts, char *err, size_t errlen);
int cluster_hostfile_load(const char *path, struct cluster_host *hosts, int *n_hosts, char *err,
                          size_t errlen);
/* The cluster without a hostfile: this machine alone ("localhost", slots =
 * online CPUs, local). */
void cluster_host_local(struct cluster_host *host);
/* 1 if name is this machine: "localhost", an address 127.x.y.z or ::1, or
 * gethostname()'s name (or its first label). */
int cluster_host_is_local(const char *name);
/* The index of the host called name, or -1. */
int cluster_host_find(const struct cluster_host *hosts, int n_hosts, const char *name);
/* 1 if the hostfile names what runs lockstep on host (lockstep= or
 * wrapper=): it then runs [wrapper] (lockstep or default_lockstep), and
 * neither the gateway's --runner-wrapper nor an in-process probe stands
 * for it. */
int cluster_host_own_program(const struct cluster_host *host);

/* A size: digits with an optional fraction, then an optional K, M, G or T
 * (powers of 1024, either case) and an optional "iB" or "B": "512M", "1.5GiB",
 * "4096". 0, or -1 if text is not one or is out of range (above 2^62). */
int cluster_size_parse(const char *text, int64_t *out);
/* bytes as "512 B", "1.5 KiB", "2.0 GiB" (one decimal) into out. */
void cluster_size_format(int64_t bytes, char *out, size_t size);

/* ======================= probing (probe.c) ======================= */

/* What a probe reports about the machine it runs on. */
struct cluster_probe {
    char hostname[CLUSTER_HOST_NAME_MAX];   /* gethostname() there */
    int cores;                              /* online CPUs */
    int64_t memory_total, memory_available; /* bytes (MemTotal, MemAvailable) */
    char isa[CLUSTER_ISA_MAX];              /* the instruction set a runner there uses */
    double load; /* the 1-minute load average (/proc/loadavg): runnable threads, not cores */
    char arch[CLUSTER_ARCH_MAX];         /* uname's machine, normalized (cluster_arch_normalize) */
    char numerics[CLUSTER_NUMERICS_MAX]; /* the build's CLUSTER_NUMERICS */
};

/* Probes this machine: online CPUs (sysconf), MemTotal and MemAvailable
 * (/proc/meminfo), the instruction set a runner here would use (the
 * tensor module's best, capped by LOCKSTEP_ISA), uname's machine and this
 * build's CLUSTER_NUMERICS. */
int cluster_probe_local(struct cluster_probe *out, char *err, size_t errlen);
/* uname's machine as a probe reports it: "x86_64" for x86_64 and amd64,
 * "aarch64" for aarch64 and arm64, any other name lowercased as it is, and
 * CLUSTER_UNKNOWN for one that is not [a-z0-9_]{1,15} once lowercased. */
void cluster_arch_normalize(const char *machine, char *out, size_t size);
/* One line of JSON (no newline), {"hostname":..,"cores":..,"memory_total":..,
 * "memory_available":..,"isa":..,"load":..,"arch":..,"numerics":..}; its
 * length, or -1 if it does not fit in size bytes or a field is out of
 * range. */
int cluster_probe_format(const struct cluster_probe *p, char *out, size_t size);
/* The line back; every field is validated and other keys are refused.
 * hostname, cores, memory_total, memory_available and isa are required;
 * what older builds did not send may be missing: load (0), arch and
 * numerics (CLUSTER_UNKNOWN, so an older build's host never shares an
 * instance with this build's). isa may be any [a-z0-9_]{1,15}: the host
 * may be of an architecture whose instruction sets this build does not
 * know. */
int cluster_probe_parse(const char *line, struct cluster_probe *out, char *err, size_t errlen);
/* Records a probe's answer (or a failed probe: p NULL marks the host lost). */
void cluster_host_update(struct cluster_host *host, const struct cluster_probe *p);

/* ======================= model sizes (need.c) ======================= */

/* Memory a rank needs besides its weights and KV cache: activations, the
 * sampler's scratch, the process itself. */
#define CLUSTER_OVERHEAD_BYTES ((int64_t)64 << 20)

/* How much memory a model needs per rank at a tensor-parallel degree, from
 * its file's metadata (before loading weights): its weight shard (the tensor
 * table's split rules: split tensors / tp, replicated ones whole) plus its KV
 * cache shard for kv_positions positions (n_layers * 2 * kv_heads/tp *
 * head_dim * bytes per element as the engine stores it) plus
 * CLUSTER_OVERHEAD_BYTES. */
struct cluster_need {
    int tp;
    int64_t weight_bytes; /* per rank */
    int64_t kv_bytes;     /* per rank */
    int64_t total_bytes;  /* per rank: the sum plus overhead */
};
/* With keys and values in half precision, the engine's default. */
int cluster_model_need(const struct model *m, int tp, int64_t kv_positions,
                       struct cluster_need *out, char *err, size_t errlen);
/* With keys and values of kv_type (a tensor type the KV cache keeps: F16,
 * F32 or Q8_0, as `--kv-type` names them). */
int cluster_model_need_kv(const struct model *m, int tp, int64_t kv_positions, int kv_type,
                          struct cluster_need *out, char *err, size_t errlen);
/* 0 if the model splits tp ways; else -1 with the reason and the degrees
 * that work (model_check_degree's rule). */
int cluster_degree_check(const struct model *m, int tp, char *why, size_t whylen);

/* ======================= placement (place.c) ======================= */

/* What is already placed on each host (the gateway's own instances). */
struct cluster_usage {
    int slots_used;      /* ranks of instances placed there */
    int64_t memory_used; /* their cluster_need total_bytes, summed */
    double load;         /* outstanding tokens of those instances (for least-loaded) */
};

/* A pipeline stage's memory, per rank at a tensor-parallel degree: its
 * layers cost layer_bytes each (weights and KV cache of the largest
 * layer), plus stage_bytes (buffers, overhead), plus first_bytes on the
 * first stage (token embeddings) and last_bytes on the last (final norm
 * and classifier, or the embedding it is tied to). */
struct cluster_stage_need {
    int64_t layer_bytes, stage_bytes, first_bytes, last_bytes;
};
/* The stage need of m at tp with kv_positions positions of kv_type. */
int cluster_model_stage_need(const struct model *m, int tp, int64_t kv_positions, int kv_type,
                             struct cluster_stage_need *out, char *err, size_t errlen);

#define CLUSTER_STAGES_MAX 8 /* ENGINE_MAX_STAGES */

/* How an instance splits its model: tp ranks in each of pp stages, and
 * each stage's layers when they are asked for. */
struct cluster_shape {
    int tp;                         /* ranks per stage */
    int pp;                         /* pipeline stages (1: none) */
    int layers[CLUSTER_STAGES_MAX]; /* layers of each stage (all 0: the policy's split) */
    int chosen;                     /* 1: none was asked for: the policy chooses tp, pp and layers
                                       (cluster_choose_shape) */
};

/* What to place. */
struct cluster_request {
    int tp;                              /* ranks (per stage with pp > 1) */
    int pp;                              /* pipeline stages (0 or 1: none) */
    int64_t bytes_per_rank;              /* cluster_need.total_bytes at tp (pp <= 1) */
    int n_layers;                        /* pp > 1: the model's layers, */
    struct cluster_stage_need stage;     /* ... what each costs, */
    int layers[CLUSTER_STAGES_MAX];      /* ... and a split asked for (all 0: the policy's) */
    int n_pinned;                        /* > 0: only these hosts, every one used (hosts:a+b) */
    int pinned[CLUSTER_HOSTS_MAX];       /* host indices */
    int exclude[CLUSTER_HOSTS_MAX];      /* host index -> 1: never (e.g. the instance being moved
                                            off it, or a host being drained) -- n_hosts entries */
    char numerics[CLUSTER_NUMERICS_MAX]; /* "": any one contract; else only hosts of this one
                                            (a move keeps its instance's) */
};

/* Where an instance's ranks go: ranks [first, first + ranks[k]) on host[k],
 * first being the sum of ranks[0..k). Rank 0 (the leader, which the gateway
 * talks to) is on host[0]. */
struct cluster_placement {
    int tp;                         /* ranks (per stage with pp > 1) */
    int pp;                         /* pipeline stages (1: none) */
    int layers[CLUSTER_STAGES_MAX]; /* pp > 1: layers of each stage; rank r is stage r / tp */
    int64_t stage_bytes[CLUSTER_STAGES_MAX]; /* pp > 1: each stage's bytes per rank */
    int n_hosts;
    int host[CLUSTER_RANKS_MAX];  /* host indices */
    int ranks[CLUSTER_RANKS_MAX]; /* ranks on each */
};

/* The placement policy, a pure function: among the hosts that are not lost
 * and not excluded, with free slots (slots - slots_used) and free memory
 * (memory_limit, or the probed memory_total when no limit was given, minus
 * memory_used; an unprobed host with no limit counts as unknown = fits) for
 * bytes_per_rank per rank: the fewest hosts first, then the least loaded
 * (load, then fewest slots used, then hostfile order, so it is
 * deterministic). Ranks on one host stay together, and the ranks are spread
 * as evenly as the chosen hosts allow (the less loaded host takes the extra
 * one). All the ranks go to hosts of one numerics contract (an unprobed
 * host, numerics "", matches any): when the open hosts report several, the
 * policy places within each contract's hosts and keeps the placement on the
 * fewest hosts, then the one whose leader is least loaded, then the
 * contract seen first in the hostfile; when none fits, the refusal names
 * every contract. Pinned hosts: every pinned host gets tp / n_pinned ranks
 * (tp must divide evenly), each must fit and all must share one contract
 * (request->numerics when given), else refused. 0 with *out, or -1 with a
 * reason naming the host and the shortfall ("host b: 1.2 GiB free, needs
 * 2.0 GiB per rank" / "host c is lost" / "4 ranks need 4 slots; 3 are free on
 * 3 hosts"). */
int cluster_place(const struct cluster_host *hosts, const struct cluster_usage *usage, int n_hosts,
                  const struct cluster_request *request, struct cluster_placement *out, char *why,
                  size_t whylen);
/* cluster_place for a pipeline (request->pp > 1, stages.c): each stage's
 * tp ranks on one host, consecutive stages on one host when they share
 * it. Pinned hosts take the stages in order, as evenly as they go; else
 * the stages spread over as many open hosts of one numerics contract as
 * there are stages (the point of a pipeline is more machines), the most
 * free memory first. The layers go to the stages in proportion to what
 * each stage's share of its host's free memory holds (equal shares where
 * memory is unknown), each stage within that limit and at least one
 * layer; a split asked for is checked against the same limits. Refused
 * with each stage's host and the most layers it holds, and a split that
 * fits when one does. */
int cluster_place_stages(const struct cluster_host *hosts, const struct cluster_usage *usage,
                         int n_hosts, const struct cluster_request *request,
                         struct cluster_placement *out, char *why, size_t whylen);
/* A link from one host to another as `lockstep probe --links` measured
 * it between ranks on the two (cluster_links_parse). */
struct cluster_link {
    double latency_us;       /* one way: half the median round trip of a small message
                                (0: not measured) */
    double bytes_per_second; /* one way, of a 1 MiB message (0: not measured) */
};

/* The links of n hosts ([from * n + to]; the diagonal is not written) as
 * one JSON line, {"links":[{"from":0,"to":1,"latency_us":..,
 * "bytes_per_second":..},...]}; its length, or -1 if it does not fit. */
int cluster_links_format(const struct cluster_link *links, int n, char *out, size_t size);
/* The line back into links (n * n, zeroed first): every ordered pair of
 * the n hosts exactly once, figures finite and positive, no other key;
 * else -1 with err naming the item, and links all 0. */
int cluster_links_parse(const char *line, int n, struct cluster_link *links, char *err,
                        size_t errlen);

/* What the policy needs to choose an instance's shape itself. */
struct cluster_shape_request {
    struct cluster_request place; /* hosts pinned and excluded, numerics (its degrees,
                                     bytes and split are the chooser's) */
    int64_t bytes_per_rank[CLUSTER_STAGES_MAX + 1]; /* [t]: a rank's cluster_need total at tp t
                                                       (0: the model does not split t ways) */
    int n_layers;                                   /* the model's layers */
    struct cluster_stage_need stage;                /* what a stage costs at tp 1 */
    int64_t weight_bytes;                           /* the model's weights: what one token reads */
    int64_t hidden_bytes; /* a token's activations (dim floats): what an all-reduce sums */
    const struct cluster_link *links; /* [from * n_hosts + to], or NULL: none measured */
};
/* The policy's shape and placement when none is asked for (shape.c): one
 * host, tp 1, if the model fits one; else the fewest hosts h that hold it,
 * as pp h with layers by memory, or as tp h when that fits too and every
 * link between its hosts is measured fast enough that tp's 2 * layers
 * all-reduces per token cost at most a quarter of the compute it saves
 * (the model's weights read at 20 GB/s). Pinned hosts fix h. 0 with *out,
 * or -1 with why naming what one host and what the most stages lacked. */
int cluster_choose_shape(const struct cluster_host *hosts, const struct cluster_usage *usage,
                         int n_hosts, const struct cluster_shape_request *r,
                         struct cluster_placement *out, char *why, size_t whylen);
/* Bytes the ranks of placement p on its k-th host take: bytes_per_rank
 * each, or for a pipeline their stages' stage_bytes. */
int64_t cluster_placement_host_bytes(const struct cluster_placement *p, int k,
                                     int64_t bytes_per_rank);
/* The ranks of a placement: tp * pp. */
static inline int cluster_placement_ranks(const struct cluster_placement *p) {
    return p->tp * (p->pp > 1 ? p->pp : 1);
}

/* The numerics contract placement's ranks compute with: its first probed
 * host's, "" while none is probed (cluster_place keeps an instance's hosts
 * to one contract). */
const char *cluster_placement_numerics(const struct cluster_host *hosts,
                                       const struct cluster_placement *p);
/* 0 if each of the n_to hosts (indices) computes with contract numerics
 * ("": any) or is unprobed; else -1 with why naming the first that does
 * not and both contracts. */
int cluster_numerics_check(const struct cluster_host *hosts, const char *numerics, const int *to,
                           int n_to, char *why, size_t whylen);

/* ======================= spellings (spec.c) ======================= */

/* "a+b" / "a:2+b:2" spelling of a placement (a host holding one rank is its
 * name alone); its length, or -1 if it does not fit in size bytes. */
int cluster_placement_format(const struct cluster_host *hosts, const struct cluster_placement *p,
                             char *out, size_t size);

/* `--place NAME=tp:2,pp:2,layers:6+10,hosts:a+b`: NAME alone, or NAME=
 * then tp:N, pp:N, layers:A+B (a stage's layers each, first to last) and
 * hosts:H+H in any order, each at most once. */
struct cluster_place_spec {
    char model[128];                /* NAME */
    int tp;                         /* tp:N (default 1): ranks per stage */
    int pp;                         /* pp:N (default 1): pipeline stages */
    int layers[CLUSTER_STAGES_MAX]; /* layers:A+B (all 0: the policy's split) */
    int n_hosts;                    /* hosts:a+b (0: the policy chooses) */
    char hosts[CLUSTER_HOSTS_MAX][CLUSTER_HOST_NAME_MAX];
};
/* Parses the whole spec; errors name the bad part. Without a pipeline tp
 * must divide evenly over the hosts named; with one there are at most as
 * many hosts as stages, and layers names every stage. */
int cluster_place_spec_parse(const char *text, struct cluster_place_spec *out, char *err,
                             size_t errlen);

#endif
