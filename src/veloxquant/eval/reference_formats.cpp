#include "veloxquant/eval/reference_formats.h"

namespace veloxquant::eval {

const std::vector<ReferenceFormat>& llama_cpp_kv_formats() {
  // Block of 32 elements: q8_0 = 32 int8 + fp16 scale = 34 bytes = 8.5 bits/element;
  // q4_0 = 16 bytes + scale = 4.5; q4_1 = + fp16 min = 5.0; q5_0 = 20 + 2 = 5.5; q5_1 = 6.0.
  static const std::vector<ReferenceFormat> formats = {
      {"f16", 16.0}, {"q8_0", 8.5}, {"q5_1", 6.0}, {"q5_0", 5.5}, {"q4_1", 5.0}, {"q4_0", 4.5},
  };
  return formats;
}

double reference_bytes_per_token(double bits_per_element, int64_t elements_per_token) {
  return bits_per_element * static_cast<double>(elements_per_token) / 8.0;
}

}  // namespace veloxquant::eval
