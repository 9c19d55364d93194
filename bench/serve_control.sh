# serve_control.sh -- sourced by bench/chaos and bench/soak: starts
# `lockstep serve` on a free port, stops it by pid with a deadline, and
# proves that no process it started outlived it.
#
# Runners live in process groups of their own (so a gateway killed with
# SIGKILL cannot take them along), and the gateway restarts them under new
# pids; pids also get reused quickly on a busy machine. So the gateway is
# started with a unique environment variable, LOCKSTEP_BENCH_TAG, which
# every process it starts inherits: after the gateway exited, a live
# process whose environment holds the tag was left behind. It is reported,
# killed by its pid, and serve_stop fails.
# shellcheck shell=bash

serve_pid="" serve_port="" serve_log="" serve_tag=""

# serve_start LOCKSTEP LOG SERVE_ARGS...: starts the gateway in the
# background and waits (60 s at most) for the port it bound.
serve_start() {
    local lockstep=$1
    serve_log=$2
    shift 2
    serve_tag="lockstep-bench-$$-$RANDOM$RANDOM"
    : >"$serve_log"
    LOCKSTEP_BENCH_TAG=$serve_tag "$lockstep" serve "$@" --port 0 >"$serve_log" 2>&1 &
    serve_pid=$!
    serve_port=""
    for _ in $(seq 600); do
        kill -0 "$serve_pid" 2>/dev/null || break
        serve_port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$serve_log")
        [ -z "$serve_port" ] || return 0
        sleep 0.1
    done
    echo "serve_control: lockstep serve did not listen within 60 s; its output:" >&2
    cat "$serve_log" >&2
    return 1
}

# The pids of live (not zombie) processes whose environment holds the tag.
serve_tagged() {
    local tag=$1 dir pid state
    for dir in /proc/[0-9]*; do
        pid=${dir#/proc/}
        tr '\0' '\n' 2>/dev/null <"$dir/environ" | grep -qxF "LOCKSTEP_BENCH_TAG=$tag" ||
            continue
        state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "$dir/status" 2>/dev/null)
        [ -z "$state" ] || [ "$state" = Z ] || echo "$pid"
    done
}

# Stops the gateway (SIGTERM; SIGKILL after 20 s), then checks that nothing
# it started lives on (waiting 5 s for the last ones to die). Fails if
# something did, after killing it.
serve_stop() {
    local left pid
    [ -n "$serve_tag" ] || return 0
    if [ -n "$serve_pid" ]; then
        kill -TERM "$serve_pid" 2>/dev/null || true
        for _ in $(seq 200); do
            kill -0 "$serve_pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$serve_pid" 2>/dev/null; then
            echo "serve_control: lockstep serve (pid $serve_pid) did not stop within 20 s;" \
                "killing it" >&2
            kill -KILL "$serve_pid" 2>/dev/null || true
        fi
        wait "$serve_pid" 2>/dev/null || true
        serve_pid=""
    fi
    for _ in $(seq 50); do
        left=$(serve_tagged "$serve_tag")
        [ -n "$left" ] || { serve_tag=""; return 0; }
        sleep 0.1
    done
    echo "serve_control: processes left behind after the gateway stopped:" >&2
    for pid in $left; do
        ps -o pid=,pgid=,stat=,args= -p "$pid" >&2 || true
        kill -KILL "$pid" 2>/dev/null || true
    done
    serve_tag=""
    return 1
}
