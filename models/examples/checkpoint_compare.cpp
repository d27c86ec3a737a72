// The examples' test checker: do two checkpoints hold the same parameters, to a tolerance?
//
//   checkpoint_compare A B [BASE] [--rtol R] [--prefix P]
//
// For every tensor whose name starts with P (default "gan."): the norm of A - B over
// the norm of A - BASE (the update since BASE, which makes gradient-sized differences
// visible), or over the norm of A without BASE; 0 when A and B are equal. Prints the
// largest and exits 1 when it is above R (default 1e-5), 2 on a usage error.
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "runtime/checkpoint.h"
#include "runtime/dist/run_main.h"

using namespace tandem;

int compare_main(int argc, char** argv) {
  std::vector<std::string> files;
  double rtol = 1e-5;
  std::string prefix = "gan.";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--rtol" && i + 1 < argc) {
      rtol = std::stod(argv[++i]);
    } else if (arg == "--prefix" && i + 1 < argc) {
      prefix = argv[++i];
    } else {
      files.push_back(arg);
    }
  }
  if (files.size() < 2 || files.size() > 3) {
    std::fprintf(stderr, "usage: checkpoint_compare A B [BASE] [--rtol R] [--prefix P]\n");
    return 2;
  }
  SafetensorsFile a = load_safetensors(files[0]), b = load_safetensors(files[1]);
  std::optional<SafetensorsFile> base;
  if (files.size() == 3) base = load_safetensors(files[2]);
  double worst = 0.0;
  std::string worst_name = "none";
  int compared = 0;
  for (const auto& [name, ta] : a.tensors) {
    if (name.rfind(prefix, 0) != 0) continue;
    std::vector<double> va = ta.to_vector(), vb = b.tensors.at(name).to_vector();
    std::vector<double> v0 = base ? base->tensors.at(name).to_vector() : std::vector<double>(va.size(), 0.0);
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < va.size(); ++i) {
      diff += (va[i] - vb[i]) * (va[i] - vb[i]);
      norm += (va[i] - v0[i]) * (va[i] - v0[i]);
    }
    double rel = diff == 0.0 ? 0.0 : std::sqrt(diff / norm);
    if (rel > worst || compared == 0) worst = rel, worst_name = name;
    ++compared;
  }
  std::printf("%d tensors '%s*': max relative difference %.3g (%s), tolerance %.3g\n", compared,
              prefix.c_str(), worst, worst_name.c_str(), rtol);
  return compared > 0 && worst <= rtol ? 0 : 1;
}

int main(int argc, char** argv) { return run_main(argc, argv, compare_main); }
