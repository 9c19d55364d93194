/* comm.h -- tagged collectives with deadlines among the ranks of one model
 * instance (DESIGN.md invariants I2 and I3).
 *
 * Every collective carries a tag (step, index). The ranks of a model issue
 * the same collectives in the same order because the leader broadcasts the
 * step plan they all execute; a rank that meets a peer with a different tag
 * fails at once with an error naming both tags and both ranks instead of
 * waiting. Every wait has a deadline: it spins for a short, bounded time,
 * then sleeps (futex/condition variable for the local backend; polling with
 * sched_yield/nanosleep for MPI), so a waiting rank never holds a core that
 * a peer or another model needs; past the deadline the call fails with
 * COMM_ERR_DEADLINE and the caller exits with COMM_EXIT_DEADLINE.
 *
 * Two backends behind one interface:
 *   local: ranks are threads of one process sharing memory (the default);
 *   mpi:   one process per rank under Open MPI's mpirun.
 * Functions return 0 (COMM_OK) or a negative enum comm_error with a one-line
 * message in err. */
#ifndef LOCKSTEP_COMM_H
#define LOCKSTEP_COMM_H

#include <stddef.h>
#include <stdint.h>

/* Identifies one collective: the step it belongs to and its index within
 * the step (e.g. 2 * layer + 0 for the attention all-reduce). */
struct comm_tag {
    uint64_t step;
    uint32_t index;
};

enum comm_error {
    COMM_OK = 0,
    COMM_ERR_TAG = -1,      /* a peer was in a different collective */
    COMM_ERR_DEADLINE = -2, /* a peer did not arrive before the deadline */
    COMM_ERR_PEER = -3,     /* a peer left (exited, crashed, closed the group) */
    COMM_ERR_USAGE = -4,    /* bad arguments (sizes, root) */
    COMM_ERR_SYSTEM = -5,   /* out of memory, MPI or OS failure */
};

/* Exit codes of a rank that gives up, distinct from 0/1/2 and from signals,
 * so a supervisor can tell why a rank stopped. */
#define COMM_EXIT_TAG      73
#define COMM_EXIT_DEADLINE 74
#define COMM_EXIT_PEER     75
#define COMM_EXIT_SYSTEM   76

/* Exit code for an error returned by a collective. */
int comm_exit_code(int error);

/* One rank's handle on its group. */
struct comm;

enum comm_backend {
    COMM_LOCAL = 0,
    COMM_MPI = 1,
};

/* Default deadline of a collective wait, seconds. */
#define COMM_DEFAULT_DEADLINE 30.0

/* local: creates a group of n ranks in this process; ranks[i] is rank i's
 * handle, to be used by one thread. Free each with comm_free (the group is
 * freed with its last handle). */
int comm_local_create(int n, struct comm **ranks, char *err, size_t errlen);

/* mpi: joins the MPI job this process was started in (calls MPI_Init with
 * MPI_THREAD_FUNNELED; only one struct comm per process). Returns
 * COMM_ERR_USAGE with a message if lockstep was built without MPI. */
int comm_mpi_create(int *argc, char ***argv, struct comm **out, char *err, size_t errlen);

/* After a failed collective a rank's sequence of collectives is broken:
 * every later collective on its handle fails at once with the same error
 * (local: the whole group's). The rank should then stop: a thread rank
 * frees its handle (its peers then fail with COMM_ERR_PEER instead of
 * waiting for their deadline); an MPI rank calls comm_free, which after a
 * failure leaves MPI unfinalized (MPI_Finalize may hang on the collective
 * left in flight), and exits at once with comm_exit_code(error), e.g.
 * _exit(); mpirun then ends the job. A local rank thread that exits without
 * comm_free is noticed by its peers only at their deadline. */

/* mpi: a group of the ranks of comm that give the same color (>= 0),
 * ranked by key: a collective over comm (every rank calls it). The new
 * handle is freed with comm_free before comm. (The local backend's groups
 * are made whole by comm_local_create.) */
int comm_mpi_split(struct comm *comm, int color, int key, struct comm **out, char *err,
                   size_t errlen);

/* Leaves the group (comm_mpi_create's handle also finalizes MPI). */
void comm_free(struct comm *comm);

enum comm_backend comm_backend(const struct comm *comm);
int comm_rank(const struct comm *comm);
int comm_size(const struct comm *comm);

/* Deadline for every later wait of this rank, seconds (> 0). */
void comm_set_deadline(struct comm *comm, double seconds);

/* buf (n floats) becomes the element-wise sum over all ranks, identical on
 * every rank. The sum is taken in rank order (rank 0 + rank 1 + ...) for
 * every element, so the result does not depend on timing. */
int comm_allreduce_sum(struct comm *comm, float *buf, size_t n, struct comm_tag tag, char *err,
                       size_t errlen);

/* Rank root's bytes of buf are copied into every other rank's buf. */
int comm_broadcast(struct comm *comm, void *buf, size_t bytes, int root, struct comm_tag tag,
                   char *err, size_t errlen);

/* Every rank sends send_bytes from send; root receives them concatenated in
 * rank order into recv (recv_bytes[r] from rank r; must equal that rank's
 * send_bytes). recv and recv_bytes are read only on root. */
int comm_gather(struct comm *comm, const void *send, size_t send_bytes, void *recv,
                const size_t *recv_bytes, int root, struct comm_tag tag, char *err, size_t errlen);

/* Every rank sends send_bytes from send (the same size on every rank; a
 * rank whose peer sends another size fails as for a tag mismatch, naming
 * both sizes); every rank receives all ranks' bytes concatenated in rank
 * order into recv (size * send_bytes), rank r's at recv + r * send_bytes.
 * send may be exactly this rank's own place in recv (recv + rank *
 * send_bytes), so a rank can compute its part in place; any other overlap
 * of send and recv is refused with COMM_ERR_USAGE. */
int comm_allgather(struct comm *comm, const void *send, size_t send_bytes, void *recv,
                   struct comm_tag tag, char *err, size_t errlen);

/* ---- point to point: the handoffs between pipeline stages ----
 *
 * A link (one rank to another) delivers messages in the order they were
 * sent and holds at most COMM_MAILBOX_SLOTS of them not yet received: the
 * bounded mailbox of docs/protocol/pipeline.pml, which shows that k steps
 * in flight never find a link full when it holds k. comm_send copies the
 * bytes out and returns as soon as the message is in the link; it waits
 * (spin, then sleep, until the deadline) only while the link is full.
 * comm_recv waits the same way for the next message from source, checks
 * that it carries tag (another tag fails with COMM_ERR_TAG, naming both)
 * and hands it over in memory the caller frees with free(). A message sent
 * before its sender left is still received. */
#define COMM_MAILBOX_SLOTS 9

int comm_send(struct comm *comm, const void *buf, size_t bytes, int dest, struct comm_tag tag,
              char *err, size_t errlen);
int comm_recv(struct comm *comm, int source, struct comm_tag tag, void **message, size_t *bytes,
              char *err, size_t errlen);

/* Waits until every rank has arrived. */
int comm_barrier(struct comm *comm, struct comm_tag tag, char *err, size_t errlen);

/* What a rank is doing, for stuck reports: the tag it is waiting in (or
 * last completed) and since when. Safe to read from another thread. */
struct comm_state {
    int waiting;         /* 1 while inside a collective */
    struct comm_tag tag; /* the collective */
    double since;        /* CLOCK_MONOTONIC seconds when the wait began */
    uint64_t completed;  /* collectives completed so far */
    double wait_seconds; /* total time spent waiting in collectives */
};
void comm_get_state(const struct comm *comm, struct comm_state *state);

/* The same state in memory other processes map (a status file): the rank
 * writes it at every collective, so a supervisor can say what a stuck rank
 * was doing without its cooperation. Times are CLOCK_MONOTONIC ns, which
 * processes of one machine share. */
struct comm_status_record {
    _Atomic int32_t pid;        /* the rank's process; 0: no rank attached yet */
    _Atomic uint32_t waiting;   /* 1 while inside a collective */
    _Atomic uint64_t step;      /* tag of the collective waited in, or the last one */
    _Atomic uint32_t index;     /* ... its index */
    _Atomic uint64_t since_ns;  /* when that collective began */
    _Atomic uint64_t done_ns;   /* when the last collective completed */
    _Atomic uint64_t completed; /* collectives completed */
};

/* From now on the rank mirrors its state into record (NULL: stop). */
void comm_attach_status(struct comm *comm, struct comm_status_record *record);

#endif
