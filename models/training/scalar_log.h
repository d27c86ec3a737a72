// Named scalars of a user's training loop, logged as metrics.jsonl lines (and to any other
// sink, such as a TensorBoard event file), optionally averaged over the ranks first.
//
// Contract:
// - scalars_json(iteration, scalars): {"iteration": i, "<name>": x, ...} in the order given,
//   numbers with 6 significant digits (the shape metrics_json writes, so report.html reads
//   both), names JSON-escaped, NaN and +-infinity as null (metrics_file.h's
//   write_json_number).
// - parse_scalars_json(line): such a line back: the iteration and every member whose value
//   is a number, null read as NaN (others, such as arrays, skipped; NaN, Infinity and
//   -Infinity, as older lines spell them, read too); nullopt for anything that is not one
//   whole flat object starting with an integer "iteration" (a torn line).
// - ScalarLog(dir, world, resume_iteration): every rank constructs it; rank 0 (of `world`,
//   or the only process when `world` is null) makes `dir` (and its parents) when missing
//   and opens <dir>/metrics.jsonl as MetricsFile (metrics_file.h) does
//   (emptied from iteration 0; cut to iterations <= N and appended to when resumed from
//   iteration N; a write error reported once on stderr and the run goes on).
// - log(iteration, scalars, reduce) writes one line on rank 0 (flushed, written as one
//   piece) and passes the same values to every attached sink, in the order given. With
//   Reduce::mean, log is collective: one float64 allreduce of the values, so every rank
//   gets (and returns) the same averages; every rank must then pass the same names in the
//   same order. With Reduce::none only rank 0's values are used and nothing is exchanged.
//   Returns the values logged (rank 0's, or the means).
// - attach(sink): a sink (e.g. a TensorBoardWriter) gets every later log on rank 0; it must
//   outlive the log. Sinks on other ranks are never called.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/training/metrics_file.h"
#include "runtime/dist/process_group.h"

namespace tandem::training {

using Scalars = std::vector<std::pair<std::string, double>>;

std::string scalars_json(int64_t iteration, const Scalars& scalars);
std::optional<std::pair<int64_t, Scalars>> parse_scalars_json(const std::string& line);

// Where else logged scalars go.
class ScalarSink {
 public:
  virtual ~ScalarSink() = default;
  virtual void add_scalars(int64_t iteration, const Scalars& scalars) = 0;
};

enum class Reduce { none, mean };

class ScalarLog {
 public:
  ScalarLog(const std::string& dir, dist::ProcessGroup* world = nullptr, int64_t resume_iteration = 0);

  bool writes() const { return file_.has_value(); }  // rank 0
  const std::string& path() const { return path_; }
  Scalars log(int64_t iteration, const Scalars& scalars, Reduce reduce = Reduce::none);
  void attach(ScalarSink& sink) { sinks_.push_back(&sink); }

 private:
  dist::ProcessGroup* world_;
  std::string path_;
  std::optional<MetricsFile> file_;
  std::vector<ScalarSink*> sinks_;
};

}  // namespace tandem::training
