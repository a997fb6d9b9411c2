#include "veloxquant/quant/code_io.h"

namespace veloxquant::quant::detail {

void build_byte_lut(const float* q, std::size_t dim, int bits, const float* values, std::size_t stream_bytes,
                    float* lut) {
  const std::size_t per = 8 / static_cast<std::size_t>(bits);
  const unsigned mask = (1u << bits) - 1u;
  for (std::size_t p = 0; p < stream_bytes; ++p) {
    float* table = lut + p * 256;
    const std::size_t j0 = p * per;
    if (bits == 8) {
      const float qj = j0 < dim ? q[j0] : 0.0f;
      for (unsigned v = 0; v < 256; ++v) table[v] = qj * values[v];
      continue;
    }
    // A byte is two nibbles, each holding per/2 indices: tabulate the 16 sums of each nibble,
    // then every byte's entry is one addition (256 adds per table instead of 256 * per
    // multiply-adds; this runs once per query per head, so it sits on the decode path).
    const std::size_t half = per / 2;
    float nibble[2][16];
    for (int side = 0; side < 2; ++side)
      for (unsigned v = 0; v < 16; ++v) {
        float sum = 0.0f;
        for (std::size_t t = 0; t < half; ++t) {
          const std::size_t j = j0 + static_cast<std::size_t>(side) * half + t;
          if (j < dim) sum += q[j] * values[(v >> (t * static_cast<unsigned>(bits))) & mask];
        }
        nibble[side][v] = sum;
      }
    for (unsigned byte = 0; byte < 256; ++byte) table[byte] = nibble[0][byte & 15u] + nibble[1][byte >> 4];
  }
}

}  // namespace veloxquant::quant::detail
