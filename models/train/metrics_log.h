// What rank 0 reports while training: a progress line per log point on the console and the
// same numbers as one JSON object per line in <dir>/metrics.jsonl, then the run's summary
// lines.
//
// Contract:
// - progress_line(p): "iter <iteration, width 6>/<total>  <it/s> it/s  <ms> ms/step  ETA
//   <duration>  loss_d <x.xxxx>  loss_g <x.xxxx>", "  <name> <x.xxxx>" for each term
//   (penalties: "gp", "wdist", "r1", "r2"), "  sync <bytes>/step", then
//   "  [<structure>]" for a model that has one, "  skipped <n> non-finite step(s)" once any
//   step was skipped (unless the terms count them per part: fp16's skipped_g, skipped_d), and "  rss <rank
//   0>/<rank 1>/... MB" (left out without figures); it/s, ms and rss with one decimal, the ETA from the
//   interval's ms per step and the iterations left.
// - metrics_json(p): {"iteration": i, "loss_d": x, "loss_g": x, <"name": x for each
//   term>, "ms_per_step": x, "bytes_per_step": n, "rss_mb": [x, ...]}: numbers with 6
//   significant digits (the loss scales, scale_*, exactly: 2^40 is 1099511627776), a NaN or
//   infinite value as null (JSON has no such numbers; a
//   diverged run's losses stay readable by any JSON reader), bytes_per_step cut to an
//   integer, rss_mb one entry per rank in rank order (numbers by the toolkit's
//   write_json_number, as ScalarLog's lines).
// - ring8_line / ring8_json: the final quality of a ring8 run (the console line in percent
//   with one decimal; the JSON {"iteration": i, "ring8_modes": n, "ring8_high_quality": x}).
// - sync_phase_line(phase): "sync <description>: <n> bucket(s), largest <bytes>, <bytes>
//   per backward, <k> backward(s), rebuilt <r>x", what one kind of backward cost.
// - sync_buckets_line(phases, bucket bytes, parameter bytes): "sync buckets: <n> phase(s)
//   in <bytes> of buckets for <bytes> of parameters (<ratio>)", a Reducer's bucket memory
//   at the end of the run, the ratio as the toolkit's bucket_memory_ratio gives it
//   (models/training/run_report.h; bytes as its format_bytes, metrics_file.h).
// - point_scalars(p): the log point's numbers as named scalars (loss_d, loss_g, its terms,
//   ms_per_step, bytes_per_step: what TensorBoard and the report's charts get);
//   add_log_point(report, p) records them in the report, its progress line the latest line.
// - MetricsLog(dir, resume_iteration) opens <dir>/metrics.jsonl as the toolkit's
//   MetricsFile does (models/training/metrics_file.h: emptied, or cut back on resume; links
//   refused; a write error reported once, as "tandem-train: warning: cannot write ...", and
//   the run goes on). log() writes the progress line to the console and the JSON line to
//   the file; write_line() a line of the caller's (MetricsFile::write_line).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "models/data/dataset.h"
#include "models/training/metrics_file.h"
#include "models/training/run_report.h"
#include "models/training/scalar_log.h"
#include "reducer/reducer.h"

namespace tandem::models {

using training::kMetricsFile;

struct LogPoint {
  int64_t iteration = 0;  // iterations done
  int64_t total = 0;      // the run's last iteration (--iters)
  double ms_per_step = 0.0;
  double loss_d = 0.0;  // averaged over the ranks
  double loss_g = 0.0;
  // averaged over the ranks: "lr" (printed with 4 significant digits), "gp", "wdist", "r1", "r2",
  // "grad_norm_d", "grad_norm_g"
  std::vector<std::pair<std::string, double>> terms = {};
  double bytes_per_step = 0.0;  // synchronised
  std::string structure;        // the model's; "" for a model of fixed structure
  int64_t skipped_steps = 0;    // non-finite steps skipped so far
  std::vector<double> rss_mb;   // every rank's resident size
};

std::string progress_line(const LogPoint& point);
training::Scalars point_scalars(const LogPoint& point);
void add_log_point(training::RunReport& report, const LogPoint& point);
std::string metrics_json(const LogPoint& point);
std::string ring8_line(const data::Ring8Quality& quality);
std::string ring8_json(int64_t iteration, const data::Ring8Quality& quality);
std::string sync_phase_line(const PhaseStats& phase);
std::string sync_buckets_line(size_t phases, size_t bucket_bytes, size_t parameter_bytes);

class MetricsLog {
 public:
  MetricsLog(const std::string& dir, int64_t resume_iteration)
      : file_(dir, resume_iteration, "tandem-train") {}

  const std::string& path() const { return file_.path(); }
  // The progress line to `console`, the JSON line to the file.
  void log(const LogPoint& point, std::ostream& console);
  void log_ring8(int64_t iteration, const data::Ring8Quality& quality, std::ostream& console);
  // One JSON line (of `iteration`, for the warning) to the file alone, in one piece.
  void write_line(const std::string& line, int64_t iteration) { file_.write_line(line, iteration); }

 private:
  training::MetricsFile file_;
};

}  // namespace tandem::models
