#!/usr/bin/env bash
# check.sh -- model-check lockstep's step protocol with spin and verify the
# verdicts (docs/protocol/README.md explains the models and the results).
#
# Every run generates pan.c with `spin -a`, compiles it and runs it in a
# temporary directory (nothing is written to the source tree, except with
# --update-trail), then reads pan's output: pan exits 0 even when it finds
# errors, so the verdict is taken from its "errors: N" line, its "pan:1:"
# error line, and the absence of an incomplete-search warning.
#
# usage: check.sh [--source DIR] [--spin PATH] [--cc PATH] CHECK...
#   CHECK: overlap_deadlocks  the overlapping design deadlocks (shortest
#                             trail; the stored trail still replays)
#          overlap_fixed      the overlap fix alone: deadlock-free, but not
#                             when a rank dies or ranks disagree on order
#          lockstep_safe      lockstep: no invalid end state, assertions hold
#          lockstep_live      lockstep: every accepted request completes
#                             (LTL, weak fairness)
#          lockstep_mutants   broken variants of lockstep are caught
#          pipeline_safe      pipeline parallelism: no invalid end state,
#                             assertions hold (FIFO, one step per sequence,
#                             tokens once, mailboxes never full)
#          pipeline_live      pipeline: every accepted request completes
#          pipeline_deadlocks rendezvous links with K = NSTAGES deadlock
#                             (shortest trail; the stored trail replays);
#                             the exact mailbox boundary
#          pipeline_mutants   broken variants of the pipeline are caught
#          all                all of the above
#   --source DIR    repository root (default: two levels above this script)
#   --update-trail  regenerate docs/protocol/overlap.trail and
#                   overlap-trail.txt (pipeline.trail and pipeline-trail.txt
#                   with pipeline_deadlocks) in the source tree
# Exit status: 0 when every verdict is as expected, 1 otherwise, 2 on a
# usage error, 77 when spin or the C compiler is missing (CTest: skipped).

set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source_dir=$(cd "$script_dir/../.." && pwd)
spin=spin
cc=${CC:-cc}
update_trail=0
checks=()

die_usage() {
  echo "check.sh: $1" >&2
  echo "usage: check.sh [--source DIR] [--spin PATH] [--cc PATH] [--update-trail] CHECK..." >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
  --source) [ $# -ge 2 ] || die_usage "--source needs a directory"; source_dir=$2; shift 2 ;;
  --spin) [ $# -ge 2 ] || die_usage "--spin needs a path"; spin=$2; shift 2 ;;
  --cc) [ $# -ge 2 ] || die_usage "--cc needs a path"; cc=$2; shift 2 ;;
  --update-trail) update_trail=1; shift ;;
  -h | --help) sed -n '2,35p' "${BASH_SOURCE[0]}"; exit 0 ;;
  -*) die_usage "unknown option '$1'" ;;
  *) checks+=("$1"); shift ;;
  esac
done
[ ${#checks[@]} -gt 0 ] || [ $update_trail -eq 1 ] || die_usage "no check named"

models="$source_dir/docs/protocol"
if [ ! -f "$models/overlap.pml" ] || [ ! -f "$models/lockstep.pml" ] ||
  [ ! -f "$models/pipeline.pml" ]; then
  echo "check.sh: no models in '$models' (overlap.pml, lockstep.pml, pipeline.pml)" >&2
  exit 2
fi
if ! command -v "$spin" >/dev/null 2>&1; then
  echo "check.sh: spin not found ('$spin'): skipped (Debian package 'spin')"
  exit 77
fi
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "check.sh: C compiler not found ('$cc'): skipped"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/lockstep-protocol.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
run_dir=""

# Print pan's statistics for one run on one line.
summarize() {
  local out=$1
  awk '
    /^State-vector/ { depth = $6; sub(",", "", depth) }
    /states, stored/ { stored = $1 }
    /transitions \(= / { transitions = $1 }
    /total actual memory usage/ { memory = $1 }
    /^pan: elapsed time/ { seconds = $4 }
    END {
      printf "%s states stored, %s transitions, depth %s, %s MB, %s s", stored, transitions, depth,
        memory, seconds
    }
  ' "$out"
}

# run_pan NAME MODEL SPINFLAGS CCFLAGS PANFLAGS: generate, compile and run a
# verifier in a fresh directory; leaves $run_dir/pan.out and any trail.
run_pan() {
  local name=$1 model=$2 spin_flags=$3 cc_flags=$4 pan_flags=$5
  run_dir="$work/$name"
  mkdir -p "$run_dir"
  cp "$models/$model" "$run_dir/"
  # shellcheck disable=SC2086
  if ! (cd "$run_dir" && "$spin" -a $spin_flags "$model" >spin.out 2>&1); then
    echo "FAIL $name: spin -a $spin_flags $model failed:" >&2
    cat "$run_dir/spin.out" >&2
    return 1
  fi
  # shellcheck disable=SC2086
  if ! (cd "$run_dir" && "$cc" -O2 -w $cc_flags -o pan pan.c >cc.out 2>&1); then
    echo "FAIL $name: $cc $cc_flags pan.c failed:" >&2
    cat "$run_dir/cc.out" >&2
    return 1
  fi
  # shellcheck disable=SC2086
  (cd "$run_dir" && ./pan $pan_flags >pan.out 2>&1) || true
}

# The search must have covered the whole state space.
search_complete() {
  local out=$1
  ! grep -qE 'max search depth too small|Search not completed|out of memory|aborted' "$out"
}

# expect_pass NAME MODEL SPINFLAGS CCFLAGS PANFLAGS
expect_pass() {
  local name=$1 out
  if ! run_pan "$@"; then failures=$((failures + 1)); return; fi
  out="$run_dir/pan.out"
  if grep -q '^State-vector .* errors: 0$' "$out" && ! grep -q '^pan:1:' "$out" &&
    search_complete "$out"; then
    echo "PASS $name: errors: 0; $(summarize "$out")"
  else
    echo "FAIL $name: expected 'errors: 0' from a complete search, pan said:" >&2
    grep -E '^pan:|errors:|warning|Warning' "$out" >&2 || tail -20 "$out" >&2
    failures=$((failures + 1))
  fi
}

# expect_covered NAME MODEL SPINFLAGS CCFLAGS PANFLAGS: like expect_pass, and
# every statement of the model must be reachable (pan's "unreached" report
# lists only the ends of endless loops), so no path is vacuously safe.
expect_covered() {
  local name=$1 model=$2 dead
  expect_pass "$@"
  dead=$(grep -E "^[[:space:]]+$model:[0-9]+, state" "$run_dir/pan.out" | grep -v '"-end-"' || true)
  if [ -n "$dead" ]; then
    echo "FAIL $name: statements never reached:" >&2
    echo "$dead" >&2
    failures=$((failures + 1))
  else
    echo "PASS ${name}_coverage: every statement of $model reached"
  fi
}

# expect_error NAME KIND MODEL SPINFLAGS CCFLAGS PANFLAGS: pan must report
# an error of KIND ("invalid end state", "assertion violated", "acceptance
# cycle") and write a trail.
expect_error() {
  local name=$1 kind=$2 out errors
  shift 2
  if ! run_pan "$name" "$@"; then failures=$((failures + 1)); return; fi
  out="$run_dir/pan.out"
  errors=$(sed -n 's/^State-vector .* errors: \([0-9]*\)$/\1/p' "$out")
  if grep -q "^pan:1: $kind" "$out" && [ "${errors:-0}" -ge 1 ] &&
    ls "$run_dir"/*.trail >/dev/null 2>&1; then
    echo "PASS $name: found '$kind' (errors: $errors, trail written); $(summarize "$out")"
  else
    echo "FAIL $name: expected '$kind' with errors >= 1 and a trail, pan said:" >&2
    grep -E '^pan:|errors:' "$out" >&2 || tail -20 "$out" >&2
    failures=$((failures + 1))
  fi
}

# check_trail NAME CHECK BASE SPINFLAGS DIR MARKER: the shortest trail that
# `pan -i` just wrote in DIR for BASE.pml (spin flags SPINFLAGS) is kept in the
# repository as BASE.trail, with its replay as BASE-trail.txt: the stored
# trail must still replay, to the same text, on the model, be as short as the
# fresh one, and its replay must contain MARKER. --update-trail stores DIR's.
check_trail() {
  local name=$1 check=$2 base=$3 spin_flags=$4 fresh=$5 marker=$6
  if [ $update_trail -eq 1 ]; then
    cp "$fresh/$base.pml.trail" "$models/$base.trail"
    # shellcheck disable=SC2086
    (cd "$fresh" && "$spin" -t -k "$base.pml.trail" -p $spin_flags "$base.pml") \
      >"$models/$base-trail.txt"
    echo "updated $models/$base.trail and $base-trail.txt"
  fi
  if [ ! -f "$models/$base.trail" ] || [ ! -f "$models/$base-trail.txt" ]; then
    echo "FAIL $name: docs/protocol/$base.trail or $base-trail.txt is missing" >&2
    failures=$((failures + 1))
    return
  fi
  # Copied after the model, so spin does not warn that the model is newer.
  local replay="$fresh/replay.txt"
  cp "$models/$base.trail" "$fresh/stored.trail"
  # shellcheck disable=SC2086
  (cd "$fresh" && "$spin" -t -k stored.trail -p $spin_flags "$base.pml") >"$replay" 2>&1 || true
  if ! diff -q "$replay" "$models/$base-trail.txt" >/dev/null; then
    echo "FAIL $name: replaying $base.trail no longer gives $base-trail.txt" \
      "(model changed? rerun: check.sh --update-trail $check)" >&2
    diff "$models/$base-trail.txt" "$replay" | head -20 >&2 || true
    failures=$((failures + 1))
    return
  fi
  local stored_steps fresh_steps
  stored_steps=$(sed -n 's/^spin: trail ends after \([0-9]*\) steps$/\1/p' "$replay")
  # shellcheck disable=SC2086
  fresh_steps=$(cd "$fresh" && "$spin" -t -p $spin_flags "$base.pml" 2>&1 |
    sed -n 's/^spin: trail ends after \([0-9]*\) steps$/\1/p')
  if [ -n "$stored_steps" ] && [ "$stored_steps" = "$fresh_steps" ] &&
    grep -q "$marker" "$replay"; then
    echo "PASS $name: stored trail replays ($stored_steps steps, as short as a fresh pan -i)"
  else
    echo "FAIL $name: stored trail has '${stored_steps:-?}' steps, fresh pan -i" \
      "'${fresh_steps:-?}', or it does not end in the cycle" >&2
    failures=$((failures + 1))
  fi
}

# The overlapping design: shortest trail (-i, needs -DREACH), and the trail
# kept in the repository still replays, to the same text, on the model.
check_overlap_deadlocks() {
  expect_error overlap_2ranks "invalid end state" overlap.pml "" "-DSAFETY -DREACH" "-i"
  local fresh="$run_dir"
  expect_error overlap_3ranks "invalid end state" overlap.pml "-DNRANKS=3" "-DSAFETY" ""
  check_trail overlap_trail overlap_deadlocks overlap "" "$fresh" 'spin-waits for all-reduce'
}

check_overlap_fixed() {
  expect_covered overlap_fixed_2ranks overlap.pml "-DFIX" "-DSAFETY" ""
  expect_pass overlap_fixed_2ranks_3steps_2layers overlap.pml \
    "-DFIX -DNSTEPS=3 -DNLAYERS=2" "-DSAFETY" ""
  expect_pass overlap_fixed_3ranks overlap.pml "-DFIX -DNRANKS=3" "-DSAFETY -DCOLLAPSE" ""
  expect_error overlap_fixed_rank_dies "invalid end state" overlap.pml \
    "-DFIX -DKILL" "-DSAFETY" ""
  expect_error overlap_fixed_ranks_disagree "assertion violated" overlap.pml \
    "-DFIX -DSKEW" "-DSAFETY" ""
}

# Bounds: NREQ requests (up to 3 at once), LEN tokens each, BATCH
# sequences per step, MAXFAULTS faults per run.
check_lockstep_safe() {
  local n f
  for n in 2 3; do
    for f in 1 2 3; do
      expect_covered "lockstep_safe_${n}ranks_3req_${f}faults" lockstep.pml \
        "-DNRANKS=$n -DNREQ=3 -DLEN=2 -DBATCH=2 -DMAXFAULTS=$f" "-DSAFETY -DNOCLAIM" ""
    done
  done
  expect_pass lockstep_safe_3ranks_3req_len3 lockstep.pml \
    "-DNRANKS=3 -DNREQ=3 -DLEN=3 -DBATCH=2 -DMAXFAULTS=2" "-DSAFETY -DNOCLAIM" ""
  expect_pass lockstep_safe_3ranks_3req_batch1 lockstep.pml \
    "-DNRANKS=3 -DNREQ=3 -DLEN=2 -DBATCH=1 -DMAXFAULTS=2" "-DSAFETY -DNOCLAIM" ""
  expect_pass lockstep_safe_3ranks_3req_batch3 lockstep.pml \
    "-DNRANKS=3 -DNREQ=3 -DLEN=2 -DBATCH=3 -DMAXFAULTS=2" "-DSAFETY -DNOCLAIM" ""
}

check_lockstep_live() {
  local n
  for n in 2 3; do
    expect_pass "lockstep_live_${n}ranks_3req_2faults" lockstep.pml \
      "-DNRANKS=$n -DNREQ=3 -DLEN=2 -DBATCH=2 -DMAXFAULTS=2" "-DNFAIR=3" "-a -f"
  done
  expect_pass lockstep_live_2ranks_3req_3faults_len3 lockstep.pml \
    "-DNRANKS=2 -DNREQ=3 -DLEN=3 -DBATCH=2 -DMAXFAULTS=3" "-DNFAIR=3" "-a -f"
}

# Each broken variant must be caught, or the checks above prove little.
check_lockstep_mutants() {
  local safe="-DSAFETY -DNOCLAIM"
  expect_error mutant_no_step_barrier "assertion violated" lockstep.pml \
    "-DMUTANT_NO_STEP_BARRIER" "$safe" ""
  expect_error mutant_prompt_only "assertion violated" lockstep.pml \
    "-DMUTANT_PROMPT_ONLY" "$safe" ""
  expect_error mutant_keep_socket "assertion violated" lockstep.pml \
    "-DMUTANT_KEEP_SOCKET" "$safe" ""
  expect_error mutant_no_deadline_no_watchdog "invalid end state" lockstep.pml \
    "-DMUTANT_NO_DEADLINE -DMUTANT_NO_WATCHDOG" "$safe" ""
  expect_error mutant_no_resubmit "acceptance cycle" lockstep.pml \
    "-DMUTANT_NO_RESUBMIT" "-DNFAIR=3" "-a -f"
  expect_error mutant_heartbeat_starves "acceptance cycle" lockstep.pml \
    "-DMUTANT_HEARTBEAT_STARVES" "-DNFAIR=3" "-a -f"
  # Either recovery path alone suffices in the model (defence in depth).
  expect_pass mutant_no_deadline lockstep.pml "-DMUTANT_NO_DEADLINE" "$safe" ""
  expect_pass mutant_no_watchdog lockstep.pml "-DMUTANT_NO_WATCHDOG" "$safe" ""
}

# Pipeline parallelism (pipeline.pml): NSTAGES stages, K steps in flight,
# CAP mailbox slots per link (the design: CAP = K), NREQ requests (up to 3
# at once), LEN tokens each, BATCH sequences per step, MAXFAULTS faults.
# Rendezvous links (CAP 0) need -DNOREDUCE: spin warns that partial-order
# reduction may be unsound with rendezvous and the stages' unless escape.
pp() { echo "-DNSTAGES=$1 -DK=$2 -DCAP=$3 -DNREQ=3 -DLEN=2 -DBATCH=2 -DMAXFAULTS=$4"; }

check_pipeline_safe() {
  local n k f faults
  for n in 2 3; do
    # A 1-fault run is also a run of the 2-fault model (faults are optional
    # moves); the quick 2-stage 1-fault runs are left to README's table.
    faults="1 2"
    [ "$n" = 2 ] && faults=2
    for k in $(seq 1 $n); do
      for f in $faults; do
        expect_covered "pipeline_safe_${n}stages_k${k}_cap${k}_${f}faults" pipeline.pml \
          "$(pp "$n" "$k" "$k" "$f")" "-DSAFETY -DNOCLAIM" ""
      done
    done
  done
  # Mailboxes smaller than K: sends wait for a slot (with a deadline that
  # fires only on faults), and still nothing hangs.
  expect_covered pipeline_safe_3stages_k3_cap1_2faults pipeline.pml \
    "$(pp 3 3 1 2)" "-DSAFETY -DNOCLAIM" ""
  # Keep-alives as the code sends them (one way, not counted in flight):
  # sends may wait, nothing hangs. (Not covered: no keep-alive comes back.)
  expect_pass pipeline_safe_oneway_3stages_k3_cap3_1fault pipeline.pml \
    "$(pp 3 3 3 1) -DKEEPALIVE_ONE_WAY" "-DSAFETY -DNOCLAIM" ""
}

check_pipeline_live() {
  expect_pass pipeline_live_2stages_k2_cap2_2faults pipeline.pml \
    "$(pp 2 2 2 2)" "-DNFAIR=3" "-a -f"
  expect_pass pipeline_live_3stages_k3_cap3_1fault pipeline.pml \
    "$(pp 3 3 3 1)" "-DNFAIR=3" "-a -f"
}

# Rendezvous links with K = NSTAGES deadlock: the leader waits to hand step
# k+1 to stage 1 while the last stage waits to hand step k's logits to the
# leader. The exact boundary: a hang needs NSTAGES * (CAP + 1) <= K (every
# stage holding a step and every mailbox full), so for K <= NSTAGES only
# CAP = 0 with K = NSTAGES; a send finds a full mailbox exactly when CAP < K
# (CAP < K + 1 with one-way keep-alives).
check_pipeline_deadlocks() {
  local reach="-DSAFETY -DNOCLAIM -DREACH -DNOREDUCE"
  expect_error pipeline_rendezvous_2stages "invalid end state" pipeline.pml \
    "$(pp 2 2 0 0)" "$reach" "-i"
  local fresh="$run_dir"
  expect_error pipeline_rendezvous_3stages_1fault "invalid end state" pipeline.pml \
    "$(pp 3 3 0 1)" "-DSAFETY -DNOCLAIM -DNOREDUCE" ""
  expect_error pipeline_rendezvous_deadline_fires "assertion violated" pipeline.pml \
    "$(pp 2 2 0 1) -DDEADLINE_ON_HANG" "-DSAFETY -DNOCLAIM -DNOREDUCE" ""
  check_trail pipeline_trail pipeline_deadlocks pipeline "$(pp 2 2 0 0)" "$fresh" \
    'leader launches step 0 (plan 1), 2 in flight'
  # Just inside the boundary: no hang.
  expect_pass pipeline_rendezvous_3stages_k2 pipeline.pml \
    "$(pp 3 2 0 1)" "-DSAFETY -DNOCLAIM -DNOREDUCE" ""
  expect_pass pipeline_2stages_k2_cap1 pipeline.pml "$(pp 2 2 1 1)" "-DSAFETY -DNOCLAIM" ""
  # CAP = K - 1: no hang, but a healthy send can find its mailbox full.
  expect_error pipeline_2stages_k2_cap1_full "assertion violated" pipeline.pml \
    "$(pp 2 2 1 0) -DCLAIM_NEVER_FULL" "-DSAFETY -DNOCLAIM" ""
  expect_error pipeline_3stages_k3_cap2_full "assertion violated" pipeline.pml \
    "$(pp 3 3 2 0) -DCLAIM_NEVER_FULL" "-DSAFETY -DNOCLAIM" ""
  # One-way keep-alives, no fault: one keep-alive and K - 1 steps fill a
  # link of K slots; K + 1 slots never fill.
  expect_error pipeline_oneway_2stages_k2_cap2_full "assertion violated" pipeline.pml \
    "$(pp 2 2 2 0) -DKEEPALIVE_ONE_WAY -DCLAIM_NEVER_FULL" "-DSAFETY -DNOCLAIM" ""
  expect_pass pipeline_oneway_2stages_k2_cap3 pipeline.pml \
    "$(pp 2 2 3 0) -DKEEPALIVE_ONE_WAY -DCLAIM_NEVER_FULL" "-DSAFETY -DNOCLAIM" ""
}

# Each broken variant must be caught.
check_pipeline_mutants() {
  local safe="-DSAFETY -DNOCLAIM"
  expect_error pipeline_mutant_same_sequence_twice "assertion violated" pipeline.pml \
    "$(pp 2 2 2 1) -DMUTANT_SAME_SEQUENCE_TWICE" "$safe" ""
  expect_error pipeline_mutant_keep_mailbox "assertion violated" pipeline.pml \
    "$(pp 2 2 2 1) -DMUTANT_KEEP_MAILBOX" "$safe" ""
  expect_error pipeline_mutant_keepalive_uncounted "assertion violated" pipeline.pml \
    "$(pp 2 2 3 0) -DMUTANT_KEEPALIVE_UNCOUNTED -DCLAIM_NEVER_FULL" "$safe" ""
  expect_error pipeline_mutant_keepalive_dropped "invalid end state" pipeline.pml \
    "$(pp 3 3 3 1) -DMUTANT_KEEPALIVE_DROPPED" "$safe" ""
  expect_error pipeline_mutant_no_deadline_no_watchdog "invalid end state" pipeline.pml \
    "$(pp 2 2 2 1) -DMUTANT_NO_DEADLINE -DMUTANT_NO_WATCHDOG" "$safe" ""
  expect_error pipeline_mutant_no_resubmit "acceptance cycle" pipeline.pml \
    "$(pp 2 2 2 1) -DMUTANT_NO_RESUBMIT" "-DNFAIR=3" "-a -f"
}

if [ $update_trail -eq 1 ] && [ ${#checks[@]} -eq 0 ]; then
  checks=(overlap_deadlocks pipeline_deadlocks)
fi
for check in "${checks[@]}"; do
  case "$check" in
  overlap_deadlocks | overlap_fixed | lockstep_safe | lockstep_live | lockstep_mutants | \
    pipeline_safe | pipeline_live | pipeline_deadlocks | pipeline_mutants)
    "check_$check" ;;
  all)
    check_overlap_deadlocks
    check_overlap_fixed
    check_lockstep_safe
    check_lockstep_live
    check_lockstep_mutants
    check_pipeline_safe
    check_pipeline_live
    check_pipeline_deadlocks
    check_pipeline_mutants
    ;;
  *) die_usage "unknown check '$check'" ;;
  esac
done

if [ $failures -gt 0 ]; then
  echo "check.sh: $failures verdict(s) not as expected" >&2
  exit 1
fi
echo "check.sh: all verdicts as expected"
