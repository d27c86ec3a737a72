#include "runtime/tensor.h"

#include <cstring>
#include <sstream>

#include "runtime/host_cost.h"

namespace tandem {

namespace {

DeviceOps g_device_ops;

void require_device_ops(const char* what, Device device) {
  TANDEM_CHECK(g_device_ops.copy != nullptr,
               what << " on " << device.str() << " needs a CUDA build with a GPU");
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                const std::source_location& where) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  TANDEM_CHECK(g_device_ops.copy != nullptr, "copy from " << src_device.str() << " to " << dst_device.str()
                                                          << " needs a CUDA build with a GPU");
  const int64_t t0 = host_cost::now_ns_if_counting();
  g_device_ops.copy(dst, dst_device, src, src_device, bytes);
  if (dst_device.is_cpu() || src_device.is_cpu()) {  // device to device is queued, not waited for
    host_cost::note_copy(dst_device.is_cpu() ? host_cost::CopyDirection::device_to_host
                                             : host_cost::CopyDirection::host_to_device,
                         static_cast<int64_t>(bytes), where, host_cost::now_ns_if_counting() - t0);
  }
}

// Reads element i of a CPU buffer of any dtype as double.
double load_as_double(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(base)[i];
    case DType::f64:
      return static_cast<const double*>(base)[i];
    case DType::f16:
      return half_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::i32:
      return static_cast<const int32_t*>(base)[i];
    case DType::i64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::u8:
      return static_cast<const uint8_t*>(base)[i];
  }
  return 0.0;
}

void store_from_double(void* base, DType dtype, int64_t i, double value) {
  switch (dtype) {
    case DType::f32:
      static_cast<float*>(base)[i] = static_cast<float>(value);
      break;
    case DType::f64:
      static_cast<double*>(base)[i] = value;
      break;
    case DType::f16:
      static_cast<uint16_t*>(base)[i] = float_to_half_bits(static_cast<float>(value));
      break;
    case DType::bf16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(static_cast<float>(value));
      break;
    case DType::i32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(value);
      break;
    case DType::i64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(value);
      break;
    case DType::u8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(value);
      break;
  }
}

// dst[i] = convert(src[i]) over `count` elements of the given C++ types: one direct loop.
template <typename Src, typename Dst, typename Convert>
void map_elements(void* dst, const void* src, int64_t count, Convert convert) {
  auto* d = static_cast<Dst*>(dst);
  auto* s = static_cast<const Src*>(src);
  for (int64_t i = 0; i < count; ++i) d[i] = convert(s[i]);
}

// Converting copy between two CPU buffers. f32<->f32 etc. is a memcpy; the 16-bit types
// convert through float so rounding is that of float_to_half_bits / float_to_bf16_bits.
void convert_cpu(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t count) {
  if (dst_dtype == src_dtype) {
    std::memcpy(dst, src, static_cast<size_t>(count) * dtype_size(dst_dtype));
    return;
  }
  if (dst_dtype == DType::f32 && src_dtype == DType::f64)
    return map_elements<double, float>(dst, src, count, [](double v) { return static_cast<float>(v); });
  // The reduced-precision casts (autograd/precision.h), in loops the compiler vectorises.
  if (src_dtype == DType::f32 && dst_dtype == DType::bf16)
    return map_elements<float, uint16_t>(dst, src, count, [](float v) { return float_to_bf16_bits(v); });
  if (src_dtype == DType::bf16 && dst_dtype == DType::f32)
    return map_elements<uint16_t, float>(dst, src, count, [](uint16_t v) { return bf16_bits_to_float(v); });
  if (src_dtype == DType::f32 && dst_dtype == DType::f16)
    return map_elements<float, uint16_t>(dst, src, count, [](float v) { return float_to_half_bits(v); });
  if (src_dtype == DType::f16 && dst_dtype == DType::f32)
    return map_elements<uint16_t, float>(dst, src, count, [](uint16_t v) { return half_bits_to_float(v); });
  for (int64_t i = 0; i < count; ++i) {
    double v = load_as_double(src, src_dtype, i);
    if (dst_dtype == DType::f16 || dst_dtype == DType::bf16) v = static_cast<float>(v);
    store_from_double(dst, dst_dtype, i, v);
  }
}

}  // namespace

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    TANDEM_CHECK(d >= 0, "negative dimension in shape " << shape_str(shape));
    n *= d;
  }
  return n;
}

Tensor Tensor::over_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype) {
  TANDEM_CHECK(storage != nullptr, "Tensor::over_storage: no storage");
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.device_ = storage->device();
  TANDEM_CHECK(t.bytes() <= storage->bytes(),
               "Tensor::over_storage: " << shape_str(shape) << " " << dtype_name(dtype) << " needs "
                                        << t.bytes() << " bytes, the storage has " << storage->bytes());
  t.storage_ = std::move(storage);
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(t.bytes(), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(0.0);
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_values(const Shape& shape, const std::vector<double>& values, DType dtype) {
  Tensor t = empty(shape, dtype);
  TANDEM_CHECK(static_cast<int64_t>(values.size()) == t.numel(),
               "from_values: " << values.size() << " values for shape " << shape_str(shape) << " ("
                               << t.numel() << " elements)");
  convert_cpu(t.raw_data(), dtype, values.data(), DType::f64, t.numel());
  return t;
}

int64_t Tensor::size(int64_t axis) const {
  int64_t d = dim();
  int64_t a = axis < 0 ? axis + d : axis;
  TANDEM_CHECK(a >= 0 && a < d, "axis " << axis << " out of range for shape " << shape_str(shape_));
  return shape_[static_cast<size_t>(a)];
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device_.str();
}

void* Tensor::raw_data() const {
  TANDEM_CHECK(defined(), "access to the data of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

void Tensor::check_host_dtype(DType expected, const char* what) const {
  TANDEM_CHECK(defined(), what << " on an undefined tensor");
  TANDEM_CHECK(device_.is_cpu(), what << " needs a CPU tensor, got " << str());
  TANDEM_CHECK(dtype_ == expected, what << " as " << dtype_name(expected) << " on a tensor of "
                                        << dtype_name(dtype_) << " (" << str() << ")");
}

Tensor Tensor::view(const Shape& shape) const {
  TANDEM_CHECK(defined(), "view of an undefined tensor");
  TANDEM_CHECK(shape_numel(shape) == numel_,
               "view: cannot view " << str() << " as shape " << shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::view_range(int64_t element_offset, const Shape& shape) const {
  TANDEM_CHECK(defined(), "view_range of an undefined tensor");
  int64_t n = shape_numel(shape);
  TANDEM_CHECK(element_offset >= 0 && element_offset + n <= numel_,
               "view_range: elements [" << element_offset << ", " << element_offset + n
                                        << ") out of range of " << str());
  Tensor t = *this;
  t.shape_ = shape;
  t.numel_ = n;
  t.offset_ = offset_ + element_offset;
  return t;
}

Tensor Tensor::narrow_rows(int64_t start, int64_t count) const {
  TANDEM_CHECK(dim() >= 1, "narrow_rows on a scalar " << str());
  TANDEM_CHECK(start >= 0 && count >= 0 && start + count <= shape_[0],
               "narrow_rows: rows [" << start << ", " << start + count << ") out of range of " << str());
  Shape s = shape_;
  s[0] = count;
  int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  return view_range(start * row, s);
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  Tensor t = empty(shape_, dtype, device_);
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(Device device, std::source_location where) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_(*this, where);
  return t;
}

void Tensor::copy_(const Tensor& src, std::source_location where) {
  TANDEM_CHECK(defined() && src.defined(), "copy_ with an undefined tensor");
  TANDEM_CHECK(src.numel() == numel_,
               "copy_: source " << src.str() << " into destination " << str() << " (element counts differ)");
  if (src.dtype() == dtype_) {
    copy_bytes(raw_data(), device_, src.raw_data(), src.device(), bytes(), where);
    return;
  }
  if (device_.is_cpu() && src.device().is_cpu()) {
    convert_cpu(raw_data(), dtype_, src.raw_data(), src.dtype(), numel_);
    return;
  }
  if (device_ != src.device()) {  // move first, then convert where the destination lives
    copy_(src.to(device_, where), where);
    return;
  }
  require_device_ops("copy_ with dtype conversion", device_);
  g_device_ops.convert(raw_data(), dtype_, src.raw_data(), src.dtype(), numel_, device_);
}

void Tensor::fill_(double value) {
  TANDEM_CHECK(defined(), "fill_ on an undefined tensor");
  if (device_.is_cpu()) {
    void* base = raw_data();
    if (dtype_ == DType::f32) {
      float v = static_cast<float>(value);
      float* p = static_cast<float*>(base);
      for (int64_t i = 0; i < numel_; ++i) p[i] = v;
    } else {
      for (int64_t i = 0; i < numel_; ++i) store_from_double(base, dtype_, i, value);
    }
    return;
  }
  require_device_ops("fill_", device_);
  g_device_ops.fill(raw_data(), device_, dtype_, numel_, value);
}

double Tensor::item(std::source_location where) const {
  TANDEM_CHECK(numel_ == 1, "item() needs exactly one element, got " << str());
  return at(0, where);
}

double Tensor::at(int64_t flat_index, std::source_location where) const {
  TANDEM_CHECK(flat_index >= 0 && flat_index < numel_,
               "index " << flat_index << " out of range of " << str());
  if (!device_.is_cpu()) return to(Device::cpu(), where).at(flat_index, where);
  host_cost::note_host_read(where);
  return load_as_double(raw_data(), dtype_, flat_index);
}

std::vector<double> Tensor::to_vector(std::source_location where) const {
  if (!device_.is_cpu()) return to(Device::cpu(), where).to_vector(where);
  host_cost::note_host_read(where);
  std::vector<double> out(static_cast<size_t>(numel_));
  const void* base = raw_data();
  for (int64_t i = 0; i < numel_; ++i) out[static_cast<size_t>(i)] = load_as_double(base, dtype_, i);
  return out;
}

void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  TANDEM_CHECK(a.shape() == b.shape(),
               op << ": shape mismatch, " << shape_str(a.shape()) << " vs " << shape_str(b.shape()));
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  TANDEM_CHECK(a.dtype() == b.dtype(), op << ": dtype mismatch, " << a.str() << " vs " << b.str());
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  TANDEM_CHECK(a.device() == b.device(), op << ": device mismatch, " << a.str() << " vs " << b.str());
}

void check_defined(const char* op, const Tensor& t, const char* what) {
  TANDEM_CHECK(t.defined(), op << ": " << what << " is an undefined tensor");
}

void set_device_ops(const DeviceOps& ops) { g_device_ops = ops; }
bool has_device_ops() { return g_device_ops.copy != nullptr; }

}  // namespace tandem
