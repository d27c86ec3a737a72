#!/usr/bin/env bash
# Settings agree across ranks and with the checkpoint a run resumes; unreadable checkpoints
# are named, never silently skipped.
#   settings_agreement_test.sh <mpiexec> <tandem-train> <work dir>
# 1. MPMD, rank 1 with another --lr and --seed: the job ends within seconds, every rank
#    naming both settings with their values and ranks, before any iteration.
# 2. Every checkpoint in --out unreadable: --resume refuses, naming each, and changes
#    nothing; with --resume-allow-fresh it names each and starts from iteration 0, keeping
#    them.
#    Then, with a readable ckpt-000005 beside it, the torn newer file stops --resume by name,
#    naming --resume-skip-damaged.
# 3. --resume --resume-skip-damaged with a --lr that differs from the newest readable
#    checkpoint's: the unreadable newer file is named and skipped, the resume refused naming
#    the flag, both values and the file; nothing in --out changes.
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=settings_agreement_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
rm -rf "$work"; mkdir -p "$work"
args=(--model ring8-mlp --batch 16 --log-every 5 --ckpt-every 5)

# expect_no_training <log>: no progress line, so no iteration ran.
expect_no_training() {
  if grep -q "^iter " "$1"; then cat "$1"; fail "$1: training ran"; fi
}

# 1. Mismatched settings: rank 0 has the defaults (--lr 2e-4, --seed 0).
log="$work/mismatch.log"
started=$(date +%s)
TANDEM_COLLECTIVE_TIMEOUT_S=60 "$mpiexec" -np 1 --oversubscribe "$train" "${args[@]}" --iters 10 --out "$work/mismatch" : \
  -np 1 --oversubscribe "$train" "${args[@]}" --iters 10 --out "$work/mismatch" --lr 0.001 --seed 3 > "$log" 2>&1
rc=$?
seconds=$(( $(date +%s) - started ))
echo "mismatch: exit status $rc after ${seconds} s"
[ $rc -ne 0 ] || { cat "$log"; fail "mismatch: the job exited 0"; }
[ $seconds -lt 15 ] || { cat "$log"; fail "mismatch: the job took ${seconds} s to end"; }
for rank in 0 1; do
  grep -qF "[rank $rank] settings differ across ranks: --lr 0.0002 on rank 0, --lr 0.001 on rank 1; --seed 0 on rank 0, --seed 3 on rank 1" "$log" ||
    { cat "$log"; fail "mismatch: rank $rank did not name the differing settings"; }
done
expect_no_training "$log"
if grep -q "timed out" "$log"; then cat "$log"; fail "mismatch: a collective timed out"; fi

snapshot() { (cd "$1" && ls -l --time-style=+%s.%N && md5sum -- *); }

# One rank is enough for what --resume does with the files (rank 0 decides): these runs are
# MPI singletons, which end at once on an error where mpirun would take seconds.

# 2. Only unreadable checkpoints (a torn one, a foreign file) beside the run's metrics.
out="$work/run"
mkdir -p "$out"
echo '{"iteration": 10}' > "$out/metrics.jsonl"
printf '\x10\x00\x00\x00\x00\x00\x00\x00{"__meta' > "$out/ckpt-000010.safetensors"
echo "not a checkpoint" > "$out/ckpt-000007.safetensors"
before=$(snapshot "$out")
log="$work/unreadable.log"
"$train" "${args[@]}" --iters 10 --out "$out" --resume > "$log" 2>&1 &&
  { cat "$log"; fail "unreadable: started although no checkpoint could be read"; }
grep -qF "[rank 0] --resume: no checkpoint in $out can be read ($out/ckpt-000010.safetensors: truncated" "$log" ||
  { cat "$log"; fail "unreadable: the refusal did not name the newest file and why"; }
grep -qF "; $out/ckpt-000007.safetensors: " "$log" || { cat "$log"; fail "unreadable: the older file was not named"; }
grep -qF "or pass --resume-allow-fresh to start from iteration 0" "$log" || { cat "$log"; fail "unreadable: no way out named"; }
expect_no_training "$log"
[ "$(snapshot "$out")" = "$before" ] || fail "unreadable: the refused resume changed $out"

# ... and with --resume-allow-fresh: a fresh run to 5 (below the unreadable files'
# iterations), each file named, and kept.
log="$work/fresh.log"
"$train" "${args[@]}" --iters 5 --out "$out" --resume --resume-allow-fresh > "$log" 2>&1 ||
  { cat "$log"; fail "fresh: --resume-allow-fresh did not start"; }
grep -q "^tandem-train: warning: --resume skips $out/ckpt-000010.safetensors: truncated" "$log" ||
  { cat "$log"; fail "fresh: the torn file was not named"; }
grep -q "^tandem-train: warning: --resume skips $out/ckpt-000007.safetensors: " "$log" ||
  { cat "$log"; fail "fresh: the foreign file was not named"; }
grep -q "^tandem-train: warning: --resume-allow-fresh: no checkpoint in $out can be read; starting from iteration 0" "$log" ||
  { cat "$log"; fail "fresh: the fresh start was not announced"; }
grep -q "^iter  *5/5 " "$log" || { cat "$log"; fail "fresh: did not train from iteration 0 to 5"; }
[ -f "$out/ckpt-000005.safetensors" ] || fail "fresh: no checkpoint at 5"
[ "$(stat -c %s "$out/ckpt-000010.safetensors")" = 16 ] || fail "fresh: the torn checkpoint was not kept"

# ... and now that a readable ckpt-000005 is there, the torn newer file stops a resume by
# name, with the way on, changing nothing.
# refused_resume <case> <args...>: a --resume to 10 with those arguments ends non-zero,
# trains nothing and changes nothing in $out; its log is $work/<case>.log.
refused_resume() {
  local name="$1" before
  shift
  before=$(snapshot "$out")
  log="$work/$name.log"
  "$train" "${args[@]}" --iters 10 --out "$out" --resume "$@" > "$log" 2>&1 && { cat "$log"; fail "$name: resumed"; }
  expect_no_training "$log"
  [ "$(snapshot "$out")" = "$before" ] || fail "$name: the refused resume changed $out"
}
refused_resume torn_newer
grep -qF "[rank 0] --resume: $out/ckpt-000010.safetensors: truncated" "$log" ||
  { cat "$log"; fail "torn_newer: the damaged file and its damage were not named"; }
grep -qF "or pass --resume-skip-damaged to resume from $out/ckpt-000005.safetensors" "$log" ||
  { cat "$log"; fail "torn_newer: the way on was not named"; }

# 3. A resume with another --lr: the torn newer file is skipped by name (--resume-skip-damaged;
# without it the torn file alone stops the run), the resume from ckpt-000005 refused by name,
# and nothing changes.
refused_resume other_lr --resume-skip-damaged --lr 0.001
grep -q "^tandem-train: warning: --resume skips $out/ckpt-000010.safetensors: truncated" "$log" ||
  { cat "$log"; fail "other_lr: the torn file was not named"; }
grep -qF "$out/ckpt-000005.safetensors: written with --lr 0.0002, this run has --lr 0.001. A resume continues the same run: resume with --lr 0.0002" "$log" ||
  { cat "$log"; fail "other_lr: the flag, both values and the file were not named"; }

echo "settings_agreement_test: ok"
rm -rf "$work"
