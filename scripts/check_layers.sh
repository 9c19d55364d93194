#!/usr/bin/env bash
# check_layers.sh -- the layer rule of docs/DESIGN.md, checked on the
# includes of the source tree: every folder of src/ is a module, and a
# module may include only the headers of modules below it in the layer
# order that docs/DESIGN.md lists (between its "layers:" markers), plus the
# exclusions it lists there ("gateway !engine" and the like). A subfolder
# (src/gateway/requests) is a module of its own: at its own place when the
# order names it ("gateway/requests"), else at its parent's; its parent's
# exclusions hold for it too. Two folders whose files include each other
# are refused whatever the order.
# Every refusal names the file and line of the include and both modules.
#
# usage: scripts/check_layers.sh [SRC_DIR [DESIGN_FILE]]   (exit 0, or 1)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
src=${1:-$here/src}
design=${2:-$here/docs/DESIGN.md}

[ -d "$src" ] || { echo "check_layers: $src is not a directory" >&2; exit 1; }
[ -f "$design" ] || { echo "check_layers: $design is missing" >&2; exit 1; }
# the layer order: the words of the line after "layers:" in DESIGN.md's
# block, bottom first; exclusions as "MODULE !OTHER" lines
block=$(sed -n '/<!-- layers: begin -->/,/<!-- layers: end -->/p' "$design" | grep -v '<!--\|```')
order=$(grep -m1 '^order:' <<<"$block" | sed 's/^order://') || true
[ -n "$order" ] || { echo "check_layers: no 'order:' line between the layers markers of $design" >&2; exit 1; }
declare -A rank
i=0
for m in $order; do rank[$m]=$i; i=$((i + 1)); done
declare -A excluded
while read -r m not; do
    [ -n "$m" ] && [ -n "${not:-}" ] && excluded["$m ${not#!}"]=1
done < <(grep '^[a-z_/]* ![a-z_/]*$' <<<"$block" || true)

# The place of a module: its own, else its top folder's (empty if none).
place() {
    if [ -n "${rank[$1]+x}" ]; then echo "${rank[$1]}"; elif [ -n "${rank[${1%%/*}]+x}" ]; then echo "${rank[${1%%/*}]}"; fi
}

failures=0
fail() { echo "check_layers: $*"; failures=$((failures + 1)); }
declare -A edges # "from to" -> first file:line

# Every module (folder holding C files) must have a place in the order.
while read -r dir; do
    m=${dir#"$src"/}
    [ -n "$(place "$m")" ] || fail "src/$m is in no layer: add it to the order in $design"
done < <(find "$src" -mindepth 1 -type d | while read -r d; do
    ls "$d"/*.[ch] >/dev/null 2>&1 && echo "$d"; done | sort)

while IFS=: read -r file line include; do
    from=$(dirname "${file#"$src"/}")
    to=$(sed 's/.*#include "\(.*\)\/[^/]*".*/\1/' <<<"$include")
    [ "$to" = "$from" ] && continue
    [ -d "$src/$to" ] || continue # a generated header or the like: not a module
    edges["$from $to"]=${edges["$from $to"]:-$file:$line}
    top_from=${from%%/*} top_to=${to%%/*}
    rank_from=$(place "$from") rank_to=$(place "$to")
    [ -n "$rank_from" ] && [ -n "$rank_to" ] || continue
    where="${file#"$here"/}:$line"
    if [ -n "${excluded["$top_from $top_to"]+x}" ]; then
        fail "$where: $from includes $to, which DESIGN.md excludes for it"
    elif [ "$rank_to" -gt "$rank_from" ]; then
        fail "$where: $from includes $to, which is above it in the layer order"
    fi
done < <(grep -rnE '^#include "[a-z_]+(/[a-z_]+)*/[a-z_]+\.h"' "$src" --include='*.c' --include='*.h' || true)

# Two folders that include each other, whatever their places.
for edge in "${!edges[@]}"; do
    read -r a b <<<"$edge"
    if [ -n "${edges["$b $a"]+x}" ] && [[ $a < $b ]]; then
        fail "$a and $b include each other (${edges["$a $b"]#"$here"/} and ${edges["$b $a"]#"$here"/})"
    fi
done

if [ "$failures" -gt 0 ]; then
    echo "check_layers: $failures include(s) against the layers of $design"
    exit 1
fi
echo "check_layers: $(wc -w <<<"$order") layers, ${#edges[@]} module dependencies, all downward"
