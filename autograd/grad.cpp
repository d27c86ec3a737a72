#include "autograd/grad.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/graph_walk.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"

namespace tandem {

namespace {

std::string describe(const Variable& v) {
  std::string s = v.name().empty() ? "" : "'" + v.name() + "' ";
  return s + shape_str(v.shape());
}

// Sums a gradient into a node's input buffer. Out of place: a buffer may be a gradient
// that is also returned to the caller.
void accumulate(std::unordered_map<Node*, Variable>& buffers, Node* node, Variable g, bool create_graph) {
  Variable& slot = buffers[node];
  if (!slot.defined()) {
    slot = std::move(g);
  } else {
    slot = create_graph ? add(slot, g) : Variable(kernels::add(slot.data(), g.data()));
  }
}

}  // namespace

std::vector<Variable> grad(const std::vector<Variable>& outputs, const std::vector<Variable>& inputs,
                           const std::vector<Variable>& grad_outputs, const GradOptions& options) {
  const bool create_graph = options.create_graph;
  const bool retain_graph = options.retain_graph.value_or(create_graph);
  TANDEM_CHECK(!outputs.empty(), "grad: no outputs given");
  TANDEM_CHECK(!inputs.empty(), "grad: no inputs given");
  TANDEM_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
               "grad: " << outputs.size() << " outputs but " << grad_outputs.size() << " grad_outputs");

  std::vector<std::shared_ptr<Node>> starts;
  std::vector<Variable> seeds;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Variable& out = outputs[i];
    TANDEM_CHECK(out.defined(), "grad: output " << i << " is an undefined Variable");
    std::shared_ptr<Node> node = out.gradient_edge();
    TANDEM_CHECK(node != nullptr, "grad: output " << i << " (" << describe(out)
                                                  << ") does not require grad and has no grad_fn");
    starts.push_back(std::move(node));
    Variable seed = grad_outputs.empty() ? Variable() : grad_outputs[i];
    if (seed.defined()) {
      TANDEM_CHECK(seed.shape() == out.shape(), "grad: grad_outputs["
                                                    << i << "] has shape " << shape_str(seed.shape())
                                                    << ", output " << i << " has " << shape_str(out.shape()));
      seeds.push_back(create_graph ? seed : Variable(seed.data()));
    } else {
      TANDEM_CHECK(out.numel() == 1, "grad: output "
                                         << i << " (" << describe(out)
                                         << ") is not a scalar; pass grad_outputs (one per output, of "
                                            "its shape)");
      seeds.push_back(Variable(Tensor::ones(out.shape(), out.dtype(), out.device())));
    }
  }

  std::vector<std::shared_ptr<Node>> input_nodes(inputs.size());
  std::unordered_set<Node*> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TANDEM_CHECK(inputs[i].defined(), "grad: input " << i << " is an undefined Variable");
    input_nodes[i] = inputs[i].gradient_edge();
    TANDEM_CHECK(
        input_nodes[i] != nullptr || options.allow_unused,
        "grad: input " << i << " (" << describe(inputs[i])
                       << ") does not require grad, so it has no gradient; pass allow_unused to get an "
                          "undefined Variable for it");
    if (input_nodes[i]) targets.insert(input_nodes[i].get());
  }

  detail::Graph graph = detail::discover(starts);
  std::unordered_set<Node*> needed = detail::nodes_leading_to(graph, targets);
  auto propagates = [&needed](const Node* node) {
    for (const auto& next : node->next_edges()) {
      if (next && needed.count(next.get())) return true;
    }
    return false;
  };

  GradModeScope grad_mode(create_graph);  // a create_graph pass's rules must record
  std::unordered_map<Node*, Variable> buffers;
  std::unordered_map<Node*, Variable> captured;  // the gradient that reached each input's node
  std::vector<std::shared_ptr<Node>> ran;
  for (size_t i = 0; i < starts.size(); ++i) accumulate(buffers, starts[i].get(), seeds[i], create_graph);
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, detail::NewestFirst> ready;
  std::unordered_set<Node*> queued;
  for (const auto& s : starts) {
    if (needed.count(s.get()) && graph.dependencies[s.get()] == 0 && queued.insert(s.get()).second)
      ready.push(s);
  }
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    Variable g;
    if (auto it = buffers.find(node.get()); it != buffers.end()) {
      g = std::move(it->second);
      buffers.erase(it);
    }
    if (targets.count(node.get())) captured[node.get()] = g;
    // A leaf's accumulator never runs here (no .grad, no hooks); nor does a node past the inputs.
    if (!propagates(node.get())) continue;
    std::vector<Variable> results;
    if (g.defined()) {
      detail::WantedEdges only_needed(*node, needed);
      if (create_graph) {
        results = node->apply_with_graph(g);
      } else {
        for (Tensor& t : node->apply(g.data()))
          results.push_back(t.defined() ? Variable(std::move(t)) : Variable());
      }
      ran.push_back(node);
    }
    const auto& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      if (!edges[i] || !needed.count(edges[i].get())) continue;
      if (i < results.size() && results[i].defined())
        accumulate(buffers, edges[i].get(), std::move(results[i]), create_graph);
      if (--graph.dependencies[edges[i].get()] == 0) ready.push(edges[i]);
    }
  }
  if (!retain_graph) {
    for (const auto& node : ran) node->release();
  }

  std::vector<Variable> result(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!input_nodes[i]) continue;  // allow_unused, checked above
    auto it = captured.find(input_nodes[i].get());
    TANDEM_CHECK(
        it != captured.end() || options.allow_unused,
        "grad: input " << i << " (" << describe(inputs[i])
                       << ") is not reachable from the outputs; pass allow_unused to get an undefined "
                          "Variable for it");
    if (it == captured.end()) continue;
    result[i] = it->second.defined()
                    ? it->second
                    : Variable(Tensor::zeros(inputs[i].shape(), inputs[i].dtype(), inputs[i].device()));
  }
  return result;
}

}  // namespace tandem
