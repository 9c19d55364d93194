#!/usr/bin/env bash
# run.sh -- the CTest test dashboard (tests/extra_dashboard.cmake): the
# cluster dashboard of `lockstep serve` in Debian's headless chromium,
# driven by puppeteer-core (dashboard.test.mjs).
#
# usage: run.sh LOCKSTEP DIR      (or LOCKSTEP_BIN=... run.sh "" DIR)
# Writes a small seeded random model and a hostfile of two hosts that are
# both this machine (localhost and 127.0.0.2, 2 slots each, so both use the
# local launcher) into DIR, starts `lockstep serve --cluster` with an admin
# key, an API key and the model's instance placed at tp 2 on localhost,
# waits for its
# /health to answer 200, runs `node --test` and always stops the gateway it
# started, by pid and with a deadline, also when the test fails.
# Exits 77 (skipped) when node, chromium or puppeteer-core is missing:
# scripts/setup.sh installs them, and skips puppeteer-core when npm cannot
# reach its registry. LOCKSTEP_DASH_CHROMIUM names another browser binary.
set -euo pipefail
lockstep=${1:-${LOCKSTEP_BIN:-}}
dir=${2:-${TMPDIR:-/tmp}/lockstep-dashboard}
here=$(cd "$(dirname "$0")" && pwd)
chromium=${LOCKSTEP_DASH_CHROMIUM:-$(command -v chromium || true)}

skip() { echo "dashboard: skipped: $*"; exit 77; }
fail() { echo "dashboard: FAIL: $*" >&2; exit 1; }

[ -n "$lockstep" ] && [ -x "$lockstep" ] || fail "no lockstep binary (argument 1 or LOCKSTEP_BIN)"
command -v node >/dev/null || skip "node not found (scripts/setup.sh installs Debian's nodejs)"
command -v curl >/dev/null || skip "curl not found (scripts/setup.sh installs it)"
[ -n "$chromium" ] && [ -x "$chromium" ] ||
    skip "chromium not found (scripts/setup.sh installs Debian's chromium; LOCKSTEP_DASH_CHROMIUM names another)"
installed=0
why=$(node "$here/../sdk/installed.cjs" "$here") || installed=$?
[ "$installed" != 3 ] ||
    skip "puppeteer-core is not installed ($why): scripts/setup.sh installs it with npm ci, and could not when npm could not reach its registry"
[ "$installed" = 0 ] || fail "tests/sdk/installed.cjs failed (exit status $installed)"
echo "dashboard: node $(node --version), $("$chromium" --version 2>/dev/null | head -n 1)," \
     "puppeteer-core $(node -p 'require(process.argv[1]).version' "$here/node_modules/puppeteer-core/package.json")"

rm -rf "$dir"
mkdir -p "$dir"
model=$dir/dash-random.gguf
# big enough that its tokens come a few ms apart, so the chat box sees the
# stream grow over several reads
"$lockstep" convert --random --dim 256 --hidden 768 --layers 6 --heads 8 --kv-heads 4 \
    --vocab 512 --ctx 512 --type q8_0 --seed 1 -o "$model" >/dev/null
model_name=dash-random # the gateway names a model after its file
hostfile=$dir/hosts
printf 'localhost slots=2\n127.0.0.2 slots=2\n' >"$hostfile"
key="dash-admin-key-$$"
api_key="dash-api-key-$$"
log=$dir/gateway.log

gateway_pid=
node_pid=
# Stops the gateway: SIGTERM, up to 10 s for it to exit (it stops its
# runners first), then SIGKILL; then checks that no runner of this test's
# model is left (any left are killed by pid).
stop_gateway() {
    local deadline left
    if [ -n "$gateway_pid" ] && kill -0 "$gateway_pid" 2>/dev/null; then
        kill -TERM "$gateway_pid" 2>/dev/null || true
        deadline=$((SECONDS + 10))
        while kill -0 "$gateway_pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.05; done
        if kill -0 "$gateway_pid" 2>/dev/null; then
            echo "dashboard: gateway (pid $gateway_pid) ignored SIGTERM for 10 s; killing it" >&2
            kill -KILL "$gateway_pid" 2>/dev/null || true
        fi
        wait "$gateway_pid" 2>/dev/null || true
    fi
    deadline=$((SECONDS + 10))
    while left=$(pgrep -f -- "$model" | paste -sd, -) && [ -n "$left" ]; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "dashboard: FAIL: processes left behind by the gateway: $left" >&2
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
    stop_gateway || { [ "$status" != 0 ] || status=1; }
    exit "$status"
}
trap 'finish $?' EXIT
trap 'exit 143' TERM INT

# The gateway, and its port once it listens; then /health 200 (deadline
# 60 s: the runner loads the model first).
: >"$log"
"$lockstep" serve -m "$model" --host 127.0.0.1 --port 0 --cluster "$hostfile" --admin-key "$key" \
    --api-key "$api_key" \
    --place "$model_name=tp:2,hosts:localhost" >"$log" 2>&1 &
gateway_pid=$!
deadline=$((SECONDS + 60))
port=
while [ -z "$port" ]; do
    kill -0 "$gateway_pid" 2>/dev/null || { cat "$log" >&2; fail "the gateway exited before it listened"; }
    [ "$SECONDS" -lt "$deadline" ] || { cat "$log" >&2; fail "the gateway did not listen within 60 s"; }
    port=$(sed -n 's/.*listening on \(http:\/\/\)\{0,1\}127\.0\.0\.1:\([0-9][0-9]*\).*/\2/p' "$log" | head -n 1)
    [ -n "$port" ] || sleep 0.05
done
while :; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/health" || true)
    [ "$code" = 200 ] && break
    kill -0 "$gateway_pid" 2>/dev/null || { cat "$log" >&2; fail "the gateway exited before /health answered 200"; }
    [ "$SECONDS" -lt "$deadline" ] || { cat "$log" >&2; fail "/health not 200 within 60 s (last: $code)"; }
    sleep 0.05
done
url=http://127.0.0.1:$port
echo "dashboard: gateway (pid $gateway_pid) ready at $url"

# node runs in the background and this shell waits for it, so that a SIGTERM
# (ctest's timeout, ^C) ends it and reaches the trap at once.
status=0
(
    cd "$here"
    LOCKSTEP_DASH_URL=$url LOCKSTEP_DASH_KEY=$key LOCKSTEP_DASH_API_KEY=$api_key \
        LOCKSTEP_DASH_MOVE_HOST=127.0.0.2 \
        LOCKSTEP_DASH_CHROMIUM=$chromium LOCKSTEP_DASH_SCREENSHOT=$dir/dashboard.png \
        exec timeout 240 node --test dashboard.test.mjs
) &
node_pid=$!
wait "$node_pid" || status=$?
node_pid=
if [ "$status" != 0 ]; then
    echo "--- gateway log (last 40 lines):" >&2
    tail -n 40 "$log" >&2
    fail "node --test exited with status $status"
fi
echo "dashboard: PASS (screenshot: $dir/dashboard.png)"
