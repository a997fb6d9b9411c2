#pragma once
// lm::Tensor: an n-dimensional strided view over shared, 64-byte aligned storage — the
// smallest thing that lets the cache contract mirror mlx_lm: caches receive [B, H_kv, S, D]
// tensors and return [B, H_kv, T, D] tensors that may be views into their own buffers
// (no copy of the whole cache per step).
//
// Copies are shallow (they share storage, like mlx arrays); clone() makes a deep, contiguous
// copy. A view returned by a cache stays valid until the next mutating call on that cache.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "base/aligned_buffer.h"
#include "lm/dtype.h"

namespace lm {

using Shape = std::vector<int64_t>;

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-initialised contiguous storage.
  Tensor(Shape shape, DType dtype);

  static Tensor zeros(Shape shape, DType dtype) { return Tensor(std::move(shape), dtype); }
  // Converts f32 values into a new contiguous tensor of `dtype` (rounding to nearest even).
  static Tensor from_f32(std::span<const float> values, Shape shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }  // in elements
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int axis) const;  // negative axes count from the end
  int64_t numel() const;
  std::size_t element_size() const { return dtype_size(dtype_); }
  // Bytes of the elements this view covers (numel * element size).
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(); }
  // Bytes of the storage this view keeps alive (what is really resident).
  std::size_t storage_bytes() const { return storage_ ? storage_->size() : 0; }
  bool is_contiguous() const;

  // Raw pointer to element [0, 0, ...] of this view.
  std::byte* raw_data();
  const std::byte* raw_data() const;
  template <class T>
  T* data() {
    return reinterpret_cast<T*>(raw_data());
  }
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(raw_data());
  }

  // Element access through the strides, converting to/from f32 (for tests and reference
  // code; kernels use raw pointers).
  float get(std::initializer_list<int64_t> index) const;
  void set(std::initializer_list<int64_t> index, float value);
  // All elements in row-major order, as f32.
  std::vector<float> to_f32() const;

  // Views (share storage).
  Tensor slice(int axis, int64_t begin, int64_t end) const;  // [begin, end) along axis
  Tensor reshape(Shape shape) const;                         // requires contiguity
  // Deep copies.
  Tensor contiguous() const;  // returns *this when already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  Tensor astype(DType dtype) const;

 private:
  std::shared_ptr<base::AlignedBuffer> storage_;
  Shape shape_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::F32;

  int64_t flat_offset(std::initializer_list<int64_t> index) const;
};

// Row-major strides for a contiguous tensor of `shape`.
std::vector<int64_t> contiguous_strides(const Shape& shape);
// Element conversions shared by Tensor and the caches.
float load_as_f32(const std::byte* element, DType dtype);
void store_from_f32(std::byte* element, DType dtype, float value);
// Copies `count` elements, converting dtype (the scalar reference path).
void convert_elements(const std::byte* src, DType src_dtype, std::byte* dst, DType dst_dtype, std::size_t count);

}  // namespace lm
