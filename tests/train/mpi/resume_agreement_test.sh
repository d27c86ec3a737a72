#!/usr/bin/env bash
# Ranks agree on the resume checkpoint: rank 0 chooses, every rank loads its choice.
#   resume_agreement_test.sh <mpiexec> <tandem-train> <work dir>
# 1. MPMD, rank 0 --out A (with checkpoints), rank 1 --out B (empty): both resume from A's
#    newest checkpoint, and the run ends with the bytes of an uninterrupted run's final one.
# 2. The same checkpoint path seen from another working directory (a node-local disk that
#    does not hold it): rank 1 fails naming the file rank 0 chose, and the job ends within
#    seconds instead of training rank 1 from scratch.
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=resume_agreement_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
rm -rf "$work"; mkdir -p "$work/a" "$work/b"
args=(--model ring8-mlp --batch 16 --ckpt-every 10 --log-every 10 --ema-decay 0.99 --seed 5)

# The reference: 30 iterations straight.
"$mpiexec" -np 2 --oversubscribe "$train" "${args[@]}" --iters 30 --out "$work/straight" > "$work/straight.log" 2>&1 ||
  { cat "$work/straight.log"; fail "the uninterrupted run failed"; }
# 20 iterations into A, then a resume to 30 where rank 1 names an empty --out.
"$mpiexec" -np 2 --oversubscribe "$train" "${args[@]}" --iters 20 --out "$work/A" > "$work/first.log" 2>&1 ||
  { cat "$work/first.log"; fail "the first 20 iterations failed"; }
"$mpiexec" -np 1 --oversubscribe "$train" "${args[@]}" --iters 30 --resume --out "$work/A" : \
  -np 1 --oversubscribe "$train" "${args[@]}" --iters 30 --resume --out "$work/B_empty" > "$work/mpmd.log" 2>&1 ||
  { cat "$work/mpmd.log"; fail "the MPMD resume failed"; }
expect_resumed_from "$work/mpmd.log" "$work/A/ckpt-000020.safetensors"
expect_same_checkpoint "$work/straight/ckpt-000030.safetensors" "$work/A/ckpt-000030.safetensors"

# 2. Relative --out from two working directories: rank 1's does not hold rank 0's choice.
"$mpiexec" -np 2 --oversubscribe -wdir "$work/a" "$train" "${args[@]}" --iters 10 --out run > "$work/a.log" 2>&1 ||
  { cat "$work/a.log"; fail "the run in a/ failed"; }
started=$(date +%s)
TANDEM_COLLECTIVE_TIMEOUT_S=60 "$mpiexec" -np 1 --oversubscribe -wdir "$work/a" "$train" "${args[@]}" --iters 20 \
  --resume --out run : -np 1 --oversubscribe -wdir "$work/b" "$train" "${args[@]}" --iters 20 --resume --out run \
  > "$work/local.log" 2>&1
rc=$?
seconds=$(( $(date +%s) - started ))
echo "node-local resume: exit status $rc after ${seconds} s"
[ $rc -ne 0 ] || { cat "$work/local.log"; fail "rank 1 trained without rank 0's checkpoint"; }
[ $seconds -lt 15 ] || { cat "$work/local.log"; fail "the job took ${seconds} s to end"; }
grep -qF "[rank 1] --resume: rank 0 resumes from run/ckpt-000010.safetensors, which this rank cannot load" \
  "$work/local.log" || { cat "$work/local.log"; fail "rank 1 did not name the checkpoint it cannot load"; }
if grep -q "^iter " "$work/local.log"; then cat "$work/local.log"; fail "training ran"; fi

echo "resume_agreement_test: ok"
rm -rf "$work"
