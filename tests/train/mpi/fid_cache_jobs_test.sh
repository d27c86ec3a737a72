#!/usr/bin/env bash
# Jobs sharing one FID cache (docs/fid.md). Two tandem-fid-features jobs started together on
# a cold cache each train the feature network and compute the real statistics, and both
# write each of the two files at the same time (every fsync slowed by 1.5 s, so that their
# writes overlap). When every writer of a path used "<path>.tmp", each unlinked the other's
# and one job ended "renaming over the final name ... No such file or directory". Here both
# jobs must end normally, report the same network and the same statistics, and leave the
# two files and no temporary. Then the next job removes a temporary left an hour ago by a
# killed writer, naming it, and keeps a fresh one (perhaps another job's, being written).
# Last, a 2-rank training run with FID on a cold cache: rank 0 trains the network alone while
# the data-parallel model lives, and its optimizer steps must not count as the Reducer's
# (once they did: "ranks diverge ... rank 0: backward 1 after 2811 optimizer steps").
# The data is a small Fashion-MNIST of random pixels, so that the network trains in seconds.
#   fid_cache_jobs_test.sh <mpiexec> <tandem-train> <tandem-fid-features> <work dir>
set -uo pipefail
mpiexec="$1"; train="$2"; features="$3"; work="$4"
test_name=fid_cache_jobs_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
rm -rf "$work"; mkdir -p "$work/data" "$work/cache"

python3 - "$work/data" <<'PY' || fail "cannot write the small Fashion-MNIST"
import gzip, random, struct, sys
random.seed(7)
def write(name, dims, values):
    magic = 0x0800 + len(dims)  # unsigned bytes, len(dims) dimensions
    with gzip.open(sys.argv[1] + "/" + name, "wb") as f:
        f.write(struct.pack(">i", magic) + b"".join(struct.pack(">i", d) for d in dims) + bytes(values))
for split, count in (("train", 128), ("t10k", 300)):
    write(split + "-images-idx3-ubyte.gz", (count, 28, 28), [random.randrange(256) for _ in range(count * 784)])
    write(split + "-labels-idx1-ubyte.gz", (count,), [i % 10 for i in range(count)])
PY

run_job() {  # <log>
  TANDEM_FAULT_SLOW_FSYNC_MS=1500 OMP_NUM_THREADS=1 \
    "$features" --train --data-dir "$work/data" --cache-dir "$work/cache" --epochs 1 > "$1" 2>&1
}
run_job "$work/a.log" & a=$!
run_job "$work/b.log" & b=$!
wait "$a"; rc_a=$?
wait "$b"; rc_b=$?
[ "$rc_a" = 0 ] || { cat "$work/a.log"; fail "job a sharing the cache ended with $rc_a"; }
[ "$rc_b" = 0 ] || { cat "$work/b.log"; fail "job b sharing the cache ended with $rc_b"; }
for job in a b; do
  grep -q "FID feature network .*: wrote " "$work/$job.log" ||
    { cat "$work/$job.log"; fail "job $job did not train and write the network (the cache was warm?)"; }
done
summary() { grep -E "^feature network |^real statistics" "$1" | sed -e 's/ in [0-9.]* s//g'; }
[ "$(summary "$work/a.log")" = "$(summary "$work/b.log")" ] ||
  { diff <(summary "$work/a.log") <(summary "$work/b.log"); fail "the two jobs report different results"; }
left=$(cd "$work/cache" && ls -A | sort | tr '\n' ' ')
case "$left" in
  "fid-features-"*".ckpt fid-real-"*".ckpt ") ;;
  *) fail "the cache holds '$left', not the network and the real statistics alone" ;;
esac

# A killed writer's temporary an hour old is removed; a fresh one is kept.
network=$(cd "$work/cache" && ls fid-features-*.ckpt)
stale="$work/cache/$network.tmp.4242.0badcafe"
fresh="$work/cache/$network.tmp.4343.00c0ffee"
printf 'half-written' > "$stale"; touch -d '2 hours ago' "$stale"
printf 'being written' > "$fresh"
"$features" --train --data-dir "$work/data" --cache-dir "$work/cache" --epochs 1 > "$work/c.log" 2>&1 ||
  { cat "$work/c.log"; fail "a job on the warm cache failed"; }
grep -q "loaded .*$network" "$work/c.log" || { cat "$work/c.log"; fail "the warm cache's network was not loaded"; }
[ ! -e "$stale" ] || fail "the stale temporary $stale was left in the cache"
grep -q "FID cache: removed $stale (left by a job that stopped while writing it)" "$work/c.log" ||
  { cat "$work/c.log"; fail "the removal of $stale was not logged"; }
[ -e "$fresh" ] || fail "the fresh temporary $fresh (another job's, perhaps) was removed"

# A training run at 2 ranks on a cold cache of its own: rank 0 trains the network, then every
# rank trains the GAN and computes the FID.
OMP_NUM_THREADS=1 "$mpiexec" -np 2 "$train" --model mlp --data-dir "$work/data" --batch 16 --iters 2 \
  --log-every 2 --fid-every 2 --fid-samples 64 --fid-network train --fid-cache "$work/cold" --out "$work/run" > "$work/d.log" 2>&1 ||
  { cat "$work/d.log"; fail "a 2-rank run whose rank 0 trained the FID network on a cold cache failed"; }
grep -q "FID feature network .*: wrote " "$work/d.log" || { cat "$work/d.log"; fail "the cold cache's network was not trained"; }
grep -q '"fid' "$work/run/metrics.jsonl" || { cat "$work/d.log"; fail "the run logged no FID"; }
echo "$test_name: two jobs on one cold cache ended normally with the same network and statistics;" \
  "a stale temporary was removed and a fresh one kept; a 2-rank run trained the network on rank 0 and went on"
