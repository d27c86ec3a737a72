#include "runtime/dist/launch_env.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "runtime/error.h"

namespace tandem::dist {

namespace {

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

bool has(const char* name) { return std::getenv(name) != nullptr; }

int parse_int(const std::string& launcher, const char* name, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  TANDEM_CHECK(
      !text.empty() && end != nullptr && *end == '\0' && errno == 0 && value >= INT_MIN && value <= INT_MAX,
      "launch environment (" << launcher << "): " << name << "='" << text << "' is not an integer");
  return static_cast<int>(value);
}

int required(const std::string& launcher, const char* name, const char* because) {
  std::optional<std::string> text = get(name);
  TANDEM_CHECK(text.has_value(), "launch environment (" << launcher << "): " << name << " is not set, but "
                                                        << because << " is");
  return parse_int(launcher, name, *text);
}

std::optional<int> optional_int(const std::string& launcher, const char* name) {
  std::optional<std::string> text = get(name);
  if (!text) return std::nullopt;
  return parse_int(launcher, name, *text);
}

// Slurm's compressed tasks-per-node list: "2(x3),1" is nodes with 2, 2, 2 and 1 tasks.
std::vector<int> expand_tasks_per_node(const std::string& launcher, const char* name,
                                       const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int repeat = 1;
    size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      TANDEM_CHECK(item.back() == ')',
                   "launch environment (" << launcher << "): " << name << "='" << text << "' is malformed");
      repeat = parse_int(launcher, name, item.substr(paren + 2, item.size() - paren - 3));
      item = item.substr(0, paren);
    }
    int tasks = parse_int(launcher, name, item);
    for (int i = 0; i < repeat; ++i) out.push_back(tasks);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// This process's command line as a shell would take it back ("<program>" when unknown).
std::string this_command_line() {
  std::FILE* file = std::fopen("/proc/self/cmdline", "rb");
  if (file == nullptr) return "<program and its arguments>";
  std::string raw;
  char buffer[4096];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, file)) > 0) raw.append(buffer, got);
  std::fclose(file);
  std::string out;
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    std::string arg = raw.substr(start, end - start);
    const bool plain =
        !arg.empty() &&
        arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
            std::string::npos;
    if (!out.empty()) out += ' ';
    if (plain) {
      out += arg;
    } else {
      out += '\'';
      out += arg;
      out += '\'';
    }
    start = end + 1;
  }
  return out.empty() ? "<program and its arguments>" : out;
}

struct Names {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

void validate(const LaunchEnv& env, const Names& names) {
  const std::string& l = env.launcher;
  TANDEM_CHECK(env.world_size >= 1, "launch environment (" << l << "): " << names.size << "="
                                                           << env.world_size << " must be at least 1");
  TANDEM_CHECK(env.rank >= 0 && env.rank < env.world_size,
               "launch environment (" << l << "): " << names.rank << "=" << env.rank << " is not in [0, "
                                      << names.size << "=" << env.world_size << ")");
  TANDEM_CHECK(env.local_size >= 1 && env.local_size <= env.world_size,
               "launch environment (" << l << "): " << names.local_size << "=" << env.local_size
                                      << " is not in [1, " << names.size << "=" << env.world_size << "]");
  TANDEM_CHECK(env.local_rank >= 0 && env.local_rank < env.local_size,
               "launch environment (" << l << "): " << names.local_rank << "=" << env.local_rank
                                      << " is not in [0, " << names.local_size << "=" << env.local_size
                                      << ")");
}

LaunchEnv from_openmpi() {
  LaunchEnv env;
  env.launcher = "openmpi";
  const char* because = has("OMPI_COMM_WORLD_RANK") ? "OMPI_COMM_WORLD_RANK" : "OMPI_COMM_WORLD_SIZE";
  env.rank = required(env.launcher, "OMPI_COMM_WORLD_RANK", because);
  env.world_size = required(env.launcher, "OMPI_COMM_WORLD_SIZE", because);
  env.local_rank = required(env.launcher, "OMPI_COMM_WORLD_LOCAL_RANK", because);
  env.local_size = required(env.launcher, "OMPI_COMM_WORLD_LOCAL_SIZE", because);
  validate(env, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE"});
  return env;
}

LaunchEnv from_slurm() {
  LaunchEnv env;
  env.launcher = "slurm";
  const char* because = "SLURM_PROCID";
  env.rank = required(env.launcher, "SLURM_PROCID", because);
  env.world_size = required(env.launcher, "SLURM_NTASKS", because);
  env.local_rank = required(env.launcher, "SLURM_LOCALID", because);
  const char* local_size_name = "SLURM_NTASKS";
  env.local_size = env.world_size;
  const char* list_name = has("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE"
                          : has("SLURM_TASKS_PER_NODE")    ? "SLURM_TASKS_PER_NODE"
                                                           : nullptr;
  if (list_name != nullptr) {
    std::vector<int> per_node = expand_tasks_per_node(env.launcher, list_name, *get(list_name));
    int node = optional_int(env.launcher, "SLURM_NODEID").value_or(0);
    TANDEM_CHECK(node >= 0 && node < static_cast<int>(per_node.size()),
                 "launch environment (slurm): SLURM_NODEID=" << node << " is not in [0, " << per_node.size()
                                                             << ") (the nodes of " << list_name << "='"
                                                             << *get(list_name) << "')");
    env.local_size = per_node[static_cast<size_t>(node)];
    local_size_name = list_name;
  }
  validate(env, {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", local_size_name});
  return env;
}

LaunchEnv from_pmi() {
  LaunchEnv env;
  env.launcher = "pmi";
  const char* because = has("PMI_RANK") ? "PMI_RANK" : "PMI_SIZE";
  env.rank = required(env.launcher, "PMI_RANK", because);
  env.world_size = required(env.launcher, "PMI_SIZE", because);
  Names names{"PMI_RANK", "PMI_SIZE", "PMI_RANK", "PMI_SIZE"};
  env.local_rank = env.rank;
  env.local_size = env.world_size;
  if (has("MPI_LOCALRANKID") || has("MPI_LOCALNRANKS")) {
    env.local_rank = required(env.launcher, "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
    env.local_size = required(env.launcher, "MPI_LOCALNRANKS", "MPI_LOCALRANKID");
    names.local_rank = "MPI_LOCALRANKID";
    names.local_size = "MPI_LOCALNRANKS";
  } else if (has("PMI_LOCAL_RANK") || has("PMI_LOCAL_SIZE")) {
    env.local_rank = required(env.launcher, "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE");
    env.local_size = required(env.launcher, "PMI_LOCAL_SIZE", "PMI_LOCAL_RANK");
    names.local_rank = "PMI_LOCAL_RANK";
    names.local_size = "PMI_LOCAL_SIZE";
  }
  validate(env, names);
  return env;
}

// torchrun's variables, read only to refuse them: a torchrun job's processes are not an MPI
// world, and tandem's process groups (NCCL's too: its id goes out over MPI) need one. One
// process (WORLD_SIZE=1) is a plain single-process run.
LaunchEnv from_torchrun() {
  const std::string launcher = "torchrun";
  const char* because = has("RANK") ? "RANK" : has("WORLD_SIZE") ? "WORLD_SIZE" : "LOCAL_RANK";
  LaunchEnv env;
  env.launcher = launcher;
  env.rank = required(launcher, "RANK", because);
  env.world_size = required(launcher, "WORLD_SIZE", because);
  Names names{"RANK", "WORLD_SIZE", "RANK", "WORLD_SIZE"};
  env.local_rank = env.rank;
  env.local_size = env.world_size;
  if (std::optional<int> local_rank = optional_int(launcher, "LOCAL_RANK")) {
    env.local_rank = *local_rank;
    names.local_rank = "LOCAL_RANK";
  }
  if (std::optional<int> local_size = optional_int(launcher, "LOCAL_WORLD_SIZE")) {
    env.local_size = *local_size;
    names.local_size = "LOCAL_WORLD_SIZE";
  }
  validate(env, names);
  if (env.world_size == 1) return LaunchEnv{};
  const std::string n = std::to_string(env.world_size);
  const std::string per_host = env.local_size < env.world_size
                                   ? " --npernode " + std::to_string(env.local_size) + " --host <hosts>"
                                   : "";
  const std::string srun_per_host =
      env.local_size < env.world_size ? " --ntasks-per-node " + std::to_string(env.local_size) : "";
  const std::string command = this_command_line();
  TANDEM_FAIL("launch environment: torchrun's variables (RANK="
              << env.rank << ", WORLD_SIZE=" << env.world_size << ") describe a job of " << n
              << " processes, but no MPI launcher started this one. torchrun is not a launcher for tandem: "
                 "its ranks form an MPI world (the NCCL backend too), which torchrun does not start. Start "
                 "the job with mpirun or srun instead: mpirun -np "
              << n << per_host << " " << command << ", or srun --ntasks " << n << srun_per_host << " "
              << command);
}
}  // namespace

int LaunchEnv::cuda_device(int device_count) const {
  TANDEM_CHECK(device_count > 0,
               "cuda_device: no CUDA device to choose from (device count " << device_count << ")");
  return local_rank % device_count;
}

std::string LaunchEnv::str() const {
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " (local " +
         std::to_string(local_rank) + " of " + std::to_string(local_size) + ", " + launcher + ")";
}

namespace {

LaunchEnv read_launcher_variables() {
  if (has("OMPI_COMM_WORLD_RANK") || has("OMPI_COMM_WORLD_SIZE")) return from_openmpi();
  if (has("SLURM_PROCID")) return from_slurm();
  if (has("PMI_RANK") || has("PMI_SIZE")) return from_pmi();
  if (has("RANK") || has("WORLD_SIZE") || has("LOCAL_RANK")) return from_torchrun();
  return LaunchEnv{};
}

}  // namespace

LaunchEnv init_from_env() {
  LaunchEnv env = read_launcher_variables();
  name_host_in_errors(env);
  return env;
}

void name_host_in_errors(const LaunchEnv& env) {
  if (env.local_size >= env.world_size) {
    set_process_host("");
    return;
  }
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0)
    std::snprintf(name, sizeof(name), "(unknown: %s)", std::strerror(errno));
  set_process_host(name);
}

}  // namespace tandem::dist
