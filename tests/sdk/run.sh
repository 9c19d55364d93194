#!/usr/bin/env bash
# run.sh -- the CTest test openai_sdk (tests/extra_sdk.cmake): drives
# `lockstep serve` with the official openai npm SDK (openai_sdk.test.mjs) and
# Anthropic's (anthropic_sdk.test.mjs) and the Vercel AI SDK (ai_sdk.test.mjs).
#
# usage: run.sh LOCKSTEP DIR      (or LOCKSTEP_BIN=... run.sh "" DIR)
# Writes a small seeded random model into DIR, starts three gateways on
# 127.0.0.1 with ports the OS picks (the main one; one with --max-concurrent
# 1; one whose runner the test breaks on purpose), waits for each /health to
# answer 200, runs `node --test` and always stops every gateway it started,
# by pid and with a deadline, also when the test fails.
# Exits 77 (skipped) when node or the SDK is missing: scripts/setup.sh
# installs both, and skips the SDK when npm cannot reach its registry.
set -euo pipefail
lockstep=${1:-${LOCKSTEP_BIN:-}}
dir=${2:-${TMPDIR:-/tmp}/lockstep-openai-sdk}
here=$(cd "$(dirname "$0")" && pwd)

skip() { echo "openai_sdk: skipped: $*"; exit 77; }
fail() { echo "openai_sdk: FAIL: $*" >&2; exit 1; }

[ -n "$lockstep" ] && [ -x "$lockstep" ] || fail "no lockstep binary (argument 1 or LOCKSTEP_BIN)"
command -v node >/dev/null || skip "node not found (scripts/setup.sh installs Debian's nodejs)"
command -v curl >/dev/null || skip "curl not found (scripts/setup.sh installs it)"
installed=0
why=$(node "$here/installed.cjs") || installed=$?
[ "$installed" != 3 ] ||
    skip "the openai SDK is not installed ($why): scripts/setup.sh installs it with npm ci, and could not when npm could not reach its registry"
[ "$installed" = 0 ] || fail "tests/sdk/installed.cjs failed (exit status $installed)"
sdk_version=$(node -p 'require(process.argv[1]).version' "$here/node_modules/openai/package.json")
echo "openai_sdk: node $(node --version), openai SDK $sdk_version"

rm -rf "$dir"
mkdir -p "$dir"
model=$dir/sdk-random.gguf
"$lockstep" convert --random --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2 \
    --vocab 512 --ctx 2048 --type q8_0 --seed 1 -o "$model" >/dev/null # 2048: room for tools
model_name=sdk-random # the gateway names a model after its file
key="sdk-test-key-$$"
max_body=16384

pids=()
names=()
node_pid=
# Stops every gateway started so far: SIGTERM, then up to 10 s for it to exit
# (it stops its runners first), then SIGKILL.
stop_all() {
    local i pid deadline
    for i in "${!pids[@]}"; do
        pid=${pids[$i]}
        kill -0 "$pid" 2>/dev/null || continue
        kill -TERM "$pid" 2>/dev/null || true
        deadline=$((SECONDS + 10))
        while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.05; done
        if kill -0 "$pid" 2>/dev/null; then
            echo "openai_sdk: gateway ${names[$i]} (pid $pid) ignored SIGTERM for 10 s; killing it" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
}
# Then checks that no process of theirs is left: every runner has this test's
# own model path on its command line. Any left are killed by pid, so that a
# failing gateway does not leave runners behind for later tests.
check_none_left() {
    local left deadline=$((SECONDS + 10))
    while left=$(pgrep -f -- "$model" | paste -sd, -) && [ -n "$left" ]; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "openai_sdk: FAIL: processes left behind by the gateways: $left" >&2
            ps -o pid,ppid,args -p "$left" >&2 || true
            kill -KILL ${left//,/ } 2>/dev/null || true
            return 1
        fi
        sleep 0.05
    done
}
finish() {
    local status=$1
    trap - EXIT
    if [ -n "$node_pid" ]; then kill -TERM "$node_pid" 2>/dev/null || true; wait "$node_pid" 2>/dev/null || true; fi
    stop_all
    check_none_left || { [ "$status" != 0 ] || status=1; }
    exit "$status"
}
trap 'finish $?' EXIT
trap 'exit 143' TERM INT

# start NAME ARGS...: starts a gateway, sets $url to its base URL once its
# /health answers 200 (deadline 60 s: the runner loads the model first).
start() {
    local name=$1 log=$dir/$1.log port="" code deadline pid
    shift
    : >"$log" # before the gateway's shell opens it: the sed below reads it at once
    "$lockstep" serve -m "$model" --host 127.0.0.1 --port 0 --api-key "$key" "$@" \
        >"$log" 2>&1 &
    pid=$!
    pids+=("$pid")
    names+=("$name")
    deadline=$((SECONDS + 60))
    while [ -z "$port" ]; do
        kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; fail "gateway $name exited before it listened"; }
        [ "$SECONDS" -lt "$deadline" ] || { cat "$log" >&2; fail "gateway $name did not listen within 60 s"; }
        port=$(sed -n 's/.*listening on \(http:\/\/\)\{0,1\}127\.0\.0\.1:\([0-9][0-9]*\).*/\2/p' "$log" | head -n 1)
        [ -n "$port" ] || sleep 0.05
    done
    while :; do
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/health" || true)
        [ "$code" = 200 ] && break
        kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; fail "gateway $name exited before /health answered 200"; }
        [ "$SECONDS" -lt "$deadline" ] || { cat "$log" >&2; fail "gateway $name: /health not 200 within 60 s (last: $code)"; }
        sleep 0.05
    done
    url=http://127.0.0.1:$port/v1
    echo "openai_sdk: gateway $name (pid $pid) ready at $url"
}

start main --max-body "$max_body" --pooling last # last: as Qwen3-Embedding pools
main_url=$url
start limited --max-concurrent 1 --enable-faults
limited_url=$url
start faults --enable-faults
faults_url=$url

# node runs in the background and this shell waits for it, so that a SIGTERM
# (ctest's timeout, ^C) ends it and reaches the trap at once.
status=0
(
    cd "$here"
    LOCKSTEP_SDK_KEY=$key LOCKSTEP_SDK_MODEL=$model_name LOCKSTEP_SDK_MAX_BODY=$max_body \
        LOCKSTEP_SDK_MAIN=$main_url LOCKSTEP_SDK_LIMITED=$limited_url \
        LOCKSTEP_SDK_FAULTS=$faults_url \
        exec timeout 120 node --test openai_sdk.test.mjs anthropic_sdk.test.mjs ai_sdk.test.mjs
) &
node_pid=$!
wait "$node_pid" || status=$?
node_pid=
if [ "$status" != 0 ]; then
    for name in "${names[@]}"; do
        echo "--- gateway $name log (last 30 lines):" >&2
        tail -n 30 "$dir/$name.log" >&2
    done
    fail "node --test exited with status $status"
fi
echo "openai_sdk: PASS"
