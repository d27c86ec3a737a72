#!/usr/bin/env bash
# The GPU proof: every GPU path of tandem run and timed in one prepared command, for a GPU
# machine lent for minutes at a time (one H100 or H200, 16 cores, no network, no Catch2,
# no Fashion-MNIST; DESIGN.md §6). Each step is bounded by `timeout`, logged, and never
# stops the others; the last lines are one table: each step's pass/fail and time, and the
# measured figures against their targets.
#   scripts/gpu_proof.sh --pack       on the CPU machine: copy what the GPU machine lacks
#                                     (Debian's Catch2, the Fashion-MNIST files) into
#                                     .gpu-carry/ (ignored; carried with the tree, ~32 MB)
#   scripts/gpu_proof.sh --dry-run    build the proof's targets with CUDA on here and print
#                                     the plan and its time estimate; run nothing
#   scripts/gpu_proof.sh              on the GPU machine: build (-j$(nproc)) and run it all
# Environment: PROOF_RANKS (default "1 2 3"), PROOF_LOG_DIR (default build-gpu/proof).
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

if [ "$mode" = pack ]; then
  bash "$TANDEM_ROOT/scripts/setup.sh"
  rm -rf "$carry"
  mkdir -p "$carry/usr/include" "$carry/usr/lib/cmake" "$carry/fashion-mnist"
  cp -r /usr/include/catch2 "$carry/usr/include/"
  cp -r /usr/lib/cmake/Catch2 "$carry/usr/lib/cmake/"
  cp /usr/lib/libCatch2WithMain.a "$carry/usr/lib/"
  cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$carry/fashion-mnist/"
  echo "gpu_proof.sh: packed $(du -sh "$carry" | cut -f1) into $carry (carry it: .gpu-carry)"
  exit 0
fi

# The targets the proof runs, and nothing else (a full build costs minutes of a short lease).
targets=(test_cuda reducer_test_reducer_cuda train_test_cuda_train kernel_floor_bench tandem-train)
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON -DTANDEM_INSTALL=OFF)
# Hopper (sm_90) only on the GPU machine: one architecture compiles in half the time.
[ "$mode" = run ] && cmake_args+=(-DCMAKE_CUDA_ARCHITECTURES=90)
if [ -d "$carry/usr/lib/cmake/Catch2" ]; then
  cmake_args+=(-DCatch2_DIR="$carry/usr/lib/cmake/Catch2")
fi
data_dir=/usr/share/datasets/fashion-mnist
[ -d "$carry/fashion-mnist" ] && data_dir="$carry/fashion-mnist"
# The GPU tests look for the dataset at Debian's path only: link the carried copy there
# (else their mlp and dcgan cases are skipped).
if [ "$mode" = run ] && [ ! -e /usr/share/datasets/fashion-mnist ] && [ -d "$carry/fashion-mnist" ]; then
  mkdir -p /usr/share/datasets && ln -s "$carry/fashion-mnist" /usr/share/datasets/fashion-mnist ||
    echo "gpu_proof.sh: could not link $carry/fashion-mnist at /usr/share/datasets: the tests' image cases skip"
fi
logs="${PROOF_LOG_DIR:-$build/proof}"
ranks="${PROOF_RANKS:-1 2 3}"

# The plan: name, timeout (s), estimate (s, from the last GPU figures), command.
plan=()
add() { plan+=("$1|$2|$3|${*:4}"); }
bin="$build/bin"
add cuda_suite 150 60 "$bin/test_cuda"
for np in $ranks; do
  add "reducer_cuda_np$np" 150 30 mpirun -np "$np" --oversubscribe "$bin/reducer_test_reducer_cuda"
done
for np in $ranks; do
  add "cuda_graphs_np$np" 90 15 mpirun -np "$np" --oversubscribe "$bin/train_test_cuda_train" "[cuda-graphs]"
done
for model in dcgan dcgan64; do
  for cudnn in on benchmark off; do
    add "floor_${model}_$cudnn" 60 8 "$bin/kernel_floor_bench" --model "$model" --cudnn "$cudnn"
  done
done
train_common=(--device cuda --log-every 100 --overwrite --data-dir "$data_dir")
add train_dcgan_eager 60 10 mpirun -np 1 "$bin/tandem-train" --model dcgan --batch 64 --iters 600 \
  "${train_common[@]}" --out "$logs/dcgan_eager"
add train_dcgan_graphs 60 10 mpirun -np 1 "$bin/tandem-train" --model dcgan --batch 64 --iters 600 \
  --cuda-graphs "${train_common[@]}" --out "$logs/dcgan_graphs"
add train_dcgan64_eager 90 20 mpirun -np 1 "$bin/tandem-train" --model dcgan64 --batch 128 --iters 300 \
  "${train_common[@]}" --out "$logs/dcgan64_eager"
add train_dcgan64_graphs 90 20 mpirun -np 1 "$bin/tandem-train" --model dcgan64 --batch 128 --iters 300 \
  --cuda-graphs "${train_common[@]}" --out "$logs/dcgan64_graphs"

print_plan() {
  local total=0 bound=0
  echo "gpu_proof.sh: plan (timeout / estimate in s):"
  for entry in "${plan[@]}"; do
    IFS='|' read -r name limit estimate command <<< "$entry"
    printf '  %-22s %4s / %3s  %s\n' "$name" "$limit" "$estimate" "$command"
    total=$((total + estimate)); bound=$((bound + limit))
  done
  echo "gpu_proof.sh: steps estimated at $total s (bounded by $bound s), plus the build (~100 s on 16 cores)"
}

build_targets() {
  local t0=$(date +%s)
  cmake -S "$TANDEM_ROOT" -B "$build" "${cmake_args[@]}" > "$logs/configure.log" 2>&1 ||
    { tail -n 30 "$logs/configure.log"; return 1; }
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > "$logs/build.log" 2>&1 ||
    { grep -m 20 -E "error|Error" "$logs/build.log"; return 1; }
  echo "gpu_proof.sh: built ${targets[*]} in $(( $(date +%s) - t0 )) s on $(nproc) cores"
}

mkdir -p "$logs"
if [ "$mode" = dry ]; then
  build_targets || { echo "gpu_proof.sh: the build failed (logs in $logs)"; exit 1; }
  for t in "${targets[@]}"; do
    [ -x "$bin/$t" ] || { echo "gpu_proof.sh: $bin/$t was not built"; exit 1; }
  done
  print_plan
  exit 0
fi

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
echo "gpu_proof.sh: commit $(git -C "$TANDEM_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" TANDEM_COLLECTIVE_TIMEOUT_S="${TANDEM_COLLECTIVE_TIMEOUT_S:-60}"
build_targets || { echo "gpu_proof.sh: the build failed (logs in $logs)"; exit 1; }
print_plan

results=()
failed=0
set -f  # the commands were joined with spaces: split them again, but expand no "[tag]" as a glob
for entry in "${plan[@]}"; do
  IFS='|' read -r name limit estimate command <<< "$entry"
  echo "== $name"
  t0=$(date +%s%N)
  # shellcheck disable=SC2086  # joined with spaces above; no argument holds one
  timeout -k 5 "$limit" $command > "$logs/$name.log" 2>&1
  status=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ "$status" = 0 ]; then verdict=pass; else verdict="FAIL($status)"; failed=1; tail -n 15 "$logs/$name.log"; fi
  results+=("$name|$verdict|$ms")
done
set +f

# The figures: ms per step from tandem-train's last log line, step/floor from the bench.
last_ms() { grep -o '[0-9.]* ms/step' "$logs/$1.log" 2>/dev/null | tail -n 1 | cut -d' ' -f1; }
floor_ratio() { grep -o 'step / floor = [0-9.]*' "$logs/$1.log" 2>/dev/null | tail -n 1 | awk '{print $NF}'; }
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
echo "| dcgan 28x28, batch 64, 1 rank, eager (ms/step) | $(last_ms train_dcgan_eager) | (2.8 before cuDNN and graphs) |"
echo "| dcgan 28x28, batch 64, 1 rank, CUDA graphs (ms/step) | $(last_ms train_dcgan_graphs) | <= 1.0 |"
echo "| dcgan64, batch 128, eager (ms/step) | $(last_ms train_dcgan64_eager) | |"
echo "| dcgan64, batch 128, CUDA graphs (ms/step) | $(last_ms train_dcgan64_graphs) | |"
for cudnn in on benchmark off; do
  echo "| dcgan64 step / kernel floor, cuDNN $cudnn | $(floor_ratio "floor_dcgan64_$cudnn") | <= 1.3 |"
  echo "| dcgan step / kernel floor, cuDNN $cudnn | $(floor_ratio "floor_dcgan_$cudnn") | |"
done
[ "$failed" = 0 ] && echo "gpu_proof.sh: all steps passed" || echo "gpu_proof.sh: some steps failed (logs in $logs)"
exit "$failed"
