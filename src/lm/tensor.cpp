#include "lm/tensor.h"

#include <cstring>
#include <string>

#include "base/error.h"
#include "base/half.h"

namespace lm {

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * shape[i + 1];
  }
  return strides;
}

float load_as_f32(const std::byte* element, DType dtype) {
  switch (dtype) {
    case DType::F32: {
      float v;
      std::memcpy(&v, element, 4);
      return v;
    }
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, element, 2);
      return base::f16_to_f32(h);
    }
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, element, 2);
      return base::bf16_to_f32(h);
    }
    case DType::U8:
      return static_cast<float>(*reinterpret_cast<const uint8_t*>(element));
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, element, 4);
      return static_cast<float>(v);
    }
    case DType::U32: {
      uint32_t v;
      std::memcpy(&v, element, 4);
      return static_cast<float>(v);
    }
  }
  return 0.0f;
}

void store_from_f32(std::byte* element, DType dtype, float value) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(element, &value, 4);
      return;
    case DType::F16: {
      const uint16_t h = base::f32_to_f16(value);
      std::memcpy(element, &h, 2);
      return;
    }
    case DType::BF16: {
      const uint16_t h = base::f32_to_bf16(value);
      std::memcpy(element, &h, 2);
      return;
    }
    case DType::U8:
      *reinterpret_cast<uint8_t*>(element) = static_cast<uint8_t>(value);
      return;
    case DType::I32: {
      const int32_t v = static_cast<int32_t>(value);
      std::memcpy(element, &v, 4);
      return;
    }
    case DType::U32: {
      const uint32_t v = static_cast<uint32_t>(value);
      std::memcpy(element, &v, 4);
      return;
    }
  }
}

void convert_elements(const std::byte* src, DType src_dtype, std::byte* dst, DType dst_dtype, std::size_t count) {
  // A tensor of zero elements has no storage (null data): memcpy must not see its pointer
  // even at length 0 (UBSan's nonnull-attribute), so zero elements return before it.
  if (count == 0) return;
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, count * dtype_size(src_dtype));
    return;
  }
  const std::size_t src_size = dtype_size(src_dtype);
  const std::size_t dst_size = dtype_size(dst_dtype);
  for (std::size_t i = 0; i < count; ++i) {
    store_from_f32(dst + i * dst_size, dst_dtype, load_as_f32(src + i * src_size, src_dtype));
  }
}

Tensor::Tensor(Shape shape, DType dtype)
    : shape_(std::move(shape)), strides_(contiguous_strides(shape_)), dtype_(dtype) {
  for (int64_t extent : shape_) {
    if (extent < 0) throw base::InvalidArgument("tensor extent must be >= 0, got " + std::to_string(extent));
  }
  storage_ = std::make_shared<base::AlignedBuffer>(static_cast<std::size_t>(numel()) * dtype_size(dtype));
}

Tensor Tensor::from_f32(std::span<const float> values, Shape shape, DType dtype) {
  Tensor t(std::move(shape), dtype);
  if (static_cast<int64_t>(values.size()) != t.numel()) {
    throw base::InvalidArgument("from_f32: " + std::to_string(values.size()) + " values for a tensor of " +
                                std::to_string(t.numel()) + " elements");
  }
  convert_elements(reinterpret_cast<const std::byte*>(values.data()), DType::F32, t.raw_data(), dtype, values.size());
  return t;
}

int64_t Tensor::dim(int axis) const {
  const int n = ndim();
  const int a = axis < 0 ? axis + n : axis;
  if (a < 0 || a >= n) throw base::InvalidArgument("axis " + std::to_string(axis) + " out of range");
  return shape_[a];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t extent : shape_) n *= extent;
  return n;
}

// Walks the strides instead of comparing with contiguous_strides(shape_): the check runs on
// every decode step's tensors and must not allocate.
bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = static_cast<int>(shape_.size()) - 1; i >= 0; --i) {
    if (strides_[static_cast<std::size_t>(i)] != expected) return false;
    expected *= shape_[static_cast<std::size_t>(i)];
  }
  return true;
}

std::byte* Tensor::raw_data() {
  return storage_ ? storage_->data() + offset_ * static_cast<int64_t>(element_size()) : nullptr;
}
const std::byte* Tensor::raw_data() const {
  return storage_ ? storage_->data() + offset_ * static_cast<int64_t>(element_size()) : nullptr;
}

int64_t Tensor::flat_offset(std::initializer_list<int64_t> index) const {
  if (static_cast<int>(index.size()) != ndim()) {
    throw base::InvalidArgument("index has " + std::to_string(index.size()) + " coordinates for a " +
                                std::to_string(ndim()) + "-d tensor");
  }
  int64_t flat = 0;
  int axis = 0;
  for (int64_t i : index) {
    if (i < 0 || i >= shape_[axis]) throw base::InvalidArgument("index out of range");
    flat += i * strides_[axis];
    ++axis;
  }
  return flat;
}

float Tensor::get(std::initializer_list<int64_t> index) const {
  return load_as_f32(raw_data() + flat_offset(index) * static_cast<int64_t>(element_size()), dtype_);
}

void Tensor::set(std::initializer_list<int64_t> index, float value) {
  store_from_f32(raw_data() + flat_offset(index) * static_cast<int64_t>(element_size()), dtype_, value);
}

std::vector<float> Tensor::to_f32() const {
  const Tensor c = contiguous();
  std::vector<float> out(static_cast<std::size_t>(c.numel()));
  convert_elements(c.raw_data(), dtype_, reinterpret_cast<std::byte*>(out.data()), DType::F32, out.size());
  return out;
}

Tensor Tensor::slice(int axis, int64_t begin, int64_t end) const {
  const int n = ndim();
  const int a = axis < 0 ? axis + n : axis;
  if (a < 0 || a >= n) throw base::InvalidArgument("slice axis out of range");
  if (begin < 0 || end < begin || end > shape_[a]) {
    throw base::InvalidArgument("slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                                ") out of range for extent " + std::to_string(shape_[a]));
  }
  Tensor view = *this;
  view.shape_[a] = end - begin;
  view.offset_ += begin * strides_[a];
  return view;
}

Tensor Tensor::reshape(Shape shape) const {
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  if (n != numel()) throw base::InvalidArgument("reshape changes the element count");
  Tensor base = contiguous();
  base.shape_ = std::move(shape);
  base.strides_ = contiguous_strides(base.shape_);
  return base;
}

Tensor Tensor::contiguous() const {
  if (!defined() || is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor out(shape_, dtype_);
  const std::size_t esize = element_size();
  const int n = ndim();
  if (n == 0) {
    std::memcpy(out.raw_data(), raw_data(), esize);
    return out;
  }
  // Copy innermost rows; the innermost stride is 1 for every view this type produces.
  const int64_t inner = shape_[n - 1];
  const int64_t rows = inner == 0 ? 0 : numel() / inner;
  std::vector<int64_t> idx(n, 0);
  std::byte* dst = out.raw_data();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t src_off = 0;
    for (int d = 0; d < n - 1; ++d) src_off += idx[d] * strides_[d];
    if (strides_[n - 1] == 1) {
      std::memcpy(dst, raw_data() + src_off * static_cast<int64_t>(esize), inner * esize);
    } else {
      for (int64_t j = 0; j < inner; ++j) {
        std::memcpy(dst + j * esize, raw_data() + (src_off + j * strides_[n - 1]) * static_cast<int64_t>(esize), esize);
      }
    }
    dst += inner * esize;
    for (int d = n - 2; d >= 0; --d) {
      if (++idx[d] < shape_[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

Tensor Tensor::astype(DType dtype) const {
  if (dtype == dtype_) return clone();
  const Tensor c = contiguous();
  Tensor out(shape_, dtype);
  convert_elements(c.raw_data(), dtype_, out.raw_data(), dtype, static_cast<std::size_t>(numel()));
  return out;
}

}  // namespace lm
