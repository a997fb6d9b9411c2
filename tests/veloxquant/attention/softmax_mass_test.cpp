// a2ats's retrieval softmax (attention/softmax_mass.h) against a double-precision std::exp
// reference: every row's exp and mass within the rounding of its float argument (x - top), for
// lengths that leave partial vectors, a mass that accumulates over calls, and an infinite top
// taking the plain loop.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "veloxquant/attention/softmax_mass.h"

namespace veloxquant::attention::kernels {
namespace {

TEST(SoftmaxMass, MatchesTheDoubleReference) {
  std::mt19937 rng(9);
  std::normal_distribution<float> x(0.0f, 4.0f);
  for (int64_t n : {1, 3, 8, 17, 64, 1000}) {
    std::vector<double> mass(static_cast<std::size_t>(n), 0.25), want = mass;
    for (int call = 0; call < 3; ++call) {
      std::vector<float> logits(static_cast<std::size_t>(n));
      float top = -INFINITY;
      for (float& l : logits) top = std::max(top, l = x(rng));
      if (call == 2 && n > 1) {  // one row far below the others: its exp underflows to 0
        logits[0] = top - 200.0f;
        top = -INFINITY;
        for (float l : logits) top = std::max(top, l);
      }
      std::vector<double> e(logits.size());
      double sum = 0.0;
      for (std::size_t j = 0; j < logits.size(); ++j) sum += (e[j] = std::exp(static_cast<double>(logits[j]) - top));
      for (std::size_t j = 0; j < logits.size(); ++j) want[j] += e[j] / sum;
      add_softmax_mass(logits.data(), n, top, mass.data());
      for (std::size_t j = 0; j < logits.size(); ++j) {
        ASSERT_NEAR(logits[j], e[j], 5e-6 * e[j] + 1e-30) << "n " << n << " row " << j;
      }
    }
    for (std::size_t j = 0; j < mass.size(); ++j) ASSERT_NEAR(mass[j], want[j], 1e-5 * want[j]) << "n " << n;
  }
}

TEST(SoftmaxMass, AnInfiniteTopGivesNaNMassesAsThePlainLoop) {
  std::vector<float> logits = {1.0f, std::numeric_limits<float>::infinity(), 2.0f};
  std::vector<double> mass(3, 0.0);
  add_softmax_mass(logits.data(), 3, std::numeric_limits<float>::infinity(), mass.data());
  for (double m : mass) EXPECT_TRUE(std::isnan(m));
}

}  // namespace
}  // namespace veloxquant::attention::kernels
