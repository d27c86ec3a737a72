// The world group of a multi-rank test program (a suite under catch_mpi_main.cpp).
//
// Contract: world() makes the group over MPI_COMM_WORLD on its first call
// (dist::init_process_group(), the MPI backend, the default collective timeout) and returns
// that same group to every later call, from every test case.
// shared_fresh_dir(group, prefix, name): an empty directory every rank of `group` gets the
// same path of (rank 0 makes it), unique per job: named by rank 0's process id, so CTest's
// np variants and a second checkout running the suite at once never share one; removed when
// the program ends.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "runtime/dist/process_group.h"
#include "runtime/tensor.h"

namespace tandem::testing {

inline std::shared_ptr<dist::ProcessGroup> world() {
  static std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group();
  return group;
}

inline std::string shared_fresh_dir(dist::ProcessGroup& group, const std::string& prefix,
                                    const std::string& name) {
  static int64_t job = -1;  // rank 0's process id, once per program
  if (job < 0) {
    Tensor pid = Tensor::zeros({1}, DType::i64);
    pid.data<int64_t>()[0] = getpid();
    dist::broadcast_host(group, pid, 0, "test directory name");
    job = pid.data<int64_t>()[0];
  }
  const std::string dir =
      (std::filesystem::temp_directory_path() / (prefix + std::to_string(job) + "-" + name)).string();
  struct Made {
    std::vector<std::string> dirs;
    ~Made() {
      std::error_code ignored;
      for (const std::string& d : dirs) std::filesystem::remove_all(d, ignored);
    }
  };
  static Made made;
  if (group.rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    made.dirs.push_back(dir);
  }
  group.barrier("fresh dir")->wait();
  return dir;
}

}  // namespace tandem::testing
