#include "autograd/nn.h"

#include <cmath>
#include <sstream>

#include "autograd/init.h"
#include "autograd/ops.h"

namespace tandem::nn {

namespace {

// PyTorch's reset_parameters for Linear/Conv: kaiming_uniform(a = sqrt(5)) for the weight,
// then U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias, in that order on one generator.
void default_init(const Variable& weight, const Variable& bias, Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in(weight.shape())));
    init::uniform_(bias, -bound, bound, gen);
  }
}

void check_positive(const char* layer, const char* what, int64_t value) {
  TANDEM_CHECK(value > 0, layer << ": " << what << " must be positive, got " << value);
}

// ", d=2, g=4" for a dilated or grouped conv layer's name; "" otherwise.
std::string extra_params(const kernels::Conv2dParams& p) {
  std::string s;
  if (p.dilation != 1) s += ", d=" + std::to_string(p.dilation);
  if (p.groups != 1) s += ", g=" + std::to_string(p.groups);
  return s;
}

// A positive stride, dilation and groups, which both channel counts divide by (PyTorch's rule).
void check_conv_params(const char* layer, int64_t in, int64_t out, const kernels::Conv2dParams& p) {
  check_positive(layer, "stride", p.stride);
  check_positive(layer, "dilation", p.dilation);
  check_positive(layer, "groups", p.groups);
  TANDEM_CHECK(in % p.groups == 0 && out % p.groups == 0, layer << ": in_channels " << in
                                                                << " and out_channels " << out
                                                                << " must divide by groups " << p.groups);
}

}  // namespace

// ---- Linear ----------------------------------------------------------------------------

Linear::Linear(int64_t in, int64_t out, bool with_bias, Generator& gen) : in_features(in), out_features(out) {
  check_positive("Linear", "in_features", in);
  check_positive("Linear", "out_features", out);
  weight = register_parameter("weight", Variable(Tensor::empty({out, in})));
  if (with_bias) bias = register_parameter("bias", Variable(Tensor::empty({out})));
  default_init(weight, bias, gen);
}

Variable Linear::forward(const Variable& x) {
  const PrecisionScope precision = precision_scope();
  return linear(x, weight, bias);
}

std::string Linear::type_name() const {
  return "Linear(" + std::to_string(in_features) + ", " + std::to_string(out_features) + ")";
}

// ---- Conv2d ----------------------------------------------------------------------------

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, bool with_bias,
               Generator& gen)
    : Conv2d(in, out, k, kernels::Conv2dParams{.stride = stride, .padding = padding}, with_bias, gen) {}

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, const kernels::Conv2dParams& p, bool with_bias,
               Generator& gen)
    : in_channels(in), out_channels(out), kernel_size(k), params(p) {
  check_positive("Conv2d", "in_channels", in);
  check_positive("Conv2d", "out_channels", out);
  check_positive("Conv2d", "kernel_size", k);
  check_conv_params("Conv2d", in, out, p);
  TANDEM_CHECK(p.output_padding == 0,
               "Conv2d: output_padding " << p.output_padding << " applies to ConvTranspose2d only");
  weight = register_parameter("weight", Variable(Tensor::empty({out, in / p.groups, k, k})));
  if (with_bias) bias = register_parameter("bias", Variable(Tensor::empty({out})));
  default_init(weight, bias, gen);
}

Variable Conv2d::forward(const Variable& x) {
  const PrecisionScope precision = precision_scope();
  return conv2d(x, weight, bias, params);
}

std::string Conv2d::type_name() const {
  return "Conv2d(" + std::to_string(in_channels) + ", " + std::to_string(out_channels) +
         ", k=" + std::to_string(kernel_size) + ", s=" + std::to_string(params.stride) +
         ", p=" + std::to_string(params.padding) + extra_params(params) + ")";
}

// ---- ConvTranspose2d -------------------------------------------------------------------

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding,
                                 int64_t output_padding, bool with_bias, Generator& gen)
    : ConvTranspose2d(
          in, out, k,
          kernels::Conv2dParams{.stride = stride, .padding = padding, .output_padding = output_padding},
          with_bias, gen) {}

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, int64_t k, const kernels::Conv2dParams& p,
                                 bool with_bias, Generator& gen)
    : in_channels(in), out_channels(out), kernel_size(k), params(p) {
  check_positive("ConvTranspose2d", "in_channels", in);
  check_positive("ConvTranspose2d", "out_channels", out);
  check_positive("ConvTranspose2d", "kernel_size", k);
  check_conv_params("ConvTranspose2d", in, out, p);
  weight = register_parameter("weight", Variable(Tensor::empty({in, out / p.groups, k, k})));
  if (with_bias) bias = register_parameter("bias", Variable(Tensor::empty({out})));
  default_init(weight, bias, gen);
}

Variable ConvTranspose2d::forward(const Variable& x) {
  const PrecisionScope precision = precision_scope();
  return conv_transpose2d(x, weight, bias, params);
}

std::string ConvTranspose2d::type_name() const {
  return "ConvTranspose2d(" + std::to_string(in_channels) + ", " + std::to_string(out_channels) +
         ", k=" + std::to_string(kernel_size) + ", s=" + std::to_string(params.stride) +
         ", p=" + std::to_string(params.padding) + ", op=" + std::to_string(params.output_padding) +
         extra_params(params) + ")";
}

// ---- BatchNorm -------------------------------------------------------------------------

BatchNorm::BatchNorm(int64_t c, const BatchNormOptions& options, int64_t input_dim)
    : running_mean(options.track_running_stats ? register_buffer("running_mean", Tensor::zeros({c}))
                                               : untracked_mean_),
      running_var(options.track_running_stats ? register_buffer("running_var", Tensor::ones({c}))
                                              : untracked_var_),
      num_features(c),
      eps(options.eps),
      momentum(options.momentum),
      affine(options.affine),
      track_running_stats(options.track_running_stats),
      input_dim_(input_dim) {
  check_positive("BatchNorm", "num_features", c);
  if (affine) {
    weight = register_parameter("weight", Variable(Tensor::ones({c})));
    bias = register_parameter("bias", Variable(Tensor::zeros({c})));
  }
}

Variable BatchNorm::forward(const Variable& x) {
  const bool accepted = input_dim_ == 2 ? x.dim() == 2 || x.dim() == 3 : x.dim() == input_dim_;
  TANDEM_CHECK(
      accepted && x.size(1) == num_features,
      type_name() << (path().empty() ? "" : " '" + path() + "'") << ": input " << shape_str(x.shape())
                  << " does not match; expected [N, " << num_features
                  << (input_dim_ == 2 ? "] or [N, " + std::to_string(num_features) + ", L]" : ", H, W]"));
  const PrecisionScope precision = precision_scope();
  const Variable in = compute_dtype() == DType::bf16 ? round_operand(x, DType::bf16) : x;
  if (is_training() && train_forward_) return train_forward_(*this, in);
  const bool batch_stats = is_training() || !track_running_stats;
  return batch_norm(in, weight, bias, running_mean, running_var, batch_stats, momentum, eps);
}

void BatchNorm::set_train_forward(TrainForward forward, std::string prefix) {
  train_forward_ = std::move(forward);
  type_prefix_ = train_forward_ ? std::move(prefix) : std::string();
}

std::string BatchNorm::type_name() const {
  return type_prefix_ + (input_dim_ == 2 ? "BatchNorm1d(" : "BatchNorm2d(") + std::to_string(num_features) +
         ")";
}

// ---- Embedding -------------------------------------------------------------------------

Embedding::Embedding(int64_t num, int64_t dim, Generator& gen) : num_embeddings(num), embedding_dim(dim) {
  check_positive("Embedding", "num_embeddings", num);
  check_positive("Embedding", "embedding_dim", dim);
  weight = register_parameter("weight", Variable(Tensor::empty({num, dim})));
  init::normal_(weight, 0.0, 1.0, gen);
}

Variable Embedding::forward(const Variable& index) { return forward(index.data()); }

Variable Embedding::forward(const Tensor& index) {
  TANDEM_CHECK(index.defined(), "Embedding: undefined index");
  if (index.dim() == 1) return index_select(weight, 0, index);
  Shape out_shape = index.shape();
  out_shape.push_back(embedding_dim);
  return reshape(index_select(weight, 0, index.view({index.numel()})), out_shape);
}

std::string Embedding::type_name() const {
  return "Embedding(" + std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim) + ")";
}

// ---- parameter-free layers -------------------------------------------------------------

Variable ReLU::forward(const Variable& x) { return relu(x); }
Variable LeakyReLU::forward(const Variable& x) { return leaky_relu(x, slope); }
std::string LeakyReLU::type_name() const {
  std::ostringstream os;
  os << "LeakyReLU(" << slope << ")";
  return os.str();
}
Variable Tanh::forward(const Variable& x) { return tanh(x); }
Variable Sigmoid::forward(const Variable& x) { return sigmoid(x); }
Variable Flatten::forward(const Variable& x) { return flatten(x); }

Variable Reshape::forward(const Variable& x) {
  TANDEM_CHECK(x.dim() >= 1, "Reshape: input must have a batch axis, got " << shape_str(x.shape()));
  Shape target{x.size(0)};
  target.insert(target.end(), shape.begin(), shape.end());
  TANDEM_CHECK(shape_numel(target) == x.numel(), type_name() << ": input " << shape_str(x.shape())
                                                             << " cannot be viewed as " << shape_str(target));
  return reshape(x, target);
}

std::string Reshape::type_name() const { return "Reshape(" + shape_str(shape) + ")"; }

Variable Upsample::forward(const Variable& x) { return upsample_nearest2x(x); }
Variable AvgPool::forward(const Variable& x) { return avg_pool2x(x); }

// ---- containers ------------------------------------------------------------------------

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules) push_back(m);
}

Sequential& Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
  return *this;
}

const std::shared_ptr<Module>& Sequential::operator[](size_t i) const {
  TANDEM_CHECK(i < modules_.size(),
               "Sequential: index " << i << " out of range (size " << modules_.size() << ")");
  return modules_[i];
}

Variable Sequential::forward(const Variable& x) {
  Variable y = x;
  for (const auto& m : modules_) y = m->forward(y);
  return y;
}

ModuleList& ModuleList::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
  return *this;
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t i) const {
  TANDEM_CHECK(i < modules_.size(),
               "ModuleList: index " << i << " out of range (size " << modules_.size() << ")");
  return modules_[i];
}

}  // namespace tandem::nn
