#include "models/train/metrics_log.h"

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <sstream>

#include "runtime/error.h"

namespace tandem::models {

std::string progress_line(const LogPoint& p) {
  const double its = 1000.0 / p.ms_per_step;
  const double eta = static_cast<double>(p.total - p.iteration) * p.ms_per_step / 1000.0;
  std::ostringstream os;
  os << "iter " << std::setw(6) << p.iteration << "/" << p.total << "  " << std::fixed << std::setprecision(1)
     << its << " it/s  " << p.ms_per_step << " ms/step  ETA " << format_duration(eta) << "  loss_d "
     << std::setprecision(4) << p.loss_d << "  loss_g " << p.loss_g << "  sync "
     << format_bytes(p.bytes_per_step) << "/step";
  if (!p.structure.empty()) os << "  [" << p.structure << "]";
  if (p.skipped_steps > 0) os << "  skipped " << p.skipped_steps << " non-finite step(s)";
  os << "  rss " << std::setprecision(1);
  for (size_t r = 0; r < p.rss_mb.size(); ++r) os << (r > 0 ? "/" : "") << p.rss_mb[r];
  os << " MB";
  return os.str();
}

std::string metrics_json(const LogPoint& p) {
  std::ostringstream os;
  os << "{\"iteration\": " << p.iteration << ", \"loss_d\": " << p.loss_d << ", \"loss_g\": " << p.loss_g
     << ", \"ms_per_step\": " << p.ms_per_step
     << ", \"bytes_per_step\": " << static_cast<int64_t>(p.bytes_per_step) << ", \"rss_mb\": [";
  for (size_t r = 0; r < p.rss_mb.size(); ++r) os << (r > 0 ? ", " : "") << p.rss_mb[r];
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

std::string sync_cache_line(size_t phases, size_t held_bytes, size_t cap_bytes, int64_t evicted) {
  std::ostringstream os;
  os << "sync cache: " << phases << " phase(s), " << format_bytes(static_cast<double>(held_bytes))
     << " of buckets (cap "
     << (cap_bytes == std::numeric_limits<size_t>::max() ? "none"
                                                         : format_bytes(static_cast<double>(cap_bytes)))
     << "), " << evicted << " evicted";
  return os.str();
}

std::string format_duration(double seconds) {
  int64_t s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  std::ostringstream os;
  if (s >= 3600) os << s / 3600 << "h";
  if (s >= 60) os << (s / 60) % 60 << "m";
  os << s % 60 << "s";
  return os.str();
}

std::string format_bytes(double bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(bytes >= 1e6 ? 2 : 1);
  if (bytes >= 1e6)
    os << bytes / 1e6 << " MB";
  else
    os << bytes / 1e3 << " kB";
  return os.str();
}

MetricsLog::MetricsLog(const std::string& dir, bool append)
    : path_((std::filesystem::path(dir) / kMetricsFile).string()) {
  file_.open(path_, append ? std::ios::app : std::ios::trunc);
  TANDEM_CHECK(file_.good(), "cannot open " << path_ << " for writing");
}

void MetricsLog::log(const LogPoint& point, std::ostream& console) {
  console << progress_line(point) << std::endl;
  file_ << metrics_json(point) << std::endl;
}

void MetricsLog::log_ring8(int64_t iteration, const data::Ring8Quality& quality, std::ostream& console) {
  console << ring8_line(quality) << "\n";
  file_ << ring8_json(iteration, quality) << std::endl;
}

}  // namespace tandem::models
