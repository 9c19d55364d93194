# shellcheck shell=bash
# quickstart.sh -- what scripts/generate.sh and scripts/serve.sh share
# (sourced, not run): installs what is missing, builds the lockstep binary
# and picks the model -- the small real one in ../shared/models when it is
# beside the repository, else a seeded random model that
# `lockstep convert --random` writes (its text is gibberish, its speed real).
# Sets bin and model.
scripts/setup.sh
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$(nproc)" --target lockstep >/dev/null
bin=build/release/lockstep
model=../shared/models/kjv2m-q8_0.gguf
if [ ! -f "$model" ]; then
    model=build/random-q8_0.gguf
    [ -f "$model" ] || "$bin" convert --random --dim 256 --hidden 768 --layers 4 --heads 4 \
        --vocab 512 --ctx 512 --type q8_0 --seed 1 -o "$model" >/dev/null
fi
