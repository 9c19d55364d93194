# soak_netns.sh -- bench/soak's part (n), sourced by it: the soak at the
# seed's scale, on three hosts in network namespaces (tests/netns_lib.sh),
# with Open MPI entering them through a launch agent, as netns_cluster does.
#
#   main (tp 2 on hosts 1 and 2) and second (tp 1 on host 2: the two share
#   host 2) serve 6 + 4 streaming clients whose requests cycle through 16
#   (prompt, seed) pairs per model, each output checked against the same
#   pair's undisturbed run (soak_tool --verify); main moves live every
#   --move-every seconds, in turn to tp 2 on host 3 and on host 1; and every
#   --lose-every seconds (the first halfway) the host of main's leader is
#   lost: its processes killed and its link cut, then joined again 30 s
#   later (a stall is a stream 20 s without a token: a loss pauses streams
#   for about the time it takes to see it). Prints soak_tool's table
#   (requests per 10 minutes, failed, wrong,
#   stalls, the longest gap), the moves, and each loss: when the gateway saw
#   it and when main was ready elsewhere.
# shellcheck shell=bash

# soak_netns LOCKSTEP SOAK_TOOL SECONDS MOVE_EVERY LOSE_EVERY WORKDIR: 0, or
# 1 when a request failed, stalled or gave another text, a move failed, a
# loss was not recovered from, or a process was left.
soak_netns() {
    local lockstep=$1 tool=$2 seconds=$3 move_every=$4 lose_every=$5 dir=$6
    if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
        echo "(n) skipped: it needs root and ip (iproute2) for network namespaces"
        return 0
    fi
    local prefix=lssk gw=lsskg-$$ bridge=lsskbr
    local ns=("" "lssk1-$$" "lssk2-$$" "lssk3-$$")
    local ip_of=("10.216.0.254" "10.216.0.1" "10.216.0.2" "10.216.0.3")
    # shellcheck source=tests/netns_lib.sh
    . "$(dirname "${BASH_SOURCE[0]}")/../tests/netns_lib.sh"
    remove_stale_namespaces "^${prefix}[g123]-[0-9]+$"
    local status=0 server="" loser="" tool_pid=""
    soak_netns_down() {
        [ -n "$loser" ] && kill -TERM "$loser" 2>/dev/null
        [ -n "$tool_pid" ] && kill -TERM "$tool_pid" 2>/dev/null
        if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
            kill -TERM "$server"
            for _ in $(seq 200); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
            kill -0 "$server" 2>/dev/null && { echo "soak (n): the gateway ignored SIGTERM"; kill -KILL "$server"; status=1; }
        fi
        local n
        for n in 1 2 3; do remove_namespace "${ns[$n]}"; done
        remove_namespace "$gw"
    }
    trap 'soak_netns_down' RETURN
    mkdir -p "$dir"
    netns_cluster_up || { echo "soak (n): cannot set up the namespaces"; return 1; }
    netns_write_agent "$dir/agent.sh"
    printf '%s slots=4\n%s slots=4\n%s slots=4\n' "${ip_of[1]}" "${ip_of[2]}" "${ip_of[3]}" >"$dir/hosts"
    local model=$dir/soak-netns.gguf
    "$lockstep" convert --random --dim 256 --hidden 768 --layers 4 --heads 8 --kv-heads 4 \
        --vocab 512 --ctx 512 --type q8_0 --seed 3 -o "$model" >/dev/null || return 1
    ip netns exec "$gw" env OMPI_MCA_plm_rsh_agent="$dir/agent.sh" OMPI_MCA_btl=self,tcp \
        OMPI_MCA_btl_tcp_if_include=10.216.0.0/24 OMPI_MCA_oob_tcp_if_include=10.216.0.0/24 \
        OMPI_MCA_mpi_yield_when_idle=1 ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        "$lockstep" serve --port 0 -t 1 --cluster "$dir/hosts" --enable-faults \
        --probe-interval 2 --watchdog 3 -m "$model" --name main -m "$model" --name second \
        --place "main=tp:2,hosts:${ip_of[1]}+${ip_of[2]}" --place "second=tp:1,hosts:${ip_of[2]}" \
        >"$dir/serve.log" 2>&1 &
    server=$!
    local port=""
    for _ in $(seq 600); do
        port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$dir/serve.log")
        [ -n "$port" ] && break
        kill -0 "$server" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$port" ] || { echo "soak (n): the gateway did not start:"; tail -n 20 "$dir/serve.log"; return 1; }
    local base=http://127.0.0.1:$port
    for _ in $(seq 600); do
        [ "$(ip netns exec "$gw" curl -s -o /dev/null -w '%{http_code}' "$base/health")" = 200 ] && break
        sleep 0.2
    done

    # The losses, in the background: the host of main's leader each time.
    soak_netns_losses() {
        local at=$((lose_every / 2)) started=$SECONDS n=0
        while [ $((at + 60)) -lt "$seconds" ]; do
            sleep $((started + at - SECONDS))
            local hosts host
            hosts=$(ip netns exec "$gw" curl -s "$base/v1/cluster" |
                grep -o '"id":"main-1","model":"main","tp":[0-9]*,"placement":\[[^]]*\],"hosts":"[^"]*"' |
                sed 's/.*"hosts":"\([^":+]*\).*/\1/')
            for host in 1 2 3; do [ "${ip_of[$host]}" = "$hosts" ] && break; done
            local t0=$EPOCHREALTIME seen="" placed=""
            netns_host_cut "$host"
            for _ in $(seq 600); do
                local c
                c=$(ip netns exec "$gw" curl -s --max-time 5 "$base/v1/cluster")
                [ -z "$seen" ] && grep -q "\"name\":\"${ip_of[$host]}\",\"local\":false,\"state\":\"lost\"" <<<"$c" &&
                    seen=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}')
                local main
                main=$(grep -oE '"id":"main-1","model":"main","tp":[0-9]+,"placement":\[[^]]*\],"hosts":"[^"]*","state":"[a-z]*"' <<<"$c")
                if [ -n "$seen" ] && [[ $main == *'"state":"ready"' ]] && [[ $main != *"\"hosts\":\"${ip_of[$host]}"* ]] &&
                    [[ $main != *"+${ip_of[$host]}"* ]]; then
                    placed=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}')
                    break
                fi
                sleep 0.2
            done
            n=$((n + 1))
            echo "loss $n at $at s: host ${ip_of[$host]} (main's leader) seen lost after ${seen:-?} s," \
                "main ready elsewhere after ${placed:-never} s"
            sleep 30
            netns_host_link "$host" || echo "loss $n: host ${ip_of[$host]} could not be joined again"
            at=$((at + lose_every))
        done
    }
    soak_netns_losses >"$dir/losses.txt" 2>&1 &
    loser=$!
    echo
    echo "### (n) three hosts in network namespaces: main (tp 2) and second (tp 1) share a host;" \
        "6 + 4 clients, outputs checked, a move every $move_every s, a host lost every $lose_every s," \
        "$((seconds / 60)) min"
    echo
    "$tool" --print-header c
    ip netns exec "$gw" "$tool" --port "$port" --part c --label netns --seconds "$seconds" \
        --verify 16 --move-every "$move_every" --stall 20 \
        --move-plan "2@${ip_of[3]},2@${ip_of[1]}" --deadline 240 2>"$dir/tool.err" &
    tool_pid=$!
    wait "$tool_pid" || status=1
    tool_pid=""
    grep -E "checked against|first failure" "$dir/tool.err" | sed 's/^soak: /  /'
    wait "$loser" 2>/dev/null
    loser=""
    echo
    cat "$dir/losses.txt"
    grep -q "never" "$dir/losses.txt" && status=1
    echo "(the gateway's log: $dir/serve.log)"
    return "$status"
}
