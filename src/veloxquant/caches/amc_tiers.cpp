#include "veloxquant/caches/amc_tiers.h"

#include <algorithm>
#include <cmath>

namespace veloxquant {

AmcTierShape amc_tier_shape(AmcTier tier, int64_t head_dim) {
  switch (tier) {
    case AmcTier::kHigh:
      return {head_dim, 16};
    case AmcTier::kMid:
      return {(head_dim + 2) / 3, 8};
    case AmcTier::kLow:
      break;
  }
  return {std::max<int64_t>(1, head_dim / 16), 4};
}

AmcTierCounts amc_tier_counts(int64_t group, double k_high, double k_mid) {
  const auto python_round = [](double x) {
    return static_cast<int64_t>(std::nearbyint(x));
  };  // FE_TONEAREST: half to even
  AmcTierCounts c;
  c.high = std::clamp<int64_t>(python_round(k_high * static_cast<double>(group)), 0, group);
  c.mid = std::clamp<int64_t>(python_round(k_mid * static_cast<double>(group)), 0, group - c.high);
  c.low = group - c.high - c.mid;
  return c;
}

}  // namespace veloxquant
