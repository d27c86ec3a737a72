#include "runtime/dist/mpi_reduce_ops.h"

#include <algorithm>
#include <bit>
#include <mutex>

#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_lifetime.h"

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

namespace tandem::dist::detail {

namespace {

// 16-bit reductions: MPI has no half types, so user-defined ops compute in float and
// round once per pairwise step. They run inside every reduction step, so the conversions
// are inline and blocked (F16C when the compiler targets it); the rounding is that of
// float_to_half_bits / float_to_bf16_bits (nearest even).
enum class Combine { sum, max, min };

constexpr int kBlock = 8;

template <bool kHalf>
inline void to_float(const uint16_t* src, float* dst, int n) {
  if constexpr (kHalf) {
#if defined(__F16C__) && defined(__AVX__)
    if (n == kBlock) {
      _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
      return;
    }
#endif
    for (int j = 0; j < n; ++j) dst[j] = half_bits_to_float(src[j]);
  } else {
    for (int j = 0; j < n; ++j) dst[j] = std::bit_cast<float>(static_cast<uint32_t>(src[j]) << 16);
  }
}

template <bool kHalf>
inline void from_float(const float* src, uint16_t* dst, int n) {
  if constexpr (kHalf) {
#if defined(__F16C__) && defined(__AVX__)
    if (n == kBlock) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT));
      return;
    }
#endif
    for (int j = 0; j < n; ++j) dst[j] = float_to_half_bits(src[j]);
  } else {
    for (int j = 0; j < n; ++j) {
      uint32_t x = std::bit_cast<uint32_t>(src[j]);
      dst[j] = (x & 0x7fffffffu) > 0x7f800000u
                   ? static_cast<uint16_t>((x >> 16) | 0x40u)  // quiet nan
                   : static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
  }
}

// b[i] = f(a[i], b[i]) in float (a may be null: f gets 0 for it). Full blocks have a
// constant length so the conversions unroll and vectorise.
template <bool kHalf, typename F>
void map_16bit(const uint16_t* a, uint16_t* b, int64_t count, F f) {
  float x[kBlock] = {}, y[kBlock];
  const int64_t full = count / kBlock * kBlock;
  for (int64_t i = 0; i < full; i += kBlock) {
    if (a != nullptr) to_float<kHalf>(a + i, x, kBlock);
    to_float<kHalf>(b + i, y, kBlock);
    for (int j = 0; j < kBlock; ++j) y[j] = f(x[j], y[j]);
    from_float<kHalf>(y, b + i, kBlock);
  }
  if (full < count) {
    int m = static_cast<int>(count - full);
    if (a != nullptr) to_float<kHalf>(a + full, x, m);
    to_float<kHalf>(b + full, y, m);
    for (int j = 0; j < m; ++j) y[j] = f(x[j], y[j]);
    from_float<kHalf>(y, b + full, m);
  }
}

// One pairwise step: inout[i] = combine(in[i], inout[i]), rounded back to 16 bits.
template <bool kHalf, Combine kCombine>
void combine_16bit_step(const uint16_t* in, uint16_t* inout, int64_t count) {
  map_16bit<kHalf>(in, inout, count, [](float x, float y) {
    return kCombine == Combine::sum ? x + y : kCombine == Combine::max ? std::max(x, y) : std::min(x, y);
  });
}

template <bool kHalf, Combine kCombine>
void reduce_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  combine_16bit_step<kHalf, kCombine>(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), *len);
}

// [f16, bf16][sum, max, min], created once MPI runs.
MPI_Op g_ops_16bit[2][3];
std::once_flag g_once;

void create_16bit_ops() {
  MpiLock lock;
  MPI_User_function* fns[2][3] = {
      {reduce_16bit<true, Combine::sum>, reduce_16bit<true, Combine::max>, reduce_16bit<true, Combine::min>},
      {reduce_16bit<false, Combine::sum>, reduce_16bit<false, Combine::max>,
       reduce_16bit<false, Combine::min>}};
  for (int d = 0; d < 2; ++d)
    for (int o = 0; o < 3; ++o) TANDEM_CHECK_MPI(MPI_Op_create(fns[d][o], /*commute=*/1, &g_ops_16bit[d][o]));
}

}  // namespace

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16:
      return MPI_UINT16_T;  // payload only; arithmetic is in our MPI_Ops
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

void ensure_reduce_ops() { std::call_once(g_once, create_16bit_ops); }

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  int o = op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : 0;  // avg reduces as sum
  if (dtype == DType::f16 || dtype == DType::bf16) return g_ops_16bit[dtype == DType::f16 ? 0 : 1][o];
  return o == 0 ? MPI_SUM : o == 1 ? MPI_MAX : MPI_MIN;
}

void combine_16bit(const void* in, void* inout, DType dtype, int64_t count, ReduceOp op) {
  using Step = void (*)(const uint16_t*, uint16_t*, int64_t);
  constexpr Step kSteps[2][3] = {
      {combine_16bit_step<true, Combine::sum>, combine_16bit_step<true, Combine::max>,
       combine_16bit_step<true, Combine::min>},
      {combine_16bit_step<false, Combine::sum>, combine_16bit_step<false, Combine::max>,
       combine_16bit_step<false, Combine::min>}};
  TANDEM_CHECK(dtype == DType::f16 || dtype == DType::bf16,
               "combine_16bit: " << dtype_name(dtype) << " is not a 16-bit float dtype");
  int o = op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : 0;  // avg combines as sum, like mpi_op
  kSteps[dtype == DType::f16 ? 0 : 1][o](static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout),
                                         count);
}

void divide_in_place(void* data, DType dtype, int64_t count, int divisor) {
  switch (dtype) {
    case DType::f32: {
      auto* p = static_cast<float*>(data);
      float d = static_cast<float>(divisor);
      for (int64_t i = 0; i < count; ++i) p[i] /= d;
      break;
    }
    case DType::f64: {
      auto* p = static_cast<double*>(data);
      double d = divisor;
      for (int64_t i = 0; i < count; ++i) p[i] /= d;
      break;
    }
    case DType::f16:
    case DType::bf16: {
      auto* p = static_cast<uint16_t*>(data);
      float d = static_cast<float>(divisor);
      auto divide = [d](float, float y) { return y / d; };
      if (dtype == DType::f16) {
        map_16bit<true>(nullptr, p, count, divide);
      } else {
        map_16bit<false>(nullptr, p, count, divide);
      }
      break;
    }
    case DType::i32:
    case DType::i64:
    case DType::u8:
      TANDEM_FAIL("an average of " << dtype_name(dtype) << " elements is not an integer");
  }
}

}  // namespace tandem::dist::detail
