#include "runtime/dist/thread_process_group.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "runtime/dist/mpi_reduce_ops.h"

namespace tandem::dist {

namespace detail {

namespace {

using Clock = std::chrono::steady_clock;

enum class OpKind { allreduce, broadcast, allgather, barrier, split };

std::string rank_set(const std::vector<int>& ranks) {
  std::string out = "{";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ranks[i]);
  }
  out += '}';
  return out;
}

// acc = x0, then acc = op(x_r, acc) for r = 1..n-1: one fixed order, so the result does
// not depend on which thread arrives last. A new dtype is one more case below.
template <typename T>
void reduce_typed(const std::vector<const void*>& inputs, void* out, int64_t count, ReduceOp op) {
  T* acc = static_cast<T*>(out);
  std::memcpy(acc, inputs[0], static_cast<size_t>(count) * sizeof(T));
  for (size_t r = 1; r < inputs.size(); ++r) {
    const T* x = static_cast<const T*>(inputs[r]);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        for (int64_t i = 0; i < count; ++i) acc[i] = static_cast<T>(x[i] + acc[i]);
        break;
      case ReduceOp::max:
        for (int64_t i = 0; i < count; ++i) acc[i] = std::max(x[i], acc[i]);
        break;
      case ReduceOp::min:
        for (int64_t i = 0; i < count; ++i) acc[i] = std::min(x[i], acc[i]);
        break;
    }
  }
}

void reduce_16bit(const std::vector<const void*>& inputs, void* out, int64_t count, DType dtype,
                  ReduceOp op) {
  std::memcpy(out, inputs[0], static_cast<size_t>(count) * sizeof(uint16_t));
  for (size_t r = 1; r < inputs.size(); ++r) combine_16bit(inputs[r], out, dtype, count, op);
}

void reduce_in_rank_order(const std::vector<const void*>& inputs, void* out, int64_t count, DType dtype,
                          ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      return reduce_typed<float>(inputs, out, count, op);
    case DType::f64:
      return reduce_typed<double>(inputs, out, count, op);
    case DType::f16:
    case DType::bf16:
      return reduce_16bit(inputs, out, count, dtype, op);
    case DType::i32:
      return reduce_typed<int32_t>(inputs, out, count, op);
    case DType::i64:
      return reduce_typed<int64_t>(inputs, out, count, op);
    case DType::u8:
      return reduce_typed<uint8_t>(inputs, out, count, op);
  }
  TANDEM_FAIL("allreduce (" << reduce_op_name(op) << "): the threads backend has no reduction for dtype "
                            << dtype_name(dtype));
}

}  // namespace

class ThreadWork;

// One rank's part in one collective.
struct Contribution {
  std::shared_ptr<ThreadWork> work;
  std::string signature;  // what every rank must agree on: the description without the tag
  OpKind kind = OpKind::barrier;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  Tensor tensor;             // allreduce, broadcast: in place; allgather: the input
  std::vector<Tensor> outs;  // allgather: one block per rank
  std::vector<int> members;  // split: the subgroup's ranks
  std::string sub_name;
};

struct PendingOp {
  std::vector<Contribution> ranks;  // by rank; work is null until that rank issues it
  int arrived = 0;
};

struct ThreadRendezvous {
  ThreadRendezvous(int size, std::string name)
      : size(size), name(std::move(name)), issued(static_cast<size_t>(size), 0) {}

  const int size;
  const std::string name;
  std::mutex mu;
  std::condition_variable cv;  // every waiter; notified whenever any operation finishes
  std::vector<uint64_t> issued;
  std::map<uint64_t, PendingOp> pending;  // by sequence number
  std::string failure;                    // non-empty: unusable, and why
  std::vector<char> scratch;
  std::vector<std::weak_ptr<ThreadRendezvous>> children;

  std::string describe() const {
    return "thread process group '" + name + "' of " + std::to_string(size) + " ranks";
  }
  // With mu held.
  void complete(uint64_t sequence, PendingOp& op);
  // `work` passed its deadline: fails the rendezvous and returns the error message.
  std::string time_out(const ThreadWork& work);
  void execute(PendingOp& op);
  void fail(const std::string& reason, const ThreadWork* except = nullptr);
  // Takes mu; cascades to the subgroups.
  void abort(const std::string& reason);
};

class ThreadWork final : public Work {
 public:
  ThreadWork(std::shared_ptr<ThreadRendezvous> rendezvous, int rank, std::string description, size_t bytes,
             std::chrono::milliseconds timeout, uint64_t sequence)
      : rendezvous_(std::move(rendezvous)),
        rank_(rank),
        description_(std::move(description)),
        bytes_(bytes),
        timeout_(timeout),
        deadline_(Clock::now() + timeout),
        sequence_(sequence) {}

  void wait() override {
    std::unique_lock<std::mutex> lock(rendezvous_->mu);
    if (!rendezvous_->cv.wait_until(lock, deadline_, [&] { return done_.load(); })) {
      std::string message = rendezvous_->time_out(*this);
      lock.unlock();
      TANDEM_FAIL(message);
    }
    if (error_) std::rethrow_exception(error_);
  }

  bool is_completed() const override { return done_.load(); }
  const std::string& description() const override { return description_; }
  uint64_t sequence() const { return sequence_; }
  int rank() const { return rank_; }
  size_t bytes() const { return bytes_; }
  Clock::time_point deadline() const { return deadline_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // With the rendezvous' mu held.
  void finish(std::exception_ptr error) {
    error_ = std::move(error);
    done_.store(true);
  }
  std::shared_ptr<ThreadRendezvous> subgroup;  // new_subgroup's result, set with mu held

 private:
  std::shared_ptr<ThreadRendezvous> rendezvous_;
  int rank_;
  std::string description_;
  size_t bytes_;
  std::chrono::milliseconds timeout_;
  Clock::time_point deadline_;
  uint64_t sequence_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
};

std::string ThreadRendezvous::time_out(const ThreadWork& work) {
  const std::string where = " (collective #" + std::to_string(work.sequence()) + " of " + describe() + ")";
  if (!failure.empty())
    return work.description() + where + " cannot complete: " + failure;  // timed out before
  std::ostringstream detail;
  detail << work.bytes() << " bytes, collective #" << work.sequence() << " of " << describe();
  if (auto it = pending.find(work.sequence()); it != pending.end()) {
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      if (!it->second.ranks[static_cast<size_t>(r)].work) missing.push_back(r);
    }
    if (missing.size() == 1) {
      detail << "; not issued by rank " << missing[0];
    } else {
      detail << "; not issued by ranks " << rank_set(missing);
    }
  }
  std::string message = timeout_message(work.description(), work.timeout(), work.rank(), size, detail.str());
  fail(message, &work);
  return message;
}

void ThreadRendezvous::complete(uint64_t sequence, PendingOp& op) {
  const Contribution& first = op.ranks[0];
  bool agree = true;
  for (const Contribution& c : op.ranks) agree = agree && c.signature == first.signature;
  std::exception_ptr error;
  std::string reason;
  if (!agree) {
    std::ostringstream os;
    os << "collective #" << sequence << " of " << describe() << ": the ranks issued different operations (";
    for (int r = 0; r < size; ++r) {
      os << (r ? "; " : "") << "rank " << r << ": " << op.ranks[static_cast<size_t>(r)].work->description();
    }
    os << "); every rank must issue the same collectives in the same order";
    reason = os.str();
    error = std::make_exception_ptr(Error(__FILE__, __LINE__, reason));
  } else {
    try {
      execute(op);
    } catch (const std::exception& e) {
      error = std::current_exception();
      reason = first.work->description() + " failed on " + describe() + ": " + e.what();
    }
  }
  for (Contribution& c : op.ranks) c.work->finish(error);
  // Ranks are out of step after a failure: later collectives could pair the wrong operations.
  if (error) fail(reason);
  cv.notify_all();
}

void ThreadRendezvous::execute(PendingOp& op) {
  const Contribution& first = op.ranks[0];
  switch (first.kind) {
    case OpKind::allreduce: {
      const size_t bytes = first.tensor.bytes();
      if (bytes == 0) return;
      std::vector<const void*> inputs;
      for (const Contribution& c : op.ranks) inputs.push_back(c.tensor.raw_data());
      scratch.resize(bytes);
      reduce_in_rank_order(inputs, scratch.data(), first.tensor.numel(), first.tensor.dtype(), first.op);
      if (first.op == ReduceOp::avg)
        divide_in_place(scratch.data(), first.tensor.dtype(), first.tensor.numel(), size);
      for (const Contribution& c : op.ranks) std::memcpy(c.tensor.raw_data(), scratch.data(), bytes);
      return;
    }
    case OpKind::broadcast: {
      const Tensor& source = op.ranks[static_cast<size_t>(first.root)].tensor;
      if (source.bytes() == 0) return;
      for (const Contribution& c : op.ranks)
        std::memmove(c.tensor.raw_data(), source.raw_data(), source.bytes());
      return;
    }
    case OpKind::allgather: {
      // Through scratch: an input may be one of its own rank's output blocks (in place).
      const size_t block = first.tensor.bytes();
      if (block == 0) return;
      scratch.resize(block * static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) {
        std::memcpy(scratch.data() + static_cast<size_t>(r) * block,
                    op.ranks[static_cast<size_t>(r)].tensor.raw_data(), block);
      }
      for (const Contribution& c : op.ranks) {
        for (int r = 0; r < size; ++r) {
          std::memcpy(c.outs[static_cast<size_t>(r)].raw_data(),
                      scratch.data() + static_cast<size_t>(r) * block, block);
        }
      }
      return;
    }
    case OpKind::barrier:
      return;
    case OpKind::split: {
      auto sub = std::make_shared<ThreadRendezvous>(static_cast<int>(first.members.size()), first.sub_name);
      std::erase_if(children, [](const std::weak_ptr<ThreadRendezvous>& c) { return c.expired(); });
      children.push_back(sub);
      for (int r : first.members) op.ranks[static_cast<size_t>(r)].work->subgroup = sub;
      return;
    }
  }
}

void ThreadRendezvous::fail(const std::string& reason, const ThreadWork* except) {
  if (!failure.empty()) return;
  failure = reason;
  for (auto& [sequence, op] : pending) {
    for (Contribution& c : op.ranks) {
      if (!c.work || c.work.get() == except) continue;
      c.work->finish(
          std::make_exception_ptr(Error(__FILE__, __LINE__,
                                        c.work->description() + " (collective #" + std::to_string(sequence) +
                                            " of " + describe() + ") cannot complete: " + reason)));
    }
  }
  pending.clear();
  cv.notify_all();
}

void ThreadRendezvous::abort(const std::string& reason) {
  std::vector<std::shared_ptr<ThreadRendezvous>> subgroups;
  {
    std::lock_guard<std::mutex> lock(mu);
    fail(reason);
    for (const auto& weak : children) {
      if (auto child = weak.lock()) subgroups.push_back(std::move(child));
    }
  }
  for (const auto& child : subgroups) child->abort(reason);
}

}  // namespace detail

namespace {

using detail::Contribution;
using detail::OpKind;
using detail::ThreadRendezvous;
using detail::ThreadWork;

void check_cpu(const char* op, const Tensor& tensor) {
  TANDEM_CHECK(
      tensor.device().is_cpu(),
      op << ": " << tensor.str() << " is not on the CPU; the threads backend takes CPU tensors only");
}

Contribution part_of(OpKind kind, const Tensor& tensor) {
  Contribution part;
  part.kind = kind;
  part.tensor = tensor;
  return part;
}

// Adds this rank's part of `what` (on part.tensor, if any); the last rank to arrive runs
// the operation on its own thread.
std::shared_ptr<Work> issue(const std::shared_ptr<ThreadRendezvous>& rendezvous, const ProcessGroup& group,
                            const std::string& what, const std::string& tag, size_t bytes,
                            Contribution part) {
  const int64_t count = part.tensor.defined() ? part.tensor.numel() : -1;  // -1: no element count
  part.signature = describe_op(what, count, part.tensor.dtype(), "");
  std::string description = describe_op(what, count, part.tensor.dtype(), tag);
  ThreadRendezvous& rv = *rendezvous;
  std::lock_guard<std::mutex> lock(rv.mu);
  TANDEM_CHECK(rv.failure.empty(), description << ": " << rv.describe()
                                               << " is unusable after an earlier failure: " << rv.failure);
  const int rank = group.rank();
  const uint64_t sequence = ++rv.issued[static_cast<size_t>(rank)];
  part.work = std::make_shared<ThreadWork>(rendezvous, rank, std::move(description), bytes, group.timeout(),
                                           sequence);
  std::shared_ptr<Work> work = part.work;
  detail::PendingOp& op = rv.pending[sequence];
  if (op.ranks.empty()) op.ranks.resize(static_cast<size_t>(rv.size));
  op.ranks[static_cast<size_t>(rank)] = std::move(part);
  if (++op.arrived == rv.size) {
    detail::PendingOp ready = std::move(op);
    rv.pending.erase(sequence);
    rv.complete(sequence, ready);
  }
  return work;
}

std::vector<std::shared_ptr<ProcessGroup>> make_groups(const std::shared_ptr<ThreadRendezvous>& rendezvous) {
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  for (int r = 0; r < rendezvous->size; ++r)
    groups.push_back(std::make_shared<ThreadProcessGroup>(rendezvous, r));
  return groups;
}

std::string describe_exception(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

ThreadProcessGroup::ThreadProcessGroup(std::shared_ptr<detail::ThreadRendezvous> rendezvous, int rank)
    : ProcessGroup(rank, rendezvous->size, rendezvous->name), rendezvous_(std::move(rendezvous)) {}

ThreadProcessGroup::~ThreadProcessGroup() {
  ThreadRendezvous& rv = *rendezvous_;
  std::unique_lock<std::mutex> lock(rv.mu);
  auto first_pending = [&]() -> std::shared_ptr<ThreadWork> {
    for (const auto& [sequence, op] : rv.pending) {
      if (const auto& work = op.ranks[static_cast<size_t>(rank())].work) return work;
    }
    return nullptr;
  };
  while (std::shared_ptr<ThreadWork> work = first_pending()) {
    if (!rv.cv.wait_until(lock, work->deadline(), [&] { return work->is_completed(); })) {
      rv.fail(timeout_message(work->description(), work->timeout(), rank(), size(),
                              "collective #" + std::to_string(work->sequence()) + ", while destroying rank " +
                                  std::to_string(rank()) + "'s group of " + rv.describe()));
    }
  }
}

void ThreadProcessGroup::abort(const std::string& reason) { rendezvous_->abort(reason); }

std::shared_ptr<Work> ThreadProcessGroup::allreduce(Tensor& tensor, ReduceOp op, const std::string& tag) {
  check_allreduce_args(tensor, op);
  check_cpu("allreduce", tensor);
  Contribution part = part_of(OpKind::allreduce, tensor);
  part.op = op;
  return issue(rendezvous_, *this, std::string("allreduce (") + reduce_op_name(op) + ")", tag, tensor.bytes(),
               std::move(part));
}

std::shared_ptr<Work> ThreadProcessGroup::broadcast(Tensor& tensor, int root, const std::string& tag) {
  check_broadcast_args(tensor, root);
  check_cpu("broadcast", tensor);
  Contribution part = part_of(OpKind::broadcast, tensor);
  part.root = root;
  return issue(rendezvous_, *this, "broadcast (root " + std::to_string(root) + ")", tag, tensor.bytes(),
               std::move(part));
}

std::shared_ptr<Work> ThreadProcessGroup::allgather(std::vector<Tensor>& out, const Tensor& in,
                                                    const std::string& tag) {
  check_allgather_args(out, in);
  check_cpu("allgather", in);
  Contribution part = part_of(OpKind::allgather, in);
  part.outs = out;
  return issue(rendezvous_, *this, "allgather", tag, in.bytes() * static_cast<size_t>(size()),
               std::move(part));
}

std::shared_ptr<Work> ThreadProcessGroup::allgather_flat(Tensor& out, const Tensor& in,
                                                         const std::string& tag) {
  check_allgather_flat_args(out, in);
  check_cpu("allgather_flat", in);
  // The same operation as allgather into size() consecutive views, as it is for MPI.
  std::vector<Tensor> blocks;
  for (int r = 0; r < size(); ++r) blocks.push_back(out.view_range(r * in.numel(), {in.numel()}));
  return allgather(blocks, in, tag);
}

std::shared_ptr<Work> ThreadProcessGroup::barrier(const std::string& tag) {
  return issue(rendezvous_, *this, "barrier", tag, 0, part_of(OpKind::barrier, Tensor()));
}

std::shared_ptr<ProcessGroup> ThreadProcessGroup::new_subgroup(const std::vector<int>& ranks) {
  check_subgroup_ranks(ranks);
  std::string sub_name = name() + "/" + detail::rank_set(ranks);
  Contribution part = part_of(OpKind::split, Tensor());
  part.members = ranks;
  part.sub_name = sub_name;
  std::shared_ptr<Work> work = issue(rendezvous_, *this, "new_subgroup " + sub_name, "", 0, std::move(part));
  work->wait();
  auto found = std::find(ranks.begin(), ranks.end(), rank());
  if (found == ranks.end()) return nullptr;
  auto group = std::make_shared<ThreadProcessGroup>(static_cast<ThreadWork&>(*work).subgroup,
                                                    static_cast<int>(found - ranks.begin()));
  group->set_timeout(timeout());
  return group;
}

std::vector<std::shared_ptr<ProcessGroup>> make_thread_groups(int size, const std::string& name) {
  TANDEM_CHECK(size >= 1, "make_thread_groups: size " << size << " (needs at least one rank)");
  return make_groups(std::make_shared<ThreadRendezvous>(size, name));
}

void run_ranks(int size, const std::function<void(std::shared_ptr<ProcessGroup>)>& fn) {
  TANDEM_CHECK(size >= 1, "run_ranks: size " << size << " (needs at least one rank)");
  auto rendezvous = std::make_shared<ThreadRendezvous>(size, "world");
  std::vector<std::shared_ptr<ProcessGroup>> groups = make_groups(rendezvous);
  std::mutex mu;
  int first_rank = -1;
  std::string first_message;
  auto record = [&](int rank, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (first_rank < 0) {
        first_rank = rank;
        first_message = message;
      }
    }
    // The others may be waiting for this rank: fail them now rather than at their timeout.
    rendezvous->abort("rank " + std::to_string(rank) + " threw: " + message);
  };
  std::vector<std::thread> threads;
  try {
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r, group = std::move(groups[static_cast<size_t>(r)])]() mutable {
        try {
          fn(group);
        } catch (...) {
          record(r, describe_exception(std::current_exception()));
        }
        group.reset();  // on this rank's thread: its destructor may wait for pending operations
      });
    }
  } catch (...) {
    record(static_cast<int>(threads.size()), "could not start its thread");
    for (std::thread& t : threads) t.join();
    throw;
  }
  for (std::thread& t : threads) t.join();
  if (first_rank >= 0) TANDEM_FAIL("rank " << first_rank << " of " << size << " threw: " << first_message);
}

}  // namespace tandem::dist
