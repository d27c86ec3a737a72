// What a piece of work costs the host: the counts behind "why is the eager step slower than
// its kernels" (kernel_floor_bench, tandem-train --trace).
//
// A GPU step runs at its kernels' speed only while the host keeps queuing work ahead of the
// device. Every host wait for the device (an explicit synchronisation, or a copy between
// host and device, which on the legacy stream waits for the queued work) drains that queue,
// and every cudaMalloc/cudaFree synchronises the device. So this counts, per piece of work:
// - launches: tandem's own kernel launches (TANDEM_CHECK_LAUNCH, runtime/cuda_check.h);
//   cuBLAS and cuDNN calls are kernels/kernel_recorder.h's business;
// - syncs: host waits for the device, each with its call site and the time it blocked:
//   explicit waits (note_sync) and copies between host and device (note_copy);
// - host reads: item() / at() / to_vector() of a tensor on any device, with call site. On
//   the CPU they cost nothing, but each is a synchronisation on a GPU: counting them on the
//   CPU path shows what a GPU step would wait for, without a GPU;
// - device mallocs and frees (runtime/cuda/cuda_memory.cpp's calls of the driver).
//
// Contract:
// - Off by default; while off every note_* costs one relaxed atomic load. start() clears
//   and switches counting on (process-wide, any thread may note), stop() switches it off
//   and returns the totals; snapshot() returns them without stopping; set_counting pauses
//   and resumes without clearing (to count only the steps of a loop). One thread at a time
//   starts, stops and pauses.
// - Sites are "file:line function" of the caller (std::source_location, the repository's
//   relative path), merged by site, listed most frequent first.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

namespace tandem::host_cost {

struct Site {
  std::string site;  // "models/gan.cpp:50 log_value"
  int64_t count = 0;
  int64_t bytes = 0;    // copies: bytes moved
  int64_t wait_ns = 0;  // syncs: host time blocked
};

struct Record {
  int64_t launches = 0;
  int64_t syncs = 0;           // explicit waits + host<->device copies
  int64_t device_to_host = 0;  // of which copies to the host
  int64_t host_to_device = 0;  // and from it
  int64_t wait_ns = 0;         // host time blocked in syncs
  int64_t host_reads = 0;
  int64_t device_mallocs = 0;
  int64_t device_frees = 0;
  std::vector<Site> sync_sites;  // most frequent first
  std::vector<Site> read_sites;
};

bool counting();
void start();
void set_counting(bool on);
Record stop();
Record snapshot();

enum class CopyDirection { device_to_host, host_to_device };

void note_launch();
void note_sync(const std::source_location& where, int64_t wait_ns);
void note_copy(CopyDirection direction, int64_t bytes, const std::source_location& where, int64_t wait_ns);
void note_host_read(const std::source_location& where);
void note_device_malloc();
void note_device_free();

// "runtime/tensor.cpp:270 item": the site as listed.
std::string site_name(const std::source_location& where);

// Host time for note_sync / note_copy: 0 when not counting (no clock read).
int64_t now_ns_if_counting();

// A table of `record` divided by `steps`: one line per count, then the sync and read sites
// (at most `max_sites` each), every line prefixed with `prefix` ("# " in benchmarks).
std::string per_step_table(const Record& record, int64_t steps, const std::string& prefix,
                           size_t max_sites = 8);

}  // namespace tandem::host_cost
