// Several caches in one bench run, on the toy model of tests/support/fake_model.h: runs
// alternate (round r: each planned row for cache A, B, C in turn), every run gets fresh caches
// from its own factory, the rows come one per cache per row with that cache's bytes, the ratios
// are taken against the "none" row of the same run, and the traffic arithmetic is exact on
// hand-made rows. No timing is asserted, only relations between the reported numbers.
#include "veloxquant/eval/host_bench_methods.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "lm/cache/full_kv_cache.h"
#include "support/fake_model.h"

namespace veloxquant::eval {
namespace {

using test_support::FakeModel;

// Two layers' full caches of the given dtype; each call is logged under the cache's label.
BenchCache logged_cache(const std::string& label, lm::DType dtype, std::vector<std::string>& log) {
  return {label, [label, dtype, &log] {
            log.push_back(label);
            return lm::CacheList{std::make_shared<lm::FullKVCache>(dtype), std::make_shared<lm::FullKVCache>(dtype)};
          }};
}

std::vector<int32_t> prompt(int n) {
  std::vector<int32_t> p;
  p.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) p.push_back(3 + i % 11);
  return p;
}

TEST(HostBenchMethods, AlternatesCachesRowByRowWithFreshCaches) {
  FakeModel model;
  std::vector<std::string> log;
  const std::vector<BenchCache> caches = {logged_cache("none", lm::DType::F32, log),
                                          logged_cache("half", lm::DType::F16, log)};
  HostBenchOptions options;
  options.contexts = {20, 40};
  options.decode_tokens = 4;
  options.prefill_tokens = 0;
  options.batch = 16;
  options.repeat = 2;
  std::vector<std::string> progress;
  options.on_run = [&](const std::string& label, int round) {
    progress.push_back(std::to_string(round) + " " + label);
  };
  const auto rows = run_host_bench_methods(model, prompt(64), options, caches);

  // Round by round, row by row, cache by cache; one fresh list per run.
  const std::vector<std::string> expected_log = {"none", "half", "none", "half", "none", "half", "none", "half"};
  EXPECT_EQ(log, expected_log);
  const std::vector<std::string> expected_progress = {"0 none: decode 20", "0 half: decode 20", "0 none: decode 40",
                                                      "0 half: decode 40", "1 none: decode 20", "1 half: decode 20",
                                                      "1 none: decode 40", "1 half: decode 40"};
  EXPECT_EQ(progress, expected_progress);
  // Each run: the prompt in calls of 16, then 4 single tokens. ctx 20: 16 prompt tokens in one
  // call; ctx 40: 36 in calls of 16, 16, 4.
  ASSERT_EQ(model.forward_chunks.size(), 2u * (2 * (1 + 4) + 2 * (3 + 4)));
  EXPECT_EQ(model.forward_chunks[0].size(), 16u);
  EXPECT_EQ(model.forward_chunks[1].size(), 1u);

  // One row per cache per context, in planned order, each with its own cache's bytes.
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].label, "none");
  EXPECT_EQ(rows[1].label, "half");
  EXPECT_EQ(rows[2].label, "none");
  EXPECT_EQ(rows[3].label, "half");
  EXPECT_EQ(rows[0].row.ctx, 20);
  EXPECT_EQ(rows[3].row.ctx, 40);
  EXPECT_EQ(rows[3].row.prefill_tokens, 36);
  // Full caches grow in 256-row steps: 2 layers x (K + V) x 4 dims x 256 rows x 4 or 2 bytes.
  EXPECT_EQ(rows[0].row.kv_bytes, 2u * 2 * 4 * 256 * 4);
  EXPECT_EQ(rows[1].row.kv_bytes, 2u * 2 * 4 * 256 * 2);
  for (const auto& r : rows) {
    ASSERT_EQ(r.rounds.size(), 2u);
    EXPECT_GE(r.spread, 1.0);
    ASSERT_GT(r.row.decode_tokens_per_s, 0.0);
    // Best of the rounds, per phase.
    EXPECT_EQ(r.row.decode_seconds, std::min(r.rounds[0].second, r.rounds[1].second));
    EXPECT_EQ(r.row.prefill_seconds, std::min(r.rounds[0].first, r.rounds[1].first));
    // Against the "none" row of the same ctx in this very run.
    const auto& none = rows[r.row.ctx == 20 ? 0 : 2];
    ASSERT_TRUE(r.decode_ratio.has_value());
    ASSERT_TRUE(r.prefill_ratio.has_value());
    EXPECT_DOUBLE_EQ(*r.decode_ratio, r.row.decode_tokens_per_s / none.row.decode_tokens_per_s);
    EXPECT_DOUBLE_EQ(*r.prefill_ratio, r.row.prefill_tokens_per_s / none.row.prefill_tokens_per_s);
    EXPECT_FALSE(r.traffic.has_value());  // until fill_traffic
  }
  EXPECT_DOUBLE_EQ(*rows[0].decode_ratio, 1.0);
}

MethodBenchRow hand_row(const std::string& label, const std::string& kind, int64_t ctx, double prefill_tps,
                        double decode_tps) {
  MethodBenchRow r;
  r.label = label;
  r.row.kind = kind;
  r.row.ctx = ctx;
  r.row.prefill_tokens_per_s = prefill_tps;
  r.row.decode_tokens = kind == "decode" ? 4 : 0;
  r.row.decode_tokens_per_s = decode_tps;
  return r;
}

TEST(HostBenchMethods, RatiosAgainstTheSameContextsNativeRow) {
  std::vector<MethodBenchRow> rows = {
      hand_row("none", "prefill", 512, 400, 0),  hand_row("kivi", "prefill", 512, 100, 0),
      hand_row("none", "decode", 1024, 200, 50), hand_row("kivi", "decode", 1024, 100, 75),
      hand_row("none", "decode", 4096, 100, 20), hand_row("kivi", "decode", 4096, 50, 30),
      hand_row("kivi", "decode", 8192, 25, 10),  // no native row at 8192
  };
  fill_ratios(rows);
  EXPECT_DOUBLE_EQ(*rows[1].prefill_ratio, 0.25);
  EXPECT_FALSE(rows[1].decode_ratio.has_value());  // the prefill row decodes nothing
  EXPECT_DOUBLE_EQ(*rows[2].decode_ratio, 1.0);
  EXPECT_DOUBLE_EQ(*rows[3].decode_ratio, 1.5);
  EXPECT_DOUBLE_EQ(*rows[3].prefill_ratio, 0.5);
  EXPECT_DOUBLE_EQ(*rows[5].decode_ratio, 1.5);
  EXPECT_DOUBLE_EQ(*rows[5].prefill_ratio, 0.5);
  EXPECT_FALSE(rows[6].decode_ratio.has_value());
  EXPECT_FALSE(rows[6].prefill_ratio.has_value());
  // Another baseline name works the same way.
  fill_ratios(rows, "kivi");
  EXPECT_DOUBLE_EQ(*rows[2].decode_ratio, 50.0 / 75.0);
}

TEST(HostBenchMethods, TrafficIsWeightsPlusTheRowsKvOverTimePerToken) {
  std::vector<MethodBenchRow> rows = {hand_row("none", "prefill", 512, 400, 0), hand_row("none", "decode", 1024, 1, 1)};
  rows[1].row.decode_tokens = 4;
  rows[1].row.decode_seconds = 0.008;  // 2 ms per token
  rows[1].row.kv_bytes = 1'000'000;
  fill_traffic(rows, 3'000'000, 4e9);
  EXPECT_FALSE(rows[0].traffic.has_value());
  ASSERT_TRUE(rows[1].traffic.has_value());
  // (3 MB + 1 MB) / 2 ms = 2 GB/s, half of a 4 GB/s probe.
  EXPECT_EQ(rows[1].traffic->weight_bytes, 3'000'000u);
  EXPECT_EQ(rows[1].traffic->kv_bytes, 1'000'000u);
  EXPECT_DOUBLE_EQ(rows[1].traffic->bytes_per_s, 2e9);
  EXPECT_DOUBLE_EQ(rows[1].traffic->probe_share, 0.5);
}

TEST(HostBenchMethods, RefusesBadCacheLists) {
  FakeModel model;
  HostBenchOptions options;
  options.contexts = {20};
  options.decode_tokens = 4;
  options.prefill_tokens = 0;
  std::vector<std::string> log;
  EXPECT_THROW(run_host_bench_methods(model, prompt(64), options, {}), base::InvalidArgument);
  try {
    run_host_bench_methods(model, prompt(64), options,
                           {logged_cache("kivi", lm::DType::F16, log), logged_cache("kivi", lm::DType::F32, log)});
    ADD_FAILURE() << "accepted two caches with one label";
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'kivi'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_host_bench_methods(model, prompt(64), options, {BenchCache{"none", nullptr}}),
               base::InvalidArgument);
  EXPECT_THROW(run_host_bench_methods(model, prompt(10), options, {logged_cache("none", lm::DType::F32, log)}),
               base::InvalidArgument);  // prompt shorter than the context
  EXPECT_TRUE(log.empty());
  EXPECT_TRUE(model.forward_chunks.empty());
}

}  // namespace
}  // namespace veloxquant::eval
