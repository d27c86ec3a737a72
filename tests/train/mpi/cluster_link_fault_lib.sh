# A host's link broken in the middle of a tandem-train run on the virtual cluster, and what
# must hold after it. Shared by cluster_link_fault_test.sh and scripts/cluster_fault_loop.sh.
# Source after cluster_test_lib.sh, with cluster_sh, train and work set and the cluster up.
#
# The run: mlp, 4 ranks (2 hosts x 2), a checkpoint every 10 iterations. Each rank writes
# its output to <out>.logs/rank-R.log on its own host (the output a cut-off host sends to
# mpirun cannot cross the broken link).

link_fault_iters=200
# The run's batch flag; a test may set another before sourcing this file.
[ -n "${link_fault_batch+set}" ] || link_fault_batch=(--batch 16)
link_fault_args() {  # out dir: sets run_args
  run_args=("$train" --model mlp --iters $link_fault_iters "${link_fault_batch[@]}" --ckpt-every 10
            --log-every 50 --seed 3 --out "$1")
}

# job_on_cluster <out dir> [extra tandem-train args...]: the run, each rank logging to its file.
job_on_cluster() { job_on_hosts "" 4 "$@"; }

# job_on_hosts <hosts> <ranks> <out dir> [extra tandem-train args...]: the run on hosts
# <hosts> (cluster.sh run --hosts; "": every host) with <ranks> ranks, stopped after
# $job_timeout s (default 120).
job_on_hosts() {
  local hosts="$1" ranks="$2" out="$3"; shift 3
  link_fault_args "$out"
  mkdir -p "$out.logs"
  "$cluster_sh" run --timeout "${job_timeout:-120}" ${hosts:+--hosts "$hosts"} -- "${forward_env[@]}" -np "$ranks" \
    bash -c 'exec "$0" "$@" > "'"$out.logs"'/rank-$OMPI_COMM_WORLD_RANK.log" 2>&1' "${run_args[@]}" "$@"
}

# tandem_pids_on <host i>: the tandem-train processes running on host i.
tandem_pids_on() {
  local pid
  for pid in $(ip netns pids "$(host_namespace "$1")" 2>/dev/null); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = tandem-train ] && echo "$pid"
  done
  return 0
}

# faulted_run <out dir> <blackhole|down> <host i> <after ckpt iteration> <extra delay s>:
# starts the run, breaks host i's link <delay> s after the checkpoint of that iteration
# exists, and waits (at most 120 s) for every rank and mpirun to end. Sets
# fault_ckpts_before (checkpoints complete when the link broke), fault_ranks_s (seconds from
# the break until no tandem-train process was left on any host, or "hang"), fault_job_s
# and fault_job_rc (mpirun's). The link stays broken: heal it with `cluster.sh heal i`.
faulted_run() {
  local out="$1" kind="$2" host="$3" after="$4" delay="$5"
  local ckpt job broke now left h
  ckpt="$out/$(printf 'ckpt-%06d.safetensors' "$after")"
  rm -rf "$out" "$out.logs" "$out.rc"
  ( job_on_cluster "$out" > "$out.mpirun.log" 2>&1; echo $? > "$out.rc" ) &
  job=$!
  for _ in $(seq 1 1200); do [ -f "$ckpt" ] || [ -f "$out.rc" ] && break; sleep 0.05; done
  [ -f "$ckpt" ] || { wait $job; cat "$out.mpirun.log"; fail "$out: no checkpoint $ckpt before the fault"; }
  sleep "$delay"
  fault_ckpts_before=$(cd "$out" && ls ckpt-*.safetensors)
  "$cluster_sh" break "$host" "$kind" || fail "cluster.sh break $host $kind failed"
  broke=$(date +%s%N)
  fault_ranks_s=hang
  for _ in $(seq 1 1200); do  # 120 s at most
    now=$(date +%s%N)
    left=""
    for h in 1 2; do left="$left$(tandem_pids_on $h)"; done
    if [ -z "$left" ] && [ "$fault_ranks_s" = hang ]; then
      fault_ranks_s=$(( (now - broke) / 1000000 ))
    fi
    [ -f "$out.rc" ] && [ "$fault_ranks_s" != hang ] && break
    sleep 0.1
  done
  wait $job
  fault_job_s=$(( ($(date +%s%N) - broke) / 1000000 ))
  fault_job_rc=$(cat "$out.rc")
  [ "$fault_ranks_s" = hang ] || fault_ranks_s=$(awk -v ms="$fault_ranks_s" 'BEGIN{printf "%.1f", ms / 1000}')
  fault_job_s=$(awk -v ms="$fault_job_s" 'BEGIN{printf "%.1f", ms / 1000}')
}

# timeout_errors <out dir>: prints, per rank, tandem's named timeout error from its log
# ("[rank R on host H] <op> ... tag '<tag>', timed out after T s on rank R of 4 (<n> bytes,");
# returns 1 when a rank has none.
timeout_errors() {
  local out="$1" rank line status=0
  for rank in 0 1 2 3; do
    line=$(grep -o "\[rank $rank on host [^]]*\] [a-z_]* .* tag '[^']*', timed out after [0-9.]* s on rank $rank of 4 ([0-9]* bytes" \
           "$out.logs/rank-$rank.log" 2>/dev/null | head -n 1)
    if [ -n "$line" ]; then echo "  $line"; else echo "  rank $rank: no named timeout error"; status=1; fi
  done
  return $status
}

# checkpoints_intact <out dir> <reference out dir>: every checkpoint complete before the
# fault is still there, and every checkpoint in <out dir> has the very bytes of the
# uninterrupted run's at that iteration (a lost or torn one fails). Prints the newest.
checkpoints_intact() {
  local out="$1" reference="$2" name
  for name in $fault_ckpts_before; do
    [ -f "$out/$name" ] || { echo "lost checkpoint $out/$name"; return 1; }
  done
  for name in $(cd "$out" && ls ckpt-*.safetensors); do
    cmp -s "$out/$name" "$reference/$name" || { echo "checkpoint $out/$name differs from $reference/$name"; return 1; }
  done
  echo "newest checkpoint $(cd "$out" && ls ckpt-*.safetensors | sort | tail -n 1) intact"
}
