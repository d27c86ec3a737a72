#include "models/data/dataset_identity.h"

#include <cstdio>
#include <cstring>

namespace tandem::data {

namespace {

constexpr uint64_t kPrime = 1099511628211ull;  // FNV's 64-bit prime; odd, so h -> h * p is invertible

// FNV-1a over 8-byte words in four interleaved lanes, folded into `h` at the end (a bytewise
// loop, or one lane, waits on each multiply: several times slower).
uint64_t hash_bytes(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t lane[4] = {h, h ^ 1, h ^ 2, h ^ 3};
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    uint64_t words[4];
    std::memcpy(words, p + i, 32);
    for (int k = 0; k < 4; ++k) lane[k] = (lane[k] ^ words[k]) * kPrime;
  }
  for (; i < bytes; ++i) lane[0] = (lane[0] ^ p[i]) * kPrime;
  for (int k = 0; k < 4; ++k) h = (h ^ lane[k]) * kPrime;
  return h;
}

}  // namespace

std::string dataset_identity(const ImageDataset& dataset) {
  uint64_t h = 14695981039346656037ull;  // FNV's offset basis
  std::string shape = "[]";
  if (dataset.images.defined()) {
    Tensor host = dataset.images.device().is_cpu() ? dataset.images : dataset.images.to(Device::cpu());
    h = hash_bytes(host.raw_data(), host.bytes(), h);
    const Shape& s = host.shape();
    shape = shape_str(Shape(s.begin() + (s.empty() ? 0 : 1), s.end()));
  }
  h = hash_bytes(dataset.labels.data(), dataset.labels.size() * sizeof(int64_t), h);
  char digits[17];
  std::snprintf(digits, sizeof digits, "%016llx", static_cast<unsigned long long>(h));
  return std::to_string(dataset.size()) + " images " + shape + ", content " + digits;
}

}  // namespace tandem::data
