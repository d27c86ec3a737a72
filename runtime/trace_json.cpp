#include "runtime/trace_json.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "runtime/error.h"
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

void write_trace_file(const std::string& path, const std::vector<std::string>& parts) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    TANDEM_CHECK(file.good(), "--trace: cannot write " << temporary << ": " << std::strerror(errno));
    file << "{\"traceEvents\":[\n";
    bool first = true;
    for (const std::string& part : parts) {
      if (part.empty()) continue;
      file << (first ? "" : ",\n") << part;
      first = false;
    }
    file << "\n],\"displayTimeUnit\":\"ms\"}\n";
    file.flush();
    TANDEM_CHECK(file.good(), "--trace: cannot write " << temporary << ": " << std::strerror(errno));
  }
  TANDEM_CHECK(std::rename(temporary.c_str(), path.c_str()) == 0,
               "--trace: cannot rename " << temporary << " to " << path << ": " << std::strerror(errno));
}

}  // namespace tandem::trace
