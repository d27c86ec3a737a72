// Scheduler hint for communication threads.
//
// With one core per rank (what mpirun binds by default when ranks >= cores) a rank's
// communication thread shares its core with the compute thread. Linux's EEVDF scheduler
// (6.6+) lets a thread ask for a shorter time slice (6.12+): it then preempts a running
// compute thread as soon as it wakes and, while it waits on its peers, hands the core back
// for short turns only, so buckets progress during the backward instead of after it.
//
// Contract:
// - comm_thread_slice_us() reads TANDEM_COMM_THREAD_SLICE_US (default 100; 0 leaves the
//   scheduler's default) and throws an Error naming the variable on a bad value.
// - request_time_slice(us) asks for `us` microseconds for the calling thread; best effort:
//   returns false where the kernel or platform refuses, and changes nothing then.
// - current_time_slice_us() is the calling thread's custom slice as the kernel keeps it
//   (0: none, or a kernel without custom slices).
#pragma once

#include <cstdint>

namespace tandem {

constexpr const char* kCommSliceEnvVar = "TANDEM_COMM_THREAD_SLICE_US";

int64_t comm_thread_slice_us();
bool request_time_slice(int64_t us);
int64_t current_time_slice_us();

}  // namespace tandem
