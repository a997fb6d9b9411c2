#pragma once
// The step of a vector rounded to 16-bit integers (integer_key_scores.h, codebook_key_scores.h):
// one place, so every caller and its scalar reference round alike.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace veloxquant::attention::kernels {

// step = max_abs / limit and its reciprocal, for a vector whose largest magnitude is max_abs.
// A zero vector has step 0 (every value rounds to 0); a non-finite maximum (a NaN or inf
// element) becomes a NaN step, so scores are NaN as the f32 path's would be, not silently finite.
struct QueryStep {
  float step, inverse;
};
inline QueryStep query_step(float max_abs, int32_t limit) {
  if (!std::isfinite(max_abs)) return {std::numeric_limits<float>::quiet_NaN(), 0.0f};
  if (max_abs == 0.0f) return {0.0f, 0.0f};
  return {max_abs / static_cast<float>(limit), static_cast<float>(limit) / max_abs};
}

// The step of a whole vector x[0..d): its largest magnitude, NaN when any element is not finite
// (a NaN would be lost by the maximum alone).
inline QueryStep vector_step(const float* x, int64_t d, int32_t limit) {
  float max_abs = 0.0f;
  bool finite = true;
  for (int64_t e = 0; e < d; ++e) {
    finite = finite && std::isfinite(x[e]);
    max_abs = std::max(max_abs, std::fabs(x[e]));
  }
  return query_step(finite ? max_abs : std::numeric_limits<float>::quiet_NaN(), limit);
}

}  // namespace veloxquant::attention::kernels
