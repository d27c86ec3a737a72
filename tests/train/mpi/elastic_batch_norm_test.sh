#!/usr/bin/env bash
# A run resumed at another rank count (--global-batch) with a model whose batch norm
# normalises over each rank's batch (dcgan without --sync-bn) warns at the resume, naming the
# layer and --sync-bn: its batch statistics now come from batches of another size. With
# --sync-bn, or for a model without batch norm (stylegan2), there is no such warning.
# Skips (77) without Fashion-MNIST.
#   elastic_batch_norm_test.sh <mpiexec> <tandem-train> <work dir>
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=elastic_batch_norm_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
require_fashion_mnist
rm -rf "$work"; mkdir -p "$work"
log="$work/run.log"
warning="normalises over each rank's batch without --sync-bn"
elastic() {  # name, then tandem-train flags: 2 iterations at 2 ranks, resumed to 3 at 1 rank
  local name="$1"; shift
  "$mpiexec" -np 2 "$train" "$@" --global-batch 8 --iters 2 --log-every 1 --out "$work/$name" > "$log" 2>&1 ||
    { cat "$log"; fail "$name: the 2-rank run did not end normally"; }
  "$mpiexec" -np 1 "$train" "$@" --global-batch 8 --iters 3 --log-every 1 --resume --out "$work/$name" > "$log" 2>&1 ||
    { cat "$log"; fail "$name: the 1-rank resume did not end normally"; }
}
elastic dcgan --model dcgan
grep -q "warning: .*written at 2 rank(s), this run has 1: the model's batch norm (generator\..*) $warning" "$log" ||
  { cat "$log"; fail "dcgan resumed at 1 rank: no warning naming its batch norm and --sync-bn"; }
elastic dcgan-sync --model dcgan --sync-bn
grep -q "$warning" "$log" && { cat "$log"; fail "dcgan --sync-bn resumed at 1 rank: a batch-norm warning"; }
elastic stylegan2 --model stylegan2
grep -q "$warning" "$log" && { cat "$log"; fail "stylegan2 (no batch norm) resumed at 1 rank: a batch-norm warning"; }
echo "$test_name: ok"
rm -rf "$work"
