// Several ranks on one CUDA device: a distinct NCCL_HOSTID per rank (nccl_shared_device.h).
#include "runtime/dist/nccl_shared_device.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "runtime/error.h"

namespace tandem::dist {

namespace {

std::string this_host() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "host";
  return name;
}

}  // namespace

bool share_device_between_ranks(const LaunchEnv& env, int device_count) {
  if (device_count <= 0 || env.local_size <= device_count) return false;
  if (std::getenv("NCCL_HOSTID") != nullptr) return false;
  std::string id = this_host() + ".tandem-rank-" + std::to_string(env.rank);
  TANDEM_CHECK(setenv("NCCL_HOSTID", id.c_str(), 1) == 0,
               "share_device_between_ranks: setenv(NCCL_HOSTID) failed");
  if (env.local_rank == 0) {
    write_stderr_line(process_label() + "tandem: " + std::to_string(env.local_size) + " ranks share " +
                      std::to_string(device_count) +
                      " CUDA device(s) on this host; NCCL runs each rank as a host of its own over "
                      "its socket transport (correct, not fast). Start at most one rank per GPU for "
                      "speed; set NCCL_HOSTID yourself to choose otherwise.");
  }
  return true;
}

}  // namespace tandem::dist
