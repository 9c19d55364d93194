/* comm_mpi.c -- the mpi backend: one process per rank under Open MPI's
 * mpirun.
 *
 * A collective is a set of non-blocking point-to-point messages on a
 * private duplicate of MPI_COMM_WORLD: every rank sends every peer a small
 * header (tag, kind, size, root), with its data attached where that peer
 * needs it (all-reduce, all-gather: to everyone; broadcast: from the root;
 * gather: to the root). So every rank checks every peer's tag, at no extra
 * round trip, and a peer in another collective is reported with both tags
 * instead of mixing data. The all-reduce sums the received buffers in rank
 * order, so every rank gets bitwise the same floats whatever the timing. (Direct
 * exchange suits the few ranks of tensor parallelism; for 2 ranks it is the
 * same one message each way as MPI_Allreduce, and faster than Open MPI's
 * non-blocking collectives, see bench/comm_bench.c.) Messages between two
 * ranks are matched in order (MPI's non-overtaking rule), so the k-th
 * collectives of two ranks always meet.
 *
 * The requests are polled with MPI_Testall: a short spin, then sleeps that
 * grow to a millisecond, so a waiting rank gives its core away; past the
 * deadline the call fails with COMM_ERR_DEADLINE and the requests are left
 * behind. MPI_Finalize may hang on those, so comm_free after a failure does
 * not finalize: the caller should exit at once with comm_exit_code()
 * (mpirun then ends the other ranks). MPI errors come back as return codes
 * (MPI_ERRORS_RETURN) and become messages.
 *
 * Point to point messages (pipeline stages) travel under their own MPI tag,
 * so they never pair with a collective's. A send is posted (MPI_Isend of a
 * copy) and left in flight: at most COMM_MAILBOX_SLOTS per destination, the
 * oldest waited for (under the deadline) only when a send would exceed
 * that, and every call completes what it can. A receive probes for the
 * next message from its source under the deadline, then receives it. */
#include "comm_internal.h"

#ifdef LOCKSTEP_HAVE_MPI

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Sent ahead of every rank's data. */
struct mpi_header {
    uint64_t step;  /* tag */
    uint32_t index; /* tag */
    uint32_t kind;  /* enum comm_kind */
    uint64_t bytes; /* bytes of data this rank contributes */
    int32_t root;   /* broadcast, gather: the root named */
    int32_t rank;   /* the sender */
};

#define MPI_MESSAGE_TAG 17 /* MPI tag of every collective's message (order does the matching) */
#define MPI_LINK_TAG    18 /* MPI tag of every point to point message */

/* A point to point send still in flight, and the copy it reads. */
struct mpi_pending {
    MPI_Request request;
    unsigned char *buffer; /* header + data */
    int dest;
};
#define MPI_POLL_MAX_NS                                                                            \
    50000ull /* longest sleep between two polls: a peer is late by                                 \
               about one step of compute, so longer sleeps only add latency */

struct comm_mpi {
    struct comm head;            /* must be first */
    MPI_Comm world;              /* a duplicate of MPI_COMM_WORLD that returns errors */
    int initialized;             /* 1 if comm_mpi_create called MPI_Init_thread */
    unsigned char *send;         /* header + this rank's data */
    size_t send_capacity;        /* allocated bytes of send */
    unsigned char *recv;         /* each peer's header + data, at offsets[peer] */
    size_t recv_capacity;        /* allocated bytes of recv */
    size_t *offsets;             /* size entries */
    MPI_Request *requests;       /* 2 * size: receives, then sends */
    MPI_Status *statuses;        /* 2 * size */
    int split;                   /* 1: made by comm_mpi_split (world is its own group) */
    struct mpi_pending *pending; /* (COMM_MAILBOX_SLOTS * size) sends in flight, oldest first */
    int n_pending;               /* entries of pending in use */
};

static int mpi_created; /* one struct comm per process */

/* "<what>: <MPI's message>" as error code. A truncated message means a
 * peer sent more than this collective expects: a mismatch, reported so. */
static int mpi_error(int rank, int code, const char *what, int mpi_rc, char *err, size_t errlen) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int length = 0, error_class = 0;
    if (MPI_Error_string(mpi_rc, text, &length) != MPI_SUCCESS)
        snprintf(text, sizeof(text), "MPI error code %d", mpi_rc);
    if (MPI_Error_class(mpi_rc, &error_class) == MPI_SUCCESS && error_class == MPI_ERR_TRUNCATE)
        return comm_fail(err, errlen, COMM_ERR_TAG, rank,
                         "%s: a peer is in a collective of another size (%s)", what, text);
    return comm_fail(err, errlen, code, rank, "%s: %s", what, text);
}

static int reserve(unsigned char **buf, size_t *capacity, size_t bytes) {
    if (bytes <= *capacity) return 0;
    unsigned char *grown = realloc(*buf, bytes);
    if (!grown) return -1;
    *buf = grown;
    *capacity = bytes;
    return 0;
}

/* Bytes of data rank `from` sends rank `to` in this collective. */
static size_t data_bytes(const struct comm_call *call, int from, int to, size_t from_bytes) {
    switch (call->kind) {
    case COMM_KIND_ALLREDUCE:
    case COMM_KIND_ALLGATHER:
        return from_bytes;
    case COMM_KIND_BROADCAST:
        return from == call->root ? from_bytes : 0;
    case COMM_KIND_GATHER:
        return to == call->root ? from_bytes : 0;
    case COMM_KIND_BARRIER:
    case COMM_KIND_SEND:
    case COMM_KIND_RECV:
        return 0;
    }
    return 0;
}

/* Bytes this rank expects from peer: the header, and data as above. */
static size_t expected_bytes(const struct comm_mpi *mpi, const struct comm_call *call, int peer) {
    size_t bytes = call->send_bytes;
    if (call->kind == COMM_KIND_GATHER)
        bytes = mpi->head.rank == call->root ? call->recv_bytes[peer] : 0;
    return sizeof(struct mpi_header) + data_bytes(call, peer, mpi->head.rank, bytes);
}

/* The error of a failed MPI_Testall: the first request with an error. */
static int testall_error(struct comm_mpi *mpi, const struct comm_call *call, int count, int mpi_rc,
                         char *err, size_t errlen) {
    char what[160];
    snprintf(what, sizeof(what), "MPI failed in %s (step %llu, index %u)",
             comm_kind_name(call->kind), (unsigned long long)call->tag.step,
             (unsigned)call->tag.index);
    if (mpi_rc == MPI_ERR_IN_STATUS)
        for (int i = 0; i < count; i++)
            if (mpi->statuses[i].MPI_ERROR != MPI_SUCCESS &&
                mpi->statuses[i].MPI_ERROR != MPI_ERR_PENDING)
                return mpi_error(mpi->head.rank, COMM_ERR_PEER, what, mpi->statuses[i].MPI_ERROR,
                                 err, errlen);
    return mpi_error(mpi->head.rank, COMM_ERR_PEER, what, mpi_rc, err, errlen);
}

/* Waits for count requests under the deadline: spin, then sleep and poll. */
static int poll_requests(struct comm_mpi *mpi, int count, const struct comm_call *call, char *err,
                         size_t errlen) {
    uint64_t start = comm_now_ns();
    uint64_t deadline = start + mpi->head.deadline_ns;
    uint64_t nap = 2000;
    for (;;) {
        int done = 0;
        int rc = MPI_Testall(count, mpi->requests, &done, mpi->statuses);
        if (rc != MPI_SUCCESS) return testall_error(mpi, call, count, rc, err, errlen);
        if (done) return COMM_OK;
        uint64_t now = comm_now_ns();
        if (now >= deadline)
            return comm_fail(err, errlen, COMM_ERR_DEADLINE, mpi->head.rank,
                             "deadline of %.3f s passed in %s (step %llu, index %u); not every "
                             "rank of %d arrived",
                             (double)mpi->head.deadline_ns * 1e-9, comm_kind_name(call->kind),
                             (unsigned long long)call->tag.step, (unsigned)call->tag.index,
                             mpi->head.size);
        if (now - start < COMM_SPIN_NS) {
            comm_cpu_relax();
            continue;
        }
        sched_yield();
        uint64_t left = deadline - now;
        uint64_t sleep_ns = nap < left ? nap : left;
        struct timespec pause = {(time_t)(sleep_ns / 1000000000ull),
                                 (long)(sleep_ns % 1000000000ull)};
        nanosleep(&pause, NULL);
        if (nap < MPI_POLL_MAX_NS) nap *= 2;
    }
}

/* Compares the header rank `peer` sent with this rank's. */
static int check_header(const struct comm_mpi *mpi, const struct comm_call *call, int peer,
                        char *err, size_t errlen) {
    struct mpi_header theirs;
    memcpy(&theirs, mpi->recv + mpi->offsets[peer], sizeof(theirs));
    struct comm_tag tag = {theirs.step, theirs.index};
    if (tag.step != call->tag.step || tag.index != call->tag.index)
        return comm_fail_tag(err, errlen, mpi->head.rank, call->tag, peer, tag);
    size_t expected = expected_bytes(mpi, call, peer) - sizeof(struct mpi_header);
    int same = theirs.kind == (uint32_t)call->kind && theirs.rank == peer &&
               (call->kind == COMM_KIND_BARRIER || theirs.root == call->root) &&
               (expected == 0 || theirs.bytes == expected);
    if (same) return COMM_OK;
    return comm_fail(err, errlen, COMM_ERR_TAG, mpi->head.rank,
                     "collective mismatch in (step %llu, index %u): this rank is in a %s of %zu "
                     "bytes (root %d), rank %d in a %s of %llu bytes (root %d)",
                     (unsigned long long)call->tag.step, (unsigned)call->tag.index,
                     comm_kind_name(call->kind), call->send_bytes, call->root, peer,
                     comm_kind_name((enum comm_kind)theirs.kind), (unsigned long long)theirs.bytes,
                     (int)theirs.root);
}

/* Moves the received data into the caller's buffer. */
static void combine(const struct comm_mpi *mpi, const struct comm_call *call) {
    const unsigned char *recv = mpi->recv + sizeof(struct mpi_header);
    const unsigned char *mine = mpi->send + sizeof(struct mpi_header);
    int rank = mpi->head.rank;
    if (call->kind == COMM_KIND_ALLREDUCE && call->send_bytes > 0) {
        float *out = call->recv;
        size_t n = call->send_bytes / sizeof(float);
        memcpy(out, rank == 0 ? mine : recv + mpi->offsets[0], call->send_bytes);
        for (int r = 1; r < mpi->head.size; r++) {
            const void *data = r == rank ? mine : recv + mpi->offsets[r];
            const float *in = data;
            for (size_t i = 0; i < n; i++) out[i] += in[i];
        }
    } else if (call->kind == COMM_KIND_ALLGATHER && call->send_bytes > 0) {
        unsigned char *out = call->recv;
        for (int r = 0; r < mpi->head.size; r++, out += call->send_bytes)
            if (out != call->send) /* else: sent from its own place, already there */
                memcpy(out, r == rank ? mine : recv + mpi->offsets[r], call->send_bytes);
    } else if (call->kind == COMM_KIND_BROADCAST && rank != call->root && call->send_bytes > 0) {
        memcpy(call->recv, recv + mpi->offsets[call->root], call->send_bytes);
    } else if (call->kind == COMM_KIND_GATHER && rank == call->root) {
        unsigned char *out = call->recv;
        for (int r = 0; r < mpi->head.size; r++) {
            if (call->recv_bytes[r] > 0)
                memcpy(out, r == rank ? mine : recv + mpi->offsets[r], call->recv_bytes[r]);
            out += call->recv_bytes[r];
        }
    }
}

/* Posts the receives from and the sends to every peer; returns the number
 * of requests, or a negative error. */
static int post(struct comm_mpi *mpi, const struct comm_call *call, char *err, size_t errlen) {
    int rank = mpi->head.rank, count = 0;
    for (int peer = 0; peer < mpi->head.size; peer++) {
        if (peer == rank) continue;
        size_t bytes = expected_bytes(mpi, call, peer);
        int rc = MPI_Irecv(mpi->recv + mpi->offsets[peer], (int)bytes, MPI_BYTE, peer,
                           MPI_MESSAGE_TAG, mpi->world, &mpi->requests[count++]);
        if (rc != MPI_SUCCESS)
            return mpi_error(rank, COMM_ERR_SYSTEM, "posting a receive", rc, err, errlen);
    }
    for (int peer = 0; peer < mpi->head.size; peer++) {
        if (peer == rank) continue;
        size_t bytes = sizeof(struct mpi_header) + data_bytes(call, rank, peer, call->send_bytes);
        int rc = MPI_Isend(mpi->send, (int)bytes, MPI_BYTE, peer, MPI_MESSAGE_TAG, mpi->world,
                           &mpi->requests[count++]);
        if (rc != MPI_SUCCESS)
            return mpi_error(rank, COMM_ERR_SYSTEM, "posting a send", rc, err, errlen);
    }
    return count;
}

/* Sizes the buffers for call; -1 if a message would not fit an int count. */
static int prepare(struct comm_mpi *mpi, const struct comm_call *call) {
    size_t total = 0;
    for (int peer = 0; peer < mpi->head.size; peer++) {
        mpi->offsets[peer] = total;
        size_t bytes = peer == mpi->head.rank ? 0 : expected_bytes(mpi, call, peer);
        if (bytes > INT_MAX) return -1;
        total += (bytes + 7) & ~(size_t)7; /* keeps every header and float array aligned */
    }
    size_t mine = sizeof(struct mpi_header) + call->send_bytes;
    if (mine > INT_MAX) return -1;
    if (reserve(&mpi->send, &mpi->send_capacity, mine) != 0 ||
        reserve(&mpi->recv, &mpi->recv_capacity, total > 0 ? total : 1) != 0)
        return -2;
    struct mpi_header header = {call->tag.step,   call->tag.index, (uint32_t)call->kind,
                                call->send_bytes, call->root,      mpi->head.rank};
    memcpy(mpi->send, &header, sizeof(header));
    if (call->send_bytes > 0) memcpy(mpi->send + sizeof(header), call->send, call->send_bytes);
    return 0;
}

/* Completes the sends in flight that have finished, keeping the rest in
 * order. */
static int reap_sends(struct comm_mpi *mpi, char *err, size_t errlen) {
    int kept = 0;
    for (int i = 0; i < mpi->n_pending; i++) {
        struct mpi_pending *p = &mpi->pending[i];
        int done = 0;
        int rc = MPI_Test(&p->request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return mpi_error(mpi->head.rank, COMM_ERR_PEER, "a send to a pipeline peer", rc, err,
                             errlen);
        if (done)
            free(p->buffer);
        else
            mpi->pending[kept++] = *p;
    }
    mpi->n_pending = kept;
    return COMM_OK;
}

/* Sends in flight to dest. */
static int pending_to(const struct comm_mpi *mpi, int dest) {
    int n = 0;
    for (int i = 0; i < mpi->n_pending; i++) n += mpi->pending[i].dest == dest;
    return n;
}

/* Sleeps a little between two polls: naps that grow to MPI_POLL_MAX_NS,
 * after COMM_SPIN_NS of spinning. */
static void poll_pause(uint64_t start, uint64_t now, uint64_t deadline, uint64_t *nap) {
    if (now - start < COMM_SPIN_NS) {
        comm_cpu_relax();
        return;
    }
    sched_yield();
    uint64_t left = deadline - now, sleep_ns = *nap < left ? *nap : left;
    struct timespec pause = {(time_t)(sleep_ns / 1000000000ull), (long)(sleep_ns % 1000000000ull)};
    nanosleep(&pause, NULL);
    if (*nap < MPI_POLL_MAX_NS) *nap *= 2;
}

static int link_deadline(const struct comm_mpi *mpi, const struct comm_call *call, char *err,
                         size_t errlen) {
    int sending = call->kind == COMM_KIND_SEND;
    return comm_fail(err, errlen, COMM_ERR_DEADLINE, mpi->head.rank,
                     "deadline of %.3f s passed in %s rank %d (step %llu, index %u): %s",
                     (double)mpi->head.deadline_ns * 1e-9, sending ? "a send to" : "a receive from",
                     call->root, (unsigned long long)call->tag.step, (unsigned)call->tag.index,
                     sending ? "its mailbox stayed full" : "nothing arrived");
}

static int link_send(struct comm_mpi *mpi, const struct comm_call *call, char *err, size_t errlen) {
    uint64_t start = comm_now_ns(), deadline = start + mpi->head.deadline_ns, nap = 2000;
    for (;;) {
        int rc = reap_sends(mpi, err, errlen);
        if (rc) return rc;
        if (pending_to(mpi, call->root) < COMM_MAILBOX_SLOTS) break;
        uint64_t now = comm_now_ns();
        if (now >= deadline) return link_deadline(mpi, call, err, errlen);
        poll_pause(start, now, deadline, &nap);
    }
    size_t bytes = sizeof(struct mpi_header) + call->send_bytes;
    if (bytes > INT_MAX)
        return comm_fail(err, errlen, COMM_ERR_USAGE, mpi->head.rank,
                         "a send of %zu bytes is too large for one MPI message", call->send_bytes);
    unsigned char *buffer = malloc(bytes);
    if (!buffer)
        return comm_fail(err, errlen, COMM_ERR_SYSTEM, mpi->head.rank,
                         "out of memory for a %zu-byte message", call->send_bytes);
    struct mpi_header header = {call->tag.step,   call->tag.index, (uint32_t)call->kind,
                                call->send_bytes, call->root,      mpi->head.rank};
    memcpy(buffer, &header, sizeof(header));
    if (call->send_bytes > 0) memcpy(buffer + sizeof(header), call->send, call->send_bytes);
    struct mpi_pending *p = &mpi->pending[mpi->n_pending];
    int rc =
        MPI_Isend(buffer, (int)bytes, MPI_BYTE, call->root, MPI_LINK_TAG, mpi->world, &p->request);
    if (rc != MPI_SUCCESS) {
        free(buffer);
        return mpi_error(mpi->head.rank, COMM_ERR_SYSTEM, "posting a send", rc, err, errlen);
    }
    p->buffer = buffer;
    p->dest = call->root;
    mpi->n_pending++;
    return COMM_OK;
}

/* Waits (deadline) until a message from the call's source is there and
 * says how big it is. */
static int probe_link(struct comm_mpi *mpi, const struct comm_call *call, int *bytes, char *err,
                      size_t errlen) {
    uint64_t start = comm_now_ns(), deadline = start + mpi->head.deadline_ns, nap = 2000;
    for (;;) {
        int found = 0;
        MPI_Status status;
        int rc = MPI_Iprobe(call->root, MPI_LINK_TAG, mpi->world, &found, &status);
        if (rc != MPI_SUCCESS)
            return mpi_error(mpi->head.rank, COMM_ERR_PEER, "waiting for a pipeline message", rc,
                             err, errlen);
        if (found) {
            rc = MPI_Get_count(&status, MPI_BYTE, bytes);
            if (rc != MPI_SUCCESS || *bytes < (int)sizeof(struct mpi_header))
                return comm_fail(err, errlen, COMM_ERR_TAG, mpi->head.rank,
                                 "a message from rank %d has no header", call->root);
            return COMM_OK;
        }
        rc = reap_sends(mpi, err, errlen);
        if (rc) return rc;
        uint64_t now = comm_now_ns();
        if (now >= deadline) return link_deadline(mpi, call, err, errlen);
        poll_pause(start, now, deadline, &nap);
    }
}

static int link_recv(struct comm_mpi *mpi, const struct comm_call *call, char *err, size_t errlen) {
    int bytes = 0;
    int rc = probe_link(mpi, call, &bytes, err, errlen);
    if (rc) return rc;
    unsigned char *buffer = malloc(bytes > 0 ? (size_t)bytes : 1);
    if (!buffer)
        return comm_fail(err, errlen, COMM_ERR_SYSTEM, mpi->head.rank,
                         "out of memory for a %d-byte message", bytes);
    rc = MPI_Recv(buffer, bytes, MPI_BYTE, call->root, MPI_LINK_TAG, mpi->world, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        free(buffer);
        return mpi_error(mpi->head.rank, COMM_ERR_PEER, "receiving a pipeline message", rc, err,
                         errlen);
    }
    struct mpi_header theirs;
    memcpy(&theirs, buffer, sizeof(theirs));
    struct comm_tag tag = {theirs.step, theirs.index};
    size_t size = (size_t)bytes - sizeof(theirs);
    if (tag.step != call->tag.step || tag.index != call->tag.index) {
        free(buffer);
        return comm_fail_tag(err, errlen, mpi->head.rank, call->tag, call->root, tag);
    }
    if (theirs.kind != COMM_KIND_SEND || theirs.bytes != size || theirs.rank != call->root) {
        free(buffer);
        return comm_fail(err, errlen, COMM_ERR_TAG, mpi->head.rank,
                         "the message from rank %d in (step %llu, index %u) is not a send of "
                         "its size",
                         call->root, (unsigned long long)tag.step, (unsigned)tag.index);
    }
    memmove(buffer, buffer + sizeof(theirs), size);
    *call->message = buffer;
    *call->message_bytes = size;
    return COMM_OK;
}

static int mpi_run(struct comm *comm, const struct comm_call *call, char *err, size_t errlen) {
    struct comm_mpi *mpi = (struct comm_mpi *)comm;
    /* a send's request is completed later, by MPI_Test in reap_sends */
    if (call->kind == COMM_KIND_SEND)
        return link_send(mpi, call, err, errlen); /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker) */
    if (call->kind == COMM_KIND_RECV) return link_recv(mpi, call, err, errlen);
    int rc = prepare(mpi, call);
    if (rc == -1)
        return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                         "%s of %zu bytes is too large for one MPI message",
                         comm_kind_name(call->kind), call->send_bytes);
    if (rc != 0)
        return comm_fail(err, errlen, COMM_ERR_SYSTEM, comm->rank,
                         "out of memory for a %zu-byte %s", call->send_bytes,
                         comm_kind_name(call->kind));
    int count = post(mpi, call, err, errlen);
    if (count < 0) return count;
    rc = poll_requests(mpi, count, call, err, errlen);
    for (int peer = 0; rc == COMM_OK && peer < comm->size; peer++)
        if (peer != comm->rank) rc = check_header(mpi, call, peer, err, errlen);
    if (rc == COMM_OK) combine(mpi, call);
    return rc;
}

/* Lets the sends in flight finish (a healthy receiver takes them within
 * the deadline), then frees their copies. */
static void finish_sends(struct comm_mpi *mpi) {
    char err[160];
    uint64_t start = comm_now_ns(), deadline = start + mpi->head.deadline_ns, nap = 2000;
    while (mpi->n_pending > 0 && reap_sends(mpi, err, sizeof(err)) == COMM_OK) {
        uint64_t now = comm_now_ns();
        if (now >= deadline) return;
        if (mpi->n_pending > 0) poll_pause(start, now, deadline, &nap);
    }
}

static void mpi_free(struct comm *comm) {
    struct comm_mpi *mpi = (struct comm_mpi *)comm;
    if (comm->failed) {
        /* Requests may still be in flight, reading and writing the buffers,
         * and MPI_Finalize may wait for them forever: leave both. */
        return;
    }
    finish_sends(mpi);
    if (mpi->n_pending > 0) return; /* as after a failure: a send still reads its copy */
    MPI_Comm_free(&mpi->world);
    if (mpi->initialized) MPI_Finalize();
    if (!mpi->split) mpi_created = 0;
    free(mpi->send);
    free(mpi->recv);
    free(mpi->offsets);
    free(mpi->requests);
    free(mpi->statuses);
    free(mpi->pending);
    free(mpi);
}

static const struct comm_ops mpi_ops = {mpi_run, mpi_free};

/* Frees a half-built handle of comm_mpi_create. */
static void free_unjoined(struct comm_mpi *mpi) {
    if (!mpi) return;
    free(mpi->pending);
    free(mpi->offsets);
    free(mpi->requests);
    free(mpi->statuses);
    free(mpi);
}

/* A handle's memory for a group of size ranks, or NULL. */
static struct comm_mpi *alloc_handle(int size) {
    struct comm_mpi *mpi = calloc(1, sizeof(*mpi));
    if (mpi) {
        mpi->offsets = calloc((size_t)size, sizeof(size_t));
        mpi->requests = calloc(2 * (size_t)size, sizeof(MPI_Request));
        mpi->statuses = calloc(2 * (size_t)size, sizeof(MPI_Status));
        mpi->pending = calloc((size_t)COMM_MAILBOX_SLOTS * (size_t)size, sizeof(*mpi->pending));
    }
    if (mpi && mpi->offsets && mpi->requests && mpi->statuses && mpi->pending) return mpi;
    free_unjoined(mpi);
    return NULL;
}

int comm_mpi_create(int *argc, char ***argv, struct comm **out, char *err, size_t errlen) {
    if (mpi_created)
        return comm_fail(err, errlen, COMM_ERR_USAGE, 0,
                         "comm_mpi_create: this process already has an MPI group (one per "
                         "process)");
    int already = 0, provided = 0, rc = MPI_Initialized(&already);
    if (rc == MPI_SUCCESS && !already)
        rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS)
        return comm_fail(err, errlen, COMM_ERR_SYSTEM, 0, "MPI_Init_thread failed (code %d)", rc);
    int rank = 0, size = 0;
    MPI_Comm world = MPI_COMM_NULL;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(MPI_COMM_WORLD, &world);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        if (!already) MPI_Finalize();
        return mpi_error(rank, COMM_ERR_SYSTEM, "joining the MPI job", rc, err, errlen);
    }
    struct comm_mpi *mpi = alloc_handle(size);
    if (!mpi) {
        MPI_Comm_free(&world);
        if (!already) MPI_Finalize();
        return comm_fail(err, errlen, COMM_ERR_SYSTEM, rank, "out of memory for the MPI group");
    }
    mpi->world = world;
    mpi->initialized = !already;
    comm_init_head(&mpi->head, &mpi_ops, COMM_MPI, rank, size);
    mpi_created = 1;
    *out = &mpi->head;
    return COMM_OK;
}

int comm_mpi_split(struct comm *comm, int color, int key, struct comm **out, char *err,
                   size_t errlen) {
    *out = NULL;
    if (comm->backend != COMM_MPI || color < 0)
        return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                         "comm_mpi_split needs an mpi group and a color >= 0");
    struct comm_mpi *parent = (struct comm_mpi *)comm;
    MPI_Comm group = MPI_COMM_NULL;
    int rank = 0, size = 0;
    int rc = MPI_Comm_split(parent->world, color, key, &group);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(group, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(group, &rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(group, &size);
    if (rc != MPI_SUCCESS) {
        if (group != MPI_COMM_NULL) MPI_Comm_free(&group);
        return mpi_error(comm->rank, COMM_ERR_SYSTEM, "splitting the MPI group", rc, err, errlen);
    }
    struct comm_mpi *mpi = alloc_handle(size);
    if (!mpi) {
        MPI_Comm_free(&group);
        return comm_fail(err, errlen, COMM_ERR_SYSTEM, comm->rank, "out of memory for a group");
    }
    mpi->world = group;
    mpi->split = 1;
    comm_init_head(&mpi->head, &mpi_ops, COMM_MPI, rank, size);
    comm_set_deadline(&mpi->head, (double)comm->deadline_ns * 1e-9);
    *out = &mpi->head;
    return COMM_OK;
}

#else

int comm_mpi_create(int *argc, char ***argv, struct comm **out, char *err, size_t errlen) {
    (void)argc;
    (void)argv;
    *out = NULL;
    return comm_fail(err, errlen, COMM_ERR_USAGE, 0,
                     "the mpi backend is not available: lockstep was built without MPI "
                     "(install libopenmpi-dev and configure with -DLOCKSTEP_MPI=ON)");
}

int comm_mpi_split(struct comm *comm, int color, int key, struct comm **out, char *err,
                   size_t errlen) {
    (void)color;
    (void)key;
    *out = NULL;
    return comm_fail(err, errlen, COMM_ERR_USAGE, comm->rank,
                     "the mpi backend is not available: lockstep was built without MPI");
}

#endif
