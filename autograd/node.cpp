#include "autograd/node.h"

#include <limits>

#include "autograd/ops.h"
#include "kernels/elementwise.h"

namespace tandem {

namespace {

std::atomic<uint64_t> g_next_sequence_nr{0};

// Ops whose missing second-order rule has a known reason users should hear about.
std::string second_order_note(const std::string& op) {
  if (op.rfind("batch_norm", 0) == 0)
    return " WGAN-GP and R1 penalties are per sample, so a critic must not use batch norm: "
           "build it without (or with layer norm).";
  return "";
}

}  // namespace

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

Node::Node(RunWhenReady) : sequence_nr_(std::numeric_limits<uint64_t>::max()) {}

std::vector<Variable> Node::apply_with_graph(const Variable&) {
  TANDEM_FAIL(name() << " has no second-order rule yet; a graph through it cannot be differentiated "
                        "twice (grad with create_graph)."
                     << second_order_note(name()));
}

void FunctionNode::check_not_released() const {
  TANDEM_CHECK(
      backward_ != nullptr, "backward through '"
                                << name_ << "' a second time: its saved tensors were freed by the "
                                << "previous backward or grad(); pass retain_graph=true to the first one");
}

std::vector<Variable> FunctionNode::apply_with_graph(const Variable& grad_output) {
  check_not_released();
  if (!graph_backward_) return Node::apply_with_graph(grad_output);
  std::vector<Variable> grads = graph_backward_(grad_output, *this);
  TANDEM_CHECK(grads.size() == next_edges().size(), "internal: second-order backward of '"
                                                        << name_ << "' returned " << grads.size()
                                                        << " gradients for " << next_edges().size()
                                                        << " inputs");
  return grads;
}

std::vector<Tensor> FunctionNode::apply(const Tensor& grad_output) {
  check_not_released();
  std::vector<Tensor> grads = backward_(grad_output, *this);
  TANDEM_CHECK(grads.size() == next_edges().size(),
               "internal: backward of '" << name_ << "' returned " << grads.size() << " gradients for "
                                         << next_edges().size() << " inputs");
  return grads;
}

void AccumulateGrad::accumulate_with_history(const Variable& grad_output) {
  std::shared_ptr<VariableImpl> leaf = leaf_.lock();
  if (!leaf) return;
  if (grad_output.defined()) {
    leaf->grad_history = leaf->grad_history
                             ? add(Variable::from_impl(leaf->grad_history), grad_output).impl_ptr()
                             : grad_output.impl_ptr();
  }
  apply(grad_output.defined() ? grad_output.data() : Tensor());
}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  std::shared_ptr<VariableImpl> leaf = leaf_.lock();
  if (!leaf) return {};
  if (!grad_output.defined()) {
    // Reachable but no gradient flowed (e.g. an op whose gradient for this input is
    // identically zero): the leaf's gradient is zero, and its hooks still fire once, so a
    // Reducer waiting on every reachable leaf completes.
    if (!leaf->grad.defined())
      leaf->grad = Tensor::zeros(leaf->data.shape(), leaf->data.dtype(), leaf->data.device());
    Variable v = Variable::from_impl(leaf);
    auto hooks = leaf->grad_ready_hooks;
    for (auto& [id, hook] : hooks) hook(v);
    return {};
  }
  TANDEM_CHECK(grad_output.shape() == leaf->data.shape(),
               "gradient for '" << leaf->name << "' has shape " << shape_str(grad_output.shape())
                                << ", parameter has " << shape_str(leaf->data.shape()));
  if (!leaf->grad.defined()) {
    // The engine hands over a buffer nobody else holds when it can; copy otherwise so the
    // leaf's grad never aliases another tensor.
    leaf->grad = grad_output.storage().use_count() == 1 ? grad_output : grad_output.clone();
  } else {
    kernels::add_(leaf->grad, grad_output);  // in place: a bucket view stays a view
  }
  Variable v = Variable::from_impl(leaf);
  // Copy: a hook may add or remove hooks.
  auto hooks = leaf->grad_ready_hooks;
  for (auto& [id, hook] : hooks) hook(v);
  return {};
}

}  // namespace tandem
