# netns_lib.sh -- what the network-namespace tests (netns_tp.sh,
# netns_cluster.sh) share; sourced, not run.

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
