#pragma once
// IEEE half (f16) and bfloat16 conversions, bit-exact and portable. The scalar versions here
// are the reference that SIMD conversions are tested against.
#include <cstdint>
#include <cstring>

namespace base {

inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// f16 -> f32, exact for every input including subnormals, inf and NaN.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return bits_to_float(sign);
    // Subnormal: normalise the mantissa.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    return bits_to_float(sign | static_cast<uint32_t>(127 - 15 - shift + 1) << 23 | mantissa << 13);
  }
  if (exponent == 0x1f) return bits_to_float(sign | 0x7f800000u | mantissa << 13);
  return bits_to_float(sign | (exponent + 127 - 15) << 23 | mantissa << 13);
}

// f32 -> f16 with round-to-nearest-even; overflow goes to inf, NaN stays NaN.
inline uint16_t f32_to_f16(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: add the magic number that aligns the mantissa so the FPU
    // does the round-to-nearest-even for us.
    const float magic = bits_to_float(0x3f000000u);  // 0.5: 2^-1 aligns 2^-24 units
    const float v = bits_to_float(abs) + magic;
    return static_cast<uint16_t>(sign | (float_to_bits(v) - float_to_bits(magic)));
  }
  const uint32_t mant_odd = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xc8000fffu + mant_odd;  // rebias exponent (-112<<23) + RNE
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

inline float bf16_to_f32(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

// f32 -> bf16 with round-to-nearest-even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

}  // namespace base
