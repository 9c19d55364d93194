# shellcheck shell=bash
# model_85m.sh -- the random models the benchmark targets are stated for,
# shared by the scripts in bench/ (sourced, not run). Run from the
# repository's top directory.
#
#   85m: dim 768, hidden 2048, 12 layers, 12 heads, vocab 512 (85M parameters)
#   1b:  Llama 3.2 1B's shape: dim 2048, hidden 8192, 16 layers, 32 heads,
#        8 KV heads, vocab 128,256
#   8b:  Llama 3 8B's shape: dim 4096, hidden 14336, 32 layers, 32 heads,
#        8 KV heads, vocab 128,256

# model_shape LOCKSTEP SHAPE TYPE: prints the model's path, writing it with
# `LOCKSTEP convert --random` (seed 1) first if it is missing; returns 1 when
# that fails (a command substitution does not inherit set -e). TYPE is any
# --type of convert (q4_k_m included).
model_shape() {
    local lockstep=$1 shape=$2 type=$3 options
    case $shape in
        85m) options="--dim 768 --hidden 2048 --layers 12 --heads 12 --kv-heads 12 --vocab 512 --ctx 1024" ;;
        1b) options="--dim 2048 --hidden 8192 --layers 16 --heads 32 --kv-heads 8 --vocab 128256 --ctx 4096" ;;
        8b) options="--dim 4096 --hidden 14336 --layers 32 --heads 32 --kv-heads 8 --vocab 128256 --ctx 4096" ;;
        *) echo "model_shape: unknown shape '$shape' (85m, 1b or 8b)" >&2; return 1 ;;
    esac
    local model=build/models/random-$shape-$type.gguf
    mkdir -p build/models
    # shellcheck disable=SC2086
    [ -f "$model" ] || "$lockstep" convert --random $options --type "$type" --seed 1 \
        -o "$model" >/dev/null || return 1
    echo "$model"
}

# model_85m LOCKSTEP TYPE: the 85m shape.
model_85m() {
    model_shape "$1" 85m "$2"
}
