// Variable: a Tensor that takes part in automatic differentiation.
//
// Contract:
// - A Variable is a handle (copies share one VariableImpl). It holds `data`, an optional
//   `grad`, `requires_grad`, and for results of differentiable ops the node (`grad_fn`)
//   that computes gradients for that op's inputs.
// - A leaf is a Variable with no grad_fn (a parameter or an input). Gradients of leaves
//   that require grad are accumulated into `grad` by backward (summed in place when a grad
//   already exists, so a grad that is a view into a bucket stays a view).
// - Grad-ready hooks run on a leaf once per backward, right after its gradient for that
//   backward is complete (all contributions summed and accumulated). grad() (grad.h)
//   returns gradients instead: it neither writes `grad` nor runs these hooks.
// - A backward with create_graph (engine.h) also sums each leaf's gradient, with its
//   history, into grad_history(): a loss built from it can be differentiated again. It is
//   the rank's own gradient (a Reducer synchronises `grad`, not this), and it keeps the
//   graph alive until set_grad or zero_grad clears it (or clear_grad_history()).
// - detach() shares data but has no history and does not require grad.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace tandem {

class Node;
class AccumulateGrad;
struct BackwardOptions;  // engine.h
class Variable;

// A leaf hook: called with the leaf once its gradient for the current backward is ready.
using GradReadyHook = std::function<void(Variable&)>;

struct VariableImpl {
  Tensor data;
  Tensor grad;
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;                     // null for leaves
  std::string name;                                  // set by Module for parameters ("D.fc1.weight")
  std::shared_ptr<AccumulateGrad> grad_accumulator;  // created lazily for leaves
  std::shared_ptr<VariableImpl> grad_history;        // a create_graph backward's gradient
  std::vector<std::pair<uint64_t, GradReadyHook>> grad_ready_hooks;
  uint64_t next_hook_id = 1;
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor data, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& data() const;
  Tensor& data();
  const Tensor& grad() const;
  void set_grad(Tensor grad);  // checked against data's shape; an undefined Tensor clears it
  // The gradient with history from create_graph backwards since the last clear; undefined
  // when there is none. set_grad clears it too.
  Variable grad_history() const;
  void clear_grad_history();
  bool requires_grad() const;
  Variable& set_requires_grad(bool requires_grad);  // leaves only
  bool is_leaf() const;
  const std::shared_ptr<Node>& grad_fn() const;
  const std::string& name() const;
  void set_name(std::string name);

  Variable detach() const;

  // Runs backward from this variable. A non-scalar root needs `grad` of its shape.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  void backward(const Tensor& grad, const BackwardOptions& options) const;
  void backward(const BackwardOptions& options) const { backward(Tensor(), options); }

  // Grad-ready hooks on leaves. Returns an id for remove_grad_ready_hook.
  uint64_t add_grad_ready_hook(GradReadyHook hook);
  void remove_grad_ready_hook(uint64_t id);

  // Convenience views of data.
  const Shape& shape() const { return data().shape(); }
  int64_t dim() const { return data().dim(); }
  int64_t size(int64_t axis) const { return data().size(axis); }
  int64_t numel() const { return data().numel(); }
  DType dtype() const { return data().dtype(); }
  Device device() const { return data().device(); }
  double item(std::source_location where = std::source_location::current()) const {
    return data().item(where);
  }

  // Identity of the underlying variable (for maps keyed by parameter).
  VariableImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<VariableImpl>& impl_ptr() const { return impl_; }
  static Variable from_impl(std::shared_ptr<VariableImpl> impl);

  // Internal: the node a consumer's edge points to (grad_fn, or the accumulator of a leaf
  // that requires grad, or null).
  std::shared_ptr<Node> gradient_edge() const;
  // Internal: make this (a fresh result) the output of `fn`.
  void set_grad_fn(std::shared_ptr<Node> fn);

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<VariableImpl> impl_;
};

}  // namespace tandem
