#include "autograd/node.h"

#include "kernels/elementwise.h"

namespace tandem {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

std::vector<Tensor> FunctionNode::apply(const Tensor& grad_output) {
  TANDEM_CHECK(backward_ != nullptr,
               "backward through '" << name_ << "' a second time: its saved tensors were freed by the "
                                    << "previous backward; pass retain_graph=true to the first backward");
  std::vector<Tensor> grads = backward_(grad_output, *this);
  TANDEM_CHECK(grads.size() == next_edges().size(),
               "internal: backward of '" << name_ << "' returned " << grads.size() << " gradients for "
                                         << next_edges().size() << " inputs");
  return grads;
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
