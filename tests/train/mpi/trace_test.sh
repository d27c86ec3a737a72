#!/usr/bin/env bash
# The step timeline of a 2-rank tandem-train run (--trace FILE), as a trace viewer reads it.
#   trace_test.sh <mpiexec> <tandem-train> <work dir>
# Asserts: the file is one JSON object of the trace-event format ({"traceEvents": [...]},
# "X" spans with ts/dur, "C" counters, "M" metadata naming the processes "rank r"); both
# ranks are in it; every span of a bucket (pack, launch, the reduction on the communication
# thread, wait, unpack) lies inside its training step's span and its backward's sync span;
# within each backward the buckets launch, and are reduced, in index order 0, 1, ...; the
# bytes-in-flight counter is back at 0 after every backward; rank 0 prints each phase's
# summary, the host's time and cost per step, and that a step reads no tensor value on the
# host. With --trace-steps N a longer run keeps the last N steps: the file holds those
# (valid as above), as many events at 120 iterations as at 40, while the summary lines
# count every step. An unwritable --trace ends the job at start, naming the flag and the file.
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=trace_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
rm -rf "$work"; mkdir -p "$work"
ranks=2

log="$work/traced.log"
"$mpiexec" -np $ranks --oversubscribe "$train" --model mlp --iters 6 --log-every 3 --ema-decay 0 \
  --out "$work/run" --trace "$work/trace.json" > "$log" 2>&1 || { cat "$log"; fail "the traced run failed"; }
grep -q "^trace: $work/trace.json$" "$log" || { cat "$log"; fail "no 'trace: FILE' line"; }
for phase in "mlp: 6 of 14 parameters (discriminator)" "mlp: 6 of 14 parameters (generator)"; do
  grep -qF "rank 0 trace: $phase: 6 synced backwards; overlap " "$log" ||
    { cat "$log"; fail "no summary line for $phase"; }
done
# What the steps cost the host (runtime/host_cost.h): the losses stay where they were made
# until a log point reads them, so a step reads no tensor value on the host (on a GPU each
# read is a wait for the device).
grep -q "^rank 0 host time per step (log points aside): [0-9.]* ms, of which making and staging the batch" "$log" ||
  { cat "$log"; fail "no host time line"; }
grep -qF "rank 0 host cost per step (5 steps):" "$log" || { cat "$log"; fail "no host cost table"; }
reads=$(sed -n 's/^ *host reads of tensor values (item, to_vector) *\([0-9.]*\).*/\1/p' "$log")
[ "$reads" = "0.00" ] || { cat "$log"; fail "the steps read ${reads:-?} tensor values per step on the host, not 0"; }

# check_trace <file> <steps> <first iteration>: the file holds both ranks' timelines of
# <steps> steps from <first iteration> on, as described above; prints its event count.
check_trace() {
python3 - "$1" "$ranks" "$2" "$3" <<'EOF' || fail "the trace $1 does not hold (above)"
import json, sys
from collections import defaultdict

path, ranks, n_steps, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with open(path) as f:
    doc = json.load(f)
problems = []
def check(ok, what):
    if not ok:
        problems.append(what)

events = doc["traceEvents"]
check(isinstance(events, list) and events, "traceEvents is not a non-empty list")
ns = lambda us: round(us * 1000)  # ts and dur are microseconds with three decimals
names, spans, counters = {}, defaultdict(list), defaultdict(list)
for e in events:
    check(e.get("ph") in ("X", "C", "M"), f"unexpected phase in {e}")
    check(isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int) and isinstance(e.get("name"), str),
          f"pid/tid/name missing in {e}")
    if e["ph"] == "M":
        if e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
        continue
    check(isinstance(e.get("ts"), (int, float)), f"no ts in {e}")
    if e["ph"] == "X":
        check(isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, f"no dur in {e}")
        spans[e["pid"]].append(e)
    else:
        check("value" in e.get("args", {}), f"counter without a value: {e}")
        counters[e["pid"]].append(e)
check(names == {r: f"rank {r}" for r in range(ranks)}, f"processes named {names}")

def inside(inner, outer):
    return ns(outer["ts"]) <= ns(inner["ts"]) and ns(inner["ts"]) + ns(inner["dur"]) <= ns(outer["ts"]) + ns(outer["dur"])

syncs_per_rank = {}
for pid in range(ranks):
    mine = spans[pid]
    steps = [e for e in mine if e["cat"] == "train" and e["name"] == "step"]
    syncs = {e["args"]["sync"]: e for e in mine if e["cat"] == "reducer" and e["name"] == "sync"}
    syncs_per_rank[pid] = len(syncs)
    check(len(steps) == n_steps, f"rank {pid}: {len(steps)} step spans, not {n_steps}")
    iterations = sorted(e["args"]["iteration"] for e in steps)
    check(iterations == list(range(first, first + n_steps)), f"rank {pid}: steps of iterations {iterations}")
    check(len(syncs) == 2 * n_steps,
          f"rank {pid}: {len(syncs)} synced backwards, not {2 * n_steps} (a D and a G step per iteration)")
    for name in ("data", "forward (D step)", "forward (G step)", "optimizer step"):
        check(any(e["name"] == name for e in mine), f"rank {pid}: no '{name}' span")
    check(sum(e["cat"] == "autograd" and e["name"] == "backward" for e in mine) == 2 * n_steps,
          f"rank {pid}: not {2 * n_steps} backward spans")
    buckets = [e for e in mine if "bucket" in e.get("args", {})]
    # A bucket's reduction, whatever its name (the MPI allreduce, or the shared-memory one).
    for e in buckets:
        if e["cat"] == "comm":
            e["name"] = "reduction"
    kinds = {(e["cat"], e["name"]) for e in buckets}
    for kind in (("reducer", "pack"), ("reducer", "launch"), ("reducer", "wait"), ("reducer", "unpack"),
                 ("comm", "reduction")):
        check(kind in kinds, f"rank {pid}: no bucket span {kind}")
    for e in buckets:
        check(any(inside(e, s) for s in steps), f"rank {pid}: bucket span outside every step: {e}")
        s = syncs.get(e["args"]["sync"])
        check(s is not None and inside(e, s), f"rank {pid}: bucket span outside its sync: {e}")
    most = 0
    for k, s in syncs.items():
        for kind in (("reducer", "launch"), ("comm", "reduction")):
            order = [e["args"]["bucket"] for e in sorted(buckets, key=lambda e: ns(e["ts"]))
                     if (e["cat"], e["name"]) == kind and e["args"]["sync"] == k]
            check(order == list(range(len(order))) and order, f"rank {pid}, sync {k}: {kind} in bucket order {order}")
            most = max(most, len(order))
        # The counter is back at zero once the sync is over.
        after = [c for c in counters[pid] if ns(c["ts"]) <= ns(s["ts"]) + ns(s["dur"])]
        check(after and after[-1]["args"]["value"] == 0, f"rank {pid}, sync {k}: bytes in flight not 0 at its end")
    check(most >= 2, f"rank {pid}: no backward with two buckets: the order check saw nothing")
check(len(set(syncs_per_rank.values())) == 1, f"ranks synced different counts: {syncs_per_rank}")
for p in problems[:20]:
    print("trace_test:", p, file=sys.stderr)
print(len(events))
sys.exit(1 if problems else 0)
EOF
}
check_trace "$work/trace.json" 6 0 > /dev/null

# --trace-steps 10: a run three times as long keeps as many events, and its summary still
# counts every synced backward. Log points and checkpoints only at the end, as at 40.
declare -A kept
for iters in 40 120; do
  log="$work/bounded-$iters.log"
  "$mpiexec" -np $ranks --oversubscribe "$train" --model mlp --iters $iters --log-every 1000 --ema-decay 0 \
    --out "$work/run-$iters" --trace "$work/trace-$iters.json" --trace-steps 10 > "$log" 2>&1 ||
    { cat "$log"; fail "the run of $iters iterations with --trace-steps 10 failed"; }
  grep -qF "rank 0 trace: mlp: 6 of 14 parameters (discriminator): $iters synced backwards; overlap " "$log" ||
    { cat "$log"; fail "the summary does not cover the $iters iterations"; }
  grep -qF "trace: $work/trace-$iters.json holds the last 10 of the run's $iters steps (--trace-steps)" "$log" ||
    { cat "$log"; fail "no line saying which steps the trace holds"; }
  kept[$iters]=$(check_trace "$work/trace-$iters.json" 10 $((iters - 10))) || exit 1
done
[ "${kept[40]}" = "${kept[120]}" ] ||
  fail "the trace grew with the run: ${kept[40]} events at 40 iterations, ${kept[120]} at 120"
size40=$(stat -c %s "$work/trace-40.json")
size120=$(stat -c %s "$work/trace-120.json")
# The same events; only their times may take a digit more.
[ "$size120" -le $((size40 * 21 / 20)) ] ||
  fail "the trace grew with the run: $size40 bytes at 40 iterations, $size120 at 120"

# An --trace that cannot be written stops every rank at start with the flag and the file.
bad="$work/bad.log"
"$mpiexec" -np $ranks --oversubscribe "$train" --model mlp --iters 6 --out "$work/run_bad" \
  --trace "$work/no-such-dir/trace.json" > "$bad" 2>&1 && { cat "$bad"; fail "an unwritable --trace was accepted"; }
grep -q "\[rank 0\] --trace: cannot write $work/no-such-dir/trace.json.tmp" "$bad" ||
  { cat "$bad"; fail "rank 0 does not name --trace and the file"; }
grep -q "\[rank 1\] rank 0 cannot write the trace: --trace: cannot write" "$bad" ||
  { cat "$bad"; fail "rank 1 does not say why"; }
ls "$work/run_bad"/ckpt-* >/dev/null 2>&1 && fail "the refused run trained anyway"
echo "trace_test: ok"
rm -rf "$work"
