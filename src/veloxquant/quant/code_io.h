#pragma once
// Little helpers shared by the quantizers: fixed little-endian scalars inside a code (so a
// code's bytes mean the same on every host) and the per-byte lookup tables used to score
// packed indices against a prepared query.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace veloxquant::quant::detail {

inline uint16_t read_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline void write_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline float read_f32(const uint8_t* p) {
  const uint32_t bits = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                        static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline void write_f32(uint8_t* p, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(bits >> (8 * i));
}

// True when b-bit indices never straddle a byte (b in {1, 2, 4, 8}).
inline bool byte_aligned_bits(int bits) { return bits == 1 || bits == 2 || bits == 4 || bits == 8; }

// lut[p * 256 + byte] = sum over the 8/b indices packed in byte p of q[j] * values[index]
// (index j = p * 8/b + t); positions past `dim` (padding) contribute 0. One table read then
// replaces 8/b multiply-adds when scoring.
void build_byte_lut(const float* q, std::size_t dim, int bits, const float* values, std::size_t stream_bytes,
                    float* lut);

}  // namespace veloxquant::quant::detail
