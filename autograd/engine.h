// The backward engine and its two seams for the Reducer.
//
// Contract:
// - backward(roots, grads, retain_graph) visits only the nodes reachable from the roots,
//   newest first among the ready ones (a reverse topological order), summing the
//   gradients that reach a node before running it, so every node -- and every leaf's
//   accumulator and its grad-ready hooks -- runs exactly once per backward.
// - Before any gradient is computed, every registered BackwardObserver gets
//   on_backward_begin with a BackwardPass that lists the leaves reachable from the roots
//   (found in the same walk that counts dependencies, so the cost is proportional to the
//   reachable graph). After the last node, observers get on_backward_end (also when the
//   backward throws, with `ok` false).
// - options.inputs (PyTorch's backward(inputs=...)): only the gradients of those leaves are
//   computed and accumulated. A node runs only when one of its edges leads to a requested
//   leaf, its needs_input_grad (node.h) names only such edges (so a matmul whose weight is
//   not requested skips that GEMM), and the accumulators and grad-ready hooks of the other
//   leaves do not run: their .grad is left as it was. The BackwardPass lists the reachable
//   leaves among the inputs (restricted() is true), so a Reducer synchronises just those.
//   Each input must be a leaf that requires grad (else an Error naming it); an empty list
//   runs nothing. Unset: every reachable leaf.
// - Without retain_graph every node that ran is released after the backward.
// - With create_graph every node runs its second-order rule (node.h) with grad mode on,
//   so the gradients carry history. Each leaf's `grad` is accumulated as usual (its
//   values; hooks fire, so a Reducer synchronises them) and the same gradient with its
//   history is summed into the leaf's grad_history() (variable.h), from which a loss can
//   be built and differentiated again. retain_graph then defaults to true. A node without
//   a second-order rule is an Error naming its op. grad() is the usual tool for a
//   penalty (it leaves `grad` alone); this is for users who want both at once.
// - Observers are process-wide, except on a thread inside a ThreadObserverScope
//   (autograd/observer_scope.h), which has a list of its own: ranks run as threads of one
//   process (the in-process process group) then see only their own backwards.
// - reachable_leaves(roots[, inputs]) answers the same question without running a backward (for
//   an explicit prepare_for_backward).
// - grad() (autograd/grad.h) is not a backward in this sense: it calls no observer, runs
//   no accumulator and fires no grad-ready hook. A loss built from its create_graph
//   gradients (a gradient penalty) is then backpropagated here like any other, and its
//   reachable leaves include those the penalty reaches through the second-order graph.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "autograd/variable.h"

namespace tandem {

class BackwardPass {
 public:
  // Leaves reachable from the roots that require grad (and, when the backward was given
  // inputs, are among them): the leaves whose gradients it writes. Discovery order, no
  // duplicates.
  const std::vector<std::shared_ptr<VariableImpl>>& reachable_leaves() const { return leaves_; }
  const std::vector<Variable>& roots() const { return roots_; }
  // True when the backward was given inputs (BackwardOptions::inputs).
  bool restricted() const { return restricted_; }
  bool ok = true;  // set false for on_backward_end when the backward failed

 private:
  friend class Engine;
  std::vector<Variable> roots_;
  std::vector<std::shared_ptr<VariableImpl>> leaves_;
  bool restricted_ = false;
};

class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  virtual void on_backward_begin(const BackwardPass& pass) = 0;
  virtual void on_backward_end(const BackwardPass& pass) = 0;
};

// The leaves a backward computes gradients for: unset (every reachable leaf) or a list,
// which may be empty. An optional list that a braced list of Variables also initialises:
// `.inputs = {fake}` and `.inputs = {a, b}` name those leaves (a std::optional of a vector
// does not take a one-element braced list), `.inputs = {}` leaves it unset.
class BackwardInputs {
 public:
  BackwardInputs() = default;
  BackwardInputs(std::nullopt_t) {}  // NOLINT(google-explicit-constructor): as std::optional
  BackwardInputs(std::vector<Variable> leaves) : leaves_(std::move(leaves)) {}  // NOLINT
  BackwardInputs(std::initializer_list<Variable> leaves) : leaves_(std::vector<Variable>(leaves)) {}

  bool has_value() const { return leaves_.has_value(); }
  explicit operator bool() const { return has_value(); }
  const std::vector<Variable>& operator*() const { return *leaves_; }
  const std::vector<Variable>* operator->() const { return &*leaves_; }

 private:
  std::optional<std::vector<Variable>> leaves_;
};

struct BackwardOptions {
  std::optional<bool> retain_graph = std::nullopt;  // unset: same as create_graph
  bool create_graph = false;
  BackwardInputs inputs{};  // the leaves whose gradients to compute (see the contract)
};

class Engine {
 public:
  static void backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads,
                       const BackwardOptions& options);
  static void backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads,
                       bool retain_graph = false);
  // Observers are not owned; remove them before they are destroyed.
  static void add_observer(BackwardObserver* observer);
  static void remove_observer(BackwardObserver* observer);
};

std::vector<std::shared_ptr<VariableImpl>> reachable_leaves(const std::vector<Variable>& roots);
// Those of them among `inputs` (a backward given these inputs writes exactly these).
std::vector<std::shared_ptr<VariableImpl>> reachable_leaves(const std::vector<Variable>& roots,
                                                            const std::vector<Variable>& inputs);

// backward for several roots at once (e.g. two losses), each with a scalar seed of 1.
void backward(const std::vector<Variable>& roots, bool retain_graph = false);
void backward(const std::vector<Variable>& roots, const BackwardOptions& options);

}  // namespace tandem
