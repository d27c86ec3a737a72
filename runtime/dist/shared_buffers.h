// SharedBuffers: one buffer per rank of a group whose ranks share a host, each mapped by
// every rank, and the allreduce (sum) that reduces straight out of them.
//
// Why: on one host a bucket's allreduce through MPI copies the bucket into MPI's shared
// fragments, out again and reduces it. Here the buckets themselves are the shared memory:
// rank r sums slice r of every rank's buffer into its own (reduce-scatter, in place), and
// then every rank reads each slice from the rank that reduced it straight into wherever
// the result goes (the gradients; the all-gather fused with the Reducer's copy back).
//
// Contract:
// - create() is collective over `group` (two small host collectives). Each rank makes a
//   POSIX shared-memory segment (/dev/shm, unlinked as soon as every rank has mapped it, so
//   nothing is left behind by a crash after creation, and on every way out of create(),
//   failures and exceptions included) and maps every rank's. Its name is unique to this
//   process's life (shared_segments.h); before a process's first segment, the segments of
//   processes that no longer exist (a job killed inside create()) are removed, each named on
//   stderr ("tandem: removed the stale shared-memory segment ..."). When any rank
//   cannot (ranks on hosts of different names, even where they could share /dev/shm, as
//   the simulated cluster's; no /dev/shm, or too little of it: the segment's pages are
//   reserved at creation; different mount namespaces), create() returns null on every
//   rank, and the caller uses its group's allreduce instead; so it does, without a
//   collective, for a group of one rank.
// - dtype float32 (gradient buckets) or int64 (small counts, summed exactly).
// - local() is this rank's buffer, zero-filled at creation, as a CPU tensor; the
//   tensor keeps the mapping alive on its own (a gradient viewing the bucket may outlive
//   these SharedBuffers). Peers' buffers are mapped while the SharedBuffers live.
// - One reduction is a numbered use ("epoch", 1, 2, ... the same sequence on every rank):
//     begin(e):      before this rank writes its buffer for use e: waits until every rank
//                    has finished reading it in use e-1;
//     publish(e):    this rank's buffer holds its contribution;
//     try_reduce(e)/reduce(e): once every rank has published e, sums slice(rank()) of every
//                    rank's buffer, in rank order, into this rank's buffer (try_reduce does
//                    nothing and returns false when a rank has not published yet);
//     reduced_slice(q, e): waits until rank q has reduced its slice and returns it (a
//                    pointer to slice(q)'s first element in rank q's buffer, float32);
//   or, instead of the reduction and the slices, for small buffers and for two ranks:
//     wait_published(e), then sum_range(first, count, out): elements [first, first+count)
//                    summed over every rank's buffer in rank order into `out` (this rank's
//                    own memory, not a shared buffer), as many ranges as needed;
//     end(e):        this rank has read every slice it needs;
//     wait_finished(e): waits until every rank has ended use e (before this rank's buffer
//                    may change outside the protocol: gradients that are views into it).
//   The sum of each element is computed once, by one rank, so every rank gets bitwise the
//   same result.
// - window(w, first, numel): elements [first, first + numel) of these buffers as buffers of
//   their own, with their own protocol (epochs, flags, slices), without a collective; w <
//   the `windows` given to create() numbers the flags, and window 0 is these buffers' own.
//   Windows share the segments (they keep them mapped). Uses of two windows whose ranges
//   overlap must be ordered by the caller (wait_finished on the one before begin on the other).
// - Waits spin briefly, then yield the core; each one gives up after the group's timeout
//   (TANDEM_COLLECTIVE_TIMEOUT_S) with an Error naming the rank waited for, the step of the
//   protocol and `tag`: a rank that crashed or runs another step ends the job, not hangs it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dist/process_group.h"
#include "runtime/tensor.h"

namespace tandem::dist {

class SharedBuffers {
 public:
  static std::unique_ptr<SharedBuffers> create(ProcessGroup& group, int64_t numel, const std::string& tag,
                                               DType dtype = DType::f32, int windows = 1);
  std::unique_ptr<SharedBuffers> window(int w, int64_t first, int64_t numel, const std::string& tag) const;
  ~SharedBuffers();
  SharedBuffers(const SharedBuffers&) = delete;
  SharedBuffers& operator=(const SharedBuffers&) = delete;

  const Tensor& local() const { return local_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(peers_.size()); }
  int64_t numel() const { return numel_; }
  // Elements [first, second) of the buffer: rank q's slice (equal shares, the remainder to
  // the last ranks).
  std::pair<int64_t, int64_t> slice(int q) const;

  void begin(uint64_t epoch);
  void publish(uint64_t epoch);
  bool try_reduce(uint64_t epoch);
  void reduce(uint64_t epoch);
  const float* reduced_slice(int q, uint64_t epoch);
  void wait_published(uint64_t epoch);
  void sum_range(int64_t first, int64_t count, void* out) const;  // out: local()'s dtype
  void end(uint64_t epoch);
  void wait_finished(uint64_t epoch);

  struct Mapping;  // one mapped segment (shared_buffers.cpp)

 private:
  SharedBuffers(int rank, int windows, DType dtype, std::string tag, std::chrono::milliseconds timeout)
      : rank_(rank), windows_(windows), dtype_(dtype), tag_(std::move(tag)), timeout_(timeout) {}
  bool all_published(uint64_t epoch) const;
  template <typename T>
  T* elements(const Mapping& segment) const;  // the window's first element in a segment
  template <typename T>
  void sum_range_as(int64_t first, int64_t count, T* out) const;

  int rank_ = 0;
  int window_ = 0;     // which flags
  int windows_ = 1;    // flags in each segment
  int64_t first_ = 0;  // the window's first element in the segment
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  std::string tag_;
  std::chrono::milliseconds timeout_{0};
  std::vector<std::shared_ptr<Mapping>> peers_;  // by rank, this rank's own included
  Tensor local_;
};

}  // namespace tandem::dist
