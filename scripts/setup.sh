#!/usr/bin/env bash
# setup.sh -- installs the Debian packages lockstep builds and tests with, and
# the openai npm SDK that tests/sdk drives `lockstep serve` with. dpkg-dev
# and file are CPack's (the .deb's dependencies, scripts/package_check.sh),
# groff-base the man page test's.
# Idempotent: does nothing when everything is already installed.
set -euo pipefail

packages=(cmake gcc clang clang-format clang-tidy cppcheck libclang-rt-14-dev
          libpcre2-dev libcjson-dev libmicrohttpd-dev spin openmpi-bin libopenmpi-dev iproute2 curl
          dpkg-dev file groff-base)
# Node.js and npm (tests/sdk): Debian's nodejs and npm, asked for by command
# rather than by package, since a machine may have a Node.js of another origin
# whose nodejs package conflicts with Debian's npm.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

run_as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    run_as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive run_as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The openai SDK into tests/sdk/node_modules, exactly as package-lock.json
# pins it, unless it is there already. Where npm cannot reach its registry
# this is not an error: the test openai_sdk then reports "skipped" and why.
sdk=$(cd "$(dirname "$0")/../tests/sdk" && pwd)
if ! node "$sdk/installed.cjs" >/dev/null; then
    echo "setup: installing the openai SDK into tests/sdk (npm ci)"
    npm_log=$(mktemp)
    # one retry, not npm's default two with up to a minute's wait: an
    # unreachable registry should cost seconds
    if ! (cd "$sdk" && timeout 600 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
              --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000) >"$npm_log" 2>&1 ||
        ! node "$sdk/installed.cjs" >/dev/null; then
        echo "setup: npm could not install the openai SDK (is its registry reachable?);" \
             "the openai_sdk test will be skipped. npm said:"
        head -n 4 "$npm_log"
    fi
    rm -f "$npm_log"
fi
