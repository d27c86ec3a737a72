#!/usr/bin/env bash
# Failures on a virtual cluster of 2 hosts: what an engineer sees, and what is left behind.
#   cluster_fault_test.sh <cluster.sh> <tandem-train> <work dir>
# Asserts, each within seconds and leaving no process or session file on any host:
#  1. a rank that fails names its host: "[rank 3 on host <cluster>-host2] ...";
#  2. a host whose link is down at start: `cluster.sh run` names it and starts nothing, and
#     runs again once the link is back;
#  3. a host that does not exist (in mpirun's host list, not in the cluster): the launch
#     agent names it and mpirun ends;
#  4. a job past `run --timeout`: stopped, with a message, and the daemons its ranks started too;
#  5. `up` over a cluster left running (a stray process on a host) starts clean, and `down`
#     leaves no namespace or state behind;
#  6. without root, `cluster.sh check` exits 77 naming what is missing (the skip path).
# Skips (77) where the cluster cannot be built.
set -uo pipefail
cluster_sh="$1"; train="$2"; work="$3"
test_name=cluster_fault_test
export TANDEM_CLUSTER="${TANDEM_CLUSTER_PREFIX:-tandem}-fault"  # one per test: they may run at once
source "$(dirname "${BASH_SOURCE[0]}")/cluster_test_lib.sh"
rm -rf "$work"; mkdir -p "$work"
start_cluster 2
host2="$TANDEM_CLUSTER-host2"

# expect_failure <name> <limit s> <expected text> <command...>: the command fails within the
# limit, says the expected text, and leaves nothing running on the hosts.
expect_failure() {
  local name="$1" limit="$2" expected="$3"; shift 3
  local log="$work/$name.log" started rc=0 seconds
  started=$(date +%s)
  "$@" > "$log" 2>&1 || rc=$?
  seconds=$(( $(date +%s) - started ))
  echo "$name: exit status $rc after ${seconds} s: $(grep -F -m1 "$expected" "$log")"
  [ $rc -ne 0 ] || { cat "$log"; fail "$name: exited 0"; }
  [ $seconds -le "$limit" ] || { cat "$log"; fail "$name: took ${seconds} s (limit ${limit} s)"; }
  grep -qF "$expected" "$log" || { cat "$log"; fail "$name: no '$expected' in the output"; }
  expect_no_leftovers "$name"
}

# 1. One rank (rank 3, on host 2) cannot read its data while the others wait for it.
# tandem ends the job about 3 s in (the error, then MPI_Abort after its 2 s grace); Open
# MPI's teardown across TCP hosts has then once taken 30 s more (1 of 20 runs, with another
# training on the same 2 cores), so the bound is 60 s: well under a collective timeout.
expect_failure failing_rank 60 \
  "[rank 3 on host $host2] Fashion-MNIST file $work/nonexistent/train-images-idx3-ubyte.gz not found" \
  "$cluster_sh" run --timeout 60 -- "${forward_env[@]}" \
  -np 3 "$train" --model mlp --iters 5 --out "$work/failing_rank" : \
  -np 1 "$train" --model mlp --iters 5 --out "$work/failing_rank" --data-dir "$work/nonexistent"

# 2. Host 2's link is down when the job starts (its switch port), then back.
ip -n "$TANDEM_CLUSTER-switch" link set host2 down
expect_failure link_down 10 "cluster.sh: host $host2 (10.213.7.12) is unreachable: no answer within 3 s; nothing was started" \
  "$cluster_sh" run --timeout 60 -- -np 4 hostname
ip -n "$TANDEM_CLUSTER-switch" link set host2 up
"$cluster_sh" run --timeout 60 -- -np 4 hostname > "$work/link_up.log" 2>&1 || { cat "$work/link_up.log"; fail "no run after the link came back"; }
[ "$(grep -c "^$TANDEM_CLUSTER-host" "$work/link_up.log")" -eq 4 ] || { cat "$work/link_up.log"; fail "not 4 ranks after the link came back"; }

# 3. mpirun is given a host the cluster does not have: the agent names it, mpirun gives up.
expect_failure no_such_host 20 "cluster.sh: host $TANDEM_CLUSTER-host3 (10.213.7.13) is unreachable: its namespace $TANDEM_CLUSTER-host3 does not exist" \
  "$cluster_sh" run --timeout 60 -- -np 2 -H 10.213.7.11,10.213.7.13 hostname

# 4. A job that does not end by itself, and whose ranks started daemons of their own (which
# mpirun does not end): both stopped.
expect_failure timeout 20 "cluster.sh: the job did not end within --timeout 2 s and was stopped" \
  "$cluster_sh" run --timeout 2 -- -np 4 bash -c 'setsid sleep 60 < /dev/null > /dev/null 2>&1 & sleep 60'

# 5. A stray process on a host, then `up` again: it is ended and the cluster rebuilt.
ip netns exec "$(host_namespace 1)" sleep 60 &
stray=$!
sleep 0.2
"$cluster_sh" up 2 > "$work/up_again.log" 2>&1 || { cat "$work/up_again.log"; fail "up over a running cluster failed"; }
if kill -0 $stray 2>/dev/null && [ "$(awk '{print $3}' /proc/$stray/stat 2>/dev/null)" != Z ]; then
  kill $stray; fail "up left the stray process $stray running on host 1"
fi
"$cluster_sh" run --timeout 60 -- -np 4 hostname > "$work/after_up.log" 2>&1 || { cat "$work/after_up.log"; fail "no run after up"; }
"$cluster_sh" down || fail "down failed"
left=$(ip netns list | awk '{print $1}' | grep -E "^$TANDEM_CLUSTER-" || true)
[ -z "$left" ] || fail "down left the namespaces $left"
[ ! -e "/run/$TANDEM_CLUSTER-cluster" ] || fail "down left /run/$TANDEM_CLUSTER-cluster"
"$cluster_sh" down || fail "down of a cluster that is not up failed"

# 6. The skip path: as an ordinary user the cluster cannot be built, and the reason is given.
if command -v setpriv > /dev/null && id nobody > /dev/null 2>&1; then
  rc=0
  why=$(setpriv --reuid=nobody --regid=nogroup --clear-groups bash "$cluster_sh" check 2>&1) || rc=$?
  [ $rc -eq 77 ] || fail "cluster.sh check as nobody exited $rc, expected 77 ($why)"
  case "$why" in *"needs root"*) ;; *) fail "cluster.sh check as nobody did not say it needs root: $why" ;; esac
  echo "as nobody: $why"
fi
echo "$test_name: ok (named the failing rank's host, the unreachable and the missing host; stopped a job" \
     "past its limit; nothing left behind)"
rm -rf "$work"
