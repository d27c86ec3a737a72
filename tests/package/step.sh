# shellcheck shell=bash disable=SC2154  # $work and $step_label are the sourcing script's
# Sourced by the package tests' scripts.
# step <name> <command...>: runs the command into $work/<name>.log and says how long it took;
# on failure it shows the log's end and exits 1. Messages start with $step_label.
step() {
  local name=$1 start=$SECONDS
  shift
  if ! "$@" >"$work/$name.log" 2>&1; then
    echo "$step_label: $name failed: $*" >&2
    tail -n 60 "$work/$name.log" >&2
    exit 1
  fi
  echo "$step_label: $name took $((SECONDS - start)) s"
}
