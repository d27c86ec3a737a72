#include "autograd/optim.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <sstream>

#include "autograd/local_backward_scope.h"
#include "kernels/optim.h"
#include "runtime/step_capture.h"

namespace tandem::optim {

namespace {
thread_local int64_t t_steps_taken = 0;
}  // namespace

int64_t steps_taken_on_this_thread() { return t_steps_taken; }

namespace {

// A step inside a LocalBackwardScope is this rank's alone (local_backward_scope.h): no
// Reducer may expect the other ranks to have taken it.
void count_step() {
  if (!LocalBackwardScope::active()) ++t_steps_taken;
}

}  // namespace

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

void Optimizer::set_initial_lr(double lr) {
  TANDEM_CHECK(std::isfinite(lr) && lr > 0.0, "optim::" << name_ << ": invalid initial learning rate " << lr);
  initial_lr_ = lr;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& p : params_) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (p.grad().defined()) {
      p.clear_grad_history();
      Tensor g = p.grad();  // a handle: zeroing it zeroes the gradient in place (bucket views stay views)
      g.zero_();
    }
  }
}

void Optimizer::check_updatable(size_t i) const {
  const Variable& p = params_[i];
#if !TANDEM_HAVE_CUDA
  TANDEM_CHECK(p.device().is_cpu(), "optim::" << name_ << ": parameter " << param_label(i) << " is "
                                              << p.data().str()
                                              << "; this build updates CPU parameters only");
#endif
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
  if (initial_lr_) out.emplace("initial_lr", Tensor::scalar(*initial_lr_, DType::f64));
  for (size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].step == 0 && state_[i].tensors.empty()) continue;
    const std::string prefix = "state." + std::to_string(i) + ".";
    Tensor step = Tensor::empty({}, DType::i64);
    step.data<int64_t>()[0] = state_[i].step;
    out.emplace(prefix + "step", step);
    for (const auto& [key, t] : state_[i].tensors) out.emplace(prefix + key, t);
  }
  return out;
}

void Optimizer::check_state_dict(const StateDict& state) const { checked_state_entries(state); }

std::vector<Optimizer::StateEntry> Optimizer::checked_state_entries(const StateDict& state) const {
  using Entry = StateEntry;
  std::vector<Entry> entries;
  std::vector<std::string> problems;
  const Tensor* lr = nullptr;
  const Tensor* initial_lr = nullptr;
  for (const auto& [name, t] : state) {
    if (name == "lr" || name == "initial_lr") {
      if (!t.defined() || t.numel() != 1) {
        problems.push_back("entry '" + name + "' must hold one number");
      } else {
        (name == "lr" ? lr : initial_lr) = &t;
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
  if (lr == nullptr) {
    problems.push_back("no entry 'lr'");
  } else if (const double v = lr->item(); !std::isfinite(v) || v <= 0) {
    problems.push_back("entry 'lr' is " + std::to_string(v) + ", not a positive finite learning rate");
  }
  if (initial_lr != nullptr) {
    if (const double v = initial_lr->item(); !std::isfinite(v) || v <= 0)
      problems.push_back("entry 'initial_lr' is " + std::to_string(v) +
                         ", not a positive finite learning rate");
  }
  std::vector<std::map<std::string, const Tensor*>> by_param(params_.size());
  for (const Entry& e : entries) by_param[e.index][e.key] = e.tensor;
  const std::vector<std::string> moments = moment_keys();
  for (size_t i = 0; i < by_param.size(); ++i) {
    const auto& have = by_param[i];
    if (have.empty()) continue;
    const std::string prefix = "state." + std::to_string(i) + ".";
    auto step = have.find("step");
    if (step == have.end()) {
      problems.push_back("parameter " + param_label(i) + " has moments but no entry '" + prefix + "step'");
    } else if (const double v = step->second->item(); !(v >= 0) || v != std::floor(v)) {
      problems.push_back("entry '" + prefix + "step' is " + std::to_string(v) + ", not a step count");
    } else if (v > 0) {
      for (const std::string& key : moments) {
        if (!have.count(key))
          problems.push_back("no entry '" + prefix + key + "' for parameter " + param_label(i));
      }
    }
    for (const auto& [key, t] : have) {
      if (key == "step") continue;
      const std::vector<double> values = t->to(Device::cpu()).to_vector();
      const bool finite =
          std::all_of(values.begin(), values.end(), [](double x) { return std::isfinite(x); });
      if (!finite) problems.push_back("entry '" + prefix + key + "' holds NaN or Inf");
      if (key == "exp_avg_sq" && std::any_of(values.begin(), values.end(), [](double x) { return x < 0; }))
        problems.push_back("entry '" + prefix + key + "' holds a negative second moment");
    }
  }
  if (!problems.empty()) {
    std::ostringstream os;
    os << "optim::" << name_ << "::load_state_dict: ";
    for (size_t k = 0; k < problems.size(); ++k) os << (k ? "; " : "") << problems[k];
    TANDEM_FAIL(os.str());
  }
  return entries;
}

void Optimizer::load_state_dict(const StateDict& state) {
  // Parse and check everything before changing anything.
  const std::vector<StateEntry> entries = checked_state_entries(state);
  const Tensor* lr = &state.at("lr");  // required: checked
  auto initial = state.find("initial_lr");
  const Tensor* initial_lr = initial == state.end() ? nullptr : &initial->second;
  std::vector<ParamState> fresh(params_.size());
  for (const auto& e : entries) {
    if (e.key == "step") {
      // int64 since the integer dtypes; float64 in checkpoints written before them.
      const Tensor& t = *e.tensor;
      fresh[e.index].step = t.dtype() == DType::i64 && t.device().is_cpu() ? t.data<int64_t>()[0]
                                                                           : static_cast<int64_t>(t.item());
    } else {
      Tensor copy =
          Tensor::empty(params_[e.index].shape(), params_[e.index].dtype(), params_[e.index].device());
      copy.copy_(*e.tensor);
      fresh[e.index].tensors[e.key] = copy;
    }
  }
  state_ = std::move(fresh);
  if (lr) lr_ = lr->item();
  // Absent in a state_dict saved before any schedule was attached: the base stays as it is.
  if (initial_lr) initial_lr_ = initial_lr->item();
}

std::vector<std::string> SGD::moment_keys() const {
  if (options_.momentum == 0.0) return {};
  return {"momentum_buffer"};
}

void Optimizer::check_state_exists(const StepCapture* capture, size_t i) const {
  TANDEM_CHECK(capture == nullptr, "optim::" << name_ << ": parameter " << param_label(i)
                                             << " takes its first step inside a CUDA graph capture, whose "
                                                "replays would reset its state every time; take a step "
                                                "eagerly first (the warm-up)");
}

void Optimizer::advance_on_replay(StepCapture& capture) {
  // Replays advance what this step() advanced at the capture: the thread's step count and
  // the step counts of the parameters it updated (those with a gradient).
  std::vector<size_t> updated;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].grad().defined()) updated.push_back(i);
  capture.on_launch([this, updated = std::move(updated)](bool advance) {
    if (!advance) return;
    ++t_steps_taken;
    for (size_t i : updated) ++state_[i].step;
  });
}

// ---- Grouping -------------------------------------------------------------------------

namespace {

// Parameters updated by one fused kernel call: same device and dtype, and the same value
// of whatever else the kernel takes once per call (Adam's step count, SGD's first step).
struct UpdateGroup {
  Device device;
  DType dtype;
  int64_t key;
  size_t first_index;  // the parameter that opened the group
  std::vector<Tensor> params, grads, state_a, state_b;
};

UpdateGroup& group_for(std::vector<UpdateGroup>& groups, const Variable& p, int64_t key, size_t index) {
  for (UpdateGroup& g : groups)
    if (g.device == p.device() && g.dtype == p.dtype() && g.key == key) return g;
  groups.push_back(UpdateGroup{p.device(), p.dtype(), key, index, {}, {}, {}, {}});
  return groups.back();
}

// A step captured into a CUDA graph (runtime/step_capture.h): the kernels read their
// per-step constants from a small device array, which each launch of the graph refreshes
// from the host state beforehand: `values` computes them, after `advance` has moved the
// host state on one step (replays only). The array is the capture's, and never a block
// its kernels use otherwise (kernels/optim.h says why).
const double* graph_scalars(StepCapture& capture, Device device, size_t count,
                            std::function<std::vector<double>()> values) {
  double* scalars = kernels::graph_scalars_array(capture, device, count);
  capture.on_launch([scalars, device, values = std::move(values)](bool) {
    kernels::write_graph_scalars(scalars, device, values());  // before the launch
  });
  return scalars;
}

}  // namespace

// ---- SGD -------------------------------------------------------------------------------

SGD::SGD(std::vector<Variable> params, SGDOptions options)
    : Optimizer(std::move(params), options.lr, "SGD"), options_(options) {
  TANDEM_CHECK(options.momentum >= 0.0, "optim::SGD: invalid momentum " << options.momentum);
  TANDEM_CHECK(options.weight_decay >= 0.0, "optim::SGD: invalid weight_decay " << options.weight_decay);
  TANDEM_CHECK(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
               "optim::SGD: Nesterov momentum requires a momentum and zero dampening");
}

void SGD::step() {
  count_step();
  // Check every parameter before changing any state.
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].grad().defined()) check_updatable(i);
  const bool use_momentum = options_.momentum != 0.0;
  std::vector<UpdateGroup> groups;
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i];
    if (!p.grad().defined()) continue;
    ParamState& st = state_[i];
    ++st.step;
    bool first = false;
    Tensor buf;
    if (use_momentum) {
      auto it = st.tensors.find("momentum_buffer");
      if (it == st.tensors.end()) {
        check_state_exists(active_capture(), i);
        it = st.tensors.emplace("momentum_buffer", Tensor::empty(p.shape(), p.dtype(), p.device())).first;
        first = true;
      }
      buf = it->second;
    }
    UpdateGroup& g = group_for(groups, p, first ? 1 : 0, i);
    g.params.push_back(p.data());
    g.grads.push_back(p.grad());
    if (use_momentum) g.state_a.push_back(buf);
  }
  StepCapture* capture = active_capture();
  if (capture != nullptr) advance_on_replay(*capture);
  for (const UpdateGroup& g : groups) {
    kernels::SgdStep s;
    s.lr = lr_;
    s.momentum = options_.momentum;
    s.dampening = options_.dampening;
    s.weight_decay = options_.weight_decay;
    s.nesterov = options_.nesterov;
    s.first = g.key == 1;
    if (capture != nullptr && g.device.is_cuda()) {
      s.device_scalars = graph_scalars(*capture, g.device, 1, [this] { return std::vector<double>{lr_}; });
    }
    kernels::sgd_update_(g.params, g.grads, g.state_a, s);
  }
}

// ---- Adam / AdamW ----------------------------------------------------------------------

namespace {

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
  count_step();
  // Check every parameter before changing any state.
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].grad().defined()) check_updatable(i);
  std::vector<UpdateGroup> groups;
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i];
    if (!p.grad().defined()) continue;
    ParamState& st = state_[i];
    auto m_it = st.tensors.find("exp_avg");
    if (m_it == st.tensors.end()) {
      check_state_exists(active_capture(), i);
      m_it = st.tensors.emplace("exp_avg", Tensor::zeros(p.shape(), p.dtype(), p.device())).first;
    }
    auto v_it = st.tensors.find("exp_avg_sq");
    if (v_it == st.tensors.end()) {
      v_it = st.tensors.emplace("exp_avg_sq", Tensor::zeros(p.shape(), p.dtype(), p.device())).first;
    }
    UpdateGroup& g = group_for(groups, p, ++st.step, i);
    g.params.push_back(p.data());
    g.grads.push_back(p.grad());
    g.state_a.push_back(m_it->second);
    g.state_b.push_back(v_it->second);
  }
  StepCapture* capture = active_capture();
  if (capture != nullptr) advance_on_replay(*capture);
  for (const UpdateGroup& g : groups) {
    kernels::AdamStep s;
    s.lr = lr_;
    s.beta1 = options_.betas[0];
    s.beta2 = options_.betas[1];
    s.eps = options_.eps;
    s.weight_decay = options_.weight_decay;
    s.decoupled = decoupled_;
    s.step = g.key;
    if (capture != nullptr && g.device.is_cuda()) {
      // The group's step count: that of its first parameter (all of the group share it).
      s.device_scalars = graph_scalars(*capture, g.device, 3, [this, s, first = g.first_index] {
        kernels::AdamStep now = s;
        now.lr = lr_;
        now.step = state_[first].step;
        const kernels::AdamCoeffs c = kernels::adam_coeffs(now);
        return std::vector<double>{c.step_size, c.bc2_sqrt, c.decay};
      });
    }
    kernels::adam_update_(g.params, g.grads, g.state_a, g.state_b, s);
  }
}

}  // namespace tandem::optim
