// The scale search's code loop: the SIMD count of boundaries below x * inv against its scalar
// reference and against BlockLloydQuantizer::nearest (the bucket search it replaced), for every
// width, values on the boundaries themselves, non-finite values and ragged lengths.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "support/random_values.h"

#include "veloxquant/quant/block_lloyd_quant.h"
#include "veloxquant/quant/boundary_counts.h"

namespace veloxquant::quant {
namespace {

TEST(BoundaryCounts, EqualTheNearestLevelForEveryWidth) {
  for (int bits = 1; bits <= 8; ++bits) {
    for (const auto levels : {BlockLloydQuantizer::Levels::kLloyd, BlockLloydQuantizer::Levels::kUniform}) {
      const BlockLloydQuantizer q(bits, 32, levels);
      const std::vector<float>& b = q.boundaries();
      std::vector<float> x = test_support::normal_values(200, 40 + static_cast<uint32_t>(bits));
      for (float& v : x) v *= 0.6f;
      // Values exactly on boundaries (ties go down), beyond the ends, and not finite.
      for (std::size_t k = 0; k < b.size(); k += 3) x.push_back(b[k]);
      x.push_back(5.0f);
      x.push_back(-5.0f);
      x.push_back(std::numeric_limits<float>::quiet_NaN());
      x.push_back(std::numeric_limits<float>::infinity());
      x.push_back(-std::numeric_limits<float>::infinity());
      for (const float inv : {1.0f, 1.7f}) {
        for (const int n : {1, 7, 8, 9, 31, static_cast<int>(x.size())}) {
          std::vector<uint8_t> got(static_cast<std::size_t>(n)), ref(got);
          count_boundaries_below(x.data(), n, inv, b.data(), bits, got.data());
          scalar::count_boundaries_below(x.data(), n, inv, b.data(), bits, ref.data());
          ASSERT_EQ(got, ref) << bits << " bits, n " << n;
          for (int i = 0; i < n; ++i) ASSERT_EQ(ref[i], q.nearest(x[i] * inv)) << bits << " bits, value " << x[i];
        }
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::quant
