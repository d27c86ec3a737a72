#!/usr/bin/env bash
# scripts/test.sh configures its build folder with the suites on, whatever an earlier
# configure of that folder turned off: a folder configured with -DTANDEM_TESTS=OFF used to
# get ctest run over test_*_NOT_BUILT placeholders (9 "Not Run"). cmake and ctest are
# replaced by shims first on PATH that record their arguments (and make the -B folder), so
# nothing is configured or built; checked with and without --sanitize.
#   test_command_test.sh <source dir> <work dir>
set -uo pipefail
root="$1"; work="$2"
rm -rf "$work"; mkdir -p "$work/bin"
for tool in cmake ctest; do
  cat > "$work/bin/$tool" <<EOF
#!/usr/bin/env bash
echo "$tool \$*" >> "$work/calls"
while [ \$# -gt 0 ]; do [ "\$1" = -B ] && mkdir -p "\$2"; shift; done
exit 0
EOF
  chmod +x "$work/bin/$tool"
done
fail() { echo "test_command_test: FAIL: $*" >&2; cat "$work/calls" >&2; exit 1; }
for mode in "" --sanitize; do
  : > "$work/calls"
  # shellcheck disable=SC2086  # no argument when mode is empty
  PATH="$work/bin:$PATH" TANDEM_BUILD="$work/build" bash "$root/scripts/test.sh" $mode > "$work/out.log" 2>&1 ||
    { cat "$work/out.log"; fail "scripts/test.sh $mode ended with an error"; }
  configure=$(grep "^cmake -S" "$work/calls")
  [ -n "$configure" ] || fail "scripts/test.sh $mode configured nothing"
  for flag in -DTANDEM_TESTS=ON -DTANDEM_MODELS=ON -DTANDEM_DATA=ON; do
    grep -q -- "$flag" <<< "$configure" || fail "scripts/test.sh $mode configures without $flag: $configure"
  done
  grep -q "^ctest " "$work/calls" || fail "scripts/test.sh $mode ran no ctest"
done
echo "test_command_test: scripts/test.sh configures with the suites on, with and without --sanitize"
