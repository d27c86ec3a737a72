#include "runtime/file_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace tandem {

int open_no_follow(const std::string& path, int flags, mode_t mode) {
  return ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
}

std::string open_failure(const std::string& path, int err) {
  if (err == ELOOP) return path + " is a symbolic link (not written through)";
  return path + ": " + std::strerror(err);
}

namespace {

// create_fresh_file's work: the descriptor, or -1 with errno set.
int fresh_descriptor(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return -1;
  return open_no_follow(path, O_WRONLY | O_CREAT | O_EXCL);
}

}  // namespace

int create_fresh_file(const std::string& path) {
  const int fd = fresh_descriptor(path);
  TANDEM_CHECK(fd >= 0, "cannot create " << path << " (" << std::strerror(errno) << ")");
  return fd;
}

std::string replace_file(const std::string& path, const std::function<void(std::FILE*)>& write) {
  const std::string tmp = path + ".tmp";
  const int fd = fresh_descriptor(tmp);
  if (fd < 0) return "cannot write " + tmp + " (" + std::strerror(errno) + ")";
  std::FILE* fp = ::fdopen(fd, "wb");
  if (fp == nullptr) {
    const std::string reason = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return "cannot write " + tmp + " (" + reason + ")";
  }
  errno = 0;
  write(fp);
  bool ok = std::ferror(fp) == 0 && std::fflush(fp) == 0;
  std::string reason = errno != 0 ? std::strerror(errno) : "the write failed";
  if (std::fclose(fp) != 0 && ok) {
    ok = false;
    reason = std::strerror(errno);
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return "cannot write " + tmp + " (" + reason + ")";
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    return "cannot rename " + tmp + " over " + path + " (" + reason + ")";
  }
  return "";
}

}  // namespace tandem
