#!/usr/bin/env bash
# Error output of tandem-train under mpirun, as a person reads it: every rank fails after MPI
# has started (a --data-dir that does not exist).
#   error_output_test.sh <mpiexec> <tandem-train> <work dir>
# Asserts: exit status non-zero; each rank prints its error on exactly one line, which starts
# with its label ("[rank r] ") and ends with the source site relative to the repository
# ("[at models/...cpp:N]", no absolute or build-relative path); nothing else of tandem's
# ("tandem: ending the job" after the error), no "terminate called" and no abort backtrace.
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=error_output_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
rm -rf "$work"; mkdir -p "$work"
ranks=2
log="$work/missing_data.log"
# A relative --data-dir: no absolute path in the messages but a source path would be.
(cd "$work" && "$mpiexec" -np $ranks --oversubscribe "$train" --model mlp --iters 5 --data-dir missing-data \
  --out run > "$log" 2>&1)
rc=$?
echo "missing_data: exit status $rc"
[ $rc -ne 0 ] || { cat "$log"; fail "the job exited 0"; }
for rank in $(seq 0 $((ranks - 1))); do
  count=$(grep -c "^\[rank $rank\] Fashion-MNIST file missing-data/train-images-idx3-ubyte.gz not found: .* \[at models/data/[a-z_]*\.cpp:[0-9]*\]$" "$log")
  [ "$count" -eq 1 ] || { cat "$log"; fail "rank $rank printed its error $count times, not once on a line of its own"; }
  [ "$(grep -c "rank $rank\]" "$log")" -eq 1 ] || { cat "$log"; fail "rank $rank printed more than its error"; }
done
if grep "not found" "$log" | grep -qv "^\[rank "; then cat "$log"; fail "an error line does not start with the rank"; fi
if grep -qE "\[at (/|\.)" "$log"; then cat "$log"; fail "a source path is not relative to the repository"; fi
if grep -q "$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)" "$log"; then cat "$log"; fail "the repository's path is printed"; fi
for noise in "terminate called" "tandem: ending the job" "Process received signal" "tandem-train: error:"; do
  if grep -qF "$noise" "$log"; then cat "$log"; fail "'$noise' is printed"; fi
done
echo "error_output_test: ok"
rm -rf "$work"
