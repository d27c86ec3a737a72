# Helpers shared by the tandem-train script tests (kill_rank_test.sh, pggan_soak_test.sh).
# Source after setting test_name; every check ends the test with "<test_name>: FAIL: ..."
# on stderr and exit status 1.

fail() { echo "$test_name: FAIL: $*" >&2; exit 1; }

# require_fashion_mnist: ends the test as skipped (exit 77, CTest's SKIP_RETURN_CODE) when
# Debian's dataset-fashion-mnist is not installed.
require_fashion_mnist() {
  local idx=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
  [ -f "$idx" ] && return 0
  echo "$test_name: skipped: Fashion-MNIST is not installed ($idx)"
  exit 77
}

# expect_resumed_from <log> <checkpoint>: the run that wrote <log> resumed from <checkpoint>.
expect_resumed_from() {
  grep -q "resuming from $2" "$1" || { cat "$1"; fail "did not resume from $2"; }
}

# expect_same_checkpoint <reference> <resumed>: a resumed run ended with the very bytes of
# the uninterrupted run's final checkpoint (tandem-train is deterministic given the seed,
# the rank count and the batch, whatever the resume point).
expect_same_checkpoint() {
  [ -f "$1" ] || fail "no final checkpoint $1 in the uninterrupted run"
  [ -f "$2" ] || fail "no final checkpoint $2 in the resumed run"
  cmp "$1" "$2" || fail "resumed run's final checkpoint $2 differs from the uninterrupted run's $1"
}
