#include "autograd/function.h"

namespace tandem {

bool records_graph(const std::vector<Variable>& inputs) {
  if (!GradMode::is_enabled()) return false;
  bool any = false;
  for (const Variable& in : inputs) any = any || in.requires_grad();
  return any;
}

Variable make_result(Tensor data, const char* name, const std::vector<Variable>& inputs,
                     FunctionNode::Backward backward, FunctionNode::GraphBackward graph_backward) {
  Variable result(std::move(data), false);
  if (!records_graph(inputs)) return result;
  auto node = std::make_shared<FunctionNode>(name, std::move(backward), std::move(graph_backward));
  node->next_edges().reserve(inputs.size());
  for (const Variable& in : inputs) node->next_edges().push_back(in.gradient_edge());
  result.set_grad_fn(std::move(node));
  return result;
}

}  // namespace tandem
