#include "runtime/file_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tandem {

int open_no_follow(const std::string& path, int flags, mode_t mode) {
  return ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
}

std::string open_failure(int err) {
  return err == ELOOP ? "it is a symbolic link, not written through" : std::strerror(err);
}

std::FILE* fopen_fresh(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return nullptr;
  const int fd = open_no_follow(path, O_WRONLY | O_CREAT | O_EXCL);
  if (fd < 0) return nullptr;
  std::FILE* fp = ::fdopen(fd, "wb");
  if (fp == nullptr) {
    const int err = errno;
    ::close(fd);
    ::unlink(path.c_str());
    errno = err;
  }
  return fp;
}

std::string replace_file(const std::string& path, const std::function<void(std::FILE*)>& write) {
  const std::string tmp = path + ".tmp";
  std::FILE* fp = fopen_fresh(tmp);
  if (fp == nullptr) return "cannot write " + tmp + " (" + std::strerror(errno) + ")";
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
    return "cannot rename " + tmp + " to " + path + " (" + reason + ")";
  }
  return "";
}

}  // namespace tandem
