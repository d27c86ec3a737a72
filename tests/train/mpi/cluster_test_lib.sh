# Helpers shared by the virtual-cluster tests (cluster_*_test.sh). Source after setting
# test_name, cluster_sh (the path of scripts/cluster.sh) and work (the test's directory).
# Each test builds its own cluster, named after the test, so the tests can run at once;
# it is removed when the test ends, however it ends.

source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"

# Ranks on the cluster start with a clean environment (as over ssh): the collective timeout
# and the sanitizers' settings (scripts/test.sh --sanitize) reach them through `mpirun -x`.
export TANDEM_COLLECTIVE_TIMEOUT_S="${TANDEM_COLLECTIVE_TIMEOUT_S:-60}"
forward_env=(-x TANDEM_COLLECTIVE_TIMEOUT_S)
for name in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS; do
  [ -z "${!name:-}" ] || forward_env+=(-x "$name")
done

# start_cluster <hosts>: builds the cluster, or ends the test with CTest's skip code (77) and
# cluster.sh's message naming what this machine lacks (root, iproute2, network namespaces).
start_cluster() {
  local why rc=0
  why=$("$cluster_sh" check 2>&1) || rc=$?
  if [ $rc -eq 77 ]; then echo "$test_name: SKIP: $why"; exit 77; fi
  [ $rc -eq 0 ] || fail "cluster.sh check failed: $why"
  trap 'stop_cluster' EXIT
  "$cluster_sh" up "$1" || fail "cluster.sh up $1 failed"
}

stop_cluster() {
  "$cluster_sh" down || echo "$test_name: FAIL: cluster.sh down failed" >&2
}

# on_cluster <log> <mpirun args...>: runs a job across the hosts; returns its exit status.
on_cluster() {
  local log="$1"; shift
  "$cluster_sh" run --timeout 120 -- "${forward_env[@]}" "$@" > "$log" 2>&1
}

# host_namespace <i>: the network namespace of host i of this test's cluster.
host_namespace() { echo "$TANDEM_CLUSTER-host$1"; }

# expect_no_leftovers <what>: no process runs on any host and no session file is left.
expect_no_leftovers() {
  local ns pids
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$TANDEM_CLUSTER-(host[0-9]+|head|switch)$"); do
    pids=$(ip netns pids "$ns" | xargs)
    [ -z "$pids" ] || fail "$1: processes $pids are still running in $ns"
  done
  [ -z "$(ls -A "/run/$TANDEM_CLUSTER-cluster/tmp" 2>/dev/null)" ] ||
    fail "$1: session files are left in /run/$TANDEM_CLUSTER-cluster/tmp"
}
