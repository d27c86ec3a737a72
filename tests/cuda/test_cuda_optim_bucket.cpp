// The multi-tensor CUDA kernels against their CPU twins: Adam/AdamW and SGD over groups of
// tensors (sizes 1, 7 and 1000003 in one launch, misaligned views), the optimizers of
// autograd on GPU parameters, bucket pack/unpack with scale and an undefined part, and the
// non-finite scrub of averaged gradients.
// The kernels round each operation as the CPU does, so results must agree bit for bit.
#include <cstring>
#include <limits>

#include "autograd/optim.h"
#include "kernels/bucket_ops.h"
#include "kernels/non_finite.h"
#include "kernels/optim.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f64};

// Bitwise equality (NaN never passes), on top of the relative bound.
void require_same(const Tensor& gpu, const Tensor& cpu, const std::string& what, double rel = 1e-6) {
  INFO(what << ": GPU " << gpu.str() << " vs CPU " << cpu.str());
  REQUIRE(gpu.device().is_cuda());
  REQUIRE(gpu.shape() == cpu.shape());
  const double err = relative_error(gpu, cpu);
  INFO("relative error " << err);
  REQUIRE(err <= rel);
  const std::vector<double> g = gpu.to_vector(), c = cpu.to_vector();
  size_t differing = 0, first = g.size();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::memcmp(&g[i], &c[i], sizeof(double)) != 0) {
      if (differing++ == 0) first = i;
    }
  }
  INFO(differing << " elements differ in their bits, the first at " << first);
  CHECK(differing == 0);
}

// Copies of `cpu` on the GPU; with `misalign`, each lives one element into a larger
// buffer, so the kernel must take its scalar path.
std::vector<Tensor> to_gpu(const std::vector<Tensor>& cpu, bool misalign) {
  std::vector<Tensor> out;
  for (const Tensor& t : cpu) {
    if (!misalign) {
      out.push_back(on_gpu(t));
      continue;
    }
    Tensor big = Tensor::empty({t.numel() + 1}, t.dtype(), Device::cuda());
    Tensor view = big.view_range(1, t.shape());
    view.copy_(t);
    out.push_back(view);
  }
  return out;
}

std::vector<Tensor> random_list(const std::vector<int64_t>& sizes, DType dt, uint64_t seed, double lo = -1.0,
                                double hi = 1.0) {
  std::vector<Tensor> out;
  for (int64_t n : sizes) out.push_back(random_cpu({n}, dt, seed++, lo, hi));
  return out;
}

const std::vector<int64_t> kSizes = {1, 7, 1000003, 0, 33};

}  // namespace

TEST_CASE("cuda adam_update_ matches the CPU over a multi-tensor group for 3 steps") {
  for (DType dt : kFloatTypes)
    for (bool decoupled : {false, true})
      for (bool misalign : {false, true}) {
        std::ostringstream os;
        os << dtype_name(dt) << (decoupled ? " AdamW" : " Adam") << (misalign ? " misaligned" : "");
        std::vector<Tensor> p = random_list(kSizes, dt, 10);
        std::vector<Tensor> m, v;
        for (const Tensor& t : p) {
          m.push_back(Tensor::zeros(t.shape(), dt));
          v.push_back(Tensor::zeros(t.shape(), dt));
        }
        std::vector<Tensor> p_gpu = to_gpu(p, misalign), m_gpu = to_gpu(m, misalign),
                            v_gpu = to_gpu(v, misalign);
        for (int64_t t = 1; t <= 3; ++t) {
          std::vector<Tensor> g = random_list(kSizes, dt, 100 * static_cast<uint64_t>(t), -2.0, 2.0);
          kernels::AdamStep s{.lr = 1e-2,
                              .beta1 = 0.5,
                              .beta2 = 0.999,
                              .eps = 1e-8,
                              .weight_decay = 0.01,
                              .decoupled = decoupled,
                              .step = t};
          kernels::adam_update_(p, g, m, v, s);
          kernels::adam_update_(p_gpu, to_gpu(g, misalign), m_gpu, v_gpu, s);
        }
        for (size_t i = 0; i < p.size(); ++i) {
          const std::string what = os.str() + ", tensor of " + std::to_string(p[i].numel());
          require_same(p_gpu[i], p[i], what + ": param");
          require_same(m_gpu[i], m[i], what + ": exp_avg");
          require_same(v_gpu[i], v[i], what + ": exp_avg_sq");
        }
      }
}

TEST_CASE("cuda sgd_update_ matches the CPU with momentum, dampening, Nesterov and weight decay") {
  struct Case {
    kernels::SgdStep step;
    const char* what;
  };
  const Case cases[] = {
      {{.lr = 0.1}, "plain"},
      {{.lr = 0.1, .weight_decay = 0.01}, "weight decay"},
      {{.lr = 0.1, .momentum = 0.9}, "momentum"},
      {{.lr = 0.1, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01}, "dampening"},
      {{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true}, "nesterov"},
  };
  for (DType dt : kFloatTypes)
    for (const Case& c : cases)
      for (bool misalign : {false, true}) {
        const std::string what =
            std::string(dtype_name(dt)) + " SGD " + c.what + (misalign ? " misaligned" : "");
        const bool use_momentum = c.step.momentum != 0.0;
        std::vector<Tensor> p = random_list(kSizes, dt, 20), b;
        if (use_momentum)
          for (const Tensor& t : p) b.push_back(Tensor::empty(t.shape(), dt));
        std::vector<Tensor> p_gpu = to_gpu(p, misalign), b_gpu;
        if (use_momentum)
          for (const Tensor& t : p)
            b_gpu.push_back(Tensor::empty(t.shape(), dt, Device::cuda()));  // poisoned
        for (int t = 1; t <= 3; ++t) {
          std::vector<Tensor> g = random_list(kSizes, dt, 200 * static_cast<uint64_t>(t));
          kernels::SgdStep s = c.step;
          s.first = t == 1;
          kernels::sgd_update_(p, g, b, s);
          kernels::sgd_update_(p_gpu, to_gpu(g, misalign), b_gpu, s);
        }
        for (size_t i = 0; i < p.size(); ++i) {
          require_same(p_gpu[i], p[i], what + ": param of " + std::to_string(p[i].numel()));
          if (use_momentum)
            require_same(b_gpu[i], b[i], what + ": momentum of " + std::to_string(p[i].numel()));
        }
      }
}

TEST_CASE("autograd optimizers on GPU parameters match the same optimizers on the CPU") {
  for (DType dt : kFloatTypes) {
    auto make = [&](Device device) {
      std::vector<Variable> params;
      uint64_t seed = 40;
      for (int64_t n : {5, 1000, 3}) params.emplace_back(random_cpu({n}, dt, seed++).to(device), true);
      return params;
    };
    std::vector<Variable> cpu = make(Device::cpu()), gpu = make(Device::cuda());
    optim::AdamW adam_cpu(cpu, {.lr = 1e-2, .betas = {0.5, 0.999}});
    optim::AdamW adam_gpu(gpu, {.lr = 1e-2, .betas = {0.5, 0.999}});
    optim::SGD sgd_cpu(cpu, {.lr = 0.05, .momentum = 0.9, .nesterov = true});
    optim::SGD sgd_gpu(gpu, {.lr = 0.05, .momentum = 0.9, .nesterov = true});
    for (int t = 0; t < 4; ++t) {
      for (size_t i = 0; i < cpu.size(); ++i) {
        // Parameter 2 skips step 1, so its step count lags and it updates in its own group.
        if (i == 2 && t == 1) {
          cpu[i].set_grad(Tensor());
          gpu[i].set_grad(Tensor());
          continue;
        }
        Tensor g = random_cpu(cpu[i].shape(), dt, 300 + 10 * static_cast<uint64_t>(t) + i);
        cpu[i].set_grad(g);
        gpu[i].set_grad(on_gpu(g));
      }
      adam_cpu.step();
      adam_gpu.step();
      sgd_cpu.step();
      sgd_gpu.step();
    }
    CHECK(adam_gpu.step_count(2) == 3);
    for (size_t i = 0; i < cpu.size(); ++i)
      require_same(gpu[i].data(), cpu[i].data(),
                   std::string(dtype_name(dt)) + " parameter " + std::to_string(i));
  }
}

TEST_CASE("cuda pack_ and unpack_ match the CPU with scale, gaps, misaligned slots and an undefined part") {
  // 5 parts travel as a small kernel argument, 160 as a large one, 700 through the staging buffer.
  for (int num_parts : {5, 160, 700})
    for (DType dt : kFloatTypes) {
      INFO(num_parts << " parts");
      // Parts of varied sizes; slots start at odd offsets with gaps between them.
      std::vector<int64_t> sizes, offsets;
      int64_t at = 3;
      for (int i = 0; i < num_parts; ++i) {
        const int64_t n = i == 2 ? 100003 : (i * 37) % 1000 + (i % 5 == 0 ? 0 : 1);
        sizes.push_back(n);
        offsets.push_back(at);
        at += n + (i % 3);
      }
      std::vector<Tensor> parts = random_list(sizes, dt, 50);
      parts[3] = Tensor();  // an unused parameter: zeros in its slot
      Tensor flat = Tensor::full({at + 5}, 42.0, dt);
      Tensor flat_gpu = on_gpu(flat);
      std::vector<Tensor> parts_gpu;
      for (const Tensor& t : parts) parts_gpu.push_back(t.defined() ? on_gpu(t) : Tensor());
      kernels::pack_(flat, parts, offsets, sizes, 0.125);
      kernels::pack_(flat_gpu, parts_gpu, offsets, sizes, 0.125);
      require_same(flat_gpu, flat, std::string(dtype_name(dt)) + " pack_");

      std::vector<Tensor> back, back_gpu;
      for (int64_t n : sizes) {
        back.push_back(Tensor::empty({n}, dt));
        back_gpu.push_back(
            Tensor::empty({n}, dt, Device::cuda()));  // poisoned: every element must be written
      }
      Tensor source = random_cpu({at + 5}, dt, 77);
      kernels::unpack_(source, back, offsets, 1.0 / 3.0);
      kernels::unpack_(on_gpu(source), back_gpu, offsets, 1.0 / 3.0);
      for (size_t i = 0; i < back.size(); ++i)
        require_same(back_gpu[i], back[i],
                     std::string(dtype_name(dt)) + " unpack_ part " + std::to_string(i));
    }
}

TEST_CASE("cuda pack_ scales a part that views its own slot in place") {
  Tensor flat = on_gpu(Tensor::from_values({6}, {1, 2, 3, 4, 5, 6}));
  Tensor view = flat.view_range(2, {4});
  kernels::pack_(flat, {view}, {2}, {4}, 2.0);
  CHECK(flat.to_vector() == std::vector<double>{1, 2, 6, 8, 10, 12});
}

TEST_CASE("cuda multi-tensor kernels reject mixed devices by name") {
  Tensor flat = Tensor::zeros({8}, DType::f32, Device::cuda());
  Tensor part = Tensor::zeros({4});
  CHECK_THROWS_WITH(kernels::pack_(flat, {part}, {0}, {4}),
                    Catch::Contains("pack_") && Catch::Contains("part #0"));
  Tensor p = Tensor::zeros({4}, DType::f32, Device::cuda());
  CHECK_THROWS_WITH(kernels::adam_update_({p}, {part}, {p}, {p}, {}),
                    Catch::Contains("adam_update_") && Catch::Contains("gradient #0"));
}

TEST_CASE("cuda scrub_non_finite_ matches the CPU: the same values and the same count") {
  for (DType dtype : kFloatTypes) {
    Tensor cpu = random_cpu({1000003}, dtype, 31);
    const double nan = std::numeric_limits<double>::quiet_NaN(),
                 inf = std::numeric_limits<double>::infinity();
    std::vector<double> values = cpu.to_vector();
    for (size_t i = 0; i < values.size(); i += 997) values[i] = i % 3 == 0 ? nan : i % 3 == 1 ? inf : -inf;
    cpu = Tensor::from_values(cpu.shape(), values, dtype);
    Tensor gpu = on_gpu(cpu);
    const int64_t cpu_count = kernels::scrub_non_finite_(cpu, 1e5);
    CHECK(cpu_count == 1004);  // every 997th element of 1000003
    CHECK(kernels::scrub_non_finite_(gpu, 1e5) == cpu_count);
    require_same(gpu, cpu, std::string("scrub ") + dtype_name(dtype), 0.0);
  }
}
