#include "models/train/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <optional>
#include <sstream>

#include "runtime/error.h"
#include "runtime/file_write.h"

namespace tandem::models {

using training::bucket_memory_ratio;
using training::format_bytes;
using training::format_duration;
using training::write_json_number;

std::string progress_line(const LogPoint& p) {
  const double its = 1000.0 / p.ms_per_step;
  const double eta = static_cast<double>(p.total - p.iteration) * p.ms_per_step / 1000.0;
  std::ostringstream os;
  os << "iter " << std::setw(6) << p.iteration << "/" << p.total << "  " << std::fixed << std::setprecision(1)
     << its << " it/s  " << p.ms_per_step << " ms/step  ETA " << format_duration(eta) << "  loss_d "
     << std::setprecision(4) << p.loss_d << "  loss_g " << p.loss_g;
  for (const auto& [name, value] : p.terms) {
    os << "  " << name << " ";
    if (name == "lr") {  // learning rates are small: significant digits, not decimals
      os << std::defaultfloat << std::setprecision(4) << value << std::fixed;
    } else if (name.rfind("scale_", 0) == 0 || name.rfind("skipped_", 0) == 0) {  // whole numbers
      os << std::setprecision(0) << value << std::setprecision(4);
    } else {
      os << value;
    }
  }
  os << "  sync " << format_bytes(p.bytes_per_step) << "/step";
  if (!p.structure.empty()) os << "  [" << p.structure << "]";
  // fp16's loss scalers count every skipped step per part (skipped_g, skipped_d above).
  const bool counted_per_part = std::any_of(p.terms.begin(), p.terms.end(), [](const auto& term) {
    return term.first == "skipped_g" || term.first == "skipped_d";
  });
  if (p.skipped_steps > 0 && !counted_per_part)
    os << "  skipped " << p.skipped_steps << " non-finite step(s)";
  if (!p.rss_mb.empty()) {
    os << "  rss " << std::setprecision(1);
    for (size_t r = 0; r < p.rss_mb.size(); ++r) os << (r > 0 ? "/" : "") << p.rss_mb[r];
    os << " MB";
  }
  return os.str();
}

std::string metrics_json(const LogPoint& p) {
  std::ostringstream os;
  os << "{\"iteration\": " << p.iteration << ", \"loss_d\": ";
  write_json_number(os, p.loss_d);
  os << ", \"loss_g\": ";
  write_json_number(os, p.loss_g);
  for (const auto& [name, value] : p.terms) {
    os << ", \"" << name << "\": ";
    if (name.rfind("scale_", 0) == 0 && std::isfinite(value)) {  // a loss scale, exactly
      const std::streamsize digits = os.precision(17);
      os << value;
      os.precision(digits);
    } else {
      write_json_number(os, value);
    }
  }
  os << ", \"ms_per_step\": ";
  write_json_number(os, p.ms_per_step);
  os << ", \"bytes_per_step\": " << static_cast<int64_t>(p.bytes_per_step) << ", \"rss_mb\": [";
  for (size_t r = 0; r < p.rss_mb.size(); ++r) {
    os << (r > 0 ? ", " : "");
    write_json_number(os, p.rss_mb[r]);
  }
  os << "]}";
  return os.str();
}

std::string ring8_line(const data::Ring8Quality& q) {
  std::ostringstream os;
  os << "ring8 quality: " << q.modes_covered << "/" << data::kRing8Modes << " modes covered, " << std::fixed
     << std::setprecision(1) << 100.0 * q.high_quality_fraction
     << "% high-quality samples (within 3 sigma of a mode, " << q.count << " samples)";
  return os.str();
}

std::string ring8_json(int64_t iteration, const data::Ring8Quality& q) {
  std::ostringstream os;
  os << "{\"iteration\": " << iteration << ", \"ring8_modes\": " << q.modes_covered
     << ", \"ring8_high_quality\": " << q.high_quality_fraction << "}";
  return os.str();
}

std::string sync_phase_line(const PhaseStats& phase) {
  size_t largest = 0;
  for (size_t b : phase.bucket_bytes) largest = std::max(largest, b);
  std::ostringstream os;
  os << "sync " << phase.description << ": " << phase.bucket_bytes.size() << " bucket(s), largest "
     << format_bytes(static_cast<double>(largest)) << ", "
     << format_bytes(static_cast<double>(phase.bytes_per_backward)) << " per backward, " << phase.backwards
     << " backward(s), rebuilt " << phase.rebuilds << "x";
  return os.str();
}

std::string sync_buckets_line(size_t phases, size_t bucket_bytes, size_t parameter_bytes) {
  std::ostringstream os;
  os << "sync buckets: " << phases << " phase(s) in " << format_bytes(static_cast<double>(bucket_bytes))
     << " of buckets for " << format_bytes(static_cast<double>(parameter_bytes)) << " of parameters ("
     << bucket_memory_ratio(bucket_bytes, parameter_bytes) << ")";
  return os.str();
}

void MetricsLog::log(const LogPoint& point, std::ostream& console) {
  console << progress_line(point) << std::endl;
  write_line(metrics_json(point), point.iteration);
}

void MetricsLog::log_ring8(int64_t iteration, const data::Ring8Quality& quality, std::ostream& console) {
  console << ring8_line(quality) << "\n";
  write_line(ring8_json(iteration, quality), iteration);
}

training::Scalars point_scalars(const LogPoint& point) {
  training::Scalars scalars = {{"loss_d", point.loss_d}, {"loss_g", point.loss_g}};
  scalars.insert(scalars.end(), point.terms.begin(), point.terms.end());
  scalars.emplace_back("ms_per_step", point.ms_per_step);
  scalars.emplace_back("bytes_per_step", point.bytes_per_step);
  return scalars;
}

void add_log_point(training::RunReport& report, const LogPoint& point) {
  report.add_scalars(point.iteration, point_scalars(point));
  report.set_latest_line(progress_line(point));
}

}  // namespace tandem::models
