// SyncBatchNorm at 1-4 thread ranks (dist::run_ranks) against BatchNorm on the global
// batch computed in float64: a float32 channel whose mean is large against its spread
// (mean 50, std 0.5) must come out within 1e-5 relative (each channel against its own
// largest value), as tandem's own float32 BatchNorm on the global batch does; with uneven
// splits and an empty rank, on [N, C], [N, C, L] and [N, C, H, W]. Also the
// BatchNormOptions of a SyncBatchNorm.
// Catch2 assertions are not thread-safe: ranks record what they saw, the main thread checks.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "kernels/shape_ops.h"
#include "reducer/sync_batch_norm.h"
#include "runtime/dist/thread_process_group.h"
#include "tests/reducer/gan_fixture.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

constexpr int64_t kChannels = 2;
constexpr int64_t kGlobalRows = 11;
constexpr double kTolerance = 1e-5;

// Rows per rank: every rank count gets an uneven split, and from 2 ranks a split with an
// empty rank.
std::vector<std::vector<int64_t>> splits(int size) {
  switch (size) {
    case 1:
      return {{11}};
    case 2:
      return {{4, 7}, {0, 11}};
    case 3:
      return {{5, 3, 3}, {2, 0, 9}};
    default:
      return {{3, 3, 3, 2}, {1, 6, 0, 4}};
  }
}

// Channel 0 ~ N(50, 0.5^2), channel 1 ~ N(2, 3^2), in `dtype`.
Tensor large_mean_batch(const Shape& shape, uint64_t seed, DType dtype) {
  std::vector<double> v = random_tensor(shape, seed).to_vector();
  const int64_t inner = static_cast<int64_t>(v.size()) / (shape[0] * shape[1]);
  for (size_t i = 0; i < v.size(); ++i) {
    const bool first = (static_cast<int64_t>(i) / inner) % shape[1] == 0;
    v[i] = first ? 50.0 + 0.5 * v[i] : 2.0 + 3.0 * v[i];
  }
  return Tensor::from_values(shape, v, dtype);
}

// The worst channel's max |got - want| / max |want| (channel = axis 1, or the element of a
// [C] tensor), read as double: each channel is measured against its own scale.
double relative_error(const Tensor& got, const Tensor& want) {
  std::vector<double> g = got.to_vector(), w = want.to_vector();
  REQUIRE(g.size() == w.size());
  REQUIRE(got.shape() == want.shape());
  const int64_t c = want.dim() == 1 ? want.size(0) : want.size(1);
  const int64_t inner = want.dim() <= 1 ? 1 : want.numel() / std::max<int64_t>(want.size(0) * c, 1);
  std::vector<double> err(static_cast<size_t>(c), 0.0), scale(static_cast<size_t>(c), 0.0);
  for (size_t i = 0; i < g.size(); ++i) {
    const auto ch = static_cast<size_t>((static_cast<int64_t>(i) / inner) % c);
    err[ch] = std::max(err[ch], std::abs(g[i] - w[i]));
    scale[ch] = std::max(scale[ch], std::abs(w[i]));
  }
  double worst = 0;
  for (size_t ch = 0; ch < err.size(); ++ch)
    worst = std::max(worst, scale[ch] == 0 ? err[ch] : err[ch] / scale[ch]);
  return worst;
}

struct Result {
  Tensor y, dx, dgamma, dbeta, running_mean, running_var;
};

// One training step of loss = sum(w * bn(x)) through the functional batch_norm.
Result batch_norm_step(const Tensor& x, const Tensor& w, const Tensor& gamma, const Tensor& beta) {
  Variable xv(x.clone(), true), g(gamma.clone(), true), b(beta.clone(), true);
  Tensor rm = Tensor::zeros({kChannels}, x.dtype()), rv = Tensor::ones({kChannels}, x.dtype());
  Variable y = batch_norm(xv, g, b, rm, rv, /*training=*/true);
  sum(mul(y, Variable(w))).backward();
  return {y.data(), xv.grad(), g.grad(), b.grad(), rm, rv};
}

Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return t.narrow_rows(first, count).clone(); }

// Each rank's SyncBatchNorm on its rows; the rows' results concatenated, the parameter
// gradients summed over the ranks (the loss is the sum of the ranks' losses).
Result sync_step(int size, const std::vector<int64_t>& counts, const Tensor& x, const Tensor& w,
                 const Tensor& gamma, const Tensor& beta, DType compute = DType::f32) {
  std::vector<int64_t> starts(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) starts[r] = starts[r - 1] + counts[r - 1];
  std::vector<Result> per_rank(static_cast<size_t>(size));
  dist::run_ranks(size, [&](std::shared_ptr<dist::ProcessGroup> group) {
    const auto r = static_cast<size_t>(group->rank());
    nn::SyncBatchNorm bn(kChannels, x.dim(), group);
    bn.set_compute_dtype(compute);
    bn.weight.data().copy_(gamma);
    bn.bias.data().copy_(beta);
    Variable xv(rows_of(x, starts[r], counts[r]), true);
    Variable y = bn.forward(xv);
    sum(mul(y, Variable(rows_of(w, starts[r], counts[r])))).backward();
    per_rank[r] = {y.data(), xv.grad(), bn.weight.grad(), bn.bias.grad(), bn.running_mean, bn.running_var};
  });
  Result all = per_rank[0];
  std::vector<Tensor> ys, dxs;
  for (const Result& p : per_rank) {
    ys.push_back(p.y);
    dxs.push_back(p.dx);
  }
  all.y = kernels::concat(ys, 0);
  all.dx = kernels::concat(dxs, 0);
  for (size_t r = 1; r < per_rank.size(); ++r) {
    all.dgamma = kernels::add(all.dgamma, per_rank[r].dgamma);
    all.dbeta = kernels::add(all.dbeta, per_rank[r].dbeta);
    // Every rank holds the same running statistics.
    REQUIRE(relative_error(per_rank[r].running_mean, all.running_mean) == 0);
    REQUIRE(relative_error(per_rank[r].running_var, all.running_var) == 0);
  }
  return all;
}

void require_close(const Result& got, const Result& want, const std::string& what) {
  const std::vector<std::pair<const char*, double>> errors = {
      {"y", relative_error(got.y, want.y)},
      {"dx", relative_error(got.dx, want.dx)},
      {"dgamma", relative_error(got.dgamma, want.dgamma)},
      {"dbeta", relative_error(got.dbeta, want.dbeta)},
      {"running_mean", relative_error(got.running_mean, want.running_mean)},
      {"running_var", relative_error(got.running_var, want.running_var)}};
  for (const auto& [name, error] : errors) {
    INFO(what << ": " << name << " is " << error << " off (relative to its largest value)");
    CHECK(error < kTolerance);
  }
}

}  // namespace

TEST_CASE("threads: SyncBatchNorm of a channel with mean 50 and std 0.5 matches the global batch to 1e-5",
          "[sync_batch_norm][threads]") {
  const Shape shapes[] = {
      {kGlobalRows, kChannels}, {kGlobalRows, kChannels, 512}, {kGlobalRows, kChannels, 16, 16}};
  for (const Shape& shape : shapes) {
    const Tensor x = large_mean_batch(shape, 7, DType::f32);
    const Tensor w = random_tensor(shape, 8);
    const Tensor gamma = Tensor::from_values({kChannels}, {1.5, 0.7});
    const Tensor beta = Tensor::from_values({kChannels}, {-0.3, 0.2});
    // The oracle: BatchNorm on the global batch, all in float64.
    const Result want =
        batch_norm_step(x.to(DType::f64), w.to(DType::f64), gamma.to(DType::f64), beta.to(DType::f64));
    // tandem's own float32 BatchNorm meets the bar this test sets.
    const std::string shape_name = shape_str(shape);
    require_close(batch_norm_step(x, w, gamma, beta), want, "BatchNorm " + shape_name);
    for (int size = 1; size <= 4; ++size)
      for (const std::vector<int64_t>& counts : splits(size)) {
        std::ostringstream what;
        what << "SyncBatchNorm " << shape_name << " over " << size << " rank(s), rows";
        for (int64_t n : counts) what << ' ' << n;
        require_close(sync_step(size, counts, x, w, gamma, beta), want, what.str());
      }
  }
}

// Under a bfloat16 compute dtype SyncBatchNorm, as BatchNorm (autograd/nn.h), normalises its
// input rounded to bfloat16 and returns float32: the oracle is the float64 BatchNorm of the
// rounded batch. Channel 0 (mean 50, std 0.5) rounds in steps of 0.25, so a SyncBatchNorm
// that read the float32 input would miss the oracle by far more than the tolerance.
TEST_CASE("threads: SyncBatchNorm under bfloat16 normalises the rounded input, to 1e-5 of the oracle",
          "[sync_batch_norm][threads][precision]") {
  const Shape shape{kGlobalRows, kChannels, 4, 4};
  const Tensor x = large_mean_batch(shape, 11, DType::f32);
  const Tensor w = random_tensor(shape, 12);
  const Tensor gamma = Tensor::from_values({kChannels}, {1.5, 0.7});
  const Tensor beta = Tensor::from_values({kChannels}, {-0.3, 0.2});
  const Result want = batch_norm_step(x.to(DType::bf16).to(DType::f64), w.to(DType::f64),
                                      gamma.to(DType::f64), beta.to(DType::f64));
  const Result unrounded =
      batch_norm_step(x.to(DType::f64), w.to(DType::f64), gamma.to(DType::f64), beta.to(DType::f64));
  REQUIRE(relative_error(unrounded.y, want.y) > 100 * kTolerance);
  for (int size = 1; size <= 3; ++size)
    for (const std::vector<int64_t>& counts : splits(size)) {
      std::ostringstream what;
      what << "SyncBatchNorm in bfloat16 over " << size << " rank(s), rows";
      for (int64_t n : counts) what << ' ' << n;
      const Result got = sync_step(size, counts, x, w, gamma, beta, DType::bf16);
      CHECK(got.y.dtype() == DType::f32);
      CHECK(got.dx.dtype() == DType::f32);
      CHECK(got.dgamma.dtype() == DType::f32);
      require_close(got, want, what.str());
    }
}

TEST_CASE("threads: SyncBatchNorm without affine parameters or running statistics on [N, C, L]",
          "[sync_batch_norm][threads]") {
  const nn::BatchNormOptions options{.affine = false, .track_running_stats = false};
  const Shape shape{kGlobalRows, kChannels, 6};
  const Tensor x = large_mean_batch(shape, 9, DType::f64);
  const Tensor w = random_tensor(shape, 10).to(DType::f64);
  // The oracle: BatchNorm1d with the same options on the global batch.
  nn::BatchNorm1d oracle(kChannels, options);
  Variable x_all(x.clone(), true);
  Variable y_all = oracle.forward(x_all);
  sum(mul(y_all, Variable(w))).backward();

  const std::vector<int64_t> counts{3, 0, 8};
  const std::vector<int64_t> starts{0, 3, 3};
  std::vector<Tensor> ys(3), dxs(3), eval_ys(3);
  std::vector<size_t> parameters(3), buffers(3);
  dist::run_ranks(3, [&](std::shared_ptr<dist::ProcessGroup> group) {
    const auto r = static_cast<size_t>(group->rank());
    nn::SyncBatchNorm bn(kChannels, 3, group, options);
    parameters[r] = bn.parameters().size();
    buffers[r] = bn.buffers().size();
    Variable xv(rows_of(x, starts[r], counts[r]), true);
    Variable y = bn.forward(xv);
    sum(mul(y, Variable(rows_of(w, starts[r], counts[r])))).backward();
    ys[r] = y.data();
    dxs[r] = xv.grad();
    // Eval mode without running statistics: this rank's own batch, no communication.
    bn.eval();
    if (counts[r] > 1) eval_ys[r] = bn.forward(Variable(rows_of(x, starts[r], counts[r]))).data();
  });
  CHECK(relative_error(kernels::concat(ys, 0), y_all.data()) < 1e-12);
  CHECK(relative_error(kernels::concat(dxs, 0), x_all.grad()) < 1e-12);
  for (size_t r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(parameters[r] == 0);
    CHECK(buffers[r] == 0);
    if (counts[r] < 2) continue;
    Tensor none_mean, none_var;
    Variable local = batch_norm(Variable(rows_of(x, starts[r], counts[r])), Variable(), Variable(), none_mean,
                                none_var, /*training=*/true);
    CHECK(relative_error(eval_ys[r], local.data()) < 1e-12);
  }
}
