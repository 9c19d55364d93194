#!/usr/bin/env bash
# soak_netns_short.sh -- the CTest test soak_netns_short: bench/soak's part
# (n) for two minutes (a live move every 30 s, one host lost), the short
# version of the 30-minute soak. Passes when bench/soak exits 0 (no failed,
# stalled or wrong request, every move done or refused with a reason, the
# lost host's instance ready elsewhere, no process left) and its output
# shows every output checked and the loss recovered from.
# usage: soak_netns_short.sh LOCKSTEP SOAK_TOOL   (exit 0, 1, or 77 = skipped)
set -uo pipefail
lockstep=$1 tool=$2
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root (ip netns)"; exit 77; }
command -v ip >/dev/null || { echo "skip: ip is absent (Debian package iproute2)"; exit 77; }
command -v mpirun >/dev/null || { echo "skip: mpirun is absent (Debian package openmpi-bin)"; exit 77; }
command -v curl >/dev/null || { echo "skip: curl is absent"; exit 77; }
cd "$(dirname "$0")/.." || exit 1
out=$(bench/soak --parts n --minutes 2 --move-every 30 --lose-every 60 --lockstep "$lockstep" \
    --soak-tool "$tool" 2>&1)
status=$?
echo "$out"
fail() { echo "soak_netns_short: FAIL: $*"; exit 1; }
[ "$status" = 0 ] || fail "bench/soak exited with $status"
[ "$(grep -c 'outputs checked against their undisturbed run, 0 wrong' <<<"$out")" = 2 ] ||
    fail "not every output of both models was checked and equal"
grep -qE '^loss 1 .* main ready elsewhere after [0-9.]+ s$' <<<"$out" || fail "no loss recovered from"
echo "soak_netns_short: PASS"
