// Attention weights of the eviction scorers against hand-computed values, and the GQA grouping
// of observed queries (query head h belongs to kv head h / (H_q / H_kv)).
#include <gtest/gtest.h>

#include <cmath>

#include "veloxquant/eviction/attention_scores.h"

namespace veloxquant::eviction {
namespace {

TEST(AttentionScores, SoftmaxOfScaledDotsByHand) {
  const float keys[] = {1, 0, 0, 1};  // two rows of d = 2
  const float q[] = {2, 0};
  float w[2];
  mean_softmax_weights(keys, nullptr, 2, 2, q, 1, 0.5f, w);  // logits 1, 0
  const double e = std::exp(1.0);
  EXPECT_FLOAT_EQ(w[0], static_cast<float>(e / (e + 1)));  // 0.7310586
  EXPECT_FLOAT_EQ(w[1], static_cast<float>(1 / (e + 1)));
  const int32_t reversed[] = {1, 0};
  mean_softmax_weights(keys, reversed, 2, 2, q, 1, 0.5f, w);
  EXPECT_FLOAT_EQ(w[0], static_cast<float>(1 / (e + 1)));
  // Two queries pulling opposite ways average to one half each.
  const float two[] = {2, 0, 0, 2};
  mean_softmax_weights(keys, nullptr, 2, 2, two, 2, 0.5f, w);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
}

TEST(AttentionScores, ObservedQueriesGroupByKvHead) {
  // [B=1, H_q=4, N=2, D=2]: element = 100 * head + 10 * token + coordinate.
  lm::Tensor q({1, 4, 2, 2}, lm::DType::F32);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t c = 0; c < 2; ++c) q.set({0, h, t, c}, float(100 * h + 10 * t + c));
  ObservedQueries observed;
  EXPECT_FALSE(observed.matches(1, 2, 2, 2));
  observed.observe(q);
  EXPECT_TRUE(observed.matches(1, 2, 2, 2));
  EXPECT_FALSE(observed.matches(1, 2, 3, 2));  // another call's token count
  EXPECT_FALSE(observed.matches(1, 3, 2, 2));  // 4 query heads do not split over 3 kv heads
  std::vector<float> out;
  EXPECT_EQ(observed.group_queries(0, 1, 2, 1, out), 2);  // kv head 1 <- query heads 2, 3
  EXPECT_EQ(out, (std::vector<float>{210, 211, 310, 311}));
  observed.clear();
  EXPECT_FALSE(observed.matches(1, 2, 2, 2));
}

}  // namespace
}  // namespace veloxquant::eviction
