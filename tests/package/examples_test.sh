#!/usr/bin/env bash
# The examples (models/examples/) as package consumers: tandem is installed into
# <work dir>/prefix, the examples' own CMake project is built against it with
# find_package(tandem), and each example is run for a few steps:
#   (a) 2 ranks equal 1 process on the global batch: SGD with momentum, 3 steps, the
#       gradients (momentum buffers) and the parameters agree to 1e-5 relative
#       (the installed tandem-compare-checkpoints --norm: tensor by tensor, in norm);
#       BiGAN: wrapped whole and wrapped per part (--wrap separate) alike;
#   (b) the replicas are bitwise equal across the 2 ranks (the example's check_replicas line);
#   (c) 6 iterations straight equal 3, a stop, and --resume to 6, byte for byte in the final
#       checkpoint (Adam, a warm-up + cosine schedule and an EMA of the generator included);
#   (d) a kill: every rank of a long run gets SIGKILL once its first checkpoint (iteration 40)
#       is on disk, whatever it is writing then; --resume to 160 equals 160 straight, byte
#       for byte.
#   r3gan (convolutions: too slow here for the rest) is checked by (b) and (c) alone, its
#       schedules functions of the images shown (hyper_schedule), and by (b) again with its
#       28x28 layers in bf16 (--bf16-res 1), whose weights must differ from float32's.
#   (e) cgan alone: a stop asked by signal, as a job's end asks it: SIGUSR1 to mpirun (which
#       forwards it to every rank), then SIGTERM to one rank alone (the others learn it at
#       the iteration's end): each run exits 0 at one iteration on every rank with a
#       checkpoint of it, from which --resume goes on.
#   examples_test.sh <cmake> <mpiexec> <c++> <source dir> <build dir> <work dir>
#                    [example...]
# Prints the seconds each step took.
set -euo pipefail
cmake=$1 mpiexec=$2 cxx=$3 src=$4 build=$5 work=$6
shift 6
examples=("$@")
[ ${#examples[@]} -gt 0 ] || examples=(cgan bigan infogan r3gan)
rm -rf "$work"
mkdir -p "$work"

step_label="examples_test"
# shellcheck source=tests/package/step.sh
source "$(dirname "$0")/step.sh"

step install "$cmake" --install "$build" --prefix "$work/prefix"
compare_checkpoints="$work/prefix/bin/tandem-compare-checkpoints"
step configure "$cmake" -S "$src/models/examples" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release
step build "$cmake" --build "$work/build" -j 2 --target "${examples[@]}"

for example in "${examples[@]}"; do
  [ "$example" != r3gan ] || continue  # its convolutions are slow here: checked below, in short
  program="$work/build/$example"
  runs="$work/runs/$example"
  ckpt() { echo "$runs/$1/$example-$(printf %06d "$2").safetensors"; }
  small=(--batch 16 --log-every 1)

  # (a) and (b)
  oracle=("${small[@]}" --optimizer sgd --lr 0.1 --schedule constant --iters 3)
  step "$example-oracle-np1" "$mpiexec" -np 1 "$program" "${oracle[@]}" --out "$runs/np1"
  step "$example-oracle-np2" "$mpiexec" -np 2 --oversubscribe "$program" "${oracle[@]}" --out "$runs/np2"
  grep -q "replicas bitwise equal on 2 ranks" "$work/$example-oracle-np2.log" || {
    echo "examples_test: $example did not report bitwise equal replicas on 2 ranks" >&2
    exit 1
  }
  # The momentum buffers, 0.81 g1 + 0.9 g2 + g3, are the gradients (the parameters' updates
  # since iteration 0 would drown them in the parameters' float32 rounding).
  compare() {  # compare <what> <tensor name prefix> <2-rank run>
    step "$example-oracle-$1-$3" "$compare_checkpoints" "$(ckpt np1 3)" "$(ckpt "$3" 3)" --prefix "$2" \
      --norm --rtol 1e-5
    cat "$work/$example-oracle-$1-$3.log"
  }
  compare gradients opt_ np2
  compare parameters gan. np2
  if [ "$example" = bigan ]; then  # np2 wrapped whole (the default), np2-separate a Reducer per part
    step "$example-oracle-np2-separate" "$mpiexec" -np 2 --oversubscribe "$program" "${oracle[@]}" --wrap separate \
      --out "$runs/np2-separate"
    compare gradients opt_ np2-separate
  fi

  # (c)
  resume=("${small[@]}" --schedule warmup:2+cosine:6 --ema-decay 0.9 --save-every 3)
  step "$example-straight" "$mpiexec" -np 2 --oversubscribe "$program" "${resume[@]}" --iters 6 --out "$runs/straight"
  step "$example-stopped" "$mpiexec" -np 2 --oversubscribe "$program" "${resume[@]}" --iters 3 --out "$runs/resumed"
  step "$example-resumed" "$mpiexec" -np 2 --oversubscribe "$program" "${resume[@]}" --iters 6 --out "$runs/resumed" \
    --resume
  grep -q "resumed from .*$example-000003" "$work/$example-resumed.log" || {
    echo "examples_test: $example did not resume from its iteration-3 checkpoint" >&2
    exit 1
  }
  cmp "$(ckpt straight 6)" "$(ckpt resumed 6)" || {
    echo "examples_test: $example resumed at iteration 3 is not bitwise the uninterrupted run" >&2
    exit 1
  }
  echo "examples_test: $example: resumed run bitwise equal to the uninterrupted one"

  # (d)
  killed=("${small[@]}" --schedule warmup:10+cosine:200 --ema-decay 0.9 --save-every 40)
  step "$example-straight160" "$mpiexec" -np 2 --oversubscribe "$program" "${killed[@]}" --iters 160 \
    --out "$runs/straight160"
  "$mpiexec" -np 2 --oversubscribe "$program" "${killed[@]}" --iters 100000 --out "$runs/killed" \
    >"$work/$example-killed.log" 2>&1 &
  launcher=$!
  for _ in $(seq 1200); do  # at most 60 s
    [ -e "$(ckpt killed 40)" ] && break
    sleep 0.05
  done
  [ -e "$(ckpt killed 40)" ] || {
    echo "examples_test: $example wrote no iteration-40 checkpoint within 60 s" >&2
    kill -9 "$launcher" 2>/dev/null
    pkill -9 -f -- "--out $runs/killed" || true
    cat "$work/$example-killed.log" >&2
    exit 1
  }
  pkill -9 -f -- "$program .*--out $runs/killed" || true
  kill -9 "$launcher" 2>/dev/null || true
  wait "$launcher" 2>/dev/null || true
  step "$example-after-kill" "$mpiexec" -np 2 --oversubscribe "$program" "${killed[@]}" --iters 160 \
    --out "$runs/killed" --resume
  grep -Eq "resumed from .*$example-(0000[4-9][0-9]|0001[0-5][0-9])" "$work/$example-after-kill.log" || {
    echo "examples_test: $example did not resume from a checkpoint of the killed run:" >&2
    cat "$work/$example-after-kill.log" >&2
    exit 1
  }
  cmp "$(ckpt straight160 160)" "$(ckpt killed 160)" || {
    echo "examples_test: $example killed and resumed is not bitwise the uninterrupted run" >&2
    exit 1
  }
  echo "examples_test: $example: killed (SIGKILL) and resumed, bitwise equal to the uninterrupted run"

  # (e)
  [ "$example" = cgan ] || continue
  for how in usr1-mpirun term-rank1; do
    out="$runs/stop-$how"
    log="$work/$example-stop-$how.log"
    "$mpiexec" -np 2 --oversubscribe "$program" "${small[@]}" --iters 1000000 --save-every 1000000 --out "$out" \
      >"$log" 2>&1 &
    launcher=$!
    for _ in $(seq 1200); do  # at most 60 s: until it has trained a while
      [ -s "$out/metrics.jsonl" ] && [ "$(wc -l <"$out/metrics.jsonl")" -ge 20 ] && break
      sleep 0.05
    done
    if [ "$how" = usr1-mpirun ]; then
      kill -USR1 "$launcher"
    else
      rank_pid=$(pgrep -f -- "^$program .*--out $out" | tail -1)
      kill -TERM "$rank_pid"
    fi
    status=0
    for _ in $(seq 600); do  # at most 60 s to stop
      kill -0 "$launcher" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$launcher" 2>/dev/null; then
      kill -9 "$launcher"
      pkill -9 -f -- "--out $out" || true
      echo "examples_test: $example did not stop within 60 s of the signal ($how)" >&2
      cat "$log" >&2
      exit 1
    fi
    wait "$launcher" || status=$?
    # The progress line is rewritten in place (\r) under mpirun: split it off first.
    stopped=$(tr '\r' '\n' <"$log" | sed -n 's/^stopping at iteration \([0-9]*\): .*received.*/\1/p')
    if [ "$status" != 0 ] || [ -z "$stopped" ] || [ ! -e "$(ckpt "stop-$how" "$stopped")" ]; then
      echo "examples_test: $example stopped by signal ($how): exit status $status, no checkpoint of the stop" >&2
      cat "$log" >&2
      exit 1
    fi
    step "$example-after-stop-$how" "$mpiexec" -np 2 --oversubscribe "$program" "${small[@]}" \
      --iters $((stopped + 2)) --out "$out" --resume
    grep -q "resumed from $(ckpt "stop-$how" "$stopped") at iteration $stopped" "$work/$example-after-stop-$how.log" || {
      echo "examples_test: $example did not resume from the checkpoint of its stop ($how)" >&2
      exit 1
    }
    echo "examples_test: $example: stopped by signal ($how) at iteration $stopped with its checkpoint, exit 0"
  done
done

# r3gan: (b) and (c), its learning rate and gamma scheduled by kimg.
if printf '%s\n' "${examples[@]}" | grep -qx r3gan; then
  program="$work/build/r3gan"
  runs="$work/runs/r3gan"
  r3=(--batch 16 --log-every 1 --kimg 0.096 --save-every 3)
  step r3gan-straight "$mpiexec" -np 2 --oversubscribe "$program" "${r3[@]}" --iters 6 --out "$runs/straight"
  step r3gan-stopped "$mpiexec" -np 2 --oversubscribe "$program" "${r3[@]}" --iters 3 --out "$runs/resumed"
  step r3gan-resumed "$mpiexec" -np 2 --oversubscribe "$program" "${r3[@]}" --iters 6 --out "$runs/resumed" --resume
  grep -q "replicas bitwise equal on 2 ranks" "$work/r3gan-straight.log" || {
    echo "examples_test: r3gan did not report bitwise equal replicas on 2 ranks" >&2
    exit 1
  }
  cmp "$runs/straight/r3gan-000006.safetensors" "$runs/resumed/r3gan-000006.safetensors" || {
    echo "examples_test: r3gan resumed at iteration 3 is not bitwise the uninterrupted run" >&2
    exit 1
  }
  echo "examples_test: r3gan: resumed run bitwise equal to the uninterrupted one"
  # --bf16-res 1: the 28x28 layers in bf16 (a module's compute dtype); the replicas stay
  # bitwise equal, and the weights after 3 iterations are not those of the float32 run.
  step r3gan-bf16 "$mpiexec" -np 2 --oversubscribe "$program" "${r3[@]}" --iters 3 --bf16-res 1 --out "$runs/bf16"
  grep -q "replicas bitwise equal on 2 ranks" "$work/r3gan-bf16.log" || {
    echo "examples_test: r3gan --bf16-res 1 did not report bitwise equal replicas on 2 ranks" >&2
    exit 1
  }
  if cmp -s "$runs/straight/r3gan-000003.safetensors" "$runs/bf16/r3gan-000003.safetensors"; then
    echo "examples_test: r3gan --bf16-res 1 trained bitwise as float32: its layers did not take bf16" >&2
    exit 1
  fi
  echo "examples_test: r3gan: --bf16-res 1 trains apart from float32, its replicas bitwise equal"
fi
