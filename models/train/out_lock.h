// One run at a time per output directory: an exclusive lock on <dir>/.lock.
//
// Contract:
// - take(dir) takes an exclusive flock(2) on <dir>/.lock (created when missing) without
//   waiting, and writes "<host> <pid> <start time>" and a newline into the file. Returns ""
//   once it holds the lock, else why not: "in use by tandem-train on host <host>, pid <pid>
//   (started <start time>)" when another open of the file holds the lock (another process,
//   or another OutDirLock in this one), "in use by another process (<file> names no
//   holder)" when the holder has not written itself there within a second, or "cannot lock
//   <file> (<reason>)". A symbolic link at <dir>/.lock, dangling or not, is never
//   followed: "cannot lock <file> (it is a symbolic link, not written through)".
// - The lock lasts until the OutDirLock is destroyed or the process ends, however it ends
//   (the kernel drops it with the last descriptor), so a killed run never leaves a stale
//   lock behind. The file stays, naming its last holder; only the flock counts. The
//   descriptor is close-on-exec: programs a run starts never hold its lock.
#pragma once

#include <string>

namespace tandem::models {

constexpr const char* kLockFile = ".lock";

class OutDirLock {
 public:
  OutDirLock() = default;  // holds nothing
  ~OutDirLock();
  OutDirLock(OutDirLock&& other) noexcept;
  OutDirLock& operator=(OutDirLock&& other) noexcept;
  OutDirLock(const OutDirLock&) = delete;
  OutDirLock& operator=(const OutDirLock&) = delete;

  std::string take(const std::string& dir);
  bool held() const { return fd_ >= 0; }

 private:
  void release();
  int fd_ = -1;
};

}  // namespace tandem::models
