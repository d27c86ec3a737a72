#!/usr/bin/env bash
# allreduce_bench and GAN step times across the hosts of a virtual cluster (scripts/cluster.sh),
# with the host links shaped by tc tbf, one rank per host.
#
#   scripts/cluster_bench.sh [--quick] [--hosts "2 4"] [--rates "1gbit 10gbit"] [--out DIR]
#
# For each host count: the cluster is built (one slot per host), allreduce_bench runs once on
# unshaped links (its 4 KB time gives the latency alpha; the links are veth pairs through a
# bridge, so there is no propagation delay to configure: this kernel has no netem) and once per
# rate with a token bucket (tbf) on both ends of every host's link, each under Open MPI's
# defaults and with a 16 MB TCP eager limit (mpi_settings below). At 2 hosts it also times
# tandem-train (mlp, dcgan) on the slowest rate, and at 1 rank without communication (the
# compute time per step), and step_bench (mlp, dcgan; each rank alone against DDP, in one job) on
# the slowest rate, for scripts/scale_model.py. Prints a table per host count:
# bytes, busbw, link rate, busbw / link rate (target >= 0.8 at >= 4 MB), 4 KB latency; the raw
# outputs go to --out (default bench/results/cluster-<timestamp>).
#
# Environment: TANDEM_BUILD (default build; needs allreduce_bench, tandem-train, step_bench),
# TANDEM_CLUSTER (default tandem-bench). Every job is bounded (cluster.sh run --timeout) and the
# cluster is removed when the script ends, however it ends. Needs what cluster.sh needs
# (root, iproute2) plus tc; exits 77 naming what is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=common.sh
source "$ROOT/scripts/common.sh"
export TANDEM_CLUSTER="${TANDEM_CLUSTER:-tandem-bench}"
cluster="$ROOT/scripts/cluster.sh"
bin="$TANDEM_BUILD/bin"

hosts_list="2 4"
rates="1gbit 10gbit"
out="$ROOT/bench/results/cluster-$(date +%Y%m%d-%H%M%S)"
bench_args=(--min-bytes 4K --max-bytes 64M --iters 10 --warmup 2)
train_iters=40
step_args=(--steps 20 --runs 3 --warmup 3)
while [ $# -gt 0 ]; do
  case "$1" in
    --quick)
      bench_args=(--min-bytes 4K --max-bytes 16M --iters 4 --warmup 1)
      train_iters=10 step_args=(--steps 5 --runs 1 --warmup 1)
      shift ;;
    --hosts) hosts_list="${2:?--hosts needs a list}"; shift 2 ;;
    --rates) rates="${2:?--rates needs a list}"; shift 2 ;;
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    *) echo "cluster_bench.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for rate in $rates; do
  [[ "$rate" =~ ^[0-9]+(mbit|gbit)$ ]] || { echo "cluster_bench.sh: rate '$rate' is not <N>mbit or <N>gbit" >&2; exit 2; }
done
for program in allreduce_bench tandem-train step_bench; do
  [ -x "$bin/$program" ] || { echo "cluster_bench.sh: $bin/$program is missing (cmake --build $TANDEM_BUILD --target $program)" >&2; exit 1; }
done
command -v tc > /dev/null || { echo "cluster_bench.sh: SKIP: no 'tc' command (iproute2)" >&2; exit 77; }
rc=0
"$cluster" check || rc=$?
[ $rc -eq 0 ] || exit $rc
mkdir -p "$out"
trap '"$cluster" down || true' EXIT
trap 'exit 130' INT TERM  # through the EXIT trap: the cluster is removed

rate_bytes_per_s() {  # 1gbit -> 125000000
  local n="${1%[mg]bit}"
  case "$1" in *gbit) echo $((n * 125000000)) ;; *mbit) echo $((n * 125000)) ;; esac
}

# shape <hosts> <rate|none>: a token bucket on both ends of every host's link (burst: 1 ms at
# the rate, at least 128 kB so that a 64 kB offloaded segment always fits).
shape() {
  local hosts="$1" rate="$2" i ns dev burst
  for i in $(seq 1 "$hosts"); do
    for end in "$TANDEM_CLUSTER-switch:host$i" "$TANDEM_CLUSTER-host$i:eth0"; do
      ns="${end%%:*}" dev="${end#*:}"
      ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
      [ "$rate" != none ] || continue
      burst=$(( $(rate_bytes_per_s "$rate") / 1000 ))
      [ $burst -ge 131072 ] || burst=131072
      ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 20ms
    done
  done
}

# Open MPI's settings under test: its defaults (over TCP, messages above 64 kB go through a
# rendezvous: a handshake that waits behind the data queued on the shaped link), and "eager":
# messages up to 16 MB sent at once, without the handshake.
declare -A mpi_settings=([default]="" [eager]="--mca btl_tcp_eager_limit 16777216 --mca btl_tcp_max_send_size 16777216")
suffix() { [ "$1" = default ] && echo "" || echo "+$1"; }

train() {  # <log> <np> <model> <setting>: tandem-train; the last progress line is the second half's ms/step
  local log="$1" np="$2" model="$3" dir
  dir="$(mktemp -d "$out/run-XXXX")"
  # shellcheck disable=SC2086  # the setting is a list of mpirun arguments
  "$cluster" run --timeout 580 -- -np "$np" ${mpi_settings[$4]} "$bin/tandem-train" --model "$model" \
    --iters $train_iters --log-every $((train_iters / 2)) --seed 1 --out "$dir" > "$log" 2>&1 ||
    { echo "cluster_bench.sh: tandem-train $model at $np rank(s) failed; see $log" >&2; return 1; }
}

for hosts in $hosts_list; do
  "$cluster" up "$hosts" --slots 1
  for rate in none $rates; do
    shape "$hosts" "$rate"
    for setting in default eager; do
      log="$out/allreduce-h$hosts-$rate$(suffix $setting).txt"
      # shellcheck disable=SC2086
      "$cluster" run --timeout 580 -- -np "$hosts" ${mpi_settings[$setting]} "$bin/allreduce_bench" "${bench_args[@]}" \
        > "$log" 2>&1 ||
        { cat "$log" >&2; echo "cluster_bench.sh: allreduce_bench at $hosts hosts, $rate, $setting failed" >&2; exit 1; }
    done
  done
  if [ "$hosts" = 2 ]; then
    slowest="${rates%% *}"
    shape "$hosts" none
    for model in mlp dcgan; do train "$out/train-$model-np1.txt" 1 "$model" default; done
    shape "$hosts" "$slowest"
    for setting in default eager; do
      for model in mlp dcgan; do train "$out/train-$model-h2-$slowest$(suffix $setting).txt" 2 "$model" "$setting"; done
      # The same models in step_bench: "single" (no communication) and "whole" (DDP) interleaved
      # in one job, so both see the same load of two ranks on this machine's cores.
      log="$out/step-h2-$slowest$(suffix $setting).txt"
      # shellcheck disable=SC2086
      "$cluster" run --timeout 580 -- -np 2 ${mpi_settings[$setting]} "$bin/step_bench" --models mlp,dcgan \
        --modes single,whole "${step_args[@]}" > "$log" 2>&1 ||
        { cat "$log" >&2; echo "cluster_bench.sh: step_bench at 2 hosts, $slowest, $setting failed" >&2; exit 1; }
    done
    shape "$hosts" none
  fi
  "$cluster" down
done

python3 - "$out" "$hosts_list" "$rates" <<'EOF'
import re, sys
out, hosts_list, rates = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def rate_gbs(rate):
    n = int(re.match(r"\d+", rate).group())
    return n * (0.125 if rate.endswith("gbit") else 0.000125)
def rows(path):
    table = {}
    for line in open(path):
        f = line.split()
        if f and not line.startswith("#") and f[0].isdigit():
            table[int(f[0])] = float(f[4])  # bytes: time (us)
    return table
for hosts in hosts_list:
    n = int(hosts)
    base = rows("%s/allreduce-h%s-none.txt" % (out, hosts))
    lat = base[min(base)]
    print("== %s hosts x 1 rank, TCP over veth: 4 KB allreduce latency (unshaped, Open MPI defaults) %.1f us,"
          " alpha = %.1f us" % (hosts, lat, lat / (2 * (n - 1))))
    print("   busbw = bytes / time * 2(n-1)/n; ratio = busbw / link rate (target >= 0.8 at >= 4 MB);"
          " eager = --mca btl_tcp_eager_limit 16M")
    print("  %-10s %10s | %10s %10s %6s | %10s %10s %6s | %s" % (
        "link", "bytes", "time us", "busbw GB/s", "ratio", "time us", "busbw GB/s", "ratio", "target: default / eager"))
    print("  %-10s %10s | %-29s | %-29s |" % ("", "", "Open MPI defaults", "eager"))
    for rate in ["none"] + rates:
        link = rate_gbs(rate) if rate != "none" else None
        tables = [rows("%s/allreduce-h%s-%s%s.txt" % (out, hosts, rate, sfx)) for sfx in ("", "+eager")]
        for b in sorted(tables[0]):
            cells, verdicts = [], []
            for table in tables:
                t = table.get(b)
                bw = b / t / 1e3 * 2 * (n - 1) / n if t else None  # GB/s (the bench prints 2 decimals)
                ratio = bw / link if link and bw else None
                cells.append("%10.1f %10.3f %6s" % (t, bw, "%.2f" % ratio if ratio else "-") if t else "%29s" % "-")
                verdicts.append("-" if ratio is None else ("met" if ratio >= 0.8 else "MISSED"))
            print("  %-10s %10d | %s | %s | %s" % ("%.3f GB/s" % link if link else "unshaped", b, cells[0], cells[1],
                  " / ".join(verdicts) if link and b >= 4 << 20 else ""))
        print()
EOF
echo "raw outputs: $out"
