// Chrome trace-event JSON (opens in Perfetto and chrome://tracing) from trace.h's events.
//
// Contract: events_json(events, tracks, rank) is one rank's part of the "traceEvents" array
// (comma-separated objects, no brackets): a metadata event naming the process "rank r", one
// naming each track, then each event: "X" with ts and dur, "C" with args {"value": v}; times
// in microseconds (three decimals: nanosecond resolution), pid = the rank, tid = the track.
// write_trace_file(path, parts) writes {"traceEvents":[parts...]} to `path`, or throws an
// Error naming the file. A regular file or a new path is replaced atomically (file_write.h's
// replace_file: a link at `path` is replaced, its target untouched); a character device or
// a FIFO that `path` names (through links too: /dev/stdout) is written in place and stays
// what it is; anything else (a directory, a block device, a socket) is refused by name.
// check_trace_file(path) refuses in advance what write_trace_file would: it writes an empty
// trace to a regular file or new path, and only checks that a device or FIFO is writable
// (writing there would reach its reader twice).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/trace.h"

namespace tandem::trace {

std::string events_json(const std::vector<Event>& events,
                        const std::vector<std::pair<int, std::string>>& tracks, int rank);
void write_trace_file(const std::string& path, const std::vector<std::string>& parts);
void check_trace_file(const std::string& path);

}  // namespace tandem::trace
