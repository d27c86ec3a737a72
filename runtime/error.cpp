#include "runtime/error.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <string_view>

namespace tandem {

namespace {
std::atomic<int> g_rank{-1};
std::mutex g_host_mutex;
std::string g_host;

#ifndef TANDEM_SOURCE_DIR
#define TANDEM_SOURCE_DIR ""
#endif

std::string format(const char* file, int line, const std::string& message) {
  return std::string(file) + ":" + std::to_string(line) + ": " + process_label() + message;
}
}  // namespace

const char* source_path(const char* file) {
  const std::string_view root = TANDEM_SOURCE_DIR;
  const std::string_view path = file;
  if (!root.empty() && path.starts_with(root)) return file + root.size();
  for (;;) {
    if (std::string_view(file).starts_with("./")) {
      file += 2;
    } else if (std::string_view(file).starts_with("../")) {
      file += 3;
    } else {
      return file;
    }
  }
}

std::string process_label() {
  const int rank = g_rank.load();
  if (rank < 0) return "";
  const std::string host = process_host();
  return "[rank " + std::to_string(rank) + (host.empty() ? "" : " on host " + host) + "] ";
}

std::string error_line(const std::exception& e, const std::string& program) {
  const std::string label = process_label();
  if (label.empty()) return program + ": error: " + e.what();
  if (const auto* error = dynamic_cast<const Error*>(&e))
    return label + error->message() + " [at " + error->file() + ":" + std::to_string(error->line()) + "]";
  return label + "error: " + e.what();
}

Error::Error(const char* file, int line, const std::string& message)
    : std::runtime_error(format(source_path(file), line, message)),
      file_(source_path(file)),
      line_(line),
      message_(message) {}

void set_process_rank(int rank) { g_rank.store(rank); }

void write_stderr_line(const std::string& line) {
  std::string text = line + "\n";
  std::fflush(stderr);  // whatever stdio holds goes first
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {  // one call unless interrupted or the pipe takes less
    ssize_t n = ::write(2, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}
int process_rank() { return g_rank.load(); }

void set_process_host(const std::string& host) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  g_host = host;
}

std::string process_host() {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  return g_host;
}

namespace detail {
void throw_error(const char* file, int line, const std::string& message) { throw Error(file, line, message); }
}  // namespace detail

}  // namespace tandem
