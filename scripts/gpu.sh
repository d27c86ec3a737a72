#!/usr/bin/env bash
# The GPU checks, for a machine with a GPU (CI has none; there the GPU tests skip):
# the CUDA kernel/runtime suite; at 1, 2 and 3 ranks on the machine's GPUs (ranks share a
# GPU when there are fewer GPUs than ranks, each then its own NCCL host over sockets on
# loopback: runtime/dist/nccl_shared_device.h) the NCCL process-group suite, the Reducer's
# GPU suite (single-process oracle in every wrap style, static and dynamic GANs; overlap)
# and GPU-vs-CPU training; the kernel bandwidth table; the dcgan and dcgan64 steps against
# the floor of their own kernels (kernel_floor_bench); a short dcgan run on the GPU.
#   scripts/gpu.sh                  build in build-gpu/ (TANDEM_CUDA=ON), then run
#   scripts/gpu.sh --prebuilt DIR   run binaries built elsewhere (DIR/bin), no build
#   scripts/gpu.sh --no-setup       build without scripts/setup.sh (a machine with the
#                                   dependencies but no package registry); extra CMake
#                                   arguments in $GPU_CMAKE_ARGS (e.g. -DCatch2_DIR=...)
#   scripts/gpu.sh ... --only NAME  one step: tests | bench | train
# Environment: GPU_RANKS (default "1 2 3"), FLOOR_MODELS (default "dcgan dcgan64"). Logs
# go to $GPU_LOG_DIR (default build-gpu/logs). Exit status: non-zero if a step failed.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

build="$TANDEM_ROOT/build-gpu"
prebuilt=""
only=""
setup=1
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) prebuilt="$2"; build="$2"; shift ;;
    --only) only="$2"; shift ;;
    --no-setup) setup=0 ;;
    *) echo "gpu.sh: unknown argument '$1' (use --prebuilt DIR, --no-setup, --only tests|bench|train)" >&2; exit 2 ;;
  esac
  shift
done
logs="${GPU_LOG_DIR:-$build/logs}"
mkdir -p "$logs"
if [ -z "$prebuilt" ]; then
  [ "$setup" = 1 ] && bash "$TANDEM_ROOT/scripts/setup.sh"
  # shellcheck disable=SC2086  # GPU_CMAKE_ARGS is a list of arguments
  TANDEM_BUILD="$build" tandem_configure_and_build -DTANDEM_CUDA=ON ${GPU_CMAKE_ARGS:-} || exit 1
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
  export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" TANDEM_COLLECTIVE_TIMEOUT_S="${TANDEM_COLLECTIVE_TIMEOUT_S:-120}"
  step cuda_suite "$bin/test_cuda"
  for np in ${GPU_RANKS:-1 2 3}; do
    mpi=(timeout 600 mpirun -np "$np" --oversubscribe)
    step "nccl_group_np$np" "${mpi[@]}" "$bin/dist_test_nccl_process_group"
    step "reducer_cuda_np$np" "${mpi[@]}" "$bin/reducer_test_reducer_cuda" -s "[overlap]"
    step "reducer_cuda_oracle_np$np" "${mpi[@]}" "$bin/reducer_test_reducer_cuda" "[oracle]"
    step "cuda_train_np$np" "${mpi[@]}" "$bin/train_test_cuda_train"
  done
fi
if [ -z "$only" ] || [ "$only" = bench ]; then
  step kernels_bench "$bin/kernels_bench"
  # Each GAN step against the floor of its own convolutions and GEMMs (kernel_floor_bench),
  # for the models of $FLOOR_MODELS this build knows.
  for model in ${FLOOR_MODELS:-dcgan dcgan64}; do
    if "$bin/kernel_floor_bench" --help | grep -- "--model" | tr ' |' '\n\n' | grep -qx "$model"; then
      step "kernel_floor_$model" "$bin/kernel_floor_bench" --model "$model"
    else
      echo "== kernel_floor_$model: skipped (this build has no model $model)"
    fi
  done
fi
if [ -z "$only" ] || [ "$only" = train ]; then
  out="${TRAIN_OUT:-$logs/dcgan}"
  step dcgan_train mpirun -np 1 "$bin/tandem-train" --device cuda --model dcgan --iters "${DCGAN_ITERS:-600}" \
    --batch 64 --log-every 100 --out "$out" --overwrite ${DATA_DIR:+--data-dir "$DATA_DIR"}
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu.sh: failed: ${failed[*]}"
  exit 1
fi
echo "gpu.sh: all steps passed"
