# Sourced by the TensorBoard tests: sets $python to a python3 that has google.protobuf, or
# skips the test (exit 77) naming what is missing. Set test_name first.
python=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c 'import google.protobuf' 2> /dev/null; then python="$candidate"; break; fi
done
[ -n "$python" ] || { echo "$test_name: SKIP: no python3 with google.protobuf (apt-get install python3-protobuf)"; exit 77; }
