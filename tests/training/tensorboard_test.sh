#!/usr/bin/env bash
# A TensorBoard event file read back by python3-protobuf:
#   tensorboard_test.sh <write_tfevents> <protoc> <tensorboard_event.proto> <work dir>
# write_tfevents logs scalars through a ScalarLog with a TensorBoardWriter attached and adds
# two PNG images; protoc compiles tandem's .proto for Python into the work dir; then
# check_tfevents.py checks every record and value. Without a Python that has google.protobuf
# (Debian: python3-protobuf) it skips (exit 77), naming what is missing.
set -uo pipefail
writer="$1"; protoc="$2"; proto="$3"; work="$4"
fail() { echo "tensorboard_test: FAIL: $*"; exit 1; }
test_name=tensorboard_test
source "$(dirname "${BASH_SOURCE[0]}")/protobuf_python.sh"
rm -rf "$work"; mkdir -p "$work"
"$writer" "$work" || fail "write_tfevents failed"
"$protoc" -I"$(dirname "$proto")" --python_out="$work" "$proto" || fail "protoc --python_out failed"
"$python" "$(dirname "${BASH_SOURCE[0]}")/check_tfevents.py" "$work" "$work" || fail "the event file is wrong"
rm -rf "$work"
