#include "autograd/variable.h"

#include <algorithm>

#include "autograd/engine.h"
#include "autograd/node.h"

namespace tandem {

Variable::Variable(Tensor data, bool requires_grad) : impl_(std::make_shared<VariableImpl>()) {
  TANDEM_CHECK(data.defined(), "Variable: data is an undefined tensor");
  impl_->data = std::move(data);
  impl_->requires_grad = requires_grad;
}

Variable Variable::from_impl(std::shared_ptr<VariableImpl> impl) {
  Variable v;
  v.impl_ = std::move(impl);
  return v;
}

void Variable::check_defined(const char* what) const {
  TANDEM_CHECK(impl_ != nullptr, what << " on an undefined Variable");
}

const Tensor& Variable::data() const {
  check_defined("data()");
  return impl_->data;
}

Tensor& Variable::data() {
  check_defined("data()");
  return impl_->data;
}

const Tensor& Variable::grad() const {
  check_defined("grad()");
  return impl_->grad;
}

void Variable::set_grad(Tensor grad) {
  check_defined("set_grad()");
  if (grad.defined()) {
    TANDEM_CHECK(grad.shape() == impl_->data.shape() && grad.dtype() == impl_->data.dtype(),
                 "set_grad on '" << impl_->name << "': gradient " << grad.str() << " does not match data "
                                 << impl_->data.str());
  }
  impl_->grad = std::move(grad);
  impl_->grad_history = nullptr;
}

Variable Variable::grad_history() const {
  check_defined("grad_history()");
  return impl_->grad_history ? from_impl(impl_->grad_history) : Variable();
}

void Variable::clear_grad_history() {
  check_defined("clear_grad_history()");
  impl_->grad_history = nullptr;
}

bool Variable::requires_grad() const { return impl_ != nullptr && impl_->requires_grad; }

Variable& Variable::set_requires_grad(bool requires_grad) {
  check_defined("set_requires_grad()");
  TANDEM_CHECK(impl_->grad_fn == nullptr || requires_grad,
               "set_requires_grad(false) on a non-leaf variable; use detach()");
  impl_->requires_grad = requires_grad;
  return *this;
}

bool Variable::is_leaf() const { return impl_ != nullptr && impl_->grad_fn == nullptr; }

const std::shared_ptr<Node>& Variable::grad_fn() const {
  check_defined("grad_fn()");
  return impl_->grad_fn;
}

const std::string& Variable::name() const {
  check_defined("name()");
  return impl_->name;
}

void Variable::set_name(std::string name) {
  check_defined("set_name()");
  impl_->name = std::move(name);
}

Variable Variable::detach() const {
  check_defined("detach()");
  return Variable(impl_->data, false);
}

void Variable::backward(const Tensor& grad, bool retain_graph) const {
  check_defined("backward()");
  Engine::backward({*this}, {grad}, retain_graph);
}

void Variable::backward(const Tensor& grad, const BackwardOptions& options) const {
  check_defined("backward()");
  Engine::backward({*this}, {grad}, options);
}

uint64_t Variable::add_grad_ready_hook(GradReadyHook hook) {
  check_defined("add_grad_ready_hook()");
  TANDEM_CHECK(is_leaf(), "grad-ready hooks are for leaves; '" << impl_->name << "' is the result of an op");
  uint64_t id = impl_->next_hook_id++;
  impl_->grad_ready_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Variable::remove_grad_ready_hook(uint64_t id) {
  if (!impl_) return;
  auto& hooks = impl_->grad_ready_hooks;
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [id](const auto& h) { return h.first == id; }),
              hooks.end());
}

std::shared_ptr<Node> Variable::gradient_edge() const {
  if (!impl_ || !impl_->requires_grad) return nullptr;
  if (impl_->grad_fn) return impl_->grad_fn;
  if (!impl_->grad_accumulator) impl_->grad_accumulator = std::make_shared<AccumulateGrad>(impl_);
  return impl_->grad_accumulator;
}

void Variable::set_grad_fn(std::shared_ptr<Node> fn) {
  check_defined("set_grad_fn()");
  impl_->grad_fn = std::move(fn);
  impl_->requires_grad = impl_->grad_fn != nullptr;
}

}  // namespace tandem
