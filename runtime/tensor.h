// Tensor: a contiguous, row-major block of one dtype on one device.
//
// Contract:
// - A tensor is a shape, a dtype, a device and a shared Storage with an element offset,
//   so a tensor can be a view into a larger buffer (a gradient inside a bucket).
// - Copying a Tensor copies the handle, not the data (clone() copies the data).
// - Host accessors (data<T>(), at(), to_vector()) require a CPU tensor of that dtype and
//   throw an Error naming the dtype otherwise.
// - check_same_shape/dtype/device throw an Error that names the op and both operands.
#pragma once

#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/storage.h"

namespace tandem {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;  // undefined: holds no storage

  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu()) {
    return full(shape, 1.0, dtype, device);
  }
  // A CPU tensor holding `values` converted to `dtype`; values.size() must equal numel(shape).
  // A tensor over the start of `storage` (an adopted one, say): numel(shape) elements must fit.
  static Tensor over_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype = DType::f32);
  static Tensor from_values(const Shape& shape, const std::vector<double>& values, DType dtype = DType::f32);
  static Tensor scalar(double value, DType dtype = DType::f32) { return from_values({}, {value}, dtype); }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t axis) const;  // negative axes count from the end
  int64_t numel() const { return numel_; }
  size_t bytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t offset() const { return offset_; }  // in elements, into the storage
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::string str() const;  // "float32[64, 784] on cpu"

  void* raw_data() const;
  template <typename T>
  T* data() const {
    check_host_dtype(DTypeOf<T>::value, "data()");
    return static_cast<T*>(raw_data());
  }

  // Same storage, different shape (numel must match).
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const { return view(shape); }
  // Same storage: `numel(shape)` elements starting `element_offset` elements past this one's start.
  Tensor view_range(int64_t element_offset, const Shape& shape) const;
  // Rows [start, start + count) of the first axis, as a view.
  Tensor narrow_rows(int64_t start, int64_t count) const;

  Tensor clone() const;
  Tensor to(DType dtype) const;  // converted copy (a plain copy when the dtype matches)
  // A copy between host and device waits for the device: it is noted with the caller's
  // site (runtime/host_cost.h), as are the host reads below.
  Tensor to(Device device, std::source_location where = std::source_location::current()) const;
  // same numel; converts dtype; CPU<->CUDA through the copy hook
  void copy_(const Tensor& src, std::source_location where = std::source_location::current());
  void fill_(double value);
  void zero_() { fill_(0.0); }

  // Host-side element access, converting to double: for tests and small values.
  double item(std::source_location where = std::source_location::current()) const;
  double at(int64_t flat_index, std::source_location where = std::source_location::current()) const;
  std::vector<double> to_vector(std::source_location where = std::source_location::current()) const;

  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }

 private:
  void check_host_dtype(DType expected, const char* what) const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  int64_t numel_ = 0;
  int64_t offset_ = 0;
  DType dtype_ = DType::f32;
  Device device_;
};

void check_same_shape(const char* op, const Tensor& a, const Tensor& b);
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_defined(const char* op, const Tensor& t, const char* what);

// Device-side operations are provided by the CUDA runtime when it is built (see
// runtime/cuda/cuda_memory.h); without them an operation on a CUDA tensor throws.
// copy: moves `bytes` from src to dst, either of which may be on CUDA. Copies between two
//   CUDA buffers are ordered on the compute stream; copies touching the host return once
//   the host side may be used.
// fill: sets `count` elements of `dtype` at device pointer dst to `value`.
// convert: converts `count` elements between dtypes, both buffers on one CUDA device.
struct DeviceOps {
  void (*copy)(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) = nullptr;
  void (*fill)(void* dst, Device device, DType dtype, int64_t count, double value) = nullptr;
  void (*convert)(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t count,
                  Device device) = nullptr;
};
void set_device_ops(const DeviceOps& ops);
bool has_device_ops();

}  // namespace tandem
