#!/usr/bin/env bash
# R3GAN's objective through tandem-train: dcgan with --loss rpgan --r1-gamma 1 --r2-gamma 1 at
# 2 ranks ends normally, and every line of its metrics.jsonl holds finite losses and both
# penalties (r1 and r2, each positive). Then --model r3gan alone (its defaults: rpgan, R1
# and R2 of gamma 0.1) the same way, its settings naming the loss. Skips (77) without
# Fashion-MNIST.
#   rpgan_test.sh <mpiexec> <tandem-train> <work dir>
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=rpgan_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
require_fashion_mnist
rm -rf "$work"; mkdir -p "$work"
log="$work/run.log"
check_metrics() {  # <run dir>: every logged line has finite losses and positive r1 and r2
python3 - "$1/metrics.jsonl" <<'PY' || { cat "$1/metrics.jsonl"; fail "$1/metrics.jsonl lacks r1 or r2"; }
import json, math, sys
lines = [r for r in map(json.loads, open(sys.argv[1])) if "loss_d" in r]
assert len(lines) == 2, lines  # iterations 2 and 4
for record in lines:
    for key in ("loss_d", "loss_g", "r1", "r2"):
        value = record.get(key)
        assert isinstance(value, (int, float)) and math.isfinite(value), (key, value)
    assert record["r1"] > 0 and record["r2"] > 0, record
print("metrics.jsonl:", len(lines), "lines with r1 and r2")
PY
}
"$mpiexec" -np 2 "$train" --model dcgan --loss rpgan --r1-gamma 1 --r2-gamma 1 --iters 4 --batch 4 \
  --log-every 2 --out "$work/run" > "$log" 2>&1 || { cat "$log"; fail "the rpgan run did not end normally"; }
check_metrics "$work/run"
"$mpiexec" -np 2 "$train" --model r3gan --iters 4 --batch 4 --log-every 2 --out "$work/r3gan" > "$log" 2>&1 ||
  { cat "$log"; fail "the r3gan run did not end normally"; }
check_metrics "$work/r3gan"
grep -q "rpgan" "$log" || { cat "$log"; fail "the r3gan run's log does not name its loss (rpgan)"; }
echo "$test_name: ok"
rm -rf "$work"
