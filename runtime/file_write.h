// Writing files without following symbolic links someone planted where a file is written.
//
// Contract:
// - open_no_follow(path, flags, mode) is open(2) with O_NOFOLLOW | O_CLOEXEC added: a
//   symbolic link at `path` (dangling or not) is never written through nor created through.
//   Returns the descriptor, or -1 with errno set; a link gives ELOOP, which
//   open_failure(err) words as "it is a symbolic link, not written through" (else
//   strerror(err)).
// - fopen_fresh(path) removes whatever entry is at `path` (a stale temporary, or a link:
//   unlink(2) removes the link, never its target), then creates a new regular file there
//   with O_CREAT | O_EXCL | O_NOFOLLOW, mode 0644, and returns it as a stdio stream ("wb"):
//   a name planted again in between makes it fail (EEXIST) instead of writing through.
//   nullptr with errno set on failure. For temporaries and probes: names tandem owns and
//   that hold nothing worth keeping.
// - replace_file(path, write) is the atomic write: `write` fills the stream of the fresh
//   temporary "<path>.tmp" (fopen_fresh), which is then renamed over `path`. rename(2)
//   replaces the entry at `path`, so a link there is replaced by the new regular file and
//   its target is untouched. Returns "" or why not ("cannot write <path>.tmp (<reason>)",
//   "cannot rename <path>.tmp to <path> (<reason>)"), the temporary removed. Callers that
//   must sync their data (checkpoints) use fopen_fresh themselves.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <functional>
#include <string>

namespace tandem {

int open_no_follow(const std::string& path, int flags, mode_t mode = 0644);
std::string open_failure(int err);
std::FILE* fopen_fresh(const std::string& path);
std::string replace_file(const std::string& path, const std::function<void(std::FILE*)>& write);

}  // namespace tandem
