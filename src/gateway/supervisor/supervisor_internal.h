/* supervisor_internal.h -- what the supervisor's files share: the state
 * machine's one transition function, the job table's part of the runner
 * loop, and the watchdog. Every function here runs with the supervisor's
 * lock held unless it says otherwise. */
#ifndef LOCKSTEP_GATEWAY_SUPERVISOR_INTERNAL_H
#define LOCKSTEP_GATEWAY_SUPERVISOR_INTERNAL_H

#include "gateway/supervisor/supervisor.h"

/* supervisor.c */
/* Moves s to state `to`; a transition the table in supervisor.h does not
 * have is a bug, logged and refused. DRAINING is final. */
void supervisor_set_state(struct supervisor *s, enum supervisor_state to);

/* jobs.c */
/* Queues the ADD of every job the current runner has not been given, while
 * the outbox has room. */
void supervisor_queue_jobs(struct supervisor *s);
/* Writes what the socket takes of the outbox (never waits); -1 if the
 * connection broke. */
int supervisor_flush(struct supervisor *s);
/* Handles a TOKEN, FINISHED, ERROR or HEARTBEAT frame (no lock held). */
void supervisor_dispatch(struct supervisor *s, const struct runner_frame *frame);
/* supervisor_fail with the lock held (too many failed starts, alone). */
void supervisor_fail_locked(struct supervisor *s, int status, const char *message);

/* watchdog.c */
/* Maps a fresh, zeroed status file for the next runner; -1 if it cannot. */
int supervisor_watchdog_prepare(struct supervisor *s);
void supervisor_watchdog_free(struct supervisor *s);
/* A heartbeat arrived: progress, and a step time for the deadline. */
void supervisor_watchdog_note(struct supervisor *s, const struct runner_heartbeat *heartbeat);
/* Seconds without progress after which a runner with work is stuck. */
double supervisor_watchdog_deadline(const struct supervisor *s);
/* 1 if the runner has work and made no progress within the deadline. */
int supervisor_watchdog_expired(const struct supervisor *s, uint64_t now_us);
/* Says what every rank was doing (logged): the report's JSON (free() it), or NULL. */
char *supervisor_watchdog_report(struct supervisor *s, uint64_t now_us);
/* The process of rank `rank` (its status record, else the runner's). */
pid_t supervisor_rank_pid(const struct supervisor *s, int rank);

#endif
