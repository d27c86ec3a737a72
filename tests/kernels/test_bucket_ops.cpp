// Bucket pack/unpack on the CPU (the twins of the CUDA kernels): exact values, slots with
// gaps, undefined parts, in-place views, and the named errors.
#include <catch2/catch.hpp>
#include <vector>

#include "kernels/bucket_ops.h"

using namespace tandem;

TEST_CASE("pack_ writes scaled parts into their slots and zeros for undefined parts", "[bucket]") {
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    Tensor flat = Tensor::full({12}, 9.0, dt);
    Tensor a = Tensor::from_values({2, 2}, {1, 2, 3, 4}, dt);
    Tensor c = Tensor::from_values({3}, {-1, 0.5, 8}, dt);
    // Slots: a at 0..3, an unused parameter at 5..6, c at 8..10; 4, 7 and 11 are gaps.
    kernels::pack_(flat, {a, Tensor(), c}, {0, 5, 8}, {4, 2, 3}, 0.5);
    CHECK(flat.to_vector() == std::vector<double>{0.5, 1, 1.5, 2, 9, 0, 0, 9, -0.5, 0.25, 4, 9});
    kernels::pack_(flat, {c}, {1}, {3});  // scale 1: a plain copy
    CHECK(flat.to_vector() == std::vector<double>{0.5, -1, 0.5, 8, 9, 0, 0, 9, -0.5, 0.25, 4, 9});
  }
}

TEST_CASE("unpack_ writes scaled slots back into the parts", "[bucket]") {
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    Tensor flat = Tensor::from_values({7}, {1, 2, 3, 4, 5, 6, 7}, dt);
    Tensor a = Tensor::zeros({2}, dt), b = Tensor::zeros({1, 3}, dt);
    kernels::unpack_(flat, {a, b}, {4, 0}, 0.25);
    CHECK(a.to_vector() == std::vector<double>{1.25, 1.5});
    CHECK(b.to_vector() == std::vector<double>{0.25, 0.5, 0.75});
    CHECK(flat.to_vector() == std::vector<double>{1, 2, 3, 4, 5, 6, 7});
  }
}

TEST_CASE("pack_ and unpack_ scale a part that views its own slot in place", "[bucket]") {
  Tensor flat = Tensor::from_values({5}, {1, 2, 3, 4, 5}, DType::f64);
  Tensor view = flat.view_range(1, {3});
  kernels::pack_(flat, {view}, {1}, {3}, 2.0);
  CHECK(flat.to_vector() == std::vector<double>{1, 4, 6, 8, 5});
  kernels::unpack_(flat, {view}, {1}, 0.5);
  CHECK(flat.to_vector() == std::vector<double>{1, 2, 3, 4, 5});
}

TEST_CASE("pack_ and unpack_ round to the dtype once per element", "[bucket]") {
  // 0.1 rounded to float32, times x, rounded once: the same bits the CUDA kernel gives.
  Tensor flat = Tensor::zeros({2}, DType::f32);
  Tensor part = Tensor::from_values({2}, {3.0, 1.0 / 3.0}, DType::f32);
  kernels::pack_(flat, {part}, {0}, {2}, 0.1);
  const float s = 0.1f;
  CHECK(flat.at(0) == static_cast<double>(s * 3.0f));
  CHECK(flat.at(1) == static_cast<double>(s * (1.0f / 3.0f)));
}

TEST_CASE("pack_ and unpack_ name the op, the part and the shapes in their errors", "[bucket]") {
  Tensor flat = Tensor::zeros({10});
  Tensor a = Tensor::zeros({2, 2}), b = Tensor::zeros({3});
  CHECK_THROWS_WITH(kernels::pack_(flat, {a, b}, {0, 8}, {4, 3}),
                    Catch::Contains("pack_") && Catch::Contains("part #1") && Catch::Contains("[3]") &&
                        Catch::Contains("[10]"));
  CHECK_THROWS_WITH(kernels::pack_(flat, {a, b}, {0, 3}, {4, 3}),
                    Catch::Contains("pack_") && Catch::Contains("part #0") && Catch::Contains("part #1") &&
                        Catch::Contains("overlap"));
  CHECK_THROWS_WITH(kernels::pack_(flat, {a}, {0}, {5}),
                    Catch::Contains("pack_") && Catch::Contains("part #0") && Catch::Contains("[2, 2]"));
  CHECK_THROWS_WITH(kernels::pack_(flat, {a, b}, {0}, {4, 3}), Catch::Contains("2 parts but 1 offsets"));
  CHECK_THROWS_WITH(kernels::unpack_(flat, {a, Tensor()}, {0, 4}),
                    Catch::Contains("unpack_") && Catch::Contains("part #1") && Catch::Contains("undefined"));
  Tensor d = Tensor::zeros({3}, DType::f64);
  CHECK_THROWS_WITH(kernels::unpack_(flat, {a, d}, {0, 4}),
                    Catch::Contains("unpack_") && Catch::Contains("part #1") &&
                        Catch::Contains("float64[3]") && Catch::Contains("float32[10]"));
  Tensor h = Tensor::zeros({4}, DType::f16);
  CHECK_THROWS_WITH(kernels::unpack_(h, {}, {}), Catch::Contains("unpack_") && Catch::Contains("float16"));
  // A failed call writes nothing.
  CHECK(flat.to_vector() == std::vector<double>(10, 0.0));
}
