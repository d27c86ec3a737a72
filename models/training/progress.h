// A progress line for a training loop: iterations done, rate, ETA and the latest scalars.
//
// Contract:
// - progress_text(iteration, total, its, scalars): "iter <iteration, width 6>/<total>  <it/s,
//   1 decimal> it/s  ETA <format_duration((total - iteration) / its)>" then
//   "  <name> <value>" per scalar: 4 decimals, or 4 significant digits for a value under
//   10^-2 in magnitude (learning rates) and from 10^4 on; "ETA ?" while the rate is unknown
//   (not positive or not finite). tandem-train's line (models/train/metrics_log.h) starts the same way.
// - Progress(total, out, options) reports on `out` from rank options.rank == 0 only (other
//   ranks print nothing). update(iteration, scalars) is called after each iteration (or as
//   often as the loop likes) with the iterations done so far; it prints when at least the
//   interval has passed since the last line (or since construction), and always at
//   iteration == total. The rate is over the iterations and time since the previous line
//   (the first: since construction, counting from options.start, a resumed run's first
//   iteration).
// - Style: in_place rewrites one line: "\r" + the text, padded with spaces over a longer
//   previous text, no newline until finish() (or the line at total); the interval is
//   options.refresh_s. lines writes one line per options.interval_s, each ending in "\n".
//   automatic is in_place when `out` is std::cout or std::cerr and its descriptor is a
//   terminal (isatty), lines otherwise.
// - finish() ends an in-place line with "\n" (when one is open); the destructor calls it.
// - clear() erases an open in-place line ("\r", spaces over it, "\r"), so that other
//   output can take its place; the next update opens a new one.
// - options.now is the clock (steady_clock::now by default; tests pass a fake one).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "models/training/scalar_log.h"

namespace tandem::training {

std::string progress_text(int64_t iteration, int64_t total, double its, const Scalars& scalars);
// The scalars' part of progress_text: "  <name> <value>" each.
std::string scalars_text(const Scalars& scalars);

enum class ProgressStyle { automatic, in_place, lines };

struct ProgressOptions {
  using Clock = std::chrono::steady_clock;
  int rank = 0;
  int64_t start = 0;
  ProgressStyle style = ProgressStyle::automatic;
  double interval_s = 10.0;  // lines
  double refresh_s = 0.5;    // in place
  std::function<Clock::time_point()> now = [] { return Clock::now(); };
};

class Progress {
 public:
  Progress(int64_t total, std::ostream& out, ProgressOptions options = {});
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool in_place() const { return in_place_; }
  // Whether update(iteration) would print now (so that the caller reads its scalars only then).
  bool due(int64_t iteration) const;
  void update(int64_t iteration, const Scalars& scalars = {});
  void finish();
  void clear();

 private:
  int64_t total_;
  std::ostream& out_;
  ProgressOptions options_;
  bool in_place_;
  ProgressOptions::Clock::time_point last_time_;
  int64_t last_iteration_;
  size_t open_width_ = 0;  // the in-place line's length; 0 when none is open
};

}  // namespace tandem::training
