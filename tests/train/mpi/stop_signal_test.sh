#!/usr/bin/env bash
# A run stopped by a signal: SIGUSR1 to mpirun (which forwards it to every rank), and
# SIGTERM to rank 1 alone (as Slurm's srun sends it to each task ahead of its kill), each
# to a 2-rank tandem-train run mid-training.
#   stop_signal_test.sh <mpiexec> <tandem-train> <work dir>
# Asserts: the job exits 0 within a minute; rank 0 names the iteration every rank stopped
# at ("stopping at iteration <i>: <signal> received"); the checkpoint of <i> exists; --resume
# continues from it to a final checkpoint byte-identical to an uninterrupted run's.
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=stop_signal_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
rm -rf "$work"; mkdir -p "$work"
# However the test ends, no run of it is left behind (a stray one would go on writing).
trap 'pkill -9 -f -- "--out $work/" 2>/dev/null || true' EXIT
flags=(--model ring8-mlp --batch 32 --ckpt-every 1000 --log-every 10 --ema-decay 0.99 --seed 5)
run() {  # out dir, extra args...
  local out="$1"; shift
  "$mpiexec" -np 2 --oversubscribe "$train" "${flags[@]}" --out "$out" "$@"
}

for how in usr1-mpirun term-rank1; do
  out="$work/$how" log="$work/$how.log"
  # mpirun itself in the background (not a function's subshell): $! is the pid to signal.
  "$mpiexec" -np 2 --oversubscribe "$train" "${flags[@]}" --out "$out" --iters 1000000 > "$log" 2>&1 &
  launcher=$!
  for _ in $(seq 1200); do  # at most 60 s: until it has trained a while
    [ -s "$out/metrics.jsonl" ] && [ "$(wc -l < "$out/metrics.jsonl")" -ge 5 ] && break
    sleep 0.05
  done
  if [ "$how" = usr1-mpirun ]; then
    kill -USR1 "$launcher"
  else
    victim=""
    for pid in $(pgrep -f "tandem-train.*$out"); do
      if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then victim=$pid; fi
    done
    [ -n "$victim" ] || { kill -9 "$launcher"; fail "never saw rank 1 running ($how)"; }
    kill -TERM "$victim"
  fi
  for _ in $(seq 600); do  # at most 60 s to stop
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$launcher" 2>/dev/null; then
    kill -9 "$launcher"
    pkill -9 -f -- "--out $out" || true
    cat "$log" >&2
    fail "the run did not stop within 60 s of the signal ($how)"
  fi
  status=0
  wait "$launcher" || status=$?
  # The progress line is rewritten in place (\r) under mpirun: split it off first.
  stopped=$(tr '\r' '\n' < "$log" | sed -n 's/^stopping at iteration \([0-9]*\): .*received.*/\1/p')
  [ "$status" = 0 ] || { cat "$log" >&2; fail "exit status $status after the signal ($how)"; }
  [ -n "$stopped" ] || { cat "$log" >&2; fail "no 'stopping at iteration' line ($how)"; }
  ckpt="$out/$(printf 'ckpt-%06d.safetensors' "$stopped")"
  [ -f "$ckpt" ] || { cat "$log" >&2; fail "no checkpoint of the stop, $ckpt ($how)"; }
  echo "$how: stopped at iteration $stopped with $ckpt, exit 0"

  total=$((stopped + 20))
  final="$(printf 'ckpt-%06d.safetensors' "$total")"
  run "$out" --resume --iters "$total" > "$work/$how-resumed.log" 2>&1 ||
    { cat "$work/$how-resumed.log"; fail "the resumed run failed ($how)"; }
  expect_resumed_from "$work/$how-resumed.log" "$ckpt"
  run "$work/$how-straight" --iters "$total" > "$work/$how-straight.log" 2>&1 ||
    { cat "$work/$how-straight.log"; fail "the uninterrupted run failed ($how)"; }
  expect_same_checkpoint "$work/$how-straight/$final" "$out/$final"
  echo "$how: resumed to iteration $total, bitwise equal to the uninterrupted run"
done
echo "$test_name: passed"
