#include "autograd/optim.h"

#include <cmath>
#include <set>
#include <sstream>
#include <type_traits>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace tandem::optim {

// ---- Optimizer -------------------------------------------------------------------------

Optimizer::Optimizer(std::vector<Variable> params, double lr, const char* name)
    : params_(std::move(params)), state_(params_.size()), lr_(lr), name_(name) {
  TANDEM_CHECK(!params_.empty(), "optim::" << name_ << ": got an empty parameter list");
  TANDEM_CHECK(lr >= 0.0, "optim::" << name_ << ": invalid learning rate " << lr);
  std::set<const VariableImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    TANDEM_CHECK(params_[i].defined(), "optim::" << name_ << ": parameter #" << i << " is undefined");
    TANDEM_CHECK(params_[i].is_leaf(), "optim::" << name_ << ": parameter " << param_label(i)
                                                 << " is the result of an op, not a leaf");
    TANDEM_CHECK(seen.insert(params_[i].impl()).second,
                 "optim::" << name_ << ": parameter " << param_label(i) << " appears more than once");
  }
}

std::string Optimizer::param_label(size_t i) const {
  std::ostringstream os;
  const std::string& n = params_[i].name();
  if (n.empty()) {
    os << "#" << i;
  } else {
    os << "'" << n << "' (#" << i << ")";
  }
  return os.str();
}

void Optimizer::set_lr(double lr) {
  TANDEM_CHECK(lr >= 0.0, "optim::" << name_ << ": invalid learning rate " << lr);
  lr_ = lr;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& p : params_) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (p.grad().defined()) {
      Tensor g = p.grad();  // a handle: zeroing it zeroes the gradient in place (bucket views stay views)
      g.zero_();
    }
  }
}

void Optimizer::check_updatable(size_t i) const {
  const Variable& p = params_[i];
  TANDEM_CHECK(p.device().is_cpu(), "optim::" << name_ << ": parameter " << param_label(i) << " is "
                                              << p.data().str()
                                              << "; only CPU parameters can be updated yet");
  TANDEM_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64,
               "optim::" << name_ << ": parameter " << param_label(i) << " is " << p.data().str()
                         << "; only float32 and float64 parameters can be updated");
  const Tensor& g = p.grad();
  TANDEM_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype() && g.device() == p.device(),
               "optim::" << name_ << ": gradient " << g.str() << " of parameter " << param_label(i)
                         << " does not match its data " << p.data().str());
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  out.emplace("lr", Tensor::scalar(lr_, DType::f64));
  for (size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].step == 0 && state_[i].tensors.empty()) continue;
    const std::string prefix = "state." + std::to_string(i) + ".";
    out.emplace(prefix + "step", Tensor::scalar(static_cast<double>(state_[i].step), DType::f64));
    for (const auto& [key, t] : state_[i].tensors) out.emplace(prefix + key, t);
  }
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  // Parse and check everything before changing anything.
  struct Entry {
    size_t index;
    std::string key;
    const Tensor* tensor;
  };
  std::vector<Entry> entries;
  std::vector<std::string> problems;
  const Tensor* lr = nullptr;
  for (const auto& [name, t] : state) {
    if (name == "lr") {
      if (!t.defined() || t.numel() != 1) {
        problems.push_back("entry 'lr' must hold one number");
      } else {
        lr = &t;
      }
      continue;
    }
    size_t dot = name.find('.', 6);
    if (name.rfind("state.", 0) != 0 || dot == std::string::npos || dot == 6) {
      problems.push_back("unexpected entry '" + name + "'");
      continue;
    }
    const std::string index_str = name.substr(6, dot - 6);
    const std::string key = name.substr(dot + 1);
    if (index_str.find_first_not_of("0123456789") != std::string::npos) {
      problems.push_back("unexpected entry '" + name + "'");
      continue;
    }
    const size_t i = std::stoul(index_str);
    if (i >= params_.size()) {
      problems.push_back("entry '" + name + "' is for parameter #" + index_str + " but the optimizer has " +
                         std::to_string(params_.size()) + " parameters");
      continue;
    }
    if (!t.defined()) {
      problems.push_back("entry '" + name + "' is an undefined tensor");
      continue;
    }
    if (key == "step") {
      if (t.numel() != 1) problems.push_back("entry '" + name + "' must hold one number, got " + t.str());
    } else if (key == "momentum_buffer" || key == "exp_avg" || key == "exp_avg_sq") {
      if (t.shape() != params_[i].shape()) {
        problems.push_back("entry '" + name + "' has shape " + shape_str(t.shape()) + " but parameter " +
                           param_label(i) + " has shape " + shape_str(params_[i].shape()));
      }
    } else {
      problems.push_back("unexpected entry '" + name + "'");
      continue;
    }
    entries.push_back({i, key, &t});
  }
  if (!problems.empty()) {
    std::ostringstream os;
    os << "optim::" << name_ << "::load_state_dict: ";
    for (size_t k = 0; k < problems.size(); ++k) os << (k ? "; " : "") << problems[k];
    TANDEM_FAIL(os.str());
  }
  std::vector<ParamState> fresh(params_.size());
  for (const auto& e : entries) {
    if (e.key == "step") {
      fresh[e.index].step = static_cast<int64_t>(e.tensor->item());
    } else {
      Tensor copy =
          Tensor::empty(params_[e.index].shape(), params_[e.index].dtype(), params_[e.index].device());
      copy.copy_(*e.tensor);
      fresh[e.index].tensors[e.key] = copy;
    }
  }
  state_ = std::move(fresh);
  if (lr) lr_ = lr->item();
}

// ---- SGD -------------------------------------------------------------------------------

namespace {

template <typename T>
void sgd_update(T* p, const T* g, T* buf, int64_t n, double lr_d, double momentum_d, double dampening_d,
                double wd_d, bool nesterov, bool first) {
  const T lr = static_cast<T>(lr_d), momentum = static_cast<T>(momentum_d), wd = static_cast<T>(wd_d);
  const T keep = static_cast<T>(1.0 - dampening_d);
  for (int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if (wd_d != 0.0) gi = gi + wd * p[i];
    if (buf != nullptr) {
      const T b = first ? gi : momentum * buf[i] + keep * gi;
      buf[i] = b;
      gi = nesterov ? gi + momentum * b : b;
    }
    p[i] = p[i] - lr * gi;
  }
}

}  // namespace

SGD::SGD(std::vector<Variable> params, SGDOptions options)
    : Optimizer(std::move(params), options.lr, "SGD"), options_(options) {
  TANDEM_CHECK(options.momentum >= 0.0, "optim::SGD: invalid momentum " << options.momentum);
  TANDEM_CHECK(options.weight_decay >= 0.0, "optim::SGD: invalid weight_decay " << options.weight_decay);
  TANDEM_CHECK(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
               "optim::SGD: Nesterov momentum requires a momentum and zero dampening");
}

void SGD::step() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i];
    if (!p.grad().defined()) continue;
    check_updatable(i);
    ParamState& st = state_[i];
    ++st.step;
    Tensor* buf = nullptr;
    bool first = false;
    if (options_.momentum != 0.0) {
      auto it = st.tensors.find("momentum_buffer");
      if (it == st.tensors.end()) {
        it = st.tensors.emplace("momentum_buffer", Tensor::empty(p.shape(), p.dtype(), p.device())).first;
        first = true;
      }
      buf = &it->second;
    }
    if (p.dtype() == DType::f32) {
      sgd_update(p.data().data<float>(), p.grad().data<float>(), buf ? buf->data<float>() : nullptr,
                 p.numel(), lr_, options_.momentum, options_.dampening, options_.weight_decay,
                 options_.nesterov, first);
    } else {
      sgd_update(p.data().data<double>(), p.grad().data<double>(), buf ? buf->data<double>() : nullptr,
                 p.numel(), lr_, options_.momentum, options_.dampening, options_.weight_decay,
                 options_.nesterov, first);
    }
  }
}

// ---- Adam / AdamW ----------------------------------------------------------------------

namespace {

struct AdamCoeffs {
  double beta1, beta2, eps;
  double l2;         // Adam's weight decay, added to the gradient
  double decay;      // AdamW's factor 1 - lr * wd on the parameter (1 for Adam)
  double step_size;  // lr / (1 - beta1^t)
  double bc2_sqrt;   // sqrt(1 - beta2^t)
};

// One pass over the parameter: every value is read and written once. The float path is
// written with AVX intrinsics because std::sqrt's errno handling keeps GCC from
// vectorising the loop (we cannot assume -fno-math-errno); it computes exactly what the
// scalar tail computes, operation by operation.
template <typename T>
void adam_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamCoeffs& c) {
  const T b1 = static_cast<T>(c.beta1), one_b1 = static_cast<T>(1.0 - c.beta1);
  const T b2 = static_cast<T>(c.beta2), one_b2 = static_cast<T>(1.0 - c.beta2);
  const T eps = static_cast<T>(c.eps), l2 = static_cast<T>(c.l2), decay = static_cast<T>(c.decay);
  const T step_size = static_cast<T>(c.step_size), bc2_sqrt = static_cast<T>(c.bc2_sqrt);
  const bool use_l2 = c.l2 != 0.0, use_decay = c.decay != 1.0;
  int64_t i = 0;
#if defined(__AVX__)
  if constexpr (std::is_same_v<T, float>) {
    const __m256 vb1 = _mm256_set1_ps(b1), vone_b1 = _mm256_set1_ps(one_b1);
    const __m256 vb2 = _mm256_set1_ps(b2), vone_b2 = _mm256_set1_ps(one_b2);
    const __m256 veps = _mm256_set1_ps(eps), vl2 = _mm256_set1_ps(l2), vdecay = _mm256_set1_ps(decay);
    const __m256 vstep = _mm256_set1_ps(step_size), vbc2 = _mm256_set1_ps(bc2_sqrt);
    for (; i + 8 <= n; i += 8) {
      __m256 gi = _mm256_loadu_ps(g + i);
      __m256 pi = _mm256_loadu_ps(p + i);
      if (use_l2) gi = _mm256_add_ps(gi, _mm256_mul_ps(vl2, pi));
      if (use_decay) pi = _mm256_mul_ps(pi, vdecay);
      const __m256 mi = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(vone_b1, gi));
      const __m256 vi = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(v + i)),
                                      _mm256_mul_ps(_mm256_mul_ps(vone_b2, gi), gi));
      const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), vbc2), veps);
      pi = _mm256_sub_ps(pi, _mm256_mul_ps(vstep, _mm256_div_ps(mi, denom)));
      _mm256_storeu_ps(m + i, mi);
      _mm256_storeu_ps(v + i, vi);
      _mm256_storeu_ps(p + i, pi);
    }
  }
#endif
  for (; i < n; ++i) {
    T gi = g[i];
    T pi = p[i];
    if (use_l2) gi = gi + l2 * pi;
    if (use_decay) pi = pi * decay;
    const T mi = b1 * m[i] + one_b1 * gi;
    const T vi = b2 * v[i] + (one_b2 * gi) * gi;
    const T denom = std::sqrt(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / denom);
  }
}

void check_adam_options(const char* name, const std::array<double, 2>& betas, double eps, double wd) {
  TANDEM_CHECK(betas[0] >= 0.0 && betas[0] < 1.0, "optim::" << name << ": invalid beta1 " << betas[0]);
  TANDEM_CHECK(betas[1] >= 0.0 && betas[1] < 1.0, "optim::" << name << ": invalid beta2 " << betas[1]);
  TANDEM_CHECK(eps >= 0.0, "optim::" << name << ": invalid eps " << eps);
  TANDEM_CHECK(wd >= 0.0, "optim::" << name << ": invalid weight_decay " << wd);
}

}  // namespace

Adam::Adam(std::vector<Variable> params, AdamOptions options)
    : Adam(std::move(params), options, false, "Adam") {}

Adam::Adam(std::vector<Variable> params, AdamOptions options, bool decoupled, const char* name)
    : Optimizer(std::move(params), options.lr, name), options_(options), decoupled_(decoupled) {
  check_adam_options(name, options.betas, options.eps, options.weight_decay);
}

AdamW::AdamW(std::vector<Variable> params, AdamWOptions o)
    : Adam(std::move(params), AdamOptions{o.lr, o.betas, o.eps, o.weight_decay}, true, "AdamW") {}

void Adam::step() {
  const double beta1 = options_.betas[0], beta2 = options_.betas[1], wd = options_.weight_decay;
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i];
    if (!p.grad().defined()) continue;
    check_updatable(i);
    ParamState& st = state_[i];
    auto m_it = st.tensors.find("exp_avg");
    if (m_it == st.tensors.end()) {
      m_it = st.tensors.emplace("exp_avg", Tensor::zeros(p.shape(), p.dtype(), p.device())).first;
    }
    auto v_it = st.tensors.find("exp_avg_sq");
    if (v_it == st.tensors.end()) {
      v_it = st.tensors.emplace("exp_avg_sq", Tensor::zeros(p.shape(), p.dtype(), p.device())).first;
    }
    const int64_t t = ++st.step;
    AdamCoeffs c;
    c.beta1 = beta1;
    c.beta2 = beta2;
    c.eps = options_.eps;
    c.l2 = decoupled_ ? 0.0 : wd;
    c.decay = decoupled_ ? 1.0 - lr_ * wd : 1.0;
    c.step_size = lr_ / (1.0 - std::pow(beta1, static_cast<double>(t)));
    c.bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t)));
    if (p.dtype() == DType::f32) {
      adam_update(p.data().data<float>(), p.grad().data<float>(), m_it->second.data<float>(),
                  v_it->second.data<float>(), p.numel(), c);
    } else {
      adam_update(p.data().data<double>(), p.grad().data<double>(), m_it->second.data<double>(),
                  v_it->second.data<double>(), p.numel(), c);
    }
  }
}

}  // namespace tandem::optim
