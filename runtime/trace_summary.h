// What a trace says about the overlap of communication with the backward, per phase.
//
// Contract: summarize(events) reads one rank's events (trace.h) as the Reducer and the
// autograd engine record them, and returns one PhaseSummary per phase (the "phase" text
// argument of the sync spans), in order of first appearance. Per synced backward (a "sync"
// span of category "reducer", with arguments "sync" = its number and "phase"):
// - the backward's compute is the "backward" span (category "autograd") of the same thread
//   inside the sync span;
// - its reductions are the spans of category "comm" carrying the same "sync" argument and
//   a "bucket" argument (on the communication thread, or a GPU stream's track);
// - overlap fraction = the reductions' time inside the backward's compute / their total
//   time (summed over the phase's backwards before dividing);
// - exposed communication = from the end of the backward's compute to the end of the sync
//   span (the last bucket waited for and unpacked);
// - the critical path is the sync span itself, split into the Reducer's own work (its
//   "agreement", "pack", "launch" and "unpack" spans), communication (its "wait" spans) and
//   compute (the backward's compute less the Reducer's work inside it); what is left
//   (bookkeeping between them) is the remainder of the sync span. The agreement is a
//   collective: its time includes waiting for the last rank to arrive, so it is also given
//   apart.
// merge(into, more) adds `more` to `into`, phase by phase (by name; phases new to `into`
// appended in their order). The summary of two sets of events that share no synced backward
// is the merge of theirs: a run whose recorder keeps its last steps only (trace.h; a step
// holds its backwards whole) summarizes each dropped step as it goes and merges the kept
// events' summary at the end.
// summary_line(s) is one human-readable line of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/trace.h"

namespace tandem::trace {

// The names the recording sites use and summarize reads.
inline constexpr const char* kSync = "sync";
inline constexpr const char* kAgreement = "agreement";
inline constexpr const char* kPack = "pack";
inline constexpr const char* kLaunch = "launch";
inline constexpr const char* kWait = "wait";
inline constexpr const char* kUnpack = "unpack";
inline constexpr const char* kBackward = "backward";

struct PhaseSummary {
  std::string phase;
  int64_t steps = 0;          // synced backwards
  int64_t sync_ns = 0;        // the critical path: the sync spans, summed
  int64_t reduce_ns = 0;      // reductions, summed
  int64_t overlapped_ns = 0;  // of which inside the backward's compute
  int64_t exposed_ns = 0;     // summed over the backwards
  int64_t compute_ns = 0;
  int64_t comm_ns = 0;       // waiting for reductions
  int64_t reducer_ns = 0;    // the Reducer's own work
  int64_t agreement_ns = 0;  // of which the agreement (a collective: it waits for the last rank)
  double overlap_fraction() const {
    return reduce_ns > 0 ? static_cast<double>(overlapped_ns) / static_cast<double>(reduce_ns) : 0.0;
  }
  // Milliseconds per synced backward.
  double ms_per_step(int64_t total_ns) const {
    return steps > 0 ? static_cast<double>(total_ns) / 1e6 / static_cast<double>(steps) : 0.0;
  }
  // A share of the critical path.
  double share(int64_t part_ns) const {
    return sync_ns > 0 ? static_cast<double>(part_ns) / static_cast<double>(sync_ns) : 0.0;
  }
};

std::vector<PhaseSummary> summarize(const std::vector<Event>& events);
void merge(std::vector<PhaseSummary>& into, const std::vector<PhaseSummary>& more);
std::string summary_line(const PhaseSummary& summary);

}  // namespace tandem::trace
