#include "models/train/out_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <thread>
#include <utility>

#include "runtime/file_write.h"

namespace tandem::models {

namespace {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "(unknown host)";
  return name;
}

std::string local_time_now() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[64];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S %Z", &local);
  return text;
}

std::string read_all(int fd) {
  std::string text;
  char buffer[512];
  for (off_t offset = 0;;) {
    const ssize_t n = pread(fd, buffer, sizeof(buffer), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return text;
    text.append(buffer, static_cast<size_t>(n));
    offset += n;
  }
}

// The holder's line "<host> <pid> <start time>\n" as a reason; "" until it is written whole.
std::string holder_of(int fd) {
  const std::string text = read_all(fd);
  if (text.empty() || text.back() != '\n') return "";
  std::istringstream in(text);
  std::string host, started;
  long long pid = 0;
  if (!(in >> host >> pid)) return "";
  std::getline(in >> std::ws, started);
  return "in use by tandem-train on host " + host + ", pid " + std::to_string(pid) + " (started " + started +
         ")";
}

// A refused run reads who holds the lock; the holder writes itself there just after taking
// it, so a run that comes in between waits a moment for the line.
std::string wait_for_holder(int fd, const std::string& path) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    std::string holder = holder_of(fd);
    if (!holder.empty()) return holder;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "in use by another process (" + path + " names no holder)";
}

}  // namespace

OutDirLock::~OutDirLock() { release(); }

OutDirLock::OutDirLock(OutDirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

OutDirLock& OutDirLock::operator=(OutDirLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void OutDirLock::release() {
  if (fd_ >= 0) ::close(fd_);  // drops the flock
  fd_ = -1;
}

std::string OutDirLock::take(const std::string& dir) {
  release();
  const std::string path = (std::filesystem::path(dir) / kLockFile).string();
  const int fd = open_no_follow(path, O_RDWR | O_CREAT);
  if (fd < 0) return "cannot lock " + path + " (" + open_failure(errno) + ")";
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string why = err == EWOULDBLOCK ? wait_for_holder(fd, path)
                                         : "cannot lock " + path + " (" + std::strerror(err) + ")";
    ::close(fd);
    return why;
  }
  fd_ = fd;
  // Who holds the lock only serves the message of a refused run: a failed write here
  // (a full disk) costs that message its names, never the lock.
  const std::string holder = host_name() + " " + std::to_string(getpid()) + " " + local_time_now() + "\n";
  if (ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t written = pwrite(fd, holder.data(), holder.size(), 0);
  }
  return "";
}

}  // namespace tandem::models
