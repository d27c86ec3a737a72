#include "runtime/dist/mpi_process_group.h"

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_lifetime.h"
#include "runtime/dist/mpi_reduce_ops.h"
#include "runtime/dist/thread_slice.h"
#include "runtime/trace.h"

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

class MpiWork;

struct QueuedOp {
  std::shared_ptr<MpiWork> work;
  std::function<void(MpiGroupState&)> run;
  // Set when tracing was on at issue: the span the communication thread records.
  bool traced = false;
  std::string trace_name;
  std::vector<trace::Arg> trace_args;
};

struct MpiGroupState final : StoppableGroup {
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
  void stop() override;
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
      throw TimeoutError(__FILE__, __LINE__,
                         description_ + " (collective #" + std::to_string(sequence_) + " of " +
                             g.describe_group() + ") cannot complete: " + g.failure);
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
    throw TimeoutError(__FILE__, __LINE__, message);
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
  trace::set_thread_name("communication (" + name + ")");
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
        const int64_t start_ns = op.traced ? trace::now_ns() : 0;
        op.run(*this);
        if (op.traced) trace::complete("comm", std::move(op.trace_name), start_ns, std::move(op.trace_args));
      } catch (const std::exception& e) {
        error = std::current_exception();
        std::lock_guard<std::mutex> lock(mu);
        if (failure.empty())
          failure = op.work->description() + " failed on " + describe_group() + ": " + e.what();
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
  TANDEM_FAIL("a copy between " << src_device.str() << " and " << dst_device.str() << " needs a CUDA build");
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
  if (copy_back)
    TANDEM_CHECK_CUDA(cudaMemcpy(tensor.raw_data(), host, tensor.bytes(), cudaMemcpyHostToDevice));
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
  detail::ensure_reduce_ops();
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
    detail::QueuedOp op;
    op.run = std::move(run);
    if (trace::enabled()) {  // the span's name is the op ("allreduce (sum)"), its args the issuer's
      op.traced = true;
      op.trace_name = description.substr(0, description.find(" of "));
      op.trace_args = trace::current_args();
      op.trace_args.push_back(trace::arg("bytes", static_cast<int64_t>(bytes)));
      op.trace_args.push_back(trace::arg("what", description));
    }
    work = std::make_shared<MpiWork>(state, std::move(description), bytes, timeout, ++g.issued,
                                     std::move(tensors));
    op.work = work;
    g.queue.push_back(std::move(op));
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
  return enqueue(state_, timeout(), std::move(description), tensor.bytes(), {tensor},
                 [t, op](MpiGroupState& g) {
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
  std::string description =
      describe_op("broadcast (root " + std::to_string(root) + ")", tensor.numel(), tensor.dtype(), tag);
  Tensor t = tensor;
  return enqueue(state_, timeout(), std::move(description), tensor.bytes(), {tensor},
                 [t, root](MpiGroupState& g) {
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
  TANDEM_CHECK_CUDA(
      cudaMemcpy(flat_out.raw_data(), host + in.bytes(), flat_out.bytes(), cudaMemcpyHostToDevice));
#else
  TANDEM_FAIL("allgather: " << in.str() << " is on a CUDA device, but this build has no CUDA support");
#endif
}

}  // namespace

std::shared_ptr<Work> MpiProcessGroup::allgather(std::vector<Tensor>& out, const Tensor& in,
                                                 const std::string& tag) {
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
                     copy_bytes(g.scratch.data(), Device::cpu(), input.raw_data(), input.device(),
                                block_bytes);
                     send = g.scratch.data();
                   }
                   allgather_host(g, send, gathered, count, input.dtype());
                   for (int i = 0; i < g.size; ++i) {
                     Tensor& dst = outs[static_cast<size_t>(i)];
                     copy_bytes(dst.raw_data(), dst.device(), gathered + static_cast<size_t>(i) * block_bytes,
                                Device::cpu(), block_bytes);
                   }
                 });
}

std::shared_ptr<Work> MpiProcessGroup::allgather_flat(Tensor& out, const Tensor& in, const std::string& tag) {
  check_allgather_flat_args(out, in);
  check_device("allgather_flat", in);
  std::string description = describe_op("allgather", in.numel(), in.dtype(), tag);
  Tensor o = out, input = in;
  return enqueue(state_, timeout(), std::move(description), in.bytes() * static_cast<size_t>(size()),
                 {out, in}, [o, input](MpiGroupState& g) { allgather_any(g, input, o); });
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
  std::shared_ptr<Work> work =
      enqueue(state_, timeout(), "new_subgroup " + sub_name + ", tag ''", 0, {},
              [split, member, key](MpiGroupState& g) {
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
