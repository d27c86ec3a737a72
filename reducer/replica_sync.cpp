#include "reducer/replica_sync.h"

#include <bit>
#include <cstring>
#include <sstream>

namespace tandem {

namespace {

std::string describe(const TensorDescription& d) {
  return "'" + d.name + "' " + dtype_name(d.tensor->dtype()) + shape_str(d.tensor->shape());
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

}  // namespace

void verify_replicas(dist::ProcessGroup& group, const std::vector<TensorDescription>& tensors,
                     const std::string& what) {
  std::string mine;
  for (const auto& d : tensors) mine += describe(d) + "\n";
  std::string rank0 = dist::broadcast_string(group, mine, 0, "verify " + what);
  std::vector<std::string> theirs = split_lines(rank0), ours = split_lines(mine);
  std::string problem;
  int r = group.rank();
  for (size_t i = 0; i < std::max(theirs.size(), ours.size()) && problem.empty(); ++i) {
    if (i >= ours.size()) {
      problem = what + " " + std::to_string(i) + ": rank 0 has " + theirs[i] + ", rank " + std::to_string(r) +
                " has none (" + std::to_string(ours.size()) + " against rank 0's " +
                std::to_string(theirs.size()) + ")";
    } else if (i >= theirs.size()) {
      problem = what + " " + std::to_string(i) + ": rank " + std::to_string(r) + " has " + ours[i] +
                ", rank 0 has none (" + std::to_string(ours.size()) + " against rank 0's " +
                std::to_string(theirs.size()) + ")";
    } else if (theirs[i] != ours[i]) {
      problem = what + " " + std::to_string(i) + ": rank 0 has " + theirs[i] + ", rank " + std::to_string(r) +
                " has " + ours[i];
    }
  }
  Tensor flags = Tensor::zeros({group.size()}, DType::i32);
  if (!problem.empty()) flags.data<int32_t>()[r] = 1;
  dist::allreduce_host(group, flags, dist::ReduceOp::sum, "verify " + what + " (result)");
  std::string differing;
  for (int i = 0; i < group.size(); ++i) {
    if (flags.data<int32_t>()[i] != 0) differing += (differing.empty() ? "" : ", ") + std::to_string(i);
  }
  if (differing.empty()) return;
  if (!problem.empty()) TANDEM_FAIL("model differs across ranks: " << problem);
  TANDEM_FAIL("model differs across ranks: rank(s) " << differing << " differ from rank 0 in their " << what
                                                     << " list (their error names the first difference)");
}

void broadcast_from_rank0(dist::ProcessGroup& group, const std::vector<Tensor*>& tensors,
                          const std::string& tag, const DistFunction& broadcast_function) {
  if (broadcast_function) {
    std::vector<Tensor> handles;  // share the tensors' storage: the function writes into them
    handles.reserve(tensors.size());
    for (Tensor* t : tensors) handles.push_back(*t);
    broadcast_function(handles, group);
    return;
  }
  std::vector<std::shared_ptr<dist::Work>> works;
  works.reserve(tensors.size());
  for (Tensor* t : tensors) {
    if (t->numel() > 0) works.push_back(group.broadcast(*t, 0, tag));
  }
  for (auto& w : works) w->wait();
}

namespace {

uint64_t fnv1a(const Tensor& t) {
  Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  const auto* p = static_cast<const unsigned char*>(host.raw_data());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0, n = host.bytes(); i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

void check_replicas_equal(dist::ProcessGroup& group, const std::vector<TensorDescription>& tensors,
                          const std::string& when) {
  const int64_t n = static_cast<int64_t>(tensors.size());
  // Equal on every rank exactly when the max over ranks equals the min.
  Tensor high = Tensor::empty({n}, DType::i64);
  int64_t* h = high.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    h[i] = std::bit_cast<int64_t>(fnv1a(*tensors[static_cast<size_t>(i)].tensor));
  Tensor low = high.clone();
  dist::allreduce_host(group, high, dist::ReduceOp::max, "replica check (max) " + when);
  dist::allreduce_host(group, low, dist::ReduceOp::min, "replica check (min) " + when);
  const int64_t* hi = high.data<int64_t>();
  const int64_t* lo = low.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (hi[i] != lo[i]) {
      const TensorDescription& d = tensors[static_cast<size_t>(i)];
      TANDEM_FAIL("replicas differ " << when << ": '" << d.name << "' (" << d.tensor->str()
                                     << ") is not bitwise the same on all " << group.size()
                                     << " ranks; the first differing tensor of " << n << " checked");
    }
  }
}

}  // namespace tandem
