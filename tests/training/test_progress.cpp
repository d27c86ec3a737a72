// The progress line of a user's loop, against lines written out by hand: a fake clock, a
// string for the terminal.
#include <catch2/catch.hpp>
#include <sstream>

#include "models/training/progress.h"

using namespace tandem::training;
using namespace std::chrono_literals;

namespace {

// A clock the test moves by hand.
struct FakeClock {
  ProgressOptions::Clock::time_point t{};
  std::function<ProgressOptions::Clock::time_point()> fn() {
    return [this] { return t; };
  }
};

}  // namespace

TEST_CASE("progress_text: rate, ETA and scalars", "[progress]") {
  CHECK(progress_text(250, 1000, 12.5, {{"loss_d", 0.69314718}, {"lr", 2e-4}, {"big", 123456.0}}) ==
        "iter    250/1000  12.5 it/s  ETA 1m0s  loss_d 0.6931  lr 0.0002  big 1.235e+05");
  CHECK(progress_text(0, 10, 0.0, {}) == "iter      0/10  0.0 it/s  ETA ?");
}

TEST_CASE("lines: one line per interval, rate over the interval, the last always", "[progress]") {
  FakeClock clock;
  std::ostringstream out;
  Progress progress(100, out, {.style = ProgressStyle::lines, .interval_s = 10, .now = clock.fn()});
  CHECK_FALSE(progress.in_place());
  clock.t += 5s;
  progress.update(10, {{"loss", 1.0}});
  CHECK(out.str().empty());  // 5 s: not yet
  clock.t += 5s;
  progress.update(20, {{"loss", 0.5}});  // 20 iterations in 10 s
  clock.t += 4s;
  progress.update(28);
  clock.t += 16s;
  progress.update(60, {{"loss", 0.25}});  // 40 in 20 s
  clock.t += 1s;
  progress.update(100, {{"loss", 0.125}});  // the last: 40 in 1 s
  progress.finish();                        // nothing open: no newline
  CHECK(out.str() ==
        "iter     20/100  2.0 it/s  ETA 40s  loss 0.5000\n"
        "iter     60/100  2.0 it/s  ETA 20s  loss 0.2500\n"
        "iter    100/100  40.0 it/s  ETA 0s  loss 0.1250\n");
}

TEST_CASE("in place: \\r rewrites the line, padded over a longer one, newline at the end", "[progress]") {
  FakeClock clock;
  std::ostringstream out;
  Progress progress(10, out,
                    {.start = 4, .style = ProgressStyle::in_place, .refresh_s = 0.5, .now = clock.fn()});
  CHECK(progress.in_place());
  clock.t += 1s;
  progress.update(6, {{"loss", 10.0}});  // from the resumed run's start: 2 in 1 s
  clock.t += 100ms;
  progress.update(7, {{"loss", 1.0}});  // too soon
  clock.t += 900ms;
  progress.update(8, {{"loss", 1.0}});
  CHECK(out.str() ==
        "\riter      6/10  2.0 it/s  ETA 2s  loss 10.0000"
        "\riter      8/10  2.0 it/s  ETA 1s  loss 1.0000 ");
  progress.finish();
  CHECK(out.str().back() == '\n');
  progress.finish();  // once
  CHECK(out.str().find("\n") == out.str().size() - 1);
}

TEST_CASE("in place: clear() erases the open line for other output", "[progress]") {
  FakeClock clock;
  std::ostringstream out;
  Progress progress(10, out, {.style = ProgressStyle::in_place, .refresh_s = 0.5, .now = clock.fn()});
  progress.clear();  // nothing open: nothing written
  CHECK(out.str().empty());
  clock.t += 1s;
  progress.update(2);
  const std::string line = "\riter      2/10  2.0 it/s  ETA 4s";
  CHECK(out.str() == line);
  progress.clear();
  CHECK(out.str() == line + "\r" + std::string(line.size() - 1, ' ') + "\r");
  progress.finish();  // cleared: no newline
  CHECK(out.str().find('\n') == std::string::npos);
}

TEST_CASE("ranks other than 0 print nothing; a string is not a terminal", "[progress]") {
  FakeClock clock;
  std::ostringstream out;
  {
    Progress progress(10, out, {.rank = 1, .style = ProgressStyle::lines, .now = clock.fn()});
    clock.t += 1h;
    progress.update(10);
  }
  CHECK(out.str().empty());
  Progress automatic(10, out);
  CHECK_FALSE(automatic.in_place());
}
