/* test_comm_links.c -- point to point links of the local backend (the
 * handoffs between pipeline stages, comm_send and comm_recv).
 *
 * Checks that messages arrive whole and in the order sent while K steps are
 * in flight around a ring of stages (the pattern of docs/protocol/
 * pipeline.pml, with K up to COMM_MAILBOX_SLOTS), and that each failure the
 * design names happens instead of a hang: a full mailbox and an empty one
 * reach the deadline with a message naming the peer; a message with another
 * tag fails naming both tags; a message sent before its sender left is
 * still received, the next receive fails because the peer left.
 *
 * ctest-labels: concurrency */
#include "comm/comm.h"
#include "testutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define RANKS     3
#define STEPS     300
#define ERR_BYTES 512

/* Byte i of the message stage `from` passes on in step k. */
static unsigned char message_byte(int k, int from, size_t i) {
    return (unsigned char)(k * 31 + from * 7 + i);
}

/* The size of step k's messages: empty, small and large ones. */
static size_t message_size(int k) {
    return k % 7 == 0 ? 0 : (size_t)(k * 977 % 70000);
}

struct ring_rank {
    struct comm *comm;
    int in_flight; /* steps rank 0 keeps in flight */
    int failures;
    char err[ERR_BYTES];
};

/* 1 if message holds what stage `from` sends in step k. */
static int message_is(const unsigned char *message, size_t bytes, int k, int from) {
    if (bytes != message_size(k)) return 0;
    for (size_t i = 0; i < bytes; i++)
        if (message[i] != message_byte(k, from, i)) return 0;
    return 1;
}

static int send_step(struct ring_rank *r, int k, int dest) {
    size_t bytes = message_size(k);
    unsigned char *data = malloc(bytes + 1);
    for (size_t i = 0; i < bytes; i++) data[i] = message_byte(k, comm_rank(r->comm), i);
    int rc = comm_send(r->comm, data, bytes, dest, (struct comm_tag){(uint64_t)k, 3}, r->err,
                       sizeof(r->err));
    free(data);
    return rc;
}

/* Receives step k from source and checks it; 0 or -1. */
static int receive_step(struct ring_rank *r, int k, int source) {
    void *message = NULL;
    size_t bytes = 0;
    int rc = comm_recv(r->comm, source, (struct comm_tag){(uint64_t)k, 3}, &message, &bytes, r->err,
                       sizeof(r->err));
    if (rc == COMM_OK && !message_is(message, bytes, k, source)) {
        snprintf(r->err, sizeof(r->err), "step %d from rank %d: wrong bytes", k, source);
        rc = -1;
    }
    free(message);
    return rc;
}

/* Rank 0 submits steps to rank 1 and collects them from the last rank,
 * keeping in_flight of them out; the others receive from the rank before
 * and pass on. */
static void *ring_main(void *arg) {
    struct ring_rank *r = arg;
    int rank = comm_rank(r->comm), size = comm_size(r->comm);
    if (rank == 0) {
        int submitted = 0, collected = 0;
        while (collected < STEPS) {
            int rc = submitted < STEPS && submitted - collected < r->in_flight
                         ? send_step(r, submitted++, 1)
                         : receive_step(r, collected++, size - 1);
            if (rc) {
                r->failures++;
                return NULL;
            }
        }
        return NULL;
    }
    for (int k = 0; k < STEPS; k++)
        if (receive_step(r, k, rank - 1) || send_step(r, k, (rank + 1) % size)) {
            r->failures++;
            return NULL;
        }
    return NULL;
}

/* Steps in flight from 1 to the mailbox's slots never find a link full:
 * every step arrives whole, in order, within a deadline far above what a
 * step takes. */
static void test_ring(void) {
    for (int in_flight = 1; in_flight <= COMM_MAILBOX_SLOTS; in_flight *= 2) {
        struct comm *comms[RANKS];
        struct ring_rank ranks[RANKS];
        pthread_t threads[RANKS];
        char err[ERR_BYTES];
        CHECK(comm_local_create(RANKS, comms, err, sizeof(err)) == COMM_OK);
        for (int i = 0; i < RANKS; i++) {
            ranks[i] = (struct ring_rank){comms[i], in_flight, 0, ""};
            comm_set_deadline(comms[i], 20.0);
            CHECK(pthread_create(&threads[i], NULL, ring_main, &ranks[i]) == 0);
        }
        for (int i = 0; i < RANKS; i++) {
            pthread_join(threads[i], NULL);
            CHECK_MSG(ranks[i].failures == 0, "%d in flight, rank %d: %s", in_flight, i,
                      ranks[i].err);
            comm_free(comms[i]);
        }
    }
}

/* A sender whose receiver takes nothing fills the mailbox, then reaches
 * the deadline; a receiver with nothing sent reaches it too. Both messages
 * name the peer and the tag. */
static void test_deadlines(void) {
    struct comm *c[2];
    char err[ERR_BYTES];
    CHECK(comm_local_create(2, c, err, sizeof(err)) == COMM_OK);
    comm_set_deadline(c[0], 0.05);
    comm_set_deadline(c[1], 0.05);
    int rc = COMM_OK;
    for (int k = 0; k < COMM_MAILBOX_SLOTS && rc == COMM_OK; k++)
        rc = comm_send(c[0], "abc", 3, 1, (struct comm_tag){(uint64_t)k, 0}, err, sizeof(err));
    CHECK_MSG(rc == COMM_OK, "%s", err);
    rc = comm_send(c[0], "abc", 3, 1, (struct comm_tag){99, 0}, err, sizeof(err));
    CHECK_MSG(rc == COMM_ERR_DEADLINE && strstr(err, "send to rank 1 (step 99, index 0)") &&
                  strstr(err, "mailbox stayed full"),
              "%d %s", rc, err);
    /* the failure broke the group, yet a message queued before it is received */
    void *message = NULL;
    size_t bytes = 0;
    rc = comm_recv(c[1], 0, (struct comm_tag){0, 0}, &message, &bytes, err, sizeof(err));
    free(message);
    CHECK_MSG(rc == COMM_OK, "a message queued before the failure is received: %s", err);
    comm_free(c[0]);
    comm_free(c[1]);

    CHECK(comm_local_create(2, c, err, sizeof(err)) == COMM_OK);
    comm_set_deadline(c[1], 0.05);
    rc = comm_recv(c[1], 0, (struct comm_tag){4, 2}, &message, &bytes, err, sizeof(err));
    CHECK_MSG(rc == COMM_ERR_DEADLINE && message == NULL &&
                  strstr(err, "receive from rank 0 (step 4, index 2)") &&
                  strstr(err, "nothing arrived"),
              "%d %s", rc, err);
    comm_free(c[0]);
    comm_free(c[1]);
}

/* A message with another tag than the receiver expects fails with both
 * tags named. */
static void test_tag(void) {
    struct comm *c[2];
    char err[ERR_BYTES];
    void *message = NULL;
    size_t bytes = 0;
    CHECK(comm_local_create(2, c, err, sizeof(err)) == COMM_OK);
    CHECK(comm_send(c[0], "x", 1, 1, (struct comm_tag){5, 2}, err, sizeof(err)) == COMM_OK);
    int rc = comm_recv(c[1], 0, (struct comm_tag){5, 1}, &message, &bytes, err, sizeof(err));
    CHECK_MSG(rc == COMM_ERR_TAG && message == NULL && strstr(err, "(step 5, index 1)") &&
                  strstr(err, "(step 5, index 2)"),
              "%d %s", rc, err);
    CHECK(comm_exit_code(rc) == COMM_EXIT_TAG);
    comm_free(c[0]);
    comm_free(c[1]);
}

/* What a rank sent before it left is delivered; after that, its peer's
 * receive fails at once (no deadline wait) with COMM_ERR_PEER. */
static void test_left(void) {
    struct comm *c[2];
    char err[ERR_BYTES];
    void *message = NULL;
    size_t bytes = 0;
    CHECK(comm_local_create(2, c, err, sizeof(err)) == COMM_OK);
    comm_set_deadline(c[1], 30.0);
    CHECK(comm_send(c[0], "last", 4, 1, (struct comm_tag){7, 0}, err, sizeof(err)) == COMM_OK);
    comm_free(c[0]);
    int rc = comm_recv(c[1], 0, (struct comm_tag){7, 0}, &message, &bytes, err, sizeof(err));
    CHECK_MSG(rc == COMM_OK && bytes == 4 && message && memcmp(message, "last", 4) == 0, "%s", err);
    free(message);
    rc = comm_recv(c[1], 0, (struct comm_tag){8, 0}, &message, &bytes, err, sizeof(err));
    CHECK_MSG(rc == COMM_ERR_PEER && strstr(err, "rank 0 left"), "%d %s", rc, err);
    comm_free(c[1]);
}

/* Sending to oneself or to a rank outside the group is refused. */
static void test_usage(void) {
    struct comm *c[2];
    char err[ERR_BYTES];
    CHECK(comm_local_create(2, c, err, sizeof(err)) == COMM_OK);
    CHECK(comm_send(c[0], "x", 1, 0, (struct comm_tag){0, 0}, err, sizeof(err)) == COMM_ERR_USAGE);
    CHECK(comm_send(c[0], "x", 1, 2, (struct comm_tag){0, 0}, err, sizeof(err)) == COMM_ERR_USAGE);
    CHECK(comm_send(c[0], NULL, 1, 1, (struct comm_tag){0, 0}, err, sizeof(err)) == COMM_ERR_USAGE);
    /* usage errors do not break the handle */
    CHECK(comm_send(c[0], "x", 1, 1, (struct comm_tag){0, 0}, err, sizeof(err)) == COMM_OK);
    comm_free(c[0]);
    comm_free(c[1]); /* the message never received is freed with the group */
}

int main(void) {
    test_ring();
    test_deadlines();
    test_tag();
    test_left();
    test_usage();
    return test_status("test_comm_links");
}
