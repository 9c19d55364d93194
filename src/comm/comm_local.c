/* comm_local.c -- the local backend: the ranks are threads of one process
 * and meet in shared memory.
 *
 * Every rank owns a slot. To enter its k-th collective a rank copies its
 * bytes into its slot's buffer for parity k % 2, writes the tag and kind
 * there, then publishes k in its `arrived` counter. It waits until every
 * peer has published k, checking each peer's tag as soon as it appears, and
 * then reads what it needs from the peers' buffers: the all-reduce sums them
 * in rank order (so every rank computes bitwise the same floats, whatever
 * the timing), the broadcast copies the root's, the gather the root
 * concatenates, the all-gather every rank concatenates. One meeting per
 * collective is enough because the buffers alternate: a rank rewrites
 * parity k % 2 only in collective k + 2, which it enters after every peer
 * has entered k + 1 and so has finished reading k.
 *
 * A wait spins for COMM_SPIN_NS, then sleeps on a futex that every arrival,
 * departure and failure bumps (the bump and the wake are skipped while no
 * rank sleeps), with the deadline as its timeout. A rank that fails marks
 * the group broken so the peers waiting with it fail at once; a rank that
 * frees its handle marks itself left so nobody waits for it.
 *
 * Point to point, every ordered pair of ranks has a link: a ring of
 * COMM_MAILBOX_SLOTS messages with one writer (the sender) and one reader
 * (the receiver), counted by `sent` and `taken`. The sender copies the
 * bytes into memory of their own and hands that to the receiver, so a
 * message costs one copy; both sides wait (spin, then the same futex) only
 * for a full or an empty link. */
#include "comm_internal.h"

#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LOCAL_CACHE_LINE 64
/* The most ranks a local group takes: threads of one process, one per
 * core at most, and every pair has a link. */
#define COMM_LOCAL_MAX_RANKS 256

/* One rank's published state. Only the owner writes it; peers read the
 * non-atomic fields of parity k % 2 after they see arrived >= k. */
struct local_slot {
    _Alignas(LOCAL_CACHE_LINE) _Atomic uint64_t arrived; /* last collective entered (1-based) */
    _Atomic int left;                                    /* 1 once the rank freed its handle */
    _Atomic uint64_t tag_step[2];                        /* tag of the collective of each parity */
    _Atomic uint32_t tag_index[2]; /* (atomic so a deadline report may read the last one) */
    enum comm_kind kind[2];        /* its kind */
    size_t bytes[2];               /* bytes in data[parity] */
    int root[2];                   /* broadcast, gather: the root it named */
    void *data[2];                 /* the bytes this rank contributed */
    size_t capacity[2];            /* allocated size of data[parity] */
};

/* A message in a link: the receiver takes over data. */
struct local_message {
    struct comm_tag tag; /* the sender's tag */
    size_t bytes;        /* size of data */
    void *data;          /* malloc'd copy of the sender's bytes */
};

/* Messages from one rank to another, in the order sent. The sender writes
 * the entry at sent % slots, then publishes sent + 1; the receiver reads
 * the entry at taken % slots, then publishes taken + 1. */
struct local_link {
    _Alignas(LOCAL_CACHE_LINE) _Atomic uint64_t sent; /* messages put in */
    _Atomic uint64_t taken;                           /* messages taken out */
    struct local_message ring[COMM_MAILBOX_SLOTS];
};

struct local_group {
    int size;                 /* ranks */
    _Atomic int handles;      /* handles not yet freed */
    _Atomic uint32_t wake;    /* futex word, bumped on every change */
    _Atomic int sleepers;     /* ranks asleep (or about to) on wake */
    _Atomic uint32_t broken;  /* 0, or the first failure: -error << 16 | its rank (one
                               * word, so a reader never sees the error without the rank) */
    struct local_slot *slots; /* size slots, cache-line aligned */
    struct local_link *links; /* (size, size) link from rank i to rank j at i * size + j */
    char broken_message[256]; /* the first failure's message, written by the rank that broke
                               * the group, then published by broken_told */
    _Atomic int broken_told;  /* 1 once broken_message is whole */
};

struct comm_local {
    struct comm head;          /* must be first */
    struct local_group *group; /* shared by the ranks */
    uint64_t entered;          /* collectives entered by this rank */
};

static void group_free(struct local_group *group) {
    for (int r = 0; r < group->size; r++) {
        free(group->slots[r].data[0]);
        free(group->slots[r].data[1]);
    }
    size_t n_links = (size_t)group->size * (size_t)group->size;
    for (size_t i = 0; group->links && i < n_links; i++) {
        struct local_link *link = &group->links[i];
        for (uint64_t m = atomic_load(&link->taken); m < atomic_load(&link->sent); m++)
            free(link->ring[m % COMM_MAILBOX_SLOTS].data);
    }
    free(group->links);
    free(group->slots);
    free(group);
}

/* Wakes the sleepers after a change they may be waiting for. The caller's
 * seq_cst store of that change and this seq_cst load of sleepers pair with
 * the sleeper's increment and re-check: one of the two sees the other. */
static void group_notify(struct local_group *group) {
    if (atomic_load(&group->sleepers) == 0) return;
    atomic_fetch_add(&group->wake, 1);
    syscall(SYS_futex, &group->wake, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Marks the group broken by rank's error (the first failure wins) and
 * keeps its message, so the peers that give up because of it can say
 * what happened (a link's tag mismatch is seen by its receiver alone). */
static void group_break(struct local_group *group, int error, int rank, const char *message) {
    uint32_t expected = 0;
    if (atomic_compare_exchange_strong(&group->broken, &expected,
                                       (uint32_t)-error << 16 | (uint32_t)rank)) {
        snprintf(group->broken_message, sizeof(group->broken_message), "%s", message);
        atomic_store(&group->broken_told, 1);
    }
    group_notify(group);
}

/* The breaking rank's message, or "" while it is being written. */
static const char *broken_message(const struct local_group *group) {
    return atomic_load(&group->broken_told) ? group->broken_message : "";
}

static void local_free(struct comm *comm) {
    struct comm_local *local = (struct comm_local *)comm;
    struct local_group *group = local->group;
    atomic_store(&group->slots[comm->rank].left, 1);
    group_notify(group);
    if (atomic_fetch_sub(&group->handles, 1) == 1) group_free(group);
    free(local);
}

/* Copies this rank's bytes into its slot and publishes the collective. */
static int publish(struct comm_local *local, const struct comm_call *call, char *err,
                   size_t errlen) {
    struct local_slot *slot = &local->group->slots[local->head.rank];
    uint64_t seq = ++local->entered;
    int parity = (int)(seq & 1);
    if (call->send_bytes > slot->capacity[parity]) {
        void *grown = realloc(slot->data[parity], call->send_bytes);
        if (!grown)
            return comm_fail(err, errlen, COMM_ERR_SYSTEM, local->head.rank,
                             "out of memory for a %zu-byte collective buffer", call->send_bytes);
        slot->data[parity] = grown;
        slot->capacity[parity] = call->send_bytes;
    }
    if (call->send_bytes > 0) memcpy(slot->data[parity], call->send, call->send_bytes);
    slot->kind[parity] = call->kind;
    slot->bytes[parity] = call->send_bytes;
    slot->root[parity] = call->root;
    atomic_store_explicit(&slot->tag_step[parity], call->tag.step, memory_order_relaxed);
    atomic_store_explicit(&slot->tag_index[parity], call->tag.index, memory_order_relaxed);
    atomic_store(&slot->arrived, seq);
    group_notify(local->group);
    return COMM_OK;
}

/* Compares a peer's published collective with this rank's: the tag, then
 * the kind, the root and (where they must agree) the size. */
static int check_peer(const struct comm_local *local, const struct comm_call *call, int peer,
                      char *err, size_t errlen) {
    const struct local_slot *slot = &local->group->slots[peer];
    int parity = (int)(local->entered & 1);
    int rank = local->head.rank;
    struct comm_tag theirs = {atomic_load_explicit(&slot->tag_step[parity], memory_order_relaxed),
                              atomic_load_explicit(&slot->tag_index[parity], memory_order_relaxed)};
    if (theirs.step != call->tag.step || theirs.index != call->tag.index)
        return comm_fail_tag(err, errlen, rank, call->tag, peer, theirs);
    const char *what = NULL;
    if (slot->kind[parity] != call->kind)
        what = comm_kind_name(slot->kind[parity]);
    else if (call->kind != COMM_KIND_BARRIER && slot->root[parity] != call->root)
        what = "the same collective with another root";
    else if (call->kind == COMM_KIND_ALLREDUCE && slot->bytes[parity] != call->send_bytes)
        what = "an all-reduce of another size";
    else if (call->kind == COMM_KIND_ALLGATHER && slot->bytes[parity] != call->send_bytes)
        what = "an all-gather of another size";
    else if (call->kind == COMM_KIND_GATHER && rank == call->root &&
             slot->bytes[parity] != call->recv_bytes[peer])
        what = "a gather sending another size";
    else if (call->kind == COMM_KIND_BROADCAST && peer == call->root &&
             slot->bytes[parity] != call->send_bytes)
        what = "a broadcast of another size";
    if (!what) return COMM_OK;
    return comm_fail(err, errlen, COMM_ERR_TAG, rank,
                     "collective mismatch in (step %llu, index %u): this rank is in a %s of %zu "
                     "bytes (root %d), rank %d in %s (%zu bytes, root %d)",
                     (unsigned long long)call->tag.step, (unsigned)call->tag.index,
                     comm_kind_name(call->kind), call->send_bytes, call->root, peer, what,
                     slot->bytes[parity], slot->root[parity]);
}

/* Looks at every peer once: returns 1 when all have arrived (and agree),
 * 0 while some have not, or an error. The group's failure is read first:
 * what the failing rank saw before it broke the group is then in view, so
 * a collective every rank entered completes even if a later one broke the
 * group, and a rank that disagrees with the failing rank or its peer
 * reports that mismatch, the same whichever rank got there first. */
static int scan_peers(const struct comm_local *local, const struct comm_call *call, char *err,
                      size_t errlen) {
    const struct local_group *group = local->group;
    uint32_t broken = atomic_load(&group->broken);
    int all = 1;
    for (int peer = 0; peer < group->size; peer++) {
        if (peer == local->head.rank) continue;
        const struct local_slot *slot = &group->slots[peer];
        if (atomic_load(&slot->arrived) >= local->entered) {
            int rc = check_peer(local, call, peer, err, errlen);
            if (rc) return rc;
            continue;
        }
        all = 0;
        if (atomic_load(&slot->left))
            return comm_fail(err, errlen, COMM_ERR_PEER, local->head.rank,
                             "rank %d left the group while this rank waited in %s (step %llu, "
                             "index %u)",
                             peer, comm_kind_name(call->kind), (unsigned long long)call->tag.step,
                             (unsigned)call->tag.index);
    }
    if (all) return 1;
    if (!broken) return 0;
    int error = -(int)(broken >> 16);
    return comm_fail(err, errlen, error, local->head.rank,
                     "%s (step %llu, index %u) abandoned: rank %u failed in the group (%s)",
                     comm_kind_name(call->kind), (unsigned long long)call->tag.step,
                     (unsigned)call->tag.index, (unsigned)(broken & 0xffff),
                     error == COMM_ERR_TAG        ? "collective mismatch"
                     : error == COMM_ERR_DEADLINE ? "deadline passed"
                     : error == COMM_ERR_PEER     ? "a peer left"
                                                  : "system error");
}

/* The deadline message: the tag, the deadline and every rank not arrived
 * with the last collective it entered. */
static int deadline_error(const struct comm_local *local, const struct comm_call *call, char *err,
                          size_t errlen) {
    char missing[512] = "";
    size_t used = 0;
    int parity = (int)((local->entered - 1) & 1);
    for (int peer = 0; peer < local->group->size && used < sizeof(missing); peer++) {
        const struct local_slot *slot = &local->group->slots[peer];
        if (peer == local->head.rank || atomic_load(&slot->arrived) >= local->entered) continue;
        int n = snprintf(
            missing + used, sizeof(missing) - used, "%srank %d (last in step %llu, index %u)",
            used ? ", " : "", peer,
            (unsigned long long)atomic_load_explicit(&slot->tag_step[parity], memory_order_relaxed),
            (unsigned)atomic_load_explicit(&slot->tag_index[parity], memory_order_relaxed));
        if (n < 0) break;
        used += (size_t)n;
    }
    return comm_fail(err, errlen, COMM_ERR_DEADLINE, local->head.rank,
                     "deadline of %.3f s passed in %s (step %llu, index %u); not arrived: %s",
                     (double)local->head.deadline_ns * 1e-9, comm_kind_name(call->kind),
                     (unsigned long long)call->tag.step, (unsigned)call->tag.index, missing);
}

/* Looks once at what a wait waits for: 1 when it is there, 0 while it is
 * not, or an error. */
typedef int (*local_scan)(const struct comm_local *local, const struct comm_call *call, char *err,
                          size_t errlen);
/* The error of a wait whose deadline passed. */
typedef int (*local_expired)(const struct comm_local *local, const struct comm_call *call,
                             char *err, size_t errlen);

/* Sleeps on the group's futex until something changes or until deadline. */
static int sleep_on_group(const struct comm_local *local, const struct comm_call *call,
                          local_scan scan, uint64_t deadline, char *err, size_t errlen) {
    struct local_group *group = local->group;
    atomic_fetch_add(&group->sleepers, 1);
    uint32_t seen = atomic_load(&group->wake);
    int rc = scan(local, call, err, errlen);
    uint64_t now = comm_now_ns();
    if (rc == 0 && now < deadline) {
        uint64_t left = deadline - now;
        struct timespec timeout = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        syscall(SYS_futex, &group->wake, FUTEX_WAIT_PRIVATE, seen, &timeout, NULL, 0);
    }
    atomic_fetch_sub(&group->sleepers, 1);
    return rc;
}

/* Waits until scan finds what the call waits for: spins COMM_SPIN_NS,
 * then sleeps, and gives up at the deadline with expired's error. */
static int wait_until(const struct comm_local *local, const struct comm_call *call, local_scan scan,
                      local_expired expired, char *err, size_t errlen) {
    uint64_t start = comm_now_ns();
    uint64_t deadline = start + local->head.deadline_ns;
    for (;;) {
        int rc = scan(local, call, err, errlen);
        if (rc) return rc < 0 ? rc : COMM_OK;
        uint64_t now = comm_now_ns();
        if (now >= deadline) return expired(local, call, err, errlen);
        if (now - start < COMM_SPIN_NS) {
            comm_cpu_relax();
            continue;
        }
        rc = sleep_on_group(local, call, scan, deadline, err, errlen);
        if (rc) return rc < 0 ? rc : COMM_OK;
    }
}

/* Waits until every peer has entered this collective with the same tag. */
static int wait_for_peers(const struct comm_local *local, const struct comm_call *call, char *err,
                          size_t errlen) {
    return wait_until(local, call, scan_peers, deadline_error, err, errlen);
}

/* Reads the peers' buffers into this rank's result. */
static void combine(const struct comm_local *local, const struct comm_call *call) {
    const struct local_group *group = local->group;
    int parity = (int)(local->entered & 1);
    switch (call->kind) {
    case COMM_KIND_ALLREDUCE: {
        float *out = call->recv;
        size_t n = call->send_bytes / sizeof(float);
        if (n == 0) break;
        memcpy(out, group->slots[0].data[parity], call->send_bytes);
        for (int r = 1; r < group->size; r++) {
            const float *in = group->slots[r].data[parity];
            for (size_t i = 0; i < n; i++) out[i] += in[i];
        }
        break;
    }
    case COMM_KIND_BROADCAST:
        if (local->head.rank != call->root && call->send_bytes > 0)
            memcpy(call->recv, group->slots[call->root].data[parity], call->send_bytes);
        break;
    case COMM_KIND_GATHER:
        if (local->head.rank == call->root) {
            unsigned char *out = call->recv;
            for (int r = 0; r < group->size; r++) {
                if (call->recv_bytes[r] > 0)
                    memcpy(out, group->slots[r].data[parity], call->recv_bytes[r]);
                out += call->recv_bytes[r];
            }
        }
        break;
    case COMM_KIND_ALLGATHER: {
        unsigned char *out = call->recv;
        for (int r = 0; r < group->size && call->send_bytes > 0; r++, out += call->send_bytes)
            if (out != call->send) /* else: sent from its own place, already there */
                memcpy(out, group->slots[r].data[parity], call->send_bytes);
        break;
    }
    case COMM_KIND_BARRIER:
    case COMM_KIND_SEND: /* (point to point calls never combine) */
    case COMM_KIND_RECV:
        break;
    }
}

/* The link from rank `from` to rank `to`. */
static struct local_link *link_of(const struct comm_local *local, int from, int to) {
    return &local->group->links[(size_t)from * (size_t)local->group->size + (size_t)to];
}

/* Why a link wait cannot go on, if it cannot: the peer left, or a rank
 * broke the group; else 0. */
static int link_blocked(const struct comm_local *local, const struct comm_call *call, char *err,
                        size_t errlen) {
    const struct local_group *group = local->group;
    const char *what = call->kind == COMM_KIND_SEND ? "send to" : "receive from";
    if (atomic_load(&group->slots[call->root].left))
        return comm_fail(err, errlen, COMM_ERR_PEER, local->head.rank,
                         "rank %d left the group while this rank waited to %s it (step %llu, "
                         "index %u)",
                         call->root, call->kind == COMM_KIND_SEND ? "send to" : "receive from",
                         (unsigned long long)call->tag.step, (unsigned)call->tag.index);
    uint32_t broken = atomic_load(&group->broken);
    if (!broken) return 0;
    return comm_fail(err, errlen, -(int)(broken >> 16), local->head.rank,
                     "%s rank %d (step %llu, index %u) abandoned: rank %u failed in the group "
                     "(%s)",
                     what, call->root, (unsigned long long)call->tag.step,
                     (unsigned)call->tag.index, (unsigned)(broken & 0xffff), broken_message(group));
}

/* A send's wait: 1 once the link has a free slot. */
static int scan_link_room(const struct comm_local *local, const struct comm_call *call, char *err,
                          size_t errlen) {
    const struct local_link *link = link_of(local, local->head.rank, call->root);
    if (atomic_load(&link->sent) - atomic_load(&link->taken) < COMM_MAILBOX_SLOTS) return 1;
    return link_blocked(local, call, err, errlen);
}

/* A receive's wait: 1 once the link holds a message (even from a peer
 * that has left since). */
static int scan_link_message(const struct comm_local *local, const struct comm_call *call,
                             char *err, size_t errlen) {
    const struct local_link *link = link_of(local, call->root, local->head.rank);
    if (atomic_load(&link->sent) > atomic_load(&link->taken)) return 1;
    return link_blocked(local, call, err, errlen);
}

static int link_deadline(const struct comm_local *local, const struct comm_call *call, char *err,
                         size_t errlen) {
    int sending = call->kind == COMM_KIND_SEND;
    return comm_fail(err, errlen, COMM_ERR_DEADLINE, local->head.rank,
                     "deadline of %.3f s passed in %s rank %d (step %llu, index %u): %s",
                     (double)local->head.deadline_ns * 1e-9,
                     sending ? "a send to" : "a receive from", call->root,
                     (unsigned long long)call->tag.step, (unsigned)call->tag.index,
                     sending ? "its mailbox stayed full" : "nothing arrived");
}

static int link_send(struct comm_local *local, const struct comm_call *call, char *err,
                     size_t errlen) {
    int rc = wait_until(local, call, scan_link_room, link_deadline, err, errlen);
    if (rc) return rc;
    void *copy = malloc(call->send_bytes > 0 ? call->send_bytes : 1);
    if (!copy)
        return comm_fail(err, errlen, COMM_ERR_SYSTEM, local->head.rank,
                         "out of memory for a %zu-byte message", call->send_bytes);
    if (call->send_bytes > 0) memcpy(copy, call->send, call->send_bytes);
    struct local_link *link = link_of(local, local->head.rank, call->root);
    uint64_t sent = atomic_load(&link->sent);
    struct local_message *m = &link->ring[sent % COMM_MAILBOX_SLOTS];
    m->tag = call->tag;
    m->bytes = call->send_bytes;
    m->data = copy; /* the receiver takes it over */
    atomic_store(&link->sent, sent + 1);
    group_notify(local->group);
    return COMM_OK;
}

static int link_recv(struct comm_local *local, const struct comm_call *call, char *err,
                     size_t errlen) {
    int rc = wait_until(local, call, scan_link_message, link_deadline, err, errlen);
    if (rc) return rc;
    struct local_link *link = link_of(local, call->root, local->head.rank);
    uint64_t taken = atomic_load(&link->taken);
    struct local_message *m = &link->ring[taken % COMM_MAILBOX_SLOTS];
    if (m->tag.step != call->tag.step || m->tag.index != call->tag.index)
        return comm_fail_tag(err, errlen, local->head.rank, call->tag, call->root, m->tag);
    *call->message = m->data;
    *call->message_bytes = m->bytes;
    m->data = NULL;
    atomic_store(&link->taken, taken + 1);
    group_notify(local->group);
    return COMM_OK;
}

static int local_run(struct comm *comm, const struct comm_call *call, char *err, size_t errlen) {
    struct comm_local *local = (struct comm_local *)comm;
    int rc;
    if (call->kind == COMM_KIND_SEND)
        rc = link_send(local, call, err, errlen);
    else if (call->kind == COMM_KIND_RECV)
        rc = link_recv(local, call, err, errlen);
    else {
        rc = publish(local, call, err, errlen);
        if (rc == COMM_OK) rc = wait_for_peers(local, call, err, errlen);
        if (rc == COMM_OK) combine(local, call);
    }
    if (rc != COMM_OK) group_break(local->group, rc, comm->rank, err);
    return rc;
}

static const struct comm_ops local_ops = {local_run, local_free};

int comm_local_create(int n, struct comm **ranks, char *err, size_t errlen) {
    if (n < 1 || n > COMM_LOCAL_MAX_RANKS || !ranks)
        return comm_fail(err, errlen, COMM_ERR_USAGE, 0,
                         "a local group needs 1..%d ranks and an array for them, got %d",
                         COMM_LOCAL_MAX_RANKS, n);
    struct local_group *group = calloc(1, sizeof(*group));
    struct local_slot *slots = aligned_alloc(LOCAL_CACHE_LINE, (size_t)n * sizeof(*slots));
    size_t links_bytes = (size_t)n * (size_t)n * sizeof(struct local_link);
    struct local_link *links = aligned_alloc(LOCAL_CACHE_LINE, links_bytes);
    if (!group || !slots || !links) {
        free(group);
        free(slots);
        free(links);
        return comm_fail(err, errlen, COMM_ERR_SYSTEM, 0, "out of memory for a group of %d", n);
    }
    memset(slots, 0, (size_t)n * sizeof(*slots));
    memset(links, 0, links_bytes);
    group->size = n;
    group->slots = slots;
    group->links = links;
    atomic_init(&group->handles, 0);
    for (int r = 0; r < n; r++) {
        struct comm_local *local = calloc(1, sizeof(*local));
        if (!local) {
            for (int done = 0; done < r; done++) free(ranks[done]);
            group_free(group);
            return comm_fail(err, errlen, COMM_ERR_SYSTEM, 0, "out of memory for rank %d", r);
        }
        comm_init_head(&local->head, &local_ops, COMM_LOCAL, r, n);
        local->group = group;
        ranks[r] = &local->head;
    }
    atomic_store(&group->handles, n);
    return COMM_OK;
}
