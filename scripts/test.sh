#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds (all cores), runs ctest.
#   scripts/test.sh              Release build in build/
#   scripts/test.sh --sanitize   ASan + UBSan build in build-sanitize/
# Extra arguments after -- go to ctest (e.g. -- -R reducer).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cmake_args=()
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize)
      TANDEM_BUILD="$TANDEM_ROOT/build-sanitize"
      cmake_args+=(-DTANDEM_SANITIZE=ON)
      ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "test.sh: unknown argument '$1' (use --sanitize, or -- <ctest args>)" >&2; exit 2 ;;
  esac
  shift
done

bash "$TANDEM_ROOT/scripts/setup.sh"
start=$(date +%s)
tandem_configure_and_build "${cmake_args[@]}"
built=$(date +%s)
echo "test.sh: build took $((built - start)) s"
cd "$TANDEM_BUILD"
ctest --output-on-failure -j "$(nproc)" "${ctest_args[@]}"
echo "test.sh: tests took $(( $(date +%s) - built )) s"
