#include "models/training/run_report.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include "models/training/progress.h"
#include "runtime/error.h"
#include "runtime/file_write.h"

namespace tandem::training {

namespace fs = std::filesystem;

namespace {

// Earlier sample pictures shown beside the latest: enough to see the run's progress, few
// enough that a page of a long run stays light.
constexpr size_t kMaxEarlierSamples = 15;

std::string fixed1(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

// Four significant digits, but whole numbers from 10^4 on rather than an exponent
// (step times in ms reach them).
std::string short_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, std::abs(v) >= 1e4 && std::abs(v) < 1e15 ? "%.0f" : "%.4g", v);
  return text;
}

// How a chart writes its y axis values.
enum class Unit { number, bytes };

std::string axis_label(double v, Unit unit) {
  return unit == Unit::bytes ? format_bytes(v) : short_number(v);
}

struct Series {
  std::string name;
  std::string color;
  std::vector<double> y;
  bool faint = false;
};

PlotRange range_of(const std::vector<double>& x, const std::vector<Series>& series) {
  PlotRange r;
  if (!x.empty()) {
    r.x_min = x.front();
    r.x_max = x.back() > x.front() ? x.back() : x.front() + 1;
  }
  bool any = false;
  for (const Series& s : series) {
    for (double v : s.y) {
      if (!std::isfinite(v)) continue;
      r.y_min = any ? std::min(r.y_min, v) : v;
      r.y_max = any ? std::max(r.y_max, v) : v;
      any = true;
    }
  }
  if (any && r.y_max == r.y_min) {  // a flat series: in the middle, its value readable on the axis
    const double half = r.y_max != 0 ? std::abs(r.y_max) * 0.1 : 1.0;
    r.y_min -= half;
    r.y_max += half;
  }
  return r;
}

// One chart: a titled SVG with a frame, four labelled grid lines, the first and last
// iteration under the x axis, one polyline per series, and a legend.
std::string chart(const std::string& id, const std::string& title, const std::vector<double>& x,
                  const std::vector<Series>& series, Unit unit = Unit::number) {
  const PlotRange r = range_of(x, series);
  const double plot_w = kChartWidth - kPlotLeft - kPlotRight, plot_h = kChartHeight - kPlotTop - kPlotBottom;
  std::ostringstream os;
  os << "<figure class=\"chart\" id=\"" << id << "\"><figcaption>" << html_escape(title) << "</figcaption>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kChartWidth << "\" height=\"" << kChartHeight
     << "\" viewBox=\"0 0 " << kChartWidth << " " << kChartHeight << "\" role=\"img\" aria-label=\""
     << html_escape(title) << "\">\n"
     << "<rect x=\"" << kPlotLeft << "\" y=\"" << kPlotTop << "\" width=\"" << plot_w << "\" height=\""
     << plot_h << "\" fill=\"#fff\" stroke=\"#999\"/>\n";
  for (int i = 0; i <= 3; ++i) {
    const double f = i / 3.0, py = kPlotTop + plot_h * (1 - f);
    os << "<line x1=\"" << kPlotLeft << "\" x2=\"" << kPlotLeft + plot_w << "\" y1=\"" << fixed1(py)
       << "\" y2=\"" << fixed1(py) << "\" stroke=\"#eee\"/><text x=\"" << kPlotLeft - 6 << "\" y=\""
       << fixed1(py + 4) << "\" text-anchor=\"end\">" << axis_label(r.y_min + f * (r.y_max - r.y_min), unit)
       << "</text>\n";
  }
  // Iterations at the ends and quarters of the x axis, with a grid line each.
  const double label_y = kChartHeight - kPlotBottom + 16;
  for (int i = 0; i <= 4; ++i) {
    const double f = i / 4.0, px = kPlotLeft + plot_w * f;
    os << "<line x1=\"" << fixed1(px) << "\" x2=\"" << fixed1(px) << "\" y1=\"" << kPlotTop << "\" y2=\""
       << kPlotTop + plot_h << "\" stroke=\"#eee\"/><text x=\"" << fixed1(px) << "\" y=\"" << label_y
       << "\" text-anchor=\""
       << (i == 0   ? "start"
           : i == 4 ? "end"
                    : "middle")
       << "\">" << std::llround(r.x_min + f * (r.x_max - r.x_min)) << "</text>\n";
  }
  os << "<text x=\"" << kPlotLeft - 6 << "\" y=\"" << label_y
     << "\" text-anchor=\"end\" fill-opacity=\"0.6\">iteration</text>\n";
  for (const Series& s : series) {
    os << "<polyline data-series=\"" << html_escape(s.name) << "\" fill=\"none\" stroke=\"" << s.color
       << "\" stroke-width=\"" << (s.faint ? "1" : "2") << "\"" << (s.faint ? " stroke-opacity=\"0.3\"" : "")
       << " points=\"" << polyline_points(x, s.y, r) << "\"/>\n";
  }
  os << "</svg>\n<div class=\"legend\">";
  for (const Series& s : series) {
    if (s.faint) continue;
    os << "<span><i style=\"background:" << s.color << "\"></i>" << html_escape(s.name) << "</span>";
  }
  os << "</div></figure>\n";
  return os.str();
}

// A quantity raw (faint) and smoothed (solid), in one colour.
void add_smoothed(std::vector<Series>& series, const std::string& name, const std::string& color,
                  const std::vector<double>& raw) {
  series.push_back({name + " (raw)", color, raw, true});
  series.push_back({name + " (smoothed)", color, smooth(raw), false});
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

// The picture's bytes as a data: URI, or its name relative to the report when unreadable.
std::string image_source(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in.good() && !in.eof()) return html_escape(fs::path(path).filename().string());
  if (bytes.str().empty()) return html_escape(fs::path(path).filename().string());
  return "data:image/png;base64," + base64(bytes.str());
}

// The chart a name goes on: its group (see the contract), or one of tandem-train's.
std::string group_of(const std::string& name) {
  if (name == "gp" || name == "wdist" || name == "r1" || name == "r2" || name == "pl" || name == "pl_mean")
    return "penalty terms";
  if (const size_t slash = name.find('/'); slash != std::string::npos && slash > 0)
    return name.substr(0, slash);
  if (const size_t underscore = name.rfind('_'); underscore != std::string::npos && underscore > 0)
    return name.substr(0, underscore);
  return name;
}

// A chart's id: its group with anything but letters, digits and '-' as '-'.
std::string chart_id(const std::string& group) {
  std::string id = "scalars-";
  for (char c : group) id += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  return id;
}

constexpr const char* kColors[] = {"#1f5fbf", "#d0451b", "#2a8a2a", "#8a2a8a", "#8a6a00", "#1f7f7f"};
constexpr size_t kColorCount = sizeof kColors / sizeof kColors[0];

constexpr const char* kStyle = R"(<style>
body { font: 14px/1.4 sans-serif; margin: 16px 24px; color: #222; background: #fafafa; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 20px 0 6px; }
.state { display: inline-block; padding: 1px 8px; border-radius: 8px; color: #fff; }
.state.running { background: #d08000; } .state.finished { background: #2a8a2a; }
.charts { display: flex; flex-wrap: wrap; gap: 8px 24px; }
figure { margin: 0; } figcaption { font-weight: bold; margin-bottom: 2px; }
svg text { font: 11px sans-serif; fill: #555; }
.legend span { margin-right: 14px; } .legend i { display: inline-block; width: 14px; height: 3px;
  margin: 0 4px 3px 0; vertical-align: middle; }
table { border-collapse: collapse; } td, th { padding: 2px 10px 2px 0; text-align: left; vertical-align: top; }
th { border-bottom: 1px solid #ccc; } td.n { text-align: right; }
.settings { columns: 3 260px; column-gap: 32px; } .settings .flag { display: inline-block;
  min-width: 170px; color: #555; }
pre { background: #fff; border: 1px solid #ddd; padding: 6px; white-space: pre-wrap; }
.samples { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-end; }
.samples img { image-rendering: pixelated; border: 1px solid #ccc; background: #fff; }
</style>
)";

}  // namespace

std::string polyline_points(const std::vector<double>& x, const std::vector<double>& y, const PlotRange& r) {
  const double plot_w = kChartWidth - kPlotLeft - kPlotRight, plot_h = kChartHeight - kPlotTop - kPlotBottom;
  std::string points;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) continue;
    const double px = kPlotLeft + plot_w * (x[i] - r.x_min) / (r.x_max - r.x_min);
    const double py = kPlotTop + plot_h * (1 - (y[i] - r.y_min) / (r.y_max - r.y_min));
    if (!points.empty()) points += ' ';
    points += fixed1(px) + "," + fixed1(py);
  }
  return points;
}

std::vector<double> smooth(const std::vector<double>& values) {
  const double span = std::max<double>(1.0, static_cast<double>(values.size() / 10));
  const double weight = 2.0 / (span + 1.0);
  std::vector<double> out;
  out.reserve(values.size());
  double average = std::nan("");
  for (double v : values) {
    if (std::isfinite(v)) average = std::isfinite(average) ? average + weight * (v - average) : v;
    out.push_back(average);
  }
  return out;
}

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const char* entity = c == '&'    ? "&amp;"
                         : c == '<'  ? "&lt;"
                         : c == '>'  ? "&gt;"
                         : c == '"'  ? "&quot;"
                         : c == '\'' ? "&#39;"
                                     : nullptr;
    if (entity) {
      out += entity;
    } else {
      out += c;
    }
  }
  return out;
}

std::string base64(const std::string& bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t chunk = 0;
    for (size_t k = 0; k < 3; ++k)
      chunk = (chunk << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(chunk >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

std::string bucket_memory_ratio(size_t bucket_bytes, size_t parameter_bytes) {
  if (parameter_bytes == 0) return "-";
  std::ostringstream os;
  os << std::fixed << std::setprecision(2)
     << static_cast<double>(bucket_bytes) / static_cast<double>(parameter_bytes) << "x";
  return os.str();
}

RunReport::RunReport(std::string dir, std::string title, std::vector<ReportSetting> settings, int64_t total)
    : dir_(std::move(dir)),
      path_((fs::path(dir_) / kReportFile).string()),
      title_(std::move(title)),
      settings_(std::move(settings)),
      total_(total) {}

RunReport::Row& RunReport::row_at(int64_t iteration) {
  auto at = std::lower_bound(rows_.begin(), rows_.end(), iteration,
                             [](const Row& row, int64_t i) { return row.iteration < i; });
  if (at == rows_.end() || at->iteration != iteration) at = rows_.insert(at, Row{iteration, {}});
  return *at;
}

void RunReport::add_scalars(int64_t iteration, const Scalars& scalars) {
  Row& row = row_at(iteration);
  for (const auto& [name, value] : scalars) {
    auto same =
        std::find_if(row.scalars.begin(), row.scalars.end(), [&](const auto& s) { return s.first == name; });
    if (same != row.scalars.end()) {
      same->second = value;
    } else {
      row.scalars.emplace_back(name, value);
    }
  }
  std::ostringstream line;
  line << "iter " << std::setw(6) << iteration << "/" << total_ << scalars_text(row.scalars);
  latest_line_ = line.str();
}

void RunReport::set_latest_line(std::string line) { latest_line_ = std::move(line); }

void RunReport::add_sample(int64_t iteration, const std::string& path) {
  samples_.push_back({iteration, path});
}

void RunReport::set_phases(const std::string& reducer, std::vector<PhaseStats> phases) {
  for (auto& [name, held] : phases_) {
    if (name == reducer) {
      held = std::move(phases);
      return;
    }
  }
  phases_.emplace_back(reducer, std::move(phases));
}

void RunReport::load_history(int64_t up_to) {
  std::ifstream metrics(fs::path(dir_) / kMetricsFile);
  for (std::string line; std::getline(metrics, line);) {
    const auto parsed = parse_scalars_json(line);
    if (parsed && parsed->first <= up_to) add_scalars(parsed->first, parsed->second);
  }
  std::vector<Sample> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != 18 || !name.starts_with("samples-") || !name.ends_with(".png")) continue;
    const std::string digits = name.substr(8, 6);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    const int64_t iteration = std::stoll(digits);
    if (iteration <= up_to) found.push_back({iteration, it->path().string()});
  }
  std::sort(found.begin(), found.end(),
            [](const Sample& a, const Sample& b) { return a.iteration < b.iteration; });
  samples_.insert(samples_.begin(), found.begin(), found.end());
}

std::string RunReport::html(RunState state) const {
  const bool running = state == RunState::running;
  std::vector<double> x;
  std::vector<std::string> names;  // in the order first recorded
  for (const Row& row : rows_) {
    x.push_back(static_cast<double>(row.iteration));
    for (const auto& [name, value] : row.scalars) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  // A name's value in each row; NaN (left out of the curve) where a row has none.
  auto values_of = [&](const std::string& name) {
    std::vector<double> values;
    for (const Row& row : rows_) {
      double v = std::nan("");
      for (const auto& [n, value] : row.scalars)
        if (n == name) v = value;
      values.push_back(v);
    }
    return values;
  };

  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  if (running) os << "<meta http-equiv=\"refresh\" content=\"" << kRefreshSeconds << "\">\n";
  os << "<title>" << html_escape(title_) << " (" << (running ? "running" : "finished") << ")</title>\n"
     << kStyle << "</head><body>\n<h1>" << html_escape(title_) << "</h1>\n<p><span class=\"state "
     << (running ? "running" : "finished") << "\" id=\"state\">" << (running ? "running" : "finished")
     << "</span> iteration " << (rows_.empty() ? 0 : rows_.back().iteration) << " of " << total_
     << ", written " << utc_now();
  if (running) os << "; this page reloads every " << kRefreshSeconds << " s";
  os << "</p>\n";
  if (!latest_line_.empty()) os << "<pre id=\"latest\">" << html_escape(latest_line_) << "</pre>\n";

  os << "<h2>Curves</h2>\n<div class=\"charts\">\n";
  if (names.empty()) os << "<p>no scalars yet</p>\n";
  std::vector<std::string> drawn;  // groups
  for (const std::string& first : names) {
    if (first == "lr") {
      os << chart("lr", "learning rate", x, {{"lr", "#444", values_of("lr")}});
    } else if (first == "bytes_per_step") {
      os << chart("sync-bytes", "bytes synchronised per step (all backwards of an iteration)", x,
                  {{"bytes/step", "#7f3f9f", values_of(first)}}, Unit::bytes);
    } else if (first == "ms_per_step") {
      const std::vector<double> ms = values_of(first);
      std::vector<double> its;
      for (double v : ms) its.push_back(v > 0 ? 1000.0 / v : std::nan(""));
      os << chart("step-time", "ms per step (rank 0, mean over each log interval)", x,
                  {{"ms/step", "#444", ms}})
         << chart("its", "iterations per second", x, {{"it/s", "#1f7f7f", its}});
    } else {
      const std::string group = group_of(first);
      if (std::find(drawn.begin(), drawn.end(), group) != drawn.end()) continue;
      drawn.push_back(group);
      std::vector<Series> series;
      std::string members;
      for (const std::string& name : names) {
        if (name == "lr" || name == "bytes_per_step" || name == "ms_per_step" || group_of(name) != group)
          continue;
        add_smoothed(series, name, kColors[series.size() / 2 % kColorCount], values_of(name));
        members += (members.empty() ? "" : ", ") + name;
      }
      const bool penalties = group == "penalty terms";
      os << chart(penalties         ? "terms"
                  : group == "loss" ? "losses"
                                    : chart_id(group),
                  (penalties ? "penalty terms" : members) + " (faint: raw, solid: smoothed)", x, series);
    }
  }
  os << "</div>\n";

  os << "<h2>Samples</h2>\n<div class=\"samples\">\n";
  if (samples_.empty()) os << "<p>no sample picture yet</p>\n";
  if (!samples_.empty()) {
    const Sample& latest = samples_.back();
    os << "<figure><img id=\"latest-sample\" alt=\"samples at iteration " << latest.iteration << "\" src=\""
       << image_source(latest.path) << "\"><figcaption>latest: iteration " << latest.iteration
       << "</figcaption></figure>\n";
    // Evenly spread over the earlier ones, the first always among them; newest first.
    const size_t earlier = samples_.size() - 1;
    const size_t shown = std::min(earlier, kMaxEarlierSamples);
    for (size_t k = shown; k-- > 0;) {
      const Sample& s = samples_[shown == earlier ? k : k * (earlier - 1) / (shown - 1)];
      const std::string name = html_escape(fs::path(s.path).filename().string());
      os << "<figure><a href=\"" << name << "\"><img class=\"earlier-sample\" width=\"160\" alt=\"samples at "
         << "iteration " << s.iteration << "\" src=\"" << name << "\"></a><figcaption>iteration "
         << s.iteration << "</figcaption></figure>\n";
    }
  }
  os << "</div>\n";

  os << "<h2>Synchronisation</h2>\n<table id=\"phases\"><tr><th>reducer</th><th>phase</th><th>buckets</th>"
        "<th>largest bucket</th><th>bytes per backward</th><th>backwards (this "
        "process)</th><th>rebuilds</th><th>bucket memory / parameters</th></tr>\n";
  for (const auto& [reducer, phases] : phases_) {
    for (const PhaseStats& phase : phases) {
      size_t largest = 0;
      for (size_t b : phase.bucket_bytes) largest = std::max(largest, b);
      os << "<tr><td>" << html_escape(reducer) << "</td><td>" << html_escape(phase.description)
         << "</td><td class=\"n\">" << phase.bucket_bytes.size() << "</td><td class=\"n\">"
         << format_bytes(static_cast<double>(largest)) << "</td><td class=\"n\">"
         << format_bytes(static_cast<double>(phase.bytes_per_backward)) << "</td><td class=\"n\">"
         << phase.backwards << "</td><td class=\"n\">" << phase.rebuilds << "</td><td class=\"n\">"
         << bucket_memory_ratio(phase.storage_bytes, phase.parameter_bytes) << "</td></tr>\n";
    }
  }
  if (phases_.empty()) os << "<tr><td colspan=\"8\">no synchronised backward yet</td></tr>\n";
  os << "</table>\n";

  os << "<h2>Configuration</h2>\n<div class=\"settings\" id=\"settings\">\n";
  for (const ReportSetting& s : settings_) {
    os << "<div><span class=\"flag\">" << html_escape(s.flag) << "</span> " << html_escape(s.value)
       << "</div>\n";
  }
  os << "</div>\n</body></html>\n";
  return os.str();
}

std::string RunReport::write(RunState state) const {
  const std::string text = html(state);
  return replace_file(path_, [&](std::FILE* fp) { std::fwrite(text.data(), 1, text.size(), fp); });
}

void RunReport::write_or_warn(RunState state, const std::string& warning) {
  const std::string problem = write(state);
  if (problem.empty() || warned_) return;
  warned_ = true;
  write_stderr_line(warning + ": " + problem + "; training goes on");
}

}  // namespace tandem::training
