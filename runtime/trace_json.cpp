#include "runtime/trace_json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "runtime/error.h"
#include "runtime/file_write.h"
#include "runtime/json_subset.h"

namespace tandem::trace {

namespace {

std::string quoted(const std::string& text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

std::string microseconds(int64_t ns) {
  char buf[32];
  const char* sign = ns < 0 ? "-" : "";
  const uint64_t v = ns < 0 ? static_cast<uint64_t>(-ns) : static_cast<uint64_t>(ns);
  std::snprintf(buf, sizeof buf, "%s%" PRIu64 ".%03" PRIu64, sign, v / 1000, v % 1000);
  return buf;
}

std::string args_json(const std::vector<Arg>& args) {
  std::string out = "{";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out += ",";
    out += quoted(args[i].key);
    out += ":";
    out += args[i].is_text ? quoted(args[i].text) : std::to_string(args[i].number);
  }
  return out + "}";
}

}  // namespace

std::string events_json(const std::vector<Event>& events,
                        const std::vector<std::pair<int, std::string>>& tracks, int rank) {
  const std::string pid = std::to_string(rank);
  std::string out = "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid +
                    ",\"tid\":0,\"args\":{\"name\":\"rank " + pid + "\"}}";
  out += ",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + pid +
         ",\"tid\":0,\"args\":{\"sort_index\":" + pid + "}}";
  for (const auto& [tid, name] : tracks) {
    out += ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tid) +
           ",\"args\":{\"name\":" + quoted(name) + "}}";
  }
  for (const Event& e : events) {
    out += ",\n{\"ph\":\"";
    out += e.phase;
    out += "\",\"cat\":" + quoted(e.category) + ",\"name\":" + quoted(e.name) + ",\"pid\":" + pid +
           ",\"tid\":" + std::to_string(e.tid) + ",\"ts\":" + microseconds(e.ts_ns);
    if (e.phase == 'X') out += ",\"dur\":" + microseconds(e.dur_ns) + ",\"args\":" + args_json(e.args);
    if (e.phase == 'C') {
      char value[32];
      std::snprintf(value, sizeof value, "%.17g", e.value);
      out += std::string(",\"args\":{\"value\":") + value + "}";
    }
    out += "}";
  }
  return out;
}

namespace {

// The kind of file at `path`, following links: regular files (and new paths) are replaced
// atomically; character devices and FIFOs (/dev/null, /dev/stdout, a pipe to a reader) are
// written in place, since renaming over them would replace the device node itself.
enum class TraceTarget { replace, in_place };

TraceTarget trace_target(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    TANDEM_CHECK(errno == ENOENT, "--trace: cannot inspect " << path << ": " << std::strerror(errno));
    return TraceTarget::replace;
  }
  if (S_ISREG(st.st_mode)) return TraceTarget::replace;
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return TraceTarget::in_place;
  const char* kind = S_ISDIR(st.st_mode)   ? "a directory"
                     : S_ISBLK(st.st_mode) ? "a block device"
                                           : "a socket";
  TANDEM_FAIL("--trace: " << path << " is " << kind
                          << "; the trace goes to a regular file, a character device or a FIFO");
}

void write_events(std::FILE* fp, const std::vector<std::string>& parts) {
  std::fputs("{\"traceEvents\":[\n", fp);
  bool first = true;
  for (const std::string& part : parts) {
    if (part.empty()) continue;
    if (!first) std::fputs(",\n", fp);
    std::fwrite(part.data(), 1, part.size(), fp);
    first = false;
  }
  std::fputs("\n],\"displayTimeUnit\":\"ms\"}\n", fp);
}

void write_in_place(const std::string& path, const std::vector<std::string>& parts) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  TANDEM_CHECK(fd >= 0, "--trace: cannot open " << path << ": " << std::strerror(errno));
  std::FILE* fp = ::fdopen(fd, "wb");
  if (fp == nullptr) {
    const int err = errno;
    ::close(fd);
    TANDEM_FAIL("--trace: cannot write " << path << ": " << std::strerror(err));
  }
  errno = 0;
  write_events(fp, parts);
  bool ok = std::ferror(fp) == 0 && std::fflush(fp) == 0;
  const int err = errno;
  ok = std::fclose(fp) == 0 && ok;
  TANDEM_CHECK(ok, "--trace: cannot write " << path << ": " << std::strerror(err != 0 ? err : errno));
}

}  // namespace

void write_trace_file(const std::string& path, const std::vector<std::string>& parts) {
  if (trace_target(path) == TraceTarget::in_place) return write_in_place(path, parts);
  const std::string problem = replace_file(path, [&](std::FILE* fp) { write_events(fp, parts); });
  TANDEM_CHECK(problem.empty(), "--trace: " << problem);
}

void check_trace_file(const std::string& path) {
  if (trace_target(path) == TraceTarget::replace) return write_trace_file(path, {});
  TANDEM_CHECK(::access(path.c_str(), W_OK) == 0,
               "--trace: cannot write " << path << ": " << std::strerror(errno));
}

}  // namespace tandem::trace
