#pragma once
// amc's tier rules (caches/amc_cache.h): how many tokens of a block go to each tier and what rank
// each tier keeps at a given head_dim.
//
// The original names the tiers for head_dim 128: High rank 128 at 16 bits, Mid rank 43 at 8 bits,
// Low rank 8 at 4 bits. Read as fractions of the head dimension d — all of it, a third (43 =
// ceil(128 / 3)) and a sixteenth — they give d, ceil(d / 3) and max(1, d / 16): 64, 22 and 4 at
// head_dim 64 (SmolLM2), 128, 43 and 8 at 128 as the original.
#include <cstdint>

namespace veloxquant {

enum class AmcTier { kHigh = 0, kMid = 1, kLow = 2 };

struct AmcTierShape {
  int64_t rank = 0;  // latent directions kept (High: all of them, stored as plain rows)
  int bits = 0;      // 16 (High: f16 rows) or the code width of the latent coordinates
};
AmcTierShape amc_tier_shape(AmcTier tier, int64_t head_dim);

// Tokens per block of `group` in each tier: High round(k_high * group), Mid round(k_mid * group)
// (Python's round, half to even), clamped so that High + Mid <= group; Low the rest.
struct AmcTierCounts {
  int64_t high = 0, mid = 0, low = 0;
};
AmcTierCounts amc_tier_counts(int64_t group, double k_high, double k_mid);

}  // namespace veloxquant
