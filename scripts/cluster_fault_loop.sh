#!/usr/bin/env bash
# Faults at random moments on a virtual cluster of 2 hosts x 2 ranks (issue 15, section 4).
#   cluster_fault_loop.sh [--faults N] [--max-seconds S] [--build DIR]
# Runs N (default 20, at most 100) tandem-train jobs (mlp, 200 iterations, a checkpoint
# every 10, TANDEM_COLLECTIVE_TIMEOUT_S=5) and breaks one link in each at a random moment:
# a random host, black-holed or set down, a random 0-1 s after a random checkpoint of
# iterations 10-100. After each: heals the link and resumes. Counts
#   hangs      a rank still running past the collective timeout + 15 s, or mpirun past
#              the collective timeout + 25 s (it gives up the cut-off host after the ranks)
#   unnamed    a rank that ended without tandem's named timeout error
#   zero exit  mpirun exiting 0 after a fault
#   lost       a checkpoint complete before the fault missing, or not byte-equal to the
#              uninterrupted run's (lost or corrupt)
#   resume     a resumed run failing, or not ending with the uninterrupted run's bytes
# and prints the time from the break until every rank ended, and until mpirun ended
# (min / median / max). Exit status 0 when every count is 0. Stops starting faults after
# --max-seconds (default 1800); the cluster (TANDEM_CLUSTER, default tandem-loop) is
# removed at the end, however the script ends. Needs root (see cluster.sh check).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
faults=20 max_seconds=1800 build="$root/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --faults) faults="${2:-}"; shift 2 ;;
    --max-seconds) max_seconds="${2:-}"; shift 2 ;;
    --build) build="${2:-}"; shift 2 ;;
    *) echo "cluster_fault_loop.sh: unknown argument '$1' (usage: [--faults N] [--max-seconds S] [--build DIR])" >&2; exit 2 ;;
  esac
done
[[ "$faults" =~ ^[0-9]+$ ]] && [ "$faults" -ge 1 ] && [ "$faults" -le 100 ] ||
  { echo "cluster_fault_loop.sh: --faults '$faults' must be a number from 1 to 100" >&2; exit 2; }
[[ "$max_seconds" =~ ^[0-9]+$ ]] || { echo "cluster_fault_loop.sh: --max-seconds '$max_seconds' must be a number" >&2; exit 2; }
cluster_sh="$root/scripts/cluster.sh"
train="$build/bin/tandem-train"
[ -x "$train" ] || { echo "cluster_fault_loop.sh: no $train (build the tandem-train target, or pass --build)" >&2; exit 2; }
test_name=cluster_fault_loop
work="$(mktemp -d /tmp/cluster_fault_loop.XXXXXX)"
export TANDEM_CLUSTER="${TANDEM_CLUSTER:-tandem-loop}"
export TANDEM_COLLECTIVE_TIMEOUT_S=5
source "$root/tests/train/mpi/cluster_test_lib.sh"
source "$root/tests/train/mpi/cluster_link_fault_lib.sh"
trap 'exit 130' INT TERM
start_cluster 2  # removes the cluster at exit (trap); skips with 77 where it cannot be built
trap 'stop_cluster; rm -rf "$work"' EXIT
limit=$(( TANDEM_COLLECTIVE_TIMEOUT_S + 15 )) job_limit=$(( TANDEM_COLLECTIVE_TIMEOUT_S + 25 ))
final=$(printf 'ckpt-%06d.safetensors' $link_fault_iters)

job_on_cluster "$work/straight" > "$work/straight.mpirun.log" 2>&1 ||
  { cat "$work/straight.mpirun.log"; fail "the uninterrupted run failed"; }
[ -f "$work/straight/$final" ] || fail "no final checkpoint in the uninterrupted run"

hangs=0 unnamed=0 zero_exit=0 lost=0 resume=0 done_faults=0
ranks_times=() job_times=()
started=$SECONDS
for n in $(seq 1 "$faults"); do
  [ $((SECONDS - started)) -lt "$max_seconds" ] || { echo "stopping after $((SECONDS - started)) s (--max-seconds)"; break; }
  kinds=(blackhole down); kind=${kinds[RANDOM % 2]}
  host=$(( RANDOM % 2 + 1 ))
  after=$(( (RANDOM % 10 + 1) * 10 ))
  delay=$(awk -v r=$RANDOM 'BEGIN{printf "%.2f", (r % 100) / 100}')
  out="$work/fault-$n"
  faulted_run "$out" "$kind" "$host" "$after" "$delay"
  problems=""
  if [ "$fault_ranks_s" = hang ] || awk -v s="$fault_ranks_s" -v j="$fault_job_s" -v l=$limit -v jl=$job_limit 'BEGIN{exit !(s > l || j > jl)}'; then
    hangs=$((hangs + 1)); problems="$problems hang"
  fi
  [ "$fault_ranks_s" = hang ] || ranks_times+=("$fault_ranks_s")
  job_times+=("$fault_job_s")
  if ! timeout_errors "$out" > "$out.errors"; then unnamed=$((unnamed + 1)); problems="$problems unnamed"; fi
  [ "$fault_job_rc" -ne 0 ] || { zero_exit=$((zero_exit + 1)); problems="$problems zero-exit"; }
  if ! why=$(checkpoints_intact "$out" "$work/straight"); then lost=$((lost + 1)); problems="$problems lost($why)"; fi
  "$cluster_sh" heal "$host" || fail "cluster.sh heal $host failed"
  if job_on_cluster "$out" --resume > "$out.resumed.log" 2>&1 && cmp -s "$work/straight/$final" "$out/$final"; then :; else
    resume=$((resume + 1)); problems="$problems resume"
  fi
  tags=$(grep -o "tag '[a-z-]*[ a-z0-9]*" "$out.errors" | sort | uniq -c | awk '{$1=$1; print}' | paste -sd ';')
  echo "fault $n: $kind host $host, ${delay} s after ckpt $after: ranks ended after ${fault_ranks_s} s," \
       "mpirun after ${fault_job_s} s (exit $fault_job_rc); stuck in: $tags;${problems:- ok}"
  done_faults=$n
  rm -rf "$out" "$out.logs"
done

stats() {  # label, values...: min / median / max
  local label="$1"; shift
  printf '%s\n' "$@" | sort -g | awk -v label="$label" '{v[NR] = $1} END {
    if (NR == 0) { print label ": none"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%s: min %.1f s, median %.1f s, max %.1f s (%d faults)\n", label, v[1], m, v[NR], NR }'
}
echo "faults: $done_faults; hangs: $hangs; unnamed errors: $unnamed; mpirun exit 0: $zero_exit;" \
     "lost or corrupt checkpoints: $lost; failed or diverging resumes: $resume"
stats "time from the break until every rank ended" "${ranks_times[@]}"
stats "time from the break until mpirun ended" "${job_times[@]}"
[ $((hangs + unnamed + zero_exit + lost + resume)) -eq 0 ]
