#include "reducer/sync_batch_norm.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "kernels/norm.h"

namespace tandem {

namespace {

// Host values -> a [n] tensor of `dtype` on `device`.
Tensor to_device(const std::vector<double>& values, DType dtype, Device device) {
  return Tensor::from_values({static_cast<int64_t>(values.size())}, values, dtype).to(device);
}

std::vector<double> to_host(const Tensor& t) { return t.to(Device::cpu()).to_vector(); }

// [C] per-channel values broadcast to x's shape.
Tensor per_channel(const Tensor& values, const Tensor& like) {
  return kernels::add_bias(Tensor::zeros(like.shape(), like.dtype(), like.device()), values);
}

// The per-rank sums run in double: summed in float32, a channel whose mean is large
// against its spread (mean 50, std 0.5) loses the digits that the combination over ranks
// then cannot restore. A float32 input costs one float64 copy per pass.
Tensor in_f64(const Tensor& t) { return t.dtype() == DType::f64 ? t : t.to(DType::f64); }

struct GlobalStats {
  std::vector<double> mean, var;  // biased variance
  double count = 0;
};

// All-gathers [mean (C), sum of squared deviations (C), count] of every rank in float64 and
// combines them (Chan et al.'s pairwise update, in double).
GlobalStats gather_stats(const Tensor& x, dist::ProcessGroup& group, const std::string& name) {
  const int64_t c = x.size(1);
  const int64_t count = c == 0 ? 0 : x.numel() / c;
  std::vector<double> local(2 * c + 1, 0.0);
  if (count > 0) {
    Tensor x64 = in_f64(x);
    Tensor mean = kernels::scale(kernels::bias_grad(x64), 1.0 / static_cast<double>(count));
    Tensor centered = kernels::add_bias(x64, kernels::neg(mean));
    std::vector<double> m = to_host(mean), m2 = to_host(kernels::bias_grad(kernels::square(centered)));
    for (int64_t ch = 0; ch < c; ++ch) {
      local[ch] = m[ch];
      local[c + ch] = m2[ch];
    }
  }
  local[2 * c] = static_cast<double>(count);
  Tensor mine = to_device(local, DType::f64, group.tensor_device());
  Tensor all = Tensor::empty({group.size() * (2 * c + 1)}, DType::f64, group.tensor_device());
  // The tag names the way out for the usual mistake (a timeout prints it): a training-mode
  // forward that some ranks run alone, such as a sample grid made on rank 0.
  group
      .allgather_flat(all, mine,
                      "SyncBatchNorm '" + name +
                          "' forward (every rank runs it in training mode; a forward on some ranks only: "
                          "eval() or nn::LocalBatchStatsScope)")
      ->synchronize();
  std::vector<double> gathered = to_host(all);

  GlobalStats s;
  s.mean.assign(c, 0.0);
  s.var.assign(c, 0.0);
  std::vector<double> m2(c, 0.0);
  for (int r = 0; r < group.size(); ++r) {
    const double* block = gathered.data() + r * (2 * c + 1);
    const double n_r = block[2 * c];
    if (n_r == 0) continue;
    const double n = s.count + n_r;
    for (int64_t ch = 0; ch < c; ++ch) {
      const double delta = block[ch] - s.mean[ch];
      s.mean[ch] += delta * n_r / n;
      m2[ch] += block[c + ch] + delta * delta * s.count * n_r / n;
    }
    s.count = n;
  }
  TANDEM_CHECK(s.count >= 2, "SyncBatchNorm '" << name << "': the global batch has " << s.count
                                               << " value(s) per channel over " << group.size()
                                               << " rank(s); training mode needs at least 2");
  for (int64_t ch = 0; ch < c; ++ch) s.var[ch] = m2[ch] / s.count;
  return s;
}

void update_running(Tensor& running, const std::vector<double>& batch, double momentum) {
  if (!running.defined()) return;
  std::vector<double> r = to_host(running);
  for (size_t i = 0; i < r.size(); ++i) r[i] = (1.0 - momentum) * r[i] + momentum * batch[i];
  running.copy_(Tensor::from_values(running.shape(), r, running.dtype()));
}

}  // namespace

Variable sync_batch_norm(const Variable& x, const Variable& gamma, const Variable& beta, Tensor& running_mean,
                         Tensor& running_var, double momentum, double eps,
                         const std::shared_ptr<dist::ProcessGroup>& group_ptr, const std::string& name) {
  TANDEM_CHECK(group_ptr != nullptr, "SyncBatchNorm '" << name << "': the process group is null");
  dist::ProcessGroup& group = *group_ptr;
  TANDEM_CHECK(x.dim() >= 2 && x.dim() <= 4, "SyncBatchNorm '"
                                                 << name << "': needs [N, C], [N, C, L] or [N, C, H, W], got "
                                                 << shape_str(x.shape()));
  TANDEM_CHECK(x.data().device() == group.tensor_device(),
               "SyncBatchNorm '" << name << "': input on " << x.data().device().str()
                                 << " but process group '" << group.name() << "' ("
                                 << dist::backend_name(group.backend()) << ") works on "
                                 << group.tensor_device().str());
  const int64_t c = x.size(1);
  GlobalStats stats = gather_stats(x.data(), group, name);
  std::vector<double> unbiased(c);
  for (int64_t ch = 0; ch < c; ++ch) unbiased[ch] = stats.var[ch] * stats.count / (stats.count - 1);
  update_running(running_mean, stats.mean, momentum);
  update_running(running_var, unbiased, momentum);

  // A bfloat16 x (BatchNorm's input under a bfloat16 compute dtype, autograd/nn.h) is read
  // widened; the output, statistics and gradients are float32, as batch_norm's.
  const DType dtype = accumulate_dtype(x.data().dtype());
  const Device device = x.data().device();
  Tensor g = gamma.defined() ? gamma.data() : Tensor(), b = beta.defined() ? beta.data() : Tensor();
  const bool empty = x.numel() == 0;
  Tensor y = empty ? Tensor::zeros(x.shape(), dtype, device)
                   : kernels::batch_norm_eval(x.data(), g, b, to_device(stats.mean, dtype, device),
                                              to_device(stats.var, dtype, device), eps);

  auto backward = [X = x.data(), G = g, dtype, stats = std::move(stats), eps, group_ptr, name](
                      const Tensor& grad, const FunctionNode& node) {
    const int64_t c = X.size(1);
    const bool empty = X.numel() == 0;
    std::vector<double> inv_std(c);
    for (int64_t ch = 0; ch < c; ++ch) inv_std[ch] = 1.0 / std::sqrt(stats.var[ch] + eps);
    // sums = [sum(grad) (C), sum(grad * xhat) (C)] over this rank's slice, in double.
    std::vector<double> sums(2 * c, 0.0);
    Tensor grad64, centered;
    if (!empty) {
      grad64 = in_f64(grad);
      centered = kernels::add_bias(in_f64(X), kernels::neg(to_device(stats.mean, DType::f64, X.device())));
      std::vector<double> sum_dy = to_host(kernels::bias_grad(grad64));
      std::vector<double> sum_dy_xmu = to_host(kernels::bias_grad(kernels::mul(grad64, centered)));
      for (int64_t ch = 0; ch < c; ++ch) {
        sums[ch] = sum_dy[ch];
        sums[c + ch] = sum_dy_xmu[ch] * inv_std[ch];
      }
    }
    Tensor gx;
    if (node.needs_input_grad(0)) {
      Tensor both = to_device(sums, DType::f64, group_ptr->tensor_device());
      group_ptr->allreduce(both, dist::ReduceOp::sum, "SyncBatchNorm '" + name + "' backward")->synchronize();
      std::vector<double> global = to_host(both);
      if (empty) {
        gx = Tensor::zeros(X.shape(), dtype, X.device());
      } else {
        // dx = a (grad - sum_dy / N - xhat sum_dy_xhat / N) with a = gamma inv_std, written
        // as grad a + (x - mean) b + k, in double.
        std::vector<double> gam = G.defined() ? to_host(G) : std::vector<double>(c, 1.0);
        std::vector<double> a(c), b(c), k(c);
        for (int64_t ch = 0; ch < c; ++ch) {
          a[ch] = gam[ch] * inv_std[ch];
          b[ch] = -a[ch] * inv_std[ch] * global[c + ch] / stats.count;
          k[ch] = -a[ch] * global[ch] / stats.count;
        }
        Tensor ta = to_device(a, DType::f64, X.device()), tb = to_device(b, DType::f64, X.device());
        gx = kernels::add_bias(kernels::add(kernels::mul(grad64, per_channel(ta, grad64)),
                                            kernels::mul(centered, per_channel(tb, centered))),
                               to_device(k, DType::f64, X.device()))
                 .to(dtype);
      }
    }
    const std::vector<double> sum_dy(sums.begin(), sums.begin() + c),
        sum_dy_xhat(sums.begin() + c, sums.end());
    Tensor gg = node.needs_input_grad(1) ? to_device(sum_dy_xhat, dtype, X.device()) : Tensor();
    Tensor gb = node.needs_input_grad(2) ? to_device(sum_dy, dtype, X.device()) : Tensor();
    return std::vector<Tensor>{gx, gg, gb};
  };
  return make_result(y, "sync_batch_norm", {x, gamma, beta}, std::move(backward));
}

namespace nn {

namespace {

thread_local bool local_batch_stats = false;

void make_synchronised(BatchNorm& bn, std::shared_ptr<dist::ProcessGroup> group) {
  TANDEM_CHECK(group != nullptr, "convert_sync_batchnorm: " << bn.type_name() << " '" << bn.path()
                                                            << "': the process group is null");
  bn.set_train_forward(
      [group](BatchNorm& m, const Variable& x) {
        if (LocalBatchStatsScope::active()) {
          return batch_norm(x, m.weight, m.bias, m.running_mean, m.running_var, true, m.momentum, m.eps);
        }
        return sync_batch_norm(x, m.weight, m.bias, m.running_mean, m.running_var, m.momentum, m.eps, group,
                               m.path().empty() ? m.type_name() : m.path());
      },
      "Sync");
}

// 3 ([N, C, L]) builds the same module as 2: BatchNorm1d takes both.
int64_t checked_input_dim(int64_t input_dim) {
  TANDEM_CHECK(
      input_dim >= 2 && input_dim <= 4,
      "SyncBatchNorm: input_dim must be 2 ([N, C]), 3 ([N, C, L]) or 4 ([N, C, H, W]), got " << input_dim);
  return input_dim == 4 ? 4 : 2;
}

}  // namespace

LocalBatchStatsScope::LocalBatchStatsScope() : previous_(local_batch_stats) { local_batch_stats = true; }
LocalBatchStatsScope::~LocalBatchStatsScope() { local_batch_stats = previous_; }
bool LocalBatchStatsScope::active() { return local_batch_stats; }

SyncBatchNorm::SyncBatchNorm(int64_t num_features, int64_t input_dim,
                             std::shared_ptr<dist::ProcessGroup> group, double eps, double momentum)
    : SyncBatchNorm(num_features, input_dim, std::move(group), {.eps = eps, .momentum = momentum}) {}

SyncBatchNorm::SyncBatchNorm(int64_t num_features, int64_t input_dim,
                             std::shared_ptr<dist::ProcessGroup> group, const BatchNormOptions& options)
    : BatchNorm(num_features, options, checked_input_dim(input_dim)) {
  make_synchronised(*this, std::move(group));
}

int convert_sync_batchnorm(Module& module, std::shared_ptr<dist::ProcessGroup> group) {
  int converted = 0;
  for (auto& [path, m] : module.named_modules()) {
    if (auto* bn = dynamic_cast<BatchNorm*>(m)) {
      make_synchronised(*bn, group);
      ++converted;
    }
  }
  return converted;
}

}  // namespace nn
}  // namespace tandem
