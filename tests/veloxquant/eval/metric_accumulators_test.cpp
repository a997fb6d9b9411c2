// Accumulators checked on values computed by hand (metric_accumulators.h).
#include "veloxquant/eval/metric_accumulators.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"

namespace veloxquant::eval {
namespace {

TEST(PerplexityAccumulator, GeometricMeanOfInverseProbabilities) {
  // p = 1/2 and 1/8: mean NLL = (ln 2 + 3 ln 2) / 2 = 2 ln 2, perplexity = 4.
  PerplexityAccumulator acc;
  acc.add(std::log(0.5));
  acc.add(std::log(0.125));
  EXPECT_EQ(acc.count(), 2);
  EXPECT_NEAR(acc.mean_nll(), 2.0 * std::log(2.0), 1e-12);
  EXPECT_NEAR(acc.perplexity(), 4.0, 1e-12);
  // llama.cpp's uncertainty: NLLs ln2 and 3ln2 have population variance (ln 2)^2, so
  // sqrt(var / (n - 1)) = ln 2 and the "±" is 4 ln 2.
  EXPECT_NEAR(acc.perplexity_stderr(), 4.0 * std::log(2.0), 1e-12);
}

TEST(PerplexityAccumulator, CertainPredictionsGivePerplexityOne) {
  PerplexityAccumulator acc;
  for (int i = 0; i < 5; ++i) acc.add(0.0);
  EXPECT_DOUBLE_EQ(acc.perplexity(), 1.0);
  EXPECT_DOUBLE_EQ(acc.perplexity_stderr(), 0.0);
}

TEST(PerplexityAccumulator, EmptyIsAnError) {
  PerplexityAccumulator acc;
  EXPECT_THROW(acc.perplexity(), base::InvalidArgument);
}

TEST(AgreementAccumulator, MeanMaxAndPercent) {
  AgreementAccumulator acc;
  acc.add(0.1, true);
  acc.add(0.3, false);
  acc.add(0.2, true);
  EXPECT_NEAR(acc.mean_kl(), 0.2, 1e-15);
  EXPECT_DOUBLE_EQ(acc.max_kl(), 0.3);
  EXPECT_NEAR(acc.top1_percent(), 200.0 / 3.0, 1e-12);
}

TEST(AgreementAccumulator, EmptyIsAnError) {
  AgreementAccumulator acc;
  EXPECT_THROW(acc.mean_kl(), base::InvalidArgument);
  EXPECT_THROW(acc.top1_percent(), base::InvalidArgument);
}

}  // namespace
}  // namespace veloxquant::eval
