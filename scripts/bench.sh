#!/usr/bin/env bash
# Builds and runs the benchmarks at 2 ranks: reducer_bench (Reducer vs. one plain allreduce,
# bucket-cap sweep, exposed communication), step_bench (GAN step time, one process vs. the
# DDP wrappers) and penalty_bench (WGAN-GP and R1 D updates vs. the plain one), then
# conv_bench in one process (CPU convolutions and Linear GEMMs, Eigen vs. oneDNN; oneDNN's
# bf16 convolutions vs. its fp32 ones, pass by pass, where the CPU has native bf16) and
# stylegan2's iteration with R1 and path length against the plain one and dcgan64's step and
# peak memory in bf16 and fp16 against fp32 (tandem-train, --precision). When
# python3 can import torch, also runs the PyTorch anchor (../shared/anchors/torch_gan_ddp.py)
# in the same run for the side-by-side comparison; without torch that part is skipped with a
# message. Prints a summary table and writes it
# as JSON to bench/results/<timestamp>.json.
#
#   scripts/bench.sh [--quick]      (--quick: fewer iterations, for a smoke test)
#   scripts/bench.sh --scale DIR    the alpha-beta model of ring allreduce (scripts/scale_model.py)
#                                   against the measurements of scripts/cluster_bench.sh --out DIR,
#                                   and its step-time predictions at 8-256 ranks; builds nothing
# Environment: TANDEM_BUILD (build folder, default build-bench), RANKS (default 2),
# TORCH_ANCHOR (path of torch_gan_ddp.py), TORCH_PYTHON (a python3 that imports torch),
# STEP_MODELS (default mlp,mlp-dynamic), MPIRUN_ARGS (extra mpirun arguments, e.g. the binding
# "--map-by slot:PE=2 --bind-to core": each rank on two cores of its own, one for compute
# and one free for its communication thread).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" = "--scale" ]; then
  [ -d "${2:-}" ] || { echo "bench.sh: --scale needs the output folder of scripts/cluster_bench.sh (got '${2:-}')" >&2; exit 2; }
  exec python3 "$ROOT/scripts/scale_model.py" "$2"
fi
export TANDEM_BUILD="${TANDEM_BUILD:-$ROOT/build-bench}"
# shellcheck source=common.sh
source "$ROOT/scripts/common.sh"

RANKS="${RANKS:-2}"
STEP_MODELS="${STEP_MODELS:-mlp,mlp-dynamic}"
TORCH_ANCHOR="${TORCH_ANCHOR:-$ROOT/../shared/anchors/torch_gan_ddp.py}"
REDUCER_ARGS=(--iters 20 --warmup 3)
STEP_ARGS=(--steps 100 --runs 7 --warmup 10 --models "$STEP_MODELS")
PENALTY_ARGS=(--steps 50 --runs 5 --warmup 5)
CONV_ARGS=(--reps 5)
SG2_ROUNDS=5
SG2_ITERS=24
PRECISION_ROUNDS=3
PRECISION_ITERS=16
TORCH_ITERS=60
if [ "${1:-}" = "--quick" ]; then
  REDUCER_ARGS=(--iters 5 --warmup 2)
  STEP_ARGS=(--steps 20 --runs 3 --warmup 3 --models "$STEP_MODELS")
  PENALTY_ARGS=(--steps 10 --runs 3 --warmup 2)
  CONV_ARGS=(--reps 2 --dcgan64-batch 16)
  SG2_ROUNDS=1
  SG2_ITERS=8
  PRECISION_ROUNDS=1
  PRECISION_ITERS=4
  TORCH_ITERS=20
fi

# A fresh build directory gets no test suites (only the benchmarks are built); an existing
# one keeps its own setting, so a development build's test binaries keep being rebuilt there.
configure_args=(-DCMAKE_BUILD_TYPE=Release)
[ -f "$TANDEM_BUILD/CMakeCache.txt" ] || configure_args+=(-DTANDEM_TESTS=OFF)
cmake -S "$ROOT" -B "$TANDEM_BUILD" "${configure_args[@]}" >/dev/null
cmake --build "$TANDEM_BUILD" -j "$(nproc)" --target reducer_bench step_bench penalty_bench conv_bench tandem-train \
  >/dev/null

stamp="$(date +%Y%m%d-%H%M%S)"
results="$ROOT/bench/results"
mkdir -p "$results"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2206  # MPIRUN_ARGS is a list of arguments
MPIRUN=(mpirun -np "$RANKS" --oversubscribe ${MPIRUN_ARGS:-})
echo "== $(nproc) cores; ${MPIRUN[*]}"

echo "== reducer_bench ($RANKS ranks) =="
"${MPIRUN[@]}" "$TANDEM_BUILD/bin/reducer_bench" "${REDUCER_ARGS[@]}" --json "$work/reducer.json"
echo
echo "== step_bench ($RANKS ranks) =="
"${MPIRUN[@]}" "$TANDEM_BUILD/bin/step_bench" "${STEP_ARGS[@]}" --json "$work/step.json"
echo
echo "== penalty_bench ($RANKS ranks): WGAN-GP and R1 D updates against the plain one =="
"${MPIRUN[@]}" "$TANDEM_BUILD/bin/penalty_bench" "${PENALTY_ARGS[@]}" --json "$work/penalty.json"
echo
echo "== conv_bench (one process): CPU convolutions and Linear GEMMs, Eigen vs. oneDNN; bf16 vs. fp32 =="
"$TANDEM_BUILD/bin/conv_bench" "${CONV_ARGS[@]}"
echo
# One tandem-train run in $work/<name>: one process, one thread, ITERS iterations logged at
# the half; prints the median step time of the second half (metrics.jsonl's ms_per_step).
train_ms() {
  local name="$1" iters="$2"
  shift 2
  rm -rf "${work:?}/$name"
  OMP_NUM_THREADS=1 "$TANDEM_BUILD/bin/tandem-train" --iters "$iters" --log-every $((iters / 2)) \
    --out "$work/$name" "$@" >"$work/$name.log" 2>&1 || { cat "$work/$name.log" >&2; exit 1; }
  python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["ms_per_step"])' \
    "$work/$name/metrics.jsonl"
}

# StyleGAN2's regularisers in every iteration (R1 in each D loss, path length in each G step
# on every second row) against the same iteration without them, batch 32, the two runs
# interleaved round by round.
echo "== stylegan2 (one process, 1 thread, batch 32): an R1 + path-length iteration against the plain one =="
printf "%-6s %12s %16s %7s\n" round "plain ms" "R1 + PL ms" ratio
: >"$work/stylegan2.txt"
for round in $(seq 1 "$SG2_ROUNDS"); do
  plain="$(train_ms stylegan2-plain "$SG2_ITERS" --model stylegan2 --batch 32 --r1-gamma 0 --pl-weight 0)"
  regularised="$(train_ms stylegan2-regularised "$SG2_ITERS" --model stylegan2 --batch 32 --r1-every 1 --pl-every 1)"
  echo "$round $plain $regularised" >>"$work/stylegan2.txt"
  echo "$round $plain $regularised" | awk '{ printf "%-6s %12.1f %16.1f %7.3f\n", $1, $2, $3, $3 / $2 }'
done
python3 - "$work/stylegan2.txt" "$work/stylegan2.json" <<'EOF'
import json, statistics, sys
rounds = [[float(x) for x in line.split()[1:]] for line in open(sys.argv[1]) if line.strip()]
plain, regularised = [r[0] for r in rounds], [r[1] for r in rounds]
ratio = statistics.median(regularised) / statistics.median(plain)
print("median %.1f ms against %.1f ms: %.3fx (per round %s)" % (
    statistics.median(regularised), statistics.median(plain), ratio,
    ", ".join("%.2f" % (b / a) for a, b in zip(plain, regularised))))
json.dump({"plain_ms": plain, "regularised_ms": regularised, "ratio": ratio}, open(sys.argv[2], "w"))
EOF
echo

# Reduced precision (autograd/precision.h): dcgan64's step, batch 32, with every GEMM and
# convolution reading bf16 (oneDNN's kernels where the CPU has native bf16) or fp16 (the
# fp32 kernels on widened operands, on a CPU without native fp16) operands, against fp32;
# the three interleaved round by round. Then the same step in PyTorch, fp32, one thread.
echo "== precision (one process, 1 thread, dcgan64 batch 32): bf16 and fp16 steps against fp32 =="
printf "%-6s %10s %10s %10s %10s %10s\n" round "fp32 ms" "bf16 ms" "fp16 ms" bf16/fp32 fp16/fp32
: >"$work/precision.txt"
for round in $(seq 1 "$PRECISION_ROUNDS"); do
  line="$round"
  for precision in fp32 bf16 fp16; do
    line="$line $(train_ms "precision-$precision" "$PRECISION_ITERS" --model dcgan64 --batch 32 --precision "$precision")"
  done
  echo "$line" >>"$work/precision.txt"
  echo "$line" | awk '{ printf "%-6s %10.1f %10.1f %10.1f %10.3f %10.3f\n", $1, $2, $3, $4, $3 / $2, $4 / $2 }'
done
python3 - "$work/precision.txt" "$work/precision.json" <<'EOF'
import json, statistics, sys
rounds = [[float(x) for x in line.split()[1:]] for line in open(sys.argv[1]) if line.strip()]
medians = {p: statistics.median(r[i] for r in rounds) for i, p in enumerate(("fp32", "bf16", "fp16"))}
print("medians: fp32 %.1f ms, bf16 %.1f ms (%.3fx), fp16 %.1f ms (%.3fx)" % (
    medians["fp32"], medians["bf16"], medians["bf16"] / medians["fp32"], medians["fp16"],
    medians["fp16"] / medians["fp32"]))
json.dump({"rounds": rounds, "median_ms": medians}, open(sys.argv[2], "w"))
EOF
# Peak memory in each precision: the resident set's high-water mark of one process, 4
# iterations of dcgan64 at batch 128, where what the layers keep for backward is most of
# it (GEMM and convolution operands rounded to the compute dtype, autograd/precision.h; a
# one-byte sign class for relu and leaky_relu, kernels/sign_class.h; batch norm's input,
# rounded under bf16, autograd/nn.h). python3 reads the child's high-water mark from getrusage.
echo "== precision: peak memory (one process, dcgan64 batch 128, 4 iterations) =="
: >"$work/memory.txt"
for precision in fp32 bf16 fp16; do
  rm -rf "${work:?}/memory-$precision"
  python3 - "$TANDEM_BUILD/bin/tandem-train" "$work/memory-$precision" "$precision" >>"$work/memory.txt" <<'EOF'
import os, resource, subprocess, sys
binary, out, precision = sys.argv[1:4]
subprocess.run([binary, "--model", "dcgan64", "--batch", "128", "--iters", "4", "--log-every", "2",
                "--precision", precision, "--out", out], check=True, stdout=subprocess.DEVNULL,
               env=dict(os.environ, OMP_NUM_THREADS="1"))
print(precision, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)  # KiB -> MiB
EOF
done
python3 - "$work/memory.txt" "$work/precision.json" <<'EOF'
import json, sys
peak = {p: float(mib) for p, mib in (line.split() for line in open(sys.argv[1]) if line.strip())}
print("peak RSS: fp32 %.0f MiB, bf16 %.0f MiB (%.3fx), fp16 %.0f MiB (%.3fx)" % (
    peak["fp32"], peak["bf16"], peak["bf16"] / peak["fp32"], peak["fp16"], peak["fp16"] / peak["fp32"]))
precision = json.load(open(sys.argv[2]))
precision["peak_rss_mib"] = peak
json.dump(precision, open(sys.argv[2], "w"))
EOF
DCGAN_ANCHOR="$(dirname "$TORCH_ANCHOR")/torch_dcgan_step.py"
echo "null" >"$work/torch_dcgan64.json"
DCGAN_PYTHON="${TORCH_PYTHON:-/usr/bin/python3}"
if [ -f "$DCGAN_ANCHOR" ] && "$DCGAN_PYTHON" -c "import torch" 2>/dev/null; then
  "$DCGAN_PYTHON" "$DCGAN_ANCHOR" dcgan64 32 "$PRECISION_ITERS" "$PRECISION_ROUNDS" 1 | tee "$work/torch_dcgan64.txt"
  python3 -c 'import json, re, sys; m = re.findall(r"ms/step median ([0-9.]+)", open(sys.argv[1]).read()); json.dump(float(m[-1]) if m else None, open(sys.argv[2], "w"))' \
    "$work/torch_dcgan64.txt" "$work/torch_dcgan64.json"
else
  echo "PyTorch's dcgan64 step: skipped (no torch, or $DCGAN_ANCHOR missing)"
fi
echo

echo "[]" >"$work/torch.json"
# Debian's python3-torch lives under /usr/bin/python3, which may not be the python3 in PATH.
TORCH_PYTHON="${TORCH_PYTHON:-}"
if [ -z "$TORCH_PYTHON" ]; then
  for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c "import torch" 2>/dev/null; then
      TORCH_PYTHON="$candidate"
      break
    fi
  done
fi
if [ -n "$TORCH_PYTHON" ] && [ -f "$TORCH_ANCHOR" ]; then
  echo "== PyTorch anchor ($TORCH_ANCHOR, $TORCH_ITERS iterations) =="
  : >"$work/torch.txt"
  # single_frozen: one process with D frozen in the G step; separate_frozen_fu: per-part DDP
  # with D frozen in the G step and find_unused_parameters, the strongest PyTorch variant of
  # this GAN that runs (per-part DDP without it fails with "Expected to have finished reduction").
  for args in "single $TORCH_ITERS 1" "single_frozen $TORCH_ITERS 1" "whole_prepare $TORCH_ITERS $RANKS" \
    "separate_frozen_fu $TORCH_ITERS $RANKS" "whole_prepare_dynamic $TORCH_ITERS $RANKS"; do
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 timeout 300 "$TORCH_PYTHON" "$TORCH_ANCHOR" $args | tee -a "$work/torch.txt" || true
  done
  python3 - "$work/torch.txt" "$work/torch.json" <<'EOF'
import ast, json, sys
rows = []
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("("):
        mode, status, dt = ast.literal_eval(line)
        rows.append({"mode": mode, "status": status, "step_ms": None if dt is None else 1e3 * dt})
json.dump(rows, open(sys.argv[2], "w"))
EOF
  echo
else
  echo "== PyTorch anchor: skipped (python3 cannot import torch, or $TORCH_ANCHOR is missing;" \
       "apt-get install python3-torch libopenblas0-openmp to compare) =="
  echo
fi

out="$results/$stamp.json"
python3 - "$work/reducer.json" "$work/step.json" "$work/torch.json" "$out" "$RANKS" "$work/stylegan2.json" \
  "$work/precision.json" "$work/torch_dcgan64.json" <<'EOF'
import json, os, statistics, sys
reducer, step, torch = (json.load(open(p)) for p in sys.argv[1:4])
out, ranks = sys.argv[4], int(sys.argv[5])
stylegan2 = json.load(open(sys.argv[6]))
precision = json.load(open(sys.argv[7]))
torch_dcgan64_ms = json.load(open(sys.argv[8]))
steps = {(r["model"], r["mode"]): r["step_ms"] for r in step["results"]}
torch_ms = {r["mode"]: r["step_ms"] for r in torch if r["step_ms"] is not None}
summary = []
def add(what, value, target, ok):
    summary.append({"what": what, "value": value, "target": target,
                    "met": None if ok is None else bool(ok)})
# Two baselines: one allreduce of all the bytes (the target's wording; at ~100 MB Open MPI
# is several times slower per byte than at bucket sizes here, which flatters the Reducer),
# and plain allreduces of the Reducer's own bucket sizes (the honest overhead figure).
# "copy": gradients copied into and out of the buckets (the default); "view":
# gradient_as_bucket_view, nothing copied after the first backward.
grads = lambda r: "view" if r.get("view") else "copy"
for r in reducer["sweep"]:
    if r["set"] == "25m" and r["cap_mb"] == 25:
        add("reducer/one plain allreduce, 25M set, cap 25 MB, %s" % grads(r), round(r["ratio"], 3), "<= 1.05",
            r["ratio"] <= 1.05)
        add("reducer/bucketed plain allreduces, 25M set, cap 25 MB, %s" % grads(r), round(r["ratio_bucketed"], 3),
            "<= 1.05", r["ratio_bucketed"] <= 1.05)
for r in reducer["overlap"]:
    add("exposed comm / one plain allreduce, %s set, %s (compute %.1f ms vs plain %.1f ms)"
        % (r["set"], grads(r), r["compute_ms"], r["plain_ms"]), round(r["exposed_fraction"], 3), "<= 0.20",
        r["exposed_fraction"] <= 0.20)
    add("exposed comm / bucketed plain, %s set, %s (bucketed %.1f ms)" % (r["set"], grads(r), r["bucketed_ms"]),
        round(r["exposed_fraction_bucketed"], 3), "<= 0.20", r["exposed_fraction_bucketed"] <= 0.20)
for model in sorted({m for m, _ in steps}):
    single = steps.get((model, "single"))
    for mode in ("whole", "whole_view", "separate", "prepare"):
        if single and (model, mode) in steps:
            ratio = steps[(model, mode)] / single
            add("%s %s / single step time" % (model, mode), round(ratio, 3),
                "<= 1.05" if (model, mode) == ("mlp", "whole") else "-",
                ratio <= 1.05 if (model, mode) == ("mlp", "whole") else None)
for model, tmode in (("mlp", "whole_prepare"), ("mlp-dynamic", "whole_prepare_dynamic")):
    if (model, "whole") in steps and tmode in torch_ms:
        ratio = steps[(model, "whole")] / torch_ms[tmode]
        add("tandem %s whole %.2f ms / PyTorch %s %.2f ms" % (model, steps[(model, "whole")], tmode, torch_ms[tmode]),
            round(ratio, 3), "<= 0.50", ratio <= 0.5)
    elif (model, "whole") in steps:
        add("tandem %s whole / PyTorch %s" % (model, tmode), None, "<= 0.50", None)
# The G step scoped to G's parameters: tandem's DDP step against PyTorch's one-process step
# and its strongest multi-part DDP variant, both with D frozen in the G step by hand.
for tmode, target in (("single", 0.9), ("single_frozen", None), ("separate_frozen_fu", 0.4)):
    if ("mlp", "whole") in steps and tmode in torch_ms:
        ratio = steps[("mlp", "whole")] / torch_ms[tmode]
        add("tandem mlp whole %.2f ms (%d ranks) / PyTorch %s %.2f ms" % (steps[("mlp", "whole")], ranks, tmode,
                                                                          torch_ms[tmode]),
            round(ratio, 3), "-" if target is None else "<= %.2f" % target,
            None if target is None else ratio <= target)
if "single" in torch_ms and ("mlp", "single") in steps:
    add("tandem mlp single %.2f ms / PyTorch single %.2f ms" % (steps[("mlp", "single")], torch_ms["single"]),
        round(steps[("mlp", "single")] / torch_ms["single"], 3), "-", None)
add("stylegan2 R1 + path-length iteration %.1f ms / plain %.1f ms (1 process, medians of %d rounds)"
    % (statistics.median(stylegan2["regularised_ms"]), statistics.median(stylegan2["plain_ms"]),
       len(stylegan2["plain_ms"])),
    round(stylegan2["ratio"], 3), "<= 1.6", stylegan2["ratio"] <= 1.6)
ms = precision["median_ms"]
add("dcgan64 bf16 step %.1f ms / fp32 %.1f ms (1 process, 1 thread, batch 32)" % (ms["bf16"], ms["fp32"]),
    round(ms["bf16"] / ms["fp32"], 3), "<= 0.60", ms["bf16"] / ms["fp32"] <= 0.6)
add("dcgan64 fp16 step %.1f ms / fp32 %.1f ms (fp16 widened to fp32 on a CPU without it)" % (ms["fp16"], ms["fp32"]),
    round(ms["fp16"] / ms["fp32"], 3), "-", None)
peak = precision["peak_rss_mib"]
add("dcgan64 bf16 peak RSS %.0f MiB / fp32 %.0f MiB (1 process, batch 128)" % (peak["bf16"], peak["fp32"]),
    round(peak["bf16"] / peak["fp32"], 3), "-", None)
if torch_dcgan64_ms:
    add("dcgan64 bf16 step %.1f ms / PyTorch fp32 %.1f ms" % (ms["bf16"], torch_dcgan64_ms),
        round(ms["bf16"] / torch_dcgan64_ms, 3), "<= 0.50", ms["bf16"] / torch_dcgan64_ms <= 0.5)
else:
    add("dcgan64 bf16 step / PyTorch fp32 (no torch)", None, "<= 0.50", None)
print("== summary (%d ranks on %d cores; on 2 shared cores expect noise of about +-20%%) ==" % (ranks, os.cpu_count()))
print("  %-88s %8s %8s %5s" % ("measure", "value", "target", "met"))
for s in summary:
    value = "n/a" if s["value"] is None else "%.3f" % s["value"]
    met = "-" if s["met"] is None else ("yes" if s["met"] else "NO")
    print("  %-88s %8s %8s %5s" % (s["what"], value, s["target"], met))
json.dump({"ranks": ranks, "summary": summary, "reducer_bench": reducer, "step_bench": step, "torch": torch,
           "stylegan2": stylegan2, "precision": precision, "torch_dcgan64_ms": torch_dcgan64_ms},
          open(out, "w"), indent=1)
print("written: " + out)
EOF
