// The host bench's bookkeeping on a hand-made model that records every forward call: which
// tokens go in which calls (prefill chunks of `batch`, then one greedy token at a time, the
// argmax fed back), that every run gets fresh caches from make_prompt_cache (so a patched
// model times its own cache), the bytes the caches hold at the end, the prompt builders' exact
// ids, and the front-door errors. No timing is asserted.
#include "veloxquant/eval/host_bench.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "lm/model.h"
#include "lm/tensor.h"

namespace veloxquant::eval {
namespace {

constexpr int kVocab = 8;
constexpr std::size_t kBytesPerToken = 6;

// Counts the tokens it was fed; nbytes() = tokens * kBytesPerToken.
class CountingCache : public lm::KVCache {
 public:
  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override {
    tokens_ += keys.dim(2);
    return {keys, values};
  }
  int64_t offset() const override { return tokens_; }
  bool empty() const override { return tokens_ == 0; }
  std::size_t nbytes() const override { return static_cast<std::size_t>(tokens_) * kBytesPerToken; }
  std::vector<lm::Tensor> state() const override { return {}; }
  std::vector<std::string> meta_state() const override { return {}; }
  void from_state(const std::vector<lm::Tensor>&, const std::vector<std::string>&) override {}
  std::string type_name() const override { return "CountingCache"; }
  std::shared_ptr<lm::KVCache> clone() const override { return std::make_shared<CountingCache>(*this); }

 private:
  int64_t tokens_ = 0;
};

// The logits of a call peak at (last token fed + 3) mod 8, so greedy decoding from token t
// feeds t + 3, t + 6, ... (mod 8).
class RecordingModel : public lm::Model {
 public:
  RecordingModel() {
    config_.vocab_size = kVocab;
    config_.n_layers = 1;
    config_.context_length = 64;
    layers_.resize(1);
  }
  const lm::ModelConfig& config() const override { return config_; }
  const std::vector<lm::LayerInfo>& layers() const override { return layers_; }
  lm::CacheList native_make_cache() const override { return {std::make_shared<CountingCache>()}; }
  void forward(const std::vector<int32_t>& tokens, lm::CacheList& caches, std::vector<float>& last,
               std::vector<float>*) const override {
    calls.push_back(tokens);
    const auto n = static_cast<int64_t>(tokens.size());
    lm::Tensor k =
        lm::Tensor::from_f32(std::vector<float>(static_cast<std::size_t>(n), 0.0f), {1, 1, n, 1}, lm::DType::F32);
    caches[0]->update_and_fetch(k, k);
    last.assign(kVocab, 0.0f);
    last[static_cast<std::size_t>((tokens.back() + 3) % kVocab)] = 1.0f;
  }
  mutable std::vector<std::vector<int32_t>> calls;

 private:
  lm::ModelConfig config_;
  std::vector<lm::LayerInfo> layers_;
};

std::vector<int32_t> iota_prompt(int n) {
  std::vector<int32_t> p;
  p.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) p.push_back(i % kVocab);
  return p;
}

TEST(HostBench, FeedsPrefillChunksThenGreedyTokensOnFreshCaches) {
  RecordingModel model;
  int caches_made = 0;
  model.make_cache = [&] {
    ++caches_made;
    return model.native_make_cache();
  };
  HostBenchOptions options;
  options.contexts = {20};
  options.decode_tokens = 4;
  options.prefill_tokens = 10;
  options.batch = 8;
  options.repeat = 2;
  const std::vector<int32_t> prompt = iota_prompt(32);
  const auto rows = run_host_bench(model, prompt, options);

  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(caches_made, 4);  // 2 rows x 2 repeats, each on a fresh list
  // Prefill row, twice: 10 tokens in calls of 8 and 2.
  // Decode row at ctx 20, twice: 16 prompt tokens in calls of 8 and 8, then the prompt's last
  // token (15 % 8 = 7) leads greedy decoding to 7+3=2, 5, 0, 3.
  const std::vector<std::vector<int32_t>> prefill_run = {{0, 1, 2, 3, 4, 5, 6, 7}, {0, 1}};
  const std::vector<std::vector<int32_t>> decode_run = {
      {0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7}, {2}, {5}, {0}, {3}};
  std::vector<std::vector<int32_t>> expected;
  for (int r = 0; r < 2; ++r) expected.insert(expected.end(), prefill_run.begin(), prefill_run.end());
  for (int r = 0; r < 2; ++r) expected.insert(expected.end(), decode_run.begin(), decode_run.end());
  EXPECT_EQ(model.calls, expected);

  EXPECT_EQ(rows[0].kind, "prefill");
  EXPECT_EQ(rows[0].ctx, 10);
  EXPECT_EQ(rows[0].prefill_tokens, 10);
  EXPECT_EQ(rows[0].decode_tokens, 0);
  EXPECT_EQ(rows[0].decode_tokens_per_s, 0.0);
  EXPECT_EQ(rows[0].kv_bytes, 10 * kBytesPerToken);
  EXPECT_EQ(rows[1].kind, "decode");
  EXPECT_EQ(rows[1].ctx, 20);
  EXPECT_EQ(rows[1].prefill_tokens, 16);
  EXPECT_EQ(rows[1].decode_tokens, 4);
  EXPECT_EQ(rows[1].kv_bytes, 20 * kBytesPerToken);  // the row ends with exactly ctx tokens cached
  EXPECT_NEAR(rows[1].decode_tokens_per_s * rows[1].decode_ms_per_token, 1000.0, 1e-6);
}

TEST(HostBench, EveryDecodeStepHasItsOwnClockInsideTheTotal) {
  RecordingModel model;
  const std::vector<int32_t> prompt = iota_prompt(8);
  const HostBenchRun run = time_host_run(
      model, [&model] { return model.native_make_cache(); }, prompt, /*decode_tokens=*/5, /*batch=*/4);
  ASSERT_EQ(run.decode_step_seconds.size(), 5u);
  double sum = 0.0;
  for (const double s : run.decode_step_seconds) {
    EXPECT_GE(s, 0.0);
    sum += s;
  }
  EXPECT_LE(sum, run.decode_seconds);  // the steps' clocks sit inside the total's
  const HostBenchRun prefill_only = time_host_run(
      model, [&model] { return model.native_make_cache(); }, prompt, /*decode_tokens=*/0, /*batch=*/4);
  EXPECT_TRUE(prefill_only.decode_step_seconds.empty());
  EXPECT_EQ(decode_seconds_by(prefill_only, DecodeStatistic::kMedianStep), 0.0);
}

TEST(HostBench, MedianStatisticIgnoresAStalledStep) {
  HostBenchRun run;
  run.decode_seconds = 0.5;
  run.decode_step_seconds = {0.002, 0.003, 0.400, 0.001};  // one step stalled by other work
  EXPECT_EQ(decode_seconds_by(run, DecodeStatistic::kTotal), 0.5);
  // Even count: the mean of the middle two (0.002, 0.003), times 4 steps.
  EXPECT_DOUBLE_EQ(decode_seconds_by(run, DecodeStatistic::kMedianStep), 0.0025 * 4);
  run.decode_step_seconds = {0.005, 0.001, 0.009};
  EXPECT_DOUBLE_EQ(decode_seconds_by(run, DecodeStatistic::kMedianStep), 0.005 * 3);
  EXPECT_EQ(run.decode_step_seconds, (std::vector<double>{0.005, 0.001, 0.009}));  // the run is left as it was
}

TEST(HostBench, DecodeStatisticNamesRoundTripAndOthersAreRefused) {
  EXPECT_EQ(parse_decode_statistic("total"), DecodeStatistic::kTotal);
  EXPECT_EQ(parse_decode_statistic("median"), DecodeStatistic::kMedianStep);
  EXPECT_EQ(decode_statistic_name(DecodeStatistic::kMedianStep), "median");
  EXPECT_EQ(decode_statistic_name(DecodeStatistic::kTotal), "total");
  try {
    parse_decode_statistic("");
    ADD_FAILURE() << "an empty statistic was accepted";
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("got ''"), std::string::npos) << e.what();
  }
}

TEST(HostBench, CycleTokensRepeatsTheBodyNotTheBos) {
  const std::vector<int32_t> source = {1, 5, 6, 7};
  EXPECT_EQ(cycle_tokens(source, 8, 1), (std::vector<int32_t>{1, 5, 6, 7, 5, 6, 7, 5}));
  EXPECT_EQ(cycle_tokens(source, 6, std::nullopt), (std::vector<int32_t>{1, 5, 6, 7, 1, 5}));
  EXPECT_EQ(cycle_tokens(source, 2, 1), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(cycle_tokens(std::vector<int32_t>{1}, 3, 1), (std::vector<int32_t>{1, 1, 1}));
  EXPECT_THROW(cycle_tokens(std::vector<int32_t>{}, 3, 1), base::InvalidArgument);
}

TEST(HostBench, PatternTokensAreTheDocumentedIds) {
  // (7919 i + 11) mod 100 for i = 1..4: 7930, 15849, 23768, 31687.
  EXPECT_EQ(pattern_tokens(5, 100, 1), (std::vector<int32_t>{1, 30, 49, 68, 87}));
  EXPECT_EQ(pattern_tokens(3, 100, std::nullopt), (std::vector<int32_t>{11, 30, 49}));
  EXPECT_THROW(pattern_tokens(3, 0, std::nullopt), base::InvalidArgument);
}

TEST(HostBench, RefusesWhatCannotBeMeasured) {
  const auto refuses = [](const HostBenchOptions& o, int64_t context_length, const std::string& needle) {
    try {
      validate_host_bench(o, context_length);
    } catch (const base::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted, expected an error naming '" << needle << "'";
  };
  HostBenchOptions ok;
  ok.contexts = {64};
  ok.prefill_tokens = 16;
  EXPECT_NO_THROW(validate_host_bench(ok, 64));
  EXPECT_NO_THROW(validate_host_bench(ok, 0));  // 0 = unlimited
  HostBenchOptions o = ok;
  o.contexts = {0};
  refuses(o, 64, "got 0");
  o.contexts = {65};
  refuses(o, 64, "--ctx 65 is beyond the model's context length 64");
  o.contexts = {32};
  o.decode_tokens = 32;
  refuses(o, 64, "--ctx 32 leaves no prompt token");
  o = ok;
  o.prefill_tokens = 65;
  refuses(o, 64, "--prefill 65");
  o = ok;
  o.decode_tokens = 0;
  refuses(o, 64, "--decode-tokens must be >= 1, got 0");
  o = ok;
  o.repeat = 0;
  refuses(o, 64, "--repeat must be >= 1, got 0");
  o = ok;
  o.batch = -1;
  refuses(o, 64, "--batch must be >= 1, got -1");
  o.batch = 512;
  o.contexts = {};
  o.prefill_tokens = 0;
  refuses(o, 64, "nothing to measure");

  RecordingModel model;
  HostBenchOptions short_prompt = ok;
  EXPECT_THROW(run_host_bench(model, iota_prompt(63), short_prompt), base::InvalidArgument);
  EXPECT_TRUE(model.calls.empty());  // refused before any forward
}

}  // namespace
}  // namespace veloxquant::eval
