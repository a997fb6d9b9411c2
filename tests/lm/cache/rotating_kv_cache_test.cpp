// lm::RotatingKVCache against a brute-force reference of mlx_lm's RotatingKVCache semantics.
// Every fed token carries its absolute position in key[..., 0], so the test can read back
// which tokens the cache retained and check the mask query by query:
//   * after an update of S tokens with n tokens fed in total, the cache holds all n tokens
//     when n <= L, else the first `keep` and the last L - keep, where L = max_size for S = 1
//     and L = max_size - 1 + S for S > 1 (so every new query sees >= max_size - 1 earlier);
//   * a query at position p may see a key at position q iff q <= p and p - q < window, where
//     a layer without a window of its own gets the ring's: window = max_size.
#include "lm/cache/rotating_kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "base/error.h"
#include "support/allocation_counter.h"
#include "support/kv_test_data.h"

namespace {

using lm::DType;
using lm::RotatingKVCache;
using lm::Tensor;

constexpr int64_t kH = 2, kD = 3;

// Tokens [first, first + count): key = (position, head, 0.5), value = (-position, head, 1).
std::pair<Tensor, Tensor> positions(int64_t first, int64_t count, DType dtype = DType::F32) {
  Tensor k({1, kH, count, kD}, dtype), v({1, kH, count, kD}, dtype);
  for (int64_t h = 0; h < kH; ++h) {
    for (int64_t t = 0; t < count; ++t) {
      k.set({0, h, t, 0}, static_cast<float>(first + t));
      k.set({0, h, t, 1}, static_cast<float>(h));
      k.set({0, h, t, 2}, 0.5f);
      v.set({0, h, t, 0}, -static_cast<float>(first + t));
      v.set({0, h, t, 1}, static_cast<float>(h));
      v.set({0, h, t, 2}, 1.0f);
    }
  }
  return {k, v};
}

// Positions of the returned rows (head 0), after checking every head and the values agree.
std::vector<int64_t> returned_positions(const lm::KeysValues& kv) {
  std::vector<int64_t> out;
  const int64_t rows = kv.keys.dim(2);
  for (int64_t r = 0; r < rows; ++r) {
    const float p = kv.keys.get({0, 0, r, 0});
    for (int64_t h = 0; h < kH; ++h) {
      EXPECT_EQ(kv.keys.get({0, h, r, 0}), p);
      EXPECT_EQ(kv.keys.get({0, h, r, 1}), static_cast<float>(h));
      EXPECT_EQ(kv.values.get({0, h, r, 0}), -p);
    }
    out.push_back(static_cast<int64_t>(p));
  }
  return out;
}

std::vector<int64_t> expected_retained(int64_t fed, int64_t chunk, int64_t max_size, int64_t keep) {
  const int64_t limit = chunk == 1 ? max_size : max_size - 1 + chunk;
  std::vector<int64_t> out;
  if (fed <= limit) {
    out.resize(fed);
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  for (int64_t p = 0; p < keep; ++p) out.push_back(p);
  for (int64_t p = fed - (limit - keep); p < fed; ++p) out.push_back(p);
  return out;
}

// Checks the mask the cache announced before the update against the brute-force visibility
// rule, over the rows it then returned (in whatever order they are stored).
void check_mask(const lm::AttentionMask& mask, int64_t first_query, int64_t n_queries, const std::vector<int64_t>& rows,
                int64_t window, const std::string& where) {
  const auto visible = [&](int64_t p, int64_t q) { return q <= p && p - q < window; };
  const int64_t t = static_cast<int64_t>(rows.size());
  if (mask.kind == lm::AttentionMask::Kind::kExplicit) {
    ASSERT_EQ(mask.explicit_mask.shape(), (lm::Shape{1, 1, n_queries, t})) << where;
  }
  for (int64_t i = 0; i < n_queries; ++i) {
    for (int64_t r = 0; r < t; ++r) {
      bool allowed = true;
      switch (mask.kind) {
        case lm::AttentionMask::Kind::kNone:
          allowed = true;
          break;
        case lm::AttentionMask::Kind::kCausal:
          allowed = r <= t - n_queries + i;
          break;
        case lm::AttentionMask::Kind::kExplicit:
          allowed = mask.explicit_mask.get({0, 0, i, r}) != 0;
          break;
      }
      EXPECT_EQ(allowed, visible(first_query + i, rows[r]))
          << where << " query " << first_query + i << " key position " << rows[r];
    }
  }
}

struct Scenario {
  int64_t max_size, keep;
  std::optional<int64_t> window;
  std::vector<int64_t> chunks;
};

void run_scenario(const Scenario& s) {
  RotatingKVCache cache(s.max_size, s.keep, DType::F32);
  int64_t fed = 0;
  for (std::size_t step = 0; step < s.chunks.size(); ++step) {
    const int64_t n = s.chunks[step];
    const std::string where = "max_size " + std::to_string(s.max_size) + " keep " + std::to_string(s.keep) + " step " +
                              std::to_string(step) + " (S=" + std::to_string(n) + ")";
    const lm::AttentionMask mask = cache.make_mask(n, s.window);
    const auto [k, v] = positions(fed, n);
    const auto kv = cache.update_and_fetch(k, v);
    fed += n;
    EXPECT_EQ(cache.offset(), fed) << where;
    std::vector<int64_t> rows = returned_positions(kv);
    // Mask semantics are mlx_lm's for sliding windows without sinks (keep = 0).
    if (s.keep == 0) check_mask(mask, fed - n, n, rows, s.window.value_or(s.max_size), where);
    if (n > 1) {
      // Multi-token updates return rows in temporal order.
      EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end())) << where;
    }
    std::sort(rows.begin(), rows.end());
    EXPECT_EQ(rows, expected_retained(fed, n, s.max_size, s.keep)) << where;
    EXPECT_EQ(cache.is_trimmable(), fed < s.max_size) << where;
  }
}

TEST(RotatingKVCache, RetentionAndMasksMatchBruteForceReference) {
  const std::vector<int64_t> ones(20, 1);
  std::vector<Scenario> scenarios = {
      {8, 0, std::nullopt, ones},
      {8, 0, std::nullopt, {5, 1, 1, 1, 1, 1, 4, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
      {8, 2, std::nullopt, {3, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1}},
      {5, 1, std::nullopt, {12, 1, 1, 1, 1, 1, 1, 2, 2, 1, 1, 1}},
      {8, 0, 8, {2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
      // A window shorter than the ring: explicit masks for single queries once offset >= window.
      {8, 0, 4, {2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
      {6, 0, 3, {7, 1, 1, 1, 1, 1, 1, 1, 1, 5, 1, 1, 1, 1, 1, 1, 1}},
  };
  for (const auto& s : scenarios) run_scenario(s);
}

TEST(RotatingKVCache, GrowsInStepsUpToMaxSizeAndNbytesIsAllocated) {
  const auto [k, v] = positions(0, 1, DType::F32);
  const auto [k8, v8] = positions(0, 8, DType::F32);
  const std::size_t row_bytes = 2 * kH * kD * 2;  // keys + values, f16
  const auto before = test_support::allocation_snapshot();
  {
    RotatingKVCache cache(300, 0, DType::F16);
    cache.update_and_fetch(k, v);
    EXPECT_EQ(cache.nbytes(), 256 * row_bytes);
    for (int i = 1; i < 256; ++i) cache.update_and_fetch(k, v);
    EXPECT_EQ(cache.nbytes(), 256 * row_bytes);
    cache.update_and_fetch(k, v);  // 257th token: grows by min(256, 300 - 256) = 44
    EXPECT_EQ(cache.nbytes(), 300 * row_bytes);
    for (int i = 0; i < 100; ++i) cache.update_and_fetch(k, v);  // wrapped: no more growth
    EXPECT_EQ(cache.nbytes(), 300 * row_bytes);
    const auto during = test_support::allocation_snapshot();
    EXPECT_EQ(during.aligned_live_bytes - before.aligned_live_bytes, static_cast<int64_t>(cache.nbytes()));
    // A prefill chunk leaves max_size - 1 + S rows, really allocated.
    cache.update_and_fetch(k8, v8);
    EXPECT_EQ(cache.nbytes(), (299 + 8) * row_bytes);
    EXPECT_EQ(test_support::allocation_snapshot().aligned_live_bytes - before.aligned_live_bytes,
              static_cast<int64_t>(cache.nbytes()));
  }
  EXPECT_EQ(test_support::allocation_snapshot().aligned_live_bytes, before.aligned_live_bytes);
}

TEST(RotatingKVCache, TrimBeforeWrapActsAsIfFedOnlyKeptTokens) {
  RotatingKVCache trimmed(16, 2, DType::F32), reference(16, 2, DType::F32);
  const auto [k, v] = positions(0, 9);
  trimmed.update_and_fetch(k, v);
  const auto [k1, v1] = positions(9, 1);
  trimmed.update_and_fetch(k1, v1);
  EXPECT_EQ(trimmed.trim(4), 4);
  EXPECT_EQ(trimmed.offset(), 6);
  reference.update_and_fetch(test_support::token_rows(k, 0, 6), test_support::token_rows(v, 0, 6));
  for (int64_t p = 6; p < 30; ++p) {
    const auto [kp, vp] = positions(p, 1);
    const auto a = trimmed.update_and_fetch(kp, vp);
    const auto b = reference.update_and_fetch(kp, vp);
    ASSERT_EQ(a.keys.to_f32(), b.keys.to_f32()) << "position " << p;
    ASSERT_EQ(a.values.to_f32(), b.values.to_f32()) << "position " << p;
  }
  // Wrapped now: overwritten tokens cannot come back.
  EXPECT_FALSE(trimmed.is_trimmable());
  EXPECT_EQ(trimmed.trim(3), 0);
  EXPECT_EQ(trimmed.offset(), 30);
}

TEST(RotatingKVCache, StateRoundTripMidRingThenFurtherUpdates) {
  RotatingKVCache source(8, 1, DType::F16);
  int64_t fed = 0;
  for (int64_t n : {3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}) {
    const auto [k, v] = positions(fed, n);
    source.update_and_fetch(k, v);
    fed += n;
  }
  RotatingKVCache restored(2, 0, DType::F32);  // meta_state overrides size, keep, dtype
  restored.from_state(source.state(), source.meta_state());
  EXPECT_EQ(restored.max_size(), 8);
  EXPECT_EQ(restored.keep(), 1);
  EXPECT_EQ(restored.offset(), fed);
  const auto copy = source.clone();
  const int64_t fed_at_clone = fed;
  for (int64_t n : {1, 1, 4, 1, 1, 1}) {
    const auto [k, v] = positions(fed, n);
    const auto a = source.update_and_fetch(k, v);
    const auto b = restored.update_and_fetch(k, v);
    EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
    EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
    fed += n;
  }
  EXPECT_EQ(copy->offset(), fed_at_clone);  // the clone did not move with the source
  EXPECT_EQ(source.offset(), fed_at_clone + 9);
}

TEST(RotatingKVCache, RejectsBadConfigurationAndCorruptState) {
  EXPECT_THROW(RotatingKVCache(0), base::InvalidArgument);
  EXPECT_THROW(RotatingKVCache(4, 4), base::InvalidArgument);
  EXPECT_THROW(RotatingKVCache(4, -1), base::InvalidArgument);
  RotatingKVCache cache(4);
  const auto [k, v] = positions(0, 3);
  cache.update_and_fetch(k, v);
  EXPECT_THROW(cache.from_state(cache.state(), {"0", "4"}), base::FormatError);
  EXPECT_THROW(cache.from_state(cache.state(), {"0", "four", "3", "3"}), base::FormatError);
  EXPECT_THROW(cache.from_state(cache.state(), {"0", "4", "3", "9"}), base::FormatError);
  EXPECT_THROW(cache.from_state(cache.state(), {"5", "4", "3", "3"}), base::FormatError);
  EXPECT_THROW(cache.trim(-2), base::InvalidArgument);
}

}  // namespace

// Replays traces recorded from mlx_lm's own RotatingKVCache (tools/make_kv_cache_fixtures.py,
// MLX CPU build): every returned key position in buffer order, every mask, the buffer size,
// offset, trimmability and the (keep, max_size, offset, index) meta state must match.
#include <nlohmann/json.hpp>

#include <fstream>

namespace {

nlohmann::json load_mlx_traces() {
  const std::string path = std::string(VQ_SOURCE_DIR) + "/tests/fixtures/kv_cache/mlx_lm_caches.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing fixture " + path);
  return nlohmann::json::parse(in);
}

std::vector<int64_t> expand_runs(const nlohmann::json& runs) {
  std::vector<int64_t> out;
  for (const auto& run : runs) {
    for (int64_t p = run[0].get<int64_t>(); p <= run[1].get<int64_t>(); ++p) out.push_back(p);
  }
  return out;
}

TEST(RotatingKVCache, MatchesMlxLmTracesStepByStep) {
  const nlohmann::json traces = load_mlx_traces();
  ASSERT_EQ(traces["kv_heads"].get<int64_t>(), kH);
  ASSERT_EQ(traces["head_dim"].get<int64_t>(), kD);
  ASSERT_GE(traces["rotating"].size(), 8u);
  for (const auto& scenario : traces["rotating"]) {
    const int64_t max_size = scenario["max_size"], keep = scenario["keep"];
    const std::optional<int64_t> window =
        scenario["window"].is_null() ? std::nullopt : std::optional<int64_t>(scenario["window"].get<int64_t>());
    RotatingKVCache cache(max_size, keep, DType::F32);
    int64_t fed = 0, step_index = 0;
    for (const auto& step : scenario["steps"]) {
      const std::string where = "max_size " + std::to_string(max_size) + " keep " + std::to_string(keep) + " step " +
                                std::to_string(step_index++);
      if (step["op"] == "trim") {
        EXPECT_EQ(cache.trim(step["n"].get<int64_t>()), step["removed"].get<int64_t>()) << where;
        EXPECT_EQ(cache.offset(), step["offset"].get<int64_t>()) << where;
        fed = cache.offset();
        continue;
      }
      const int64_t n = step["n"];
      const lm::AttentionMask mask = cache.make_mask(n, window);
      const auto [k, v] = positions(fed, n);
      const auto kv = cache.update_and_fetch(k, v);
      fed += n;
      EXPECT_EQ(returned_positions(kv), expand_runs(step["position_runs"])) << where;
      EXPECT_EQ(cache.offset(), step["offset"].get<int64_t>()) << where;
      EXPECT_EQ(cache.is_trimmable(), step["trimmable"].get<bool>()) << where;
      const std::size_t row_bytes = 2 * kH * kD * sizeof(float);
      EXPECT_EQ(cache.nbytes(), step["buffer_rows"].get<std::size_t>() * row_bytes) << where;
      const auto meta = cache.meta_state();
      EXPECT_EQ(std::vector<std::string>(meta.begin(), meta.begin() + 4),
                step["meta_state"].get<std::vector<std::string>>())
          << where;
      const auto& want = step["mask"];
      if (want.is_null()) {
        EXPECT_EQ(mask.kind, lm::AttentionMask::Kind::kNone) << where;
      } else if (want.is_string()) {
        EXPECT_EQ(want.get<std::string>(), "causal");
        EXPECT_EQ(mask.kind, lm::AttentionMask::Kind::kCausal) << where;
      } else {
        ASSERT_EQ(mask.kind, lm::AttentionMask::Kind::kExplicit) << where;
        const auto rows = static_cast<int64_t>(want.size());
        const auto cols = static_cast<int64_t>(want[0].size());
        ASSERT_EQ(mask.explicit_mask.shape(), (lm::Shape{1, 1, rows, cols})) << where;
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j)
            EXPECT_EQ(mask.explicit_mask.get({0, 0, i, j}) != 0, want[i][j].get<bool>())
                << where << " [" << i << "," << j << "]";
      }
    }
  }
}

}  // namespace
