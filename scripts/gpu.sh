#!/usr/bin/env bash
# The GPU checks, for a machine with a GPU (CI has none; there the GPU tests skip):
# the CUDA kernel/runtime suite, the NCCL process-group and GPU-training suites at world
# size 1, the kernel bandwidth table, and a short dcgan run of tandem-train on the GPU.
#   scripts/gpu.sh                  build in build-gpu/ (TANDEM_CUDA=ON), then run
#   scripts/gpu.sh --prebuilt DIR   run binaries built elsewhere (DIR/bin), no build
#   scripts/gpu.sh ... --only NAME  one step: tests | bench | train
# Logs go to $GPU_LOG_DIR (default build-gpu/logs). Exit status: non-zero if a step failed.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

build="$TANDEM_ROOT/build-gpu"
prebuilt=""
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) prebuilt="$2"; build="$2"; shift ;;
    --only) only="$2"; shift ;;
    *) echo "gpu.sh: unknown argument '$1' (use --prebuilt DIR, --only tests|bench|train)" >&2; exit 2 ;;
  esac
  shift
done
logs="${GPU_LOG_DIR:-$build/logs}"
mkdir -p "$logs"
if [ -z "$prebuilt" ]; then
  bash "$TANDEM_ROOT/scripts/setup.sh"
  TANDEM_BUILD="$build" tandem_configure_and_build -DTANDEM_CUDA=ON || exit 1
fi
bin="$build/bin"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

failed=()
step() {  # name command...
  local name="$1"; shift
  echo "== $name: $*"
  local t0=$(date +%s%N)
  if "$@" > "$logs/$name.log" 2>&1; then
    echo "== $name: ok ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
  else
    echo "== $name: FAILED (exit $?); last lines of $logs/$name.log:"
    failed+=("$name")
  fi
  tail -n 25 "$logs/$name.log"
}

if [ -z "$only" ] || [ "$only" = tests ]; then
  step cuda_suite "$bin/test_cuda"
  step nccl_group mpirun -np 1 "$bin/runtime_test_nccl_process_group"
  step cuda_train mpirun -np 1 "$bin/train_test_cuda_train"
fi
if [ -z "$only" ] || [ "$only" = bench ]; then
  step kernels_bench "$bin/kernels_bench"
fi
if [ -z "$only" ] || [ "$only" = train ]; then
  out="${TRAIN_OUT:-$logs/dcgan}"
  step dcgan_train mpirun -np 1 "$bin/tandem-train" --device cuda --model dcgan --iters "${DCGAN_ITERS:-600}" \
    --batch 64 --log-every 100 --out "$out" ${DATA_DIR:+--data-dir "$DATA_DIR"}
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu.sh: failed: ${failed[*]}"
  exit 1
fi
echo "gpu.sh: all steps passed"
