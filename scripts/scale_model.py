#!/usr/bin/env python3
"""The alpha-beta model of ring allreduce, against tandem's step times and scaled out.

  scripts/scale_model.py RESULTS_DIR [--backward-share 0.67]     (RESULTS_DIR: scripts/cluster_bench.sh --out)
  scripts/scale_model.py --self-test

Model (one allreduce of b bytes over p ranks, ring: reduce-scatter then all-gather):
    t(b, p) = 2(p-1) alpha + 2(p-1)/p * b / beta
A phase (one backward's set of buckets) costs the sum over its buckets; a step is the measured
compute time at 1 rank plus, per phase, its communication:
  no overlap  every bucket's time is added;
  overlap     every bucket but the last is hidden behind the phase's backward, up to the
              backward's share of the phase's compute (compute split evenly over the phases,
              --backward-share of each); the last bucket is always exposed.
Scaling efficiency = compute / step time (the batch per rank is fixed).

Inputs from RESULTS_DIR: allreduce-h2-none.txt (alpha = the 4 KB time at 2 ranks / 2), the
shaped 2-host tables (beta: the link rate, and the busbw measured at 4 MB; "+eager": Open MPI
with a 16 MB TCP eager limit), train-*-np1.txt
(compute per step: the last progress line's ms/step at 1 rank), train-*-h2-<rate>.txt (the
step time across 2 hosts, and the "sync phase" lines: buckets and bytes per backward), and
step-h2-<rate>.txt (step_bench: each rank alone and DDP in one job, when present).
"""
import glob
import os
import re
import sys


def ring_time(nbytes, p, alpha, beta):
    """Seconds for one ring allreduce of nbytes over p ranks (alpha s, beta bytes/s)."""
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * alpha + 2.0 * (p - 1) / p * nbytes / beta


def phase_comm(buckets, p, alpha, beta):
    return sum(ring_time(b, p, alpha, beta) for b in buckets)


def step_time(compute, phases, p, alpha, beta, overlap, backward_share):
    """compute: seconds per step at 1 rank; phases: one list of bucket bytes per backward."""
    total = compute
    for buckets in phases:
        comm = phase_comm(buckets, p, alpha, beta)
        if overlap and buckets:
            hideable = phase_comm(buckets[:-1], p, alpha, beta)
            comm -= min(hideable, backward_share * compute / len(phases))
        total += comm
    return total


def assign_buckets(counts, first_cap=1 << 20, cap=25 << 20, element_bytes=4):
    """Bucket bytes in layout order: parameters in reverse registration order fill a bucket
    until its bytes reach the cap (1 MB for the first, 25 MB after), as bucket_assignment.h."""
    buckets, current = [], 0
    for c in reversed(counts):
        current += c * element_bytes
        if current >= (first_cap if not buckets else cap):
            buckets.append(current)
            current = 0
    if current:
        buckets.append(current)
    return buckets


def synthetic_25m():
    """reducer_bench's 25m set: 80 (weight [rows, 256], bias [rows]) pairs, rows = 240 (1 + 7i mod 9)."""
    counts = []
    for i in range(80):
        rows = 240 * (1 + (7 * i) % 9)
        counts += [rows * 256, rows]
    return counts


UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def parse_sync_phases(path):
    """Bucket bytes per phase from tandem-train's "sync phase" lines. The line gives the count,
    the largest and the total: the largest is taken as the last bucket (the first is capped at
    1 MB, the last holds the remainder) and the others share the rest evenly."""
    phases = []
    for line in open(path):
        m = re.search(r"sync phase \d+: .*?: (\d+) bucket\(s\), largest ([\d.]+) (\w+), ([\d.]+) (\w+) per backward", line)
        if not m:
            continue
        n = int(m.group(1))
        largest = float(m.group(2)) * UNITS[m.group(3)]
        total = float(m.group(4)) * UNITS[m.group(5)]
        phases.append([(total - largest) / (n - 1)] * (n - 1) + [largest] if n > 1 else [total])
    if not phases:
        sys.exit("scale_model.py: no 'sync phase' line in %s" % path)
    return phases


def parse_ms_per_step(path):
    ms = [float(m.group(1)) for m in re.finditer(r"([\d.]+) ms/step", open(path).read())]
    if not ms:
        sys.exit("scale_model.py: no 'ms/step' progress line in %s" % path)
    return ms[-1]


def parse_step_bench(path):
    """{(model, mode): median ms per step} from step_bench's table."""
    steps = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 3 and not line.startswith("#") and re.match(r"^[\d.]+$", f[2]):
            steps[(f[0], f[1])] = float(f[2])
    return steps


def parse_allreduce(path):
    rows = {}
    for line in open(path):
        f = line.split()
        if f and not line.startswith("#") and f[0].isdigit():
            rows[int(f[0])] = float(f[4]) * 1e-6
    if not rows:
        sys.exit("scale_model.py: no allreduce_bench rows in %s" % path)
    return rows


def rate_bytes(rate):
    n = int(re.match(r"\d+", rate).group())
    return n * (125e6 if rate.endswith("gbit") else 125e3)


def measured_vs_predicted(out, backward_share):
    alpha = parse_allreduce(os.path.join(out, "allreduce-h2-none.txt"))[4096] / 2
    print("== measured vs predicted step time, 2 hosts x 1 rank (alpha = 4 KB unshaped time / 2 = %.1f us;"
          " backward share of compute %.2f)" % (alpha * 1e6, backward_share))
    print("   beta = the link rate, or the busbw allreduce_bench measured at 4 MB under the same Open MPI setting;"
          " eager: --mca btl_tcp_eager_limit 16M")
    print("   tandem-train: compute = its run at 1 rank; step_bench: compute = its 'single' mode (each rank alone,"
          " same job, same load), measured = its 'whole' mode (DDP)")
    print("  %-12s %-6s %-13s %9s %8s %11s | %9s %9s | %9s %9s | %9s" % (
        "source", "model", "link", "compute", "comm", "beta", "no overl.", "overlap", "no overl.", "overlap",
        "measured"))
    print("  %-12s %-6s %-13s %9s %8s %11s | %-19s | %-19s | %9s" % (
        "", "", "", "ms", "MB/step", "GB/s", "pred. ms, link", "pred. ms, busbw", "ms"))
    rows = []  # source, model, rate, setting, compute s, measured ms
    for path in sorted(glob.glob(os.path.join(out, "train-*-h2-*.txt"))):
        model, rate, setting = re.match(r"train-(.+)-h2-(\d+[mg]bit)(\+\w+)?\.txt", os.path.basename(path)).groups()
        compute = parse_ms_per_step(os.path.join(out, "train-%s-np1.txt" % model)) * 1e-3
        rows.append(("tandem-train", model, rate, setting or "", compute, parse_ms_per_step(path)))
    for path in sorted(glob.glob(os.path.join(out, "step-h2-*.txt"))):
        rate, setting = re.match(r"step-h2-(\d+[mg]bit)(\+\w+)?\.txt", os.path.basename(path)).groups()
        steps = parse_step_bench(path)
        for model in sorted({m for m, _ in steps}):
            if (model, "single") in steps and (model, "whole") in steps:
                rows.append(("step_bench", model, rate, setting or "", steps[(model, "single")] * 1e-3,
                             steps[(model, "whole")]))
    for source, model, rate, setting, compute, measured in rows:
        phases = parse_sync_phases(os.path.join(out, "train-%s-h2-%s%s.txt" % (model, rate, setting)))
        link = rate_bytes(rate)
        bench = parse_allreduce(os.path.join(out, "allreduce-h2-%s%s.txt" % (rate, setting)))
        four_mb = min((b for b in bench if b >= 4 << 20), default=max(bench))
        busbw = four_mb / bench[four_mb]  # 2 ranks: busbw = algbw
        pred = [step_time(compute, phases, 2, alpha, beta, ov, backward_share) * 1e3
                for beta in (link, busbw) for ov in (False, True)]
        print("  %-12s %-6s %-13s %9.1f %8.2f %5.3f/%5.3f | %9.1f %9.1f | %9.1f %9.1f | %9.1f" % (
            source, model, rate + setting, compute * 1e3, sum(map(sum, phases)) / 1e6, link / 1e9, busbw / 1e9,
            pred[0], pred[1], pred[2], pred[3], measured))
    print()


LINKS = [("25 Gbit/s", 25e9 / 8, 25e-6), ("100 Gbit/s", 100e9 / 8, 10e-6), ("NVLink 300 GB/s", 300e9, 5e-6)]
RANKS = [8, 32, 128, 256]


def prediction_table(models, backward_share):
    print("== predicted step time and scaling efficiency (compute / step), batch per rank fixed")
    print("   links: %s" % "; ".join("%s alpha %g us" % (n, a * 1e6) for n, _, a in LINKS))
    for name, compute, phases in models:
        print("   %s: compute %.1f ms per step; buckets per phase (MB, layout order, the last never hidden): %s" % (
            name, compute * 1e3, " | ".join(" ".join("%.2f" % (b / 1e6) for b in ph) for ph in phases)))
    print("  %-22s %-16s %5s %8s %9s | %9s %6s | %9s %6s" % (
        "model (compute ms)", "link", "ranks", "buckets", "comm ms", "no overl.", "eff", "overlap", "eff"))
    for name, compute, phases in models:
        for link, beta, alpha in LINKS:
            for p in RANKS:
                comm = sum(phase_comm(b, p, alpha, beta) for b in phases) * 1e3
                plain = step_time(compute, phases, p, alpha, beta, False, backward_share)
                over = step_time(compute, phases, p, alpha, beta, True, backward_share)
                print("  %-22s %-16s %5d %8d %9.2f | %9.1f %5.0f%% | %9.1f %5.0f%%" % (
                    "%s (%.0f)" % (name, compute * 1e3), link, p, sum(map(len, phases)), comm, plain * 1e3,
                    100 * compute / plain, over * 1e3, 100 * compute / over))
        print()


def self_test():
    # p = 2: 2 alpha + b / beta; p = 4: 6 alpha + 1.5 b / beta.
    assert abs(ring_time(1e6, 2, 1e-4, 1e8) - (2e-4 + 1e-2)) < 1e-12
    assert abs(ring_time(1e6, 4, 1e-4, 1e8) - (6e-4 + 1.5e-2)) < 1e-12
    assert ring_time(1e6, 1, 1e-4, 1e8) == 0
    # Two buckets, 10 ms compute, backward share 0.5: the first bucket (10 ms) is hidden
    # up to 5 ms, the last (20 ms) never.
    phases = [[1e6, 2e6]]
    assert abs(step_time(0.010, phases, 2, 0, 1e8, False, 0.5) - 0.040) < 1e-12
    assert abs(step_time(0.010, phases, 2, 0, 1e8, True, 0.5) - 0.035) < 1e-12
    # With a long backward (50 ms) the first bucket hides whole and the last still shows.
    assert abs(step_time(0.100, phases, 2, 0, 1e8, True, 0.5) - 0.120) < 1e-12
    # Two phases share the compute: 5 ms of backward each.
    assert abs(step_time(0.020, phases * 2, 2, 0, 1e8, True, 0.5) - (0.020 + 2 * 0.025)) < 1e-12
    # The 25m set: 1 MB first bucket then 25 MB caps, about 98.8 MB in all.
    b = assign_buckets(synthetic_25m())
    assert b[0] >= 1 << 20 and b[0] < 2 << 20 and sum(b) == 4 * sum(synthetic_25m()), b
    assert all(x >= 25 << 20 for x in b[1:-1]), b
    print("scale_model.py: self-test passed")


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 2 or argv[1].startswith("-"):
        sys.exit(__doc__)
    out = argv[1]
    backward_share = 0.67
    if len(argv) == 4 and argv[2] == "--backward-share":
        backward_share = float(argv[3])
    elif len(argv) != 2:
        sys.exit("scale_model.py: unknown arguments %s" % argv[2:])
    measured_vs_predicted(out, backward_share)
    dcgan_compute = parse_ms_per_step(os.path.join(out, "train-dcgan-np1.txt")) * 1e-3
    dcgan_runs = sorted(glob.glob(os.path.join(out, "train-dcgan-h2-*.txt")))
    if not dcgan_runs:
        sys.exit("scale_model.py: no train-dcgan-h2-*.txt in %s (scripts/cluster_bench.sh writes it)" % out)
    dcgan_phases = parse_sync_phases(dcgan_runs[0])
    dcgan_bytes = sum(map(sum, dcgan_phases))
    counts = synthetic_25m()
    # The 25 M model's compute: dcgan's per gradient byte synchronised (stated assumption).
    big_compute = dcgan_compute * 4 * sum(counts) / dcgan_bytes
    models = [("dcgan", dcgan_compute, dcgan_phases), ("25M", big_compute, [assign_buckets(counts)])]
    prediction_table(models, backward_share)
    gpu = 100.0
    print("-- the same with compute %g x faster (a GPU-class rank: the communication no longer hides)" % gpu)
    prediction_table([(n + " /%g" % gpu, c / gpu, ph) for n, c, ph in models], backward_share)


if __name__ == "__main__":
    main(sys.argv)
