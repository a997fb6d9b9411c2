// The runner's bookkeeping on a tiny hand-made model whose logits are a known function of
// what its cache returns: which tokens are fed in which batches, which targets are scored,
// that identical caches give KL = 0 exactly and a distorting cache does not, and that
// bytes/token come from nbytes(). (Real-model checks live in eval_stories_test.cpp.)
#include "veloxquant/eval/eval_runner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <memory>
#include <vector>

#include "base/error.h"
#include "lm/model.h"
#include "lm/tensor.h"

namespace veloxquant::eval {
namespace {

constexpr int kVocab = 8;
constexpr int32_t kBos = 1;

// Remembers the token ids it was fed (as one-element keys); a lossy variant stores id + 1.
class TokenHistoryCache : public lm::KVCache {
 public:
  TokenHistoryCache(bool lossy, std::size_t bytes_per_token) : lossy_(lossy), bytes_per_token_(bytes_per_token) {}
  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor&) override {
    for (float v : keys.to_f32()) stored_.push_back(lossy_ ? v + 1.0f : v);
    const auto t = static_cast<int64_t>(stored_.size());
    lm::Tensor all = lm::Tensor::from_f32(stored_, {1, 1, t, 1}, lm::DType::F32);
    return {all, all};
  }
  int64_t offset() const override { return static_cast<int64_t>(stored_.size()); }
  bool empty() const override { return stored_.empty(); }
  std::size_t nbytes() const override { return stored_.size() * bytes_per_token_; }
  std::vector<lm::Tensor> state() const override { return {}; }
  std::vector<std::string> meta_state() const override { return {}; }
  void from_state(const std::vector<lm::Tensor>&, const std::vector<std::string>&) override {}
  std::string type_name() const override { return "TokenHistoryCache"; }
  std::shared_ptr<lm::KVCache> clone() const override { return std::make_shared<TokenHistoryCache>(*this); }

 private:
  bool lossy_;
  std::size_t bytes_per_token_;
  std::vector<float> stored_;
};

// Logits of a token: 2.0 at index (sum of everything the cache returned) mod 8, else 0.
class SumModel : public lm::Model {
 public:
  SumModel() {
    config_.vocab_size = kVocab;
    config_.n_layers = 1;
    config_.context_length = 64;
    layers_.resize(1);
  }
  const lm::ModelConfig& config() const override { return config_; }
  const std::vector<lm::LayerInfo>& layers() const override { return layers_; }
  lm::CacheList native_make_cache() const override { return {std::make_shared<TokenHistoryCache>(false, 4)}; }
  void forward(const std::vector<int32_t>& tokens, lm::CacheList& caches, std::vector<float>& last,
               std::vector<float>* all) const override {
    calls.push_back(tokens);
    if (all) all->assign(tokens.size() * kVocab, 0.0f);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const float id = static_cast<float>(tokens[i]);
      lm::Tensor k = lm::Tensor::from_f32(std::vector<float>{id}, {1, 1, 1, 1}, lm::DType::F32);
      const auto kv = caches[0]->update_and_fetch(k, k);
      double sum = 0.0;
      for (float v : kv.keys.to_f32()) sum += v;
      const int hot = static_cast<int>(std::lround(sum)) % kVocab;
      if (all) (*all)[i * kVocab + hot] = 2.0f;
      last.assign(kVocab, 0.0f);
      last[hot] = 2.0f;
    }
  }
  mutable std::vector<std::vector<int32_t>> calls;

 private:
  lm::ModelConfig config_;
  std::vector<lm::LayerInfo> layers_;
};

std::vector<int32_t> test_tokens(int n) {
  std::vector<int32_t> t;
  t.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 5 + 3) % kVocab));
  return t;
}

// log p(target) under SumModel when the window's fed prefix (after BOS replacement) is `fed`.
double expected_log_prob(const std::vector<int32_t>& fed, int32_t target) {
  long sum = 0;
  for (int32_t t : fed) sum += t;
  const double log_z = std::log(std::exp(2.0) + (kVocab - 1));
  return (target == static_cast<int32_t>(sum % kVocab) ? 2.0 : 0.0) - log_z;
}

MethodUnderTest exact_method(const SumModel& model) {
  return {"exact", [&model] { return model.native_make_cache(); }};
}
MethodUnderTest lossy_method() {
  return {"lossy", [] { return lm::CacheList{std::make_shared<TokenHistoryCache>(true, 1)}; }};
}

TEST(EvalRunner, IdenticalCachesGiveZeroKlAndFullAgreement) {
  SumModel model;
  const auto tokens = test_tokens(40);
  EvalOptions options;
  options.ctx = 16;
  options.batch = 5;
  const EvalRun run = run_evaluation(model, tokens, std::nullopt, {exact_method(model)}, options);
  ASSERT_EQ(run.methods.size(), 1u);
  EXPECT_EQ(run.methods[0].kld, 0.0);
  EXPECT_EQ(run.methods[0].top1_agreement, 100.0);
  EXPECT_EQ(run.methods[0].ppl, run.baseline.ppl);
  EXPECT_EQ(run.n_windows, 2);
  EXPECT_EQ(run.n_fed, 32);
  EXPECT_EQ(run.n_scored, 30);    // 15 targets per 16-token window
  EXPECT_EQ(run.n_compared, 30);  // tail 1 compares every scored target
  EXPECT_DOUBLE_EQ(run.baseline.kv_bytes_per_token, 4.0);
}

TEST(EvalRunner, PerplexityMatchesIndependentSumOfLogProbs) {
  SumModel model;
  const auto tokens = test_tokens(40);
  EvalOptions options;
  options.ctx = 16;
  options.stride = 8;  // windows at 0, 8, 16, 24; targets 1..39 each once
  options.batch = 3;
  const EvalRun run = run_evaluation(model, tokens, std::nullopt, {}, options);
  double nll = 0.0;
  int n = 0;
  for (int t = 1; t < 40; ++t) {
    // Target t is scored in the window that first reaches it: begin = max(0, 8*ceil((t-15)/8)).
    int begin = 0;
    while (begin + 16 <= 40 && !(t < begin + 16 && (begin == 0 || t >= begin + 8))) begin += 8;
    const std::vector<int32_t> fed(tokens.begin() + begin, tokens.begin() + t);
    nll -= expected_log_prob(fed, tokens[t]);
    ++n;
  }
  EXPECT_EQ(run.n_scored, n);
  EXPECT_NEAR(run.baseline.ppl, std::exp(nll / n), 1e-12);
}

TEST(EvalRunner, LlamaChunkingFeedsBosFirstAndScoresTheSecondHalf) {
  SumModel model;
  const auto tokens = test_tokens(50);
  EvalOptions options;
  options.chunking = Chunking::kLlama;
  options.ctx = 16;
  options.max_chunks = 2;
  options.batch = 16;
  const EvalRun run = run_evaluation(model, tokens, kBos, {}, options);
  // Baseline only: one forward call per chunk, BOS written over the chunk's first token.
  ASSERT_EQ(model.calls.size(), 2u);
  for (int c = 0; c < 2; ++c) {
    std::vector<int32_t> expected(tokens.begin() + 16 * std::ptrdiff_t{c}, tokens.begin() + 16 * std::ptrdiff_t{c + 1});
    expected[0] = kBos;
    EXPECT_EQ(model.calls[static_cast<std::size_t>(c)], expected);
  }
  EXPECT_EQ(run.n_scored, 2 * 7);  // targets 9..15 of each chunk
  double nll = 0.0;
  for (int c = 0; c < 2; ++c) {
    std::vector<int32_t> fed(tokens.begin() + 16 * std::ptrdiff_t{c}, tokens.begin() + 16 * std::ptrdiff_t{c + 1});
    fed[0] = kBos;
    for (int r = 8; r <= 14; ++r) {
      nll -= expected_log_prob(std::vector<int32_t>(fed.begin(), fed.begin() + r + 1), tokens[16 * c + r + 1]);
    }
  }
  EXPECT_NEAR(run.baseline.ppl, std::exp(nll / 14.0), 1e-12);
}

TEST(EvalRunner, BatchesSplitEachWindow) {
  SumModel model;
  EvalOptions options;
  options.ctx = 10;
  options.batch = 4;
  run_evaluation(model, test_tokens(10), std::nullopt, {}, options);
  ASSERT_EQ(model.calls.size(), 3u);
  EXPECT_EQ(model.calls[0].size(), 4u);
  EXPECT_EQ(model.calls[1].size(), 4u);
  EXPECT_EQ(model.calls[2].size(), 2u);
}

TEST(EvalRunner, DistortingCacheGivesPositiveKlAndItsOwnBytes) {
  SumModel model;
  EvalOptions options;
  options.ctx = 16;
  options.batch = 16;
  options.tail = 0.25;
  const EvalRun run = run_evaluation(model, test_tokens(32), std::nullopt, {lossy_method()}, options);
  EXPECT_GT(run.methods[0].kld, 0.0);
  EXPECT_LT(run.methods[0].top1_agreement, 100.0);
  EXPECT_EQ(run.n_compared, 2 * 4);  // last quarter of each 16-token window
  EXPECT_DOUBLE_EQ(run.methods[0].kv_bytes_per_token, 1.0);
  EXPECT_DOUBLE_EQ(run.baseline.kv_bytes_per_token, 4.0);
  EXPECT_GT(run.peak_rss_bytes, 0);
}

TEST(EvalRunner, RejectsBadInput) {
  SumModel model;
  EvalOptions options;
  options.ctx = 65;  // model context is 64
  EXPECT_THROW(run_evaluation(model, test_tokens(100), std::nullopt, {}, options), base::InvalidArgument);
  options.ctx = 16;
  EXPECT_THROW(run_evaluation(model, test_tokens(10), std::nullopt, {}, options), base::InvalidArgument);
  options.batch = 0;
  EXPECT_THROW(run_evaluation(model, test_tokens(40), std::nullopt, {}, options), base::InvalidArgument);
  options.batch = 4;
  EXPECT_THROW(run_evaluation(model, test_tokens(40), std::nullopt, {{"no-factory", nullptr}}, options),
               base::InvalidArgument);
}

}  // namespace
}  // namespace veloxquant::eval
