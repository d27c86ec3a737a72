#!/usr/bin/env bash
# A virtual cluster on this machine: N "hosts" that Open MPI reaches over TCP only.
#
#   cluster.sh up N [--slots S]     build N hosts of S slots (default 2); a cluster of the
#                                   same name is removed first; a failed `up` removes what it made
#   cluster.sh run [--timeout S] [--hosts I,J,..] -- <mpirun args>
#                                   one job across the hosts (limit 600 s unless given);
#                                   --hosts: on those alone (the others, broken, are not probed)
#   cluster.sh down                 remove everything `up` made (exits 0 if nothing was up)
#   cluster.sh status               namespaces, hostfile, switch ports
#   cluster.sh break I blackhole|down   cut host I off: every packet on its link dropped
#                                   (tbf of 8 bit/s, both ends), or its switch port down
#   cluster.sh heal I               undo `break` on host I (exits 0 if it was not broken)
#   cluster.sh check                exit 0, or 77 naming what this machine lacks
#   cluster.sh agent <address> <command...>   Open MPI's plm_rsh_agent (`run` sets it)
#
# Layout of cluster C = $TANDEM_CLUSTER (default "tandem", at most 20 characters; clusters of
# different names can be up at once):
#   netns C-switch  bridge br0; its ports are veth ends named `head` and `host1`..`hostN`
#   netns C-head    eth0 10.213.7.1/24 (peer of `head`): mpirun runs here
#   netns C-hostI   eth0 10.213.7.(10+I)/24 (peer of `hostI`); every launch into it gets a UTS
#                   namespace with the hostname C-hostI
# The root namespace's network is left alone (so mpirun runs in C-head, not there): traffic
# can only go between these addresses. IPv6 is off in every namespace. To shape or break the
# link of host I with tc (tbf, netem; `break` and `heal` do), act on both of its ends:
#   ip netns exec C-switch tc qdisc ... dev hostI   (traffic to host I)
#   ip netns exec C-hostI  tc qdisc ... dev eth0    (traffic from host I)
#
# `run` first probes every host (a TCP connection attempt from the head, 3 s at most; a
# refused connection is an answer) and stops, naming the host and starting nothing, when one
# does not answer; the agent probes again before each launch, so hosts given to mpirun
# directly are checked too. mpirun then runs with the hostfile of the host addresses,
# `btl tcp,self` (no shared memory between hosts), `pml ob1`, `btl_tcp_if_include` and
# `oob_tcp_if_include` set to the subnet, daemons launched by the head alone (no tree spawn)
# and its session files under /run/C-cluster. A host cut off in the middle of a job must
# not hold mpirun for ever (Open MPI's TCP has no timeout of its own): its daemons probe
# their idle connections every second (TCP keepalive) and give a peer up once it has not
# answered for tandem's collective timeout + 3 s (TANDEM_COLLECTIVE_TIMEOUT_S, default
# 300 s: the ranks name the collective they were stuck in first, whenever the link broke);
# and in the head's namespace unacknowledged data is given up after 4 retransmissions
# (~6 s; tcp_retries2). mpirun then ends the job non-zero ("ORTE has lost communication
# with a remote daemon"). As over ssh, Open MPI's daemon starts on a
# host with a clean environment: pass variables to the ranks with `mpirun -x NAME`. The
# job's limit is the last bound on a start that fails in a way the probes cannot see (Open
# MPI 4.1 waits without end for a daemon that cannot reach mpirun; its
# orte_startup_timeout does not cover that). When the job ends or is stopped, whatever it
# left running on the hosts is ended and its session files are removed: one job at a time
# per cluster.
#
# Needs root, iproute2 (ip), util-linux (unshare), coreutils (timeout), hostname and Open MPI.
set -euo pipefail

cluster="${TANDEM_CLUSTER:-tandem}"
self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
subnet_prefix=10.213.7
subnet="$subnet_prefix.0/24"
head_address="$subnet_prefix.1"
state="/run/$cluster-cluster"
hostfile="$state/hostfile"
max_hosts=64
probe_seconds=3

say() { echo "cluster.sh: $*" >&2; }
die() { say "$*"; exit 1; }
missing() { say "cannot build a virtual cluster here: $*"; exit 77; }

host_ns() { echo "$cluster-host$1"; }
host_address() { echo "$subnet_prefix.$((10 + $1))"; }
switch_ns="$cluster-switch"
head_ns="$cluster-head"

# This cluster's namespaces, switch and head last.
cluster_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$cluster-host[0-9]+$" | sort -V || true
  for ns in "$head_ns" "$switch_ns"; do
    ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$ns" && echo "$ns"
  done
  return 0
}

# Ends every process inside the cluster's namespaces: TERM, up to 5 s, then KILL.
end_processes() {
  local ns pids
  for attempt in $(seq 1 50); do
    pids=""
    for ns in $(cluster_namespaces); do pids="$pids $(ip netns pids "$ns" 2>/dev/null || true)"; done
    pids=$(echo $pids)
    [ -z "$pids" ] && return 0
    if [ "$attempt" -eq 1 ]; then
      kill -TERM $pids 2>/dev/null || true
    elif [ "$attempt" -eq 50 ]; then
      kill -KILL $pids 2>/dev/null || true
    fi
    sleep 0.1
  done
  pids=""
  for ns in $(cluster_namespaces); do pids="$pids $(ip netns pids "$ns" 2>/dev/null || true)"; done
  pids=$(echo $pids)
  [ -z "$pids" ] || say "processes $pids in cluster $cluster did not end"
}

do_down() {
  end_processes
  local ns
  for ns in $(cluster_namespaces); do
    ip netns delete "$ns" 2>/dev/null || say "could not delete namespace $ns"
  done
  rm -rf "$state"
  [ -z "$(cluster_namespaces)" ] || die "namespaces of cluster $cluster are still there: $(cluster_namespaces | tr '\n' ' ')"
}

do_check() {
  [ "$(id -u)" -eq 0 ] || missing "needs root (network namespaces), running as uid $(id -u)"
  local tool
  for tool in ip unshare timeout hostname mpirun; do
    command -v "$tool" > /dev/null || missing "no '$tool' command (scripts/setup.sh installs it)"
  done
  local probe="$cluster-probe" err
  ip netns delete "$probe" 2>/dev/null || true
  err=$(ip netns add "$probe" 2>&1) || missing "'ip netns add' fails: $err"
  err=$( { ip -n "$probe" link add name br0 type bridge && ip -n "$probe" link add name port0 type veth peer name port1; } 2>&1) ||
    { ip netns delete "$probe" 2>/dev/null; missing "no bridge or veth links in a network namespace: $err"; }
  err=$(ip netns exec "$probe" unshare --uts sh -c 'hostname tandem-probe' 2>&1) ||
    { ip netns delete "$probe" 2>/dev/null; missing "no UTS namespace with its own hostname: $err"; }
  ip netns delete "$probe"
}

# new_namespace <name>: an empty network namespace without IPv6, so that nothing but the
# IPv4 subnet is ever addressed (no link-local chatter on the links).
new_namespace() {
  ip netns add "$1"
  ip netns exec "$1" sh -c 'for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 /proc/sys/net/ipv6/conf/default/disable_ipv6; do
    [ ! -e "$f" ] || echo 1 > "$f"; done'
}

# link <namespace> <switch port name> <address>: a veth pair from the switch's bridge to eth0
# of the namespace, both ends up.
link() {
  local ns="$1" port="$2" address="$3"
  ip -n "$switch_ns" link add name "$port" type veth peer name eth0 netns "$ns"
  ip -n "$switch_ns" link set "$port" master br0 up
  ip -n "$ns" addr add "$address/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
}

do_up() {
  local hosts="${1:-}" slots=2
  shift || true
  while [ $# -gt 0 ]; do
    case "$1" in
      --slots) slots="${2:-}"; shift 2 || die "--slots needs a number" ;;
      *) die "up: unknown argument '$1' (usage: cluster.sh up N [--slots S])" ;;
    esac
  done
  [[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le $max_hosts ] ||
    die "up: the host count N='$hosts' must be a number from 1 to $max_hosts (usage: cluster.sh up N)"
  [[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "up: --slots '$slots' must be a positive number"
  do_check
  do_down  # leftovers of an earlier cluster of this name
  trap 'say "up failed; removing what it made"; do_down' EXIT
  mkdir -p "$state/tmp"
  new_namespace "$switch_ns"
  ip -n "$switch_ns" link add name br0 type bridge
  ip -n "$switch_ns" link set br0 up
  new_namespace "$head_ns"
  ip netns exec "$head_ns" sysctl -qw net.ipv4.tcp_retries2=4
  link "$head_ns" head "$head_address"
  : > "$hostfile.tmp"
  local i
  for i in $(seq 1 "$hosts"); do
    new_namespace "$(host_ns "$i")"
    link "$(host_ns "$i")" "host$i" "$(host_address "$i")"
    echo "$(host_address "$i") slots=$slots" >> "$hostfile.tmp"
  done
  mv "$hostfile.tmp" "$hostfile"
  # Bridge ports take a moment to forward; every host must answer before `up` returns.
  for i in $(seq 1 "$hosts"); do
    local deadline=$((SECONDS + 10))
    until probe "$i" > /dev/null; do
      [ $SECONDS -lt $deadline ] || die "host $(host_ns "$i") ($(host_address "$i")) does not answer 10 s after up"
      sleep 0.1
    done
  done
  trap - EXIT
  say "cluster $cluster is up: $hosts host(s), $slots slot(s) each, hostfile $hostfile"
}

# probe <i>: whether host i answers a TCP connection attempt from the head (a refused
# connection is an answer). Prints the reason when it does not.
probe() {
  local ns address out
  ns="$(host_ns "$1")"
  address="$(host_address "$1")"
  ip netns list | awk '{print $1}' | grep -qx "$ns" || { echo "its namespace $ns does not exist"; return 1; }
  out=$(ip netns exec "$head_ns" timeout $probe_seconds bash -c "exec 3<>/dev/tcp/$address/9" 2>&1) && return 0
  case "$out" in
    *"Connection refused"*) return 0 ;;
    "") echo "no answer within $probe_seconds s" ;;
    *) echo "${out##*: }" ;;
  esac
  return 1
}

do_run() {
  local limit=600 hosts=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --timeout) limit="${2:-}"; shift 2 || die "--timeout needs seconds" ;;
      --hosts) hosts="${2:-}"; shift 2 || die "--hosts needs a list of host numbers" ;;
      --) shift; break ;;
      *) die "run: unknown argument '$1' (usage: cluster.sh run [--timeout S] [--hosts I,J,..] -- <mpirun args>)" ;;
    esac
  done
  [[ "$limit" =~ ^[0-9]+$ ]] && [ "$limit" -ge 1 ] || die "run: --timeout '$limit' must be a positive number of seconds"
  [ -f "$hostfile" ] && ip netns list | awk '{print $1}' | grep -qx "$head_ns" ||
    die "cluster $cluster is not up (no $hostfile): run 'cluster.sh up N' first"
  # The job's hostfile: every host, or those of --hosts (a lost host's survivors).
  local job_hostfile="$hostfile" address i why
  if [ -n "$hosts" ]; then
    [[ "$hosts" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "run: --hosts '$hosts' must be host numbers separated by commas"
    job_hostfile="$state/hostfile.job"
    : > "$job_hostfile"
    for i in ${hosts//,/ }; do
      grep -E "^$(host_address "$i") " "$hostfile" >> "$job_hostfile" ||
        die "run: --hosts: the cluster has no host $i (see cluster.sh status)"
    done
  fi
  while read -r address _; do
    i=$(( ${address##*.} - 10 ))
    why=$(probe "$i") || die "host $(host_ns "$i") ($address) is unreachable: $why; nothing was started" \
                             "('cluster.sh down' then 'cluster.sh up N' rebuilds the cluster)"
  done < "$job_hostfile"
  # The ranks get only what is set here, on the mpirun command line (-x) and Open MPI's own.
  unset $(compgen -e | grep -E '^OMPI_MCA_(btl|pml|oob|plm|orte)' || true)
  export OMPI_MCA_btl=tcp,self OMPI_MCA_pml=ob1
  export OMPI_MCA_btl_tcp_if_include="$subnet" OMPI_MCA_oob_tcp_if_include="$subnet"
  export OMPI_MCA_plm_rsh_agent="$self agent" OMPI_MCA_plm_rsh_no_tree_spawn=1
  local collective_timeout="${TANDEM_COLLECTIVE_TIMEOUT_S:-300}"
  [[ "$collective_timeout" =~ ^[0-9]+([.][0-9]*)?$ ]] ||
    die "run: TANDEM_COLLECTIVE_TIMEOUT_S='$collective_timeout' must be a number of seconds"
  # Unanswered probes for timeout + 3 s: intvl x probes, with at most 127 probes (Linux).
  local give_up=$(( ${collective_timeout%.*} + 4 ))
  local interval=$(( (give_up + 126) / 127 ))
  export OMPI_MCA_oob_tcp_keepalive_time=1 OMPI_MCA_oob_tcp_keepalive_intvl=$interval
  export OMPI_MCA_oob_tcp_keepalive_probes=$(( (give_up + interval - 1) / interval ))
  export OMPI_MCA_orte_tmpdir_base="$state/tmp"
  if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  local rc=0
  ip netns exec "$head_ns" timeout --kill-after=10 "$limit" mpirun --hostfile "$job_hostfile" "$@" || rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    say "the job did not end within --timeout $limit s and was stopped (exit status $rc)"
  fi
  end_processes_on_hosts
  rm -rf "${state:?}/tmp"/*
  return $rc
}

# After a job: whatever it left on the hosts ends (the switch and head hold no processes).
end_processes_on_hosts() {
  local pids
  pids=$(for ns in $(cluster_namespaces); do ip netns pids "$ns" 2>/dev/null || true; done | tr '\n' ' ')
  [ -z "${pids// /}" ] && return 0
  say "ending processes the job left on the hosts: $pids"
  end_processes
}

do_agent() {
  local address="${1:-}"
  shift || true
  [ $# -gt 0 ] || die "agent: usage: cluster.sh agent <address> <command...> (Open MPI's plm_rsh_agent)"
  local i=$(( ${address##*.} - 10 ))
  [[ "$address" == "$subnet_prefix".* ]] && [ "$i" -ge 1 ] ||
    die "agent: no host of cluster $cluster has the address '$address' (hosts are $subnet_prefix.11 and up)"
  local ns
  ns="$(host_ns "$i")"
  local why
  why=$(probe "$i") || die "host $ns ($address) is unreachable: $why"
  # Like ssh: the command line is one string for the remote shell, in a clean environment.
  exec ip netns exec "$ns" unshare --uts -- \
    env -i PATH="$PATH" HOME="${HOME:-/root}" USER="${USER:-root}" SHELL=/bin/bash \
    ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$LD_LIBRARY_PATH"} \
    bash -c 'hostname "$0" && exec bash -c "$1"' "$ns" "$*"
}

# break_host <i> blackhole|down, heal_host <i>: see the header.
break_host() {
  local i="${1:-}" kind="${2:-}" ns
  [[ "$i" =~ ^[0-9]+$ ]] || die "break: usage: cluster.sh break I blackhole|down"
  ns="$(host_ns "$i")"
  ip netns list | awk '{print $1}' | grep -qx "$ns" || die "break: cluster $cluster has no host $i ($ns)"
  case "$kind" in
    blackhole)
      ip -n "$switch_ns" link set "host$i" up
      ip netns exec "$switch_ns" tc qdisc replace dev "host$i" root tbf rate 8bit burst 10 limit 10
      ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate 8bit burst 10 limit 10 ;;
    down) ip -n "$switch_ns" link set "host$i" down ;;
    *) die "break: the fault '$kind' is not blackhole or down" ;;
  esac
}

heal_host() {
  local i="${1:-}" ns
  [[ "$i" =~ ^[0-9]+$ ]] || die "heal: usage: cluster.sh heal I"
  ns="$(host_ns "$i")"
  ip netns list | awk '{print $1}' | grep -qx "$ns" || die "heal: cluster $cluster has no host $i ($ns)"
  ip netns exec "$switch_ns" tc qdisc del dev "host$i" root 2>/dev/null || true
  ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
  ip -n "$switch_ns" link set "host$i" up
  # Neighbour entries that failed while the link was broken are dropped, and the job waits
  # until both ends' operational state (not the admin flag, which stays up) is UP and the
  # bridge forwards the port: at most 10 s.
  local n
  for n in $(ip netns list | awk '{print $1}' | grep -E "^$cluster-(head|host[0-9]+)$"); do
    ip -n "$n" neigh flush all 2>/dev/null || true
  done
  for _ in $(seq 50); do
    [ "$(ip -n "$switch_ns" -br link show "host$i" | awk '{print $2}')" = UP ] &&
      [ "$(ip -n "$ns" -br link show eth0 | awk '{print $2}')" = UP ] &&
      bridge -n "$switch_ns" link show dev "host$i" | grep -q "state forwarding" && return 0
    sleep 0.2
  done
  die "heal: the link of host $i is not up 10 s after it was set up"
}

do_status() {
  local namespaces
  namespaces=$(cluster_namespaces)
  [ -n "$namespaces" ] || { echo "cluster $cluster is down"; return 0; }
  echo "cluster $cluster: namespaces $(echo $namespaces)"
  [ -f "$hostfile" ] && { echo "hostfile $hostfile:"; sed 's/^/  /' "$hostfile"; }
  ip netns list | awk '{print $1}' | grep -qx "$switch_ns" && ip -n "$switch_ns" -br link show
}

[[ "$cluster" =~ ^[A-Za-z0-9][A-Za-z0-9_-]{0,19}$ ]] ||
  die "TANDEM_CLUSTER='$cluster' is not a cluster name (letters, digits, - and _; at most 20)"
command="${1:-}"
shift || true
case "$command" in
  up) do_up "$@" ;;
  down) do_down ;;
  run) do_run "$@" ;;
  status) do_status ;;
  check) do_check ;;
  break) break_host "$@" ;;
  heal) heal_host "$@" ;;
  agent) do_agent "$@" ;;
  *) die "usage: cluster.sh up N [--slots S] | down | run [--timeout S] -- <mpirun args> | status | check | break I blackhole|down | heal I" ;;
esac
