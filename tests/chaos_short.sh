#!/usr/bin/env bash
# chaos_short.sh -- the CTest test chaos_short (tests/extra_chaos.cmake):
# bench/chaos for about two minutes on a small random model, written here
# into the build tree: 50 s of baseline, then 50 s with a fault every 3.5 s
# (13 faults, so the injector's shuffled bag of 11 meets every kind). The
# big instance runs in two pipeline stages (--pipeline), so the faults on
# its ranks kill, stop and stall single stages.
#
# usage: chaos_short.sh LOCKSTEP CHAOS_TOOL DIR
# Passes when bench/chaos exits 0 (no failed, wrong, late or unverifiable
# request, every fault recovered, no runner left behind: bench/chaos checks
# all of it) and, checked again here from its output and files: the verdict
# line says PASS, every kind of fault was injected at least once and none
# is unrecovered, and neither the gateway nor any process it started lives
# (they carry bench/serve_control.sh's LOCKSTEP_BENCH_TAG).
set -euo pipefail
lockstep=$1 tool=$2 dir=$3
source_dir=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dir"
mkdir -p "$dir"
model=$dir/random-chaos-q8_0.gguf
"$lockstep" convert --random --dim 128 --hidden 256 --layers 4 --heads 4 --kv-heads 2 \
    --vocab 512 --ctx 512 --type q8_0 --seed 1 -o "$model" >/dev/null

status=0
"$source_dir/bench/chaos" --lockstep "$lockstep" --tool "$tool" --model "$model" \
    --workdir "$dir/work" --duration 50 --fault-every 3.5 --deadline 90 --pipeline \
    >"$dir/chaos.out" 2>"$dir/chaos.err" || status=$?
cat "$dir/chaos.out"
fail() {
    echo "chaos_short: FAIL: $*" >&2
    echo "--- bench/chaos stderr (last 60 lines):" >&2
    tail -n 60 "$dir/chaos.err" >&2
    exit 1
}
[ "$status" = 0 ] || fail "bench/chaos exited with status $status"
grep -q '^chaos: PASS: ' "$dir/chaos.out" || fail "no PASS verdict line"
for kind in kill stop stall delay close refuse+kill; do
    row=$(grep -F "| $kind |" "$dir/chaos.out" | head -n 1)
    injected=$(awk -F'|' '{ gsub(/ /, "", $3); print $3 }' <<<"$row")
    [ "${injected:-0}" -ge 1 ] || fail "no $kind fault was injected"
    if [ "$kind" != delay ]; then
        missing=$(awk -F'|' '{ gsub(/ /, "", $6); print $6 }' <<<"$row")
        [ "$missing" = 0 ] || fail "$missing $kind fault(s) did not recover"
    fi
done
gateway=$(sed -n 's/.*gateway pid \([0-9]*\),.*/\1/p' "$dir/chaos.out")
tag=$(sed -n 's/.*process tag \([^;]*\);.*/\1/p' "$dir/chaos.out")
if [ -z "$gateway" ] || [ -z "$tag" ]; then
    fail "bench/chaos did not say the gateway's pid and process tag"
fi
! kill -0 "$gateway" 2>/dev/null || fail "the gateway (pid $gateway) still runs"
# every process the gateway started inherited LOCKSTEP_BENCH_TAG=$tag
for environ in /proc/[0-9]*/environ; do
    if tr '\0' '\n' 2>/dev/null <"$environ" | grep -qxF "LOCKSTEP_BENCH_TAG=$tag"; then
        fail "${environ%/environ} (started by the gateway) outlived it"
    fi
done
echo "chaos_short: PASS"
