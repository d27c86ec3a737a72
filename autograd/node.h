// Nodes of the backward graph.
//
// Contract:
// - Every differentiable op that runs while grad mode is on and has an input requiring
//   grad records one Node. A node has exactly one output (its result variable) and one
//   edge per input: the input's grad_fn, its leaf accumulator, or null when that input
//   needs no gradient.
// - apply(grad_output) returns one gradient per edge (undefined where the edge is null or
//   needs_input_grad is false). grad(), and a backward given `inputs` (engine.h), narrow
//   needs_input_grad to the edges that lead to their inputs for the duration of one apply
//   (set_wanted_edges), so e.g. a gradient with respect to x skips the weight gradients.
// - sequence_nr increases with creation; the engine runs ready nodes newest first, which
//   is the reverse of the forward order. Leaf accumulators are the exception: their
//   sequence_nr is the largest value, so each runs the moment its gradient is complete
//   (they are made once per leaf, long before the ops that use them, and newest-first
//   alone would hold every one back to the end of the backward). A leaf's grad-ready hook,
//   and a Reducer's bucket launch, thus happen while the rest of the backward is still to
//   run, which is what lets communication overlap it. Accumulators have no edges, so the
//   order of the other nodes, and every value, is the same either way.
// - release() frees what the node saved for backward; applying a released node throws an
//   error telling the user to pass retain_graph.
// - apply_with_graph(grad_output) is the same backward built from differentiable Variable
//   ops, so the gradients it returns carry history (used only by grad() with
//   create_graph). A node without such a rule throws an Error naming its op ("<op> has no
//   second-order rule yet"); the plain Tensor path above is never affected.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "autograd/variable.h"

namespace tandem {

class Node {
 public:
  Node();
  virtual ~Node() = default;

  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  virtual std::vector<Variable> apply_with_graph(const Variable& grad_output);
  virtual std::string name() const = 0;
  virtual void release() {}
  virtual bool released() const { return false; }

  const std::vector<std::shared_ptr<Node>>& next_edges() const { return next_edges_; }
  std::vector<std::shared_ptr<Node>>& next_edges() { return next_edges_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  bool needs_input_grad(size_t i) const {
    return i < next_edges_.size() && next_edges_[i] != nullptr &&
           (wanted_ == nullptr || wanted_->count(next_edges_[i].get()) != 0);
  }
  // While set (by grad() or a backward given inputs, for one apply), only edges into
  // `wanted` need a gradient; the set must outlive the call. Null restores the default
  // (every non-null edge).
  void set_wanted_edges(const std::unordered_set<Node*>* wanted) { wanted_ = wanted; }

 protected:
  struct RunWhenReady {};
  explicit Node(RunWhenReady);  // sequence_nr is the largest value: runs as soon as ready

 private:
  std::vector<std::shared_ptr<Node>> next_edges_;
  uint64_t sequence_nr_;
  const std::unordered_set<Node*>* wanted_ = nullptr;
};

// The node of an op, with its backward as a closure. What the closure captures is what
// the node saved; release() drops the closure.
class FunctionNode final : public Node {
 public:
  // backward(grad_output, node) -> one gradient per input; it may consult
  // node.needs_input_grad(i) to skip work.
  using Backward = std::function<std::vector<Tensor>(const Tensor&, const FunctionNode&)>;
  // The same rule on Variables (differentiable); optional.
  using GraphBackward = std::function<std::vector<Variable>(const Variable&, const FunctionNode&)>;

  FunctionNode(std::string name, Backward backward, GraphBackward graph_backward = nullptr)
      : name_(std::move(name)), backward_(std::move(backward)), graph_backward_(std::move(graph_backward)) {}
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  std::vector<Variable> apply_with_graph(const Variable& grad_output) override;
  std::string name() const override { return name_; }
  void release() override {
    backward_ = nullptr;
    graph_backward_ = nullptr;
  }
  bool released() const override { return !backward_; }

 private:
  void check_not_released() const;

  std::string name_;
  Backward backward_;
  GraphBackward graph_backward_;
};

// The sink of a leaf: adds the incoming gradient into the leaf's grad, then fires the
// leaf's grad-ready hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::weak_ptr<VariableImpl> leaf) : Node(RunWhenReady{}), leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  // A create_graph backward's step (engine.h): sums the gradient, history kept, into the
  // leaf's grad_history, then accumulates its values exactly as apply() does.
  void accumulate_with_history(const Variable& grad_output);
  std::string name() const override { return "AccumulateGrad"; }
  // The leaf, or null if it no longer exists.
  std::shared_ptr<VariableImpl> leaf() const { return leaf_.lock(); }

 private:
  std::weak_ptr<VariableImpl> leaf_;
};

}  // namespace tandem
