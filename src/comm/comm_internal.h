/* comm_internal.h -- what the two backends share: the common head of every
 * handle (backend operations, deadline, the state another thread may read)
 * and helpers for time, bounded spinning and error messages. comm.c checks
 * arguments and keeps the state; comm_local.c and comm_mpi.c move the data.
 * Not part of the public interface. */
#ifndef LOCKSTEP_COMM_INTERNAL_H
#define LOCKSTEP_COMM_INTERNAL_H

#include "comm.h"

#include <stdatomic.h>

/* How long a wait spins on the CPU before it sleeps: long enough to cover
 * a peer that is a few microseconds behind, short enough that a waiting rank
 * gives its core back almost at once. */
#define COMM_SPIN_NS 50000ull

/* Kinds of collective, exchanged with the tag so that two ranks in
 * different operations under the same tag fail instead of mixing data. */
enum comm_kind {
    COMM_KIND_ALLREDUCE = 1,
    COMM_KIND_BROADCAST = 2,
    COMM_KIND_GATHER = 3,
    COMM_KIND_BARRIER = 4,
    COMM_KIND_ALLGATHER = 5,
    COMM_KIND_SEND = 6, /* point to point: root is the destination */
    COMM_KIND_RECV = 7, /* point to point: root is the source */
};

/* One collective as the backends see it: comm.c has checked the sizes. */
struct comm_call {
    enum comm_kind kind;
    struct comm_tag tag;
    const void *send;         /* this rank's bytes (all-reduce: the floats) */
    size_t send_bytes;        /* their size */
    void *recv;               /* where the result goes (all-reduce, broadcast: = send;
                               * all-gather: size * send_bytes, send may be its own place) */
    const size_t *recv_bytes; /* gather on root: bytes expected from each rank */
    int root;                 /* broadcast, gather: the root rank; send, receive: the peer */
    void **message;           /* receive: where the received message's memory goes */
    size_t *message_bytes;    /* receive: its size */
};

/* A backend: one function runs any collective; free leaves the group. */
struct comm_ops {
    int (*run)(struct comm *comm, const struct comm_call *call, char *err, size_t errlen);
    void (*free)(struct comm *comm);
};

/* The head of every backend's handle (each embeds it as its first member). */
struct comm {
    const struct comm_ops *ops;
    enum comm_backend backend;
    int rank;             /* this rank, 0 .. size-1 */
    int size;             /* ranks in the group */
    uint64_t deadline_ns; /* deadline of every wait, nanoseconds */
    int failed;           /* first error this rank returned (0: none); later calls fail at once */
    /* What comm_get_state reports; written by the rank's thread, read by any. */
    _Atomic int waiting;               /* 1 while inside a collective */
    _Atomic uint64_t tag_step;         /* tag of the current or last collective */
    _Atomic uint32_t tag_index;        /* ... its index */
    _Atomic uint64_t since_ns;         /* CLOCK_MONOTONIC ns when that collective began */
    _Atomic uint64_t completed;        /* collectives completed */
    _Atomic uint64_t wait_ns;          /* total ns spent inside collectives */
    struct comm_status_record *status; /* shared copy of the above, or NULL */
};

/* Fills the common head (deadline COMM_DEFAULT_DEADLINE). */
void comm_init_head(struct comm *comm, const struct comm_ops *ops, enum comm_backend backend,
                    int rank, int size);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t comm_now_ns(void);

/* Tells the CPU this is a spin-wait (frees pipeline resources for the
 * sibling hyperthread); a no-op where there is no such instruction. */
static inline void comm_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Writes "rank R: <message>" to err and returns code. */
int comm_fail(char *err, size_t errlen, int code, int rank, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The tag mismatch message: "rank R: collective tag mismatch: this rank is
 * in (step S, index I), rank P is in (step S', index I')"; returns
 * COMM_ERR_TAG. */
int comm_fail_tag(char *err, size_t errlen, int rank, struct comm_tag mine, int peer,
                  struct comm_tag theirs);

/* Name of a kind for messages ("all-reduce", ...). */
const char *comm_kind_name(enum comm_kind kind);

#endif
