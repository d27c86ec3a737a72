#include "autograd/engine.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/graph_walk.h"
#include "autograd/local_backward_scope.h"
#include "autograd/node.h"
#include "autograd/observer_scope.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "runtime/trace_summary.h"

namespace tandem {

namespace detail {

// Locked: when ranks are threads (dist::run_ranks), Reducers register, unregister and
// watch backwards on several threads at once.
struct ObserverList {
  std::mutex mu;
  std::vector<BackwardObserver*> list;
};

}  // namespace detail

using detail::discover;
using detail::Graph;
using detail::NewestFirst;

namespace {

thread_local detail::ObserverList* t_scoped_observers = nullptr;  // a ThreadObserverScope's

detail::ObserverList& observers() {
  static detail::ObserverList process_wide;
  return t_scoped_observers != nullptr ? *t_scoped_observers : process_wide;
}

std::shared_ptr<Node> root_node(const Variable& root, size_t index) {
  TANDEM_CHECK(root.defined(), "backward: root " << index << " is an undefined Variable");
  std::shared_ptr<Node> node = root.gradient_edge();
  TANDEM_CHECK(node != nullptr, "backward: root " << index << " (" << root.data().str()
                                                  << ") does not require grad and has no grad_fn");
  return node;
}

void accumulate(std::unordered_map<Node*, Tensor>& buffers, Node* node, Tensor grad) {
  Tensor& slot = buffers[node];
  if (!slot.defined()) {
    slot = std::move(grad);
  } else if (slot.storage().use_count() == 1) {
    kernels::add_(slot, grad);
  } else {
    slot = kernels::add(slot, grad);  // never write into a tensor someone else holds
  }
}

// create_graph: the sum is itself recorded, so the gradient keeps its history.
void accumulate(std::unordered_map<Node*, Variable>& buffers, Node* node, Variable grad) {
  Variable& slot = buffers[node];
  slot = slot.defined() ? add(slot, grad) : std::move(grad);
}

std::vector<Tensor> apply_node(Node& node, const Tensor& grad) {
  // An accumulator runs even without a gradient (zeros, and its hooks fire).
  if (grad.defined() || dynamic_cast<AccumulateGrad*>(&node) != nullptr) return node.apply(grad);
  return {};
}

std::vector<Variable> apply_node(Node& node, const Variable& grad) {
  if (auto* acc = dynamic_cast<AccumulateGrad*>(&node)) {
    acc->accumulate_with_history(grad);
    return {};
  }
  if (grad.defined()) return node.apply_with_graph(grad);
  return {};
}

// Runs the nodes of `graph` from the seeded starts, newest ready node first. G is Tensor
// (a plain backward) or Variable (create_graph: every rule recorded). `needed` (a backward
// given inputs; null: every node) is the set of nodes that run, and what each one's
// needs_input_grad names. Every needed node runs: a node that consumes a needed one leads
// to the same leaves, so it is needed too and the dependency counts stay right.
template <typename G>
void run_nodes(const std::vector<std::shared_ptr<Node>>& starts, std::vector<G> seeds, Graph& graph,
               const std::unordered_set<Node*>* needed) {
  auto runs = [needed](Node* node) { return needed == nullptr || needed->count(node) != 0; };
  std::unordered_map<Node*, G> buffers;
  for (size_t i = 0; i < starts.size(); ++i) {
    if (runs(starts[i].get())) accumulate(buffers, starts[i].get(), std::move(seeds[i]));
  }
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, NewestFirst> ready;
  std::unordered_set<Node*> queued;
  for (const auto& s : starts) {
    if (runs(s.get()) && graph.dependencies[s.get()] == 0 && queued.insert(s.get()).second) ready.push(s);
  }
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    G grad;
    if (auto it = buffers.find(node.get()); it != buffers.end()) {
      grad = std::move(it->second);
      buffers.erase(it);
    }
    std::optional<detail::WantedEdges> only_needed;
    if (needed != nullptr) only_needed.emplace(*node, *needed);
    std::vector<G> outputs = apply_node(*node, grad);
    only_needed.reset();
    const auto& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      if (!edges[i] || !runs(edges[i].get())) continue;
      if (i < outputs.size() && outputs[i].defined())
        accumulate(buffers, edges[i].get(), std::move(outputs[i]));
      if (--graph.dependencies[edges[i].get()] == 0) ready.push(edges[i]);
    }
  }
}

// The accumulators of a backward's `inputs`: leaves that require grad, else an Error.
std::unordered_set<Node*> input_accumulators(const std::vector<Variable>& inputs) {
  std::unordered_set<Node*> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Variable& v = inputs[i];
    TANDEM_CHECK(v.defined(), "backward: inputs[" << i << "] is an undefined Variable");
    const std::string name = v.name().empty() ? "" : " '" + v.name() + "'";
    TANDEM_CHECK(v.is_leaf(), "backward: inputs[" << i << "]" << name
                                                  << " is not a leaf; inputs name the parameters (leaves) "
                                                     "whose .grad the backward accumulates");
    TANDEM_CHECK(v.requires_grad(), "backward: inputs[" << i << "]" << name << " " << shape_str(v.shape())
                                                        << " does not require grad, so it gets no gradient; "
                                                           "leave it out of inputs");
    targets.insert(v.gradient_edge().get());
  }
  return targets;
}

// The leaves among `leaves` whose accumulator is one of `targets`, in their order.
std::vector<std::shared_ptr<VariableImpl>> leaves_among(std::vector<std::shared_ptr<VariableImpl>> leaves,
                                                        const std::unordered_set<Node*>& targets) {
  std::erase_if(leaves, [&targets](const std::shared_ptr<VariableImpl>& leaf) {
    return !targets.count(static_cast<Node*>(leaf->grad_accumulator.get()));
  });
  return leaves;
}

}  // namespace

detail::Graph detail::discover(const std::vector<std::shared_ptr<Node>>& starts) {
  Graph g;
  std::unordered_set<Node*> seen;
  std::vector<std::shared_ptr<Node>> stack;
  auto add_leaf_if_accumulator = [&g](const std::shared_ptr<Node>& node) {
    if (auto* acc = dynamic_cast<AccumulateGrad*>(node.get())) {
      if (auto leaf = acc->leaf(); leaf && leaf->requires_grad) g.leaves.push_back(std::move(leaf));
    }
  };
  for (const auto& s : starts) {
    if (seen.insert(s.get()).second) {
      stack.push_back(s);
      g.nodes.push_back(s);
      add_leaf_if_accumulator(s);
    }
  }
  while (!stack.empty()) {
    std::shared_ptr<Node> node = std::move(stack.back());
    stack.pop_back();
    for (const auto& next : node->next_edges()) {
      if (!next) continue;
      ++g.dependencies[next.get()];
      if (seen.insert(next.get()).second) {
        stack.push_back(next);
        g.nodes.push_back(next);
        add_leaf_if_accumulator(next);
      }
    }
  }
  return g;
}

std::unordered_set<Node*> detail::nodes_leading_to(const Graph& graph,
                                                   const std::unordered_set<Node*>& targets) {
  std::unordered_map<Node*, std::vector<Node*>> consumers;
  for (const auto& node : graph.nodes) {
    for (const auto& next : node->next_edges()) {
      if (next) consumers[next.get()].push_back(node.get());
    }
  }
  std::unordered_set<Node*> needed;
  std::vector<Node*> stack;
  for (const auto& node : graph.nodes) {
    if (targets.count(node.get()) && needed.insert(node.get()).second) stack.push_back(node.get());
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (Node* c : consumers[node]) {
      if (needed.insert(c).second) stack.push_back(c);
    }
  }
  return needed;
}

ThreadObserverScope::ThreadObserverScope() : list_(std::make_unique<detail::ObserverList>()) {
  TANDEM_CHECK(t_scoped_observers == nullptr, "ThreadObserverScope: this thread is already inside one");
  t_scoped_observers = list_.get();
}

ThreadObserverScope::~ThreadObserverScope() { t_scoped_observers = nullptr; }

void Engine::add_observer(BackwardObserver* observer) {
  detail::ObserverList& o = observers();
  std::lock_guard<std::mutex> lock(o.mu);
  o.list.push_back(observer);
}

void Engine::remove_observer(BackwardObserver* observer) {
  detail::ObserverList& o = observers();
  std::lock_guard<std::mutex> lock(o.mu);
  o.list.erase(std::remove(o.list.begin(), o.list.end(), observer), o.list.end());
}

void Engine::backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads,
                      const BackwardOptions& options) {
  const bool retain_graph = options.retain_graph.value_or(options.create_graph);
  TANDEM_CHECK(!roots.empty(), "backward: no roots given");
  TANDEM_CHECK(grads.size() == roots.size(),
               "backward: " << roots.size() << " roots but " << grads.size() << " seed gradients");
  std::vector<std::shared_ptr<Node>> starts;
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    starts.push_back(root_node(roots[i], i));
    const Tensor& data = roots[i].data();
    if (grads[i].defined()) {
      TANDEM_CHECK(grads[i].shape() == data.shape(),
                   "backward: seed gradient " << grads[i].str() << " does not match root " << data.str());
      seeds.push_back(grads[i].clone());
    } else {
      TANDEM_CHECK(data.numel() == 1,
                   "backward: root " << data.str() << " is not a scalar; pass a seed gradient of its shape");
      seeds.push_back(Tensor::ones(data.shape(), data.dtype(), data.device()));
    }
  }

  Graph graph = discover(starts);
  BackwardPass pass;
  pass.roots_ = roots;
  std::optional<std::unordered_set<Node*>> needed;
  if (options.inputs) {
    const std::unordered_set<Node*> targets = input_accumulators(*options.inputs);
    needed = detail::nodes_leading_to(graph, targets);
    pass.leaves_ = leaves_among(std::move(graph.leaves), targets);
    pass.restricted_ = true;
  } else {
    pass.leaves_ = std::move(graph.leaves);
  }
  const std::unordered_set<Node*>* only = needed ? &*needed : nullptr;
  std::vector<BackwardObserver*> watching;
  if (!LocalBackwardScope::active()) {  // a rank's own backward is nobody else's business
    detail::ObserverList& o = observers();
    std::lock_guard<std::mutex> lock(o.mu);
    watching = o.list;
  }
  for (BackwardObserver* o : watching) o->on_backward_begin(pass);

  // The compute alone: the observers' work at begin (the Reducer's agreement) and end (its
  // waits) is theirs to record.
  const int64_t compute_start_ns = trace::enabled() ? trace::now_ns() : -1;
  try {
    if (options.create_graph) {
      GradModeScope grad_mode(true);  // the rules record, so the gradients carry history
      std::vector<Variable> graph_seeds(seeds.begin(), seeds.end());
      run_nodes(starts, std::move(graph_seeds), graph, only);
    } else {
      run_nodes(starts, std::move(seeds), graph, only);
    }
  } catch (...) {
    pass.ok = false;
    for (BackwardObserver* o : watching) o->on_backward_end(pass);
    throw;
  }
  if (!retain_graph) {
    for (const auto& node : graph.nodes) {
      if (only == nullptr || only->count(node.get())) node->release();  // the nodes that ran
    }
  }
  if (compute_start_ns >= 0) trace::complete("autograd", trace::kBackward, compute_start_ns);
  for (BackwardObserver* o : watching) o->on_backward_end(pass);
}

std::vector<std::shared_ptr<VariableImpl>> reachable_leaves(const std::vector<Variable>& roots) {
  std::vector<std::shared_ptr<Node>> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (auto node = roots[i].defined() ? roots[i].gradient_edge() : nullptr)
      starts.push_back(std::move(node));
  }
  return discover(starts).leaves;
}

std::vector<std::shared_ptr<VariableImpl>> reachable_leaves(const std::vector<Variable>& roots,
                                                            const std::vector<Variable>& inputs) {
  return leaves_among(reachable_leaves(roots), input_accumulators(inputs));
}

void Engine::backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads,
                      bool retain_graph) {
  backward(roots, grads, BackwardOptions{.retain_graph = retain_graph});
}

void backward(const std::vector<Variable>& roots, bool retain_graph) {
  Engine::backward(roots, std::vector<Tensor>(roots.size()), retain_graph);
}

void backward(const std::vector<Variable>& roots, const BackwardOptions& options) {
  Engine::backward(roots, std::vector<Tensor>(roots.size()), options);
}

}  // namespace tandem
