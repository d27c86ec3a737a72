#!/usr/bin/env bash
# The zoo's FID table (docs/fid.md): each model trained on Fashion-MNIST for the same number
# of images shown, at 2 ranks, for several seeds, then FID (10,000 samples, from the moving
# average where the model keeps one) against the test set. Prints a markdown table with each
# model's FIDs, their mean and the mean step time of its run.
#   scripts/fid_table.sh [--models "mlp dcgan ..."] [--seeds "1 2 3"] [--images N]
#                        [--global-batch N] [--np N] [--precision P] [--out DIR] [--bin DIR]
# --precision bf16|fp16 trains every layer in that compute dtype (tandem-train --precision);
# its runs are kept apart from fp32's (<model>-<P>-seed<S>), so the two tables share --out.
# Each run is skipped when its out folder already holds a finished metrics.jsonl, so an
# interrupted table resumes where it stopped. Step times are those of the runs themselves:
# on a shared machine they say what the table cost, not what the models cost (bench/ for that).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

models="mlp dcgan dcgan64 r3gan stylegan2"
seeds="1 2 3"
images=12800
global_batch=64
np=2
precision=fp32
out="$TANDEM_ROOT/runs/fid-table"
bin="$TANDEM_BUILD/bin"
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --images) images="$2"; shift 2 ;;
    --global-batch) global_batch="$2"; shift 2 ;;
    --np) np="$2"; shift 2 ;;
    --precision) precision="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    *) echo "fid_table.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ $((images % global_batch)) -eq 0 ] ||
  { echo "fid_table.sh: --images $images is not a multiple of --global-batch $global_batch" >&2; exit 2; }
iters=$((images / global_batch))
[ -x "$bin/tandem-train" ] || { echo "fid_table.sh: no tandem-train in $bin (build it, or --bin DIR)" >&2; exit 2; }
mkdir -p "$out"

finished() { [ -f "$1/metrics.jsonl" ] && grep -q '"fid' "$1/metrics.jsonl"; }

# The run folder of a model and seed: fp32's keep the names they always had.
run_name() { [ "$precision" = fp32 ] && echo "$1-seed$2" || echo "$1-$precision-seed$2"; }

for seed in $seeds; do
  for model in $models; do
    run="$out/$(run_name "$model" "$seed")"
    finished "$run" && continue
    echo "fid_table.sh: $model, seed $seed, $precision: $iters iterations of $global_batch images at $np ranks"
    mpirun -np "$np" --oversubscribe "$bin/tandem-train" --model "$model" --data fashion-mnist \
      --global-batch "$global_batch" --iters "$iters" --seed "$seed" --log-every "$iters" \
      --precision "$precision" --fid-every "$iters" --fid-samples 10000 --out "$run" --overwrite \
      > "$run.log" 2>&1 ||
      { tail -20 "$run.log"; echo "fid_table.sh: $model seed $seed ($precision) failed" >&2; exit 1; }
  done
done

python3 - "$out" "$images" "$np" "$precision" $models -- $seeds <<'PY'
import json, os, statistics, sys
out, images, np, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
split = sys.argv.index("--")
models, seeds = sys.argv[5:split], sys.argv[split + 1:]
run_name = lambda model, seed: f"{model}-seed{seed}" if precision == "fp32" else f"{model}-{precision}-seed{seed}"
print(f"| model ({precision}) | FID, seed {', '.join(seeds)} | mean | ms/step ({np} ranks) |")
print("|---|---|---|---|")
for model in models:
    fids, ms = [], []
    for seed in seeds:
        last = {}
        with open(os.path.join(out, run_name(model, seed), "metrics.jsonl")) as f:
            for line in f:
                record = json.loads(line)
                last.update({k: v for k, v in record.items() if v is not None})
        fids.append(last.get("fid_ema", last.get("fid")))
        ms.append(last.get("ms_per_step"))
    shown = ", ".join("n/a" if v is None else f"{v:.1f}" for v in fids)
    mean = statistics.mean(v for v in fids if v is not None) if any(v is not None for v in fids) else None
    step = statistics.mean(v for v in ms if v is not None) if any(v is not None for v in ms) else None
    print(f"| {model} | {shown} | {'n/a' if mean is None else f'{mean:.1f}'} | "
          f"{'n/a' if step is None else f'{step:.0f}'} |")
print(f"\n{images} images shown per run (global batch and iterations as above), 10,000 samples per FID.")
PY
