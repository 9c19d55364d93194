#!/usr/bin/env bash
# arch_bits.sh -- an x86-64 build and an arm64 build compute the same bits:
# for every model in ../shared (models/ and fixtures/quant/), the logits of
# a greedy continuation (`lockstep generate --logits`) are byte for byte the
# same from the x86 binary (its best instruction set, then capped at scalar
# and at avx2) and from
# the arm64 binary under qemu-aarch64 at every arm64 level (LOCKSTEP_ISA
# scalar, neon, dotprod, i8mm). Prints a line per model and comparison;
# exits 1 if any differ, 77 if ../shared has no model.
#
# usage: scripts/arch_bits.sh X86_LOCKSTEP ARM64_LOCKSTEP
set -uo pipefail
x86=$1 arm=$2
cd "$(dirname "$0")/.."
shared=../shared
models=$(ls "$shared"/models/*.gguf "$shared"/fixtures/quant/*.gguf 2>/dev/null)
[ -n "$models" ] || { echo "arch_bits: no models in $shared: skipped"; exit 77; }
best=$("$x86" --version | sed -n 's/.*this machine: \([a-z0-9]*\).*/\1/p')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
# logits ISA OUT MODEL COMMAND...: MODEL's logits by COMMAND capped at ISA, into OUT.
logits() {
    local isa=$1 out=$2 model=$3
    shift 3
    LOCKSTEP_ISA=$isa timeout 300 "$@" generate -m "$model" -p "In the beginning" -n 6 \
        --temp 0 -t 2 --logits "$out" >/dev/null 2>"$out.log"
}
for model in $models; do
    name=$(basename "$model" .gguf)
    if ! logits "$best" "$tmp/x86" "$model" "$x86"; then
        echo "arch_bits: $name: x86 run failed: $(tail -1 "$tmp/x86.log")"
        failed=1
        continue
    fi
    for run in "x86 scalar:scalar:$x86" "x86 avx2:avx2:$x86" "arm64 scalar:scalar:qemu-aarch64 $arm" \
        "arm64 neon:neon:qemu-aarch64 $arm" "arm64 dotprod:dotprod:qemu-aarch64 $arm" \
        "arm64 i8mm:i8mm:qemu-aarch64 $arm"; do
        label=${run%%:*} rest=${run#*:}
        isa=${rest%%:*} command=${rest#*:}
        # shellcheck disable=SC2086 # the command is a program and its wrapper
        logits "$isa" "$tmp/other" "$model" $command
        status=$?
        if [ $status -ne 0 ]; then
            echo "arch_bits: $name: $label run failed (exit $status): $(tail -1 "$tmp/other.log")"
            failed=1
        elif cmp -s "$tmp/x86" "$tmp/other"; then
            echo "arch_bits: $name: $label = x86 $best ($(stat -c %s "$tmp/x86") bytes)"
        else
            echo "arch_bits: $name: $label differs from x86 ($(cmp "$tmp/x86" "$tmp/other" | head -1))"
            failed=1
        fi
    done
done
exit $failed
