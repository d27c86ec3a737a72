#!/usr/bin/env bash
# A run whose losses go non-finite (--lr 1e30) keeps metrics.jsonl strict JSON: each line
# parses with a reader that refuses NaN and Infinity, the diverged losses are null, and the
# run itself ends normally (--on-nonfinite off, the default). With --on-nonfinite skip or
# scrub the same run stops after --max-nonfinite-steps optimizer steps of a part in a row,
# naming the parts, after a warning at the first (it used to run to --iters doing nothing);
# under --accumulate too, where the iterations between steps say nothing (they used to reset
# the count, so such a run never stopped).
#   nonfinite_metrics_test.sh <mpiexec> <tandem-train> <work dir>
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=nonfinite_metrics_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
rm -rf "$work"; mkdir -p "$work"
log="$work/run.log"
"$mpiexec" -np 1 "$train" --model ring8-mlp --iters 6 --log-every 2 --lr 1e30 --out "$work/run" > "$log" 2>&1 ||
  { cat "$log"; fail "the diverging run did not end normally"; }
python3 - "$work/run/metrics.jsonl" <<'PY' || { cat "$work/run/metrics.jsonl"; fail "metrics.jsonl is not strict JSON"; }
import json, math, sys
def refuse(name):
    raise ValueError("non-JSON constant " + name)
nulls = 0
with open(sys.argv[1]) as f:
    for line in f:
        record = json.loads(line, parse_constant=refuse)
        nulls += sum(1 for k in ("loss_d", "loss_g") if record.get(k) is None)
        for k, v in record.items():
            assert v is None or not isinstance(v, float) or math.isfinite(v), (k, v)
assert nulls > 0, "no diverged loss was logged as null"
print("metrics.jsonl:", nulls, "null losses")
PY
for run in "skip" "scrub" "skip --accumulate 3" "scrub --accumulate 3"; do
  policy="${run%% *}"
  # shellcheck disable=SC2086  # the run's extra flags
  "$mpiexec" -np 1 "$train" --model ring8-mlp --iters 400 --log-every 100 --lr 1e30 --on-nonfinite $run \
    --max-nonfinite-steps 5 --out "$work/run-${run// /}" > "$log" 2>&1 && { cat "$log"; fail "--on-nonfinite $run ran to --iters"; }
  grep -q "warning: non-finite averaged gradients at iteration [0-9]* (.*): --on-nonfinite $policy" "$log" ||
    { cat "$log"; fail "--on-nonfinite $run: no warning at the first non-finite iteration"; }
  grep -q "non-finite averaged gradients in 5 optimizer steps in a row (iterations [0-9]*-[0-9]*, steps per part: .*) with --on-nonfinite $policy" "$log" ||
    { cat "$log"; fail "--on-nonfinite $run: did not stop after 5 steps in a row, naming the parts"; }
done
echo "$test_name: ok"
rm -rf "$work"
