#!/usr/bin/env bash
# One host's link broken in the middle of a tandem-train run on a virtual cluster of 2 hosts
# x 2 ranks: black-holed (every packet dropped, both ends), then, separately, set down.
#   cluster_link_fault_test.sh <cluster.sh> <tandem-train> <work dir>
# Asserts, for each fault: every rank on both hosts has ended within the collective timeout
# + 15 s of the break, each printing tandem's named timeout error (op, tag, bytes: a
# bucket's allreduce with its parameters, or the small per-step agreement before it,
# wherever the break caught the rank); mpirun ends non-zero within the collective timeout
# + 25 s; every checkpoint complete before the break is there and byte-equal to the
# uninterrupted run's; after the link is healed, --resume ends with the very bytes of the
# uninterrupted run's final checkpoint. Open MPI's TCP transport has
# no timeout of its own: tandem's deadline (TANDEM_COLLECTIVE_TIMEOUT_S) must end the
# ranks, and the daemons' keepalives (cluster.sh run) mpirun. Skips (77) where the cluster
# cannot be built. netem (delay, jitter, loss) is not covered: not every kernel has it.
set -uo pipefail
cluster_sh="$1"; train="$2"; work="$3"
test_name=cluster_link_fault_test
export TANDEM_CLUSTER="${TANDEM_CLUSTER_PREFIX:-tandem}-link"  # one per test: they may run at once
export TANDEM_COLLECTIVE_TIMEOUT_S=5
source "$(dirname "${BASH_SOURCE[0]}")/cluster_test_lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_link_fault_lib.sh"
rm -rf "$work"; mkdir -p "$work"
start_cluster 2
limit=$(( TANDEM_COLLECTIVE_TIMEOUT_S + 15 ))
# mpirun ends after the ranks: once one aborts it must give up the cut-off host's daemon,
# which takes the kernel's retransmissions (cluster.sh run); 11 s after the ranks measured.
job_limit=$(( TANDEM_COLLECTIVE_TIMEOUT_S + 25 ))
final=$(printf 'ckpt-%06d.safetensors' $link_fault_iters)

job_on_cluster "$work/straight" > "$work/straight.mpirun.log" 2>&1 ||
  { cat "$work/straight.mpirun.log" "$work/straight.logs"/*; fail "the uninterrupted run failed"; }
[ -f "$work/straight/$final" ] || fail "no final checkpoint in the uninterrupted run"

for kind in blackhole down; do
  out="$work/$kind"
  faulted_run "$out" "$kind" 2 30 0
  echo "$kind: host 2's link broken after $(echo $fault_ckpts_before | wc -w) checkpoint(s);" \
       "ranks ended after ${fault_ranks_s} s, mpirun after ${fault_job_s} s with exit status $fault_job_rc"
  [ "$fault_ranks_s" != hang ] || { "$cluster_sh" heal 2; fail "$kind: ranks still running 120 s after the break"; }
  awk -v s="$fault_ranks_s" -v l=$limit 'BEGIN{exit !(s <= l)}' ||
    fail "$kind: the ranks took ${fault_ranks_s} s to end (limit $limit s)"
  awk -v s="$fault_job_s" -v l=$job_limit 'BEGIN{exit !(s <= l)}' ||
    { cat "$out.mpirun.log"; fail "$kind: mpirun took ${fault_job_s} s to end (limit $job_limit s)"; }
  [ "$fault_job_rc" -ne 0 ] || fail "$kind: mpirun exited 0"
  [ ! -f "$out/$final" ] || fail "$kind: the run finished anyway (the break came too late)"
  timeout_errors "$out" || { cat "$out.mpirun.log" "$out.logs"/*; fail "$kind: a rank did not name its timed-out collective"; }
  checkpoints_intact "$out" "$work/straight" || fail "$kind: checkpoints lost or torn"
  expect_no_leftovers "$kind"
  "$cluster_sh" heal 2 || fail "cluster.sh heal 2 failed"
  newest=$(ls "$out"/ckpt-*.safetensors | sort | tail -n 1)
  if ! job_timeout=60 job_on_cluster "$out" --resume > "$out.resumed.log" 2>&1; then
    # Open MPI's TCP connect across the healed link has failed now and then ("failed to TCP
    # connect to a peer", Operation now in progress) before any rank ran: one more try, said.
    grep -q "failed to TCP connect" "$out.resumed.log" ||
      { cat "$out.resumed.log" "$out.logs"/*; fail "$kind: resuming after the link was healed failed"; }
    echo "$kind: Open MPI could not connect across the healed link; resuming once more"
    job_timeout=60 job_on_cluster "$out" --resume > "$out.resumed.log" 2>&1 ||
      { cat "$out.resumed.log" "$out.logs"/*; fail "$kind: resuming after the link was healed failed twice"; }
  fi
  expect_resumed_from "$out.logs/rank-0.log" "$newest"
  expect_same_checkpoint "$work/straight/$final" "$out/$final"
  echo "$kind: resumed from $(basename "$newest") and ended with the uninterrupted run's bytes"
done
expect_no_leftovers "after the runs"
echo "$test_name: ok (a black-holed and a downed link each ended every rank within $limit s," \
     "naming the collective, and mpirun within $job_limit s; checkpoints intact; the resumed runs continued bitwise)"
rm -rf "$work"
