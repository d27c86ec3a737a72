#!/usr/bin/env bash
# Bad input under mpirun: tandem-train at 3 ranks, started with more ranks than its data can
# feed and with an --out it cannot create.
#   bad_input_test.sh <mpiexec> <tandem-train> <work dir>
# And with a failure on one rank only (a wrong --data-dir there): the job ends within seconds,
# that rank's cause first. And flags that do not go together (the penalties'): exit status 2.
# Asserts, for each: the job ends non-zero within a few seconds (no rank waits for another
# until a timeout), every rank prints an error that names the problem (the world size and the
# dataset size; the --out path), and no training iteration runs.
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=bad_input_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
rm -rf "$work"; mkdir -p "$work"
ranks=3

# expect_every_rank_fails <name> <expected message> tandem-train args...
expect_every_rank_fails() {
  local name="$1" message="$2"; shift 2
  local log="$work/$name.log" started rc seconds rank
  started=$(date +%s)
  "$mpiexec" -np $ranks --oversubscribe "$train" --iters 5 "$@" > "$log" 2>&1
  rc=$?
  seconds=$(( $(date +%s) - started ))
  echo "$name: exit status $rc after ${seconds} s"
  [ $rc -ne 0 ] || { cat "$log"; fail "$name: the job exited 0"; }
  [ $seconds -lt 20 ] || { cat "$log"; fail "$name: the job took ${seconds} s to end"; }
  for rank in $(seq 0 $((ranks - 1))); do
    grep -qF "[rank $rank] $message" "$log" || { cat "$log"; fail "$name: rank $rank did not print '$message'"; }
  done
  if grep -q "^iter " "$log"; then cat "$log"; fail "$name: training ran"; fi
}

# 1. A Fashion-MNIST directory of 2 images for 3 ranks: some rank's shard would be empty.
# Plain IDX files (zlib reads them as well as gzip ones): 2 blank 28x28 images, labels 0 and 1.
data="$work/two-images"
mkdir -p "$data"
{ printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x1c\x00\x00\x00\x1c'; head -c 1568 /dev/zero; } \
  > "$data/train-images-idx3-ubyte.gz"
printf '\x00\x00\x08\x01\x00\x00\x00\x02\x00\x01' > "$data/train-labels-idx1-ubyte.gz"
expect_every_rank_fails too_many_ranks \
  "--data fashion-mnist from --data-dir $data cannot feed --batch 1 on 3 rank(s): DistributedSampler: batch 1 per rank needs at least 3 samples for 3 ranks; the dataset has 2, a shard of 0 per rank" \
  --model mlp --data-dir "$data" --batch 1 --out "$work/too_many_ranks"

# 2. --out under a regular file: rank 0 names the reason, the others the path.
touch "$work/regular-file"
out="$work/regular-file/run"
expect_every_rank_fails unwritable_out "--out $out: " --out "$out"
grep -qF "[rank 0] --out $out: cannot create the directory (Not a directory)" "$work/unwritable_out.log" ||
  { cat "$work/unwritable_out.log"; fail "unwritable_out: rank 0 did not say why"; }

# 2b. A bad TANDEM_CUDNN (the GPU convolutions' algorithm mode), named by every rank before
# --out is created, on a CPU run too.
TANDEM_CUDNN=fast expect_every_rank_fails bad_cudnn_mode \
  "TANDEM_CUDNN='fast' is not a convolution algorithm mode (use off, on or benchmark)" \
  --model mlp --out "$work/bad_cudnn_mode"
[ ! -e "$work/bad_cudnn_mode" ] || fail "bad_cudnn_mode: --out was created"

# 3. A failure on one rank only (its --data-dir is wrong; MPMD launch): the others are
# already waiting for it in a collective. The job must end within seconds with that rank's
# cause first, not after the collective timeout (60 s here) with a message about collectives.
log="$work/one_rank.log"
started=$(date +%s)
TANDEM_COLLECTIVE_TIMEOUT_S=60 "$mpiexec" -np 2 --oversubscribe "$train" --model mlp --iters 5 --out "$work/one_rank" : \
  -np 1 --oversubscribe "$train" --model mlp --iters 5 --out "$work/one_rank" --data-dir "$work/nonexistent" \
  > "$log" 2>&1
rc=$?
seconds=$(( $(date +%s) - started ))
echo "one_rank: exit status $rc after ${seconds} s"
[ $rc -ne 0 ] || { cat "$log"; fail "one_rank: the job exited 0"; }
[ $seconds -lt 15 ] || { cat "$log"; fail "one_rank: the job took ${seconds} s to end (the others waited for the failed rank)"; }
first_error=$(grep -m1 "^\[rank " "$log")
case "$first_error" in
  *"[rank 2] Fashion-MNIST file $work/nonexistent/train-images-idx3-ubyte.gz not found"*) ;;
  *) cat "$log"; fail "one_rank: the first error is not rank 2's cause: $first_error" ;;
esac
if grep -q "timed out" "$log"; then cat "$log"; fail "one_rank: a collective timed out"; fi
if grep -qE "\[at [^]]*\].*\[rank [0-9]" "$log"; then cat "$log"; fail "one_rank: error lines are spliced"; fi

# 4. A sample picture that cannot be written (a directory where it goes): reported, and the
# checkpoint of that iteration, written first, is there; the run ends normally.
mkdir -p "$work/artefact/samples-000010.png"
"$mpiexec" -np 1 "$train" --iters 10 --ckpt-every 10 --sample-every 10 --out "$work/artefact" > "$work/artefact.log" 2>&1 ||
  { cat "$work/artefact.log"; fail "artefact: a picture that cannot be written stopped the run"; }
[ -f "$work/artefact/ckpt-000010.safetensors" ] || { cat "$work/artefact.log"; fail "artefact: no checkpoint"; }
grep -q "tandem-train: warning: no sample picture at iteration 10, training goes on: .*samples-000010.png" \
  "$work/artefact.log" || { cat "$work/artefact.log"; fail "artefact: the failed picture was not reported"; }

# 5. Flags that do not go together, or out of range, for the penalties: usage errors before MPI
# starts, exit status 2, naming the flag, nothing trained. Every rank stops by itself, but
# mpirun ends the others as soon as one exits non-zero, so how many ranks print before that
# is a race: at least one does, and every copy is a whole line.
expect_usage_error() {  # name, expected message, tandem-train args...
  local name="$1" message="$2"; shift 2
  local log="$work/$name.log" rc whole mentions
  "$mpiexec" -np $ranks --oversubscribe "$train" --iters 5 --out "$work/$name" "$@" > "$log" 2>&1
  rc=$?
  echo "$name: exit status $rc"
  [ $rc -eq 2 ] || { cat "$log"; fail "$name: exit status $rc, not 2"; }
  whole=$(grep -cxF "tandem-train: $message (see --help)" "$log")
  mentions=$(grep -cF -- "$message" "$log")
  [ "$whole" -ge 1 ] && [ "$whole" -eq "$mentions" ] ||
    { cat "$log"; fail "$name: '$message' not printed, or not on a line of its own"; }
  [ ! -e "$work/$name" ] || { cat "$log"; fail "$name: --out was created"; }
}
expect_usage_error n_critic_0 "--n-critic must be at least 1, got 0" --loss wgan-gp --n-critic 0
expect_usage_error negative_r1_gamma "--r1-gamma must be a finite number >= 0 (0: off), got -1" --r1-gamma -1
expect_usage_error r1_every_alone "--r1-every goes with --r1-gamma (a positive value)" --r1-every 4
expect_usage_error gp_lambda_alone "--gp-lambda goes with --loss wgan-gp" --loss hinge --gp-lambda 5

echo "bad_input_test: ok"
rm -rf "$work"
