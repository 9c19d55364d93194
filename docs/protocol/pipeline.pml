/* pipeline.pml -- lockstep's step protocol with pipeline parallelism (issue 34).
 *
 * One model instance split into NSTAGES pipeline stages (--pp N), each
 * holding a contiguous range of layers. A stage is itself a tensor-parallel
 * group, but inside a stage the collectives are exactly lockstep.pml's kind,
 * so a stage is ONE process here. Stage 0 is the leader: it holds the
 * scheduler, sampling and the socket to the gateway. For each step k the
 * leader decides a plan, runs stage 0's layers and SENDS (step k, plan,
 * activations) point to point to stage 1; stage s RECEIVES from stage s-1
 * (the next step in order: FIFO, tags checked), computes and SENDS to stage
 * s+1; the last stage sends the step's logits back to the leader.
 *
 * The leader keeps up to K steps in flight (micro-batches): it launches a
 * step (SUBMIT) while fewer than K are in flight and some sequence is ready
 * (not in a step in flight: a decoding sequence needs the token of its
 * previous step before its next step); otherwise it receives the logits of
 * the oldest step in flight (COLLECT), samples, streams the tokens and
 * retires finished sequences. Each link is a mailbox of CAP slots; a send
 * into a full mailbox waits. Every wait (a receive on an empty mailbox, a
 * send on a full one) has a deadline (I3). An idle leader sends keep-alives
 * down the pipe: empty steps that every stage forwards, the last back to the
 * leader, so no stage's wait expires while the leader is healthy but idle.
 *
 * Everything else is lockstep.pml's: the gateway owns the requests (I4), its
 * supervisor restarts a runner that exited, its watchdog kills one that
 * stopped making progress; both kill every stage, wait until all are reaped,
 * drop the old connection and mailboxes, start again and resubmit the
 * unfinished requests with the tokens already streamed. A fault injector
 * stalls, slows or crashes stages, at most MAXFAULTS times in a run.
 *
 * Time is abstract, as in lockstep.pml: every stage is assumed to finish its
 * part of a step well within the deadlines, so a deadline can expire only
 * while a stage cannot make progress (paused, exited, being killed). In a
 * pipeline every wait depends on every stage (the pipe is a cycle through
 * the leader: a stalled stage downstream keeps the leader in COLLECT, which
 * starves every stage upstream of it), so any such stage lets any wait give
 * up. With -DDEADLINE_ON_HANG a wait may also give up when the whole system
 * is blocked (spin's `timeout`: time passes and nothing moves), and asserts
 * that some stage was then not healthy: a deadline that expires with every
 * stage healthy kills a healthy runner.
 *
 * Checked (see README.md): no invalid end state; the assertions (FIFO order
 * at every receiver, a sequence in at most one step in flight, each token
 * streamed once and in order, with CAP >= K a send never finds a full
 * mailbox); and the LTL property `live` under weak fairness.
 *
 * Parameters (spin -DNAME=value): NSTAGES 2 or 3; K steps in flight,
 * 1..NSTAGES (default NSTAGES); CAP mailbox slots per link (default K; 0 is
 * a rendezvous); NREQ 1..3 requests over the run; LEN tokens per request;
 * BATCH sequences per step; MAXFAULTS faults per run.
 *
 * Switches (spin -DNAME):
 *   DEADLINE_ON_HANG  deadlines also expire when nothing moves (above)
 *   CLAIM_NEVER_FULL  assert a free slot at every send whatever CAP is (the
 *                     design asserts it for CAP >= K), to find the boundary
 *   KEEPALIVE_ONE_WAY keep-alives as the code sends them today: not counted
 *                     in flight, dropped by the last stage; the idle leader
 *                     sends the next one only after the previous one has
 *                     left the pipe (the keep-alive interval is far longer
 *                     than a healthy pipe's transit) or while a stage is
 *                     stuck; sends may then wait on a full mailbox
 *   MUTANT_SAME_SEQUENCE_TWICE  the leader plans a sequence already in flight
 *   MUTANT_KEEP_MAILBOX         a restart keeps the old mailboxes' messages
 *   MUTANT_KEEPALIVE_UNCOUNTED  KEEPALIVE_ONE_WAY without the interval: the
 *                               idle leader sends keep-alives back to back
 *   MUTANT_KEEPALIVE_DROPPED    stage 1 does not forward keep-alives
 *   MUTANT_NO_RESUBMIT, MUTANT_NO_DEADLINE, MUTANT_NO_WATCHDOG  as in
 *                               lockstep.pml
 */

#ifndef NSTAGES
#define NSTAGES 2
#endif
#ifndef K
#define K NSTAGES
#endif
#ifndef CAP
#define CAP K
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

#if NSTAGES < 2 || NSTAGES > 3
#error "NSTAGES must be 2 or 3"
#endif
#if K < 1 || K > NSTAGES
#error "K (steps in flight) must be 1..NSTAGES"
#endif
#if CAP < 0
#error "CAP must be >= 0"
#endif
#if NREQ < 1 || NREQ > 3
#error "NREQ must be 1, 2 or 3"
#endif

#define LAST (NSTAGES - 1)
#define BIT(i) (1 << (i))

/* Room for the largest NREQ in messages and arrays. */
#define MAXREQ 3

/* STEP and KEEPALIVE travel down the pipe; TOKENS and HEARTBEAT go to the
 * gateway. */
mtype = { STEP, KEEPALIVE, TOKENS, HEARTBEAT };

/* ---- runner protocol: one unix-socket connection per runner incarnation */

/* gateway -> leader: add request (id, tokens already generated) */
chan to_leader = [NREQ] of { byte, byte };
/* leader -> gateway: TOKENS (plan, position of request 0, 1, 2): one
 * token for each request in the plan; or HEARTBEAT (a keep-alive came
 * back: an empty step completed) */
chan to_gateway = [2] of { mtype, byte, byte, byte, byte };

/* ---- the pipe: mailbox[s] is the link from stage s to stage s+1, and
 * mailbox[LAST] the link from the last stage back to the leader (the
 * logits). A message is (kind, tag, plan): the tag is the step number
 * (a keep-alive carries the number of the next step and does not use it
 * up), the plan the bitmask of request ids; the activations and logits
 * themselves are abstract. CAP slots each; CAP 0 is a rendezvous. */
chan mailbox[NSTAGES] = [CAP] of { mtype, byte, byte };

/* ---- the gateway's request registry: outlives every runner (I4) */

bool accepted[NREQ];  /* the client's request was accepted */
byte generated[NREQ]; /* tokens streamed to the client so far */
bool completed[NREQ]; /* all LEN tokens streamed */
byte naccepted;
byte ncompleted;

/* ---- stage processes, as the launcher and the operating system see them */

bool start[NSTAGES];     /* the supervisor has just started this stage */
bool alive[NSTAGES];     /* the stage's process is running (not yet reaped) */
bool exited[NSTAGES];    /* it exited (deadline, fault) and was noticed */
bool paused[NSTAGES];    /* stopped: SIGSTOP, a lost host, a stall */
bool resumes[NSTAGES];   /* the pause ends by itself (a slow stage) */
bool kill_sent[NSTAGES]; /* SIGKILL delivered, not yet taken effect */
byte nfaults;            /* faults injected so far (<= MAXFAULTS) */

#define CANNOT_PROGRESS(j) (paused[j] || exited[j] || kill_sent[j] || !alive[j])
#define RUNNING(s) (alive[s] && !paused[s] && !exited[s] && !kill_sent[s])

#if NSTAGES == 2
#define ANY_STUCK (CANNOT_PROGRESS(0) || CANNOT_PROGRESS(1))
#define ANY_PAUSED (paused[0] || paused[1])
#define ANY_EXITED (exited[0] || exited[1])
#define ALL_GONE (!alive[0] && !alive[1])
#else
#define ANY_STUCK (CANNOT_PROGRESS(0) || CANNOT_PROGRESS(1) || CANNOT_PROGRESS(2))
#define ANY_PAUSED (paused[0] || paused[1] || paused[2])
#define ANY_EXITED (exited[0] || exited[1] || exited[2])
#define ALL_GONE (!alive[0] && !alive[1] && !alive[2])
#endif

/* Work the gateway has accepted and not yet streamed to the end. */
#define PENDING (naccepted > ncompleted)

/* One-way keep-alives (the last stage drops them, the leader does not count
 * them) and the time that separates them: keep-alives sent and not yet
 * dropped, a ghost of the timing (no process reads it but the idle
 * leader's guard). */
#if defined(KEEPALIVE_ONE_WAY) || defined(MUTANT_KEEPALIVE_UNCOUNTED)
#define ONE_WAY
byte ka_in_pipe;
#ifdef MUTANT_KEEPALIVE_UNCOUNTED
#define KEEPALIVE_DUE true
#else
#define KEEPALIVE_DUE (ka_in_pipe == 0 || ANY_STUCK)
#endif
#endif

/* ---- the runner ------------------------------------------------------- */

/* A stage's process ends (deadline exit or SIGKILL): the launcher reaps it;
 * its memory (all local state) is gone. */
inline stage_gone() {
  k = 0;
  kind = 0;
  tag = 0;
  plan = 0;
  running = 0;
  waiting = 0;
  busy = 0;
  in_flight = 0;
  oldest = 0;
  ka = false;
  for (i : 0 .. MAXREQ - 1) {
    pos[i] = 0
  }
  i = 0;
  g = 0;
  n = 0;
  kill_sent[s] = false;
  alive[s] = false
}

/* Give up a wait at its deadline, which can pass only while some stage
 * cannot make progress: the stage exits with its deadline exit code (I3).
 * Used as an option of a wait's if/do; `break` leaves the stage's loop.
 * DEADLINE_ON_HANG adds the deadline of a wait in a system where nothing
 * moves at all (`timeout`): that must never happen with every stage
 * healthy. */
#ifdef DEADLINE_ON_HANG
#define HANG_DEADLINE \
  :: timeout -> assert(ANY_STUCK); d_step { exited[s] = true; stage_gone() }; break
#else
#define HANG_DEADLINE
#endif
#ifndef MUTANT_NO_DEADLINE
#define DEADLINE \
  :: d_step { ANY_STUCK; exited[s] = true; stage_gone() }; break \
  HANG_DEADLINE
#else
#define DEADLINE HANG_DEADLINE
#endif

/* stage_send: stage s sends what it holds to mailbox[s] (the leader's
 * SUBMIT is stage 0's send).
 *
 * With CAP >= K a mailbox never holds more than the other steps in flight,
 * K - 1 at most (keep-alives count as steps in flight), so a send never finds
 * it full: the model asserts that, fault or no fault, instead of modelling
 * a wait that cannot happen (the code keeps the deadline on the send all the
 * same). With CAP < K, or keep-alives that are not counted, the send may
 * wait for a slot (for CAP 0, always for the receiver), with a deadline.
 * CLAIM_NEVER_FULL asserts a free slot for any CAP >= 1, to show where
 * that stops holding. */
#if (CAP >= K && !defined(ONE_WAY)) || (defined(CLAIM_NEVER_FULL) && CAP > 0)
#define STAGE_SEND \
  d_step { \
    assert(nfull(mailbox[s])); \
    mailbox[s]!kind, tag, plan; \
    kind = 0; tag = 0; plan = 0 \
  }
#else
#if CAP > 0
#define MAILBOX_FULL full(mailbox[s])
#else
#define MAILBOX_FULL true /* a rendezvous send always waits for its receiver */
#endif
#ifndef MUTANT_NO_DEADLINE
#define SEND_DEADLINE \
  :: d_step { MAILBOX_FULL && ANY_STUCK; exited[s] = true; stage_gone() }; break \
  HANG_DEADLINE
#else
#define SEND_DEADLINE HANG_DEADLINE
#endif
#define STAGE_SEND \
  if \
  :: atomic { mailbox[s]!kind, tag, plan -> kind = 0; tag = 0; plan = 0 } \
  SEND_DEADLINE \
  fi
#endif

/* A sequence is ready when the leader holds it and it is in no step in
 * flight: its previous token has been sampled. */
#ifndef MUTANT_SAME_SEQUENCE_TWICE
#define READY (running & ~busy)
#else
#define READY running
#endif

/* A stage that does not forward keep-alives: the last stage, when they
 * are one way, or stage 1 (the mutant). */
#if defined(ONE_WAY)
#define DROP_KEEPALIVE_AT LAST
#define KEEPALIVE_LEFT ka_in_pipe--
#elif defined(MUTANT_KEEPALIVE_DROPPED)
#define DROP_KEEPALIVE_AT 1
#define KEEPALIVE_LEFT skip
#endif

/* The leader may launch a step: fewer than K in flight, and some sequence
 * ready or waiting, or a request frame queued on its socket. */
#define CAN_SUBMIT (in_flight < K && (nempty(to_leader) || READY != 0 || waiting != 0))
/* Its negation, spelled out: spin does not negate empty()/nempty(). */
#define CANNOT_SUBMIT (in_flight >= K || (empty(to_leader) && READY == 0 && waiting == 0))

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

/* The leader's plan: ready running sequences (decode tokens) first, then
 * waiting ones in arrival order, up to BATCH sequences. */
inline make_plan() {
  plan = 0;
  n = 0;
  for (i : 0 .. NREQ - 1) {
    if
    :: (READY & BIT(i)) && n < BATCH -> plan = plan | BIT(i); n++
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

/* COLLECT: the leader has received the logits of the oldest step in
 * flight: FIFO, so it must be step `oldest` (I2 for the pipe). A keep-alive
 * completes as a heartbeat to the gateway. For a step the leader samples one
 * token for every sequence of the plan, sends them in one frame, retires the
 * finished sequences, and the plan's sequences are ready again. */
inline collect_step() {
  printf("MSC: leader collects %e %d\n", kind, tag);
  assert(tag == oldest && kind == (ka -> KEEPALIVE : STEP));
  if
  :: kind == KEEPALIVE ->
     ka = false;
     to_gateway!HEARTBEAT, 0, 0, 0, 0
  :: kind == STEP ->
     oldest++;
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
     i = 0;
     busy = busy & ~plan
  fi;
  in_flight--;
  kind = 0;
  tag = 0;
  plan = 0
}

proctype Stage(byte s) provided (!paused[s])
{
  byte k;           /* leader: next step to launch; stage: next step expected */
  mtype kind;       /* what the stage holds: STEP or KEEPALIVE (0: nothing) */
  byte tag;         /* its step number */
  byte plan;        /* its plan: bitmask of request ids */
  byte running;     /* leader: admitted sequences */
  byte waiting;     /* leader: received, not yet admitted */
  byte busy;        /* leader: sequences in a step in flight */
  byte in_flight;   /* leader: steps launched, logits not yet collected */
  byte oldest;      /* leader: step number of the oldest step in flight */
  bool ka;          /* leader: the oldest in flight is a keep-alive */
  byte pos[MAXREQ]; /* leader: next token position of each sequence */
  byte i, g, n;

end_down:
  do
  :: d_step { start[s]; start[s] = false } ->
     {
       if
       :: s == 0 ->
          /* Leader: the step loop of src/runner, up to K steps in flight. */
end_leader:
          do
          :: d_step {
               /* Step boundary: requests that arrived join now; decide
                * step k and launch it (stage 0's layers, then the send). */
               CAN_SUBMIT;
               receive_requests();
               make_plan();
               /* a sequence is in at most one step in flight */
               assert((plan & busy) == 0 && plan != 0);
               busy = busy | plan;
               in_flight++;
               kind = STEP;
               tag = k;
               k++;
               printf("MSC: leader launches step %d (plan %d), %d in flight\n", tag, plan, in_flight)
             };
SUBMIT:      STAGE_SEND
          :: d_step {
               /* Nothing to launch: wait for the oldest step's logits
                * (and, as in lockstep.pml, for room on the socket). */
               in_flight > 0 && CANNOT_SUBMIT && nfull(to_gateway)
             } ->
COLLECT:     if
             :: atomic { mailbox[LAST]?kind, tag, plan -> collect_step() }
             DEADLINE
             fi
          :: d_step {
               /* Idle: nothing in flight, no request (and, as in
                * lockstep.pml, the last heartbeat read). A keep-alive is
                * an empty step: it carries the next step's number, counts
                * as a step in flight, and comes back like logits. */
#ifndef ONE_WAY
               in_flight == 0 && CANNOT_SUBMIT && empty(to_gateway);
               ka = true;
               in_flight = 1;
#else
               /* not counted, never returned: the next keep-alive only
                * when it is due, and a heartbeat of its own */
               in_flight == 0 && CANNOT_SUBMIT && empty(to_gateway) && KEEPALIVE_DUE;
               ka_in_pipe++;
               to_gateway!HEARTBEAT, 0, 0, 0, 0;
#endif
               kind = KEEPALIVE;
               tag = k;
               printf("MSC: leader idle: keep-alive (%d in flight)\n", in_flight)
             };
             STAGE_SEND /* the keep-alive's SUBMIT */
          od
       :: else ->
          /* Stage s > 0: receives from stage s-1, computes its layers,
           * sends to stage s+1 (the last stage: logits to the leader). */
stage_recv:
          do
          :: atomic {
               mailbox[s - 1]?kind, tag, plan ->
               /* FIFO: the next step in order, or a keep-alive carrying
                * its number (I2 for the pipe: a different tag is an
                * error exit in the code) */
               assert(tag == k);
               if
               :: kind == STEP -> k++
               :: else -> skip
               fi;
               printf("MSC: stage %d receives %e %d, runs its layers, sends it on\n", s, kind, tag)
             };
#ifdef DROP_KEEPALIVE_AT
             if
             :: s == DROP_KEEPALIVE_AT && kind == KEEPALIVE ->
                d_step { kind = 0; tag = 0; KEEPALIVE_LEFT } /* not forwarded */
             :: else ->
#endif
stage_send:     STAGE_SEND
#ifdef DROP_KEEPALIVE_AT
             fi
#endif
          DEADLINE
          od
       fi
     } unless {
       d_step { kill_sent[s]; stage_gone() }
     }
  od
}

/* ---- the gateway (as in lockstep.pml) --------------------------------- */

/* Start a runner (all stages) on a new socket and (re)submit every
 * accepted, unfinished request with the tokens it has already streamed. */
inline start_runner() {
  for (i : 0 .. NSTAGES - 1) {
    exited[i] = false;
    alive[i] = true;
    start[i] = true
  }
  for (i : 0 .. NREQ - 1) {
    if
#if defined(MUTANT_NO_RESUBMIT)
    :: false -> skip
#else
    :: accepted[i] && !completed[i] -> to_leader!i, generated[i]
#endif
    :: else -> skip
    fi
  }
  i = 0
}

/* Kill the runner's whole process group (a stopped stage dies too). */
inline kill_runner() {
  for (i : 0 .. NSTAGES - 1) {
    if
    :: alive[i] -> kill_sent[i] = true; paused[i] = false; resumes[i] = false
    :: else -> skip
    fi
  }
  i = 0
}

/* Wait until every stage is reaped, drop the old connection and the old
 * mailboxes, start a new runner. */
inline reap_and_start() {
  d_step {
    ALL_GONE;
    do
    :: nempty(to_leader) -> to_leader?_, _
    :: empty(to_leader) -> break
    od;
    do
    :: nempty(to_gateway) -> to_gateway?_, _, _, _, _
    :: empty(to_gateway) -> break
    od;
#if CAP > 0 && !defined(MUTANT_KEEP_MAILBOX)
    for (i : 0 .. NSTAGES - 1) {
      do
      :: nempty(mailbox[i]) -> mailbox[i]?_, _, _
      :: empty(mailbox[i]) -> break
      od
    };
#endif
#ifdef ONE_WAY
    ka_in_pipe = 0;
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
       /* Supervisor: the runner exited (a stage gave up at its deadline
        * or was killed). */
       ANY_EXITED;
       kill_runner()
     };
     reap_and_start()
#ifndef MUTANT_NO_WATCHDOG
  :: d_step {
       /* Watchdog: work pending and no step completes (a stage stopped). */
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
  /* Every request is complete: stop the instance. */
  atomic { kill_runner() };
  ALL_GONE
}

/* ---- faults ----------------------------------------------------------- */

/* Faults of stage s: a stall (SIGSTOP, a lost host: stopped until killed),
 * a slow spell (stopped, then continues by itself), a crash (SIGKILL: the
 * launcher sees the exit). */
#define FAULTS_ON(s) \
  :: d_step { nfaults < MAXFAULTS && RUNNING(s); paused[s] = true; nfaults++ } \
  :: d_step { nfaults < MAXFAULTS && RUNNING(s); paused[s] = true; resumes[s] = true; nfaults++ } \
  :: d_step { nfaults < MAXFAULTS && RUNNING(s); kill_sent[s] = true; exited[s] = true; nfaults++ } \
  :: d_step { paused[s] && resumes[s]; paused[s] = false; resumes[s] = false }

active proctype Faults()
{
end_faults:
  do
  FAULTS_ON(0)
  FAULTS_ON(1)
#if NSTAGES > 2
  FAULTS_ON(2)
#endif
  od
}

/* ---- stages ----------------------------------------------------------- */

init {
  byte s;
  atomic {
    for (s : 0 .. NSTAGES - 1) {
      run Stage(s)
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
