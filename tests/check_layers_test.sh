#!/usr/bin/env bash
# check_layers_test.sh -- the CTest test layers_refusals: scripts/check_layers.sh
# passes on a tree that keeps docs/DESIGN.md's layers and fails, naming the
# file, the line and both modules, on each way of breaking them: an include
# of a module above (a layer of src/gateway too), an excluded one, two folders that include each other,
# and a folder in no layer.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# A tree of files at src/PATH, each holding the given includes.
tree() {
    rm -rf "$work/src"
    while [ $# -gt 0 ]; do
        mkdir -p "$work/src/$(dirname "$1")"
        printf '#include "%s"\n' $2 >"$work/src/$1"
        shift 2
    done
}
expect() { # expect STATUS TEXT: check_layers on the tree exits STATUS saying TEXT
    local out status=0
    out=$(bash "$here/scripts/check_layers.sh" "$work/src" "$here/docs/DESIGN.md" 2>&1) || status=$?
    if [ "$status" != "$1" ] || ! grep -qF -- "$2" <<<"$out"; then
        echo "layers_refusals: FAIL: expected status $1 and '$2', got $status:"
        echo "$out"
        failures=$((failures + 1))
    fi
}

tree tensor/a.c "tensor/t.h" model/m.c "tensor/tensor.h" gateway/g.c "protocol/protocol.h" \
    runner/r.h "protocol/protocol.h" engine/e.h "comm/comm.h" comm/c.h "base/base.h"
expect 0 "all downward"
tree tensor/a.c "model/model.h" model/model.h "tensor/tensor.h"
expect 1 "src/tensor/a.c:1: tensor includes model, which is above it in the layer order"
tree gateway/g.c "engine/engine.h" engine/engine.h "tensor/tensor.h"
expect 1 "src/gateway/g.c:1: gateway includes engine, which DESIGN.md excludes for it"
tree gateway/g.c "runner/runner.h" runner/runner.h "protocol/protocol.h"
expect 1 "src/gateway/g.c:1: gateway includes runner, which DESIGN.md excludes for it"
tree gateway/http/x.c "gateway/requests/requests.h" gateway/requests/y.c "gateway/http/http.h"
expect 1 "gateway/http and gateway/requests include each other"
tree gateway/supervisor/s.c "gateway/requests/requests.h" gateway/requests/r.h "protocol/protocol.h"
expect 1 "src/gateway/supervisor/s.c:1: gateway/supervisor includes gateway/requests, which is above it in the layer order"
tree gateway/requests/r.c "gateway/gateway.h" gateway/gateway.h "protocol/protocol.h"
expect 1 "src/gateway/requests/r.c:1: gateway/requests includes gateway, which is above it in the layer order"
tree gateway/supervisor/s.c "runner/runner.h" runner/runner.h "protocol/protocol.h"
expect 1 "src/gateway/supervisor/s.c:1: gateway/supervisor includes runner, which DESIGN.md excludes for it"
tree newmodule/n.c "tensor/tensor.h" tensor/t.c "tensor/tensor.h"
expect 1 "src/newmodule is in no layer"

[ "$failures" = 0 ] && echo "layers_refusals: every broken layer was refused"
[ "$failures" = 0 ]
