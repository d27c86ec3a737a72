// The CUDA reductions, factor-2 resampling, concat/slice and batch-norm kernels against
// their CPU twins: the same random data through both, in float32 and float64, over every
// axis and at odd sizes, including shapes that make the reductions split long sums.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernels/norm.h"
#include "kernels/pool.h"
#include "kernels/reduce.h"
#include "kernels/shape_ops.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f64};

uint64_t fresh_seed() {
  static uint64_t next = 0x5EDC0000;
  return ++next;
}

std::string label(const std::string& op, DType dtype, const Shape& shape) {
  return op + " " + dtype_name(dtype) + shape_str(shape);
}

// Nonzero multiples of 1/64 in [-1, 1]: their sums are exact in float32 as well, so the
// CPU's float accumulation adds no error and a dropped or doubled term shows.
Tensor random_grid(const Shape& shape, DType dtype, uint64_t seed) {
  std::vector<double> v = random_cpu(shape, DType::f64, seed).to_vector();
  for (double& e : v) e = e < 0 ? std::floor(e * 64) / 64 : std::max(std::ceil(e * 64), 1.0) / 64;
  return Tensor::from_values(shape, v, dtype);
}

Tensor on_gpu_or_undefined(const Tensor& t) { return t.defined() ? on_gpu(t) : Tensor(); }

}  // namespace

TEST_CASE("cuda reduce: sum_all and mean_all match the CPU") {
  const Shape shapes[] = {{1}, {7}, {1000003}, {3, 5, 7, 9}, {}};
  for (DType dt : kFloatTypes)
    for (const Shape& shape : shapes) {
      Tensor x = random_grid(shape, dt, fresh_seed());
      Tensor sum = kernels::sum_all(on_gpu(x));
      CHECK(sum.dim() == 0);
      require_close(sum, kernels::sum_all(x), label("sum_all", dt, shape));
      require_close(kernels::mean_all(on_gpu(x)), kernels::mean_all(x), label("mean_all", dt, shape));
    }
}

TEST_CASE("cuda reduce: sum_axis and mean_axis over every axis match the CPU") {
  // Short and long rows (inner 1), short and long columns, and shapes with too few outputs
  // to fill the GPU, whose sums are split into segments.
  const Shape shapes[] = {{3, 5, 7, 9}, {1000003}, {7, 1000},     {1000, 7},
                          {4099, 3},    {3, 4099}, {2, 70001, 3}, {1, 1}};
  for (DType dt : kFloatTypes)
    for (const Shape& shape : shapes)
      for (int64_t axis = -1; axis < static_cast<int64_t>(shape.size()); ++axis)
        for (bool keepdim : {false, true}) {
          Tensor x = random_grid(shape, dt, fresh_seed());
          std::string what = " axis " + std::to_string(axis) + (keepdim ? " keepdim" : "");
          require_close(kernels::sum_axis(on_gpu(x), axis, keepdim), kernels::sum_axis(x, axis, keepdim),
                        label("sum_axis", dt, shape) + what);
          require_close(kernels::mean_axis(on_gpu(x), axis, keepdim), kernels::mean_axis(x, axis, keepdim),
                        label("mean_axis", dt, shape) + what);
        }
}

TEST_CASE("cuda reduce: expand_axis and expand_scalar match the CPU") {
  const Shape shapes[] = {{3, 5, 7, 9}, {1000003}, {1000, 7}, {1}};
  for (DType dt : kFloatTypes)
    for (const Shape& shape : shapes)
      for (int64_t axis = 0; axis < static_cast<int64_t>(shape.size()); ++axis)
        for (bool keepdim : {false, true}) {
          Shape reduced = shape;
          if (keepdim)
            reduced[static_cast<size_t>(axis)] = 1;
          else
            reduced.erase(reduced.begin() + axis);
          Tensor grad = random_cpu(reduced, dt, fresh_seed());
          require_close(kernels::expand_axis(on_gpu(grad), shape, axis),
                        kernels::expand_axis(grad, shape, axis),
                        label("expand_axis", dt, shape) + " axis " + std::to_string(axis));
        }
  for (DType dt : {DType::f32, DType::f64, DType::f16})
    for (const Shape& shape : {Shape{1}, Shape{7}, Shape{1000003}, Shape{3, 5, 7, 9}, Shape{}})
      for (const Shape& value_shape : {Shape{}, Shape{1}}) {
        Tensor value = random_cpu(value_shape, dt, fresh_seed());
        require_close(kernels::expand_scalar(on_gpu(value), shape), kernels::expand_scalar(value, shape),
                      label("expand_scalar", dt, shape));
      }
}

TEST_CASE("cuda pool: upsample_nearest2x, avg_pool2x and their backwards match the CPU") {
  for (DType dt : kFloatTypes) {
    for (const Shape& shape : {Shape{3, 5, 7, 9}, Shape{64, 128, 4, 4}, Shape{1, 1, 1, 1}}) {
      Tensor x = random_cpu(shape, dt, fresh_seed());
      require_close(kernels::upsample_nearest2x(on_gpu(x)), kernels::upsample_nearest2x(x),
                    label("upsample_nearest2x", dt, shape));
      require_close(kernels::avg_pool2x_backward(on_gpu(x)), kernels::avg_pool2x_backward(x),
                    label("avg_pool2x_backward", dt, shape));
    }
    for (const Shape& shape : {Shape{3, 5, 14, 18}, Shape{64, 128, 4, 4}, Shape{1, 1, 2, 2}}) {
      Tensor x = random_cpu(shape, dt, fresh_seed());
      require_close(kernels::avg_pool2x(on_gpu(x)), kernels::avg_pool2x(x), label("avg_pool2x", dt, shape));
      require_close(kernels::upsample_nearest2x_backward(on_gpu(x)), kernels::upsample_nearest2x_backward(x),
                    label("upsample_nearest2x_backward", dt, shape));
    }
  }
}

TEST_CASE("cuda shape ops: concat, slice and slice_backward along every axis match the CPU") {
  const Shape base = {3, 5, 7, 9};
  for (DType dt : kFloatTypes)
    for (int64_t axis = -1; axis < 4; ++axis) {
      const size_t a = static_cast<size_t>(axis < 0 ? axis + 4 : axis);
      std::vector<Tensor> parts, parts_gpu;
      for (int64_t size : {2, 1, 4}) {
        Shape s = base;
        s[a] = size;
        parts.push_back(random_cpu(s, dt, fresh_seed()));
        parts_gpu.push_back(on_gpu(parts.back()));
      }
      const std::string what = " axis " + std::to_string(axis);
      require_close(kernels::concat(parts_gpu, axis), kernels::concat(parts, axis),
                    label("concat", dt, base) + what);

      Tensor x = random_cpu(base, dt, fresh_seed());
      const int64_t start = 1, length = base[a] - 2;
      Tensor sliced = kernels::slice(x, axis, start, length);
      require_close(kernels::slice(on_gpu(x), axis, start, length), sliced, label("slice", dt, base) + what);
      Tensor grad = random_cpu(sliced.shape(), dt, fresh_seed());
      require_close(kernels::slice_backward(on_gpu(grad), base, axis, start),
                    kernels::slice_backward(grad, base, axis, start),
                    label("slice_backward", dt, base) + what);
    }
  for (DType dt : kFloatTypes) {  // long 1-D parts
    std::vector<Tensor> parts = {random_cpu({7}, dt, fresh_seed()), random_cpu({1000003}, dt, fresh_seed())};
    require_close(kernels::concat({on_gpu(parts[0]), on_gpu(parts[1])}, 0), kernels::concat(parts, 0),
                  label("concat", dt, {1000010}));
    Tensor x = random_cpu({1000003}, dt, fresh_seed());
    require_close(kernels::slice(on_gpu(x), 0, 5, 999990), kernels::slice(x, 0, 5, 999990),
                  label("slice", dt, {1000003}));
  }
}

TEST_CASE("cuda batch norm: train, eval and backward match the CPU") {
  // [N, C] and NCHW; few channels with many values each make the statistics split.
  const Shape shapes[] = {{3, 5, 7, 9}, {64, 128, 4, 4}, {64, 256}, {7, 3}, {5003, 2}, {4, 2, 64, 64}};
  const double momentum = 0.1, eps = 1e-5;
  for (DType dt : kFloatTypes)
    for (const Shape& shape : shapes)
      for (bool affine : {true, false}) {
        const int64_t c = shape[1];
        // A mean far from 0 against the spread: the variance must be taken about the mean.
        Tensor x = random_cpu(shape, dt, fresh_seed(), 2.0, 4.0);
        Tensor gamma = affine ? random_cpu({c}, dt, fresh_seed(), 0.5, 1.5) : Tensor();
        Tensor beta = affine ? random_cpu({c}, dt, fresh_seed()) : Tensor();
        Tensor running_mean = random_cpu({c}, dt, fresh_seed());
        Tensor running_var = random_cpu({c}, dt, fresh_seed(), 0.5, 2.0);
        Tensor rm_gpu = on_gpu(running_mean), rv_gpu = on_gpu(running_var);
        const std::string what = affine ? " affine" : " no affine";

        kernels::BatchNormSaved saved, saved_gpu;
        Tensor y = kernels::batch_norm_train(x, gamma, beta, running_mean, running_var, momentum, eps, saved);
        Tensor y_gpu =
            kernels::batch_norm_train(on_gpu(x), on_gpu_or_undefined(gamma), on_gpu_or_undefined(beta),
                                      rm_gpu, rv_gpu, momentum, eps, saved_gpu);
        require_close(y_gpu, y, label("batch_norm_train y", dt, shape) + what);
        require_close(saved_gpu.mean, saved.mean, label("batch_norm_train saved mean", dt, shape) + what);
        require_close(saved_gpu.inv_std, saved.inv_std,
                      label("batch_norm_train saved inv_std", dt, shape) + what);
        require_close(rm_gpu, running_mean, label("batch_norm_train running_mean", dt, shape) + what);
        require_close(rv_gpu, running_var, label("batch_norm_train running_var", dt, shape) + what);

        // Without running statistics nothing else changes.
        Tensor none;
        kernels::BatchNormSaved saved_none;
        require_close(
            kernels::batch_norm_train(on_gpu(x), on_gpu_or_undefined(gamma), on_gpu_or_undefined(beta), none,
                                      none, momentum, eps, saved_none),
            y, label("batch_norm_train without running stats", dt, shape) + what);

        require_close(kernels::batch_norm_eval(on_gpu(x), on_gpu_or_undefined(gamma),
                                               on_gpu_or_undefined(beta), rm_gpu, rv_gpu, eps),
                      kernels::batch_norm_eval(x, gamma, beta, running_mean, running_var, eps),
                      label("batch_norm_eval", dt, shape) + what);

        // The backward gets the CPU's saved statistics on both sides, so only it is compared.
        Tensor grad = random_cpu(shape, dt, fresh_seed());
        kernels::BatchNormSaved saved_copy{on_gpu(saved.mean), on_gpu(saved.inv_std)};
        kernels::BatchNormGrads g = kernels::batch_norm_backward(grad, x, gamma, saved);
        kernels::BatchNormGrads g_gpu =
            kernels::batch_norm_backward(on_gpu(grad), on_gpu(x), on_gpu_or_undefined(gamma), saved_copy);
        require_close(g_gpu.x, g.x, label("batch_norm_backward x", dt, shape) + what);
        require_close(g_gpu.gamma, g.gamma, label("batch_norm_backward gamma", dt, shape) + what);
        require_close(g_gpu.beta, g.beta, label("batch_norm_backward beta", dt, shape) + what);
      }
}

// kernels/norm.h: a bfloat16 input (BatchNorm's under a bf16 compute dtype) with float32
// operands, on the GPU as on the CPU.
TEST_CASE("cuda batch norm: a bfloat16 input with float32 operands matches the CPU") {
  const Shape shape{8, 16, 6, 6};
  const int64_t c = shape[1];
  Tensor x = random_cpu(shape, DType::f32, fresh_seed(), 2.0, 4.0).to(DType::bf16);
  Tensor gamma = random_cpu({c}, DType::f32, fresh_seed(), 0.5, 1.5),
         beta = random_cpu({c}, DType::f32, fresh_seed());
  Tensor running_mean = Tensor::zeros({c}), running_var = Tensor::ones({c});
  Tensor rm_gpu = on_gpu(running_mean), rv_gpu = on_gpu(running_var);
  kernels::BatchNormSaved saved, saved_gpu;
  Tensor y = kernels::batch_norm_train(x, gamma, beta, running_mean, running_var, 0.1, 1e-5, saved);
  Tensor y_gpu =
      kernels::batch_norm_train(on_gpu(x), on_gpu(gamma), on_gpu(beta), rm_gpu, rv_gpu, 0.1, 1e-5, saved_gpu);
  CHECK(y_gpu.dtype() == DType::f32);
  require_close(y_gpu, y, "batch_norm_train y, bfloat16 input");
  require_close(rv_gpu, running_var, "batch_norm_train running_var, bfloat16 input");
  require_close(kernels::batch_norm_eval(on_gpu(x), on_gpu(gamma), on_gpu(beta), rm_gpu, rv_gpu, 1e-5),
                kernels::batch_norm_eval(x, gamma, beta, running_mean, running_var, 1e-5),
                "batch_norm_eval, bfloat16 input");
  Tensor grad = random_cpu(shape, DType::f32, fresh_seed());
  kernels::BatchNormSaved saved_copy{on_gpu(saved.mean), on_gpu(saved.inv_std)};
  kernels::BatchNormGrads g = kernels::batch_norm_backward(grad, x, gamma, saved);
  kernels::BatchNormGrads g_gpu =
      kernels::batch_norm_backward(on_gpu(grad), on_gpu(x), on_gpu(gamma), saved_copy);
  CHECK(g_gpu.x.dtype() == DType::f32);
  require_close(g_gpu.x, g.x, "batch_norm_backward x, bfloat16 input");
  require_close(g_gpu.gamma, g.gamma, "batch_norm_backward gamma, bfloat16 input");
}

TEST_CASE("cuda reduce, shape and norm: a CPU operand next to a GPU one is an error naming the op and both") {
  Tensor x = random_cpu({4, 3, 2, 2}, DType::f32, fresh_seed());
  Tensor x_gpu = on_gpu(x);
  Tensor gamma = random_cpu({3}, DType::f32, fresh_seed());
  Tensor none;
  kernels::BatchNormSaved saved;
  kernels::batch_norm_train(x, gamma, none, none, none, 0.1, 1e-5, saved);
  kernels::BatchNormSaved saved_gpu{on_gpu(saved.mean), on_gpu(saved.inv_std)};

  require_device_mismatch("concat", [&] { kernels::concat({x_gpu, x}, 1); });
  require_device_mismatch("concat", [&] { kernels::concat({x, x_gpu}, 0); });
  require_device_mismatch("batch_norm", [&] {
    kernels::BatchNormSaved s;
    kernels::batch_norm_train(x_gpu, gamma, none, none, none, 0.1, 1e-5, s);
  });
  require_device_mismatch("batch_norm", [&] {
    kernels::BatchNormSaved s;
    kernels::batch_norm_train(x, on_gpu(gamma), none, none, none, 0.1, 1e-5, s);
  });
  require_device_mismatch("batch_norm",
                          [&] { kernels::batch_norm_eval(x_gpu, none, none, gamma, gamma, 1e-5); });
  require_device_mismatch("batch_norm_backward",
                          [&] { kernels::batch_norm_backward(x, x_gpu, none, saved_gpu); });
  require_device_mismatch("batch_norm_backward",
                          [&] { kernels::batch_norm_backward(x_gpu, x, none, saved); });
  require_device_mismatch("batch_norm_backward",
                          [&] { kernels::batch_norm_backward(x_gpu, x_gpu, none, saved); });
}

TEST_CASE("cuda reduce, pool, shape and norm: bad GPU input gets the CPU kernels' named errors") {
  Tensor x = on_gpu(random_cpu({4, 3, 5, 5}, DType::f32, fresh_seed()));
  CHECK_THROWS_WITH(kernels::sum_axis(x, 4), Catch::Contains("sum: axis 4 out of range"));
  CHECK_THROWS_WITH(kernels::expand_axis(x, {4, 3}, 0),
                    Catch::Contains("expand_axis: gradient [4, 3, 5, 5] does not fit"));
  CHECK_THROWS_WITH(kernels::expand_scalar(x, {2}), Catch::Contains("expand_scalar: needs one value"));
  CHECK_THROWS_WITH(kernels::avg_pool2x(x), Catch::Contains("avg_pool2x: needs even H and W"));
  CHECK_THROWS_WITH(kernels::upsample_nearest2x(on_gpu(random_cpu({4, 3}, DType::f32, fresh_seed()))),
                    Catch::Contains("upsample_nearest2x: needs a 4-D [N, C, H, W] input"));
  CHECK_THROWS_WITH(kernels::slice(x, 1, 2, 2), Catch::Contains("slice: range [2, 4) out of bounds"));
  CHECK_THROWS_WITH(kernels::concat({x, on_gpu(random_cpu({4, 2, 5, 4}, DType::f32, fresh_seed()))}, 1),
                    Catch::Contains("concat: shapes differ outside axis 1"));
  CHECK_THROWS_WITH(kernels::mean_all(Tensor::empty({0}, DType::f32, Device::cuda())),
                    Catch::Contains("mean of an empty tensor"));
  Tensor none;
  kernels::BatchNormSaved saved;
  CHECK_THROWS_WITH(kernels::batch_norm_train(x, on_gpu(random_cpu({4}, DType::f32, fresh_seed())), none,
                                              none, none, 0.1, 1e-5, saved),
                    Catch::Contains("batch_norm: gamma [4] does not match channels"));
  CHECK_THROWS_WITH(kernels::batch_norm_train(on_gpu(random_cpu({1, 3}, DType::f32, fresh_seed())), none,
                                              none, none, none, 0.1, 1e-5, saved),
                    Catch::Contains("batch_norm: training needs more than one value per channel"));
}
