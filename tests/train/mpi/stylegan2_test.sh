#!/usr/bin/env bash
# The stylegan2 model through tandem-train at 2 ranks with its default objective (lazy R1,
# --r1-gamma 0.05 --r1-every 16; lazy path length, --pl-weight 2 --pl-every 4) and DiffAugment:
# the run ends normally and metrics.jsonl holds finite losses, the R1 value of the penalty
# step at iteration 0 and the path length's penalty and running mean. Stopped at iteration 4
# and resumed to 6, its checkpoint is byte for byte the straight run's (the running mean path
# length, which the path-length step at iteration 4 reads, is in the checkpoint). Skips (77)
# without Fashion-MNIST.
#   stylegan2_test.sh <mpiexec> <tandem-train> <work dir>
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=stylegan2_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
require_fashion_mnist
rm -rf "$work"; mkdir -p "$work"
log="$work/run.log"
flags=(--model stylegan2 --batch 4 --log-every 2 --ckpt-every 2 --augment color,translation,cutout)
"$mpiexec" -np 2 "$train" "${flags[@]}" --iters 4 --out "$work/run" > "$log" 2>&1 \
  || { cat "$log"; fail "the stylegan2 run did not end normally"; }
python3 - "$work/run/metrics.jsonl" <<'PY' || { cat "$work/run/metrics.jsonl"; fail "metrics.jsonl lacks finite losses or r1"; }
import json, math, sys
lines = [r for r in map(json.loads, open(sys.argv[1])) if "loss_d" in r]
assert len(lines) == 2, lines  # iterations 2 and 4
for record in lines:
    for key in ("loss_d", "loss_g", "r1", "pl", "pl_mean"):
        value = record.get(key)
        assert isinstance(value, (int, float)) and math.isfinite(value), (key, value)
    assert record["r1"] > 0 and record["pl"] > 0 and record["pl_mean"] > 0, record
print("metrics.jsonl:", len(lines), "lines with loss_d, loss_g, r1, pl and pl_mean")
PY
"$mpiexec" -np 2 "$train" "${flags[@]}" --iters 6 --resume --out "$work/run" > "$log" 2>&1 \
  || { cat "$log"; fail "the resumed stylegan2 run did not end normally"; }
"$mpiexec" -np 2 "$train" "${flags[@]}" --iters 6 --out "$work/straight" > "$log" 2>&1 \
  || { cat "$log"; fail "the straight stylegan2 run did not end normally"; }
cmp "$work/run/ckpt-000006.safetensors" "$work/straight/ckpt-000006.safetensors" \
  || fail "stopped at 4 and resumed, the checkpoint at 6 differs from the straight run's"
echo "$test_name: ok"
rm -rf "$work"
