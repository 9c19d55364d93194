#!/usr/bin/env bash
# arm64.sh -- lockstep for arm64, checked from an x86-64 Debian machine:
# installs the cross compiler, qemu-user and Debian's multiarch arm64
# libraries; cross-builds (cmake/aarch64-linux-gnu.cmake, without MPI);
# runs under qemu-aarch64 the tests that matter for another architecture
# (every kernel against the scalar reference at each arm64 level, the
# fixtures' continuations against llama.cpp's, the forward pass, the
# command line); compares the logits of every model in ../shared with the
# x86 build's, byte for byte, at every level of both (scripts/arch_bits.sh);
# serves a request from the arm64 binary (its runners under qemu too,
# --runner-wrapper); builds the arm64 .deb and checks it; and moves a
# running instance live between an x86 runner and an arm64 one under the
# x86 build's gateway (tests/test_gateway_arch_move.c, from the tests
# directory next to X86_LOCKSTEP: a cluster file's host running the arm64
# binary with lockstep= and wrapper=qemu-aarch64), every token and logprob
# unchanged. Called by .ci/run; about six minutes on 2 cores.
#
# usage: scripts/arm64.sh X86_LOCKSTEP [BUILD_DIR]   (default build/arm64)
set -euo pipefail
cd "$(dirname "$0")/.."
x86=$1
build=${2:-build/arm64}
fail() { echo "arm64: $*" >&2; exit 1; }

run_as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
host_packages=(gcc-aarch64-linux-gnu qemu-user)
arm_packages=(libc6:arm64 libpcre2-dev:arm64 libcjson-dev:arm64 libmicrohttpd-dev:arm64 libssl-dev:arm64)
missing=()
for p in "${host_packages[@]}" "${arm_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "== arm64: installing ${missing[*]}"
    dpkg --print-foreign-architectures | grep -qx arm64 || run_as_root dpkg --add-architecture arm64
    run_as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive run_as_root apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
fi

echo "== arm64: cross build ($build)"
tests=(test_tensor_ahead test_tensor_canonical test_tensor_many test_tensor_matmul test_tensor_ops
       test_tensor_panels test_tensor_parts test_tensor_pool test_tensor_quants_bf16
       test_tensor_quants_k test_tensor_quants_k_low test_tensor_quants_legacy test_tensor_rows
       test_tensor_types test_quant_fixtures test_forward test_cli)
cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DLOCKSTEP_MPI=OFF \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target lockstep "${tests[@]}" >/dev/null
file -b "$build/lockstep" | grep -q "ARM aarch64" || fail "$build/lockstep is not an arm64 binary"
qemu-aarch64 "$build/lockstep" --version

echo "== arm64: clang-tidy on the arm64 kernels (with the cross build's flags)"
git ls-files -z 'src/tensor/arm/*.c' | xargs -0 clang-tidy -p "$build" --quiet 2>/dev/null

echo "== arm64: tests under qemu-aarch64"
regex="^($(IFS='|'; echo "${tests[*]}"))\$"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -R "$regex"

echo "== arm64: logits against the x86 build's, every model, every level"
status=0
scripts/arch_bits.sh "$x86" "$build/lockstep" || status=$?
[ $status -eq 0 ] || [ $status -eq 77 ] || fail "the arm64 logits differ from the x86 ones"

echo "== arm64: serve, with its runners under qemu"
scripts/serve_check.sh "qemu-aarch64 $build/lockstep" --runner-wrapper qemu-aarch64

echo "== arm64: the Debian package"
version=$(sed -n 's/^project(lockstep VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
deb=$build/lockstep_${version}_arm64.deb
cmake --build "$build" -j"$(nproc)" --target lockstep_man >/dev/null
(cd "$build" && cpack -G DEB >/dev/null)
[ -f "$deb" ] || fail "cpack wrote no $deb"
[ "$(dpkg-deb -f "$deb" Architecture)" = arm64 ] || fail "$deb's Architecture is not arm64"
depends=$(dpkg-deb -f "$deb" Depends)
for dependency in libmicrohttpd libcjson libpcre2-8 libssl3 libc6; do
    grep -q "$dependency" <<<"$depends" || fail "Depends lacks $dependency: $depends"
done
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg-deb -x "$deb" "$root"
file -b "$root/usr/bin/lockstep" | grep -q "ARM aarch64" || fail "the packaged binary is not arm64"
qemu-aarch64 "$root/usr/bin/lockstep" --version | grep -q "instruction sets (aarch64)" ||
    fail "the packaged binary does not run"
echo "arm64: $deb ($(stat -c %s "$deb") bytes): Architecture arm64, Depends $depends"

echo "== arm64: a live move between an x86 runner and an arm64 one"
arch_move=$(dirname "$x86")/tests/test_gateway_arch_move
[ -x "$arch_move" ] || fail "no $arch_move: build the x86 tree's tests too"
status=0
LOCKSTEP_ARM64_BIN=$(realpath "$build/lockstep") "$arch_move" || status=$?
[ $status -eq 0 ] || [ $status -eq 77 ] || fail "test_gateway_arch_move failed ($status)"
