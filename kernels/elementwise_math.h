// The formulas of the elementwise ops that have a CPU loop and a CUDA kernel each (abs,
// sign, pow, clamp, maximum, minimum, the comparisons, where): one functor per op for
// kernels/cpu/elementwise.cpp and kernels/cuda/elementwise.cu, so the twins cannot drift
// apart. NaN propagates through abs, pow, clamp, maximum and minimum; sign(NaN) is 0, and
// every comparison with NaN is false (as C++'s).
#pragma once

#include <cmath>
#include <type_traits>

#include "kernels/host_device.h"

namespace tandem::kernels::math {

// clang-format off
struct AbsOp {
  template <typename T> TANDEM_HOST_DEVICE T operator()(T x) const { return x < T(0) ? -x : x; }
};
struct SignOp {
  template <typename T> TANDEM_HOST_DEVICE T operator()(T x) const {
    return x > T(0) ? T(1) : x < T(0) ? T(-1) : T(0);
  }
};
struct PowOp {
  double p;
  template <typename T> TANDEM_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) return powf(x, static_cast<float>(p));
    else return pow(x, p);
  }
};
// Bounds cast to T first, as every scalar of the elementwise ops.
struct ClampOp {
  double lo, hi;
  template <typename T> TANDEM_HOST_DEVICE T operator()(T x) const {
    const T l = static_cast<T>(lo), h = static_cast<T>(hi);
    return x < l ? l : x > h ? h : x;  // NaN fails both tests and stays NaN
  }
};
// 1 where lo <= x <= hi (clamp passes x on), else 0: clamp's gradient mask.
struct ClampMaskOp {
  double lo, hi;
  template <typename T> TANDEM_HOST_DEVICE T operator()(T x) const {
    return x >= static_cast<T>(lo) && x <= static_cast<T>(hi) ? T(1) : T(0);
  }
};
struct MaximumOp {
  template <typename T> TANDEM_HOST_DEVICE T operator()(T a, T b) const { return a > b || a != a ? a : b; }
};
struct MinimumOp {
  template <typename T> TANDEM_HOST_DEVICE T operator()(T a, T b) const { return a < b || a != a ? a : b; }
};
// clang-format on

enum class Comparison { greater, greater_equal, less, less_equal, equal };

// 1 where `a op b`, else 0.
struct CompareOp {
  Comparison op;
  template <typename T>
  TANDEM_HOST_DEVICE T operator()(T a, T b) const {
    bool r = false;
    switch (op) {
      case Comparison::greater:
        r = a > b;
        break;
      case Comparison::greater_equal:
        r = a >= b;
        break;
      case Comparison::less:
        r = a < b;
        break;
      case Comparison::less_equal:
        r = a <= b;
        break;
      case Comparison::equal:
        r = a == b;
        break;
    }
    return r ? T(1) : T(0);
  }
};

// a where condition is non-zero, else b (a NaN condition counts as non-zero, as in C++).
template <typename T>
TANDEM_HOST_DEVICE inline T select(T condition, T a, T b) {
  return condition != T(0) ? a : b;
}

}  // namespace tandem::kernels::math
