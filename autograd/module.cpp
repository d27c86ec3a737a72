#include "autograd/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>
#include <typeinfo>

namespace tandem::nn {

std::string Module::type_name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                   std::free);
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  // Namespaces go ("tandem::models::Encoder" -> "Encoder"); template arguments stay.
  const size_t scope = name.rfind("::", name.find('<'));
  return scope == std::string::npos ? name : name.substr(scope + 2);
}

Module::~Module() {
  // Children may outlive this module (someone else holds them): they become roots.
  for (auto& [name, child] : children_) {
    if (child && child->parent_ == this) child->parent_ = nullptr;
  }
}

Variable Module::forward(const Variable&) {
  TANDEM_FAIL(type_name() << (path().empty() ? "" : " '" + path() + "'")
                          << " has no single-input forward(); call its own methods instead");
}

void Module::check_new_name(const std::string& name, const char* what) const {
  TANDEM_CHECK(!name.empty() && name.find('.') == std::string::npos,
               type_name() << ": " << what << " name '" << name << "' must be non-empty and contain no '.'");
  bool taken = false;
  for (const auto& p : parameters_) taken = taken || p.first == name;
  for (const auto& b : buffers_) taken = taken || b.name == name;
  for (const auto& c : children_) taken = taken || c.first == name;
  TANDEM_CHECK(!taken, type_name() << ": cannot register " << what << " '" << name
                                   << "': the name is already used in this module");
}

Variable Module::register_parameter(const std::string& name, Variable parameter, bool requires_grad) {
  check_new_name(name, "parameter");
  TANDEM_CHECK(parameter.defined(), type_name() << ": parameter '" << name << "' is an undefined Variable");
  TANDEM_CHECK(parameter.is_leaf(), type_name() << ": parameter '" << name
                                                << "' is the result of an op; register a leaf (detach it)");
  parameter.set_requires_grad(requires_grad);
  const std::string prefix = path();
  parameter.set_name(prefix.empty() ? name : prefix + "." + name);
  parameters_.emplace_back(name, parameter);
  return parameter;
}

Tensor& Module::register_buffer(const std::string& name, Tensor buffer) {
  check_new_name(name, "buffer");
  TANDEM_CHECK(buffer.defined(), type_name() << ": buffer '" << name << "' is an undefined tensor");
  buffers_.push_back({name, std::make_unique<Tensor>(std::move(buffer))});
  return *buffers_.back().tensor;
}

void Module::register_child(const std::string& name, std::shared_ptr<Module> child) {
  check_new_name(name, "module");
  TANDEM_CHECK(child != nullptr, type_name() << ": module '" << name << "' is null");
  for (const Module* m = this; m != nullptr; m = m->parent_) {
    TANDEM_CHECK(m != child.get(),
                 type_name() << ": registering module '" << name << "' would make the tree a cycle");
  }
  child->parent_ = this;
  child->name_in_parent_ = name;
  children_.emplace_back(name, child);
  child->name_parameters();
}

Tensor& Module::buffer(const std::string& name) {
  for (auto& b : buffers_) {
    if (b.name == name) return *b.tensor;
  }
  TANDEM_FAIL(type_name() << " has no buffer '" << name << "'");
}

std::string Module::path() const {
  std::string p;
  for (const Module* m = this; m->parent_ != nullptr; m = m->parent_) {
    p = p.empty() ? m->name_in_parent_ : m->name_in_parent_ + "." + p;
  }
  return p;
}

void Module::name_parameters() {
  const std::string p = path();
  name_parameters_with_prefix(p.empty() ? p : p + ".");
}

void Module::name_parameters_with_prefix(const std::string& prefix) {
  for (auto& [name, param] : parameters_) param.set_name(prefix + name);
  for (auto& [name, child] : children_) child->name_parameters_with_prefix(prefix + name + ".");
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Variable>> out;
  std::set<const void*> seen;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m,
                                                                    const std::string& prefix) {
    for (const auto& [name, param] : m.parameters_) {
      if (seen.insert(param.impl()).second) out.emplace_back(prefix + name, param);
    }
    for (const auto& [name, child] : m.children_) walk(*child, prefix + name + ".");
  };
  walk(*this, "");
  return out;
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  for (auto& [name, param] : named_parameters()) out.push_back(param);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<const void*> seen;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m,
                                                                    const std::string& prefix) {
    for (const auto& b : m.buffers_) {
      if (seen.insert(b.tensor.get()).second) out.emplace_back(prefix + b.name, *b.tensor);
    }
    for (const auto& [name, child] : m.children_) walk(*child, prefix + name + ".");
  };
  walk(*this, "");
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& [name, b] : named_buffers()) out.push_back(b);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::set<const Module*> seen;
  std::function<void(Module&, const std::string&)> walk = [&](Module& m, const std::string& name) {
    if (!seen.insert(&m).second) return;
    out.emplace_back(name, &m);
    for (const auto& [child_name, child] : m.children_) {
      walk(*child, name.empty() ? child_name : name + "." + child_name);
    }
  };
  walk(*this, "");
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, m] : named_modules()) fn(*m);
}

StateDict Module::state_dict() const {
  StateDict out;
  for (const auto& [name, param] : named_parameters()) out.emplace(name, param.data());
  for (const auto& [name, buf] : named_buffers()) out.emplace(name, buf);
  return out;
}

void Module::check_state_dict(const StateDict& state, bool strict) const {
  // In registration order, parameters then buffers, as the problems are listed.
  std::vector<std::pair<std::string, Tensor>> targets;
  for (const auto& [name, param] : named_parameters()) targets.emplace_back(name, param.data());
  for (const auto& [name, buf] : named_buffers()) targets.emplace_back(name, buf);

  std::vector<std::string> problems;
  std::set<std::string> known;
  for (const auto& [name, tensor] : targets) {
    known.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      if (strict) problems.push_back("missing entry '" + name + "' (the module has " + tensor.str() + ")");
      continue;
    }
    const Tensor& src = it->second;
    if (!src.defined()) {
      problems.push_back("entry '" + name + "' is an undefined tensor (the module has " + tensor.str() + ")");
    } else if (src.shape() != tensor.shape()) {
      problems.push_back("entry '" + name + "' has shape " + shape_str(src.shape()) +
                         " in the state dict but " + shape_str(tensor.shape()) + " in the module");
    }
  }
  if (strict) {
    for (const auto& [name, tensor] : state) {
      if (!known.count(name)) {
        problems.push_back("unexpected entry '" + name + "' (" +
                           (tensor.defined() ? tensor.str() : "undefined") + ")");
      }
    }
  }
  if (!problems.empty()) {
    std::ostringstream os;
    os << "load_state_dict into " << type_name() << (path().empty() ? "" : " '" + path() + "'") << ": ";
    for (size_t i = 0; i < problems.size(); ++i) os << (i ? "; " : "") << problems[i];
    TANDEM_FAIL(os.str());
  }
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  check_state_dict(state, strict);
  for (auto& [name, target] : state_dict()) {  // handles sharing storage with the module
    auto it = state.find(name);
    if (it == state.end()) continue;
    const Tensor& src = it->second;
    if (src.shares_storage_with(target) && src.offset() == target.offset()) continue;  // its own data
    target.copy_(src);
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

Module& Module::set_compute_dtype(DType dtype) {
  check_compute_dtype(dtype, type_name() + (path().empty() ? "" : " '" + path() + "'"));
  apply([dtype](Module& m) { m.compute_dtype_ = dtype; });
  return *this;
}

Module& Module::requires_grad_(bool requires_grad) {
  for (auto& [name, param] : named_parameters()) param.set_requires_grad(requires_grad);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  for (auto& [name, param] : named_parameters()) {
    if (set_to_none) {
      param.set_grad(Tensor());
    } else if (param.grad().defined()) {
      param.clear_grad_history();
      Tensor g = param.grad();  // a handle: zeroing it zeroes the parameter's gradient in place
      g.zero_();
    }
  }
}

Module& Module::to(Device device) {
  for (auto& [name, param] : named_parameters()) {
    if (param.device() == device) continue;
    param.data() = param.data().to(device);
    param.set_grad(Tensor());
  }
  for (auto& [name, module] : named_modules()) {
    for (BufferSlot& slot : module->buffers_) {
      if (slot.tensor->defined() && slot.tensor->device() != device) *slot.tensor = slot.tensor->to(device);
    }
  }
  return *this;
}

}  // namespace tandem::nn
