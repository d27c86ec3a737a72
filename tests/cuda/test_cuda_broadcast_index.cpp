// The broadcast and index kernels on a GPU against their CPU twins: broadcast add / sub /
// mul / div over shape pairs that broadcast one operand, both, or a scalar; reduce_to_shape
// and broadcast_to; index_select forward and its scatter-add backward with repeated
// indices; one_hot. The sums (reduce_to_shape, the scatter-add) run in the CPU's order, so
// they must match bit for bit; index errors name the value on a GPU too.
#include <string>
#include <utility>
#include <vector>

#include "kernels/broadcast.h"
#include "kernels/index_ops.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;
using tandem::kernels::BinaryOp;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f64};

// Operand pairs: a row, a column, both broadcast, a scalar, many leading axes, a large
// operand that leaves a partial block.
const std::vector<std::pair<Shape, Shape>> kShapePairs = {{{8, 4}, {4}},
                                                          {{4}, {8, 4}},
                                                          {{5, 1}, {1, 7}},
                                                          {{}, {3, 5}},
                                                          {{2, 3, 4, 5}, {3, 1, 5}},
                                                          {{1000, 33}, {1000, 1}},
                                                          {{2, 1, 2, 1, 2, 1, 2, 3}, {2, 1, 2, 1, 2, 1, 3}}};

uint64_t fresh_seed() {
  static uint64_t next = 0xB0AD000;
  return ++next;
}

std::string label(const std::string& op, DType dtype, const Shape& a, const Shape& b) {
  return op + " " + dtype_name(dtype) + shape_str(a) + " with " + shape_str(b);
}

void require_bitwise(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  INFO(what);
  REQUIRE(gpu.device().is_cuda());
  REQUIRE(gpu.shape() == cpu.shape());
  CHECK(gpu.to_vector() == cpu.to_vector());
}

Tensor indices(const std::vector<double>& v) {
  return Tensor::from_values({static_cast<int64_t>(v.size())}, v, DType::i64);
}

}  // namespace

TEST_CASE("cuda broadcast: add, sub, mul and div match the CPU") {
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div})
    for (DType dt : kFloatTypes)
      for (const auto& [sa, sb] : kShapePairs) {
        Tensor a = random_cpu(sa, dt, fresh_seed());
        Tensor b = random_cpu(sb, dt, fresh_seed(), 0.5, 2.0);  // away from 0 for div
        const std::string what = label(kernels::binary_op_name(op), dt, sa, sb);
        require_close(kernels::broadcast_binary(op, on_gpu(a), on_gpu(b)),
                      kernels::broadcast_binary(op, a, b), what);
      }
  // The public ops route differing shapes to broadcasting on a GPU too.
  Tensor a = random_cpu({8, 4}, DType::f32, fresh_seed()), b = random_cpu({4}, DType::f32, fresh_seed());
  require_close(kernels::broadcast_binary(BinaryOp::mul, on_gpu(a), on_gpu(b)),
                kernels::broadcast_binary(BinaryOp::mul, a, b), "mul routed");
  require_device_mismatch("add", [&] { kernels::broadcast_binary(BinaryOp::add, on_gpu(a), b); });
}

TEST_CASE("cuda broadcast: reduce_to_shape and broadcast_to match the CPU bit for bit") {
  for (DType dt : kFloatTypes)
    for (const auto& [sa, sb] : kShapePairs) {
      const Shape out = kernels::broadcast_shape("test", sa, sb);
      for (const Shape& target : {sa, sb}) {
        Tensor g = random_cpu(out, dt, fresh_seed());
        require_bitwise(kernels::reduce_to_shape(on_gpu(g), target), kernels::reduce_to_shape(g, target),
                        label("reduce_to_shape", dt, out, target));
        Tensor x = random_cpu(target, dt, fresh_seed());
        require_bitwise(kernels::broadcast_to(on_gpu(x), out), kernels::broadcast_to(x, out),
                        label("broadcast_to", dt, target, out));
      }
    }
}

TEST_CASE("cuda index: index_select and its scatter-add backward match the CPU bit for bit") {
  // Repeated indices, along the first, a middle and the last dim, and a table of 10000 rows.
  struct Case {
    Shape x;
    int64_t dim;
    std::vector<double> index;
  };
  const std::vector<Case> cases = {{{10, 7}, 0, {3, 3, 0, 9, 3, 1}},
                                   {{4, 5, 6}, 1, {4, 0, 4, 4, 2}},
                                   {{3, 2, 8}, -1, {7, 7, 7, 0}},
                                   {{10000, 64}, 0, std::vector<double>(300, 17.0)}};
  for (DType dt : kFloatTypes)
    for (const Case& c : cases) {
      Tensor x = random_cpu(c.x, dt, fresh_seed());
      Tensor index = indices(c.index);
      Tensor want = kernels::index_select(x, c.dim, index);
      const std::string what = std::string("index_select ") + dtype_name(dt) + shape_str(c.x);
      require_bitwise(kernels::index_select(on_gpu(x), c.dim, on_gpu(index)), want, what);
      Tensor g = random_cpu(want.shape(), dt, fresh_seed());
      require_bitwise(kernels::index_select_backward(on_gpu(g), c.x, c.dim, on_gpu(index)),
                      kernels::index_select_backward(g, c.x, c.dim, index), what + " backward");
    }
  std::string message = error_of([] {
    kernels::index_select(on_gpu(Tensor::zeros({4, 2})), 0, on_gpu(indices({1, 9})));
  });
  INFO(message);
  CHECK(message.find("index_select: index 9") != std::string::npos);
  CHECK(message.find("[0, 4)") != std::string::npos);
  require_device_mismatch("index_select", [] {
    kernels::index_select(on_gpu(Tensor::zeros({4, 2})), 0, indices({1}));
  });
}

TEST_CASE("cuda index: one_hot matches the CPU") {
  for (DType dt : kFloatTypes) {
    Tensor index = Tensor::from_values({2, 3}, {0, 4, 2, 4, 1, 3}, DType::i64);
    require_bitwise(kernels::one_hot(on_gpu(index), 5, dt), kernels::one_hot(index, 5, dt),
                    std::string("one_hot ") + dtype_name(dt));
  }
  std::string message = error_of([] { kernels::one_hot(on_gpu(indices({0, 5})), 5); });
  INFO(message);
  CHECK(message.find("one_hot: index 5") != std::string::npos);
}
