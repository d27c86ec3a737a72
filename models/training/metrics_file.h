// <dir>/metrics.jsonl, the file a run's logged values go to: one JSON object per line,
// cut back on resume, a write error reported once (ScalarLog writes it for any program;
// tandem-train's MetricsLog for its own log points).
//
// Contract:
// - MetricsFile(dir, resume_iteration, program) opens <dir>/metrics.jsonl: emptied for a
//   run from iteration 0; for a run resumed from the checkpoint of iteration N > 0, first
//   cut to the lines of iterations <= N (the resumed run logs the later ones again) by an
//   atomic rewrite (a .tmp renamed over it), and then appended to. The cut also drops every
//   line that is not whole: one flat JSON object {"iteration": <integer>, ...} (a line torn
//   by a crash or a full disk). A file that cannot be opened is an Error naming it; a cut
//   that cannot be written is reported as a write error below, and the file is kept as it
//   was. Every line is flushed as it is written, so a killed run keeps what it logged.
//   Links (a shared --out): metrics.jsonl is opened without following a symbolic link, so a
//   link there (dangling or not) is an Error "cannot open <path> for writing (it is a
//   symbolic link, not written through)", and a cut never reads through one; a link at the
//   cut's temporary is replaced (runtime/file_write.h), its target untouched.
// - write_line(line, iteration) appends one line in one piece. A line that cannot be
//   written (a full disk, an I/O error) is reported once on stderr, "<program>: warning:
//   cannot write <path> at iteration <i> (<reason>); ...": no further lines go to the file,
//   and the run goes on (its checkpoints are the run).
// - write_json_number(os, x): x with os's precision, a NaN or infinite value as null (JSON
//   has no such numbers; a diverged run's losses stay readable by any JSON reader).
// - format_duration(s): s rounded to whole seconds (negative as 0) as "[<h>h][<m>m]<s>s";
//   format_bytes(b): "<b / 10^3, 1 decimal> kB" below 10^6, else "<b / 10^6, 2 decimals> MB".
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <ostream>
#include <string>

namespace tandem::training {

constexpr const char* kMetricsFile = "metrics.jsonl";

void write_json_number(std::ostream& os, double value);
std::string format_duration(double seconds);
std::string format_bytes(double bytes);

class MetricsFile {
 public:
  MetricsFile(const std::string& dir, int64_t resume_iteration, std::string program = "tandem");

  const std::string& path() const { return path_; }
  void write_line(const std::string& line, int64_t iteration);

 private:
  void report_write_error(int64_t iteration, const std::string& reason);

  std::string path_;
  std::string program_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_{nullptr, &std::fclose};
  bool write_failed_ = false;  // reported; nothing more is written
};

}  // namespace tandem::training
