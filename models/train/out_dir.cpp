#include "models/train/out_dir.h"

#include <filesystem>
#include <fstream>

#include "runtime/error.h"

namespace tandem::models {

namespace fs = std::filesystem;

std::string out_dir_problem(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return "cannot create the directory (" + (ec ? ec.message() : std::string("not a directory")) + ")";
  }
  const fs::path probe_path = fs::path(dir) / ".write-test";
  std::ofstream probe(probe_path);
  if (!probe.good()) return "directory is not writable";
  probe.close();
  fs::remove(probe_path, ec);
  return "";
}

void prepare_out_dir(const std::string& out, dist::ProcessGroup& world) {
  const std::string problem = world.rank() == 0 ? out_dir_problem(out) : "";
  Tensor rank0_failed = Tensor::scalar(problem.empty() ? 0 : 1, DType::i32);
  dist::broadcast_host(world, rank0_failed, 0, "--out check");
  TANDEM_CHECK(problem.empty(), "--out " << out << ": " << problem);
  TANDEM_CHECK(rank0_failed.data<int32_t>()[0] == 0,
               "--out " << out << ": rank 0 cannot write there (its error says why)");
}

}  // namespace tandem::models
