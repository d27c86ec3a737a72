// tandem-compare-checkpoints: whether two tandem checkpoints hold the same parameters, to a
// tolerance. Installed with tandem; the tests and docs/examples.md use it to hold N ranks
// against one process on the global batch.
//
//   tandem-compare-checkpoints <a.safetensors> <b.safetensors> [--prefix P] [--rtol X]
//                              [--atol Y] [--per-tensor | --norm | --base BASE.safetensors]
//
// Compares every tensor whose name starts with P (default "model.", the parameters) by
// value: element by element, |a - b| <= Y + X * max(|a|, |b|) (default X 1e-6, Y 0): the
// absolute floor Y passes differences of values that are zero up to rounding (a momentum
// buffer of 1e-9 that differs by its own size); with --per-tensor relative to the tensor's
// scale instead, |a - b| <= Y + X * max over the tensor of |a| and |b|. With --norm, tensor
// by tensor: ||a - b|| <= Y + X * ||a||; with --base, ||a - b|| <= Y + X * ||a - base||, the
// change since BASE (which makes gradient-sized differences in parameters visible). Both
// files (and BASE) must hold the same such names, shapes and dtypes. Prints one line: the
// tensor and element count, the difference furthest beyond (or nearest to) its bound, as
// |a - b| and relative to the scale, where, and whether the values are bitwise equal.
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

constexpr const char* kProgram = "tandem-compare-checkpoints";

struct Options {
  std::string a, b;
  std::string prefix = "model.";
  double rtol = 1e-6;
  double atol = 0;
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
    } else if ((arg == "--prefix" || arg == "--rtol" || arg == "--atol" || arg == "--base") && i + 1 < argc) {
      std::string value = argv[++i];
      if (arg == "--base") {
        options.base = value;
        options.norm = true;
      } else if (arg == "--prefix") {
        options.prefix = value;
      } else {
        char* end = nullptr;
        const double x = std::strtod(value.c_str(), &end);
        TANDEM_CHECK(end != value.c_str() && *end == '\0' && std::isfinite(x) && x >= 0,
                     arg << " '" << value << "' is not a non-negative number");
        (arg == "--rtol" ? options.rtol : options.atol) = x;
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
               "usage: tandem-compare-checkpoints <a.safetensors> <b.safetensors> [--prefix P] [--rtol X] "
               "[--atol Y] [--per-tensor | --norm | --base BASE.safetensors]");
  TANDEM_CHECK(!(options.per_tensor && options.norm), "--per-tensor does not go with --norm or --base");
  return options;
}

bool has_prefix(const std::string& name, const std::string& prefix) { return name.rfind(prefix, 0) == 0; }

// The largest difference seen, measured against its bound atol + rtol * scale.
struct Difference {
  double ratio = 0;  // |a - b| / bound: within while <= 1
  double absolute = 0;
  double relative = 0;  // |a - b| / scale
  std::string where = "-";

  void consider(double diff, double scale, const Options& options, const std::string& at) {
    if (diff == 0) return;
    const double bound = options.atol + options.rtol * scale;
    const double r = std::isfinite(diff) ? (bound > 0 ? diff / bound : INFINITY) : INFINITY;
    if (r <= ratio && where != "-") return;
    ratio = r, absolute = diff, where = at;
    relative = scale > 0 ? diff / scale : INFINITY;
  }
};

// Compares a and b; returns whether they agree within the tolerance.
bool compare(const Options& options) {
  SafetensorsFile a = load_safetensors(options.a);
  SafetensorsFile b = load_safetensors(options.b);
  std::optional<SafetensorsFile> base;
  if (!options.base.empty()) base = load_safetensors(options.base);
  bool same_names = true;
  for (const auto& [name, _] : a.tensors)
    if (has_prefix(name, options.prefix) && !b.tensors.count(name)) {
      std::cout << kProgram << ": " << name << " is in " << options.a << " but not in " << options.b << "\n";
      same_names = false;
    }
  for (const auto& [name, _] : b.tensors)
    if (has_prefix(name, options.prefix) && !a.tensors.count(name)) {
      std::cout << kProgram << ": " << name << " is in " << options.b << " but not in " << options.a << "\n";
      same_names = false;
    }
  if (!same_names) return false;

  int64_t tensors = 0, elements = 0;
  bool bitwise = true;
  // The difference nearest to (or furthest beyond) its bound: |a - b| / (atol + rtol * scale),
  // within while <= 1.
  Difference worst;
  for (const auto& [name, ta] : a.tensors) {
    if (!has_prefix(name, options.prefix)) continue;
    const Tensor& tb = b.tensors.at(name);
    if (ta.shape() != tb.shape() || ta.dtype() != tb.dtype()) {
      std::cout << kProgram << ": " << name << " is " << ta.str() << " in " << options.a << " but "
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
      worst.consider(std::sqrt(diff), std::sqrt(scale), options, name);
      continue;
    }
    double tensor_scale = 0;
    for (double x : va)
      if (std::isfinite(x)) tensor_scale = std::max(tensor_scale, std::fabs(x));
    for (double x : vb)
      if (std::isfinite(x)) tensor_scale = std::max(tensor_scale, std::fabs(x));
    for (size_t i = 0; i < va.size(); ++i) {
      if (va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i]))) continue;
      const double diff = std::isnan(va[i]) || std::isnan(vb[i]) ? INFINITY : std::fabs(va[i] - vb[i]);
      const double scale = options.per_tensor ? tensor_scale : std::max(std::fabs(va[i]), std::fabs(vb[i]));
      worst.consider(diff, scale, options,
                     name + "[" + std::to_string(i) + "] (" + std::to_string(va[i]) + " vs " +
                         std::to_string(vb[i]) + ")");
    }
  }
  TANDEM_CHECK(tensors > 0, "no tensor named " << options.prefix << "* in " << options.a);
  const bool within = worst.ratio <= 1;
  std::cout << kProgram << ": " << options.prefix << "*: " << tensors << " tensors, " << elements
            << " elements; largest difference " << worst.absolute << " (relative " << worst.relative
            << ") at " << worst.where << " (" << (within ? "within" : "BEYOND") << " atol " << options.atol
            << " + rtol " << options.rtol
            << (options.per_tensor ? " of each tensor's largest magnitude"
                : options.norm
                    ? (base ? " of each tensor's change since the base, in norm" : " of each tensor's norm")
                    : " of the larger magnitude")
            << "); " << (bitwise ? "bitwise equal" : "not bitwise equal") << "\n";
  return within;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << kProgram << ": " << e.what() << "\n";
    return 2;
  }
  try {
    return compare(options) ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << kProgram << ": " << e.what() << "\n";
    return 2;
  }
}
