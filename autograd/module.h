// Module: a tree of named parameters, buffers and submodules.
//
// Contract:
// - A module registers parameters (Variables that require grad unless told otherwise),
//   buffers (Tensors that are state but not trained: BatchNorm's running statistics) and
//   child modules, each under a local name without dots, unique within the module.
// - named_parameters()/named_buffers()/named_modules() list the tree depth first in
//   registration order (own entries first, then each child's) with dotted names relative
//   to the module they are called on ("blocks.2.conv.weight"). A parameter or buffer
//   shared by several paths is listed once, under its first name.
// - Parameter names: every parameter Variable carries its full dotted path from the root
//   of the tree it lives in ("D.blocks.2.conv.weight"), so that errors and the Reducer can
//   name it. name_parameters() assigns these names; register_parameter() and
//   register_module() call it for what they add (a module knows its parent, so names are
//   right whether the tree is built bottom-up or a child grows after it was registered).
//   Call root.name_parameters() after moving a subtree between parents by hand; nothing
//   else is needed.
// - Buffers are returned as Tensor handles that share storage with the module: in-place
//   writes through them (copy_, fill_, a broadcast into them) update the module.
// - state_dict() maps every parameter's and buffer's dotted name to a handle on its data
//   (clone the tensors to snapshot them). load_state_dict() copies into the existing
//   storage (so gradient or bucket views stay valid); it checks everything before it
//   copies anything and throws an Error naming every missing, unexpected (strict mode)
//   and wrongly shaped entry, with both shapes. Shape mismatches are errors even when not
//   strict; dtypes are converted.
// - train(bool)/eval() set the mode of the whole subtree; requires_grad_(bool) sets
//   requires_grad of every parameter in the subtree; zero_grad() clears (set_to_none) or
//   zeroes in place every parameter's gradient.
// - Precision (precision.h): set_compute_dtype(d) gives every module of the subtree the
//   compute dtype d; a module whose forward runs GEMMs or convolutions (the layers of nn.h,
//   nn_stylegan.h, nn_spectral_norm.h, and the models' blocks that use their children's
//   weights directly) runs them inside precision_scope(): in its own compute dtype, or in the
//   caller's (compute_dtype()) when it was given none. Parameters stay float32.
// - Modules are not copyable; hold them by std::shared_ptr.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/precision.h"
#include "autograd/variable.h"

namespace tandem {

// name -> tensor, for modules and optimizers (checkpoints).
using StateDict = std::map<std::string, Tensor>;

namespace nn {

class Module {
 public:
  Module() = default;
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // A short description for messages ("Linear(2, 16)"); unless overridden, the dynamic
  // type's name without its namespaces ("Encoder" for a tandem::models::Encoder).
  virtual std::string type_name() const;

  // The single-input forward of layers and Sequential. The base throws an Error: modules
  // with another signature define their own methods instead.
  virtual Variable forward(const Variable& x);
  Variable operator()(const Variable& x) { return forward(x); }

  // Registration. Names must be non-empty, contain no '.', and be unused in this module.
  // register_parameter sets requires_grad and the variable's full name; returns the handle.
  Variable register_parameter(const std::string& name, Variable parameter, bool requires_grad = true);
  // Returns a reference that stays valid for the module's lifetime (for in-place updates).
  Tensor& register_buffer(const std::string& name, Tensor buffer);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    register_child(name, module);
    return module;
  }

  // Listing (depth first, registration order, dotted names relative to this module).
  std::vector<Variable> parameters() const;
  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  std::vector<Tensor> buffers() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // This module (named "") and every descendant, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Calls fn on this module and every descendant, depth first (e.g. custom initialisation).
  void apply(const std::function<void(Module&)>& fn);

  // This module's dotted path from the root of its tree ("D.blocks.2"; "" for a root), and
  // the assignment of full names to every parameter in the subtree (see the contract).
  std::string path() const;
  void name_parameters();

  // Checkpoints.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state, bool strict = true);
  // The checks load_state_dict makes before it copies: throws the same Error, changes nothing.
  void check_state_dict(const StateDict& state, bool strict = true) const;

  // Modes and gradients.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  Module& requires_grad_(bool requires_grad);
  void zero_grad(bool set_to_none = true);

  // Precision (see the contract): the subtree's compute dtype, the one this module was
  // given (nullopt: none), and the scope its GEMMs and convolutions run in.
  Module& set_compute_dtype(DType dtype);
  std::optional<DType> assigned_compute_dtype() const { return compute_dtype_; }
  PrecisionScope precision_scope() const { return PrecisionScope(compute_dtype_.value_or(compute_dtype())); }

  // Moves every parameter and buffer of the subtree to `device`, in place: handles held by
  // layers, optimizers built afterwards and buffer references all see the moved data.
  // Gradients are dropped. Call it before wrapping the model or building optimizers.
  Module& to(Device device);

 protected:
  // Looks up an own buffer by local name (throws naming it when absent).
  Tensor& buffer(const std::string& name);

 private:
  void register_child(const std::string& name, std::shared_ptr<Module> child);
  void check_new_name(const std::string& name, const char* what) const;
  void name_parameters_with_prefix(const std::string& prefix);

  struct BufferSlot {
    std::string name;
    std::unique_ptr<Tensor> tensor;  // stable address for register_buffer's reference
  };

  bool training_ = true;
  std::optional<DType> compute_dtype_;
  Module* parent_ = nullptr;  // the module this one was last registered in
  std::string name_in_parent_;
  std::vector<std::pair<std::string, Variable>> parameters_;
  std::vector<BufferSlot> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace nn
}  // namespace tandem
