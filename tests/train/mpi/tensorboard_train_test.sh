#!/usr/bin/env bash
# tandem-train --tensorboard at 2 ranks, its event file read back by python3-protobuf:
#   tensorboard_train_test.sh <mpiexec> <tandem-train> <protoc> <tensorboard_event.proto> <work dir>
# A short ring8 run logs at 10 and 20 and draws a sample picture at each; then
# check_train_tfevents.py checks every record's framing, that rank 0 alone wrote a file,
# every scalar against metrics.jsonl and each picture's bytes against its PNG. Then the same
# run resumed from its checkpoint of 10 (the one of 20 removed) logs 20 again: the steps after
# 10 in the first event file are cut, so each appears once across the two files. Without a
# Python that has google.protobuf (Debian: python3-protobuf) it skips (exit 77).
set -uo pipefail
mpiexec="$1"; train="$2"; protoc="$3"; proto="$4"; work="$5"
test_name=tensorboard_train_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/../../training/protobuf_python.sh"
rm -rf "$work"; mkdir -p "$work"
out="$work/out"; tb="$work/tb"

"$mpiexec" -np 2 --oversubscribe "$train" --iters 20 --log-every 10 --sample-every 10 --out "$out" \
  --tensorboard "$tb" > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "tandem-train failed"; }
"$protoc" -I"$(dirname "$proto")" --python_out="$work" "$proto" || fail "protoc --python_out failed"
"$python" "$(dirname "${BASH_SOURCE[0]}")/../check_train_tfevents.py" "$tb" "$out/metrics.jsonl" "$work" \
  10="$out/samples-000010.png" 20="$out/samples-000020.png" || fail "the event file is wrong"

rm -rf "$out" "$tb"
flags=(--iters 20 --log-every 10 --sample-every 10 --ckpt-every 10 --out "$out" --tensorboard "$tb")
"$mpiexec" -np 2 --oversubscribe "$train" "${flags[@]}" > "$work/first.log" 2>&1 ||
  { cat "$work/first.log"; fail "tandem-train (to resume) failed"; }
rm "$out/ckpt-000020.safetensors"
"$mpiexec" -np 2 --oversubscribe "$train" "${flags[@]}" --resume > "$work/resumed.log" 2>&1 ||
  { cat "$work/resumed.log"; fail "tandem-train --resume failed"; }
"$python" "$(dirname "${BASH_SOURCE[0]}")/../check_train_tfevents.py" "$tb" "$out/metrics.jsonl" "$work" \
  --files 2 10="$out/samples-000010.png" 20="$out/samples-000020.png" ||
  fail "the event files of the resumed run are wrong"
rm -rf "$work"
