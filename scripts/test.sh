#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds (all cores), runs ctest.
#   scripts/test.sh              Release build in build/
#   scripts/test.sh --sanitize   ASan + UBSan build in build-sanitize/
# Extra arguments after -- go to ctest (e.g. -- -R reducer).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cmake_args=()
ctest_args=()
ctest_label_args=()
sanitize=0
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize)
      TANDEM_BUILD="$TANDEM_ROOT/build-sanitize"
      # Host code only: the CUDA kernels cannot run without a GPU, and building them twice
      # would double CI's build time. No benchmarks either: no test runs them.
      cmake_args+=(-DTANDEM_SANITIZE=ON -DTANDEM_CUDA=OFF -DTANDEM_BENCH=OFF)
      # The cluster tests (label "cluster") run tandem-train's unchanged code across network
      # namespaces: what they add is the network, which the first pass has tested; under the
      # sanitizers they cost minutes and find nothing the single-host runs do not.
      # The oracles that cost minutes per rank count under the sanitizers (20 times their plain
      # time) run there at 2 ranks only, which exercises the same code as 1, 3 and 4 (every
      # rank count runs in the first pass): the penalty oracle (WGAN-GP, R1, lazy R1 in every
      # wrap, double backward; 90-180 s each), the augmentation oracle (70-135 s), the FID
      # oracle across ranks (20-75 s) and the augmented training runs (11-19 s). The other
      # multi-rank suites leave out 4 ranks there (35 s, each running alone on 2 cores): 2
      # and 3 ranks run the same code, even and odd splits. elastic_resume (4 ranks, 70 s there)
      # resumes at other rank counts: the loading code runs there in test_checkpointer's global-
      # batch case and the resumes of kill_rank, pggan_soak and the train suite.
      ctest_label_args=(-LE cluster)
      sanitize_excluded="(gradient_penalty|diff_augment|fid_ranks|augment_train) np=[134]|^[a-z]+/test_[a-z_]+ np=4|elastic_resume"
      sanitize=1
      ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "test.sh: unknown argument '$1' (use --sanitize, or -- <ctest args>)" >&2; exit 2 ;;
  esac
  shift
done

bash "$TANDEM_ROOT/scripts/setup.sh"
start=$(date +%s)
# The suites and what they run, whatever an earlier configure of the same folder turned off.
tandem_configure_and_build -DTANDEM_TESTS=ON -DTANDEM_MODELS=ON -DTANDEM_DATA=ON "${cmake_args[@]}"
built=$(date +%s)
echo "test.sh: build took $((built - start)) s"
cd "$TANDEM_BUILD"
if [ "$sanitize" = 1 ]; then
  # Any report fails the test that printed it. Allocation stacks are unwound by frame
  # pointers (fast_unwind_on_malloc=1): unwinding every allocation's stack in full (DWARF)
  # took five sixths of the pass's test time (diff_augment at 2 ranks: 76 s, 12 s this way).
  # Leaks are checked at exit, minus Open MPI's and CUDA's own (scripts/lsan.supp says why),
  # in three runs:
  #  1. every single-process test (the ranks-as-threads Reducer suites among them): leaks on;
  #  2. the multi-rank tests: memory errors and undefined behaviour, leaks off. Open MPI's
  #     components are unloaded by exit and the frame-pointer unwinder stops inside them, so
  #     their leaks carry no frame the suppressions could name;
  #  3. the MPI process group and the trainer's suite at 2 ranks (the multi-rank code no
  #     single-process test runs): leaks on, stacks unwound in full so that they reach the
  #     libmpi frames the suppressions name.
  export LSAN_OPTIONS="suppressions=$TANDEM_ROOT/scripts/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  asan="abort_on_error=0:strict_string_checks=1"
  leak_checked_ranks="^(dist/test_mpi_process_group|train/test_train) np=2$"
  ASAN_OPTIONS="$asan:fast_unwind_on_malloc=1:detect_leaks=1" \
    ctest --output-on-failure -j "$(nproc)" "${ctest_label_args[@]}" "${ctest_args[@]}" -E "$sanitize_excluded| np="
  ASAN_OPTIONS="$asan:fast_unwind_on_malloc=1:detect_leaks=0" \
    ctest --output-on-failure -j "$(nproc)" "${ctest_label_args[@]}" "${ctest_args[@]}" -R " np=" \
      -E "$sanitize_excluded|$leak_checked_ranks"
  ASAN_OPTIONS="$asan:fast_unwind_on_malloc=0:detect_leaks=1" \
    ctest --output-on-failure -j "$(nproc)" "${ctest_label_args[@]}" "${ctest_args[@]}" -R "$leak_checked_ranks"
else
  ctest --output-on-failure -j "$(nproc)" "${ctest_label_args[@]}" "${ctest_args[@]}"
fi
echo "test.sh: tests took $(( $(date +%s) - built )) s"
