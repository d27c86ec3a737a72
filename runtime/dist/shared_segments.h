// The names of the POSIX shared-memory segments tandem makes (shared_buffers.h), and the
// removal of those whose process is gone.
//
// Why: a segment is unlinked once every rank has mapped it, so a job killed or ended inside
// that window leaves its segments in /dev/shm, where they hold memory (on a host with a small
// /dev/shm, enough to push later jobs onto the slower MPI allreduce) and could share a name
// with a later process of the same pid.
//
// Contract:
// - segment_name(n): "/tandem-<pid namespace>-<pid>-<start>-<n>", where <start> is this
//   process's start time (clock ticks after boot, /proc/self/stat): unique to this process's
//   life, so a leftover of a dead process of the same pid never has the name of a new one.
// - stale_segments(dir): the entries of `dir` (/dev/shm) named as above, in this process's
//   pid namespace, whose process no longer exists: no process of that pid, or one that
//   started at another time (the pid was reused); and those named "tandem-<pid>-<n>" (as
//   tandem named them before) whose pid is no process's. A live owner's segment, another
//   namespace's, and any other name are never listed; nor is anything when this process's
//   own namespace or start time cannot be read (/proc absent).
// - remove_stale_segments(dir): unlinks those and returns a description of each one it
//   removed ("tandem-... (N bytes, process P)"); one that another process removed first is
//   not listed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::dist {

std::string segment_name(uint64_t n);
std::vector<std::string> stale_segments(const std::string& dir = "/dev/shm");
std::vector<std::string> remove_stale_segments(const std::string& dir = "/dev/shm");

}  // namespace tandem::dist
