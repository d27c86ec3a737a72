#include "models/training/metrics_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>
#include <utility>

#include "runtime/error.h"
#include "runtime/file_write.h"

namespace tandem::training {

void write_json_number(std::ostream& os, double value) {
  if (std::isfinite(value)) {
    os << value;
  } else {
    os << "null";
  }
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

namespace {

namespace fs = std::filesystem;

std::string errno_text() { return errno != 0 ? std::strerror(errno) : "the stream failed"; }

// The iteration of a whole line: one flat JSON object {"iteration": <integer>, ...} as
// metrics_json and ring8_json write it; nullopt for anything else (a torn line).
std::optional<int64_t> iteration_of(const std::string& line) {
  const std::string head = "{\"iteration\": ";
  if (!line.starts_with(head) || !line.ends_with("}")) return std::nullopt;
  if (std::count(line.begin(), line.end(), '{') != 1 || std::count(line.begin(), line.end(), '}') != 1) {
    return std::nullopt;
  }
  int64_t iteration = 0;
  const char* first = line.data() + head.size();
  auto [end, ec] = std::from_chars(first, line.data() + line.size(), iteration);
  if (ec != std::errc() || end == first || (*end != ',' && *end != '}')) return std::nullopt;
  return iteration;
}

// Cuts the file at `path` to its whole lines of iterations <= `iteration`, by writing
// path.tmp and renaming it over `path`; returns "" or why it could not.
std::string cut_after(const std::string& path, int64_t iteration) {
  std::error_code ec;
  // Nothing logged yet, or not a file to cut: a link is never read through (the open refuses it).
  if (!fs::is_regular_file(fs::symlink_status(path, ec))) return "";
  std::ifstream in(path, std::ios::binary);
  std::ostringstream original;
  errno = 0;
  original << in.rdbuf();
  if (in.bad()) return "cannot read it (" + errno_text() + ")";
  std::string kept;
  std::istringstream lines(original.str());
  for (std::string line; std::getline(lines, line);) {
    std::optional<int64_t> i = iteration_of(line);
    if (i && *i <= iteration) kept += line + "\n";
  }
  if (kept == original.str()) return "";
  return replace_file(path, [&](std::FILE* fp) { std::fwrite(kept.data(), 1, kept.size(), fp); });
}

}  // namespace

MetricsFile::MetricsFile(const std::string& dir, int64_t resume_iteration, std::string program)
    : path_((std::filesystem::path(dir) / kMetricsFile).string()), program_(std::move(program)) {
  // A resumed run logs again every iteration after its checkpoint's.
  const std::string cut_problem = resume_iteration > 0 ? cut_after(path_, resume_iteration) : "";
  const int fd = open_no_follow(path_, O_WRONLY | O_CREAT | (resume_iteration > 0 ? O_APPEND : O_TRUNC));
  TANDEM_CHECK(fd >= 0, "cannot open " << path_ << " for writing (" << open_failure(errno) << ")");
  file_.reset(::fdopen(fd, "a"));
  if (!file_) {
    const int err = errno;
    ::close(fd);
    TANDEM_FAIL("cannot open " << path_ << " for writing (" << std::strerror(err) << ")");
  }
  if (!cut_problem.empty()) {
    // Appending to the uncut file would log iterations twice: keep it as it is instead.
    report_write_error(resume_iteration, "cutting it to the checkpoint's iteration " +
                                             std::to_string(resume_iteration) + ": " + cut_problem);
  }
}

void MetricsFile::write_line(const std::string& line, int64_t iteration) {
  if (write_failed_) return;
  errno = 0;
  const std::string text = line + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_.get()) != text.size() || std::fflush(file_.get()) != 0)
    report_write_error(iteration, errno_text());
}

void MetricsFile::report_write_error(int64_t iteration, const std::string& reason) {
  write_failed_ = true;
  write_stderr_line(program_ + ": warning: cannot write " + path_ + " at iteration " +
                    std::to_string(iteration) + " (" + reason +
                    "); no more metrics lines go there, training goes on");
}

}  // namespace tandem::training
