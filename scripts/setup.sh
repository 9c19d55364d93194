#!/usr/bin/env bash
# setup.sh -- installs the Debian packages lockstep builds and tests with, the
# openai, Anthropic and Vercel AI npm SDKs that tests/sdk drives `lockstep serve` with, and
# puppeteer-core, with which tests/dashboard drives chromium on the dashboard.
# dpkg-dev and file are CPack's (the .deb's dependencies,
# scripts/package_check.sh), groff-base the man page test's.
# Idempotent: does nothing when everything is already installed.
set -euo pipefail

packages=(cmake gcc clang clang-format clang-tidy cppcheck libclang-rt-14-dev
          libpcre2-dev libcjson-dev libmicrohttpd-dev libssl-dev spin openmpi-bin libopenmpi-dev iproute2 curl
          dpkg-dev file groff-base chromium)
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

# An npm package set into tests/DIR/node_modules, exactly as its
# package-lock.json pins it, unless it is there already. Where npm cannot
# reach its registry this is not an error: the test then reports "skipped"
# and why.
npm_install() {
    local dir what=$2 test=$3 npm_log
    dir=$(cd "$(dirname "$0")/../tests/$1" && pwd)
    node "$dir/../sdk/installed.cjs" "$dir" >/dev/null && return 0
    echo "setup: installing $what into tests/$1 (npm ci)"
    npm_log=$(mktemp)
    # one retry, not npm's default two with up to a minute's wait: an
    # unreachable registry should cost seconds
    if ! (cd "$dir" && timeout 600 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
              --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000) >"$npm_log" 2>&1 ||
        ! node "$dir/../sdk/installed.cjs" "$dir" >/dev/null; then
        echo "setup: npm could not install $what (is its registry reachable?);" \
             "the $test test will be skipped. npm said:"
        head -n 4 "$npm_log"
    fi
    rm -f "$npm_log"
}
npm_install sdk "the openai, Anthropic and AI SDKs" openai_sdk
# --ignore-scripts: puppeteer-core downloads no browser; the test uses Debian's chromium
npm_install dashboard puppeteer-core dashboard
