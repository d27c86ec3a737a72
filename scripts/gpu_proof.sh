#!/usr/bin/env bash
# The GPU proof: every GPU path of tandem run and timed in one prepared command, for a GPU
# machine lent for minutes at a time (one H100 or H200, 16 cores, no network, no Catch2,
# no Fashion-MNIST; DESIGN.md §6). Each step is bounded by `timeout`, logged, and never
# stops the others; the last lines are one table: each step's pass/fail and time, and the
# measured figures against their targets.
#   scripts/gpu_proof.sh --pack       on the CPU machine: build the proof's targets for sm_90
#                                     (build-gpu/) and copy them, stripped, with what the GPU
#                                     machine lacks (the Fashion-MNIST files) into .gpu-carry/
#                                     (ignored; carry it: the size is printed, the limit 64 MiB)
#   scripts/gpu_proof.sh --dry-run    build the proof's targets with CUDA on here and print
#                                     the plan and its time estimate; run nothing
#   scripts/gpu_proof.sh              on the GPU machine: run it all, with the carried
#                                     binaries when every library they need is there, else
#                                     after building (-j$(nproc), with the carry's Catch2)
# As it goes it appends each step's verdict to $OUT/progress.txt (a call that times out
# still returns it), and at the end writes $OUT/summary.md and $OUT/logs.tar.gz.
# Environment: PROOF_RANKS (default "1 2 3"), PROOF_LOG_DIR (default build-gpu/proof), OUT,
# PROOF_BUDGET_S (default 480: a step whose estimate would end past it is not started).
# Exit status: non-zero if a step failed (the table says which).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

carry="$TANDEM_ROOT/.gpu-carry"
build="$TANDEM_ROOT/build-gpu"
mode=run
case "${1:-}" in
  --pack) mode=pack ;;
  --dry-run) mode=dry ;;
  "") ;;
  *) echo "gpu_proof.sh: unknown argument '$1' (use --pack, --dry-run, or nothing)" >&2; exit 2 ;;
esac

# The targets the proof runs, and nothing else (a full build costs minutes of a short lease).
targets=(test_cuda reducer_test_reducer_cuda train_test_cuda_train kernel_floor_bench tandem-train)
# Hopper (sm_90) only: one architecture compiles in a fraction of the time, and the carried
# binaries hold no other.
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON -DTANDEM_INSTALL=OFF -DCMAKE_CUDA_ARCHITECTURES=90)
if [ -d "$carry/usr/lib/cmake/Catch2" ]; then
  cmake_args+=(-DCatch2_DIR="$carry/usr/lib/cmake/Catch2")
fi
logs="${PROOF_LOG_DIR:-$build/proof}"
ranks="${PROOF_RANKS:-1 2 3}"
mkdir -p "$logs"

build_targets() {
  local t0=$(date +%s)
  cmake -S "$TANDEM_ROOT" -B "$build" "${cmake_args[@]}" > "$logs/configure.log" 2>&1 ||
    { tail -n 30 "$logs/configure.log"; return 1; }
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > "$logs/build.log" 2>&1 ||
    { grep -m 20 -E "error|Error" "$logs/build.log"; return 1; }
  echo "gpu_proof.sh: built ${targets[*]} in $(( $(date +%s) - t0 )) s on $(nproc) cores"
}

if [ "$mode" = pack ]; then
  bash "$TANDEM_ROOT/scripts/setup.sh"
  build_targets || { echo "gpu_proof.sh: the build failed (logs in $logs)"; exit 1; }
  rm -rf "$carry"
  mkdir -p "$carry/bin" "$carry/fashion-mnist"
  for t in "${targets[@]}"; do strip -o "$carry/bin/$t" "$build/bin/$t"; done
  git -C "$TANDEM_ROOT" rev-parse HEAD > "$carry/bin/COMMIT" 2>/dev/null || true
  git -C "$TANDEM_ROOT" diff --quiet HEAD 2>/dev/null || echo "with uncommitted changes" >> "$carry/bin/COMMIT"
  # xz shrinks the binaries about fourfold (31 MB to ~8): room under the carry's limit.
  tar -cJf "$carry/bin.tar.xz" -C "$carry" bin && rm -rf "$carry/bin"
  cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$carry/fashion-mnist/"
  # Libraries the GPU machine's image was seen to lack (2026-11-28: libjpeg.so.62), found
  # through LD_LIBRARY_PATH there.
  mkdir -p "$carry/lib"
  cp -L /usr/lib/x86_64-linux-gnu/libjpeg.so.62 "$carry/lib/"
  # Debian's Catch2 (~0.8 MB), for the fallback: building on the GPU machine.
  mkdir -p "$carry/usr/include" "$carry/usr/lib/cmake"
  cp -r /usr/include/catch2 "$carry/usr/include/"
  cp -r /usr/lib/cmake/Catch2 "$carry/usr/lib/cmake/"
  cp /usr/lib/libCatch2WithMain.a "$carry/usr/lib/"  # its CMake targets name it
  echo "gpu_proof.sh: packed $(du -sh "$carry" | cut -f1) into $carry ($(du -sh "$carry/bin.tar.xz" | cut -f1) of binaries in xz;" \
    "the tree with it: $(( ($(du -sb "$carry" | cut -f1) + $(git -C "$TANDEM_ROOT" ls-files -z | du -cb --files0-from=- | tail -n 1 | cut -f1)) / 1048576 )) MiB of 64)"
  exit 0
fi

data_dir=/usr/share/datasets/fashion-mnist
[ -d "$carry/fashion-mnist" ] && data_dir="$carry/fashion-mnist"
# The GPU tests look for the dataset at Debian's path only: link the carried copy there
# (else their mlp and dcgan cases are skipped).
if [ "$mode" = run ] && [ ! -e /usr/share/datasets/fashion-mnist ] && [ -d "$carry/fashion-mnist" ]; then
  mkdir -p /usr/share/datasets && ln -s "$carry/fashion-mnist" /usr/share/datasets/fashion-mnist ||
    echo "gpu_proof.sh: could not link $carry/fashion-mnist at /usr/share/datasets: the tests' image cases skip"
fi

# The plan: name, timeout (s), estimate (s, from the last GPU figures), command. A name
# ending in "_must_fail" passes when its command fails (a test shown to catch a defect).
plan=()
add() { plan+=("$1|$2|$3|${*:4}"); }
train() {  # name timeout estimate np model batch iters [flags...]
  local name=$1 limit=$2 estimate=$3 np=$4 model=$5 batch=$6 iters=$7
  add "$name" "$limit" "$estimate" mpirun -np "$np" --oversubscribe "$bin/tandem-train" --model "$model" \
    --batch "$batch" --iters "$iters" "${train_common[@]}" --out "$logs/$name" "${@:8}"
}
make_plan() {  # from $bin; the most telling steps first (a step that would start past the budget is skipped)
  # Estimates: the times seen on an H200 (2026-11-28), rounded up.
  plan=()
  train_common=(--device cuda --overwrite --data-dir "$data_dir")
  fault="env ${TANDEM_GRAPH_FAULT_ENV:-TANDEM_FAULT_GRAPH_SCALARS_FROM_POOL}=1"
  add cuda_graphs_unit 60 2 "$bin/test_cuda" "[cuda-graphs]"
  add cuda_graphs_fault_must_fail 60 2 $fault "$bin/test_cuda" "[cuda-graphs]"
  add cuda_graphs_np1 90 20 mpirun -np 1 --oversubscribe "$bin/train_test_cuda_train" "[cuda-graphs]"
  add floor_dcgan64_on 60 13 "$bin/kernel_floor_bench" --model dcgan64 --cudnn on
  add floor_dcgan_on 60 4 "$bin/kernel_floor_bench" --model dcgan --cudnn on
  # Timed (no trace): eager and CUDA graphs.
  train train_dcgan_eager 60 6 1 dcgan 64 600 --log-every 100
  train train_dcgan_graphs 60 4 1 dcgan 64 600 --log-every 100 --cuda-graphs
  train train_dcgan64_eager 90 12 1 dcgan64 128 300 --log-every 100
  train train_dcgan64_graphs 90 6 1 dcgan64 128 300 --log-every 100 --cuda-graphs
  # Reduced precision (autograd/precision.h): cuBLAS's 16-bit GEMMs and the 16-bit
  # convolutions (im2col + those GEMMs, kernels/cuda/conv_cuda.h) against the CPU's, then
  # dcgan64's step in bf16 (eager and graphed) and fp16 (eager: its loss scale is refused in a
  # graph) against the fp32 steps above (whose convolutions are cuDNN's, in FMA float32).
  add reduced_precision_unit 90 2 "$bin/test_cuda" "[reduced-precision]"
  train train_dcgan64_bf16_eager 90 12 1 dcgan64 128 300 --log-every 100 --precision bf16
  train train_dcgan64_bf16_graphs 90 6 1 dcgan64 128 300 --log-every 100 --precision bf16 --cuda-graphs
  train train_dcgan64_fp16_eager 90 12 1 dcgan64 128 300 --log-every 100 --precision fp16
  # Counted (--trace: the host cost per step, and NCCL's spans against the backward).
  train trace_dcgan_np1 60 4 1 dcgan 64 100 --log-every 50 --trace "$logs/trace_dcgan_np1.json"
  local estimate=5
  for np in $ranks; do
    train "trace_dcgan64_np$np" 90 $estimate "$np" dcgan64 128 60 --log-every 20 --trace "$logs/trace_dcgan64_np$np.json"
    estimate=16
  done
  for np in $ranks; do
    [ "$np" = 1 ] || add "cuda_graphs_np$np" 90 30 mpirun -np "$np" --oversubscribe "$bin/train_test_cuda_train" "[cuda-graphs]"
  done
  # The suites the first proof passed: again, as regression checks.
  for np in $ranks; do
    add "reducer_cuda_np$np" 120 10 mpirun -np "$np" --oversubscribe "$bin/reducer_test_reducer_cuda"
  done
  add cuda_suite 120 60 "$bin/test_cuda"
  for model in dcgan64 dcgan; do
    for cudnn in benchmark off; do
      add "floor_${model}_$cudnn" 60 13 "$bin/kernel_floor_bench" --model "$model" --cudnn "$cudnn"
    done
  done
}
bin="$build/bin"
if [ "$mode" = run ] && [ -f "$carry/bin.tar.xz" ]; then
  rm -rf "$carry/bin" && tar -xJf "$carry/bin.tar.xz" -C "$carry"
fi
[ "$mode" = run ] && [ -x "$carry/bin/tandem-train" ] && bin="$carry/bin"
make_plan

print_plan() {
  local total=0 bound=0
  echo "gpu_proof.sh: plan (timeout / estimate in s):"
  for entry in "${plan[@]}"; do
    IFS='|' read -r name limit estimate command <<< "$entry"
    printf '  %-30s %4s / %3s  %s\n' "$name" "$limit" "$estimate" "$command"
    total=$((total + estimate)); bound=$((bound + limit))
  done
  echo "gpu_proof.sh: steps estimated at $total s (bounded by $bound s); building here instead of carrying" \
    "the binaries adds ~130 s on 16 cores"
}

if [ "$mode" = dry ]; then
  build_targets || { echo "gpu_proof.sh: the build failed (logs in $logs)"; exit 1; }
  for t in "${targets[@]}"; do
    [ -x "$bin/$t" ] || { echo "gpu_proof.sh: $bin/$t was not built"; exit 1; }
  done
  print_plan
  exit 0
fi

out_dir="${OUT:-$logs}"
mkdir -p "$out_dir"
progress="$out_dir/progress.txt"
note() { echo "$*" | tee -a "$progress"; }
: > "$progress"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$progress"
note "gpu_proof.sh: commit $(git -C "$TANDEM_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cores"
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" TANDEM_COLLECTIVE_TIMEOUT_S="${TANDEM_COLLECTIVE_TIMEOUT_S:-60}"
if [ "$bin" = "$carry/bin" ]; then
  [ -d "$carry/lib" ] && export LD_LIBRARY_PATH="$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  missing=$(for t in "${targets[@]}"; do ldd "$bin/$t" 2>&1 | grep "not found"; done | sort -u)
  if [ -n "$missing" ]; then
    note "gpu_proof.sh: the carried binaries miss libraries here: $(echo $missing); building instead"
    bin="$build/bin"
    make_plan
  else
    note "gpu_proof.sh: running the carried binaries ($(head -c 12 "$carry/bin/COMMIT" 2>/dev/null)$(sed -n 2p "$carry/bin/COMMIT" 2>/dev/null | sed 's/^/, /'))"
  fi
fi
if [ "$bin" = "$build/bin" ]; then
  build_targets 2>&1 | tee -a "$progress" || { note "gpu_proof.sh: the build failed (logs in $logs)"; exit 1; }
fi
print_plan

results=()
failed=0
budget="${PROOF_BUDGET_S:-480}"  # seconds of steps; the lease's time is short
steps_start=$(date +%s)
set -f  # the commands were joined with spaces: split them again, but expand no "[tag]" as a glob
for entry in "${plan[@]}"; do
  IFS='|' read -r name limit estimate command <<< "$entry"
  if [ $(( $(date +%s) - steps_start + estimate )) -gt "$budget" ]; then
    results+=("$name|not run (PROOF_BUDGET_S $budget)|0")
    note "$(printf '%-30s not run: past PROOF_BUDGET_S=%s' "$name" "$budget")"
    continue
  fi
  t0=$(date +%s%N)
  # shellcheck disable=SC2086  # joined with spaces above; no argument holds one
  timeout -k 5 "$limit" $command > "$logs/$name.log" 2>&1
  status=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [[ "$name" == *_must_fail ]]; then
    if [ "$status" != 0 ] && [ "$status" != 124 ] && [ "$status" != 137 ]; then verdict="pass (failed as it must: $status)"
    else verdict="FAIL(it passed or timed out: $status)"; failed=1; fi
  elif [ "$status" = 0 ]; then verdict=pass
  else
    verdict="FAIL($status)"; failed=1
    tail -n 25 "$logs/$name.log" | cut -c1-300 | tee -a "$progress"
  fi
  results+=("$name|$verdict|$ms")
  note "$(printf '%-30s %-28s %6d.%03d s' "$name" "$verdict" $((ms / 1000)) $((ms % 1000)))"
done
set +f

# The figures: ms per step from tandem-train's last log line, step/floor from the bench.
last_ms() { grep -o '[0-9.]* ms/step' "$logs/$1.log" 2>/dev/null | tail -n 1 | cut -d' ' -f1; }
floor_ratio() { grep -o 'step / floor = [0-9.]*' "$logs/$1.log" 2>/dev/null | sed -n "${2:-1}p" | awk '{print $NF}'; }
floor_us() { grep -o 'kernel floor (sum of calls x us): *[0-9.]*' "$logs/$1.log" 2>/dev/null | awk '{print $NF}'; }
per_step() { grep -m 1 -F "$2" "$logs/$1.log" 2>/dev/null | awk '{print $(NF-($3+0))}'; }
{
  echo
  echo "| step | result | time (s) |"
  echo "|---|---|---|"
  for r in "${results[@]}"; do
    IFS='|' read -r name verdict ms <<< "$r"
    printf '| %s | %s | %d.%03d |\n' "$name" "$verdict" $((ms / 1000)) $((ms % 1000))
  done
  echo
  echo "| figure | measured | target |"
  echo "|---|---|---|"
  echo "| dcgan 28x28, batch 64, 1 rank, eager (ms/step) | $(last_ms train_dcgan_eager) | <= 1.5 |"
  echo "| ... CUDA graphs (ms/step) | $(last_ms train_dcgan_graphs) | <= 1.0 |"
  echo "| dcgan64, batch 128, eager (ms/step) | $(last_ms train_dcgan64_eager) | <= 1.3 x floor |"
  echo "| ... CUDA graphs (ms/step) | $(last_ms train_dcgan64_graphs) | |"
  echo "| dcgan64, batch 128, bf16 eager / CUDA graphs (ms/step) | $(last_ms train_dcgan64_bf16_eager) / $(last_ms train_dcgan64_bf16_graphs) | <= 0.6 x fp32's |"
  echo "| dcgan64, batch 128, fp16 eager (ms/step) | $(last_ms train_dcgan64_fp16_eager) | <= 0.6 x fp32's |"
  echo "| dcgan64 kernel floor, cuDNN on (us) | $(floor_us floor_dcgan64_on) | |"
  for cudnn in on benchmark off; do
    echo "| dcgan64 bench step / kernel floor, cuDNN $cudnn (losses read every step) | $(floor_ratio "floor_dcgan64_$cudnn") ($(floor_ratio "floor_dcgan64_$cudnn" 2)) | <= 1.3 |"
    echo "| dcgan bench step / kernel floor, cuDNN $cudnn (losses read every step) | $(floor_ratio "floor_dcgan_$cudnn") ($(floor_ratio "floor_dcgan_$cudnn" 2)) | |"
  done
  for name in trace_dcgan_np1 trace_dcgan64_np1 trace_dcgan64_np2 trace_dcgan64_np3; do
    echo "| $name: host waits per step (log points aside) | $(per_step "$name" "host waits for the device" 0) | <= 1 |"
    echo "| $name: kernel launches per step | $(per_step "$name" "kernel launches" 0) | |"
    echo "| $name: cudaMalloc per step | $(per_step "$name" "cudaMalloc calls" 0) | 0 |"
  done
  echo
  for name in trace_dcgan64_np1 trace_dcgan64_np2 trace_dcgan64_np3; do
    echo "$name:"; grep -E "^rank 0 (trace:|host cost)|/step " "$logs/$name.log" 2>/dev/null | head -n 12
  done
  for name in floor_dcgan_on floor_dcgan64_on; do
    echo "$name:"; grep -E "^# (host|  |    )" "$logs/$name.log" 2>/dev/null | grep -v "^#   *[a-z]*conv\|gemm" | head -n 20
  done
} | tee "$out_dir/summary.md"
tar -czf "$out_dir/logs.tar.gz" -C "$logs" --exclude='*.json' --exclude='*.ckpt' --exclude='*.safetensors' . 2>/dev/null
[ "$failed" = 0 ] && note "gpu_proof.sh: all steps passed" || note "gpu_proof.sh: some steps failed (logs in $logs)"
exit "$failed"
