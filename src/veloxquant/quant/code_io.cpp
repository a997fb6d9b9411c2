#include "veloxquant/quant/code_io.h"

namespace veloxquant::quant::detail {

void build_byte_lut(const float* q, std::size_t dim, int bits, const float* values,
                    std::size_t stream_bytes, float* lut) {
  const std::size_t per = 8 / static_cast<std::size_t>(bits);
  const unsigned mask = (1u << bits) - 1u;
  for (std::size_t p = 0; p < stream_bytes; ++p) {
    float* table = lut + p * 256;
    for (unsigned byte = 0; byte < 256; ++byte) {
      float sum = 0.0f;
      for (std::size_t t = 0; t < per; ++t) {
        const std::size_t j = p * per + t;
        if (j >= dim) break;
        sum += q[j] * values[(byte >> (t * static_cast<unsigned>(bits))) & mask];
      }
      table[byte] = sum;
    }
  }
}

}  // namespace veloxquant::quant::detail
