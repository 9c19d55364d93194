# netns_lib.sh -- what the network-namespace tests (netns_tp.sh,
# netns_cluster.sh) and bench/soak's part n share: namespaces made and
# removed, and a cluster of three namespaced hosts whose links can be cut
# and joined again; sourced, not run.

# Kills every process in namespace $1 (by pid), then deletes it.
remove_namespace() {
    local pids
    for _ in 1 2 3 4 5; do
        pids=$(ip netns pids "$1" 2>/dev/null)
        [ -z "$pids" ] && break
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null
        sleep 0.1
    done
    ip netns delete "$1" 2>/dev/null
}

# Removes the namespaces matching the extended regex $1 (with the pid of
# the run that made them after the last "-") whose run is gone: a run
# killed with SIGKILL could not clean up.
remove_stale_namespaces() {
    local ns
    for ns in $(ip netns list | awk '{print $1}' | grep -E "$1"); do
        kill -0 "${ns##*-}" 2>/dev/null || remove_namespace "$ns"
    done
}

# A cluster of three hosts on one machine: the gateway's namespace $gw
# (with a bridge) and three host namespaces ${ns[1..3]} at ${ip_of[1..3]},
# each joined to the bridge by a veth pair; the caller sets prefix, gw,
# bridge, ns and ip_of (10.216.0.x, the gateway's side .254) first. 0, or 1
# if a step failed.
netns_cluster_up() {
    ip netns add "$gw" && ip -n "$gw" link set lo up &&
        ip -n "$gw" link add "$bridge" type bridge && ip -n "$gw" link set "$bridge" up &&
        ip -n "$gw" addr add "${ip_of[0]}/24" dev "$bridge" || return 1
    local n
    for n in 1 2 3; do
        ip netns add "${ns[$n]}" && ip -n "${ns[$n]}" link set lo up &&
            netns_host_link "$n" || return 1
    done
}

# Joins host $1's namespace to the bridge (again, after netns_host_cut).
netns_host_link() {
    local outer=${prefix}${1}a-$$ inner=${prefix}${1}b-$$
    ip link add "$outer" netns "$gw" type veth peer name "$inner" netns "${ns[$1]}" &&
        ip -n "$gw" link set "$outer" master "$bridge" && ip -n "$gw" link set "$outer" up &&
        ip -n "${ns[$1]}" addr add "${ip_of[$1]}/24" dev "$inner" &&
        ip -n "${ns[$1]}" link set "$inner" up
}

# Host $1 goes down as a machine would: its processes killed, its link cut.
netns_host_cut() {
    local p
    for p in $(ip netns pids "${ns[$1]}"); do kill -KILL "$p" 2>/dev/null; done
    ip -n "$gw" link delete "${prefix}${1}a-$$" 2>/dev/null
}

# Writes Open MPI's launch agent for the three hosts to $1: it enters a
# host's namespace with `ip netns exec`, as ssh would log in.
netns_write_agent() {
    cat >"$1" <<AGENT
#!/bin/sh
host=\$1
shift
case \$host in
${ip_of[1]}) exec ip netns exec ${ns[1]} sh -c "\$*" ;;
${ip_of[2]}) exec ip netns exec ${ns[2]} sh -c "\$*" ;;
${ip_of[3]}) exec ip netns exec ${ns[3]} sh -c "\$*" ;;
esac
echo "agent: unknown host \$host" >&2
exit 1
AGENT
    chmod +x "$1"
}
