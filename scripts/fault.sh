#!/usr/bin/env bash
# Fault script: a manual tool (CI does not run it) that attacks tandem-train at 2 ranks and
# prints a table of outcomes (case | outcome | seconds | message), then a summary line.
#
#   scripts/fault.sh [mutants] [kills] [freezes]     (no argument: all three)
#
# mutants  every checkpoint mutant of scripts/fault_mutate.py (truncations, bit flips in the
#          length, header and data, bad lengths, overlapping offsets, NaN data, missing
#          entries, mangled metadata, ...) is made the only checkpoint of a run dir (the one
#          of iteration 20), and the run is resumed to iteration 40. Outcomes: "refused"
#          (non-zero exit, the error names the file), "bit-exact" (exit 0, it resumed from
#          the file, and the final checkpoint is byte-identical to an uninterrupted run's),
#          "HANG" (the hard timeout fired), "WRONG" (anything else: an error that does not
#          name the file, a different result, the checkpoint ignored and the run started
#          over from iteration 0).
# kills    SIGKILL, SIGTERM or SIGINT to a random rank at a random point of a 2000-iteration
#          run, then --resume: "bit-exact" when the killed job ended within the hard timeout
#          and the resumed run ends byte-identical to the uninterrupted run.
# freezes  SIGSTOP to a random rank mid-run with TANDEM_COLLECTIVE_TIMEOUT_S=5: "timed out
#          (named)" when the job ends within the deadline plus grace with tandem's message
#          naming the stalled collective, and the resumed run ends byte-identical ("missed"
#          when the run was over before the signal). Last, one rank stopped as the job shuts
#          down, when the final checkpoint appears: "timed out (named)" when it was stopped
#          at the end barrier or in MPI_Finalize before the last exchange (the others end the
#          job at the deadline, naming the phase); "after MPI" when it was stopped past its
#          last exchange, all others having exited 0 with the run complete: no process can
#          act then, and only the launcher's limit (mpirun --timeout) ends the job.
#
# Exits 1 when any case is HANG or WRONG. Every run is under a hard timeout; the whole
# script takes about 5 minutes on 2 cores. Its files go to a temporary directory, removed
# at the end. Needs python3 (the mutants) and a built tandem-train.
# Environment: TANDEM_BUILD (build folder with bin/tandem-train), FAULT_KILLS (10),
# FAULT_FREEZES (3), FAULT_SEED (the random points; printed, so that a run can be
# replayed), FAULT_ONLY (a regex: only the mutants whose name matches), FAULT_KEEP=1 (keep
# the temporary directory and the logs).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

train="$TANDEM_BUILD/bin/tandem-train"
mutate="$TANDEM_ROOT/scripts/fault_mutate.py"
[ -x "$train" ] || { echo "fault.sh: no $train (build it: cmake --build build --target tandem-train)" >&2; exit 2; }
command -v python3 > /dev/null || { echo "fault.sh: python3 is needed for the checkpoint mutants" >&2; exit 2; }
command -v timeout > /dev/null || { echo "fault.sh: timeout (coreutils) is needed" >&2; exit 2; }

sections="${*:-mutants kills freezes}"
for s in $sections; do
  case "$s" in mutants | kills | freezes) ;; *) echo "fault.sh: unknown section '$s' (mutants, kills, freezes)" >&2; exit 2 ;; esac
done
wants() { [[ " $sections " == *" $1 "* ]]; }
kills="${FAULT_KILLS:-10}"
freezes="${FAULT_FREEZES:-3}"
seed="${FAULT_SEED:-$(( $(date +%s) % 32768 ))}"
RANDOM=$seed
run_limit=60        # seconds: a run that takes longer is a hang
freeze_deadline=5   # TANDEM_COLLECTIVE_TIMEOUT_S for the freezes
freeze_grace=25     # seconds after the deadline for the job to be gone

work="$(mktemp -d "${TMPDIR:-/tmp}/tandem-fault.XXXXXX")"
job=""
cleanup() {
  # Ranks left behind by a hung or stopped job (found by the run dirs, which only ours use).
  for pid in $(pgrep -f "tandem-train.*$work" 2> /dev/null) $job; do
    kill -CONT "$pid" 2> /dev/null
    kill -KILL "$pid" 2> /dev/null
  done
  if [ "${FAULT_KEEP:-0}" = 1 ]; then echo "fault.sh: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Short runs for the mutants, long ones (about 3 s) for kills and freezes to land in.
common=(--model ring8-mlp --ema-decay 0.99 --seed 3 --log-every 100000)
short=(--batch 16 --ckpt-every 20)
long=(--batch 256 --ckpt-every 200)
short_iters=40 long_iters=2000

mpi() {  # tandem-train at 2 ranks; stdin closed (mpirun would eat the mutant list)
  mpirun -np 2 --oversubscribe "$train" "${common[@]}" "$@" < /dev/null
}
ckpt_name() { printf 'ckpt-%06d.safetensors' "$1"; }

# ---- The table.
rows=0
declare -A counts=()
row() {  # case outcome seconds message (paths shown relative to the work dir)
  local message="${4//$work\//}"
  printf '%-26s | %-17s | %5s | %s\n' "$1" "$2" "$3" "${message:0:120}"
  counts[$2]=$(( ${counts[$2]:-0} + 1 ))
  rows=$(( rows + 1 ))
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
secs_since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }

# The text after the last mention of <file> on the first line of <log> that names it.
named_excerpt() {  # log file
  local base line
  base="$(basename "$2")"
  line="$(grep -F -m 1 "$2" "$1")"
  echo "${line##*"$base": }"
}

# Resumes <dir> to <iters> under the hard timeout and classifies the result against
# <reference>; <file> is the checkpoint it must resume from. Sets outcome and message.
resume_and_classify() {  # dir iters reference file log run-args...
  local dir="$1" iters="$2" reference="$3" file="$4" log="$5" rc final resumed
  shift 5
  timeout -k 5 "$run_limit" mpirun -np 2 --oversubscribe "$train" "${common[@]}" "$@" --iters "$iters" \
    --resume --out "$dir" < /dev/null > "$log" 2>&1
  rc=$?
  final="$dir/$(ckpt_name "$iters")"
  resumed="$(grep -m 1 -o 'resuming from .* at iteration [0-9]*' "$log" | sed 's/.* at iteration/resumed at/')"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    outcome=HANG message="no end within ${run_limit} s"
  elif [ $rc -ne 0 ]; then
    if grep -qF "$file" "$log"; then
      outcome=refused message="$(named_excerpt "$log" "$file")"
    else
      outcome=WRONG message="exit $rc without naming $(basename "$file"): $(grep -m 1 -i error "$log")"
    fi
  elif ! grep -qF "resuming from $file" "$log"; then
    outcome=WRONG message="ignored the checkpoint: $(grep -m 1 -E 'resuming from|no checkpoint' "$log")"
  elif ! cmp -s "$reference" "$final"; then
    outcome=WRONG message="exit 0, $resumed, final checkpoint differs"
  else
    outcome=bit-exact message="$resumed, final checkpoint identical"
  fi
}

# The pid of rank <rank> of the job writing to <dir>, or nothing.
rank_pid() {  # dir rank
  local pid
  for pid in $(pgrep -f "tandem-train.*$1( |$)"); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$pid"
      return
    fi
  done
}

# Starts a long run into <dir>, waits until <file> exists (or <log> has the line <pattern>,
# when <file> is "log:<pattern>"), then <delay_ms>, and sends <signal> to rank <rank>. Sets
# job (the mpirun pid), victim (empty when the run ended first) and signalled_ms.
start_and_signal() {  # dir log file delay_ms signal rank
  local dir="$1" log="$2" when="$3" deadline
  mkdir -p "$(dirname "$log")"
  mpi "${long[@]}" --iters $long_iters --out "$dir" > "$log" 2>&1 &
  job=$!
  deadline=$(( $(now_ms) + run_limit * 1000 ))
  reached() { if [[ "$when" == log:* ]]; then grep -q "${when#log:}" "$log" 2> /dev/null; else [ -f "$when" ]; fi; }
  while ! reached && kill -0 $job 2> /dev/null && [ "$(now_ms)" -lt $deadline ]; do sleep 0.01; done
  sleep "$(awk -v ms="$4" 'BEGIN { printf "%.3f", ms / 1000 }')"
  victim="$(rank_pid "$dir" "$6")"
  [ -n "$victim" ] && kill "-$5" "$victim" 2> /dev/null
  signalled_ms=$(now_ms)
}

# Ends whatever is left of the job writing to <dir> (a stopped rank, a hung job).
end_job() {  # dir
  local pid
  for pid in $(pgrep -f "tandem-train.*$1( |$)") $job; do
    kill -CONT "$pid" 2> /dev/null
    kill -KILL "$pid" 2> /dev/null
  done
}

# Waits up to <seconds> for the job writing to <dir>; sets job_rc (HANG when it had to be
# ended).
wait_job() {  # dir seconds
  local deadline=$(( $(now_ms) + $2 * 1000 ))
  while kill -0 $job 2> /dev/null && [ "$(now_ms)" -lt $deadline ]; do sleep 0.05; done
  if kill -0 $job 2> /dev/null; then
    job_rc=HANG
    end_job "$1"
    wait $job 2> /dev/null
  else
    wait $job
    job_rc=$?
  fi
  job=""
}

newest_checkpoint() { find "$1" -maxdepth 1 -name 'ckpt-*.safetensors' | sort | tail -n 1; }

echo "fault.sh: $train, 2 ranks, seed $seed (FAULT_SEED=$seed replays the random points), files in $work"

# ---- The references: runs without interruption.
ref="$work/ref-short" ref_long="$work/ref-long"
mpi "${short[@]}" --iters $short_iters --out "$ref" > "$ref.log" 2>&1 ||
  { cat "$ref.log"; echo "fault.sh: the reference run failed" >&2; exit 2; }
if wants kills || wants freezes; then
  mpi "${long[@]}" --iters $long_iters --out "$ref_long" > "$ref_long.log" 2>&1 ||
    { cat "$ref_long.log"; echo "fault.sh: the long reference run failed" >&2; exit 2; }
fi
ref_final="$ref/$(ckpt_name $short_iters)" ref_long_final="$ref_long/$(ckpt_name $long_iters)"
echo
printf '%-26s | %-17s | %5s | %s\n' case outcome s message
printf '%s\n' "---------------------------+-------------------+-------+---------------------------------------------"

# ---- Mutants: each one the only checkpoint of its run dir.
if wants mutants; then
  while IFS=$'\t' read -r name _; do
    [[ -n "${FAULT_ONLY:-}" && ! "$name" =~ $FAULT_ONLY ]] && continue
    dir="$work/mutant/$name"
    mkdir -p "$dir"
    file="$dir/$(ckpt_name 20)"
    python3 "$mutate" apply "$name" "$ref/$(ckpt_name 20)" "$file" "$ref_final" ||
      { row "$name" WRONG - "the mutant could not be made"; continue; }
    started=$(now_ms)
    resume_and_classify "$dir" $short_iters "$ref_final" "$file" "$dir.log" "${short[@]}"
    row "$name" "$outcome" "$(secs_since "$started")" "$message"
    [ "$outcome" = HANG ] || [ "$outcome" = WRONG ] || rm -rf "$dir" "$dir.log"
  done < <(python3 "$mutate" list)
fi

# ---- Kills: a random signal to a random rank after a random checkpoint; then --resume.
if wants kills; then
  signals=(KILL TERM INT)
  for i in $(seq 1 "$kills"); do
    sig=${signals[RANDOM % 3]} rank=$(( RANDOM % 2 )) at=$(( (RANDOM % 8 + 1) * 200 )) delay=$(( RANDOM % 300 ))
    dir="$work/kill/$i"
    name="kill-$i SIG$sig rank $rank"
    started=$(now_ms)
    start_and_signal "$dir" "$dir.log" "$dir/$(ckpt_name $at)" "$delay" "$sig" "$rank"
    wait_job "$dir" "$run_limit"
    ended="$(secs_since "$signalled_ms")"
    if [ "$job_rc" = HANG ]; then
      row "$name" HANG "$(secs_since "$started")" "the job did not end within ${run_limit} s of SIG$sig"
      continue
    fi
    when="ckpt $at +${delay} ms"
    if [ -z "$victim" ]; then
      when="run over before the signal"
      [ "$job_rc" -eq 0 ] || { row "$name" WRONG "$(secs_since "$started")" "the run failed (exit $job_rc)"; continue; }
    fi
    newest="$(newest_checkpoint "$dir")"
    [ -n "$newest" ] || { row "$name" WRONG "$(secs_since "$started")" "$when: no checkpoint left"; continue; }
    resume_and_classify "$dir" $long_iters "$ref_long_final" "$newest" "$dir.resume.log" "${long[@]}"
    row "$name" "$outcome" "$(secs_since "$started")" "$when; exit $job_rc ${ended} s later; $message"
    [ "$outcome" = HANG ] || [ "$outcome" = WRONG ] || rm -rf "$dir" "$dir".*log
  done
fi

# ---- Freezes: SIGSTOP a random rank; the other must give up at the collective deadline.
freeze() {  # name dir wait-for delay rank
  local name="$1" dir="$2" stalled newest
  started=$(now_ms)
  TANDEM_COLLECTIVE_TIMEOUT_S=$freeze_deadline start_and_signal "$dir" "$dir.log" "$3" "$4" STOP "$5"
  wait_job "$dir" $(( freeze_deadline + freeze_grace ))
  ended="$(secs_since "$signalled_ms")"
  end_job "$dir"  # the stopped rank, if the job's end left it behind
  if [ "$job_rc" = HANG ] && grep -q "^metrics: " "$dir.log" && ! grep -qE "ending the job|timed out after" "$dir.log"; then
    # Every other rank finished MPI_Finalize and exited 0: the stopped rank was past its
    # last exchange with them (the tail of MPI_Finalize, or exit), where no peer is left to
    # notice and a stopped process runs no watchdog of its own. Only the launcher's limit
    # (mpirun --timeout, srun --time) ends such a job; the run itself is complete.
    row "$name" "after MPI" "$(secs_since "$started")" \
      "stopped past its last exchange; the others exited 0, final checkpoint $(basename "$(newest_checkpoint "$dir")"); the launcher's limit ends it"
    return
  fi
  if [ "$job_rc" = HANG ]; then
    row "$name" HANG "$(secs_since "$started")" \
      "the job did not end within $(( freeze_deadline + freeze_grace )) s of SIGSTOP ($(tail -n 1 "$dir.log"))"
    return
  fi
  if [ -z "$victim" ]; then  # nothing was tested: the harness came too late
    row "$name" missed "$(secs_since "$started")" "the run was over before the signal (exit $job_rc)"
    return
  fi
  stalled="$(grep -m 1 -e "timed out after ${freeze_deadline} s" -e "did not finish within ${freeze_deadline} s" "$dir.log")"
  if [ -z "$stalled" ] || [ "$job_rc" -eq 0 ]; then
    row "$name" WRONG "$(secs_since "$started")" "exit $job_rc ${ended} s after SIGSTOP, no 'timed out after ${freeze_deadline} s' or 'did not finish within ${freeze_deadline} s'"
    return
  fi
  newest="$(newest_checkpoint "$dir")"
  resume_and_classify "$dir" $long_iters "$ref_long_final" "$newest" "$dir.resume.log" "${long[@]}"
  [ "$outcome" = bit-exact ] && outcome="timed out (named)"
  stalled="${stalled#*] }"
  row "$name" "$outcome" "$(secs_since "$started")" "exit $job_rc ${ended} s after SIGSTOP: ${stalled:0:50}...; $message"
  [ "$outcome" = HANG ] || [ "$outcome" = WRONG ] || rm -rf "$dir" "$dir".*log
}
if wants freezes; then
  for i in $(seq 1 "$freezes"); do
    rank=$(( RANDOM % 2 )) at=$(( (RANDOM % 5 + 1) * 200 )) delay=$(( RANDOM % 300 ))
    freeze "freeze-$i SIGSTOP rank $rank" "$work/freeze/$i" "$work/freeze/$i/$(ckpt_name $at)" "$delay" "$rank"
  done
  # Rank 1 stopped as the final checkpoint appears: at the end-of-training barrier or in
  # MPI_Finalize (it cannot pass finalize before rank 0 has reached it). A stop after
  # MPI_Finalize returned, in the exit handlers, is out of any process's reach: no peer is
  # left, and a stopped process runs no watchdog; only the launcher's limit (mpirun --timeout,
  # srun --time) ends that job. dist/shutdown_freeze covers a freeze in finalize exactly.
  freeze "freeze-at-exit rank 1" "$work/freeze/exit" "$work/freeze/exit/$(ckpt_name $long_iters)" 0 1
fi

# ---- Summary.
echo
summary=""
for k in refused bit-exact "timed out (named)" "after MPI" missed WRONG HANG; do summary+="${counts[$k]:-0} $k, "; done
echo "fault.sh: $rows cases: ${summary%, }; ${counts[HANG]:-0} runs hung with a live rank able to end them, ${counts["after MPI"]:-0} waited for the launcher's limit on a rank stopped after MPI (seed $seed)"
if [ "${counts[HANG]:-0}" -gt 0 ] || [ "${counts[WRONG]:-0}" -gt 0 ]; then
  echo "fault.sh: FAIL (FAULT_KEEP=1 keeps the run dirs and logs of the HANG and WRONG cases)"
  exit 1
fi
echo "fault.sh: ok"
