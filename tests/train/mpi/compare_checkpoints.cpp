// compare_checkpoints: whether two tandem checkpoints hold the same parameters.
//
//   compare_checkpoints <a.safetensors> <b.safetensors> [--prefix P] [--rtol X]
//                       [--per-tensor | --norm | --base BASE.safetensors]
//
// Compares every tensor whose name starts with P (default "model.", the parameters) by
// value: element by element, |a - b| <= X * max(|a|, |b|) (default X 1e-6); with
// --per-tensor relative to the tensor's scale instead, |a - b| <= X * max over the tensor of
// |a| and |b| (float32 noise in an element near 0 is not a large relative difference then).
// With --norm, tensor by tensor: ||a - b|| <= X * ||a||; with --base, ||a - b|| <= X *
// ||a - base||, the change since BASE (which makes gradient-sized differences in parameters
// visible). Both files (and BASE) must hold the same such names, shapes and dtypes. Prints
// one line: the tensor and element count, the largest relative difference and where, and
// whether the values are bitwise equal.
// Exit status: 0 within tolerance, 1 beyond it or on a mismatch of names or shapes, 2 on a
// usage error or a file that cannot be read.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include "runtime/checkpoint.h"

namespace {

using namespace tandem;

struct Options {
  std::string a, b;
  std::string prefix = "model.";
  double rtol = 1e-6;
  bool per_tensor = false;
  bool norm = false;  // --norm, or --base
  std::string base;
};

Options parse(int argc, char** argv) {
  Options options;
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--per-tensor") {
      options.per_tensor = true;
    } else if (arg == "--norm") {
      options.norm = true;
    } else if ((arg == "--prefix" || arg == "--rtol" || arg == "--base") && i + 1 < argc) {
      std::string value = argv[++i];
      if (arg == "--base") {
        options.base = value;
        options.norm = true;
      } else if (arg == "--prefix") {
        options.prefix = value;
      } else {
        char* end = nullptr;
        options.rtol = std::strtod(value.c_str(), &end);
        TANDEM_CHECK(end != nullptr && *end == '\0' && options.rtol >= 0,
                     "--rtol '" << value << "' is not a non-negative number");
      }
    } else if (positional == 0) {
      options.a = arg, ++positional;
    } else if (positional == 1) {
      options.b = arg, ++positional;
    } else {
      TANDEM_FAIL("unexpected argument '" << arg << "'");
    }
  }
  TANDEM_CHECK(positional == 2,
               "usage: compare_checkpoints <a.safetensors> <b.safetensors> [--prefix P] [--rtol X] "
               "[--per-tensor | --norm | --base BASE.safetensors]");
  TANDEM_CHECK(!(options.per_tensor && options.norm), "--per-tensor does not go with --norm or --base");
  return options;
}

bool has_prefix(const std::string& name, const std::string& prefix) { return name.rfind(prefix, 0) == 0; }

// Compares a and b; returns whether they agree within the tolerance.
bool compare(const Options& options) {
  SafetensorsFile a = load_safetensors(options.a);
  SafetensorsFile b = load_safetensors(options.b);
  std::optional<SafetensorsFile> base;
  if (!options.base.empty()) base = load_safetensors(options.base);
  bool same_names = true;
  for (const auto& [name, _] : a.tensors)
    if (has_prefix(name, options.prefix) && !b.tensors.count(name)) {
      std::cout << "compare_checkpoints: " << name << " is in " << options.a << " but not in " << options.b
                << "\n";
      same_names = false;
    }
  for (const auto& [name, _] : b.tensors)
    if (has_prefix(name, options.prefix) && !a.tensors.count(name)) {
      std::cout << "compare_checkpoints: " << name << " is in " << options.b << " but not in " << options.a
                << "\n";
      same_names = false;
    }
  if (!same_names) return false;

  int64_t tensors = 0, elements = 0;
  bool bitwise = true;
  double worst = 0;
  std::string worst_at = "-";
  for (const auto& [name, ta] : a.tensors) {
    if (!has_prefix(name, options.prefix)) continue;
    const Tensor& tb = b.tensors.at(name);
    if (ta.shape() != tb.shape() || ta.dtype() != tb.dtype()) {
      std::cout << "compare_checkpoints: " << name << " is " << ta.str() << " in " << options.a << " but "
                << tb.str() << " in " << options.b << "\n";
      return false;
    }
    ++tensors;
    elements += ta.numel();
    if (std::memcmp(ta.raw_data(), tb.raw_data(), ta.bytes()) != 0) bitwise = false;
    std::vector<double> va = ta.to_vector(), vb = tb.to_vector();
    if (options.norm) {
      std::vector<double> v0(va.size(), 0.0);
      if (base) {
        const auto found = base->tensors.find(name);
        TANDEM_CHECK(found != base->tensors.end() && found->second.shape() == ta.shape(),
                     name << " is not in " << options.base << " with shape " << ta.str());
        v0 = found->second.to_vector();
      }
      double diff = 0, scale = 0;
      for (size_t i = 0; i < va.size(); ++i) {
        diff += (va[i] - vb[i]) * (va[i] - vb[i]);
        scale += (va[i] - v0[i]) * (va[i] - v0[i]);
      }
      const double relative = diff == 0 ? 0 : (std::isnan(diff) ? INFINITY : std::sqrt(diff / scale));
      if (relative > worst) worst = relative, worst_at = name;
      continue;
    }
    double tensor_scale = 0;
    for (double x : va)
      if (std::isfinite(x)) tensor_scale = std::max(tensor_scale, std::fabs(x));
    for (double x : vb)
      if (std::isfinite(x)) tensor_scale = std::max(tensor_scale, std::fabs(x));
    for (size_t i = 0; i < va.size(); ++i) {
      double relative = 0;
      if (std::isnan(va[i]) || std::isnan(vb[i])) {
        relative = std::isnan(va[i]) && std::isnan(vb[i]) ? 0 : INFINITY;
      } else if (va[i] != vb[i]) {  // so the scale is positive
        double diff = std::fabs(va[i] - vb[i]);
        const double scale = options.per_tensor ? tensor_scale : std::max(std::fabs(va[i]), std::fabs(vb[i]));
        relative = std::isfinite(diff) ? diff / scale : INFINITY;
      }
      if (relative > worst) {
        worst = relative;
        worst_at = name + "[" + std::to_string(i) + "] (" + std::to_string(va[i]) + " vs " +
                   std::to_string(vb[i]) + ")";
      }
    }
  }
  TANDEM_CHECK(tensors > 0, "no tensor named " << options.prefix << "* in " << options.a);
  bool within = worst <= options.rtol;
  std::cout << "compare_checkpoints: " << options.prefix << "*: " << tensors << " tensors, " << elements
            << " elements; largest relative difference " << worst << " at " << worst_at << " ("
            << (within ? "within" : "BEYOND") << " rtol " << options.rtol
            << (options.per_tensor ? " of each tensor's largest magnitude" : "")
            << (options.norm
                    ? (base ? " of each tensor's change since the base, in norm" : " of each tensor's norm")
                    : "")
            << "); " << (bitwise ? "bitwise equal" : "not bitwise equal") << "\n";
  return within;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "compare_checkpoints: " << e.what() << "\n";
    return 2;
  }
  try {
    return compare(options) ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "compare_checkpoints: " << e.what() << "\n";
    return 2;
  }
}
