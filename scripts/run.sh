#!/usr/bin/env bash
# The main job on its embedded default: trains the ring8 GAN (a mixture of 8 Gaussians,
# generated, no downloads) on 2 ranks with mpirun, then says where the pictures and
# metrics are. Extra arguments go to tandem-train (e.g. --seed 3, --iters 4000, --out DIR). Each run
# starts afresh in the same folder (--overwrite) unless --resume is among the arguments.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

bash "$TANDEM_ROOT/scripts/setup.sh"
cmake -S "$TANDEM_ROOT" -B "$TANDEM_BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$TANDEM_BUILD" -j "$(nproc)" --target tandem-train

out="${TANDEM_RUN_OUT:-$TANDEM_ROOT/runs/ring8}"
fresh=(--overwrite)
previous=""
for arg in "$@"; do  # a later --out replaces run.sh's (tandem-train keeps the last), and is reported
  [ "$arg" = "--resume" ] && fresh=()
  [ "$previous" = "--out" ] && out="$arg"
  case "$arg" in --out=*) out="${arg#--out=}" ;; esac
  previous="$arg"
done
mpirun -np 2 --oversubscribe "$TANDEM_BUILD/bin/tandem-train" \
  --model ring8-mlp --iters 20000 --batch 256 --lr 2e-4 --log-every 2000 --out "$out" "${fresh[@]}" "$@"
echo "run.sh: samples scatter and metrics are in $out (samples-*.png, metrics.jsonl)"
