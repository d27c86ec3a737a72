#include "runtime/mpi_process_group.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "runtime/thread_slice.h"

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

#if TANDEM_HAVE_CUDA
#include "runtime/cuda_check.h"
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

namespace tandem::dist {

namespace detail {

namespace {

using Clock = std::chrono::steady_clock;

std::mutex g_mpi_mutex;
std::atomic<bool> g_serialize_mpi{false};
bool g_tandem_initialised_mpi = false;
std::atomic<bool> g_in_finalize{false};

// Under MPI_THREAD_SERIALIZED no two threads may be inside MPI at once; under MULTIPLE
// this is free.
class MpiLock {
 public:
  MpiLock() : lock_(lock_mpi()) {}

 private:
  std::unique_lock<std::mutex> lock_;
};

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

void check_thread_level() {
  TANDEM_CHECK(mpi_running(), "MPI is not running (not initialised, or already finalised): call "
                              "tandem::dist::init_process_group() or MPI_Init_thread first");
  int provided = MPI_THREAD_SINGLE;
  TANDEM_CHECK_MPI(MPI_Query_thread(&provided));
  TANDEM_CHECK(provided >= MPI_THREAD_SERIALIZED,
               "MPI granted " << thread_level_name(provided)
                              << ", but the process group's communication thread needs at least "
                                 "MPI_THREAD_SERIALIZED: initialise MPI with MPI_Init_thread asking for "
                                 "MPI_THREAD_MULTIPLE, with an MPI library built with thread support");
  g_serialize_mpi.store(provided < MPI_THREAD_MULTIPLE);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;  // payload only; arithmetic is in our MPI_Ops
  }
  return MPI_BYTE;
}

// 16-bit reductions: MPI has no half types, so user-defined ops compute in float and
// round once per pairwise step. They run inside every reduction step, so the conversions
// are inline and blocked (F16C when the compiler targets it); the rounding is that of
// float_to_half_bits / float_to_bf16_bits (nearest even).
enum class Combine { sum, max, min };

constexpr int kBlock = 8;

template <bool kHalf>
inline void to_float(const uint16_t* src, float* dst, int n) {
  if constexpr (kHalf) {
#if defined(__F16C__) && defined(__AVX__)
    if (n == kBlock) {
      _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
      return;
    }
#endif
    for (int j = 0; j < n; ++j) dst[j] = half_bits_to_float(src[j]);
  } else {
    for (int j = 0; j < n; ++j) dst[j] = std::bit_cast<float>(static_cast<uint32_t>(src[j]) << 16);
  }
}

template <bool kHalf>
inline void from_float(const float* src, uint16_t* dst, int n) {
  if constexpr (kHalf) {
#if defined(__F16C__) && defined(__AVX__)
    if (n == kBlock) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT));
      return;
    }
#endif
    for (int j = 0; j < n; ++j) dst[j] = float_to_half_bits(src[j]);
  } else {
    for (int j = 0; j < n; ++j) {
      uint32_t x = std::bit_cast<uint32_t>(src[j]);
      dst[j] = (x & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((x >> 16) | 0x40u)  // quiet nan
                                               : static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
  }
}

// b[i] = f(a[i], b[i]) in float (a may be null: f gets 0 for it). Full blocks have a
// constant length so the conversions unroll and vectorise.
template <bool kHalf, typename F>
void map_16bit(const uint16_t* a, uint16_t* b, int64_t count, F f) {
  float x[kBlock] = {}, y[kBlock];
  const int64_t full = count / kBlock * kBlock;
  for (int64_t i = 0; i < full; i += kBlock) {
    if (a != nullptr) to_float<kHalf>(a + i, x, kBlock);
    to_float<kHalf>(b + i, y, kBlock);
    for (int j = 0; j < kBlock; ++j) y[j] = f(x[j], y[j]);
    from_float<kHalf>(y, b + i, kBlock);
  }
  if (full < count) {
    int m = static_cast<int>(count - full);
    if (a != nullptr) to_float<kHalf>(a + full, x, m);
    to_float<kHalf>(b + full, y, m);
    for (int j = 0; j < m; ++j) y[j] = f(x[j], y[j]);
    from_float<kHalf>(y, b + full, m);
  }
}

template <bool kHalf, Combine kCombine>
void reduce_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  map_16bit<kHalf>(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), *len, [](float x, float y) {
    return kCombine == Combine::sum ? x + y : kCombine == Combine::max ? std::max(x, y) : std::min(x, y);
  });
}

// [f16, bf16][sum, max, min], created once MPI runs.
MPI_Op g_ops_16bit[2][3];
std::once_flag g_once;

void create_16bit_ops() {
  MpiLock lock;
  MPI_User_function* fns[2][3] = {
      {reduce_16bit<true, Combine::sum>, reduce_16bit<true, Combine::max>, reduce_16bit<true, Combine::min>},
      {reduce_16bit<false, Combine::sum>, reduce_16bit<false, Combine::max>, reduce_16bit<false, Combine::min>}};
  for (int d = 0; d < 2; ++d)
    for (int o = 0; o < 3; ++o) TANDEM_CHECK_MPI(MPI_Op_create(fns[d][o], /*commute=*/1, &g_ops_16bit[d][o]));
}

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  int o = op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : 0;  // avg reduces as sum
  if (dtype == DType::f16 || dtype == DType::bf16) return g_ops_16bit[dtype == DType::f16 ? 0 : 1][o];
  return o == 0 ? MPI_SUM : o == 1 ? MPI_MAX : MPI_MIN;
}

void divide_in_place(void* data, DType dtype, int64_t count, int divisor) {
  switch (dtype) {
    case DType::f32: {
      auto* p = static_cast<float*>(data);
      float d = static_cast<float>(divisor);
      for (int64_t i = 0; i < count; ++i) p[i] /= d;
      break;
    }
    case DType::f64: {
      auto* p = static_cast<double*>(data);
      double d = divisor;
      for (int64_t i = 0; i < count; ++i) p[i] /= d;
      break;
    }
    case DType::f16:
    case DType::bf16: {
      auto* p = static_cast<uint16_t*>(data);
      float d = static_cast<float>(divisor);
      auto divide = [d](float, float y) { return y / d; };
      if (dtype == DType::f16) {
        map_16bit<true>(nullptr, p, count, divide);
      } else {
        map_16bit<false>(nullptr, p, count, divide);
      }
      break;
    }
  }
}

// MPI counts are int: larger operations go in pieces of this many elements.
constexpr int64_t kMaxCountPerCall = INT_MAX;

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i) contiguous = contiguous && ranks[i] == ranks[i - 1] + 1;
  if (contiguous && ranks.size() > 2) {
    os << ranks.front() << "-" << ranks.back();
  } else {
    os << "{";
    for (size_t i = 0; i < ranks.size(); ++i) os << (i ? "," : "") << ranks[i];
    os << "}";
  }
  return os.str();
}

}  // namespace

std::unique_lock<std::mutex> lock_mpi() {
  if (g_serialize_mpi.load()) return std::unique_lock<std::mutex>(g_mpi_mutex);
  return {};
}

bool mpi_abort_possible() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  return initialised && (mpi_running() || g_in_finalize.load());
}

bool mpi_running() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

void ensure_mpi_initialized() {
  int initialised = 0, finalised = 0;
  TANDEM_CHECK_MPI(MPI_Initialized(&initialised));
  TANDEM_CHECK_MPI(MPI_Finalized(&finalised));
  TANDEM_CHECK(!finalised, "MPI has already been finalised; it cannot be initialised again");
  if (!initialised) {
    int provided = MPI_THREAD_SINGLE;
    TANDEM_CHECK_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    g_tandem_initialised_mpi = true;
  }
  check_thread_level();
}

class MpiWork;

struct QueuedOp {
  std::shared_ptr<MpiWork> work;
  std::function<void(MpiGroupState&)> run;
};

struct MpiGroupState {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  std::string name;
  std::vector<int> world_ranks;

  std::mutex mu;
  std::condition_variable queue_cv;  // the communication thread waits here for operations
  std::condition_variable exit_cv;   // shutdown waits here for the thread to exit
  std::deque<QueuedOp> queue;
  std::shared_ptr<MpiWork> running;
  uint64_t issued = 0;
  bool stopping = false;
  bool stop_started = false;
  bool thread_exited = false;
  bool timed_out = false;
  std::string failure;  // non-empty: the group is unusable, and why
  std::thread thread;
  int64_t slice_us = 0;  // the communication thread's requested time slice (thread_slice.h)

#if TANDEM_HAVE_CUDA
  bool cuda_aware = false;
  void* pinned = nullptr;
  size_t pinned_bytes = 0;
  void* host_buffer(size_t bytes) {
    if (bytes > pinned_bytes) {
      if (pinned != nullptr) TANDEM_CHECK_CUDA(cudaFreeHost(pinned));
      pinned = nullptr;
      pinned_bytes = 0;
      TANDEM_CHECK_CUDA(cudaMallocHost(&pinned, bytes));
      pinned_bytes = bytes;
    }
    return pinned;
  }
#endif
  std::vector<char> scratch;  // host output of an allgather into separate tensors

  std::string describe_group() const {
    return "mpi process group '" + name + "' of world ranks " + rank_list(world_ranks);
  }
  void run_loop();
  void wake_waiters();  // with mu held: every unfinished Work's waiters re-check
  // Drains the queue (until the last queued deadline) and joins the thread; a timed-out
  // or stuck group ends the job instead.
  void stop();
};

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<MpiGroupState> group, std::string description, size_t bytes,
          std::chrono::milliseconds timeout, uint64_t sequence, std::vector<Tensor> tensors)
      : group_(std::move(group)),
        description_(std::move(description)),
        bytes_(bytes),
        timeout_(timeout),
        deadline_(Clock::now() + timeout),
        sequence_(sequence),
        tensors_(std::move(tensors)) {}

  void wait() override {
    MpiGroupState& g = *group_;
    std::unique_lock<std::mutex> lock(g.mu);
    ++waiters_;
    cv_.wait_until(lock, deadline_, [&] { return done_ || g.timed_out; });
    --waiters_;
    if (done_) {
      if (error_) std::rethrow_exception(error_);
      return;
    }
    if (g.timed_out) {
      TANDEM_FAIL(description_ << " (collective #" << sequence_ << " of " << g.describe_group()
                               << ") cannot complete: " << g.failure);
    }
    std::ostringstream detail;
    detail << bytes_ << " bytes, collective #" << sequence_ << " of " << g.describe_group();
    if (g.running && g.running.get() != this)
      detail << "; still running there: " << g.running->description() << " (collective #"
             << g.running->sequence_ << ")";
    std::string message = timeout_message(description_, timeout_, g.rank, g.size, detail.str());
    g.timed_out = true;
    g.failure = message;
    g.wake_waiters();
    lock.unlock();
    TANDEM_FAIL(message);
  }

  bool is_completed() const override { return done_.load(); }
  const std::string& description() const override { return description_; }
  uint64_t sequence() const { return sequence_; }
  Clock::time_point deadline() const { return deadline_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Called by the communication thread with g.mu held.
  void finish(std::exception_ptr error) {
    error_ = std::move(error);
    done_.store(true);
    tensors_.clear();
    wake();
  }
  // With g.mu held. Each Work has its own condition variable, so a completion wakes only
  // the threads waiting for that Work: a caller waiting on the last of many queued
  // operations sleeps until that one is done.
  void wake() {
    if (waiters_ > 0) cv_.notify_all();
  }

 private:
  std::shared_ptr<MpiGroupState> group_;
  std::string description_;
  size_t bytes_;
  std::chrono::milliseconds timeout_;
  Clock::time_point deadline_;
  uint64_t sequence_;
  std::vector<Tensor> tensors_;  // keeps the storage alive while the operation is queued
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  std::condition_variable cv_;
  int waiters_ = 0;
};

void MpiGroupState::wake_waiters() {
  if (running) running->wake();
  for (QueuedOp& op : queue) op.work->wake();
}

void MpiGroupState::run_loop() {
  request_time_slice(slice_us);  // a hint: without it buckets still complete, only later
  for (;;) {
    QueuedOp op;
    bool failed_earlier = false;
    std::string earlier;
    {
      std::unique_lock<std::mutex> lock(mu);
      queue_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) break;
      op = std::move(queue.front());
      queue.pop_front();
      running = op.work;
      failed_earlier = !failure.empty();
      if (failed_earlier) earlier = failure;
    }
    std::exception_ptr error;
    if (failed_earlier) {
      // Ranks are out of step after a failure: running more collectives could match the
      // wrong partners, so the rest of the queue fails.
      error = std::make_exception_ptr(
          Error(__FILE__, __LINE__, op.work->description() + " was not run: " + earlier));
    } else {
      try {
        op.run(*this);
      } catch (const std::exception& e) {
        error = std::current_exception();
        std::lock_guard<std::mutex> lock(mu);
        if (failure.empty()) failure = op.work->description() + " failed on " + describe_group() + ": " + e.what();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      op.work->finish(error);
      running.reset();
    }
  }
  {
    // Unchecked: nobody can take an exception here, and a failure only leaks the handle.
    MpiLock lock;
    if (comm != MPI_COMM_NULL && mpi_running()) MPI_Comm_free(&comm);
    comm = MPI_COMM_NULL;
  }
#if TANDEM_HAVE_CUDA
  if (pinned != nullptr) cudaFreeHost(pinned);
  pinned = nullptr;
#endif
  {
    std::lock_guard<std::mutex> lock(mu);
    thread_exited = true;
  }
  exit_cv.notify_all();
}

void MpiGroupState::stop() {
  std::unique_lock<std::mutex> lock(mu);
  if (stop_started) {
    exit_cv.wait(lock, [&] { return thread_exited; });
    return;
  }
  stop_started = true;
  if (timed_out && !thread_exited) {
    std::string message = "shutting down " + describe_group() + " after a timeout: " + failure;
    lock.unlock();
    abort_on_timeout(Error(__FILE__, __LINE__, message));
  }
  stopping = true;
  queue_cv.notify_all();
  // Queued work may finish until the last deadline; after that it counts as timed out. An
  // idle thread gets a few seconds to be scheduled and exit.
  Clock::time_point latest = Clock::now() + std::chrono::seconds(10);
  if (running) latest = std::max(latest, running->deadline());
  for (const QueuedOp& op : queue) latest = std::max(latest, op.work->deadline());
  if (!exit_cv.wait_until(lock, latest, [&] { return thread_exited; })) {
    std::string message =
        running ? timeout_message(running->description(), running->timeout(), rank, size,
                                  "collective #" + std::to_string(running->sequence()) +
                                      ", while shutting down " + describe_group())
                : "shutting down " + describe_group() + ": its communication thread did not stop";
    lock.unlock();
    abort_on_timeout(Error(__FILE__, __LINE__, message));
  }
  lock.unlock();
  if (thread.joinable()) thread.join();
}

namespace {

std::mutex g_registry_mu;
std::vector<std::weak_ptr<MpiGroupState>> g_registry;

void register_group(const std::shared_ptr<MpiGroupState>& state) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  std::erase_if(g_registry, [](const std::weak_ptr<MpiGroupState>& w) { return w.expired(); });
  g_registry.push_back(state);
}

// Stops every live group. Also runs inside MPI_Finalize (an attribute of MPI_COMM_SELF is
// deleted first thing there), so a program that finalises MPI itself with work still queued
// or stuck drains or ends the job instead of hanging in MPI_Finalize.
void stop_all_groups() {
  std::vector<std::shared_ptr<MpiGroupState>> live;
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    for (auto& w : g_registry)
      if (auto s = w.lock()) live.push_back(std::move(s));
    g_registry.clear();
  }
  for (auto& s : live) s->stop();
}

int on_finalize(MPI_Comm, int, void*, void*) {
  g_in_finalize.store(true);
  try {
    stop_all_groups();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: stopping process groups in MPI_Finalize: %s\n", e.what());
  }
  g_in_finalize.store(false);
  return MPI_SUCCESS;
}

void install_finalize_hook() {
  MpiLock lock;
  int keyval = MPI_KEYVAL_INVALID;
  TANDEM_CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_finalize, &keyval, nullptr));
  TANDEM_CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr));
}

}  // namespace

void shutdown_mpi() {
  stop_all_groups();
  if (g_tandem_initialised_mpi && mpi_running()) {
    MpiLock lock;
    TANDEM_CHECK_MPI(MPI_Finalize());
  }
}

}  // namespace detail

namespace {

using detail::MpiGroupState;
using detail::MpiLock;
using detail::MpiWork;

int comm_rank(MPI_Comm comm) {
  detail::check_thread_level();
  int rank = 0;
  MpiLock lock;
  TANDEM_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  return rank;
}

int comm_size(MPI_Comm comm) {
  detail::check_thread_level();
  int size = 0;
  MpiLock lock;
  TANDEM_CHECK_MPI(MPI_Comm_size(comm, &size));
  return size;
}

#if TANDEM_HAVE_CUDA
bool mpi_is_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}
#endif

// Plain copies between host and device memory of the comm thread's own buffers (no
// device-copy hook needed).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if TANDEM_HAVE_CUDA
  TANDEM_CHECK_CUDA(cudaSetDevice(dst_device.is_cuda() ? dst_device.index : src_device.index));
  TANDEM_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
#else
  TANDEM_FAIL("a copy between " << src_device.str() << " and " << dst_device.str()
                                << " needs a CUDA build");
#endif
}

// Runs `body` on a host pointer to `tensor`'s data: the data itself on the CPU (and with a
// CUDA-aware MPI when `device_ok`), else a pinned copy that is copied back afterwards.
template <typename Body>
void on_host(MpiGroupState& g, const Tensor& tensor, bool copy_back, bool device_ok, Body&& body) {
  if (tensor.device().is_cpu()) {
    body(tensor.raw_data());
    return;
  }
#if TANDEM_HAVE_CUDA
  TANDEM_CHECK_CUDA(cudaSetDevice(tensor.device().index));
  if (device_ok && g.cuda_aware) {
    TANDEM_CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
    body(tensor.raw_data());
    return;
  }
  void* host = g.host_buffer(tensor.bytes());
  TANDEM_CHECK_CUDA(cudaMemcpy(host, tensor.raw_data(), tensor.bytes(), cudaMemcpyDeviceToHost));
  body(host);
  if (copy_back) TANDEM_CHECK_CUDA(cudaMemcpy(tensor.raw_data(), host, tensor.bytes(), cudaMemcpyHostToDevice));
#else
  (void)g;
  (void)copy_back;
  (void)device_ok;
  (void)body;
  TANDEM_FAIL("tensor " << tensor.str() << " is on a CUDA device, but this build has no CUDA support");
#endif
}

void check_device(const char* op, const Tensor& tensor) {
#if !TANDEM_HAVE_CUDA
  TANDEM_CHECK(tensor.device().is_cpu(),
               op << ": " << tensor.str() << " is on a CUDA device, but this build has no CUDA support");
#else
  (void)op;
  (void)tensor;
#endif
}

}  // namespace

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, std::string name)
    : ProcessGroup(comm_rank(comm), comm_size(comm), std::move(name)),
      state_(std::make_shared<MpiGroupState>()) {
  std::call_once(detail::g_once, [] {
    detail::create_16bit_ops();
    detail::install_finalize_hook();
  });
  MpiGroupState& g = *state_;
  g.rank = rank();
  g.size = size();
  g.name = this->name();
  {
    MpiLock lock;
    TANDEM_CHECK_MPI(MPI_Comm_dup(comm, &g.comm));
    // Errors come back as codes so TANDEM_CHECK_MPI can name them instead of MPI aborting.
    TANDEM_CHECK_MPI(MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN));
    MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    TANDEM_CHECK_MPI(MPI_Comm_group(g.comm, &group));
    TANDEM_CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
    std::vector<int> mine(static_cast<size_t>(size()));
    for (int i = 0; i < size(); ++i) mine[static_cast<size_t>(i)] = i;
    g.world_ranks.resize(mine.size());
    TANDEM_CHECK_MPI(MPI_Group_translate_ranks(group, size(), mine.data(), world, g.world_ranks.data()));
    TANDEM_CHECK_MPI(MPI_Group_free(&group));
    TANDEM_CHECK_MPI(MPI_Group_free(&world));
  }
#if TANDEM_HAVE_CUDA
  g.cuda_aware = mpi_is_cuda_aware();
#endif
  g.slice_us = comm_thread_slice_us();
  g.thread = std::thread([state = state_.get()] { state->run_loop(); });
  detail::register_group(state_);
}

MpiProcessGroup::~MpiProcessGroup() { state_->stop(); }

MPI_Comm MpiProcessGroup::comm() const { return state_->comm; }
const std::vector<int>& MpiProcessGroup::world_ranks() const { return state_->world_ranks; }

namespace {

std::shared_ptr<Work> enqueue(const std::shared_ptr<MpiGroupState>& state, std::chrono::milliseconds timeout,
                              std::string description, size_t bytes, std::vector<Tensor> tensors,
                              std::function<void(MpiGroupState&)> run) {
  MpiGroupState& g = *state;
  std::shared_ptr<MpiWork> work;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    TANDEM_CHECK(g.failure.empty(), description << ": " << g.describe_group()
                                                << " is unusable after an earlier failure: " << g.failure);
    TANDEM_CHECK(!g.stopping, description << ": " << g.describe_group() << " has been shut down");
    work = std::make_shared<MpiWork>(state, std::move(description), bytes, timeout, ++g.issued,
                                     std::move(tensors));
    g.queue.push_back({work, std::move(run)});
  }
  g.queue_cv.notify_one();
  return work;
}

}  // namespace

std::shared_ptr<Work> MpiProcessGroup::allreduce(Tensor& tensor, ReduceOp op, const std::string& tag) {
  check_allreduce_args(tensor, op);
  check_device("allreduce", tensor);
  std::string description =
      describe_op(std::string("allreduce (") + reduce_op_name(op) + ")", tensor.numel(), tensor.dtype(), tag);
  Tensor t = tensor;
  return enqueue(state_, timeout(), std::move(description), tensor.bytes(), {tensor}, [t, op](MpiGroupState& g) {
    const int64_t count = t.numel();
    const size_t element_bytes = dtype_size(t.dtype());
    // avg divides on the host, so it always stages CUDA data.
    on_host(g, t, /*copy_back=*/true, /*device_ok=*/op != ReduceOp::avg, [&](void* data) {
      MPI_Datatype type = detail::mpi_type(t.dtype());
      MPI_Op mop = detail::mpi_op(op, t.dtype());
      for (int64_t offset = 0; offset < count; offset += detail::kMaxCountPerCall) {
        int n = static_cast<int>(std::min(detail::kMaxCountPerCall, count - offset));
        char* chunk = static_cast<char*>(data) + static_cast<size_t>(offset) * element_bytes;
        MpiLock lock;
        TANDEM_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, chunk, n, type, mop, g.comm));
      }
      if (op == ReduceOp::avg) detail::divide_in_place(data, t.dtype(), count, g.size);
    });
  });
}

std::shared_ptr<Work> MpiProcessGroup::broadcast(Tensor& tensor, int root, const std::string& tag) {
  check_broadcast_args(tensor, root);
  check_device("broadcast", tensor);
  std::string description = describe_op("broadcast (root " + std::to_string(root) + ")", tensor.numel(),
                                        tensor.dtype(), tag);
  Tensor t = tensor;
  return enqueue(state_, timeout(), std::move(description), tensor.bytes(), {tensor}, [t, root](MpiGroupState& g) {
    const int64_t count = t.numel();
    const size_t element_bytes = dtype_size(t.dtype());
    on_host(g, t, /*copy_back=*/g.rank != root, /*device_ok=*/true, [&](void* data) {
      for (int64_t offset = 0; offset < count; offset += detail::kMaxCountPerCall) {
        int n = static_cast<int>(std::min(detail::kMaxCountPerCall, count - offset));
        char* chunk = static_cast<char*>(data) + static_cast<size_t>(offset) * element_bytes;
        MpiLock lock;
        TANDEM_CHECK_MPI(MPI_Bcast(chunk, n, detail::mpi_type(t.dtype()), root, g.comm));
      }
    });
  });
}

namespace {

// MPI_Allgather of `in` into the flat host buffer `out` (size * in.numel() elements).
void allgather_host(MpiGroupState& g, const void* in, void* out, int64_t count, DType dtype) {
  TANDEM_CHECK(count * g.size <= INT_MAX, "allgather: " << count << " elements from each of " << g.size
                                                        << " ranks exceed MPI's int count");
  const size_t block_bytes = static_cast<size_t>(count) * dtype_size(dtype);
  const void* send = in;
  if (in == static_cast<const char*>(out) + static_cast<size_t>(g.rank) * block_bytes) send = MPI_IN_PLACE;
  MpiLock lock;
  TANDEM_CHECK_MPI(MPI_Allgather(send, static_cast<int>(count), detail::mpi_type(dtype), out,
                                 static_cast<int>(count), detail::mpi_type(dtype), g.comm));
}

void allgather_any(MpiGroupState& g, const Tensor& in, const Tensor& flat_out) {
  const int64_t count = in.numel();
  if (in.device().is_cpu()) {
    allgather_host(g, in.raw_data(), flat_out.raw_data(), count, in.dtype());
    return;
  }
#if TANDEM_HAVE_CUDA
  TANDEM_CHECK_CUDA(cudaSetDevice(in.device().index));
  if (g.cuda_aware) {
    TANDEM_CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
    allgather_host(g, in.raw_data(), flat_out.raw_data(), count, in.dtype());
    return;
  }
  char* host = static_cast<char*>(g.host_buffer(in.bytes() + flat_out.bytes()));
  TANDEM_CHECK_CUDA(cudaMemcpy(host, in.raw_data(), in.bytes(), cudaMemcpyDeviceToHost));
  allgather_host(g, host, host + in.bytes(), count, in.dtype());
  TANDEM_CHECK_CUDA(cudaMemcpy(flat_out.raw_data(), host + in.bytes(), flat_out.bytes(), cudaMemcpyHostToDevice));
#else
  TANDEM_FAIL("allgather: " << in.str() << " is on a CUDA device, but this build has no CUDA support");
#endif
}

}  // namespace

std::shared_ptr<Work> MpiProcessGroup::allgather(std::vector<Tensor>& out, const Tensor& in, const std::string& tag) {
  check_allgather_args(out, in);
  check_device("allgather", in);
  std::string description = describe_op("allgather", in.numel(), in.dtype(), tag);
  std::vector<Tensor> keep = out;
  keep.push_back(in);
  std::vector<Tensor> outs = out;
  Tensor input = in;
  return enqueue(state_, timeout(), std::move(description), in.bytes() * static_cast<size_t>(size()),
                 std::move(keep), [outs, input](MpiGroupState& g) mutable {
    const int64_t count = input.numel();
    if (are_consecutive_views(outs) && input.device().is_cpu()) {
      allgather_host(g, input.raw_data(), outs[0].raw_data(), count, input.dtype());
      return;
    }
    // Separate tensors (or CUDA ones): gather into a host buffer, then copy each block out.
    const size_t block_bytes = input.bytes();
    g.scratch.resize(block_bytes * static_cast<size_t>(g.size + 1));
    char* gathered = g.scratch.data() + block_bytes;
    const void* send = input.raw_data();
    if (!input.device().is_cpu()) {
      copy_bytes(g.scratch.data(), Device::cpu(), input.raw_data(), input.device(), block_bytes);
      send = g.scratch.data();
    }
    allgather_host(g, send, gathered, count, input.dtype());
    for (int i = 0; i < g.size; ++i) {
      Tensor& dst = outs[static_cast<size_t>(i)];
      copy_bytes(dst.raw_data(), dst.device(), gathered + static_cast<size_t>(i) * block_bytes, Device::cpu(),
                 block_bytes);
    }
  });
}

std::shared_ptr<Work> MpiProcessGroup::allgather_flat(Tensor& out, const Tensor& in, const std::string& tag) {
  check_allgather_flat_args(out, in);
  check_device("allgather_flat", in);
  std::string description = describe_op("allgather", in.numel(), in.dtype(), tag);
  Tensor o = out, input = in;
  return enqueue(state_, timeout(), std::move(description), in.bytes() * static_cast<size_t>(size()), {out, in},
                 [o, input](MpiGroupState& g) { allgather_any(g, input, o); });
}

std::shared_ptr<Work> MpiProcessGroup::barrier(const std::string& tag) {
  std::string description = "barrier, tag '" + tag + "'";
  return enqueue(state_, timeout(), std::move(description), 0, {}, [](MpiGroupState& g) {
    MpiLock lock;
    TANDEM_CHECK_MPI(MPI_Barrier(g.comm));
  });
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::new_subgroup(const std::vector<int>& ranks) {
  check_subgroup_ranks(ranks);
  auto found = std::find(ranks.begin(), ranks.end(), rank());
  const bool member = found != ranks.end();
  const int key = member ? static_cast<int>(found - ranks.begin()) : 0;
  std::ostringstream list;
  for (size_t i = 0; i < ranks.size(); ++i) list << (i ? "," : "") << ranks[i];
  std::string sub_name = name() + "/{" + list.str() + "}";
  // The split is a collective on this group's communicator, so it runs on the
  // communication thread, in order with the group's other operations.
  auto split = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  std::shared_ptr<Work> work = enqueue(
      state_, timeout(), "new_subgroup " + sub_name + ", tag ''", 0, {}, [split, member, key](MpiGroupState& g) {
        MpiLock lock;
        TANDEM_CHECK_MPI(MPI_Comm_split(g.comm, member ? 0 : MPI_UNDEFINED, key, split.get()));
      });
  work->wait();
  if (!member) return nullptr;
  auto group = std::make_shared<MpiProcessGroup>(*split, sub_name);
  group->set_timeout(timeout());
  {
    MpiLock lock;
    TANDEM_CHECK_MPI(MPI_Comm_free(split.get()));
  }
  return group;
}

}  // namespace tandem::dist
