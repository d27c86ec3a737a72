#!/usr/bin/env bash
# tandem-train's optimiser flags and its launch: --lr-schedule, --clip-grad, --accumulate,
# --detect-anomalous-params, and a job started by torchrun.
#   optim_flags_test.sh <mpiexec> <tandem-train> <work dir>
# 1. Bad values exit with status 2, naming the flag, before MPI starts.
# 2. torchrun's variables without mpirun: the process ends at once, non-zero, naming
#    torchrun, mpirun and srun.
# 3. A run with a schedule, clipping and accumulation at 2 ranks, resumed from its
#    checkpoint at iteration 6 to 12, ends with the very bytes of the uninterrupted run's checkpoint; its log
#    holds the learning rate and the norms; a resume with another schedule is refused.
# 4. --accumulate 2 synchronises about half the bytes per iteration of --accumulate 1.
# 5. --detect-anomalous-params names the dynamic mlp's unused D layer (needs Fashion-MNIST).
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=optim_flags_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
rm -rf "$work"; mkdir -p "$work"

# 1. expect_usage_error <message> args...
expect_usage_error() {
  local message="$1"; shift
  local log="$work/usage.log" rc
  "$train" "$@" --out "$work/usage" > "$log" 2>&1
  rc=$?
  [ $rc -eq 2 ] || { cat "$log"; fail "$*: exit status $rc, not 2"; }
  grep -qF -- "$message" "$log" || { cat "$log"; fail "$*: no '$message'"; }
}
expect_usage_error "--clip-grad must be a finite number >= 0" --clip-grad -1
expect_usage_error "--clip-grad needs a number, got 'x'" --clip-grad x
expect_usage_error "--clip-grad-type must be one of 2|inf, got '1'" --clip-grad 1 --clip-grad-type 1
expect_usage_error "--clip-grad-type goes with --clip-grad" --clip-grad-type inf
expect_usage_error "--lr-schedule: learning-rate schedule 'cosine:0': cosine iterations must be a whole number >= 1" \
  --lr-schedule cosine:0
expect_usage_error "--lr-schedule: learning-rate schedule 'warmup:5+linear:9': unknown schedule 'linear'" \
  --lr-schedule warmup:5+linear:9
expect_usage_error "--accumulate must be at least 1, got 0" --accumulate 0
expect_usage_error "--accumulate 2 does not go with --n-critic 2" --accumulate 2 --n-critic 2
expect_usage_error "--ckpt-every 3 is not a multiple of --accumulate 2" --accumulate 2 --ckpt-every 3
[ ! -e "$work/usage" ] || fail "a refused command line created its --out"

# 2. torchrun's environment for rank 0 of 2, no MPI launcher.
log="$work/torchrun.log"
started=$(date +%s)
env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 \
  "$train" --iters 2 --out "$work/torchrun" > "$log" 2>&1
rc=$?
seconds=$(( $(date +%s) - started ))
[ $rc -ne 0 ] || { cat "$log"; fail "torchrun: exit status 0"; }
[ $seconds -lt 10 ] || { cat "$log"; fail "torchrun: took ${seconds} s to end"; }
for word in "torchrun is not a launcher for tandem" "mpirun -np 2 " "srun --ntasks 2 "; do
  grep -qF -- "$word" "$log" || { cat "$log"; fail "torchrun: no '$word'"; }
done
if grep -q "^iter " "$log"; then cat "$log"; fail "torchrun: training ran"; fi

# 3. Schedule, clipping and accumulation; resume mid-schedule.
args=(--batch 8 --log-every 2 --ckpt-every 6 --lr-schedule warmup:4:0.1+multistep:5,9:0.5 --clip-grad 0.05
      --accumulate 2)
"$mpiexec" -np 2 --oversubscribe "$train" "${args[@]}" --iters 12 --out "$work/straight" > "$work/straight.log" 2>&1 ||
  { cat "$work/straight.log"; fail "the uninterrupted run failed"; }
# The run stopped at 6: its checkpoint there (a run to 6 writes the same bytes).
mkdir -p "$work/resumed" && cp "$work/straight/ckpt-000006.safetensors" "$work/resumed/" ||
  fail "no checkpoint at iteration 6"
"$mpiexec" -np 2 --oversubscribe "$train" "${args[@]}" --iters 12 --resume --out "$work/resumed" \
  > "$work/second.log" 2>&1 || { cat "$work/second.log"; fail "the resumed half failed"; }
expect_resumed_from "$work/second.log" "$work/resumed/ckpt-000006.safetensors"
expect_same_checkpoint "$work/straight/ckpt-000012.safetensors" "$work/resumed/ckpt-000012.safetensors"
# The log at 10 iterations holds the rate of iteration 9: 0.0002 * 0.5^2 (milestones 5 and 9
# passed); at 2 that of iteration 1: 0.0002 * (0.1 + 0.9 * 1/4), in the warm-up.
grep -q '"iteration": 10, .*"lr": 5e-05, "grad_norm_d": [0-9.e-]*, "grad_norm_g": [0-9.e-]*' \
  "$work/straight/metrics.jsonl" || { cat "$work/straight/metrics.jsonl"; fail "no lr 5e-05 and norms at iteration 10"; }
grep -q '"iteration": 2, .*"lr": 6.5e-05,' "$work/straight/metrics.jsonl" ||
  { cat "$work/straight/metrics.jsonl"; fail "no warm-up lr 6.5e-05 at iteration 2"; }
"$mpiexec" -np 2 --oversubscribe "$train" "${args[@]/multistep:5,9:0.5/multistep:5:0.5}" --iters 14 --resume \
  --out "$work/resumed" > "$work/other_schedule.log" 2>&1 && fail "a resume with another --lr-schedule ran"
grep -qF -- "written with --lr-schedule warmup:4:0.1+multistep:5,9:0.5, this run has --lr-schedule warmup:4:0.1+multistep:5:0.5" \
  "$work/other_schedule.log" || { cat "$work/other_schedule.log"; fail "the other schedule was not named"; }

# 4. Accumulation halves the bytes per iteration (one averaging per 2 iterations).
bytes() { sed -n 's/.*"iteration": 8, .*"bytes_per_step": \([0-9]*\).*/\1/p' "$1/metrics.jsonl"; }
for k in 1 2; do
  "$mpiexec" -np 2 --oversubscribe "$train" --batch 8 --iters 8 --log-every 8 --accumulate $k --out "$work/acc$k" \
    > "$work/acc$k.log" 2>&1 || { cat "$work/acc$k.log"; fail "--accumulate $k failed"; }
done
b1=$(bytes "$work/acc1"); b2=$(bytes "$work/acc2")
echo "bytes per iteration: --accumulate 1: $b1, --accumulate 2: $b2"
[ -n "$b1" ] && [ -n "$b2" ] && [ $((b2 * 2)) -eq "$b1" ] || fail "--accumulate 2 sent $b2 bytes per iteration, not half of $b1"

# 5. An unused layer named.
data_dir=/usr/share/datasets/fashion-mnist
if [ -f "$data_dir/train-images-idx3-ubyte.gz" ]; then
  for flag in "" --detect-anomalous-params; do
    "$mpiexec" -np 2 --oversubscribe "$train" --model mlp --dynamic --batch 8 --iters 2 $flag --out "$work/anomalous$flag" \
      > "$work/anomalous$flag.log" 2>&1 || { cat "$work/anomalous$flag.log"; fail "--dynamic $flag failed"; }
  done
  for rank in 0 1; do
    grep -qF "[rank $rank] detect_anomalous_params: backward 1 of mlp (dynamic) did not reach 2 parameters that require grad, in the parts it reached: 'discriminator.extra.weight'" \
      "$work/anomalous--detect-anomalous-params.log" || { cat "$work/anomalous--detect-anomalous-params.log"; fail "rank $rank did not name the unused layer"; }
  done
  if grep -q detect_anomalous_params "$work/anomalous.log"; then cat "$work/anomalous.log"; fail "warned without the flag"; fi
else
  echo "optim_flags_test: part 5 skipped: no Fashion-MNIST in $data_dir"
fi
echo "optim_flags_test: PASS"
