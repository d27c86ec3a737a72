#!/usr/bin/env bash
# tandem-train on a virtual cluster of 2 hosts x 2 ranks against 4 ranks on one host.
#   cluster_train_test.sh <cluster.sh> <mpiexec> <tandem-train> <compare_checkpoints> <work dir>
# Asserts, for mlp (whole and separate wrap) and ring8-mlp: both runs end with the same
# parameters (relative 1e-6; the output says whether they are bitwise equal); the gradients
# crossed the link between the hosts (host 1 received at least the bytes the Reducer
# synchronised, which no allreduce can do with less). Then a checkpoint written on the
# cluster resumes on one host, and one written on one host resumes on the cluster, each
# ending with the very bytes of the run it continues. Skips (77) where the cluster cannot
# be built.
set -uo pipefail
cluster_sh="$1"; mpiexec="$2"; train="$3"; compare="$4"; work="$5"
test_name=cluster_train_test
export TANDEM_CLUSTER="${TANDEM_CLUSTER_PREFIX:-tandem}-train"  # one per test: they may run at once
source "$(dirname "${BASH_SOURCE[0]}")/cluster_test_lib.sh"
rm -rf "$work"; mkdir -p "$work"
start_cluster 2
iters=8

# args <model> <wrap> <out dir>: sets run_args, the run, the same on one host and on the cluster.
args() {
  run_args=("$train" --model "$1" --wrap "$2" --iters $iters --batch 16 --ckpt-every $((iters / 2))
            --log-every $iters --seed 3 --out "$3")
}
# On one host the ranks would average through shared memory, summing in another order than
# MPI's allreduce does across the hosts: the one-host runs use MPI too, so that both sum alike
# and their checkpoints can be compared byte for byte.
on_one_host() {  # log, tandem-train args...
  local log="$1"; shift
  TANDEM_SHARED_MEMORY_ALLREDUCE=0 "$mpiexec" -np 4 --oversubscribe -x TANDEM_SHARED_MEMORY_ALLREDUCE "$@" > "$log" 2>&1
}
received_bytes() {  # bytes host 1 has received over its link
  ip netns exec "$(host_namespace 1)" cat /sys/class/net/eth0/statistics/rx_bytes
}

final=$(printf 'ckpt-%06d.safetensors' $iters)
half=$(printf 'ckpt-%06d.safetensors' $((iters / 2)))
for config in "mlp whole" "mlp separate" "ring8-mlp whole"; do
  read -r model wrap <<< "$config"
  name="$model-$wrap"
  args "$model" "$wrap" "$work/one-host-$name"
  on_one_host "$work/one-host-$name.log" "${run_args[@]}" ||
    { cat "$work/one-host-$name.log"; fail "$name: the run on one host failed"; }
  before=$(received_bytes)
  args "$model" "$wrap" "$work/cluster-$name"
  on_cluster "$work/cluster-$name.log" -np 4 "${run_args[@]}" ||
    { cat "$work/cluster-$name.log"; fail "$name: the run on the cluster failed"; }
  received=$(( $(received_bytes) - before ))
  grep -q "4 rank(s)" "$work/cluster-$name.log" || { cat "$work/cluster-$name.log"; fail "$name: not 4 ranks"; }
  # What each rank's Reducer allreduced per step, over the whole run (log every $iters).
  sync_bytes=$(grep -o '"bytes_per_step": [0-9]*' "$work/cluster-$name/metrics.jsonl" | tail -n 1 | awk '{print $2}')
  [ -n "$sync_bytes" ] || fail "$name: no bytes_per_step in $work/cluster-$name/metrics.jsonl"
  floor=$(( sync_bytes * iters ))
  echo "$name: host 1 received $received bytes over its link; the gradients alone need $floor"
  [ "$received" -ge "$floor" ] || fail "$name: host 1 received $received bytes, less than the $floor the allreduces need"
  "$compare" "$work/one-host-$name/$final" "$work/cluster-$name/$final" --rtol 1e-6 ||
    fail "$name: the cluster run's parameters differ from the run on one host"
done

# A checkpoint of the cluster run resumes on one host; one of the one-host run on the cluster.
mkdir -p "$work/resumed-on-one-host" "$work/resumed-on-cluster"
cp "$work/cluster-ring8-mlp-whole/$half" "$work/resumed-on-one-host/"
cp "$work/one-host-ring8-mlp-whole/$half" "$work/resumed-on-cluster/"
args ring8-mlp whole "$work/resumed-on-one-host"
on_one_host "$work/resumed-on-one-host.log" "${run_args[@]}" --resume ||
  { cat "$work/resumed-on-one-host.log"; fail "resuming on one host failed"; }
args ring8-mlp whole "$work/resumed-on-cluster"
on_cluster "$work/resumed-on-cluster.log" -np 4 "${run_args[@]}" --resume ||
  { cat "$work/resumed-on-cluster.log"; fail "resuming on the cluster failed"; }
expect_resumed_from "$work/resumed-on-one-host.log" "$work/resumed-on-one-host/$half"
expect_resumed_from "$work/resumed-on-cluster.log" "$work/resumed-on-cluster/$half"
expect_same_checkpoint "$work/cluster-ring8-mlp-whole/$final" "$work/resumed-on-one-host/$final"
expect_same_checkpoint "$work/one-host-ring8-mlp-whole/$final" "$work/resumed-on-cluster/$final"
expect_no_leftovers "after the runs"
echo "$test_name: ok (same parameters on 2 hosts x 2 ranks as on one host; checkpoints resume across" \
     "the two byte for byte)"
rm -rf "$work"
