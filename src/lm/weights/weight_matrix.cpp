#include "lm/weights/weight_matrix.h"

#include <string>

#include "base/error.h"
#include "lm/weights/dequantize.h"

namespace lm {

void WeightMatrix::dequantize_row_to(int64_t r, float* dst) const { dequantize_row(type, row(r), dst, cols); }

WeightMatrix WeightMatrix::view(GgmlType type, int64_t rows, int64_t cols, const void* data,
                                std::shared_ptr<const void> owner, const std::string& name) {
  if (!ggml_type_supported(type)) {
    throw base::Unsupported("tensor '" + name + "' has type " + ggml_type_name(type) +
                            ", which this host does not support (supported: F32, F16, BF16, Q8_0, "
                            "Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS)");
  }
  if (rows <= 0 || cols <= 0) {
    throw base::FormatError("tensor '" + name + "' has an empty shape [" + std::to_string(cols) + ", " +
                            std::to_string(rows) + "]");
  }
  WeightMatrix w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  w.data = static_cast<const std::byte*>(data);
  try {
    w.row_bytes = ggml_row_bytes(type, cols);
  } catch (const base::FormatError& e) {
    throw base::FormatError("tensor '" + name + "': " + e.what());
  }
  w.owner = std::move(owner);
  return w;
}

}  // namespace lm
