// The frame every benchmark runs in, on the pattern of nccl-tests (common.cu runs each
// collective, given as a small table of callbacks): a bench is a Bench, its header, rows and
// footer as callbacks; run_bench starts what it needs, calls them in order, prints the
// #wrong summary, ends the job on an error and turns #wrong into the exit code.
//
// Contract of run_bench(bench):
// - backend set (an MPI bench): makes the world group (dist::DistributedContext) first;
//   the callbacks see it in World, and only rank 0 prints. Unset: one process, rank 0 of 1.
// - needs_gpu: without a usable GPU (or without CUDA in the build) prints one line
//   "<name>: needs a GPU (<why>); nothing measured" and returns 0 without calling anything;
//   with one, installs the CUDA allocator (runtime/cuda/cuda_memory.h) first.
// - Then: header(world) on rank 0 (when set); rows(world) on every rank: the measurements,
//   printing their rows on rank 0 and returning the wrong values found over all ranks (the
//   same number on every rank); on rank 0 the line "# <wrong_label> : <n> OK|WRONG", then
//   footer(world, n) (when set). stdout is flushed after each.
// - Returns 0, or 1 when n > 0 (after "<name>: <n> wrong values" on stderr from rank 0).
// - An Error (std::exception for a one-process bench) is printed as "<name>: <what>" on
//   stderr; an MPI bench then ends every rank of the job (dist::abort_on_timeout: one rank
//   alone cannot leave collectives the others wait in), a one-process bench returns 1.
//
// print_columns(columns): the two header lines of a table, "# <name>..." then
// "# <unit>..." (the second only when a column has a unit), each column right-aligned in
// its width (left-aligned for a negative width), one space apart.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/dist/process_group.h"

namespace tandem::bench {

struct World {
  std::shared_ptr<dist::ProcessGroup> group;  // null for a one-process bench
  int rank = 0;
  int size = 1;
  bool root() const { return rank == 0; }
};

struct Bench {
  std::string name;                                     // the program, as it names itself in errors
  std::optional<dist::Backend> backend = std::nullopt;  // set: an MPI bench over this backend
  bool needs_gpu = false;
  std::string wrong_label = "#wrong";
  std::function<void(const World&)> header = nullptr;
  std::function<int64_t(const World&)> rows = nullptr;
  std::function<void(const World&, int64_t wrong)> footer = nullptr;
};

int run_bench(const Bench& bench);

struct Column {
  int width;
  const char* name;
  const char* unit = "";
};

void print_columns(const std::vector<Column>& columns);

}  // namespace tandem::bench
