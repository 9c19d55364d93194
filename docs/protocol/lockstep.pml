/* lockstep.pml -- lockstep's step protocol, as DESIGN.md states it.
 *
 * One model instance: a gateway that owns the requests (I4) and supervises
 * one runner of NRANKS ranks; rank 0, the leader, decides each step and
 * broadcasts its plan (I2); every rank runs exactly that plan, whose
 * collectives carry a (step, index) tag; the leader starts step k+1 only
 * after step k completed on every rank (I1); requests join at step
 * boundaries; every collective wait has a deadline (I3); the gateway's
 * supervisor restarts a runner that exited and its watchdog kills one that
 * stopped making progress, then resubmits the unfinished requests with
 * their generated tokens (I4). Requests arrive at any time; a fault
 * injector pauses or kills ranks, at most MAXFAULTS times in a run.
 *
 * Time is abstract. Every rank is assumed to finish a step well within the
 * deadlines, so a deadline can expire only while a rank that the waiter
 * depends on cannot make progress (paused, exited, killed): then the wait
 * nondeterministically either outlives the fault or gives up. The same
 * holds for the watchdog. A false alarm of the watchdog (a step slower than
 * its deadline) is one of the faults.
 *
 * Checked (see README.md): no invalid end state, i.e. every run that stops
 * stops with every request complete; the assertions below; and the LTL
 * property `live` (every accepted request eventually completes) under weak
 * fairness.
 *
 * Parameters (spin -DNAME=value): NRANKS 2 or 3, NREQ 1..3 requests over
 * the run, LEN tokens per request, BATCH sequences per step (the token
 * budget), MAXFAULTS faults per run. MUTANT_* switches break one part of
 * the design each, to show that the checks catch it (check.sh).
 */

#ifndef NRANKS
#define NRANKS 2
#endif
#ifndef NREQ
#define NREQ 3
#endif
#ifndef LEN
#define LEN 2
#endif
#ifndef BATCH
#define BATCH 2
#endif
#ifndef MAXFAULTS
#define MAXFAULTS 1
#endif

#if NRANKS < 2 || NRANKS > 3
#error "NRANKS must be 2 or 3"
#endif
#if NREQ < 1 || NREQ > 3
#error "NREQ must be 1, 2 or 3"
#endif

/* Collective tags (step, index) flattened into one number that grows with
 * every collective of an incarnation; 0 means "none entered yet". Each step
 * has two collectives: the plan broadcast and an all-reduce that stands for
 * all of the step's all-reduces and the logits gather. */
#define PLAN_TAG(k) (2 * (k) + 1)
#define REDUCE_TAG(k) (2 * (k) + 2)

#define BIT(i) (1 << (i))

/* Room for the largest NREQ in messages and arrays. */
#define MAXREQ 3

mtype = { TOKENS, HEARTBEAT };

/* ---- runner protocol: one unix-socket connection per runner incarnation */

/* gateway -> leader: add request (id, tokens already generated) */
chan to_leader = [NREQ] of { byte, byte };
/* leader -> gateway: TOKENS (plan, position of request 0, 1, 2): one
 * token for each request in the plan; or HEARTBEAT */
chan to_gateway = [2] of { mtype, byte, byte, byte, byte };

/* ---- the gateway's request registry: outlives every runner (I4) */

bool accepted[NREQ];  /* the client's request was accepted */
byte generated[NREQ]; /* tokens streamed to the client so far */
bool completed[NREQ]; /* all LEN tokens streamed */
byte naccepted;
byte ncompleted;

/* ---- rank processes, as the launcher and the operating system see them */

bool start[NRANKS];     /* the supervisor has just started this rank */
bool alive[NRANKS];     /* the rank's process is running (not yet reaped) */
bool exited[NRANKS];    /* it exited (deadline, fault) and was noticed */
bool paused[NRANKS];    /* stopped: SIGSTOP, a lost host, a stall */
bool resumes[NRANKS];   /* the pause ends by itself (a slow rank) */
bool kill_sent[NRANKS]; /* SIGKILL delivered, not yet taken effect */
byte nfaults;           /* faults injected so far (<= MAXFAULTS) */

/* ---- shared-memory collectives of the local backend (one slot per rank) */

byte posted[NRANKS];      /* tag of the last collective the rank entered */
byte posted_plan[NRANKS]; /* the plan it carries into its all-reduce */
byte plan_sent;           /* the plan the leader broadcasts: request bitmask */

#define CANNOT_PROGRESS(j) (paused[j] || exited[j] || kill_sent[j] || !alive[j])
#define RUNNING(r) (alive[r] && !paused[r] && !exited[r] && !kill_sent[r])

#if NRANKS == 2
#define ALL_POSTED(t) (posted[0] >= (t) && posted[1] >= (t))
#define LATE_AND_STUCK(t) \
  ((posted[0] < (t) && CANNOT_PROGRESS(0)) || (posted[1] < (t) && CANNOT_PROGRESS(1)))
#define ANY_PAUSED (paused[0] || paused[1])
#define ANY_EXITED (exited[0] || exited[1])
#define ALL_GONE (!alive[0] && !alive[1])
#else
#define ALL_POSTED(t) (posted[0] >= (t) && posted[1] >= (t) && posted[2] >= (t))
#define LATE_AND_STUCK(t) \
  ((posted[0] < (t) && CANNOT_PROGRESS(0)) || (posted[1] < (t) && CANNOT_PROGRESS(1)) || \
   (posted[2] < (t) && CANNOT_PROGRESS(2)))
#define ANY_PAUSED (paused[0] || paused[1] || paused[2])
#define ANY_EXITED (exited[0] || exited[1] || exited[2])
#define ALL_GONE (!alive[0] && !alive[1] && !alive[2])
#endif

/* Work the gateway has accepted and not yet streamed to the end. */
#define PENDING (naccepted > ncompleted)

/* ---- the runner ------------------------------------------------------- */

/* A rank's process ends (deadline exit or SIGKILL): the launcher reaps it;
 * its memory (all local state) is gone. */
inline rank_gone() {
  k = 0;
  plan = 0;
  running = 0;
  waiting = 0;
  for (i : 0 .. MAXREQ - 1) {
    pos[i] = 0
  }
  i = 0;
  g = 0;
  j = 0;
  n = 0;
  kill_sent[r] = false;
  alive[r] = false
}

/* I2: every rank that entered this all-reduce carries the same plan (a
 * different plan would mean different buffer sizes). */
inline check_same_plan(t) {
  for (j : 0 .. NRANKS - 1) {
    assert(posted[j] != (t) || posted_plan[j] == plan)
  }
  j = 0
}

/* Give up a collective wait of tag t at its deadline, which can pass only
 * while a rank that has not entered the collective cannot make progress:
 * the rank exits with its deadline exit code (I3). Used as an option of a
 * wait's if/do. */
#ifndef MUTANT_NO_DEADLINE
#define DEADLINE(t) \
  :: d_step { LATE_AND_STUCK(t); exited[r] = true; rank_gone() }; break
#else
#define DEADLINE(t)
#endif

/* The leader reads every add-request frame queued on its socket. */
inline receive_requests() {
  do
  :: nempty(to_leader) ->
     to_leader?i, g;
     waiting = waiting | BIT(i);
     pos[i] = g
  :: empty(to_leader) -> break
  od;
  i = 0;
  g = 0
}

/* The leader's plan: every running sequence, then waiting ones in arrival
 * order, up to BATCH sequences. */
inline make_plan() {
  plan = running;
  n = 0;
  for (i : 0 .. NREQ - 1) {
    if
    :: running & BIT(i) -> n++
    :: else -> skip
    fi
  }
  for (i : 0 .. NREQ - 1) {
    if
    :: (waiting & BIT(i)) && n < BATCH ->
       plan = plan | BIT(i);
       running = running | BIT(i);
       waiting = waiting & ~BIT(i);
       n++
    :: else -> skip
    fi
  }
  i = 0;
  n = 0
}

/* The leader samples one token for every sequence of the plan, sends them
 * in one frame, and retires the sequences that are finished. */
inline send_tokens() {
  to_gateway!TOKENS, plan, pos[0], pos[1], pos[2];
  for (i : 0 .. NREQ - 1) {
    if
    :: plan & BIT(i) ->
       pos[i]++;
       if
       :: pos[i] == LEN -> running = running & ~BIT(i); pos[i] = 0
       :: else -> skip
       fi
    :: else -> skip
    fi
  }
  i = 0
}

proctype Rank(byte r) provided (!paused[r])
{
  byte k;           /* step number in this incarnation */
  byte plan;        /* the step's plan: bitmask of request ids */
  byte running;     /* leader: admitted sequences */
  byte waiting;     /* leader: received, not yet admitted */
  byte pos[MAXREQ]; /* leader: next token position of each sequence */
  byte i, g, j, n;

end_down:
  do
  :: d_step { start[r]; start[r] = false } ->
     {
       if
       :: r == 0 ->
          /* Leader: the step loop of src/runner. */
end_idle:
          do
          :: d_step {
               /* Step boundary: requests that arrived during the last
                * step join now; then decide and broadcast step k. */
               nempty(to_leader) || running != 0 || waiting != 0;
               receive_requests();
               make_plan();
               /* I1: step k-1 completed on every rank. */
               for (j : 0 .. NRANKS - 1) {
                 assert(k == 0 || posted[j] >= REDUCE_TAG(k - 1))
               }
               j = 0;
               plan_sent = plan;
               posted[0] = PLAN_TAG(k);
               /* ...and enter the step's all-reduce at once. */
               posted[0] = REDUCE_TAG(k);
               posted_plan[0] = plan
             };
             if
             :: d_step {
#ifndef MUTANT_NO_STEP_BARRIER
                  ALL_POSTED(REDUCE_TAG(k)) && nfull(to_gateway);
#else
                  nfull(to_gateway);
#endif
                  check_same_plan(REDUCE_TAG(k));
                  send_tokens();
                  plan = 0;
                  k++
                }
             DEADLINE(REDUCE_TAG(k))
             fi
          :: d_step {
               /* Idle: a heartbeat while no request arrives. */
#ifndef MUTANT_HEARTBEAT_STARVES
               empty(to_leader) && running == 0 && waiting == 0 && empty(to_gateway);
#else
               running == 0 && waiting == 0 && empty(to_gateway);
#endif
               to_gateway!HEARTBEAT, 0, 0, 0, 0
             }
          od
       :: else ->
          /* Follower: runs exactly the plans it receives. */
end_plan:
          do
          :: d_step {
               posted[0] >= PLAN_TAG(k);
               plan = plan_sent;
               posted[r] = REDUCE_TAG(k);
               posted_plan[r] = plan
             };
             if
             :: d_step {
                  ALL_POSTED(REDUCE_TAG(k));
                  check_same_plan(REDUCE_TAG(k));
                  plan = 0;
                  k++
                }
             DEADLINE(REDUCE_TAG(k))
             fi
          DEADLINE(PLAN_TAG(k))
          od
       fi
     } unless {
       d_step { kill_sent[r]; rank_gone() }
     }
  od
}

/* ---- the gateway ------------------------------------------------------ */

/* Start a runner (all ranks) on a new socket and (re)submit every accepted,
 * unfinished request with the tokens it has already streamed. */
inline start_runner() {
  for (i : 0 .. NRANKS - 1) {
    posted[i] = 0;
    posted_plan[i] = 0;
    exited[i] = false;
    alive[i] = true;
    start[i] = true
  }
  plan_sent = 0;
  for (i : 0 .. NREQ - 1) {
    if
#if defined(MUTANT_NO_RESUBMIT)
    :: false -> skip
#elif defined(MUTANT_PROMPT_ONLY)
    :: accepted[i] && !completed[i] -> to_leader!i, 0
#else
    :: accepted[i] && !completed[i] -> to_leader!i, generated[i]
#endif
    :: else -> skip
    fi
  }
  i = 0
}

/* Kill the runner's whole process group (a stopped rank dies too). */
inline kill_runner() {
  for (i : 0 .. NRANKS - 1) {
    if
    :: alive[i] -> kill_sent[i] = true; paused[i] = false; resumes[i] = false
    :: else -> skip
    fi
  }
  i = 0
}

/* Wait until every rank is reaped, drop the old connection, start a new
 * runner. */
inline reap_and_start() {
  d_step {
    ALL_GONE;
    do
    :: nempty(to_leader) -> to_leader?_, _
    :: empty(to_leader) -> break
    od;
#ifndef MUTANT_KEEP_SOCKET
    do
    :: nempty(to_gateway) -> to_gateway?_, _, _, _, _
    :: empty(to_gateway) -> break
    od;
#endif
    start_runner()
  }
}

/* The gateway streams the tokens of one frame; I4: each client receives
 * every token once, in order, whatever runner produced it. */
inline stream_token(id, position) {
  if
  :: plan & BIT(id) ->
     assert(!completed[id] && position == generated[id]);
     generated[id]++;
     if
     :: generated[id] == LEN -> completed[id] = true; ncompleted++
     :: else -> skip
     fi
  :: else -> skip
  fi
}

active proctype Gateway()
{
  byte i, plan, p0, p1, p2;
  mtype kind;

  d_step { start_runner() };
  do
  :: d_step {
       /* A client's request arrives: registered, sent to the runner. */
       naccepted < NREQ;
       accepted[naccepted] = true;
       to_leader!naccepted, 0;
       naccepted++
     }
  :: d_step {
       to_gateway?kind, plan, p0, p1, p2;
       if
       :: kind == TOKENS ->
          stream_token(0, p0);
#if NREQ > 1
          stream_token(1, p1);
#endif
#if NREQ > 2
          stream_token(2, p2);
#endif
          skip
       :: else -> skip /* heartbeat */
       fi;
       kind = 0;
       plan = 0;
       p0 = 0;
       p1 = 0;
       p2 = 0
     }
  :: d_step {
       /* Supervisor: the runner exited (a rank gave up at its deadline or
        * was killed). */
       ANY_EXITED;
       kill_runner()
     };
     reap_and_start()
#ifndef MUTANT_NO_WATCHDOG
  :: d_step {
       /* Watchdog: work pending and no step completes (a rank stopped). */
       PENDING && ANY_PAUSED;
       kill_runner()
     };
     reap_and_start()
#endif
  :: d_step {
       /* Watchdog false alarm: a slow but healthy runner is killed. */
       PENDING && nfaults < MAXFAULTS;
       nfaults++;
       kill_runner()
     };
     reap_and_start()
  :: ncompleted == NREQ -> break
  od;
  /* Every request is complete: stop the instance. (A rank may have
   * stalled after the last step; with nothing pending nobody waits for it,
   * and the next request would meet its deadline or the watchdog.) */
  atomic { kill_runner() };
  ALL_GONE
}

/* ---- faults ----------------------------------------------------------- */

/* Faults of rank r: a stall (SIGSTOP, a lost host: stopped until killed),
 * a slow spell (stopped, then continues by itself), a crash (SIGKILL:
 * the launcher sees the exit). */
#define FAULTS_ON(r) \
  :: d_step { nfaults < MAXFAULTS && RUNNING(r); paused[r] = true; nfaults++ } \
  :: d_step { nfaults < MAXFAULTS && RUNNING(r); paused[r] = true; resumes[r] = true; nfaults++ } \
  :: d_step { nfaults < MAXFAULTS && RUNNING(r); kill_sent[r] = true; exited[r] = true; nfaults++ } \
  :: d_step { paused[r] && resumes[r]; paused[r] = false; resumes[r] = false }

active proctype Faults()
{
end_faults:
  do
  FAULTS_ON(0)
  FAULTS_ON(1)
#if NRANKS > 2
  FAULTS_ON(2)
#endif
  od
}

/* ---- ranks ------------------------------------------------------------ */

init {
  byte r;
  atomic {
    for (r : 0 .. NRANKS - 1) {
      run Rank(r)
    }
  }
}

/* ---- liveness: every accepted request eventually completes ------------- */

#if NREQ == 1
ltl live { [] (accepted[0] -> <> completed[0]) }
#elif NREQ == 2
ltl live { [] ((accepted[0] -> <> completed[0]) && (accepted[1] -> <> completed[1])) }
#else
ltl live {
  [] ((accepted[0] -> <> completed[0]) && (accepted[1] -> <> completed[1]) &&
      (accepted[2] -> <> completed[2]))
}
#endif
