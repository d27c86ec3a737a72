#!/usr/bin/env bash
# The shared-memory allreduce's choice and segments (runtime/dist/shared_buffers.h):
# 1. a segment left in /dev/shm by a process that is gone is removed at the next job's start,
#    named on stderr, and the job still reduces through shared memory; a live process's stays;
# 2. TANDEM_SHARED_MEMORY_ALLREDUCE=0 on rank 1 only ends the job within 30 s with an error
#    naming the variable and each rank's value, and leaves no segment of the job's processes;
# 3. so does a job that ends inside SharedBuffers::create (a rank that never joins it).
# Usage: shared_memory_choice_test.sh <mpiexec> <shared_memory_probe> <work dir>
set -u
mpiexec=$1 probe=$2 work=$3
test_name="reducer/shared_memory_choice"
fail() { echo "$test_name: FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work" || fail "cannot make $work"
[ -d /dev/shm ] && [ -w /dev/shm ] || { echo "$test_name: skipped: no writable /dev/shm"; exit 77; }

# Segment names: tandem-<pid namespace>-<pid>-<start time>-<n> (runtime/dist/shared_segments.h).
ns=$(readlink /proc/self/ns/pid | tr -dc 0-9)
dead_pid=$(sh -c 'echo $$')
live_start=$(sed 's/.*) //' /proc/$$/stat | cut -d' ' -f20)
stale=tandem-$ns-$dead_pid-1-1
live=tandem-$ns-$$-$live_start-1
trap 'rm -f "/dev/shm/$stale" "/dev/shm/$live"' EXIT
head -c 65536 /dev/zero > "/dev/shm/$stale" && head -c 4096 /dev/zero > "/dev/shm/$live" || fail "cannot plant"

log=$work/stale.log
"$mpiexec" -np 2 --oversubscribe "$probe" > "$log" 2>&1 || { cat "$log"; fail "the job with a stale segment failed"; }
grep -q "removed the stale shared-memory segment /dev/shm/$stale (65536 bytes, process $dead_pid)" "$log" ||
  { cat "$log"; fail "the stale segment's removal was not named"; }
[ ! -e "/dev/shm/$stale" ] || fail "the stale segment /dev/shm/$stale is still there"
[ -e "/dev/shm/$live" ] || fail "the segment of a live process (this script's) was removed"
[ "$(grep -c 'shared memory on, gradient right' "$log")" = 2 ] ||
  { cat "$log"; fail "the job with a stale segment did not reduce through shared memory on both ranks"; }

log=$work/mismatch.log
start=$(date +%s)
"$mpiexec" -np 1 "$probe" : -np 1 env TANDEM_SHARED_MEMORY_ALLREDUCE=0 "$probe" > "$log" 2>&1
rc=$? elapsed=$(($(date +%s) - start))
[ "$rc" != 0 ] || { cat "$log"; fail "the job with TANDEM_SHARED_MEMORY_ALLREDUCE=0 on rank 1 only exited 0"; }
[ "$elapsed" -le 30 ] || { cat "$log"; fail "the mismatched job took $elapsed s, more than 30 s"; }
grep -qF 'TANDEM_SHARED_MEMORY_ALLREDUCE differs across ranks (rank 0: unset; rank 1: "0")' "$log" ||
  { cat "$log"; fail "the error does not name the variable and each rank's value"; }
expect_no_segments() {  # <case>: no segment of the processes the log names is left
  local pid left
  for pid in $(sed -n 's/^probe: rank [0-9]* pid \([0-9]*\)$/\1/p' "$log"); do
    left=$(ls /dev/shm | grep -E "^tandem-([0-9]+-)?$pid-" || true)
    [ -z "$left" ] || fail "the $1 job left /dev/shm/$left"
  done
}
expect_no_segments mismatched

# 3. A job ended inside SharedBuffers::create (rank 1 never joins): its segment goes too.
log=$work/create_timeout.log
"$mpiexec" -np 2 "$probe" create-timeout > "$log" 2>&1 && { cat "$log"; fail "the abandoned create() exited 0"; }
grep -q "shared-memory segment names of abandoned buffers" "$log" || { cat "$log"; fail "create() did not time out"; }
expect_no_segments create-timeout
echo "$test_name: ok (mismatch ended in $elapsed s)"
