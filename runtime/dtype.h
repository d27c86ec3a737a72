// Element types and the 16-bit float conversions.
//
// Contract: f32 is the working type; f64 exists on CPU for gradient checks; f16 and bf16
// are storage types (conversion to and from float, round-to-nearest-even) used by the
// compressed communication hooks and as the operands of reduced-precision GEMMs and
// convolutions, whose results are float32 (accumulate_dtype; autograd/precision.h). i32, i64 and u8 are
// integers as integers: counts, indices, flags, hashes and bytes that cross a process group exactly. Kernels
// are floating-point only and name the op when given an integer tensor.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "float32", ..., "int32", "int64", "uint8"
bool is_floating(DType dtype);
bool is_16bit_float(DType dtype);  // f16 or bf16
// The dtype a product of `operand`-typed values accumulates and is returned in: float32
// for the 16-bit floats, the operand's own dtype otherwise.
DType accumulate_dtype(DType operand);

// 16-bit floats as plain bit patterns; arithmetic happens after conversion to float.
struct Half {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};

uint16_t float_to_half_bits(float value);
float half_bits_to_float(uint16_t bits);
// Inline: the reduced-precision casts run them over every operand of a GEMM (precision.h).
inline uint16_t float_to_bf16_bits(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}
inline float bf16_bits_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// Maps a C++ element type to its DType.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::u8;
};

}  // namespace tandem
