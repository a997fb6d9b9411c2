#pragma once
// KIVI's group code written from the spec (§11.9), for the KIVI-family cache tests to hold the
// caches to: levels 2^b - 1, min and scale rounded to f16 as stored, round half to even.
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/half.h"

namespace test_support {

inline float f16_round(float x) { return base::f16_to_f32(base::f32_to_f16(x)); }

// Quantize-dequantize of one group at b bits.
inline std::vector<float> reference_group(const std::vector<float>& x, int bits) {
  const float lo = *std::min_element(x.begin(), x.end());
  const float hi = *std::max_element(x.begin(), x.end());
  const float levels = static_cast<float>((1 << bits) - 1);
  const float mn = f16_round(lo);
  const float scale = f16_round(std::max((hi - mn) / levels, 1e-8f));
  std::vector<float> out;
  for (float v : x) out.push_back(std::clamp(std::nearbyint((v - mn) / scale), 0.0f, levels) * scale + mn);
  return out;
}

}  // namespace test_support
