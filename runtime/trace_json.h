// Chrome trace-event JSON (opens in Perfetto and chrome://tracing) from trace.h's events.
//
// Contract: events_json(events, tracks, rank) is one rank's part of the "traceEvents" array
// (comma-separated objects, no brackets): a metadata event naming the process "rank r", one
// naming each track, then each event: "X" with ts and dur, "C" with args {"value": v}; times
// in microseconds (three decimals: nanosecond resolution), pid = the rank, tid = the track.
// write_trace_file(path, parts) writes {"traceEvents":[parts...]} to `path` (through a
// temporary renamed into place), or throws an Error naming the file.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/trace.h"

namespace tandem::trace {

std::string events_json(const std::vector<Event>& events,
                        const std::vector<std::pair<int, std::string>>& tracks, int rank);
void write_trace_file(const std::string& path, const std::vector<std::string>& parts);

}  // namespace tandem::trace
