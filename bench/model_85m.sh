# shellcheck shell=bash
# model_85m.sh -- the random 85M-parameter model the benchmark targets are
# stated for (dim 768, hidden 2048, 12 layers, 12 heads, vocab 512, seed 1),
# shared by the scripts in bench/ (sourced, not run). Run from the
# repository's top directory.

# model_85m LOCKSTEP TYPE: prints the model's path, writing it with
# `LOCKSTEP convert --random` first if it is missing; returns 1 when that
# fails (a command substitution does not inherit set -e).
model_85m() {
    local lockstep=$1 type=$2
    local model=build/models/random-85m-$type.gguf
    mkdir -p build/models
    [ -f "$model" ] || "$lockstep" convert --random --dim 768 --hidden 2048 --layers 12 \
        --heads 12 --kv-heads 12 --vocab 512 --ctx 1024 --type "$type" --seed 1 \
        -o "$model" >/dev/null || return 1
    echo "$model"
}
