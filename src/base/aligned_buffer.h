#pragma once
// A heap buffer aligned for SIMD loads. Its size() is exactly the bytes allocated, which is
// what caches report from nbytes(): resident memory, not bit-width accounting.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace base {

inline constexpr std::size_t kBufferAlignment = 64;

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes) { allocate(bytes); }
  AlignedBuffer(const AlignedBuffer& other) {
    allocate(other.size_);
    if (size_) std::memcpy(data_, other.data_, size_);
  }
  AlignedBuffer& operator=(const AlignedBuffer& other) {
    if (this != &other) {
      AlignedBuffer copy(other);
      swap(copy);
    }
    return *this;
  }
  AlignedBuffer(AlignedBuffer&& other) noexcept { swap(other); }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    AlignedBuffer moved(std::move(other));
    swap(moved);
    return *this;
  }
  ~AlignedBuffer() { ::operator delete (data_, std::align_val_t{kBufferAlignment}); }

  void swap(AlignedBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
  }

  // Grows (or shrinks) to `bytes`, keeping the first min(old, new) bytes; new bytes are zero.
  void resize(std::size_t bytes) {
    AlignedBuffer next(bytes);
    if (size_ && bytes) std::memcpy(next.data_, data_, size_ < bytes ? size_ : bytes);
    swap(next);
  }

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(data_);
  }
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(data_);
  }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  void allocate(std::size_t bytes) {
    if (bytes == 0) return;
    data_ = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{kBufferAlignment}));
    std::memset(data_, 0, bytes);
    size_ = bytes;
  }

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace base
