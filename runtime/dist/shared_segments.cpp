#include "runtime/dist/shared_segments.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace tandem::dist {

namespace {

constexpr const char* kPrefix = "tandem-";

bool parse_number(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

// The inode of this process's pid namespace ("pid:[4026531836]"); 0 when unreadable.
uint64_t own_pid_namespace() {
  char link[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
  if (n <= 0) return 0;
  const std::string text(link, static_cast<size_t>(n));
  const size_t open = text.find('['), close = text.find(']');
  uint64_t inode = 0;
  if (open == std::string::npos || close == std::string::npos || close <= open + 1) return 0;
  return parse_number(text.substr(open + 1, close - open - 1), &inode) ? inode : 0;
}

// Field 22 of /proc/<pid>/stat (start time, clock ticks after boot); false when unreadable.
bool start_time(const std::string& pid, uint64_t* out) {
  std::ifstream file("/proc/" + pid + "/stat");
  if (!file.is_open()) return false;
  std::string line;
  std::getline(file, line);
  const size_t after_name = line.rfind(')');  // the name may hold spaces and parentheses
  if (after_name == std::string::npos) return false;
  std::istringstream fields(line.substr(after_name + 1));
  std::string field;
  for (int k = 3; k <= 22; ++k) {  // the fields after the name start at 3 (state)
    if (!(fields >> field)) return false;
  }
  return parse_number(field, out);
}

struct Identity {
  uint64_t pid_namespace = 0;
  uint64_t start = 0;
};

const Identity& own_identity() {
  static const Identity identity = [] {
    Identity id;
    if (!start_time("self", &id.start)) return Identity{};
    id.pid_namespace = own_pid_namespace();
    return id;
  }();
  return identity;
}

// The process a segment named by segment_name() (or by tandem before the namespace and the
// start time were in the name: "tandem-<pid>-<n>") belongs to.
struct Owner {
  uint64_t pid_namespace = 0;  // 0: not in the name
  uint64_t pid = 0;
  uint64_t start = 0;  // 0: not in the name
};

std::optional<Owner> owner_of(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  std::istringstream rest(name.substr(std::string(kPrefix).size()));
  std::vector<uint64_t> fields;
  for (std::string part; std::getline(rest, part, '-');) {
    uint64_t value = 0;
    if (fields.size() == 4 || !parse_number(part, &value)) return std::nullopt;
    fields.push_back(value);
  }
  if (fields.size() == 4) return Owner{fields[0], fields[1], fields[2]};
  if (fields.size() == 2) return Owner{0, fields[0], 0};
  return std::nullopt;
}

// Whether the process that made the segment named `name` is gone (see the header).
bool is_stale(const std::string& name, const Identity& own) {
  const std::optional<Owner> owner = owner_of(name);
  if (!owner || (owner->pid_namespace != 0 && owner->pid_namespace != own.pid_namespace)) return false;
  const std::string pid = std::to_string(owner->pid);
  struct stat st {};
  if (stat(("/proc/" + pid).c_str(), &st) != 0) return errno == ENOENT;  // else: unknown, kept
  uint64_t start = 0;
  return owner->start != 0 && start_time(pid, &start) && start != owner->start;
}

}  // namespace

std::string segment_name(uint64_t n) {
  const Identity& own = own_identity();
  std::ostringstream name;
  name << "/" << kPrefix << own.pid_namespace << "-" << getpid() << "-" << own.start << "-" << n;
  return name.str();
}

std::vector<std::string> stale_segments(const std::string& dir) {
  std::vector<std::string> stale;
  const Identity& own = own_identity();
  if (own.pid_namespace == 0 || own.start == 0) return stale;
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return stale;
  while (const dirent* entry = readdir(listing)) {
    const std::string name = entry->d_name;
    if (is_stale(name, own)) stale.push_back(name);
  }
  closedir(listing);
  return stale;
}

std::vector<std::string> remove_stale_segments(const std::string& dir) {
  std::vector<std::string> removed;
  for (const std::string& name : stale_segments(dir)) {
    const std::string path = dir + "/" + name;
    struct stat st {};
    const bool sized = stat(path.c_str(), &st) == 0;
    if (unlink(path.c_str()) != 0) continue;  // gone already, or not ours to remove
    removed.push_back(name + " (" + (sized ? std::to_string(st.st_size) : std::string("?")) +
                      " bytes, process " + std::to_string(owner_of(name)->pid) + ")");
  }
  return removed;
}

}  // namespace tandem::dist
