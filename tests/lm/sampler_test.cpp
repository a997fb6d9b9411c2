// lm::Sampler: each mask exact on hand-made logits, the documented chain order, the
// repetition-penalty rule, temperature scaling, and seeded reproducibility / frequencies.
#include "lm/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/error.h"

namespace {

using lm::Sampler;
using lm::SamplerOptions;

std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> out;
  out.reserve(probs.size());
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

// Indices whose logit survived (is finite).
std::vector<int> kept(const std::vector<float>& logits) {
  std::vector<int> out;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (std::isfinite(logits[i])) out.push_back(static_cast<int>(i));
  }
  return out;
}

TEST(Sampler, TopKKeepsTheKLargestTiesByLowerIndex) {
  const std::vector<float> base = {1, 3, 2, 3, 0};
  auto l = base;
  lm::apply_top_k(l, 2);
  EXPECT_EQ(kept(l), (std::vector<int>{1, 3}));
  l = base;
  lm::apply_top_k(l, 3);
  EXPECT_EQ(kept(l), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(l[2], 2.0f);  // survivors unchanged
  l = base;
  lm::apply_top_k(l, 0);
  EXPECT_EQ(kept(l).size(), 5u);
  l = {5, 5, 5};
  lm::apply_top_k(l, 1);
  EXPECT_EQ(kept(l), (std::vector<int>{0}));
}

TEST(Sampler, TopKMatchesABruteForceStableRanking) {
  // Logits from a small integer set, so ties straddle the k boundary often.
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<float> logits(static_cast<std::size_t>(n));
    for (float& l : logits) l = static_cast<float>(rng() % 5);
    const int k = static_cast<int>(rng() % (n + 2));
    std::vector<int> order(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    std::vector<int> want;
    for (int i = 0; i < n; ++i) {
      if (k == 0 || i < k) want.push_back(order[i]);
    }
    std::sort(want.begin(), want.end());
    auto got = logits;
    lm::apply_top_k(got, k);
    EXPECT_EQ(kept(got), want) << "trial " << trial << " n " << n << " k " << k;
  }
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  const std::vector<float> base = log_of({0.5, 0.2, 0.2, 0.1});
  const std::vector<std::pair<float, std::vector<int>>> cases = {
      // 0.55: token 1 crosses, and token 2 (the same probability) stays with it.
      {0.45f, {0}},
      {0.55f, {0, 1, 2}},
      {0.71f, {0, 1, 2}},
      {0.95f, {0, 1, 2, 3}},
      {1.0f, {0, 1, 2, 3}}};
  for (const auto& [p, want] : cases) {
    auto l = base;
    lm::apply_top_p(l, p);
    EXPECT_EQ(kept(l), want) << "top_p " << p;
  }
  // Unsorted input: the ranking is by probability, not position.
  std::vector<float> l = log_of({0.1, 0.2, 0.6, 0.1});
  lm::apply_top_p(l, 0.7f);
  EXPECT_EQ(kept(l), (std::vector<int>{1, 2}));
}

TEST(Sampler, MinPKeepsTokensAboveFractionOfTheBest) {
  const std::vector<float> base = log_of({0.5, 0.2, 0.2, 0.1});
  auto l = base;
  lm::apply_min_p(l, 0.3f);  // threshold 0.15
  EXPECT_EQ(kept(l), (std::vector<int>{0, 1, 2}));
  l = base;
  lm::apply_min_p(l, 0.5f);  // threshold 0.25
  EXPECT_EQ(kept(l), (std::vector<int>{0}));
  l = base;
  lm::apply_min_p(l, 0.19f);  // threshold 0.095
  EXPECT_EQ(kept(l), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegativeOncePerToken) {
  std::vector<float> l = {2, -2, 1, 0.5f};
  lm::apply_repetition_penalty(l, std::vector<int32_t>{0, 1, 1, 3}, 2.0f, 64);
  EXPECT_EQ(l, (std::vector<float>{1, -4, 1, 0.25f}));
  // Only the last `context` tokens count.
  l = {2, -2, 1, 0.5f};
  lm::apply_repetition_penalty(l, std::vector<int32_t>{0, 1, 1, 3}, 2.0f, 2);
  EXPECT_EQ(l, (std::vector<float>{2, -4, 1, 0.25f}));
  EXPECT_THROW(lm::apply_repetition_penalty(l, std::vector<int32_t>{9}, 2.0f, 4), base::InvalidArgument);
}

TEST(Sampler, GreedyIsArgmaxAfterPenalty) {
  Sampler greedy(SamplerOptions{});
  EXPECT_EQ(greedy.sample(std::vector<float>{0.1f, 3, 3, -1}, {}), 1);
  SamplerOptions o;
  o.repetition_penalty = 4.0f;
  Sampler penalised(o);
  // 3 / 4 = 0.75 < 1: the repeated favourite loses to token 2.
  EXPECT_EQ(penalised.sample(std::vector<float>{0.1f, 3, 1, -1}, std::vector<int32_t>{1}), 2);
}

TEST(Sampler, DistributionAppliesTheChainThenTemperature) {
  SamplerOptions o;
  o.temperature = 2.0f;
  o.top_k = 2;
  o.top_p = 0.8f;
  Sampler s(o);
  // top_p 0.8 over {0.5, 0.25, 0.2, 0.05}: mass above the third is 0.75 < 0.8, so it stays and
  // the fourth goes; top_k 2 keeps {0, 1}; temperature 2 gives weights sqrt(0.5) : sqrt(0.25).
  const auto d = s.distribution(log_of({0.5, 0.25, 0.2, 0.05}), {});
  const double a = std::sqrt(0.5), b = std::sqrt(0.25);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_NEAR(d[0], a / (a + b), 1e-6);
  EXPECT_NEAR(d[1], b / (a + b), 1e-6);
  EXPECT_EQ(d[2], 0.0);
  EXPECT_EQ(d[3], 0.0);
}

TEST(Sampler, TopPRunsBeforeTopKAsInMlxLm) {
  // {0.4, 0.3, 0.2, 0.1}, top_k 2, top_p 0.5. mlx_lm: top-p on the full distribution keeps
  // {0, 1} (mass above token 1 is 0.4 < 0.5), then top-k keeps both. Top-k first (llama.cpp)
  // would renormalise to {0.57, 0.43} and top-p would keep token 0 alone.
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_k = 2;
  o.top_p = 0.5f;
  const auto d = Sampler(o).distribution(log_of({0.4, 0.3, 0.2, 0.1}), {});
  EXPECT_NEAR(d[0], 0.4 / 0.7, 1e-6);
  EXPECT_NEAR(d[1], 0.3 / 0.7, 1e-6);
  EXPECT_EQ(d[2] + d[3], 0.0);
}

TEST(Sampler, TopPKeepsEveryTokenTiedWithTheCrossingOne) {
  std::vector<float> l = log_of({0.4, 0.2, 0.2, 0.2});
  lm::apply_top_p(l, 0.5f);  // token 1 crosses; tokens 2 and 3 have the same probability
  EXPECT_EQ(kept(l), (std::vector<int>{0, 1, 2, 3}));
  l = log_of({0.4, 0.25, 0.2, 0.15});
  lm::apply_top_p(l, 0.5f);
  EXPECT_EQ(kept(l), (std::vector<int>{0, 1}));
}

TEST(Sampler, SeededDrawsAreReproducibleAndFollowTheDistribution) {
  SamplerOptions o;
  o.temperature = 1.0f;
  o.seed = 1234;
  const auto logits = log_of({0.5, 0.3, 0.2});
  Sampler a(o), b(o);
  o.seed = 1235;
  Sampler c(o);
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(a.sample(logits, {}));
    sb.push_back(b.sample(logits, {}));
    sc.push_back(c.sample(logits, {}));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  // 40000 draws: each frequency within 5 standard deviations (sd <= 0.0025).
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 40000; ++i) ++counts[a.sample(logits, {})];
  EXPECT_NEAR(counts[0] / 40000.0, 0.5, 0.0125);
  EXPECT_NEAR(counts[1] / 40000.0, 0.3, 0.0125);
  EXPECT_NEAR(counts[2] / 40000.0, 0.2, 0.0125);
}

TEST(Sampler, CategoricalUsesTopBitsOfOneOutput) {
  // u = (x >> 11) / 2^53 for the first output of the generator; the pick is the first token
  // whose cumulative probability exceeds u.
  std::mt19937_64 rng(99), copy(99);
  const double u = static_cast<double>(copy() >> 11) / 9007199254740992.0;
  const std::vector<double> probs = {0.25, 0.25, 0.5};
  const int32_t want = u < 0.25 ? 0 : (u < 0.5 ? 1 : 2);
  EXPECT_EQ(lm::sample_categorical(probs, rng), want);
  EXPECT_EQ(rng(), copy());  // exactly one output consumed
}

TEST(Sampler, RejectsBadOptionsNamingTheValue) {
  const auto expect_error = [](SamplerOptions o, const std::string& fragment) {
    try {
      Sampler s(o);
      FAIL() << "accepted " << fragment;
    } catch (const base::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  SamplerOptions o;
  o.temperature = -1;
  expect_error(o, "temperature");
  o = {};
  o.top_k = -3;
  expect_error(o, "-3");
  o = {};
  o.top_p = 0;
  expect_error(o, "top_p");
  o = {};
  o.top_p = 1.5f;
  expect_error(o, "1.5");
  o = {};
  o.min_p = 2;
  expect_error(o, "min_p");
  o = {};
  o.repetition_penalty = 0;
  expect_error(o, "repetition_penalty");
  o = {};
  o.temperature = std::numeric_limits<float>::quiet_NaN();
  expect_error(o, "temperature");
  Sampler s(SamplerOptions{});
  EXPECT_THROW(s.sample(std::vector<float>{}, {}), base::InvalidArgument);
  EXPECT_THROW(s.sample(std::vector<float>{1, std::nanf("")}, {}), base::InvalidArgument);
}

}  // namespace

// mlx_lm's own sampling chain (tools/make_sampler_fixtures.py): repetition penalty, then
// top-p, min-p, top-k and temperature on random logits; lm::Sampler must give the same
// penalised logits and the same distribution (same support, probabilities to 1e-6).
#include <nlohmann/json.hpp>

#include <fstream>

namespace {

TEST(Sampler, MatchesMlxLmChainOnRandomLogits) {
  const std::string path = std::string(VQ_SOURCE_DIR) + "/tests/fixtures/sampler/mlx_lm_sampler.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing fixture " << path;
  const nlohmann::json fixture = nlohmann::json::parse(in);
  ASSERT_GE(fixture["cases"].size(), 30u);
  int index = 0;
  for (const auto& c : fixture["cases"]) {
    SCOPED_TRACE("case " + std::to_string(index++));
    const auto logits = c["logits"].get<std::vector<float>>();
    const auto history = c["history"].get<std::vector<int32_t>>();
    SamplerOptions o;
    o.temperature = c["temperature"];
    o.top_p = c["top_p"];
    o.min_p = c["min_p"];
    o.top_k = c["top_k"];
    o.repetition_penalty = c["repetition_penalty"];
    o.repetition_context = c["repetition_context"];

    auto penalised = logits;
    lm::apply_repetition_penalty(penalised, history, o.repetition_penalty, o.repetition_context);
    const auto want_penalised = c["penalised_logits"].get<std::vector<float>>();
    for (std::size_t i = 0; i < logits.size(); ++i) EXPECT_FLOAT_EQ(penalised[i], want_penalised[i]) << "token " << i;

    const auto got = Sampler(o).distribution(logits, history);
    const auto want = c["probabilities"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i] > 0.0, want[i] > 0.0) << "support differs at token " << i;
      EXPECT_NEAR(got[i], want[i], 1e-6) << "token " << i;
    }
  }
}

}  // namespace
