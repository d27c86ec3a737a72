#!/usr/bin/env bash
# Soak test: a 2-rank progressive GAN run through all its stages, with a resume in the
# middle, keeps its memory steady and ends where an uninterrupted run ends.
#   pggan_soak_test.sh <mpiexec> <tandem-train> <work dir>
# Asserts: the uninterrupted run and the interrupted one (stopped at iteration 10, in
# stage 1's fade-in, then --resume to the end) each pass stage 0, stage 1 fading in and
# stable, stage 2 fading in and stable; the resumed run's final checkpoint is
# byte-identical to the uninterrupted run's; on every rank of both runs the resident set
# size at the end has grown by no more than 10% over the one right after warm-up (memory
# handed back is no leak: under the sanitizers it fell by 14% once); the last stage's D and G
# phases stay in the Reducer's phase cache from warm-up to the end.
# Exits 77 (skipped) without Fashion-MNIST.
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=pggan_soak_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
data_dir=/usr/share/datasets/fashion-mnist
require_fashion_mnist
rm -rf "$work"; mkdir -p "$work"
started=$(date +%s%N)

# Stage s runs iterations [s*S, (s+1)*S); stages 1 and 2 fade in over their first S/2.
# Stage 2 then lasts to the end, so the run's second half is one steady structure.
stage_iters=8 iters=60 stop_at=10 ranks=2
run() {  # out dir, extra args...
  local out="$1"; shift
  "$mpiexec" -np $ranks --oversubscribe "$train" --model pggan --data-dir "$data_dir" --batch 4 \
    --pggan-stage-iters $stage_iters --ckpt-every 4 --log-every 1 --seed 5 --out "$out" "$@"
}

# 1. The reference: all iterations without interruption.
run "$work/straight" --iters $iters > "$work/straight.log" 2>&1 ||
  { cat "$work/straight.log"; fail "the uninterrupted run failed"; }

# 2. The same run stopped at iteration $stop_at, then resumed from its newest checkpoint.
run "$work/resumed" --iters $stop_at > "$work/first.log" 2>&1 ||
  { cat "$work/first.log"; fail "the run to iteration $stop_at failed"; }
run "$work/resumed" --iters $iters --resume > "$work/resumed.log" 2>&1 ||
  { cat "$work/resumed.log"; fail "the resumed run failed"; }
expect_resumed_from "$work/resumed.log" "$work/resumed/$(printf 'ckpt-%06d' $stop_at).safetensors"

# 3. Every stage and fade-in was trained, by the uninterrupted run and by the two legs of
# the interrupted one (the resumed leg starts inside stage 1's fade-in).
expect_structure() {  # log, structures the progress lines must show...
  local log="$1"; shift
  for s in "$@"; do grep -qF "[$s" "$log" || { cat "$log"; fail "$log never trained '$s'"; }; done
}
later_stages=("stage 1 (14x14), fade-in" "stage 1 (14x14)]" "stage 2 (28x28), fade-in" "stage 2 (28x28)]")
expect_structure "$work/straight.log" "stage 0 (7x7)]" "${later_stages[@]}"
expect_structure "$work/first.log" "stage 0 (7x7)]" "stage 1 (14x14), fade-in"
expect_structure "$work/resumed.log" "${later_stages[@]}"

# 4. The resumed run ends with the uninterrupted run's bytes.
final=$(printf 'ckpt-%06d.safetensors' $iters)
expect_same_checkpoint "$work/straight/$final" "$work/resumed/$final"

# 5. Steady memory. Memory legitimately grows with the stage (larger images, activations
# and the new blocks' gradients and optimizer state), so "warm-up" ends after the last
# structure change: the iteration at which stage 2's fade-in ends (every parameter set the
# run will ever use has been through a step and the Reducer has rebuilt its buckets for
# the final one), plus 4 steps. From there to the end the structure never changes, so the
# resident size must be flat. A single sample can jump from one step to the next as the
# allocator keeps or hands back freed blocks (through plain glibc malloc by up to ~15 MB,
# ~7%), while a leak raises every sample; so each point is the median of 5 consecutive
# logged iterations.
# Both runs are checked: the resumed process's own warm-up is inside its run (it resumes
# before stage 2), so its metrics after warm-up are all its own.
window=5 tolerance_pct=10
warm_from=$(( 2 * stage_iters + stage_iters / 2 + 4 ))
end_from=$(( iters - window + 1 ))
rss_series() {  # metrics.jsonl, rank, first iteration, last: one rss_mb value per line
  sed -n 's/^{"iteration": \([0-9]*\),.*"rss_mb": \[\([^]]*\)\].*/\1, \2/p' "$1" |
    awk -F', ' -v r="$2" -v a="$3" -v b="$4" '$1 >= a && $1 <= b { print $(r + 2) }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
rss_failed=""
for which in straight resumed; do
  metrics="$work/$which/metrics.jsonl"
  for rank in $(seq 0 $((ranks - 1))); do
    warm_n=$(rss_series "$metrics" $rank $warm_from $((warm_from + window - 1)) | wc -l)
    end_n=$(rss_series "$metrics" $rank $end_from $iters | wc -l)
    [ "$warm_n" -eq $window ] && [ "$end_n" -eq $window ] ||
      fail "$metrics: expected $window rss_mb values of rank $rank after warm-up and at the end, found $warm_n and $end_n"
    warm=$(rss_series "$metrics" $rank $warm_from $((warm_from + window - 1)) | median)
    end=$(rss_series "$metrics" $rank $end_from $iters | median)
    verdict=$(awk -v w="$warm" -v e="$end" -v t=$tolerance_pct \
      'BEGIN { d = 100 * (e - w) / w; printf "%+.1f%% %s", d, d > t ? "FAIL" : "ok" }')
    printf '%s: rss %-8s rank %d: after warm-up %.1f MB (median, iterations %d-%d), at end %.1f MB (%d-%d): %s\n' \
      "$test_name" "$which" $rank "$warm" $warm_from $((warm_from + window - 1)) "$end" $end_from $iters "$verdict"
    case "$verdict" in *FAIL) rss_failed="$rss_failed $which/rank$rank" ;; esac
  done
done
[ -z "$rss_failed" ] || fail "resident size grew by more than ${tolerance_pct}% after warm-up on:$rss_failed"

# 6. The Reducer's phase cache evicts the earlier stages' phases, never the last stage's
# D and G phases: each has had every backward from warm-up to the end (an evicted phase
# would start counting afresh).
steady=$(( iters - warm_from ))
for log in "$work/straight.log" "$work/resumed.log"; do
  kept=$(sed -n 's/^sync phase [0-9]*: .*, \([0-9]*\) backward(s), rebuilt .*/\1/p' "$log" | awk -v m=$steady '$1 >= m' | wc -l)
  [ "$kept" -ge 2 ] || { grep '^sync' "$log"; fail "$log: the last stage's D and G phases did not both last from warm-up to the end ($steady backwards)"; }
done

seconds=$(( ($(date +%s%N) - started) / 1000000000 ))
echo "$test_name: ok (all stages, resumed at iteration $stop_at, final checkpoint byte-identical, rss steady, last phases kept; ${seconds} s)"
rm -rf "$work"
