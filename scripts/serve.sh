#!/usr/bin/env bash
# serve.sh -- the main job: installs what is missing, builds lockstep, starts
# `lockstep serve` on a model (the small real one in ../shared/models when it
# is beside the repository, else a seeded random model), sends one streaming
# chat request with curl and shows the answer, then keeps serving until
# Ctrl-C. --once stops after the request. Other arguments go to
# `lockstep serve` (for example --port 9000 --api-key KEY).
set -euo pipefail
cd "$(dirname "$0")/.."
once=0
if [ "${1:-}" = "--once" ]; then once=1; shift; fi
# shellcheck source=scripts/quickstart.sh
source scripts/quickstart.sh
name=$(basename "$model" .gguf)
log=$(mktemp)
"$bin" serve -m "$model" --port 0 "$@" >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -f "$log"' EXIT
port=
for _ in $(seq 1 600); do   # up to 60 s for the runner to load the model
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log")
    if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; then break; fi
    kill -0 "$server" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { cat "$log"; exit 1; }
echo "lockstep serve: http://127.0.0.1:$port (model \"$name\")"
key=()
if [ -n "${LOCKSTEP_API_KEY:-}" ]; then key=(-H "Authorization: Bearer $LOCKSTEP_API_KEY"); fi
request='{"model": "'"$name"'", "stream": true, "max_tokens": 32, "temperature": 0,
  "messages": [{"role": "user", "content": "In the beginning"}]}'
echo "\$ curl -N http://127.0.0.1:$port/v1/chat/completions -d '$request'"
curl -sN "${key[@]}" "http://127.0.0.1:$port/v1/chat/completions" -d "$request"
[ "$once" = 1 ] && exit 0
echo "serving on http://127.0.0.1:$port until Ctrl-C"
wait "$server"
