#!/usr/bin/env bash
# netns_cluster.sh -- the cluster across three hosts on one machine: live
# moves and a lost host under streaming load, with no failed request.
#
# Four network namespaces: the gateway's (lsclg-PID, holding a bridge) and
# three hosts (lscl1..3-PID, 10.216.0.1..3), each joined to the bridge by a
# veth pair. `lockstep serve` runs in the gateway's namespace with a
# hostfile naming the three hosts; Open MPI's launch agent enters a host's
# namespace with `ip netns exec` (as ssh would log in), and a runner's
# leader serves the runner protocol on TCP on its host's address. The test:
#   - places randa at tp 2 across hosts 1 and 2 and randb at tp 1 on host 3
#     (--place), and records 6 + 4 seeded streams as the reference;
#   - runs them again while randa moves to host 3 (tp 2) and back: every
#     stream ends with [DONE] and exactly its reference text;
#   - runs them again while host 2 goes down (its processes killed, its
#     veth removed): the probes mark it lost, randa is placed without it,
#     every stream still ends with its reference text, and none waited
#     between two tokens for twice the time the loss took to be seen;
#   - leaves no namespace or process behind, pass or fail (EXIT trap).
# usage: netns_cluster.sh LOCKSTEP_BIN   (exit 0, 1, or 77 = skipped)
# Needs root, ip (iproute2), curl and mpirun (openmpi-bin; $MPIRUN if set).
set -u
lockstep=${1:?usage: netns_cluster.sh LOCKSTEP_BIN}

skip() { echo "skip: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (ip netns)"
command -v ip >/dev/null || skip "ip is absent (Debian package iproute2)"
command -v curl >/dev/null || skip "curl is absent"
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null || skip "$mpirun is absent (Debian package openmpi-bin)"
[ -x "$lockstep" ] || { echo "netns_cluster: $lockstep is not an executable"; exit 1; }

prefix=lscl
gw=${prefix}g-$$ bridge=${prefix}br
subnet=10.216.0.0/24
ns=("" "${prefix}1-$$" "${prefix}2-$$" "${prefix}3-$$")
ip_of=("10.216.0.254" "10.216.0.1" "10.216.0.2" "10.216.0.3")
N_A=6 N_B=4 TOKENS=160
PROBE_MS=2000 # --probe-interval

# shellcheck source=tests/netns_lib.sh
. "$(dirname "$0")/netns_lib.sh"

work='' server=''
cleanup() {
    local status=$?
    trap - EXIT INT TERM HUP
    [ -n "$server" ] && kill -TERM "$server" 2>/dev/null
    for _ in $(seq 50); do [ -n "$server" ] && kill -0 "$server" 2>/dev/null && sleep 0.1; done
    for n in 1 2 3; do remove_namespace "${ns[$n]}"; done
    remove_namespace "$gw"
    [ -n "$work" ] && rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# Namespaces of earlier runs whose script is gone.
remove_stale_namespaces "^${prefix}[g123]-[0-9]+$"

work=$(mktemp -d /tmp/netns_cluster.XXXXXX) || exit 1
chmod 755 "$work"
export TMPDIR=$work
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 # Open MPI keeps memory to the end

# The gateway's namespace with a bridge, and a veth from it to each host.
netns_cluster_up || { echo "netns_cluster: cannot set up the namespaces"; exit 1; }
netns_write_agent "$work/agent.sh"
printf '%s slots=4\n%s slots=4\n%s slots=4\n' "${ip_of[1]}" "${ip_of[2]}" "${ip_of[3]}" \
    >"$work/hosts"
model=$work/rand.gguf
"$lockstep" convert --random --dim 128 --hidden 256 --layers 2 --heads 4 --kv-heads 2 \
    --vocab 300 --ctx 512 --type f32 --seed 11 -o "$model" >/dev/null ||
    { echo "netns_cluster: convert failed"; exit 1; }

# The gateway, in its namespace; mpirun reaches the hosts through the agent.
ip netns exec "$gw" env OMPI_MCA_plm_rsh_agent="$work/agent.sh" OMPI_MCA_btl=self,tcp \
    OMPI_MCA_btl_tcp_if_include="$subnet" OMPI_MCA_oob_tcp_if_include="$subnet" \
    OMPI_MCA_mpi_yield_when_idle=1 \
    "$lockstep" serve --port 0 -t 1 --cluster "$work/hosts" --admin-key admin --enable-faults \
    --probe-interval 2 --watchdog 3 -m "$model" --name randa -m "$model" --name randb \
    --place "randa=tp:2,hosts:${ip_of[1]}+${ip_of[2]}" --place "randb=tp:1,hosts:${ip_of[3]}" \
    >"$work/serve.out" 2>"$work/serve.err" &
server=$!

failures=0
check() { # check CONDITION-STATUS MESSAGE
    if [ "$1" -ne 0 ]; then
        echo "netns_cluster: FAILED: $2"
        failures=$((failures + 1))
    fi
}
in_gw() { ip netns exec "$gw" "$@"; }
api() { in_gw curl -s --max-time 30 -H "Authorization: Bearer admin" "$@"; }

port=
for _ in $(seq 600); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.out")
    [ -n "$port" ] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
done
[ -n "$port" ] || { echo "netns_cluster: the gateway did not start:"; cat "$work/serve.err"; exit 1; }
base=http://127.0.0.1:$port
# waits (up to $2 s) until GET /v1/cluster matches the extended regex $1
wait_cluster() {
    for _ in $(seq $(($2 * 5))); do
        api "$base/v1/cluster" | grep -Eq "$1" && return 0
        sleep 0.2
    done
    echo "netns_cluster: /v1/cluster did not match $1 in $2 s:"
    api "$base/v1/cluster"
    echo
    return 1
}
instance() { # instance ID HOSTS: its JSON up to its state, ready
    printf '"id":"%s","model":"[a-z]*","tp":[0-9]+,"placement":\\[[^]]*\\],"hosts":"%s","state":"ready"' "$1" "$2"
}
wait_cluster "$(instance randa-1 "${ip_of[1]}\\+${ip_of[2]}").*$(instance randb-2 "${ip_of[3]}")" 120
check $? "the first placements were not ready"

# Copies an SSE stream into $1.sse, and the arrival time of each of its
# data lines (seconds) into $1.t.
timestamp() {
    local line
    while IFS= read -r line; do
        printf '%s\n' "$line" >>"$1.sse"
        case $line in data:*) printf '%s\n' "$EPOCHREALTIME" >>"$1.t" ;; esac
    done
}
# Runs the 6 + 4 streams into $work/$1-N.sse (in the background).
start_streams() {
    pids=()
    for i in $(seq 0 $((N_A + N_B - 1))); do
        local model=randa
        [ "$i" -ge "$N_A" ] && model=randb
        in_gw curl -sN --max-time 300 "$base/v1/completions" -d "{\"model\":\"$model\",\
\"prompt\":\"client $i\",\"max_tokens\":$TOKENS,\"stream\":true,\"temperature\":0.9,\
\"seed\":$((40 + i)),\"ignore_eos\":true}" | timestamp "$work/$1-$i" &
        pids+=($!)
    done
}
# The longest time between two data lines of any of randa's streams of run
# $1, in milliseconds.
longest_gap() {
    cat "$work/$1-"[0-$((N_A - 1))].t | awk 'FNR == 1 {last = 0}
        { if (last && $1 - last > gap) gap = $1 - last; last = $1 }
        END {printf "%d", gap * 1000}' 2>/dev/null
}
wait_streams() { for p in "${pids[@]}"; do wait "$p"; done; }
# The text of a stream (its "text" fields joined) and whether it ended whole.
text_of() { grep -o '"text":"\([^"\\]\|\\.\)*"' "$1" | tr -d '\n'; }
whole() { grep -q '"finish_reason":"length"' "$1" && [ "$(grep -c '^data: \[DONE\]' "$1")" -eq 1 ]; }
compare() { # compare RUN: every stream whole and equal to the reference
    local same=0
    for i in $(seq 0 $((N_A + N_B - 1))); do
        whole "$work/$1-$i.sse" && [ "$(text_of "$work/$1-$i.sse")" = "$(text_of "$work/ref-$i.sse")" ] &&
            same=$((same + 1))
    done
    echo "$1: $same of $((N_A + N_B)) streams whole with their reference text"
    [ "$same" -eq $((N_A + N_B)) ]
    check $? "$1: $((N_A + N_B - same)) streams failed or differ"
}
slow_down() {
    api "$base/debug/fault" -d '{"model":"randa","kind":"delay","delay_ms":20,"steps":60}' >/dev/null
}

start_streams ref
wait_streams
for i in $(seq 0 $((N_A + N_B - 1))); do
    whole "$work/ref-$i.sse"
    check $? "reference stream $i did not end whole: $(tail -c 300 "$work/ref-$i.sse")"
done

# Moves: randa to host 3 and back, while the streams run.
slow_down
start_streams move
sleep 1
start=${EPOCHREALTIME/./}
api "$base/admin/instances/randa-1/move" -d "{\"tp\":2,\"hosts\":[\"${ip_of[3]}\"]}" >/dev/null
wait_cluster "$(instance randa-1 "${ip_of[3]}:2")" 120
check $? "randa did not move to host 3"
there=$(((${EPOCHREALTIME/./} - start) / 1000))
slow_down
api "$base/admin/instances/randa-1/move" \
    -d "{\"hosts\":[\"${ip_of[1]}\",\"${ip_of[2]}\"]}" >/dev/null
wait_cluster "$(instance randa-1 "${ip_of[1]}\\+${ip_of[2]}")" 120
check $? "randa did not move back"
wait_streams
echo "moves: to host 3 in $there ms, and back"
compare move

# A lost host: host 2's processes killed, its veth removed.
slow_down
start_streams lost
sleep 1
netns_host_cut 2
start=${EPOCHREALTIME/./}
wait_cluster "\"name\":\"${ip_of[2]}\",\"local\":false,\"state\":\"lost\"" 60
check $? "host 2 was not marked lost"
detected=$(((${EPOCHREALTIME/./} - start) / 1000))
wait_cluster "\"id\":\"randa-1\",\"model\":\"randa\",\"tp\":2,\"placement\":\\[[^]]*\\],\"hosts\":\"[^\"]*\",\"state\":\"ready\"" 120
api "$base/v1/cluster" | grep -Eq "\"hosts\":\"[^\"]*${ip_of[2]//./\\.}[^\"]*\",\"state\":\"ready\""
[ $? -ne 0 ]
check $? "randa is still placed on the lost host"
replaced=$(((${EPOCHREALTIME/./} - start) / 1000))
wait_streams
echo "lost host: randa placed elsewhere $replaced ms after host 2 went down"
compare lost
# what a client waits for when a host is lost: under twice the time the
# cluster takes to see it (the new placement starts at once, with no
# warm-up, since the old one serves nobody) -- counted as at least the
# probe interval, since a probe may come just after the loss or a whole
# interval later -- and a second for the new placement's start
gap=$(longest_gap lost)
echo "lost host: detected in $detected ms; longest gap in randa's streams $gap ms" \
    "(undisturbed: $(longest_gap ref) ms)"
seen=$((detected > PROBE_MS ? detected : PROBE_MS))
[ "$gap" -lt $((2 * seen + 1000)) ]
check $? "a stream waited $gap ms, over twice the $seen ms the probes may take to see the host lost (+1 s)"

failed=$(in_gw curl -s "$base/metrics" | grep -E '^lockstep_requests_total\{[^}]*status="5' |
    awk '{s += $2} END {print s + 0}')
echo "requests that failed with 5xx: $failed"
[ "$failed" -eq 0 ]
check $? "$failed requests failed"
grep -E "moved|lost|moving" "$work/serve.err" | sed 's/^/  /'

kill -TERM "$server"
for _ in $(seq 200); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
kill -0 "$server" 2>/dev/null
check $((1 - $?)) "lockstep serve did not stop within 20 s"
[ "$failures" -eq 0 ] || { echo "--- serve.err:"; tail -n 40 "$work/serve.err"; }
echo "netns_cluster: $failures check(s) failed"
[ "$failures" -eq 0 ]
