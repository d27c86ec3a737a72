#!/usr/bin/env bash
# One run per --out: a second tandem-train job on the --out of a running one is refused.
#   out_lock_test.sh <mpiexec> <tandem-train> <work dir>
# Job A starts on an --out holding stale temporaries of an earlier run (ckpt-*.tmp,
# samples-*.tmp) and a user's notes.tmp. While A runs (held still with SIGSTOP, so that the
# test does not race A's end), job B starts on the same --out.
# Asserts: B ends non-zero within seconds, before training, every rank naming A's host and
# rank 0's pid, and B removes nothing (a temporary A is writing stays); A then finishes
# normally, its log names the stale temporaries it removed, and notes.tmp is untouched; once
# A has ended, a new run on the --out starts (the lock went with A).
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=out_lock_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
rm -rf "$work"; mkdir -p "$work/out"
out="$work/out"
args=(--model ring8-mlp --batch 16 --log-every 1000 --seed 7 --out "$out")
host=$(uname -n)

echo torn > "$out/ckpt-000990.safetensors.tmp"
echo torn > "$out/samples-000990.png.tmp"
echo mine > "$out/notes.tmp"

# Job A; its collectives must outlast the time it is held still. It takes the lock before
# its first iteration and is held still within a second, so 1200 iterations (about a second
# here, half a minute under the sanitizers) keep it running long enough.
TANDEM_COLLECTIVE_TIMEOUT_S=60 "$mpiexec" -np 2 --oversubscribe "$train" "${args[@]}" --iters 1200 \
  > "$work/a.log" 2>&1 &
job_a=$!

# Once A's rank 0 holds the lock (it writes "<host> <pid> <start time>" there), hold A's
# ranks still.
holder_pid=""
for _ in $(seq 1 1000); do
  if [ -s "$out/.lock" ]; then
    read -r _ holder_pid _ < "$out/.lock"
    break
  fi
  sleep 0.01
done
[ -n "$holder_pid" ] || { kill $job_a; cat "$work/a.log"; fail "job A never took the lock"; }
a_ranks=""
for pid in $(pgrep -f -- "$train .*--out $out"); do  # the ranks, not mpirun
  if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -q '^OMPI_COMM_WORLD_RANK='; then a_ranks="$a_ranks $pid"; fi
done
kill -STOP $a_ranks 2>/dev/null
kill -0 $job_a 2>/dev/null || { cat "$work/a.log"; fail "job A ended before it could be held still"; }
tr '\0' '\n' < "/proc/$holder_pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=0' ||
  { kill -CONT $a_ranks; wait $job_a; fail "the lock names pid $holder_pid, which is not job A's rank 0"; }
# As if A were writing a checkpoint right now: B must not take it for a stale one.
echo writing > "$out/ckpt-001000.safetensors.tmp"

# Job B on the same --out.
started=$(date +%s)
"$mpiexec" -np 2 --oversubscribe "$train" "${args[@]}" --iters 3000 > "$work/b.log" 2>&1
rc=$?
seconds=$(( $(date +%s) - started ))
kill -CONT $a_ranks
echo "second job: exit status $rc after ${seconds} s"
[ $rc -ne 0 ] || { cat "$work/b.log"; fail "the second job on one --out ran"; }
[ $seconds -lt 20 ] || { cat "$work/b.log"; fail "the second job took ${seconds} s to end"; }
for rank in 0 1; do
  grep -F "[rank $rank] --out $out: " "$work/b.log" |
    grep -qF "in use by tandem-train on host $host, pid $holder_pid (started " ||
    { cat "$work/b.log"; fail "rank $rank of the second job did not name job A's host $host and pid $holder_pid"; }
done
if grep -q "^iter " "$work/b.log"; then cat "$work/b.log"; fail "the second job trained"; fi
[ -f "$out/ckpt-001000.safetensors.tmp" ] || fail "the refused job removed a temporary of the running one"
rm "$out/ckpt-001000.safetensors.tmp"

# Job A finishes as if alone.
wait $job_a || { cat "$work/a.log"; fail "job A failed"; }
[ -f "$out/ckpt-001200.safetensors" ] || { cat "$work/a.log"; fail "job A wrote no final checkpoint"; }
grep -qF "removed 2 stale temporary file(s) of an earlier run from $out: ckpt-000990.safetensors.tmp samples-000990.png.tmp" \
  "$work/a.log" || { cat "$work/a.log"; fail "job A did not name the stale temporaries it removed"; }
for stale in ckpt-000990.safetensors.tmp samples-000990.png.tmp; do
  [ ! -e "$out/$stale" ] || fail "the stale $stale is still there"
done
[ "$(cat "$out/notes.tmp")" = mine ] || fail "notes.tmp, not tandem-train's, was touched"

# A ended, and its lock with it: the next run on the --out starts (--overwrite: A left its
# final checkpoint there).
"$mpiexec" -np 1 "$train" "${args[@]}" --iters 1 --overwrite > "$work/c.log" 2>&1 ||
  { cat "$work/c.log"; fail "a run after job A ended was refused"; }

echo "out_lock_test: ok"
rm -rf "$work"
