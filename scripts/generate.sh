#!/usr/bin/env bash
# generate.sh -- the quick start: installs what is missing, builds lockstep,
# and generates text on the model scripts/quickstart.sh picks.
# Extra arguments go to `lockstep generate` (for example -p "And God said").
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/quickstart.sh
source scripts/quickstart.sh
if [ $# -eq 0 ]; then set -- -p "In the beginning" -n 64 --temp 0; fi
exec "$bin" generate -m "$model" "$@"
