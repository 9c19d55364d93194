/* comm.c -- the public collective functions: argument checks, the state
 * comm_get_state reports, and the rule that a rank whose collective failed
 * stays failed (its group's sequence of collectives is broken, so every
 * later call fails at once instead of pairing with the wrong peer call).
 * The data moves in the backends, comm_local.c and comm_mpi.c. */
#include "comm_internal.h"

#include "base/base.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

uint64_t comm_now_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
}

int comm_fail(char *err, size_t errlen, int code, int rank, const char *fmt, ...) {
    char where[32];
    snprintf(where, sizeof(where), "rank %d", rank);
    va_list args;
    va_start(args, fmt);
    error_vformat_at(err, errlen, where, fmt, args);
    va_end(args);
    return code;
}

int comm_fail_tag(char *err, size_t errlen, int rank, struct comm_tag mine, int peer,
                  struct comm_tag theirs) {
    return comm_fail(err, errlen, COMM_ERR_TAG, rank,
                     "collective tag mismatch: this rank is in (step %llu, index %u), rank %d is "
                     "in (step %llu, index %u)",
                     (unsigned long long)mine.step, (unsigned)mine.index, peer,
                     (unsigned long long)theirs.step, (unsigned)theirs.index);
}

const char *comm_kind_name(enum comm_kind kind) {
    switch (kind) {
    case COMM_KIND_ALLREDUCE:
        return "all-reduce";
    case COMM_KIND_BROADCAST:
        return "broadcast";
    case COMM_KIND_GATHER:
        return "gather";
    case COMM_KIND_BARRIER:
        return "barrier";
    case COMM_KIND_ALLGATHER:
        return "all-gather";
    case COMM_KIND_SEND:
        return "send";
    case COMM_KIND_RECV:
        return "receive";
    }
    return "unknown collective";
}

void comm_init_head(struct comm *comm, const struct comm_ops *ops, enum comm_backend backend,
                    int rank, int size) {
    comm->ops = ops;
    comm->backend = backend;
    comm->rank = rank;
    comm->size = size;
    comm->deadline_ns = (uint64_t)(COMM_DEFAULT_DEADLINE * 1e9);
    comm->failed = 0;
    atomic_init(&comm->waiting, 0);
    atomic_init(&comm->tag_step, 0);
    atomic_init(&comm->tag_index, 0);
    atomic_init(&comm->since_ns, 0);
    atomic_init(&comm->completed, 0);
    atomic_init(&comm->wait_ns, 0);
}

int comm_exit_code(int error) {
    switch (error) {
    case COMM_OK:
        return 0;
    case COMM_ERR_TAG:
        return COMM_EXIT_TAG;
    case COMM_ERR_DEADLINE:
        return COMM_EXIT_DEADLINE;
    case COMM_ERR_PEER:
        return COMM_EXIT_PEER;
    default:
        return COMM_EXIT_SYSTEM;
    }
}

void comm_free(struct comm *comm) {
    if (comm) comm->ops->free(comm);
}

enum comm_backend comm_backend(const struct comm *comm) {
    return comm->backend;
}

int comm_rank(const struct comm *comm) {
    return comm->rank;
}

int comm_size(const struct comm *comm) {
    return comm->size;
}

void comm_set_deadline(struct comm *comm, double seconds) {
    /* Anything but a positive, finite number of seconds keeps the deadline
     * it had: a wait without a deadline is what I3 forbids. */
    if (!(seconds > 0) || !isfinite(seconds) || seconds > 1e6) return;
    comm->deadline_ns = (uint64_t)(seconds * 1e9);
    if (comm->deadline_ns == 0) comm->deadline_ns = 1;
}

void comm_get_state(const struct comm *comm, struct comm_state *state) {
    state->waiting = atomic_load_explicit(&comm->waiting, memory_order_relaxed);
    state->tag.step = atomic_load_explicit(&comm->tag_step, memory_order_relaxed);
    state->tag.index = atomic_load_explicit(&comm->tag_index, memory_order_relaxed);
    state->since = (double)atomic_load_explicit(&comm->since_ns, memory_order_relaxed) * 1e-9;
    state->completed = atomic_load_explicit(&comm->completed, memory_order_relaxed);
    state->wait_seconds = (double)atomic_load_explicit(&comm->wait_ns, memory_order_relaxed) * 1e-9;
}

void comm_attach_status(struct comm *comm, struct comm_status_record *record) {
    comm->status = record;
    if (record) atomic_store_explicit(&record->pid, (int32_t)getpid(), memory_order_relaxed);
}

/* Mirrors the start (or end) of a collective into the shared record. */
static void publish_status(struct comm *comm, const struct comm_call *call, uint64_t now,
                           int waiting) {
    struct comm_status_record *r = comm->status;
    if (!r) return;
    if (waiting) {
        atomic_store_explicit(&r->step, call->tag.step, memory_order_relaxed);
        atomic_store_explicit(&r->index, call->tag.index, memory_order_relaxed);
        atomic_store_explicit(&r->since_ns, now, memory_order_relaxed);
    } else {
        atomic_store_explicit(&r->done_ns, now, memory_order_relaxed);
        atomic_fetch_add_explicit(&r->completed, 1, memory_order_relaxed);
    }
    atomic_store_explicit(&r->waiting, (uint32_t)waiting, memory_order_release);
}

/* Runs one collective through the backend, keeping the reported state. */
static int run_call(struct comm *comm, const struct comm_call *call, char *err, size_t errlen) {
    if (comm->failed)
        return comm_fail(err, errlen, comm->failed, comm->rank,
                         "%s (step %llu, index %u) refused: an earlier collective of this rank "
                         "failed, the group can no longer communicate",
                         comm_kind_name(call->kind), (unsigned long long)call->tag.step,
                         (unsigned)call->tag.index);
    uint64_t start = comm_now_ns();
    atomic_store_explicit(&comm->tag_step, call->tag.step, memory_order_relaxed);
    atomic_store_explicit(&comm->tag_index, call->tag.index, memory_order_relaxed);
    atomic_store_explicit(&comm->since_ns, start, memory_order_relaxed);
    atomic_store_explicit(&comm->waiting, 1, memory_order_release);
    publish_status(comm, call, start, 1);
    int rc = comm->ops->run(comm, call, err, errlen);
    uint64_t end = comm_now_ns(), spent = end - start;
    publish_status(comm, call, end, 0);
    atomic_fetch_add_explicit(&comm->wait_ns, spent, memory_order_relaxed);
    if (rc == COMM_OK)
        atomic_fetch_add_explicit(&comm->completed, 1, memory_order_relaxed);
    else if (rc != COMM_ERR_USAGE)
        comm->failed = rc;
    atomic_store_explicit(&comm->waiting, 0, memory_order_release);
    return rc;
}

static int check_root(const struct comm *comm, int root, const char *what, char *err,
                      size_t errlen) {
    if (root >= 0 && root < comm->size) return COMM_OK;
    return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank, "%s root %d is not a rank of 0..%d",
                     what, root, comm->size - 1);
}

int comm_allreduce_sum(struct comm *comm, float *buf, size_t n, struct comm_tag tag, char *err,
                       size_t errlen) {
    if (!buf && n > 0)
        return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                         "all-reduce of %zu floats from "
                         "a NULL buffer",
                         n);
    struct comm_call call = {
        COMM_KIND_ALLREDUCE, tag, buf, n * sizeof(float), buf, NULL, 0, NULL, NULL};
    return run_call(comm, &call, err, errlen);
}

int comm_broadcast(struct comm *comm, void *buf, size_t bytes, int root, struct comm_tag tag,
                   char *err, size_t errlen) {
    int rc = check_root(comm, root, "broadcast", err, errlen);
    if (rc) return rc;
    if (!buf && bytes > 0)
        return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                         "broadcast of %zu bytes into a NULL buffer", bytes);
    struct comm_call call = {COMM_KIND_BROADCAST, tag, buf, bytes, buf, NULL, root, NULL, NULL};
    return run_call(comm, &call, err, errlen);
}

int comm_gather(struct comm *comm, const void *send, size_t send_bytes, void *recv,
                const size_t *recv_bytes, int root, struct comm_tag tag, char *err, size_t errlen) {
    int rc = check_root(comm, root, "gather", err, errlen);
    if (rc) return rc;
    if (!send && send_bytes > 0)
        return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                         "gather of %zu bytes from a NULL buffer", send_bytes);
    if (comm->rank == root) {
        if (!recv_bytes)
            return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                             "gather root without recv_bytes");
        size_t total = 0;
        for (int r = 0; r < comm->size; r++) total += recv_bytes[r];
        if (!recv && total > 0)
            return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                             "gather of %zu bytes into a NULL buffer", total);
        if (recv_bytes[root] != send_bytes)
            return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                             "gather root sends %zu bytes but expects %zu from itself", send_bytes,
                             recv_bytes[root]);
    }
    struct comm_call call = {COMM_KIND_GATHER, tag,  send, send_bytes, recv,
                             recv_bytes,       root, NULL, NULL};
    return run_call(comm, &call, err, errlen);
}

/* Checks the all-gather's buffers: recv holds size * send_bytes, and send
 * is either this rank's own place in recv or outside recv altogether. */
static int check_allgather(const struct comm *comm, const void *send, size_t send_bytes,
                           const void *recv, char *err, size_t errlen) {
    if (send_bytes == 0) return COMM_OK;
    if (!send || !recv)
        return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                         "all-gather of %zu bytes with a NULL %s buffer", send_bytes,
                         send ? "receive" : "send");
    if (send_bytes > SIZE_MAX / (size_t)comm->size)
        return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                         "all-gather of %zu bytes from each of %d ranks overflows", send_bytes,
                         comm->size);
    uintptr_t from = (uintptr_t)send, to = (uintptr_t)recv;
    uintptr_t own = to + (uintptr_t)comm->rank * send_bytes;
    size_t total = send_bytes * (size_t)comm->size;
    if (from == own || from + send_bytes <= to || from >= to + total) return COMM_OK;
    return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                     "all-gather send buffer overlaps the receive buffer at byte %lld, not at "
                     "this rank's own place (byte %zu)",
                     (long long)((intptr_t)from - (intptr_t)to), (size_t)comm->rank * send_bytes);
}

int comm_allgather(struct comm *comm, const void *send, size_t send_bytes, void *recv,
                   struct comm_tag tag, char *err, size_t errlen) {
    int rc = check_allgather(comm, send, send_bytes, recv, err, errlen);
    if (rc) return rc;
    struct comm_call call = {COMM_KIND_ALLGATHER, tag, send, send_bytes, recv, NULL, 0, NULL, NULL};
    return run_call(comm, &call, err, errlen);
}

int comm_barrier(struct comm *comm, struct comm_tag tag, char *err, size_t errlen) {
    struct comm_call call = {COMM_KIND_BARRIER, tag, NULL, 0, NULL, NULL, 0, NULL, NULL};
    return run_call(comm, &call, err, errlen);
}

static int check_peer_rank(const struct comm *comm, int peer, const char *what, char *err,
                           size_t errlen) {
    if (peer >= 0 && peer < comm->size && peer != comm->rank) return COMM_OK;
    return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                     "%s peer %d is not another rank of 0..%d", what, peer, comm->size - 1);
}

int comm_send(struct comm *comm, const void *buf, size_t bytes, int dest, struct comm_tag tag,
              char *err, size_t errlen) {
    int rc = check_peer_rank(comm, dest, "send", err, errlen);
    if (rc) return rc;
    if (!buf && bytes > 0)
        return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                         "send of %zu bytes from a NULL buffer", bytes);
    struct comm_call call = {COMM_KIND_SEND, tag, buf, bytes, NULL, NULL, dest, NULL, NULL};
    return run_call(comm, &call, err, errlen);
}

int comm_recv(struct comm *comm, int source, struct comm_tag tag, void **message, size_t *bytes,
              char *err, size_t errlen) {
    *message = NULL;
    *bytes = 0;
    int rc = check_peer_rank(comm, source, "receive", err, errlen);
    if (rc) return rc;
    struct comm_call call = {COMM_KIND_RECV, tag, NULL, 0, NULL, NULL, source, message, bytes};
    return run_call(comm, &call, err, errlen);
}
