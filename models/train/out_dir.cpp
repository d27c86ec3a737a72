#include "models/train/out_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "models/train/checkpointer.h"
#include "models/train/metrics_log.h"
#include "models/training/run_report.h"
#include "runtime/error.h"
#include "runtime/file_write.h"

namespace tandem::models {

namespace fs = std::filesystem;

namespace {

// A temporary of one of tandem-train's atomic writes (<final name>.tmp, renamed over the
// final name once whole). Only these: an --out may hold the user's own *.tmp files.
bool is_atomic_write_tmp(const std::string& name) {
  const std::string tmp = ".tmp";
  if (!name.ends_with(tmp)) return false;
  const std::string final_name = name.substr(0, name.size() - tmp.size());
  return final_name == kMetricsFile || final_name == training::kReportFile ||
         (final_name.starts_with(std::string(kCheckpointPrefix) + "-") &&
          final_name.ends_with(".safetensors")) ||
         (final_name.starts_with("samples-") && final_name.ends_with(".png"));
}

// A file named like one of tandem-train's checkpoints (<prefix>-<digits>.safetensors).
bool is_checkpoint_name(const std::string& name) {
  const std::string head = std::string(kCheckpointPrefix) + "-", tail = ".safetensors";
  if (name.size() <= head.size() + tail.size() || !name.starts_with(head) || !name.ends_with(tail))
    return false;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The names in `dir` that `keep` selects, sorted.
template <typename Keep>
std::vector<std::string> names_in(const std::string& dir, Keep keep) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (keep(name)) names.push_back(name);
  }
  TANDEM_CHECK(!ec, "cannot list " << dir << " (" << ec.message() << ")");
  std::sort(names.begin(), names.end());
  return names;
}

bool is_sample_name(const std::string& name) {
  return name.starts_with("samples-") && name.ends_with(".png");
}

// What a run that wrote no checkpoint yet leaves (killed early), as regular files: a
// metrics log with lines, the report, sample pictures. An empty metrics log (a run that
// ended before its first line) holds nothing to lose; a link or a directory is no run's.
std::vector<std::string> earlier_outputs(const std::string& out) {
  return names_in(out, [&](const std::string& name) {
    if (name != kMetricsFile && name != training::kReportFile && !is_sample_name(name)) return false;
    std::error_code ec;
    const fs::path path = fs::path(out) / name;
    if (!fs::is_regular_file(fs::symlink_status(path, ec))) return false;
    return name != kMetricsFile || fs::file_size(path, ec) > 0;
  });
}

std::string joined(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
  return list;
}

// "" when `out` may take this run; else why not. Removes an earlier run's files when told to
// overwrite them, naming how many in `log`.
std::string earlier_run_problem(const std::string& out, OutReuse reuse, std::ostream& log) {
  if (reuse == OutReuse::resume) return "";
  const std::vector<std::string> checkpoints = names_in(out, is_checkpoint_name);
  if (reuse == OutReuse::new_run) {
    const std::string remedy =
        "). Pass --resume to continue that run, --overwrite to replace it, or choose another --out";
    if (!checkpoints.empty()) return "holds checkpoints of an earlier run (" + joined(checkpoints) + remedy;
    const std::vector<std::string> outputs = earlier_outputs(out);
    if (!outputs.empty())
      return "holds the outputs of an earlier run, without checkpoints (" + joined(outputs) + remedy;
    return "";
  }
  const std::vector<std::string> samples = names_in(out, is_sample_name);
  if (checkpoints.empty() && samples.empty()) return "";  // metrics.jsonl and report.html are rewritten
  for (const auto* names : {&checkpoints, &samples}) {
    for (const std::string& name : *names) {
      std::error_code ec;
      fs::remove(fs::path(out) / name, ec);
      if (ec)
        return "--overwrite: cannot remove " + (fs::path(out) / name).string() + " (" + ec.message() + ")";
    }
  }
  log << "--overwrite: removed the earlier run's " << checkpoints.size() << " checkpoint(s) and "
      << samples.size() << " sample picture(s) from " << out << "\n";
  return "";
}

}  // namespace

std::string out_dir_problem(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return "cannot create the directory (" + (ec ? ec.message() : std::string("not a directory")) + ")";
  }
  const std::string probe_path = (fs::path(dir) / ".write-test").string();
  std::FILE* probe = fopen_fresh(probe_path);  // a link planted there is removed, never written through
  if (probe == nullptr) return "directory is not writable";
  std::fclose(probe);
  fs::remove(probe_path, ec);
  return "";
}

std::vector<std::string> remove_stale_tmp_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code file_ec;
    if (!it->is_regular_file(file_ec) || !is_atomic_write_tmp(name)) continue;
    fs::remove(it->path(), file_ec);
    TANDEM_CHECK(!file_ec, "cannot remove the stale temporary file " << it->path().string() << " ("
                                                                     << file_ec.message() << ")");
    removed.push_back(name);
  }
  TANDEM_CHECK(!ec, "cannot list " << dir << " for stale temporary files (" << ec.message() << ")");
  std::sort(removed.begin(), removed.end());
  return removed;
}

OutDirLock prepare_out_dir(const std::string& out, OutReuse reuse, dist::ProcessGroup& world,
                           std::ostream& log) {
  OutDirLock lock;
  std::string problem;
  std::vector<std::string> removed;
  if (world.rank() == 0) {
    problem = out_dir_problem(out);
    if (problem.empty()) problem = lock.take(out);
    if (problem.empty()) {
      try {
        removed = remove_stale_tmp_files(out);
        problem = earlier_run_problem(out, reuse, log);
      } catch (const Error& e) {
        problem = e.message();
      }
    }
  }
  const std::string rank0_problem = dist::broadcast_string(world, problem, 0, "--out check");
  TANDEM_CHECK(problem.empty(), "--out " << out << ": " << problem);
  TANDEM_CHECK(rank0_problem.empty(), "--out " << out << ": rank 0 found: " << rank0_problem);
  if (!removed.empty()) {
    log << "removed " << removed.size() << " stale temporary file(s) of an earlier run from " << out << ":";
    for (const std::string& name : removed) log << " " << name;
    log << "\n";
  }
  return lock;
}

}  // namespace tandem::models
