#!/usr/bin/env bash
# generate.sh -- the quick start: installs what is missing, builds lockstep,
# and generates text. With ../shared beside the repository it uses the small
# real model there; without it, a seeded random model that
# `lockstep convert --random` writes (its text is gibberish, its speed real).
# Extra arguments go to `lockstep generate` (for example -p "And God said").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$(nproc)" --target lockstep >/dev/null
bin=build/release/lockstep
model=../shared/models/kjv2m-q8_0.gguf
if [ ! -f "$model" ]; then
    model=build/random-q8_0.gguf
    [ -f "$model" ] || "$bin" convert --random --dim 256 --hidden 768 --layers 4 --heads 4 \
        --vocab 512 --ctx 512 --type q8_0 --seed 1 -o "$model"
fi
if [ $# -eq 0 ]; then set -- -p "In the beginning" -n 64 --temp 0; fi
exec "$bin" generate -m "$model" "$@"
