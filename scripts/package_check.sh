#!/usr/bin/env bash
# package_check.sh -- builds the Debian package in a fresh build directory
# (Release, no sanitizers) and checks it the way a user meets it: its control
# data (dpkg-deb -I: name, version, architecture, the runtime libraries it
# depends on, the conffile), its file list (dpkg-deb -c: binary, man page,
# README, systemd unit, example configuration), and the unpacked binary
# (dpkg-deb -x into a temporary root): `lockstep --version`, then a
# one-request serve on a random model it writes. As root on Debian it also
# installs the package with apt-get, runs /usr/bin/lockstep --version and
# removes it again (then purges it: its configuration and /var/lib/lockstep). Called by .ci/run; about a minute on 2 cores.
#
# usage: scripts/package_check.sh [BUILD_DIR]   (default build/package)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/package}
version=$(sed -n 's/^project(lockstep VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
arch=$(dpkg --print-architecture)
deb=$build/lockstep_${version}_${arch}.deb
fail() { echo "package_check: $*" >&2; exit 1; }

echo "== package: build $deb"
rm -rf "$build"
# Only the binary and the man page: the package holds nothing else, and the
# tests' targets are left unbuilt (CMAKE_SKIP_INSTALL_ALL_DEPENDENCY).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target lockstep lockstep_man >/dev/null
(cd "$build" && cpack -G DEB >/dev/null)
[ -f "$deb" ] || fail "cpack wrote no $deb"

echo "== package: control data (dpkg-deb -I)"
info=$(dpkg-deb -I "$deb")
dpkg-deb -f "$deb"
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = lockstep ] || fail "Package is '$(field Package)', not lockstep"
[ "$(field Version)" = "$version" ] || fail "Version is '$(field Version)', not $version"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture is '$(field Architecture)', not $arch"
depends=$(field Depends)
for dependency in libmicrohttpd libcjson libpcre2-8 libssl3 libopenmpi openmpi-bin adduser libc6; do
    grep -q "$dependency" <<<"$depends" || fail "Depends lacks $dependency: $depends"
done
for script in postinst postrm conffiles; do
    grep -qE "^ +[0-9]+ bytes, +[0-9]+ lines +\*? +$script( |\$)" <<<"$info" ||
        fail "no $script in the control archive"
done

echo "== package: file list (dpkg-deb -c)"
listing=$(dpkg-deb -c "$deb")
files=$(awk '{print $NF}' <<<"$listing")
for path in ./usr/bin/lockstep ./usr/share/man/man1/lockstep.1.gz \
    ./usr/share/doc/lockstep/README.md ./lib/systemd/system/lockstep.service \
    ./etc/lockstep/lockstep.conf; do
    grep -qx -- "$path" <<<"$files" || fail "$path is not in the package"
    echo "  $path"
done
grep -q -- '^-rwxr-xr-x root/root .* ./usr/bin/lockstep$' <<<"$listing" ||
    fail "./usr/bin/lockstep is not an executable owned by root"

tmp=$(mktemp -d)
server=
cleanup() {
    if [ -n "$server" ]; then
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

echo "== package: the unpacked binary (dpkg-deb -x)"
dpkg-deb -x "$deb" "$tmp/root"
bin=$tmp/root/usr/bin/lockstep
"$bin" --version | tee "$tmp/version"
grep -q "^lockstep $version" "$tmp/version" || fail "--version does not say lockstep $version"
grep -q "^runner protocol [0-9]" "$tmp/version" || fail "--version does not name the protocol"
man_text=$(zcat "$tmp/root/usr/share/man/man1/lockstep.1.gz")
grep -q '^\.TH LOCKSTEP 1' <<<"$man_text" || fail "the man page has no .TH LOCKSTEP 1"

"$bin" convert --random --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2 --vocab 512 \
    --ctx 128 --type q8_0 --seed 1 -o "$tmp/model.gguf" >/dev/null
"$bin" serve -m "$tmp/model.gguf" --name tiny --port 0 >"$tmp/serve.log" 2>&1 &
server=$!
port=
deadline=$((SECONDS + 60))
while [ "$SECONDS" -lt "$deadline" ]; do
    kill -0 "$server" 2>/dev/null || { cat "$tmp/serve.log"; fail "serve exited"; }
    port=${port:-$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/serve.log")}
    if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; then break; fi
    sleep 0.2
done
[ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null ||
    { cat "$tmp/serve.log"; fail "no healthy serve within 60 s"; }
status=$(curl -s -o "$tmp/answer.json" -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" \
    -d '{"model": "tiny", "max_tokens": 8, "temperature": 0,
         "messages": [{"role": "user", "content": "hello"}]}')
[ "$status" = 200 ] || { cat "$tmp/answer.json"; fail "chat completion: status $status"; }
grep -q '"choices":\[{"index":0,"message":{"role":"assistant"' "$tmp/answer.json" ||
    { cat "$tmp/answer.json"; fail "chat completion: no choice"; }
models=$(curl -s "http://127.0.0.1:$port/v1/models")
grep -q "\"lockstep_version\":\"$version\"" <<<"$models" ||
    fail "/v1/models does not carry lockstep_version $version"
echo "serve from the unpacked binary: 200, $(wc -c <"$tmp/answer.json") bytes with a choice"
kill "$server"
wait "$server" 2>/dev/null || true
server=

echo "== package: apt-get install"
if [ "$(id -u)" -ne 0 ] || [ ! -f /etc/debian_version ]; then
    echo "package_check: skipped apt-get install (needs root on Debian)"
    exit 0
fi
apt=(apt-get -o DPkg::Lock::Timeout=120 -y -q)
DEBIAN_FRONTEND=noninteractive "${apt[@]}" install "$(realpath "$deb")" >"$tmp/apt.log" 2>&1 ||
    { cat "$tmp/apt.log"; fail "apt-get install failed"; }
installed=$(/usr/bin/lockstep --version)
grep -q "^lockstep $version" <<<"$installed" ||
    fail "/usr/bin/lockstep --version does not say lockstep $version: $installed"
getent passwd lockstep >/dev/null || fail "the postinst made no system user lockstep"
echo "installed: ${installed%%$'\n'*}; system user lockstep exists"
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify /lib/systemd/system/lockstep.service ||
        fail "systemd-analyze verify finds fault with lockstep.service"
    echo "systemd-analyze verify: lockstep.service is sound"
fi
DEBIAN_FRONTEND=noninteractive "${apt[@]}" remove lockstep >"$tmp/apt.log" 2>&1 ||
    { cat "$tmp/apt.log"; fail "apt-get remove failed"; }
[ ! -e /usr/bin/lockstep ] || fail "/usr/bin/lockstep is still there after apt-get remove"
[ -f /etc/lockstep/lockstep.conf ] || fail "apt-get remove took the conffile /etc/lockstep/lockstep.conf"
dpkg --purge lockstep >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; fail "dpkg --purge failed"; }
[ ! -e /var/lib/lockstep ] && [ ! -e /etc/lockstep/lockstep.conf ] ||
    fail "dpkg --purge left /var/lib/lockstep or /etc/lockstep/lockstep.conf"
echo "removed (the configuration kept), then purged"
