// A trace over every rank of a group: aligned time zeros at the start, one file at the end.
//
// Contract: both calls are collective over `group`.
// - start_aligned(group, keep): a barrier, then trace::start(group.rank(), keep) on every
//   rank as it leaves it, so every rank's time zero is the barrier's end (within the
//   barrier's own skew, microseconds on one host); names the calling thread "main".
// - write_gathered(group, path): stops tracing, flushes asynchronous sources (a GPU
//   stream's spans), and sends every rank's events (trace_json.h) to rank 0, which writes
//   them to `path` as one trace (each rank a process, "rank r"). Returns this rank's own
//   events (for trace_summary.h): those the recorder kept. A file rank 0 cannot write
//   throws there, naming it.
#pragma once

#include <string>
#include <vector>

#include "runtime/dist/process_group.h"
#include "runtime/trace.h"

namespace tandem::dist {

void start_trace_aligned(ProcessGroup& group, trace::KeepLast keep = {});
std::vector<trace::Event> write_gathered_trace(ProcessGroup& group, const std::string& path);

}  // namespace tandem::dist
