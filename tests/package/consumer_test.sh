#!/usr/bin/env bash
# Package tests: tandem used by a project outside its tree (tests/package/consumer), whose
# program is the README's "User code" block as it stands plus a check that every rank ends
# with the same parameters.
#   consumer_test.sh installed|subproject <cmake> <mpiexec> <c++> <source dir> <build dir> <work dir>
# installed:  `cmake --install <build dir> --prefix <work dir>/prefix`; the consumer finds it
#             with find_package(tandem), is built and run at 2 ranks; then the same program
#             is built with pkg-config's flags for tandem.pc and run at 2 ranks.
# subproject: the consumer takes tandem's source tree through add_subdirectory, which must
#             build only the libraries (no tests, models or benchmarks, so no Catch2), with
#             the data library asked for (-DTANDEM_DATA=ON); CPU only and -O0, to keep CI
#             short. Run at 2 ranks.
# Both: data_consumer, linked with tandem::data alone (no models, no MPI), shards a dataset.
# Prints the seconds each step took.
set -euo pipefail
mode=$1 cmake=$2 mpiexec=$3 cxx=$4 src=$5 build=$6 work=$7
consumer_src="$src/tests/package/consumer"
rm -rf "$work"
mkdir -p "$work/readme"

step_label="consumer_test ($mode)"
# shellcheck source=tests/package/step.sh
source "$(dirname "$0")/step.sh"

# The README's user code: the first ```cpp block under "## User code".
awk '/^## /{section = ($0 ~ /^## User code/); next}
     section && !inblock && /^```cpp$/ {inblock = 1; next}
     inblock && /^```$/ {exit}
     inblock {print}' "$src/README.md" >"$work/readme/readme_user_code.cpp"
if [ ! -s "$work/readme/readme_user_code.cpp" ]; then
  echo "consumer_test: $src/README.md has no \`\`\`cpp block under '## User code'" >&2
  exit 1
fi

# run_at_2_ranks <name> <program>: the program's check passes on both ranks.
run_at_2_ranks() {
  step "$1" "$mpiexec" -np 2 --oversubscribe "$2"
  grep -q "bitwise identical on 2 ranks" "$work/$1.log" || {
    echo "consumer_test ($mode): $2 did not report identical parameters:" >&2
    cat "$work/$1.log" >&2
    exit 1
  }
  cat "$work/$1.log"
}

case "$mode" in
  installed)
    step install "$cmake" --install "$build" --prefix "$work/prefix"
    step configure "$cmake" -S "$consumer_src" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DREADME_CODE_DIR="$work/readme" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release
    step build "$cmake" --build "$work/build" -j 2
    run_at_2_ranks run "$work/build/consumer"
    step data_run "$work/build/data_consumer"
    cat "$work/data_run.log"

    pc_dir=$(dirname "$(find "$work/prefix" -name tandem.pc)")
    flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs tandem)
    train_flag=""  # with the models, tandem.pc's libraries include tandem_train
    if grep -q -- "-ltandem_train" "$pc_dir/tandem.pc"; then train_flag=-DCONSUMER_USES_TRAIN=1; fi
    # shellcheck disable=SC2086  # the flags are words
    step pkg_config_build ${CMAKE_CXX_COMPILER_LAUNCHER:-} "$cxx" -std=c++20 -O1 -I"$work/readme" $train_flag \
      "$consumer_src/main.cpp" $flags -o "$work/pkg_config_consumer"
    run_at_2_ranks pkg_config_run "$work/pkg_config_consumer"
    ;;
  subproject)
    step configure "$cmake" -S "$consumer_src" -B "$work/build" -DTANDEM_SOURCE_DIR="$src" \
      -DREADME_CODE_DIR="$work/readme" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release \
      "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG" -DTANDEM_CUDA=OFF -DTANDEM_DATA=ON
    for state in "data              ON" "models            OFF" "tests (Catch2)    OFF" "benchmarks        OFF" \
      "install rules     OFF"; do
      grep -qF "tandem: $state" "$work/configure.log" || {
        echo "consumer_test: as a subproject (with -DTANDEM_DATA=ON) tandem should report '$state':" >&2
        grep "tandem: " "$work/configure.log" >&2
        exit 1
      }
    done
    step build "$cmake" --build "$work/build" -j 2
    run_at_2_ranks run "$work/build/consumer"
    step data_run "$work/build/data_consumer"
    cat "$work/data_run.log"
    ;;
  *)
    echo "consumer_test: unknown mode '$mode' (installed or subproject)" >&2
    exit 2
    ;;
esac
