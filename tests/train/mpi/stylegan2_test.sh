#!/usr/bin/env bash
# The stylegan2 model through tandem-train at 2 ranks with its default objective (lazy R1,
# --r1-gamma 0.05 --r1-every 16): the run ends normally and metrics.jsonl holds finite losses
# and the R1 value of the penalty step at iteration 0. Skips (77) without Fashion-MNIST.
#   stylegan2_test.sh <mpiexec> <tandem-train> <work dir>
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=stylegan2_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
require_fashion_mnist
rm -rf "$work"; mkdir -p "$work"
log="$work/run.log"
"$mpiexec" -np 2 "$train" --model stylegan2 --iters 4 --batch 4 --log-every 2 --out "$work/run" > "$log" 2>&1 \
  || { cat "$log"; fail "the stylegan2 run did not end normally"; }
python3 - "$work/run/metrics.jsonl" <<'PY' || { cat "$work/run/metrics.jsonl"; fail "metrics.jsonl lacks finite losses or r1"; }
import json, math, sys
lines = [r for r in map(json.loads, open(sys.argv[1])) if "loss_d" in r]
assert len(lines) == 2, lines  # iterations 2 and 4
for record in lines:
    for key in ("loss_d", "loss_g", "r1"):
        value = record.get(key)
        assert isinstance(value, (int, float)) and math.isfinite(value), (key, value)
    assert record["r1"] > 0, record
print("metrics.jsonl:", len(lines), "lines with loss_d, loss_g and r1")
PY
echo "$test_name: ok"
rm -rf "$work"
