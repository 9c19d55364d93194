/* overlap.pml -- the overlapping-evaluations design that deadlocks.
 *
 * The serving design lockstep replaces, reduced to what makes it hang.
 * NRANKS ranks run the same host program (SPMD). Each rank has
 *   - a compute unit that executes a FIFO compute queue in order; a kernel
 *     that spin-waits keeps the unit until its condition holds;
 *   - one communication engine that executes a FIFO communication queue in
 *     order (all-reduces with its peers, matched by position, no tags);
 *   - fences between the two: a compute op UPDATE writes a fence value, a
 *     communication op first waits until that fence reaches a value; the
 *     other direction is a compute kernel (SPIN) that busy-waits until the
 *     communication engine has published the all-reduce result.
 * The batch generator launches decode step k asynchronously (its
 * collectives are queued at once, in graph order; its compute reaches the
 * device whenever the asynchronous evaluation gets to commit it), then
 * immediately runs the prefill of a new prompt. Nothing orders the two
 * evaluations' compute work; both queue collectives on the one
 * communication queue.
 *
 * Switches (spin -DNAME):
 *   FIX    the batch generator waits for the in-flight decode step before a
 *          prefill (the overlap fix alone, nothing else of lockstep)
 *   KILL   one rank may die at any moment (its host, compute and
 *          communication stop); nothing detects it
 *   SKEW   the new prompt reaches each rank at a step of its own (ranks
 *          learn of requests independently)
 *   NRANKS ranks (default 2), NSTEPS decode steps (default 2),
 *   NLAYERS all-reduces per evaluation (default 1)
 *
 * Verdicts (see README.md): without FIX an invalid end state (the cycle);
 * with FIX none; FIX+KILL an invalid end state (survivors wait forever);
 * FIX+SKEW an assertion violation (collectives matched out of order).
 */

#ifndef NRANKS
#define NRANKS 2
#endif
#ifndef NSTEPS
#define NSTEPS 2
#endif
#ifndef NLAYERS
#define NLAYERS 1
#endif

/* The two evaluations a rank can have in flight. */
#define DECODE 0
#define PREFILL 1
#define EVALS 2

/* Fence, signal and done words are indexed [rank * EVALS + evaluation]. */
#define SLOT(r, e) ((r) * EVALS + (e))

/* Value of layer l of decode step k (PREFILL uses k = 0): fences and
 * signals only ever grow, like hardware events. */
#define VALUE(k, l) ((k) * NLAYERS + (l) + 1)

mtype = { UPDATE, SPIN, DONE, decode, prefill };

/* The name of an evaluation, for the readable trail. */
#define NAME(e) ((e) == DECODE -> decode : prefill)

/* Compute queue: (op, evaluation, value). An evaluation is 2 ops per
 * layer plus DONE; two may be queued at once. */
chan compute_queue[NRANKS] = [2 * (2 * NLAYERS + 1)] of { mtype, byte, byte };
/* Communication queue: (evaluation, value) = wait for fence >= value,
 * all-reduce, then publish signal = value. */
chan comm_queue[NRANKS] = [2 * NLAYERS] of { byte, byte };
/* Hand-off to each rank's asynchronous evaluation: decode step k. */
chan async_launch[NRANKS] = [1] of { byte };

byte fence[NRANKS * EVALS];  /* last value written by a compute UPDATE */
byte signal[NRANKS * EVALS]; /* last all-reduce result published by comm */
byte done[NRANKS * EVALS];   /* DECODE: steps finished; PREFILL: 1 when done */

/* Untagged all-reduce: collectives match by position. collective_count[r]
 * is how many rank r has entered; collective_eval[r] which evaluation its
 * current one belongs to (only to detect a mismatch, which the real system
 * cannot: it would add unrelated buffers or hang on their sizes). */
byte collective_count[NRANKS];
byte collective_eval[NRANKS];

#if NRANKS == 2
#define ALL_ENTERED(c) (collective_count[0] >= (c) && collective_count[1] >= (c))
#elif NRANKS == 3
#define ALL_ENTERED(c) (collective_count[0] >= (c) && collective_count[1] >= (c) && \
                        collective_count[2] >= (c))
#else
#error "NRANKS must be 2 or 3"
#endif

#ifdef SKEW
byte prompt_step[NRANKS]; /* step at which each rank sees the new prompt */
#define PROMPT_STEP(r) prompt_step[r]
#else
byte prompt_step; /* step at which the new prompt arrives, on every rank */
#define PROMPT_STEP(r) prompt_step
#endif

#ifdef KILL
bool dead[NRANKS];
#define ALIVE(r) unless { dead[r] }
#else
#define ALIVE(r)
#endif

/* Queue an evaluation's collectives, in graph order, in one go. */
inline schedule_collectives(r, e, k) {
  d_step {
    for (l : 0 .. NLAYERS - 1) {
      comm_queue[r]!e, VALUE(k, l)
    }
  }
}

/* Commit an evaluation's compute work to the device as one command
 * buffer: per layer the kernels that produce the partial sum ending in the
 * fence update that releases its all-reduce, then the kernel that
 * spin-waits for the all-reduce result; DONE marks the evaluation's end. */
inline commit_compute(r, e, k) {
  d_step {
    for (l : 0 .. NLAYERS - 1) {
      compute_queue[r]!UPDATE, e, VALUE(k, l);
      compute_queue[r]!SPIN, e, VALUE(k, l)
    }
    compute_queue[r]!DONE, e, k + 1
  }
}

proctype ComputeUnit(byte r)
{
  mtype op;
  byte e, v;
  {
end_idle:
    do
    :: compute_queue[r]?op, e, v ->
       if
       :: op == UPDATE ->
          d_step {
            fence[SLOT(r, e)] = v;
            printf("MSC: rank %d compute: %e kernels, fence := %d\n", r, NAME(e), v)
          }
       :: op == SPIN ->
          /* Busy-waits while holding the compute unit: nothing behind it
           * in this rank's compute queue can start. */
          printf("MSC: rank %d compute: %e spin-waits for all-reduce %d (holds the unit)\n", r, NAME(e), v);
          signal[SLOT(r, e)] >= v
       :: op == DONE ->
          d_step {
            done[SLOT(r, e)] = v;
            printf("MSC: rank %d compute: %e done (%d)\n", r, NAME(e), v)
          }
       fi
    od
  } ALIVE(r)
}

proctype CommEngine(byte r)
{
  byte e, v, j;
  {
end_idle:
    do
    :: comm_queue[r]?e, v ->
       /* Queued fence wait: the all-reduce may read the partial sum only
        * after the compute queue has executed the matching UPDATE. */
       printf("MSC: rank %d comm: %e all-reduce %d waits for fence >= %d\n", r, NAME(e), v, v);
       fence[SLOT(r, e)] >= v;
       d_step {
         collective_count[r]++;
         collective_eval[r] = e;
         printf("MSC: rank %d comm: %e enters all-reduce %d\n", r, NAME(e), v)
       }
       /* All-reduce: done when every peer has entered the same position;
        * then the result is published to the compute side. */
       atomic {
         ALL_ENTERED(collective_count[r]);
         for (j : 0 .. NRANKS - 1) {
           assert(collective_count[j] > collective_count[r] ||
                  collective_eval[j] == e)
         }
         signal[SLOT(r, e)] = v
       }
    od
  } ALIVE(r)
}

/* The asynchronous side of a decode launch: commits the step's compute
 * work to the device at some later moment. */
proctype AsyncEval(byte r)
{
  byte k, l;
  {
end_idle:
    do
    :: async_launch[r]?k ->
       printf("MSC: rank %d async: commits decode step %d compute\n", r, k);
       commit_compute(r, DECODE, k)
    od
  } ALIVE(r)
}

proctype BatchGenerator(byte r)
{
  byte k, l;
  {
    for (k : 0 .. NSTEPS - 1) {
      /* Launch decode step k asynchronously. */
      printf("MSC: rank %d generator: launches decode step %d\n", r, k);
      schedule_collectives(r, DECODE, k);
      async_launch[r]!k;
      if
      :: k == PROMPT_STEP(r) ->
#ifdef FIX
         /* The fix: finish the in-flight decode step first. */
         done[SLOT(r, DECODE)] >= k + 1;
#endif
         /* A new prompt: evaluate its prefill right away. */
         printf("MSC: rank %d generator: runs the prefill of a new prompt\n", r);
         schedule_collectives(r, PREFILL, 0);
         commit_compute(r, PREFILL, 0);
         done[SLOT(r, PREFILL)] == 1
      :: else -> skip
      fi;
      /* Sample token k from the decode step's logits. */
      done[SLOT(r, DECODE)] >= k + 1
    }
  } ALIVE(r)
}

#ifdef KILL
active proctype Fault()
{
  byte r;
  select (r : 0 .. NRANKS - 1);
  dead[r] = true
}
#endif

init {
  byte i, r;
  atomic {
#ifdef SKEW
    for (i : 0 .. NRANKS - 1) {
      select (r : 0 .. NSTEPS - 1);
      prompt_step[i] = r
    }
#else
    select (prompt_step : 0 .. NSTEPS - 1);
#endif
    for (r : 0 .. NRANKS - 1) {
      run ComputeUnit(r);
      run CommEngine(r);
      run AsyncEval(r);
      run BatchGenerator(r)
    }
  }
}
