// The harness on a real trained model (stories260K, ../shared/models): native cache against
// itself is exact, perplexity equals an independent sum of log-probabilities from the host's
// logits, a lossy registry method has KL > 0, llama.cpp chunking reproduces llama-perplexity's
// published figure, and bad input is refused with clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "lm/load.h"
#include "veloxquant/builder/kv_cache_builder.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/errors.h"
#include "veloxquant/eval/eval_runner.h"
#include "veloxquant/eval/text_source.h"

namespace veloxquant::eval {
namespace {

const std::string kModel = std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
const std::string kTinyStories = std::string(VQ_SHARED_DIR) + "/data/tinystories_valid_head794k.txt";

const char* kPassage =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball in the grass. She ran to get it and kicked it very high. "
    "The ball went up into the sky and came down near a small dog. The dog wagged its tail and "
    "barked. Lily laughed and said, \"Do you want to play with me?\" The dog ran after the ball "
    "and brought it back to her. They played together all day until the sun went down.";

class StoriesEval : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { loaded_ = new lm::LoadedModel(lm::load(kModel)); }
  static void TearDownTestSuite() {
    delete loaded_;
    loaded_ = nullptr;
  }
  static const lm::Model& model() { return *loaded_->model; }
  static const lm::Tokenizer& tokenizer() { return *loaded_->tokenizer; }
  static lm::LoadedModel* loaded_;
};
lm::LoadedModel* StoriesEval::loaded_ = nullptr;

MethodUnderTest native_method(const lm::Model& model) {
  return {"native", [&model] { return model.native_make_cache(); }};
}

TEST_F(StoriesEval, NativeCacheAgainstItselfIsExact) {
  const TokenizedText text = tokenize_text(tokenizer(), kPassage);
  EvalOptions options;
  options.ctx = 32;
  options.batch = 8;
  const EvalRun run = run_evaluation(model(), text.tokens, text.bos, {native_method(model())}, options);
  ASSERT_GE(run.n_windows, 2);
  EXPECT_EQ(run.methods[0].kld, 0.0);
  EXPECT_EQ(run.methods[0].kld_max, 0.0);
  EXPECT_EQ(run.methods[0].top1_agreement, 100.0);
  EXPECT_EQ(run.methods[0].ppl, run.baseline.ppl);
  EXPECT_EQ(run.methods[0].kv_bytes_per_token, run.baseline.kv_bytes_per_token);
}

TEST_F(StoriesEval, PerplexityEqualsIndependentSumOfLogProbs) {
  const TokenizedText text = tokenize_text(tokenizer(), kPassage);
  const auto n = static_cast<int64_t>(text.tokens.size());
  ASSERT_GT(n, 64);
  EvalOptions options;
  options.ctx = n;  // one window over the whole passage, one forward call
  options.batch = n;
  const EvalRun run = run_evaluation(model(), text.tokens, text.bos, {}, options);

  // Independent computation: the host's logits for the whole passage, log-probabilities of
  // each next token summed in double with a log-sum-exp written here.
  lm::CacheList caches = model().native_make_cache();
  std::vector<float> last, all;
  model().forward(text.tokens, caches, last, &all);
  const auto vocab = static_cast<std::size_t>(model().config().vocab_size);
  ASSERT_EQ(all.size(), text.tokens.size() * vocab);
  double nll = 0.0;
  for (int64_t p = 0; p + 1 < n; ++p) {
    const float* row = all.data() + static_cast<std::size_t>(p) * vocab;
    double max_logit = row[0];
    for (std::size_t i = 1; i < vocab; ++i) max_logit = std::max(max_logit, static_cast<double>(row[i]));
    double z = 0.0;
    for (std::size_t i = 0; i < vocab; ++i) z += std::exp(static_cast<double>(row[i]) - max_logit);
    nll -= static_cast<double>(row[text.tokens[static_cast<std::size_t>(p + 1)]]) - max_logit - std::log(z);
  }
  const double expected = std::exp(nll / static_cast<double>(n - 1));
  EXPECT_EQ(run.n_scored, n - 1);
  EXPECT_NEAR(run.baseline.ppl, expected, 1e-9 * expected);
  // A trained story model on an in-distribution story: far better than uniform over 512.
  EXPECT_LT(run.baseline.ppl, 20.0);
}

TEST_F(StoriesEval, LossyMethodHasPositiveKl) {
  const TokenizedText text = tokenize_text(tokenizer(), kPassage);
  KVCacheConfig config;
  config.method = "kivi";
  config.bit_width_inlier = 2;
  config.kivi.residual_length = 0;  // quantize everything: no full-precision window
  config.kivi.kivi_group_size = 8;
  const lm::Model& m = model();
  EvalOptions options;
  options.ctx = 64;
  options.batch = 16;
  const EvalRun run = run_evaluation(
      m, text.tokens, text.bos, {{"kivi", [&m, config] { return KVCacheBuilder::for_model(m, config); }}}, options);
  EXPECT_GT(run.methods[0].kld, 0.0);
  EXPECT_TRUE(std::isfinite(run.methods[0].kld));
  EXPECT_LT(run.methods[0].kv_bytes_per_token, run.baseline.kv_bytes_per_token);
}

TEST_F(StoriesEval, LlamaChunkingReproducesLlamaPerplexityFirst20Chunks) {
  // ../shared/data/README.md: llama-perplexity -c 256 --chunks 20 gives PPL 3.6251.
  const TokenizedText text = tokenize_text(tokenizer(), read_text_file(kTinyStories));
  EXPECT_EQ(text.tokens.size(), 393019u);  // README: 393,019 tokens with BOS
  ASSERT_TRUE(text.bos.has_value());
  EvalOptions options;
  options.chunking = Chunking::kLlama;
  options.ctx = 256;
  options.max_chunks = 20;
  options.batch = 256;
  const EvalRun run = run_evaluation(model(), text.tokens, text.bos, {}, options);
  EXPECT_EQ(run.n_windows, 20);
  EXPECT_EQ(run.n_scored, 20 * 127);
  EXPECT_NEAR(run.baseline.ppl, 3.6251, 3.6251 * 1e-3);
}

TEST_F(StoriesEval, BadInputIsRefusedClearly) {
  EXPECT_THROW(tokenize_text(tokenizer(), ""), base::InvalidArgument);
  EXPECT_THROW(read_text_file(std::string(VQ_SHARED_DIR) + "/data/no_such_file.txt"), base::FormatError);
  const TokenizedText text = tokenize_text(tokenizer(), kPassage);
  EvalOptions options;
  options.ctx = model().config().context_length + 1;
  try {
    run_evaluation(model(), text.tokens, text.bos, {}, options);
    FAIL() << "ctx beyond the model's context was accepted";
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(options.ctx)), std::string::npos) << e.what();
  }
  options.ctx = static_cast<int64_t>(text.tokens.size()) + 1;  // within the model, beyond the text
  ASSERT_LE(options.ctx, model().config().context_length);
  EXPECT_THROW(run_evaluation(model(), text.tokens, text.bos, {}, options), base::InvalidArgument);
  KVCacheConfig config;
  config.method = "no_such_method";
  try {
    KVCacheBuilder::for_model(model(), config);
    FAIL() << "unknown method accepted";
  } catch (const QuantizerConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_method"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace veloxquant::eval
