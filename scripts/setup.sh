#!/usr/bin/env bash
# setup.sh -- installs the Debian packages lockstep builds and tests with.
# Idempotent: does nothing when everything is already installed.
set -euo pipefail

packages=(cmake gcc clang clang-format clang-tidy cppcheck libclang-rt-14-dev
          libpcre2-dev libcjson-dev libmicrohttpd-dev spin openmpi-bin libopenmpi-dev iproute2 curl)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

run_as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
echo "setup: installing ${missing[*]}"
run_as_root apt-get update -qq
DEBIAN_FRONTEND=noninteractive run_as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
