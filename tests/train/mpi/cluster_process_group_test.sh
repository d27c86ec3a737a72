#!/usr/bin/env bash
# The process-group exact-value suite on a virtual cluster of 2 hosts x 2 ranks (TCP only).
#   cluster_process_group_test.sh <cluster.sh> <dist_test_mpi_process_group> <work dir>
# Asserts: ranks 0-1 run on host 1 and ranks 2-3 on host 2, each host in its own network
# namespace (not the test's) with its own hostname; Open MPI loads no shared-memory
# transport (only tcp and self) and binds to the host's own address; and every
# exact-value collective test passes. Skips (77) where the cluster cannot be built.
set -uo pipefail
cluster_sh="$1"; suite="$2"; work="$3"
test_name=cluster_process_group_test
export TANDEM_CLUSTER="${TANDEM_CLUSTER_PREFIX:-tandem}-pg"  # one per test: they may run at once
source "$(dirname "${BASH_SOURCE[0]}")/cluster_test_lib.sh"
rm -rf "$work"; mkdir -p "$work"
start_cluster 2

# 1. Placement: which host and which network namespace each rank runs in.
on_cluster "$work/placement.log" -np 4 \
  bash -c 'echo "placement rank $OMPI_COMM_WORLD_RANK $(hostname) $(readlink /proc/self/ns/net) btl=$OMPI_MCA_btl"' ||
  { cat "$work/placement.log"; fail "the placement job failed"; }
own_ns=$(readlink /proc/self/ns/net)
declare -A ns_of_host
for rank in 0 1 2 3; do
  line=$(grep "^placement rank $rank " "$work/placement.log") || { cat "$work/placement.log"; fail "rank $rank did not report"; }
  read -r _ _ _ host ns btl <<< "$line"
  expected_host="$TANDEM_CLUSTER-host$(( rank / 2 + 1 ))"
  [ "$host" = "$expected_host" ] || fail "rank $rank runs on $host, expected $expected_host"
  [ "$ns" != "$own_ns" ] || fail "rank $rank runs in the test's own network namespace $ns"
  [ "$btl" = "btl=tcp,self" ] || fail "rank $rank has $btl, expected btl=tcp,self"
  [ -z "${ns_of_host[$host]:-}" ] || [ "${ns_of_host[$host]}" = "$ns" ] ||
    fail "the ranks of $host are in different network namespaces"
  ns_of_host[$host]=$ns
done
[ "${ns_of_host[$TANDEM_CLUSTER-host1]}" != "${ns_of_host[$TANDEM_CLUSTER-host2]}" ] ||
  fail "both hosts share the network namespace ${ns_of_host[$TANDEM_CLUSTER-host1]}"
grep "^placement" "$work/placement.log" | sort

# 2. The exact-value suite, with Open MPI saying which transports it loads and binds.
on_cluster "$work/suite.log" -np 4 --mca btl_base_verbose 100 "$suite" ||
  { tail -n 80 "$work/suite.log"; fail "the process-group suite failed on the cluster"; }
grep -q "All tests passed" "$work/suite.log" || { tail -n 40 "$work/suite.log"; fail "the suite did not report success"; }
loaded=$(grep -o "components_open: found loaded component [a-z0-9_]*" "$work/suite.log" | awk '{print $NF}' | sort -u | xargs)
[ "$loaded" = "self tcp" ] || fail "Open MPI loaded the transports '$loaded', expected only 'self tcp'"
for i in 1 2; do
  matches=$(grep -c "\[$TANDEM_CLUSTER-host$i:[0-9]*\] btl: tcp: Found match: 10.213.7.1$i (eth0)" "$work/suite.log")
  [ "$matches" -eq 2 ] || fail "expected the 2 ranks of host $i to bind 10.213.7.1$i, found $matches"
done
expect_no_leftovers "after the suite"
grep "test cases" "$work/suite.log" | tail -n 1
echo "$test_name: ok (2 hosts x 2 ranks in separate network namespaces, transports: $loaded)"
rm -rf "$work"
