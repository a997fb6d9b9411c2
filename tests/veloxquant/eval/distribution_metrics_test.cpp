// Hand-computed values for the per-position metrics (distribution_metrics.h).
#include "veloxquant/eval/distribution_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "base/error.h"

namespace veloxquant::eval {
namespace {

TEST(LogSoftmax, MatchesClosedFormForTwoLogits) {
  // softmax([0, ln 3]) = [1/4, 3/4].
  const std::vector<float> logits{0.0f, static_cast<float>(std::log(3.0))};
  std::vector<double> out;
  log_softmax(logits, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NEAR(out[0], std::log(0.25), 1e-7);
  EXPECT_NEAR(out[1], std::log(0.75), 1e-7);
}

TEST(LogSoftmax, HugeLogitsDoNotOverflow) {
  const std::vector<float> logits{1e30f, 1e30f};
  std::vector<double> out;
  log_softmax(logits, out);
  EXPECT_NEAR(out[0], -std::log(2.0), 1e-12);
  EXPECT_NEAR(out[1], -std::log(2.0), 1e-12);
}

TEST(TokenLogProb, UniformRowGivesMinusLogVocab) {
  const std::vector<float> logits(4, 7.5f);
  EXPECT_NEAR(token_log_prob(logits, 2), -std::log(4.0), 1e-12);
}

TEST(TokenLogProb, RejectsOutOfRangeToken) {
  const std::vector<float> logits(4, 0.0f);
  EXPECT_THROW(token_log_prob(logits, 4), base::InvalidArgument);
  EXPECT_THROW(token_log_prob(logits, -1), base::InvalidArgument);
  EXPECT_THROW(token_log_prob(std::vector<float>{}, 0), base::InvalidArgument);
}

TEST(KlDivergence, HandComputedTwoPointDistributions) {
  // P = [1/4, 3/4], Q = [1/2, 1/2]: KL = 1/4 ln(1/2) + 3/4 ln(3/2) = 0.1308120...
  const std::vector<float> p{0.0f, static_cast<float>(std::log(3.0))};
  const std::vector<float> q{0.0f, 0.0f};
  EXPECT_NEAR(kl_divergence(p, q), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);
  EXPECT_NEAR(kl_divergence(p, q), 0.1308120, 1e-6);
  // KL is not symmetric: KL(Q||P) = 1/2 ln 2 + 1/2 ln(2/3) = 0.1438410...
  EXPECT_NEAR(kl_divergence(q, p), 0.1438410, 1e-6);
}

TEST(KlDivergence, IdenticalRowsGiveExactlyZero) {
  const std::vector<float> row{0.3f, -1.2f, 4.0f, 2.5f, -0.7f};
  EXPECT_EQ(kl_divergence(row, row), 0.0);
}

TEST(KlDivergence, InvariantToAConstantShiftOfLogits) {
  const std::vector<float> a{1.0f, 2.0f, 3.0f};
  const std::vector<float> b{11.0f, 12.0f, 13.0f};
  EXPECT_NEAR(kl_divergence(a, b), 0.0, 1e-12);
}

TEST(KlDivergence, NonFiniteMethodLogitsAreInfinitelyFar) {
  const std::vector<float> a{1.0f, 2.0f, 3.0f};
  const std::vector<float> b{1.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f};
  EXPECT_TRUE(std::isinf(kl_divergence(a, b)));
}

TEST(KlDivergence, RejectsMismatchedRows) {
  EXPECT_THROW(kl_divergence(std::vector<float>{1.0f, 2.0f}, std::vector<float>{1.0f}), base::InvalidArgument);
  EXPECT_THROW(kl_divergence(std::vector<float>{}, std::vector<float>{}), base::InvalidArgument);
}

TEST(Argmax, LowestIndexWinsTies) {
  EXPECT_EQ(argmax(std::vector<float>{1.0f, 3.0f, 3.0f, -2.0f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{-5.0f}), 0);
  EXPECT_EQ(argmax(std::vector<float>{-5.0f, -4.0f}), 1);
}

}  // namespace
}  // namespace veloxquant::eval
