#!/usr/bin/env bash
# test.sh -- the test command: installs what is missing, builds lockstep with
# AddressSanitizer + UndefinedBehaviorSanitizer, and runs every CTest test.
# Tests that need ../shared (the real model and fixtures) skip without it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${BUILD_DIR:-build/asan}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_SANITIZE=ON >/dev/null
cmake --build "$build" -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"
