#!/usr/bin/env bash
# netns_tp.sh -- tensor and pipeline parallelism between two hosts on one
# machine.
#
# Two network namespaces joined by a veth pair play two hosts (10.213.0.1
# and 10.213.0.2). mpirun starts in the first; its launch agent (Open MPI's
# plm_rsh_agent, called as `agent HOST COMMAND...` like ssh) runs the remote
# daemon with `ip netns exec` in the namespace of HOST. Ranks talk over TCP
# on the veth only (btl self,tcp). The test checks that
#   - the generated ids of `lockstep generate --comm mpi` over the two
#     hosts equal those of a local tp=1 run (random F32 model);
#   - the two ranks ran in different network namespaces (each rank prints
#     its /proc/self/ns/net through a wrapper) and the all-reduces crossed
#     the veth (its byte counters);
#   - the same with two pipeline stages (--pp 2, a stage a host): the ids of
#     the local tp=1 run, the handoffs and logits crossed the veth, and in
#     fewer bytes than tensor parallelism's all-gathers;
#   - a pipeline whose stage 1 is killed (SIGKILL in step 3) or stopped
#     (SIGSTOP) ends the job within its deadline with the comm module's
#     exit code or mpirun's kill, never a hang;
#   - a run forced to fail (rank 1 stopped, mpirun given up on) leaves no
#     namespace, veth, process or file behind, like a passing run.
# Every process and namespace it creates is removed by the EXIT trap, pass or
# fail; namespaces left by a run that was killed outright (SIGKILL: no trap)
# are removed by the next run.
#
# usage: netns_tp.sh LOCKSTEP_BIN          the test (exit 0, 1, or 77 = skipped)
#        netns_tp.sh --fail LOCKSTEP_BIN   one run forced to fail (used by the test)
# Needs root, ip (iproute2) and mpirun (openmpi-bin; $MPIRUN if set, else
# from PATH); skips (77) otherwise.
set -u

fail_mode=0
if [ "${1:-}" = --fail ]; then
    fail_mode=1
    shift
fi
lockstep=${1:?usage: netns_tp.sh [--fail] LOCKSTEP_BIN}

skip() { echo "skip: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (ip netns)"
command -v ip >/dev/null || skip "ip is absent (Debian package iproute2)"
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null || skip "$mpirun is absent (Debian package openmpi-bin)"
[ -x "$lockstep" ] || { echo "netns_tp: $lockstep is not an executable"; exit 1; }

prefix=lstp                      # names: lstp1-PID, lstp2-PID, lstpa-PID, lstpb-PID
ns1=$prefix'1-'$$ ns2=$prefix'2-'$$
veth1=$prefix'a-'$$ veth2=$prefix'b-'$$
ip1=10.213.0.1 ip2=10.213.0.2 subnet=10.213.0.0/24
JOB_SECONDS=60                   # one mpirun job, should nothing else stop it

# shellcheck source=tests/netns_lib.sh
. "$(dirname "$0")/netns_lib.sh"

work='' child=''
cleanup() {
    local status=$?
    trap - EXIT INT TERM HUP
    # the forced-failure run, if it is still going, cleans up after itself
    [ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child"
    # mpirun and every rank and daemon live in the namespaces; deleting the
    # first namespace also deletes the veth pair.
    remove_namespace "$ns1"
    remove_namespace "$ns2"
    [ -n "$work" ] && rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# Namespaces of earlier runs whose script is gone (killed with SIGKILL).
remove_stale_namespaces "^${prefix}[12]-[0-9]+$"

work=$(mktemp -d /tmp/netns_tp.XXXXXX) || exit 1
export TMPDIR=$work                   # Open MPI's session directories go here
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 # Open MPI keeps memory to the end
export OMPI_MCA_mpi_yield_when_idle=1

# Two hosts joined by a veth pair.
if ! { ip netns add "$ns1" && ip netns add "$ns2" &&
    ip link add "$veth1" type veth peer name "$veth2" &&
    ip link set "$veth1" netns "$ns1" && ip link set "$veth2" netns "$ns2" &&
    ip -n "$ns1" addr add "$ip1/24" dev "$veth1" && ip -n "$ns2" addr add "$ip2/24" dev "$veth2" &&
    ip -n "$ns1" link set lo up && ip -n "$ns2" link set lo up &&
    ip -n "$ns1" link set "$veth1" up && ip -n "$ns2" link set "$veth2" up; }; then
    echo "netns_tp: cannot set up the namespaces"
    exit 1
fi

# The launch agent: `agent HOST COMMAND...`, as Open MPI calls ssh.
cat >"$work/agent.sh" <<EOF
#!/bin/sh
host=\$1
shift
case \$host in
$ip1) exec ip netns exec $ns1 sh -c "\$*" ;;
$ip2) exec ip netns exec $ns2 sh -c "\$*" ;;
esac
echo "agent: unknown host \$host" >&2
exit 1
EOF
# Each rank reports its network namespace, then becomes lockstep.
cat >"$work/rank.sh" <<EOF
#!/bin/sh
echo "rank \$OMPI_COMM_WORLD_RANK: \$(readlink /proc/self/ns/net)" >&2
exec "$lockstep" "\$@"
EOF
chmod +x "$work/agent.sh" "$work/rank.sh"
printf '%s slots=1\n%s slots=1\n' "$ip1" "$ip2" >"$work/hosts"

model=$work/random.gguf
"$lockstep" convert --random --dim 256 --hidden 512 --layers 2 --heads 8 --kv-heads 4 \
    --vocab 300 --type f32 -o "$model" >/dev/null || { echo "netns_tp: convert failed"; exit 1; }

root=
[ "$(id -u)" -eq 0 ] && root=--allow-run-as-root
mpirun_extra=()
# Runs generate on the two hosts (extra generate options in "$@"); stdout
# and stderr go to $work/mpi.out and $work/mpi.err.
run_two_hosts() {
    timeout -s KILL "$JOB_SECONDS" ip netns exec "$ns1" "$mpirun" $root --hostfile "$work/hosts" -np 2 \
        --bind-to none --mca plm_rsh_agent "$work/agent.sh" \
        --mca btl self,tcp --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" \
        "${mpirun_extra[@]}" \
        "$work/rank.sh" generate --comm mpi -m "$model" -n 32 --temp 0 --print-ids "$@" \
        >"$work/mpi.out" 2>"$work/mpi.err"
}

if [ "$fail_mode" -eq 1 ]; then
    # Rank 1 stops in step 3 while rank 0 waits (deadline 100 s): give up on
    # mpirun after 3 s, leaving rank 0, the remote daemon and the stopped
    # rank 1 for the trap to remove.
    echo "work: $work"
    JOB_SECONDS=3
    mpirun_extra=(-x LOCKSTEP_FAULT)
    LOCKSTEP_FAULT=stop:1:3 run_two_hosts -p "In the beginning" --comm-deadline 100
    echo "mpirun exited with $? (forced failure); left: $(ip netns pids "$ns1") $(ip netns pids "$ns2")"
    exit 1
fi

failures=0
check() { # check CONDITION-STATUS MESSAGE
    if [ "$1" -ne 0 ]; then
        echo "netns_tp: FAILED: $2"
        failures=$((failures + 1))
    fi
}
bytes() { ip netns exec "$ns1" cat "/sys/class/net/$veth1/statistics/$1"; }

net_of() { ip netns exec "$1" readlink /proc/self/ns/net; }

tp_bytes=0
for prompt in "In the beginning God created" "And the LORD said unto"; do
    want=$("$lockstep" generate -m "$model" -p "$prompt" -n 32 --temp 0 --print-ids 2>/dev/null |
        tail -n 1)
    tx=$(bytes tx_bytes) rx=$(bytes rx_bytes)
    start=${EPOCHREALTIME/./}
    run_two_hosts -p "$prompt"
    status=$?
    ms=$(((${EPOCHREALTIME/./} - start) / 1000))
    sent=$(($(bytes tx_bytes) - tx)) received=$(($(bytes rx_bytes) - rx))
    got=$(tail -n 1 "$work/mpi.out")
    echo "two hosts, '$prompt': exit $status after $ms ms; veth: $sent bytes out, $received in"
    check "$status" "mpirun exited with $status: $(cat "$work/mpi.err")"
    [ -n "$want" ] && [ "$got" = "$want" ]
    check $? "ids differ: two hosts '$got', local '$want'"
    net0=$(sed -n 's/^rank 0: //p' "$work/mpi.err") net1=$(sed -n 's/^rank 1: //p' "$work/mpi.err")
    [ "$net0" = "$(net_of "$ns1")" ] && [ "$net1" = "$(net_of "$ns2")" ] && [ "$net0" != "$net1" ]
    check $? "ranks not in the two namespaces: rank 0 '$net0', rank 1 '$net1'"
    # 32 steps x 2 layers x 2 all-gathers of >= 256 floats: >= 128 KiB each way
    [ "$sent" -ge 131072 ] && [ "$received" -ge 131072 ]
    check $? "the collectives did not cross the veth ($sent bytes out, $received in)"
    tp_bytes=$((sent + received))
done

# Two pipeline stages, one a host: rank 0 runs layer 0 and hands each
# step's activations on; rank 1 runs layer 1 and returns the logits.
prompt="And the LORD said unto"
want=$("$lockstep" generate -m "$model" -p "$prompt" -n 32 --temp 0 --print-ids 2>/dev/null |
    tail -n 1)
tx=$(bytes tx_bytes) rx=$(bytes rx_bytes)
run_two_hosts -p "$prompt" --pp 2
status=$?
sent=$(($(bytes tx_bytes) - tx)) received=$(($(bytes rx_bytes) - rx))
got=$(tail -n 1 "$work/mpi.out")
echo "two stages, '$prompt': exit $status; veth: $sent bytes out, $received in (tp 2: $tp_bytes)"
check "$status" "pp 2: mpirun exited with $status: $(cat "$work/mpi.err")"
[ -n "$want" ] && [ "$got" = "$want" ]
check $? "pp 2: ids differ: two stages '$got', local '$want'"
# 32 steps, each >= 256 floats of activations out and 300 floats of logits back
[ "$sent" -ge 32768 ] && [ "$received" -ge 38400 ] && [ $((sent + received)) -lt "$tp_bytes" ]
check $? "pp 2: the handoffs did not cross the veth, or took more than tp 2's $tp_bytes bytes"

# A stage killed or stopped mid-generation: the job ends soon after the 2 s
# deadline (within 30 s; a hang would last until the job's kill at
# JOB_SECONDS).
mpirun_extra=(-x LOCKSTEP_FAULT)
for fault in kill:1:3 stop:1:3; do
    start=${EPOCHREALTIME/./}
    LOCKSTEP_FAULT=$fault run_two_hosts -p "$prompt" --pp 2 --comm-deadline 2
    status=$?
    ms=$(((${EPOCHREALTIME/./} - start) / 1000))
    echo "two stages, stage 1 $fault: exit $status after $ms ms"
    [ "$status" -ne 0 ] && [ "$ms" -lt 30000 ]
    check $? "pp 2, $fault: exit $status after $ms ms (a hang ends at the job's $JOB_SECONDS s kill)"
    for pid in $(ip netns pids "$ns1") $(ip netns pids "$ns2"); do
        kill -KILL "$pid" 2>/dev/null # a stopped rank mpirun left behind
    done
done
mpirun_extra=()

# A forced failure must leave nothing behind either: no namespace, veth,
# process or file of that run.
bash "$0" --fail "$lockstep" >"$work/fail.log" 2>&1 &
child=$!
wait "$child"
status=$?
child_pid=$child child=
sed 's/^/  --fail: /' "$work/fail.log"
[ "$status" -ne 0 ] && [ "$status" -ne 77 ]
check $? "the forced failure exited with $status"
child_work=$(sed -n 's/^work: //p' "$work/fail.log")
left_ns=$(ip netns list | grep -E "^${prefix}[12]-$child_pid( |$)")
left_veth=$(ip -o link show | grep -E "${prefix}[ab]-${child_pid}[@:]")
left_procs=
if [ -n "$child_work" ]; then
    for cmdline in /proc/[0-9]*/cmdline; do
        words=$(tr '\0' ' ' <"$cmdline" 2>/dev/null)
        [[ $words == *"$child_work"* ]] && left_procs+=" ${cmdline%/cmdline}: $words;"
    done
fi
[ -n "$child_work" ] && [ -z "$left_ns$left_veth" ]
check $? "the forced failure left namespaces or veths: $left_ns $left_veth"
[ -z "$left_procs" ]
check $? "processes left: $left_procs"
[ -n "$child_work" ] && [ ! -e "$child_work" ]
check $? "files left: $child_work"

[ "$failures" -eq 0 ] && echo "netns_tp: ok" || echo "netns_tp: $failures check(s) failed"
[ "$failures" -eq 0 ]
