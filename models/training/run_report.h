// The run report: <dir>/report.html, one page a person opens in a browser to see a run at a
// glance, during the run and after it.
//
// Contract:
// - RunReport(dir, title, settings, total) holds the run's history: named scalars per
//   iteration. add_scalars(i, scalars) records any named scalars of iteration i (the latest
//   line is then "iter <i, width 6>/<total>" and the row's scalars as progress.h writes
//   them), set_latest_line(line) replaces that line (tandem-train's progress line:
//   models/train/metrics_log.h's add_log_point), add_sample(i, path) a sample picture written
//   at iteration i, set_phases(reducer, phases) the synchronisation phases of one Reducer
//   (replacing what it held for that reducer). Scalars of one iteration recorded twice are
//   merged (a later value of a name replaces the earlier).
// - load_history(up_to), for a resumed run: the scalars of <dir>/metrics.jsonl (every whole
//   flat line parse_scalars_json reads, as MetricsLog and ScalarLog write them; torn lines
//   skipped, values that are not numbers left out) and the sample pictures
//   <dir>/samples-<6 digits>.png of iterations <= up_to, so that the report shows the whole
//   run, not only the part since the resume.
// - write(state) writes <dir>/report.html atomically (report.html.tmp, renamed over it:
//   runtime/file_write.h's replace_file, so a link at either name is replaced, never
//   written through) and
//   returns "" or why it could not. write_or_warn(state, warning) writes it so and, the
//   first time it cannot, writes "<warning>: <why>; training goes on" on stderr (the run
//   goes on); warned() is then true. The page is
//   self-contained: no script, no style sheet or font from elsewhere, no network. It shows,
//   in this order: the title, the state ("running" or "finished"), the last iteration of
//   `total` and the time it was written (UTC), the latest progress line; charts as inline
//   SVG, one per group of names, in the order their first names were recorded: a name's
//   group is its part before the first '/', else before its last '_', else the name
//   (loss_d and loss_g: "loss"); each series raw (faint) and smoothed (solid), but for
//   these names (tandem-train's): "lr" alone on a chart of its own, unsmoothed; "gp",
//   "wdist", "r1", "r2", "pl" and "pl_mean" together on the penalty terms' chart; "bytes_per_step" on a chart
//   of bytes synchronised per step (axis in bytes); "ms_per_step" on a chart of ms per step and one of it/s.
//   A name never recorded gets no chart (no empty figure); the latest sample picture inline (a base64 data:
//   URI, so the page alone shows it) and up to 15 earlier ones, evenly spread from the first, by file name
//   relative to <dir>; a table of each Reducer's phases (buckets, largest bucket, bytes per backward,
//   backwards since this process started, rebuilds; bucket_memory_ratio(bucket bytes, parameter bytes):
//   "<bucket / parameter bytes, 2 decimals>x", "-" without parameters); every setting (flag and value);
//   all text HTML-escaped.
//   While running the page reloads itself every kRefreshSeconds (meta refresh); once finished it does not.
// - A chart's x axis spans the iterations of its points (labelled at its ends and
//   quarters), its y axis the finite values of its series (a flat series +-10% around its
//   value, +-1 around 0); non-finite values are left out.
//   polyline_points maps (x, y) pairs into the plot area of a chart (kChartWidth x
//   kChartHeight pixels, the plot inset by kPlotLeft/kPlotRight/kPlotTop/kPlotBottom), as
//   "x,y" pairs with one decimal, separated by spaces; y grows upwards.
// - smooth(values) is an exponential moving average over the finite values, span
//   max(1, n / 10) points (weight 2 / (span + 1) for each new value), starting at the first
//   finite value; a non-finite value leaves the average as it was.
// - html_escape escapes & < > " '; base64 encodes with the standard alphabet and padding.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/training/scalar_log.h"
#include "reducer/reducer.h"

namespace tandem::training {

constexpr const char* kReportFile = "report.html";
constexpr int kRefreshSeconds = 10;
constexpr double kChartWidth = 560, kChartHeight = 220;
constexpr double kPlotLeft = 64, kPlotRight = 16, kPlotTop = 12, kPlotBottom = 28;

enum class RunState { running, finished };

// One line of the page's configuration: a flag (or a name) and its value.
struct ReportSetting {
  std::string flag;
  std::string value;
};

struct PlotRange {
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
};

std::string polyline_points(const std::vector<double>& x, const std::vector<double>& y,
                            const PlotRange& range);
std::vector<double> smooth(const std::vector<double>& values);
std::string html_escape(const std::string& text);
std::string base64(const std::string& bytes);
std::string bucket_memory_ratio(size_t bucket_bytes, size_t parameter_bytes);

class RunReport {
 public:
  RunReport(std::string dir, std::string title, std::vector<ReportSetting> settings, int64_t total);

  const std::string& path() const { return path_; }
  void add_scalars(int64_t iteration, const Scalars& scalars);
  void set_latest_line(std::string line);
  void add_sample(int64_t iteration, const std::string& path);
  void set_phases(const std::string& reducer, std::vector<PhaseStats> phases);
  void load_history(int64_t up_to);
  std::string html(RunState state) const;
  std::string write(RunState state) const;
  void write_or_warn(RunState state, const std::string& warning);
  bool warned() const { return warned_; }

 private:
  struct Sample {
    int64_t iteration;
    std::string path;
  };

  std::string dir_, path_, title_;
  std::vector<ReportSetting> settings_;
  int64_t total_;
  struct Row {
    int64_t iteration;
    Scalars scalars;
  };
  Row& row_at(int64_t iteration);

  std::vector<Row> rows_;    // by iteration
  std::string latest_line_;  // "" until a point or scalars are recorded
  std::vector<Sample> samples_;
  std::vector<std::pair<std::string, std::vector<PhaseStats>>> phases_;  // per Reducer
  bool warned_ = false;                                                  // a write failed, and said so
};

}  // namespace tandem::training
