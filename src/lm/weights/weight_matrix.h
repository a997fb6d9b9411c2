#pragma once
// lm::WeightMatrix — a non-owning view of a 2-D weight in its on-disk format (usually a
// pointer into the memory-mapped GGUF or llama2.c file). Weights are never copied or
// dequantized whole: kernels read rows block by block.
//
// Layout follows GGUF: ne[0] = cols is the contiguous (input) dimension, ne[1] = rows the
// output dimension, so y = W x reads row r (cols elements, row_bytes bytes) for output r.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lm/weights/ggml_type.h"

namespace lm {

struct WeightMatrix {
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const std::byte* data = nullptr;
  std::size_t row_bytes = 0;
  // Keeps the mapping (or buffer) the pointer lives in alive.
  std::shared_ptr<const void> owner;

  const std::byte* row(int64_t r) const { return data + static_cast<std::size_t>(r) * row_bytes; }
  // Dequantizes row r into `dst` (cols floats).
  void dequantize_row_to(int64_t r, float* dst) const;
  std::size_t nbytes() const { return static_cast<std::size_t>(rows) * row_bytes; }

  // Builds a view, validating that cols is a whole number of blocks and the type supported
  // (base::Unsupported / base::FormatError naming `name`).
  static WeightMatrix view(GgmlType type, int64_t rows, int64_t cols, const void* data,
                           std::shared_ptr<const void> owner, const std::string& name);
};

}  // namespace lm
