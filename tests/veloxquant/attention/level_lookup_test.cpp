// The SIMD level lookup against the plain loop, for every code width (in-register tables up to
// the vector's lanes, gathers above) and lengths that leave a scalar tail.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/attention/level_lookup.h"

namespace veloxquant::attention::kernels {
namespace {

TEST(LevelLookup, EqualsTheScalarLoopForEveryWidth) {
  std::mt19937 rng(3);
  for (int bits = 1; bits <= 8; ++bits) {
    const int n_levels = 1 << bits;
    std::vector<float> levels(static_cast<std::size_t>(n_levels));
    std::uniform_real_distribution<float> level(-3.0f, 3.0f);
    for (float& l : levels) l = level(rng);
    for (int64_t n : {1, 7, 8, 17, 64 * 64 + 3}) {
      std::vector<float> codes(static_cast<std::size_t>(n));
      std::uniform_int_distribution<int> code(0, n_levels - 1);
      for (float& c : codes) c = static_cast<float>(code(rng));
      std::vector<float> simd = codes, plain = codes;
      lookup_levels(simd.data(), n, levels.data(), n_levels);
      scalar::lookup_levels(plain.data(), n, levels.data(), n_levels);
      ASSERT_EQ(simd, plain) << "bits " << bits << " n " << n;
      // And the reference is the table itself.
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(plain[static_cast<std::size_t>(i)],
                  levels[static_cast<std::size_t>(codes[static_cast<std::size_t>(i)])]);
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
