// Layers: Modules with a single-input forward, built on autograd/ops.h.
//
// Contract:
// - Linear, Conv2d and ConvTranspose2d own `weight` (and `bias` unless bias=false),
//   initialised as PyTorch does: weight ~ kaiming_uniform(a = sqrt(5)), i.e.
//   U(-1/sqrt(fan_in), 1/sqrt(fan_in)), then bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
//   drawn in that order from `gen` (default_generator() unless one is passed). fan_in is
//   init::fan_in(weight shape): in / groups * k * k for Conv2d, out / groups * k * k for
//   ConvTranspose2d.
//   Re-initialise with init:: functions (e.g. normal_(w, 0, 0.02) for DCGAN).
// - Shapes: Linear [N, in] -> [N, out], weight [out, in]. Conv2d NCHW, weight
//   [out, in / groups, k, k]. ConvTranspose2d NCHW, weight [in, out / groups, k, k]. Both
//   take their stride, padding, dilation and groups (and ConvTranspose2d its
//   output_padding) as kernels::Conv2dParams; in and out must divide by groups.
// - BatchNorm1d ([N, C] or [N, C, L]) and BatchNorm2d ([N, C, H, W]) normalise each
//   channel (axis 1) over every other axis. They own `weight` (ones) and `bias` (zeros)
//   unless options.affine is false (then both stay undefined and are not parameters), and
//   the buffers running_mean (zeros) and running_var (ones) unless
//   options.track_running_stats is false (then both stay undefined and are not buffers).
//   In training mode they normalise with batch statistics and update the running ones
//   (r = (1 - momentum) r + momentum * batch, unbiased variance); in eval mode they use the
//   running ones, or, without them, the batch's statistics as in training (PyTorch's
//   rule). set_train_forward replaces the training-mode forward (SyncBatchNorm,
//   reducer/sync_batch_norm.h, normalises with statistics over every rank's batch); the
//   parameters, buffers and eval mode stay as they are. Under a bfloat16 compute dtype
//   (precision.h) they read their input rounded to it (round_operand, in every mode), so
//   what they keep for backward is 16-bit; statistics, parameters and the output stay
//   float32. float16 leaves the input as it is: a convolution's float32 output above 65504
//   would round to infinity in forward, which no loss scale undoes.
// - Activations and resampling have no parameters: ReLU, LeakyReLU(slope, default
//   kLeakyReluDefaultSlope = 0.01 as PyTorch, the same default as leaky_relu()), Tanh,
//   Sigmoid, Flatten ([N, ...] -> [N, prod]), Reshape(shape) ([N, ...] -> [N, shape...]),
//   Upsample (nearest, factor 2), AvgPool (2x2 mean, stride 2).
// - Embedding(num_embeddings, embedding_dim) owns `weight` [num, dim] ~ N(0, 1) (PyTorch's
//   init), drawn from `gen`. forward takes an int64 index of any shape (a Tensor, or a
//   Variable's data) and returns index.shape + [dim]: weight's rows (index_select on dim 0),
//   so a row used several times gets the sum of their gradients. Out-of-range indices are
//   an Error naming the index and num_embeddings.
// - Sequential runs its children in order; they are named "0", "1", ... in push order.
//   ModuleList only holds children under the same names (no forward).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/module.h"
#include "autograd/ops.h"
#include "kernels/conv.h"
#include "runtime/rng.h"

namespace tandem::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  std::string type_name() const override;

  Variable weight;  // [out, in]
  Variable bias;    // [out], or undefined
  int64_t in_features, out_features;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0, bool bias = true, Generator& gen = default_generator());
  // Any geometry, e.g. Conv2d(32, 32, 3, {.padding = 2, .dilation = 2, .groups = 32}).
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const kernels::Conv2dParams& params,
         bool bias = true, Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  std::string type_name() const override;

  Variable weight;  // [out, in / groups, k, k]
  Variable bias;    // [out], or undefined
  int64_t in_channels, out_channels, kernel_size;
  kernels::Conv2dParams params;
};

class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
                  int64_t padding = 0, int64_t output_padding = 0, bool bias = true,
                  Generator& gen = default_generator());
  // Any geometry, e.g. ConvTranspose2d(8, 8, 4, {.stride = 2, .padding = 1, .groups = 2}).
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                  const kernels::Conv2dParams& params, bool bias = true,
                  Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  std::string type_name() const override;

  Variable weight;  // [in, out / groups, k, k]
  Variable bias;    // [out], or undefined
  int64_t in_channels, out_channels, kernel_size;
  kernels::Conv2dParams params;
};

// BatchNorm1d(64, {.affine = false, .track_running_stats = false}) as PyTorch's.
struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;               // weight (gamma) and bias (beta) parameters
  bool track_running_stats = true;  // running_mean and running_var buffers
};

// Shared by BatchNorm1d and BatchNorm2d (they differ only in the input ranks they accept).
class BatchNorm : public Module {
  // What running_mean and running_var refer to without running statistics: undefined.
  Tensor untracked_mean_, untracked_var_;

 public:
  Variable forward(const Variable& x) override;
  std::string type_name() const override;

  // The training-mode forward, given this module and its (checked) input; `prefix` is put
  // before type_name() ("Sync" gives "SyncBatchNorm2d(64)"). Null restores the local one.
  using TrainForward = std::function<Variable(BatchNorm&, const Variable&)>;
  void set_train_forward(TrainForward forward, std::string prefix);
  bool has_custom_train_forward() const { return static_cast<bool>(train_forward_); }

  Variable weight;       // gamma [C], ones; undefined without affine
  Variable bias;         // beta [C], zeros; undefined without affine
  Tensor& running_mean;  // [C]; undefined without track_running_stats
  Tensor& running_var;
  int64_t num_features;
  double eps, momentum;
  bool affine, track_running_stats;

 protected:
  // input_dim 2: BatchNorm1d ([N, C] or [N, C, L]); 4: BatchNorm2d ([N, C, H, W]).
  BatchNorm(int64_t num_features, const BatchNormOptions& options, int64_t input_dim);

 private:
  int64_t input_dim_;
  TrainForward train_forward_;
  std::string type_prefix_;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1)
      : BatchNorm(num_features, {.eps = eps, .momentum = momentum}, 2) {}
  BatchNorm1d(int64_t num_features, const BatchNormOptions& options) : BatchNorm(num_features, options, 2) {}
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1)
      : BatchNorm(num_features, {.eps = eps, .momentum = momentum}, 4) {}
  BatchNorm2d(int64_t num_features, const BatchNormOptions& options) : BatchNorm(num_features, options, 4) {}
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen = default_generator());
  Variable forward(const Variable& index) override;
  Variable forward(const Tensor& index);
  std::string type_name() const override;

  Variable weight;  // [num_embeddings, embedding_dim]
  int64_t num_embeddings, embedding_dim;
};

class ReLU : public Module {
 public:
  Variable forward(const Variable& x) override;
  std::string type_name() const override { return "ReLU"; }
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double slope = kLeakyReluDefaultSlope) : slope(slope) {}
  Variable forward(const Variable& x) override;
  std::string type_name() const override;
  double slope;
};

class Tanh : public Module {
 public:
  Variable forward(const Variable& x) override;
  std::string type_name() const override { return "Tanh"; }
};

class Sigmoid : public Module {
 public:
  Variable forward(const Variable& x) override;
  std::string type_name() const override { return "Sigmoid"; }
};

class Flatten : public Module {
 public:
  Variable forward(const Variable& x) override;
  std::string type_name() const override { return "Flatten"; }
};

class Reshape : public Module {
 public:
  explicit Reshape(Shape shape) : shape(std::move(shape)) {}  // per-sample shape
  Variable forward(const Variable& x) override;
  std::string type_name() const override;
  Shape shape;
};

class Upsample : public Module {
 public:
  Variable forward(const Variable& x) override;
  std::string type_name() const override { return "Upsample(nearest, 2)"; }
};

class AvgPool : public Module {
 public:
  Variable forward(const Variable& x) override;
  std::string type_name() const override { return "AvgPool(2)"; }
};

class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules);
  // Sequential(make_shared<Linear>(2, 16), make_shared<Tanh>(), ...)
  template <typename... Ms>
  explicit Sequential(std::shared_ptr<Ms>... modules) {
    (push_back(std::move(modules)), ...);
  }

  Sequential& push_back(std::shared_ptr<Module> module);
  Sequential& add(std::shared_ptr<Module> module) { return push_back(std::move(module)); }
  size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;

  Variable forward(const Variable& x) override;
  std::string type_name() const override { return "Sequential"; }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

class ModuleList : public Module {
 public:
  ModuleList& push_back(std::shared_ptr<Module> module);
  size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  std::string type_name() const override { return "ModuleList"; }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace tandem::nn
