// The output directory (--out): made, checked and locked before any work starts.
//
// Contract:
// - out_dir_problem(dir) creates `dir` and its parents when missing and returns why it
//   cannot take the outputs ("cannot create the directory (<reason>)" or "directory is not
//   writable"), or "" when it can. It writes a probe file (<dir>/.write-test, made
//   fresh: a link there is removed, never written through) to find out and removes it.
// - remove_stale_tmp_files(dir) removes from `dir` the temporaries that tandem-train's
//   atomic writes leave when a run dies mid-write (ckpt-*.safetensors.tmp,
//   samples-*.png.tmp, metrics.jsonl.tmp, report.html.tmp) and returns their names, sorted. Other files,
//   *.tmp or not, are never touched. A file that cannot be removed is an Error naming it.
// - prepare_out_dir(out, world, log) is collective: only rank 0 writes to --out, so only
//   rank 0 checks it, takes its lock (out_lock.h: one run per --out; a second run is
//   refused naming the first one's host and pid), removes stale temporaries (after the
//   lock, so never a live run's; it says which in `log`), and broadcasts the verdict, so
//   that every rank stops before training instead of waiting in a collective for a rank
//   that gave up. On failure every rank throws an Error starting "--out <out>: " with rank
//   0's reason ("rank 0 found: <reason>" on the other ranks). Returns the lock, held by
//   rank 0 (the other ranks' hold nothing): keep it for the whole run.
// - A new run (reuse == OutReuse::new_run) in an --out that holds files named like
//   checkpoints (an earlier run's) is refused the same way, naming them, --resume and
//   --overwrite: two runs' checkpoints and metrics must not mix. So is one in an --out
//   holding no checkpoint but an earlier run's outputs (a run killed before its first
//   checkpoint), as regular files: a metrics.jsonl of at least one byte, report.html or
//   samples-*.png ("holds the outputs of an earlier run, without checkpoints (<names>).
//   Pass --resume ..."). With OutReuse::overwrite rank 0 removes those checkpoints and the
//   earlier run's sample pictures (samples-*.png) and says how many in `log`;
//   OutReuse::resume leaves them for --resume.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "models/train/out_lock.h"
#include "runtime/dist/process_group.h"

namespace tandem::models {

std::string out_dir_problem(const std::string& dir);
std::vector<std::string> remove_stale_tmp_files(const std::string& dir);
enum class OutReuse { new_run, resume, overwrite };
OutDirLock prepare_out_dir(const std::string& out, OutReuse reuse, dist::ProcessGroup& world,
                           std::ostream& log);

}  // namespace tandem::models
