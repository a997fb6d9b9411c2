#include "veloxquant/rows/cache_rows.h"

#include "lm/kernels/simd_dot.h"

#include <charconv>
#include <cstring>

#include "base/error.h"
#include "base/half.h"
#include "lm/cache/kv_rows.h"

namespace veloxquant::cache_rows {

namespace {

// Rows [0, rows) of one head of a strided tensor t (src: the head's first element), element by
// element, into dense rows at dst.
void copy_strided_head(const lm::Tensor& t, const std::byte* src, int64_t rows, std::byte* dst) {
  const auto& s = t.strides();
  const auto size = static_cast<int64_t>(t.element_size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t w = 0; w < t.dim(3); ++w) {
      std::memcpy(dst + (r * t.dim(3) + w) * size, src + (r * s[2] + w * s[3]) * size, t.element_size());
    }
  }
}

}  // namespace

lm::Tensor copy_rows(const lm::Tensor& t, int64_t rows, int64_t capacity) {
  const int64_t cap = capacity > rows ? capacity : rows;
  lm::Tensor out({t.dim(0), t.dim(1), cap, t.dim(3)}, t.dtype());
  if (rows == 0) return out;
  const std::size_t row_bytes = static_cast<std::size_t>(t.dim(3)) * t.element_size();
  for (int64_t b = 0; b < t.dim(0); ++b) {
    for (int64_t h = 0; h < t.dim(1); ++h) {
      const auto& s = t.strides();
      const std::byte* src = t.raw_data() + (b * s[0] + h * s[1]) * static_cast<int64_t>(t.element_size());
      const auto& d = out.strides();
      std::byte* dst = out.raw_data() + (b * d[0] + h * d[1]) * static_cast<int64_t>(out.element_size());
      if (s[2] == t.dim(3) && s[3] == 1) {
        std::memcpy(dst, src, row_bytes * static_cast<std::size_t>(rows));
      } else {
        copy_strided_head(t, src, rows, dst);
      }
    }
  }
  return out;
}

void store_f32(const float* src, std::size_t count, std::byte* dst, lm::DType dtype) {
  // f16/bf16 inline, the same rounding as convert_elements without its per-element dispatch (a
  // cache rewriting its exact window every decode step spent 13% of the step there).
  if (dtype == lm::DType::F16 || dtype == lm::DType::BF16) {
    const bool half = dtype == lm::DType::F16;
    for (std::size_t i = 0; i < count; ++i) {
      const uint16_t h = half ? base::f32_to_f16(src[i]) : base::f32_to_bf16(src[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
    return;
  }
  lm::convert_elements(reinterpret_cast<const std::byte*>(src), lm::DType::F32, dst, dtype, count);
}

void load_f32(const std::byte* src, lm::DType dtype, std::size_t count, float* dst) {
  // f16/bf16 rows are widened by the host's SIMD converters (the scalar element loop cost 15%
  // of a KIVI decode step).
  if (dtype == lm::DType::F16) {
    lm::kernels::simd::f16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, static_cast<int64_t>(count));
  } else if (dtype == lm::DType::BF16) {
    lm::kernels::simd::bf16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, static_cast<int64_t>(count));
  } else {
    lm::convert_elements(src, dtype, reinterpret_cast<std::byte*>(dst), lm::DType::F32, count);
  }
}

void widen_to_f32(const lm::Tensor& t, std::vector<float>& out) {
  out.resize(static_cast<std::size_t>(t.numel()));
  if (t.is_contiguous()) {
    load_f32(t.raw_data(), t.dtype(), out.size(), out.data());
  } else {
    out = t.to_f32();
  }
}

const lm::Tensor& with_contiguous_rows(const lm::Tensor& t, lm::Tensor& copy) {
  if (t.ndim() > 0 && t.strides().back() == 1) return t;
  copy = t.contiguous();
  return copy;
}

int64_t parse_meta_int(const std::string& text, const char* who, const char* what) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw base::FormatError(std::string(who) + ": meta_state " + what + " is not an integer: '" + text + "'");
  }
  return value;
}

void check_row_layout(const lm::Tensor& keys, const lm::Tensor& values, const RowLayout& layout, std::string_view who) {
  if (keys.dim(0) == layout.batch && keys.dim(1) == layout.heads && keys.dim(3) == layout.key_dim &&
      values.dim(3) == layout.value_dim) {
    return;
  }
  throw base::InvalidArgument(
      std::string(who) + ": new keys " + lm::shape_text(keys.shape()) + " / values " + lm::shape_text(values.shape()) +
      " do not match the cache's B=" + std::to_string(layout.batch) + ", H=" + std::to_string(layout.heads) +
      ", D=" + std::to_string(layout.key_dim) + ", Dv=" + std::to_string(layout.value_dim));
}

}  // namespace veloxquant::cache_rows
