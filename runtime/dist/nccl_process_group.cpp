#include "runtime/dist/nccl_process_group.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "runtime/cuda/cuda_memory.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda_check.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_lifetime.h"
#include "runtime/dist/mpi_process_group.h"
#include "runtime/trace.h"

// NCCL calls return ncclResult_t; a failure throws naming the call, file:line and rank.
#define TANDEM_CHECK_NCCL(call)                                                                    \
  do {                                                                                             \
    ncclResult_t tandem_nccl_rc_ = (call);                                                         \
    if (tandem_nccl_rc_ != ncclSuccess) {                                                          \
      ::tandem::detail::throw_error(                                                               \
          __FILE__, __LINE__,                                                                      \
          std::string("NCCL call failed: ") + #call + ": " + ncclGetErrorString(tandem_nccl_rc_)); \
    }                                                                                              \
  } while (0)

namespace tandem::dist {

namespace detail {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

}  // namespace

class NcclWork;

struct NcclGroupState {
  MPI_Comm mpi_comm = MPI_COMM_NULL;
  ncclComm_t comm = nullptr;
  int device = 0;
  int rank = 0;
  int size = 1;
  std::string name;
  cudaStream_t stream = nullptr;              // the group's own stream
  std::atomic<cudaStream_t> caller{nullptr};  // nullptr: the issuing thread's compute stream
  cudaEvent_t ready = nullptr;                // recorded on the caller's stream per operation
  float* scratch = nullptr;                   // one float on the device, for barrier()

  std::mutex mu;  // issue order, the outstanding list and the failure state
  std::condition_variable cv;
  std::deque<std::shared_ptr<NcclWork>> outstanding;
  uint64_t issued = 0;
  bool stopping = false;
  bool timed_out = false;
  std::string failure;
  std::thread watchdog;

  // Tracing: the GPU stream's spans are timed by CUDA events against a reference event
  // whose host time (steady_clock) was taken when it completed.
  int trace_track = 0;
  cudaEvent_t trace_reference = nullptr;
  int64_t trace_reference_steady_ns = 0;

  std::string describe_group() const {
    return "nccl process group '" + name + "' on cuda:" + std::to_string(device);
  }
  void watch();
  // With mu held: completes the finished outstanding work in order (recording its spans).
  void sweep_completed();
  // With mu held, on the issuing thread: the reference event, made once.
  void ensure_trace_reference();
  void abort_job(const std::string& message);
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclGroupState> group, std::string description, size_t bytes,
           std::chrono::milliseconds timeout, uint64_t sequence, cudaStream_t caller,
           std::vector<Tensor> tensors, bool host_blocking_wait)
      : group_(std::move(group)),
        description_(std::move(description)),
        bytes_(bytes),
        timeout_(timeout),
        deadline_(Clock::now() + timeout),
        sequence_(sequence),
        caller_(caller),
        tensors_(std::move(tensors)),
        host_blocking_wait_(host_blocking_wait) {
    TANDEM_CHECK_CUDA(cudaEventCreateWithFlags(&done_event_, cudaEventDisableTiming));
  }
  ~NcclWork() override {
    if (done_event_ != nullptr) cudaEventDestroy(done_event_);
    if (trace_start_ != nullptr) cudaEventDestroy(trace_start_);
    if (trace_end_ != nullptr) cudaEventDestroy(trace_end_);
  }

  // Tracing: events around the operation on the group's stream, and the span's name and
  // arguments (the issuer's trace::current_args()).
  void trace_begin(cudaStream_t stream, std::string name, std::vector<trace::Arg> args) {
    TANDEM_CHECK_CUDA(cudaEventCreate(&trace_start_));
    TANDEM_CHECK_CUDA(cudaEventCreate(&trace_end_));
    TANDEM_CHECK_CUDA(cudaEventRecord(trace_start_, stream));
    trace_name_ = std::move(name);
    trace_args_ = std::move(args);
  }
  void trace_end(cudaStream_t stream) {
    if (trace_end_ != nullptr) TANDEM_CHECK_CUDA(cudaEventRecord(trace_end_, stream));
  }
  // Once the work is done: its span on the stream's track, in host time.
  void record_trace_span(const NcclGroupState& g) {
    if (trace_start_ == nullptr) return;
    float start_ms = 0, end_ms = 0;
    if (cudaEventElapsedTime(&start_ms, g.trace_reference, trace_start_) != cudaSuccess ||
        cudaEventElapsedTime(&end_ms, g.trace_reference, trace_end_) != cudaSuccess)
      return;  // a span lost, not an error of the collective
    trace::Event e;
    e.category = "comm";
    e.name = trace_name_;
    e.ts_ns = trace::trace_ns_of(g.trace_reference_steady_ns + static_cast<int64_t>(1e6 * start_ms));
    e.dur_ns = static_cast<int64_t>(1e6 * (end_ms - start_ms));
    e.tid = g.trace_track;
    e.args = std::move(trace_args_);
    trace::record(std::move(e));
    cudaEventDestroy(trace_start_);
    cudaEventDestroy(trace_end_);
    trace_start_ = trace_end_ = nullptr;
  }

  cudaEvent_t done_event() const { return done_event_; }
  Clock::time_point deadline() const { return deadline_; }
  uint64_t sequence() const { return sequence_; }

  void wait() override {
    if (host_blocking_wait_) {
      synchronize();
      return;
    }
    check_group();
    TANDEM_CHECK_CUDA(cudaSetDevice(group_->device));
    TANDEM_CHECK_CUDA(cudaStreamWaitEvent(caller_, done_event_, 0));
  }

  void synchronize() override {
    check_group();
    TANDEM_CHECK_CUDA(cudaSetDevice(group_->device));
    const int64_t t0 = host_cost::now_ns_if_counting();
    // Polling with a growing sleep: cudaEventSynchronize cannot give up at a deadline.
    auto pause = std::chrono::microseconds(20);
    for (;;) {
      cudaError_t rc = cudaEventQuery(done_event_);
      if (rc == cudaSuccess) break;
      TANDEM_CHECK(rc == cudaErrorNotReady, description_ << " failed: " << cudaGetErrorString(rc));
      if (Clock::now() >= deadline_) {
        std::ostringstream detail;
        detail << bytes_ << " bytes, collective #" << sequence_ << " of " << group_->describe_group();
        std::string message =
            timeout_message(description_, timeout_, group_->rank, group_->size, detail.str());
        {
          std::lock_guard<std::mutex> lock(group_->mu);
          group_->timed_out = true;
          if (group_->failure.empty()) group_->failure = message;
        }
        throw TimeoutError(__FILE__, __LINE__, message);
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    host_cost::note_sync(std::source_location::current(), host_cost::now_ns_if_counting() - t0);
    completed_.store(true);
  }

  bool is_completed() const override {
    if (completed_.load()) return true;
    return cudaEventQuery(done_event_) == cudaSuccess;
  }
  const std::string& description() const override { return description_; }

  // Watchdog: the operation finished, release the tensors.
  void mark_completed() {
    completed_.store(true);
    tensors_.clear();
  }

  std::string timeout_text() const {
    std::ostringstream detail;
    detail << bytes_ << " bytes, collective #" << sequence_ << " of " << group_->describe_group()
           << ", found by the watchdog " << kWatchdogGrace.count() / 1000.0 << " s after the deadline";
    return timeout_message(description_, timeout_, group_->rank, group_->size, detail.str());
  }

 private:
  void check_group() const {
    std::lock_guard<std::mutex> lock(group_->mu);
    TANDEM_CHECK(group_->failure.empty(), description_ << " (collective #" << sequence_ << " of "
                                                       << group_->describe_group()
                                                       << ") cannot complete: " << group_->failure);
  }

  std::shared_ptr<NcclGroupState> group_;
  std::string description_;
  size_t bytes_;
  std::chrono::milliseconds timeout_;
  Clock::time_point deadline_;
  uint64_t sequence_;
  cudaStream_t caller_;
  std::vector<Tensor> tensors_;  // kept alive until the stream work is done
  bool host_blocking_wait_;
  cudaEvent_t done_event_ = nullptr;
  std::atomic<bool> completed_{false};
  cudaEvent_t trace_start_ = nullptr;
  cudaEvent_t trace_end_ = nullptr;
  std::string trace_name_;
  std::vector<trace::Arg> trace_args_;
};

void NcclGroupState::sweep_completed() {
  while (!outstanding.empty() && cudaEventQuery(outstanding.front()->done_event()) == cudaSuccess) {
    outstanding.front()->record_trace_span(*this);
    outstanding.front()->mark_completed();
    outstanding.pop_front();
  }
}

void NcclGroupState::ensure_trace_reference() {
  if (trace_reference != nullptr) return;
  TANDEM_CHECK_CUDA(cudaEventCreate(&trace_reference));
  TANDEM_CHECK_CUDA(cudaEventRecord(trace_reference, stream));
  TANDEM_CHECK_CUDA(cudaEventSynchronize(trace_reference));
  trace_reference_steady_ns = trace::steady_ns();
  trace_track = trace::track("NCCL stream (" + name + ", cuda:" + std::to_string(device) + ")");
}

void NcclGroupState::abort_job(const std::string& message) {
  if (comm != nullptr) ncclCommAbort(comm);
  comm = nullptr;
  abort_on_timeout(Error(__FILE__, __LINE__, message));
}

void NcclGroupState::watch() {
  cudaSetDevice(device);
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    cv.wait_for(lock, std::chrono::milliseconds(100));
    sweep_completed();
    if (stopping && outstanding.empty()) return;
    if (!outstanding.empty() && Clock::now() > outstanding.front()->deadline() + kWatchdogGrace) {
      std::string message = outstanding.front()->timeout_text();
      lock.unlock();
      abort_job(message);
    }
    ncclResult_t async = ncclSuccess;
    if (comm != nullptr && ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress) {
      std::string message =
          describe_group() + ": NCCL reported an asynchronous error: " + ncclGetErrorString(async);
      lock.unlock();
      abort_job(message);
    }
  }
}

}  // namespace detail

namespace {

using detail::NcclGroupState;
using detail::NcclWork;

int mpi_comm_rank(MPI_Comm comm) {
  TANDEM_CHECK(detail::mpi_running(), "NcclProcessGroup needs MPI running (for the NCCL id broadcast)");
  int rank = 0;
  auto lock = detail::lock_mpi();
  TANDEM_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  return rank;
}

int mpi_comm_size(MPI_Comm comm) {
  int size = 0;
  auto lock = detail::lock_mpi();
  TANDEM_CHECK_MPI(MPI_Comm_size(comm, &size));
  return size;
}

void check_on_device(const char* op, const Tensor& tensor, int device) {
  TANDEM_CHECK(tensor.device() == Device::cuda(device), op << ": " << tensor.str() << " is not on cuda:"
                                                           << device << ", the device of the NCCL group");
}

// Issues one operation: gate the group's stream on the caller's, enqueue, record the end.
std::shared_ptr<Work> launch(const std::shared_ptr<NcclGroupState>& state, std::chrono::milliseconds timeout,
                             std::string description, size_t bytes, std::vector<Tensor> tensors,
                             bool host_blocking_wait, const std::function<void(NcclGroupState&)>& body) {
  NcclGroupState& g = *state;
  std::lock_guard<std::mutex> lock(g.mu);
  TANDEM_CHECK(g.failure.empty(), description << ": " << g.describe_group()
                                              << " is unusable after an earlier failure: " << g.failure);
  TANDEM_CHECK(!g.stopping, description << ": " << g.describe_group() << " has been shut down");
  TANDEM_CHECK_CUDA(cudaSetDevice(g.device));
  cudaStream_t caller = g.caller.load();
  if (caller == nullptr) caller = tandem::cuda::compute_stream();
  // Captured into a CUDA graph: the event and the wait fork the group's stream into the
  // capture, and the caller's wait() joins it back. Nothing runs now, so the work is not
  // watched (its events cannot be queried during capture) nor traced.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (caller != cudaStreamLegacy) TANDEM_CHECK_CUDA(cudaStreamIsCapturing(caller, &capture));
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  TANDEM_CHECK(!capturing || !host_blocking_wait,
               description << ": a host-blocking collective cannot be captured into a CUDA graph");
  TANDEM_CHECK_CUDA(cudaEventRecord(g.ready, caller));
  TANDEM_CHECK_CUDA(cudaStreamWaitEvent(g.stream, g.ready, 0));
  const bool traced = trace::enabled() && !capturing;
  std::string trace_name = traced ? description.substr(0, description.find(" of ")) : std::string();
  std::vector<trace::Arg> trace_args;
  if (traced) {
    trace_args = trace::current_args();
    trace_args.push_back(trace::arg("bytes", static_cast<int64_t>(bytes)));
    trace_args.push_back(trace::arg("what", description));
  }
  auto work = std::make_shared<NcclWork>(state, std::move(description), bytes, timeout, ++g.issued, caller,
                                         std::move(tensors), host_blocking_wait);
  if (traced) {
    g.ensure_trace_reference();
    work->trace_begin(g.stream, std::move(trace_name), std::move(trace_args));
  }
  body(g);
  work->trace_end(g.stream);
  TANDEM_CHECK_CUDA(cudaEventRecord(work->done_event(), g.stream));
  if (!capturing) g.outstanding.push_back(work);
  return work;
}

}  // namespace

NcclProcessGroup::NcclProcessGroup(MPI_Comm comm, int device, std::string name)
    : ProcessGroup(mpi_comm_rank(comm), mpi_comm_size(comm), std::move(name)),
      state_(std::make_shared<NcclGroupState>()) {
  NcclGroupState& g = *state_;
  g.device = device;
  g.rank = rank();
  g.size = size();
  g.name = this->name();
  ncclUniqueId id;
  {
    auto lock = detail::lock_mpi();
    TANDEM_CHECK_MPI(MPI_Comm_dup(comm, &g.mpi_comm));
    if (rank() == 0) TANDEM_CHECK_NCCL(ncclGetUniqueId(&id));
    TANDEM_CHECK_MPI(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, g.mpi_comm));
  }
  TANDEM_CHECK_CUDA(cudaSetDevice(device));
  install_cuda_memory();  // CUDA tensors for the callers of a GPU group
  TANDEM_CHECK_CUDA(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  TANDEM_CHECK_CUDA(cudaEventCreateWithFlags(&g.ready, cudaEventDisableTiming));
  TANDEM_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&g.scratch), sizeof(float)));
  TANDEM_CHECK_NCCL(ncclCommInitRank(&g.comm, size(), id, rank()));
  host_ = std::make_shared<MpiProcessGroup>(comm, this->name() + " (host)");
  g.watchdog = std::thread([state = state_.get()] { state->watch(); });
  trace::add_flusher(state_.get(), [state = state_.get()] {
    std::lock_guard<std::mutex> lock(state->mu);
    cudaSetDevice(state->device);
    state->sweep_completed();
  });
}

NcclProcessGroup::~NcclProcessGroup() {
  trace::remove_flusher(state_.get());
  NcclGroupState& g = *state_;
  {
    std::unique_lock<std::mutex> lock(g.mu);
    if (g.timed_out) {
      std::string message = "shutting down " + g.describe_group() + " after a timeout: " + g.failure;
      lock.unlock();
      g.abort_job(message);
    }
    g.stopping = true;
  }
  g.cv.notify_all();
  // The watchdog returns once the outstanding work is done, or ends the job.
  if (g.watchdog.joinable()) g.watchdog.join();
  cudaSetDevice(g.device);
  if (g.comm != nullptr) ncclCommDestroy(g.comm);
  if (g.scratch != nullptr) cudaFree(g.scratch);
  if (g.ready != nullptr) cudaEventDestroy(g.ready);
  if (g.trace_reference != nullptr) cudaEventDestroy(g.trace_reference);
  if (g.stream != nullptr) cudaStreamDestroy(g.stream);
  if (g.mpi_comm != MPI_COMM_NULL && detail::mpi_running()) {
    auto lock = detail::lock_mpi();
    MPI_Comm_free(&g.mpi_comm);
  }
}

ProcessGroup& NcclProcessGroup::host_group() {
  host_->set_timeout(timeout());
  return *host_;
}

void NcclProcessGroup::set_stream(cudaStream_t stream) { state_->caller.store(stream); }
cudaStream_t NcclProcessGroup::stream() const { return state_->caller.load(); }
cudaStream_t NcclProcessGroup::comm_stream() const { return state_->stream; }
int NcclProcessGroup::device() const { return state_->device; }

std::shared_ptr<Work> NcclProcessGroup::allreduce(Tensor& tensor, ReduceOp op, const std::string& tag) {
  check_allreduce_args(tensor, op);
  check_on_device("allreduce", tensor, device());
  std::string description =
      describe_op(std::string("allreduce (") + reduce_op_name(op) + ")", tensor.numel(), tensor.dtype(), tag);
  return launch(state_, timeout(), std::move(description), tensor.bytes(), {tensor}, false,
                [&](NcclGroupState& g) {
                  void* data = tensor.raw_data();
                  TANDEM_CHECK_NCCL(ncclAllReduce(data, data, static_cast<size_t>(tensor.numel()),
                                                  detail::nccl_type(tensor.dtype()), detail::nccl_op(op),
                                                  g.comm, g.stream));
                });
}

std::shared_ptr<Work> NcclProcessGroup::broadcast(Tensor& tensor, int root, const std::string& tag) {
  check_broadcast_args(tensor, root);
  check_on_device("broadcast", tensor, device());
  std::string description =
      describe_op("broadcast (root " + std::to_string(root) + ")", tensor.numel(), tensor.dtype(), tag);
  return launch(state_, timeout(), std::move(description), tensor.bytes(), {tensor}, false,
                [&](NcclGroupState& g) {
                  void* data = tensor.raw_data();
                  TANDEM_CHECK_NCCL(ncclBroadcast(data, data, static_cast<size_t>(tensor.numel()),
                                                  detail::nccl_type(tensor.dtype()), root, g.comm, g.stream));
                });
}

std::shared_ptr<Work> NcclProcessGroup::allgather_flat(Tensor& out, const Tensor& in,
                                                       const std::string& tag) {
  check_allgather_flat_args(out, in);
  check_on_device("allgather_flat", in, device());
  std::string description = describe_op("allgather", in.numel(), in.dtype(), tag);
  return launch(
      state_, timeout(), std::move(description), in.bytes() * static_cast<size_t>(size()), {out, in}, false,
      [&](NcclGroupState& g) {
        TANDEM_CHECK_NCCL(ncclAllGather(in.raw_data(), out.raw_data(), static_cast<size_t>(in.numel()),
                                        detail::nccl_type(in.dtype()), g.comm, g.stream));
      });
}

std::shared_ptr<Work> NcclProcessGroup::allgather(std::vector<Tensor>& out, const Tensor& in,
                                                  const std::string& tag) {
  check_allgather_args(out, in);
  check_on_device("allgather", in, device());
  std::string description = describe_op("allgather", in.numel(), in.dtype(), tag);
  std::vector<Tensor> keep = out;
  keep.push_back(in);
  return launch(
      state_, timeout(), std::move(description), in.bytes() * static_cast<size_t>(size()), std::move(keep),
      false, [&](NcclGroupState& g) {
        const size_t count = static_cast<size_t>(in.numel());
        const ncclDataType_t type = detail::nccl_type(in.dtype());
        if (are_consecutive_views(out)) {
          TANDEM_CHECK_NCCL(ncclAllGather(in.raw_data(), out[0].raw_data(), count, type, g.comm, g.stream));
          return;
        }
        // Separate outputs: gather into a stream-ordered temporary, then copy each block out.
        const size_t block_bytes = in.bytes();
        char* flat = nullptr;
        TANDEM_CHECK_CUDA(
            cudaMallocAsync(reinterpret_cast<void**>(&flat), block_bytes * out.size(), g.stream));
        TANDEM_CHECK_NCCL(ncclAllGather(in.raw_data(), flat, count, type, g.comm, g.stream));
        for (size_t i = 0; i < out.size(); ++i)
          TANDEM_CHECK_CUDA(cudaMemcpyAsync(out[i].raw_data(), flat + i * block_bytes, block_bytes,
                                            cudaMemcpyDeviceToDevice, g.stream));
        TANDEM_CHECK_CUDA(cudaFreeAsync(flat, g.stream));
      });
}

std::shared_ptr<Work> NcclProcessGroup::barrier(const std::string& tag) {
  return launch(state_, timeout(), "barrier, tag '" + tag + "'", 0, {}, true, [](NcclGroupState& g) {
    TANDEM_CHECK_NCCL(ncclAllReduce(g.scratch, g.scratch, 1, ncclFloat32, ncclSum, g.comm, g.stream));
  });
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::new_subgroup(const std::vector<int>& ranks) {
  check_subgroup_ranks(ranks);
  auto found = std::find(ranks.begin(), ranks.end(), rank());
  const bool member = found != ranks.end();
  std::ostringstream sub_name;
  sub_name << name() << "/{";
  for (size_t i = 0; i < ranks.size(); ++i) sub_name << (i ? "," : "") << ranks[i];
  sub_name << "}";
  MPI_Comm split = MPI_COMM_NULL;
  {
    auto lock = detail::lock_mpi();
    TANDEM_CHECK_MPI(MPI_Comm_split(state_->mpi_comm, member ? 0 : MPI_UNDEFINED,
                                    member ? static_cast<int>(found - ranks.begin()) : 0, &split));
  }
  if (!member) return nullptr;
  auto group = std::make_shared<NcclProcessGroup>(split, device(), sub_name.str());
  group->set_timeout(timeout());
  group->set_stream(stream());
  {
    auto lock = detail::lock_mpi();
    TANDEM_CHECK_MPI(MPI_Comm_free(&split));
  }
  return group;
}

}  // namespace tandem::dist
