#include "runtime/dist/process_group.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "runtime/env_number.h"

namespace tandem::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::mpi:
      return "mpi";
    case Backend::nccl:
      return "nccl";
    case Backend::threads:
      return "threads";
  }
  return "?";
}

std::chrono::milliseconds default_timeout() {
  // At most about 11.6 days: a deadline of now + timeout must not overflow the clock.
  const double seconds = env_number(kTimeoutEnvVar, 0.001, 1e6, "seconds").value_or(kDefaultTimeoutS);
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(seconds * 1000)));
}

std::chrono::milliseconds startup_timeout() {
  const std::optional<double> seconds = env_number(kStartupTimeoutEnvVar, 0.001, 1e6, "seconds");
  if (!seconds)
    return std::max(default_timeout(), std::chrono::milliseconds(llround(kMinStartupTimeoutS * 1000)));
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(*seconds * 1000)));
}

ProcessGroup::ProcessGroup(int rank, int size, std::string name)
    : rank_(rank), size_(size), name_(std::move(name)), timeout_ms_(default_timeout().count()) {}

void ProcessGroup::set_timeout(std::chrono::milliseconds timeout) {
  TANDEM_CHECK(timeout.count() > 0, "set_timeout: the timeout of process group '"
                                        << name_ << "' must be positive, got " << timeout.count() << " ms");
  timeout_ms_.store(timeout.count());
}

void ProcessGroup::check_allreduce_args(const Tensor& tensor, ReduceOp op) const {
  check_defined("allreduce", tensor, "the tensor");
  TANDEM_CHECK(op != ReduceOp::avg || is_floating(tensor.dtype()),
               "allreduce (avg) of " << tensor.str() << ": an average of integers is not an integer; "
                                     << "reduce with sum and divide, or use a floating-point dtype");
}

void ProcessGroup::check_broadcast_args(const Tensor& tensor, int root) const {
  check_defined("broadcast", tensor, "the tensor");
  TANDEM_CHECK(root >= 0 && root < size_, "broadcast: root " << root << " is not a rank of process group '"
                                                             << name_ << "' (size " << size_ << ")");
}

void ProcessGroup::check_allgather_args(const std::vector<Tensor>& out, const Tensor& in) const {
  check_defined("allgather", in, "the input");
  TANDEM_CHECK(static_cast<int>(out.size()) == size_,
               "allgather: " << out.size() << " output tensors for a process group of size " << size_);
  for (size_t i = 0; i < out.size(); ++i) {
    TANDEM_CHECK(out[i].defined(), "allgather: output " << i << " is an undefined tensor");
    TANDEM_CHECK(
        out[i].numel() == in.numel() && out[i].dtype() == in.dtype() && out[i].device() == in.device(),
        "allgather: output " << i << " is " << out[i].str() << ", the input is " << in.str()
                             << " (element count, dtype and device must match)");
  }
}

void ProcessGroup::check_allgather_flat_args(const Tensor& out, const Tensor& in) const {
  check_defined("allgather_flat", in, "the input");
  check_defined("allgather_flat", out, "the output");
  TANDEM_CHECK(out.numel() == in.numel() * size_ && out.dtype() == in.dtype() && out.device() == in.device(),
               "allgather_flat: output " << out.str() << " for input " << in.str() << " in a group of "
                                         << size_ << " (needs " << in.numel() * size_
                                         << " elements of the input's dtype and device)");
}

void ProcessGroup::check_subgroup_ranks(const std::vector<int>& ranks) const {
  TANDEM_CHECK(!ranks.empty(), "new_subgroup: the rank list is empty");
  std::set<int> seen;
  for (int r : ranks) {
    TANDEM_CHECK(r >= 0 && r < size_, "new_subgroup: rank " << r << " is not a rank of process group '"
                                                            << name_ << "' (size " << size_ << ")");
    TANDEM_CHECK(seen.insert(r).second, "new_subgroup: rank " << r << " is listed twice");
  }
}

std::string describe_op(const std::string& op, int64_t count, DType dtype, const std::string& tag) {
  // Built for every operation issued, so plain appends rather than a stream.
  std::string out = op;
  if (count >= 0) {
    out += " of ";
    out += std::to_string(count);
    out += ' ';
    out += dtype_name(dtype);
    out += " elements";
  }
  out += ", tag '";
  out += tag;
  out += '\'';
  return out;
}

std::string timeout_message(const std::string& description, std::chrono::milliseconds timeout, int rank,
                            int size, const std::string& detail) {
  std::ostringstream os;
  os << description << ", timed out after " << static_cast<double>(timeout.count()) / 1000.0 << " s on rank "
     << rank << " of " << size;
  if (!detail.empty()) os << " (" << detail << ")";
  os << "; every rank must issue the same collectives in the same order, and one that skipped, "
        "reordered or never reached this one makes the others wait";
  return os.str();
}

bool are_consecutive_views(const std::vector<Tensor>& out) {
  for (size_t i = 1; i < out.size(); ++i) {
    if (!out[i].shares_storage_with(out[0]) ||
        out[i].offset() != out[0].offset() + static_cast<int64_t>(i) * out[0].numel())
      return false;
  }
  return true;
}

namespace {

template <typename Collective>
void through_device(ProcessGroup& group, Tensor& host, Collective&& collective) {
  TANDEM_CHECK(host.device().is_cpu(), "a host collective needs a CPU tensor, got " << host.str());
  Device device = group.tensor_device();
  if (device.is_cpu()) {
    collective(host)->wait();
    return;
  }
  Tensor staged = host.to(device);
  collective(staged)->synchronize();
  host.copy_(staged);
}

}  // namespace

void allreduce_host(ProcessGroup& group, Tensor& host, ReduceOp op, const std::string& tag) {
  ProcessGroup& on = group.host_group();
  through_device(on, host, [&](Tensor& t) { return on.allreduce(t, op, tag); });
}

void broadcast_host(ProcessGroup& group, Tensor& host, int root, const std::string& tag) {
  ProcessGroup& on = group.host_group();
  through_device(on, host, [&](Tensor& t) { return on.broadcast(t, root, tag); });
}

std::string broadcast_string(ProcessGroup& group, const std::string& text, int root, const std::string& tag) {
  Tensor length = Tensor::empty({1}, DType::i64);
  length.data<int64_t>()[0] = static_cast<int64_t>(text.size());
  broadcast_host(group, length, root, tag + " (length)");
  const int64_t n = length.data<int64_t>()[0];
  Tensor bytes = Tensor::zeros({n}, DType::u8);
  if (group.rank() == root && n > 0) std::memcpy(bytes.raw_data(), text.data(), static_cast<size_t>(n));
  if (n > 0) broadcast_host(group, bytes, root, tag);
  return std::string(static_cast<const char*>(bytes.raw_data()), static_cast<size_t>(n));
}

}  // namespace tandem::dist
