#include "models/training/progress.h"

#include <unistd.h>

#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "models/training/metrics_file.h"

namespace tandem::training {

std::string progress_text(int64_t iteration, int64_t total, double its, const Scalars& scalars) {
  std::ostringstream os;
  os << "iter " << std::setw(6) << iteration << "/" << total << "  " << std::fixed << std::setprecision(1)
     << its << " it/s  ETA ";
  if (its > 0 && std::isfinite(its)) {
    os << format_duration(static_cast<double>(total - iteration) / its);
  } else {
    os << "?";
  }
  os << scalars_text(scalars);
  return os.str();
}

std::string scalars_text(const Scalars& scalars) {
  std::ostringstream os;
  os << std::fixed;
  for (const auto& [name, value] : scalars) {
    os << "  " << name << " ";
    const double magnitude = std::abs(value);
    if (value != 0 && std::isfinite(value) && (magnitude < 1e-2 || magnitude >= 1e4)) {
      os << std::defaultfloat << std::setprecision(4) << value << std::fixed;
    } else {
      os << std::setprecision(4) << value;
    }
  }
  return os.str();
}

namespace {

bool is_terminal(const std::ostream& out) {
  if (&out == &std::cout) return isatty(STDOUT_FILENO) == 1;
  if (&out == &std::cerr) return isatty(STDERR_FILENO) == 1;
  return false;
}

}  // namespace

Progress::Progress(int64_t total, std::ostream& out, ProgressOptions options)
    : total_(total),
      out_(out),
      options_(std::move(options)),
      in_place_(options_.style == ProgressStyle::in_place ||
                (options_.style == ProgressStyle::automatic && is_terminal(out))),
      last_time_(options_.now()),
      last_iteration_(options_.start) {}

Progress::~Progress() { finish(); }

bool Progress::due(int64_t iteration) const {
  if (options_.rank != 0) return false;
  const double seconds = std::chrono::duration<double>(options_.now() - last_time_).count();
  return seconds >= (in_place_ ? options_.refresh_s : options_.interval_s) || iteration >= total_;
}

void Progress::update(int64_t iteration, const Scalars& scalars) {
  if (!due(iteration)) return;
  const auto now = options_.now();
  const double seconds = std::chrono::duration<double>(now - last_time_).count();
  const bool last = iteration >= total_;
  const double its = seconds > 0 ? static_cast<double>(iteration - last_iteration_) / seconds : 0.0;
  const std::string text = progress_text(iteration, total_, its, scalars);
  if (in_place_) {
    out_ << '\r' << text;
    if (text.size() < open_width_) out_ << std::string(open_width_ - text.size(), ' ');
    open_width_ = std::max<size_t>(text.size(), 1);
    if (last) finish();
    out_.flush();
  } else {
    out_ << text << '\n' << std::flush;
  }
  last_time_ = now;
  last_iteration_ = iteration;
}

void Progress::finish() {
  if (open_width_ == 0) return;
  out_ << '\n' << std::flush;
  open_width_ = 0;
}

void Progress::clear() {
  if (open_width_ == 0) return;
  out_ << '\r' << std::string(open_width_, ' ') << '\r' << std::flush;
  open_width_ = 0;
}

}  // namespace tandem::training
