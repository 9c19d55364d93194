#!/usr/bin/env bash
# serve_check.sh -- `lockstep serve` answers a request: starts COMMAND serve
# on ../shared/models/kjv2m-q8_0.gguf (port 0, with ARGS), waits for
# /health (120 s at most), asks for a greedy chat completion and checks the
# status (200), the finish reason and that the text is not empty, then
# stops the server by pid (SIGTERM, then SIGKILL after 10 s). Exits 77
# without the model. scripts/arm64.sh runs it with the arm64 binary under
# qemu-aarch64.
#
# usage: scripts/serve_check.sh "COMMAND" [ARGS...]
#   e.g. scripts/serve_check.sh "qemu-aarch64 build/arm64/lockstep" --runner-wrapper qemu-aarch64
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a command <<<"$1"
shift
model=../shared/models/kjv2m-q8_0.gguf
[ -f "$model" ] || { echo "serve_check: no $model: skipped"; exit 77; }
log=$(mktemp)
"${command[@]}" serve -m "$model" --port 0 "$@" >"$log" 2>&1 &
server=$!
stop() {
    kill "$server" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    rm -f "$log"
}
trap stop EXIT
port=
deadline=$((SECONDS + 120))
while [ $SECONDS -lt $deadline ]; do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log")
    if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; then break; fi
    kill -0 "$server" 2>/dev/null || { cat "$log"; echo "serve_check: the server exited"; exit 1; }
    sleep 0.2
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null ||
    { cat "$log"; echo "serve_check: not healthy within 120 s"; exit 1; }
request='{"model": "kjv2m-q8_0", "max_tokens": 16, "temperature": 0,
  "messages": [{"role": "user", "content": "In the beginning"}]}'
body=$(mktemp)
status=$(curl -s -o "$body" -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" \
    -H 'content-type: application/json' -d "$request")
answer=$(cat "$body")
rm -f "$body"
[ "$status" = 200 ] || { echo "serve_check: HTTP $status: $answer"; exit 1; }
grep -q '"finish_reason":"length"' <<<"$answer" || { echo "serve_check: $answer"; exit 1; }
grep -q '"content":"[^"]' <<<"$answer" || { echo "serve_check: no text: $answer"; exit 1; }
echo "serve_check: $answer"
