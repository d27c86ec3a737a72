#include "runtime/dist/thread_slice.h"

#include <cmath>
#include <cstdlib>

#include "runtime/env_number.h"
#include "runtime/error.h"

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tandem {

namespace {

constexpr int64_t kDefaultSliceUs = 100;

// The kernel's struct sched_attr (linux/sched/types.h clashes with glibc's <sched.h>).
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};

}  // namespace

int64_t comm_thread_slice_us() {
  // Up to one second: longer is no hint to a scheduler.
  std::optional<double> us =
      env_number(kCommSliceEnvVar, 0, 1e6, "microseconds (0: the scheduler's default slice)");
  return us ? std::llround(*us) : kDefaultSliceUs;
}

bool request_time_slice(int64_t us) {
  if (us <= 0) return false;
#if defined(__linux__) && defined(SYS_sched_setattr)
  // SCHED_OTHER with a runtime: EEVDF's custom slice. Kernels before 6.12 accept and ignore
  // the runtime for this policy; the kernel clamps it to its own bounds (0.1 to 100 ms).
  SchedAttr attr{};
  attr.size = sizeof(attr);
  attr.sched_policy = 0;  // SCHED_OTHER
  attr.sched_runtime = static_cast<uint64_t>(us) * 1000;
  return syscall(SYS_sched_setattr, 0, &attr, 0) == 0;
#else
  return false;
#endif
}

int64_t current_time_slice_us() {
#if defined(__linux__) && defined(SYS_sched_getattr)
  SchedAttr attr{};
  if (syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) != 0) return 0;
  return static_cast<int64_t>(attr.sched_runtime / 1000);
#else
  return 0;
#endif
}

}  // namespace tandem
