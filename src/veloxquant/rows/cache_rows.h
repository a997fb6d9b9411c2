#pragma once
// Small row helpers shared by the serving caches: their buffers are [B, H, capacity, W]
// tensors, contiguous, addressed per (batch, head, row).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lm/cache/cache.h"
#include "lm/tensor.h"

namespace veloxquant::cache_rows {

// Pointer to row `row` of head (b, h) in a contiguous [B, H, cap, W] tensor of element T.
template <class T>
T* row_ptr(lm::Tensor& t, int64_t b, int64_t h, int64_t row) {
  const auto& s = t.strides();
  return t.data<T>() + b * s[0] + h * s[1] + row * s[2];
}
template <class T>
const T* row_ptr(const lm::Tensor& t, int64_t b, int64_t h, int64_t row) {
  const auto& s = t.strides();
  return t.data<T>() + b * s[0] + h * s[1] + row * s[2];
}

// A new contiguous [B, H, rows, W] tensor holding the first `rows` rows of `t` (deep copy; the
// capacity of the result is exactly `rows`, or `capacity` when larger).
lm::Tensor copy_rows(const lm::Tensor& t, int64_t rows, int64_t capacity);

// Converts `count` f32 values into `dtype` at `dst` / from `dtype` at `src`.
void store_f32(const float* src, std::size_t count, std::byte* dst, lm::DType dtype);
void load_f32(const std::byte* src, lm::DType dtype, std::size_t count, float* dst);
// All of `t` in row-major order as f32 into `out` (resized; a reused buffer allocates nothing).
void widen_to_f32(const lm::Tensor& t, std::vector<float>& out);
// `t` itself when its innermost dimension is contiguous (what row readers need), else a
// contiguous copy held in `copy`. Copying a Tensor allocates its shape: decode steps pass the
// host's tensors through this instead of calling contiguous() on them.
const lm::Tensor& with_contiguous_rows(const lm::Tensor& t, lm::Tensor& copy);

// The layout every later call must keep once a cache has allocated for the first one.
struct RowLayout {
  int64_t batch = 0, heads = 0, key_dim = 0, value_dim = 0;
};
// Throws base::InvalidArgument naming `who`, the new shapes and the cache's layout when new
// keys/values [B, H, S, D] / [B, H, S, Dv] do not match it.
void check_row_layout(const lm::Tensor& keys, const lm::Tensor& values, const RowLayout& layout, std::string_view who);

// Parses an int from a meta_state string; throws base::FormatError naming `who` and `what`.
int64_t parse_meta_int(const std::string& text, const char* who, const char* what);

}  // namespace veloxquant::cache_rows
