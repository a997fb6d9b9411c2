#include "veloxquant/quant/log8_scale.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "base/half.h"

namespace veloxquant::quant {
namespace {

struct Log8Table {
  std::array<uint16_t, 256> f16{};
  std::array<float, 256> f32{};
  Log8Table() {
    for (int n = 1; n < 256; ++n) {
      f16[static_cast<std::size_t>(n)] = base::f32_to_f16(std::exp2(static_cast<float>(n - kLog8Bias) / 16.0f));
      f32[static_cast<std::size_t>(n)] = base::f16_to_f32(f16[static_cast<std::size_t>(n)]);
    }
  }
};

const Log8Table& table() {
  static const Log8Table t;
  return t;
}

}  // namespace

uint16_t log8_scale_f16(uint8_t n) { return table().f16[n]; }
float log8_scale(uint8_t n) { return table().f32[n]; }
const float* log8_scale_table() { return table().f32.data(); }
const uint16_t* log8_scale_f16_table() { return table().f16.data(); }

uint8_t nearest_log8(float s) {
  if (!(s > 0.0f) || !std::isfinite(s)) return 0;
  const double n = std::nearbyint(16.0 * std::log2(static_cast<double>(s))) + kLog8Bias;
  return static_cast<uint8_t>(std::clamp(n, 1.0, 255.0));
}

}  // namespace veloxquant::quant
