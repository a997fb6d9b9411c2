// The eviction contract (spec §2.3) for every eviction method: budget never exceeded, sinks
// survive, offset = true position after a long prefill (8x budget) and many decode steps (6x
// budget), each stored row is the token fed at its recorded position, deferred eviction returns
// stored ++ new rows, and the explicit mask equals a brute-force mask built from the returned
// rows' true positions (found by matching their contents against what was fed).
#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "veloxquant/eviction/eviction_test_config.h"
#include "support/kv_test_data.h"

namespace veloxquant {
namespace {

using eviction_test::make_eviction_cache;
using eviction_test::small_budget;

constexpr int64_t kHeads = 2, kDim = 32, kBudget = 32;

class EvictionInvariants : public testing::TestWithParam<std::string> {};

// Every token fed so far, per head: position -> key row (f32; random values are unique).
struct Fed {
  std::vector<std::vector<std::vector<float>>> keys, values;  // [head][position][dim]
  void add(const lm::Tensor& k, const lm::Tensor& v) {
    const std::vector<float> kf = k.to_f32(), vf = v.to_f32();
    const int64_t s = k.dim(2);
    keys.resize(kHeads);
    values.resize(kHeads);
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t t = 0; t < s; ++t) {
        keys[h].emplace_back(kf.begin() + (h * s + t) * kDim, kf.begin() + (h * s + t + 1) * kDim);
        values[h].emplace_back(vf.begin() + (h * s + t) * kDim, vf.begin() + (h * s + t + 1) * kDim);
      }
    }
  }
  // The true position of a returned row, by its content (-1 when it matches nothing fed).
  int64_t position_of(int64_t h, const float* row) const {
    for (std::size_t p = 0; p < keys[h].size(); ++p) {
      if (std::equal(keys[h][p].begin(), keys[h][p].end(), row)) return static_cast<int64_t>(p);
    }
    return -1;
  }
};

// Checks one returned [1, H, T, D] pair: T rows, each a fed token, positions strictly increasing,
// values belonging to the same token. Returns head 0's positions.
// Values are checked only when the method keeps them as fed (cam blends evicted values into
// survivors: merges_values).
std::vector<int64_t> returned_positions(const Fed& fed, const lm::KeysValues& kv, int64_t h,
                                        bool values_as_fed = true) {
  const std::vector<float> k = kv.keys.to_f32(), v = kv.values.to_f32();
  const int64_t t = kv.keys.dim(2);
  std::vector<int64_t> positions;
  for (int64_t r = 0; r < t; ++r) {
    const int64_t p = fed.position_of(h, k.data() + (h * t + r) * kDim);
    EXPECT_GE(p, 0) << "returned row " << r << " of head " << h << " was never fed";
    if (p < 0) return positions;
    EXPECT_TRUE(!values_as_fed ||
                std::equal(fed.values[h][p].begin(), fed.values[h][p].end(), v.data() + (h * t + r) * kDim))
        << "value row of position " << p << " belongs to another token";
    if (!positions.empty()) {
      EXPECT_GT(p, positions.back()) << "rows out of temporal order";
    }
    positions.push_back(p);
  }
  return positions;
}

TEST_P(EvictionInvariants, LongPrefillThenManyDecodeSteps) {
  auto cache = make_eviction_cache(small_budget(GetParam(), kBudget, kDim));
  EXPECT_FALSE(cache->is_trimmable());
  Fed fed;
  int64_t total = 0;
  uint64_t seed = 1;
  std::vector<int64_t> calls = {100, 100, 56};               // 8 x budget in prefill chunks
  for (int i = 0; i < 6 * kBudget; ++i) calls.push_back(1);  // 6 x budget decode steps
  for (int64_t s : calls) {
    const lm::Tensor k = test_support::random_kv(1, kHeads, s, kDim, seed++);
    const lm::Tensor v = test_support::random_kv(1, kHeads, s, kDim, seed++);
    const int64_t stored_before = cache->rows().rows();
    fed.add(k, v);
    const lm::KeysValues got = cache->update_and_fetch(k, v);
    total += s;
    ASSERT_EQ(cache->offset(), total);
    // Deferred eviction: every stored row and every new row of the call come back.
    ASSERT_EQ(got.keys.dim(2), stored_before + s);
    for (int64_t h = 0; h < kHeads; ++h) {
      const std::vector<int64_t> pos = returned_positions(fed, got, h, !cache->policy().merges());
      ASSERT_EQ(static_cast<int64_t>(pos.size()), stored_before + s);
      for (int64_t t = 0; t < s; ++t) EXPECT_EQ(pos[stored_before + t], total - s + t);  // the new rows, in order
    }
    // What is stored: at most the budget, sinks included, each row its true position.
    ASSERT_TRUE(eviction_test::holds_expected_rows(cache->policy(), cache->rows().rows(), total))
        << cache->rows().rows() << " rows after " << total << " tokens";
    for (int64_t h = 0; h < kHeads; ++h) {
      const int32_t* p = cache->rows().positions(0, h);
      for (int64_t r = 0; r < cache->rows().rows(); ++r) {
        EXPECT_LT(p[r], total);
        if (r > 0) {
          EXPECT_GT(p[r], p[r - 1]);
        }
        if (r < 4) {
          EXPECT_EQ(p[r], r) << "sink " << r << " of head " << h << " was evicted";
        }
      }
    }
  }
  EXPECT_EQ(total, 8 * kBudget + 6 * kBudget);
  // One more call shows the stored rows hold exactly the tokens of their recorded positions.
  const lm::Tensor k = test_support::random_kv(1, kHeads, 1, kDim, 999),
                   v = test_support::random_kv(1, kHeads, 1, kDim, 998);
  std::vector<std::vector<int32_t>> recorded;
  for (int64_t h = 0; h < kHeads; ++h) {
    recorded.emplace_back(cache->rows().positions(0, h), cache->rows().positions(0, h) + cache->rows().rows());
  }
  fed.add(k, v);
  const lm::KeysValues got = cache->update_and_fetch(k, v);
  for (int64_t h = 0; h < kHeads; ++h) {
    const std::vector<int64_t> pos = returned_positions(fed, got, h, !cache->policy().merges());
    ASSERT_EQ(pos.size(), recorded[h].size() + 1);
    for (std::size_t r = 0; r < recorded[h].size(); ++r) EXPECT_EQ(pos[r], recorded[h][r]);
  }
}

TEST_P(EvictionInvariants, ExplicitMaskEqualsBruteForce) {
  auto cache = make_eviction_cache(small_budget(GetParam(), kBudget, kDim));
  Fed fed;
  uint64_t seed = 300;
  int64_t total = 0;
  const auto feed = [&](int64_t s) {
    const lm::Tensor k = test_support::random_kv(1, kHeads, s, kDim, seed++);
    const lm::Tensor v = test_support::random_kv(1, kHeads, s, kDim, seed++);
    fed.add(k, v);
    total += s;
    return cache->update_and_fetch(k, v);
  };
  // Before any eviction the host's own rules apply.
  EXPECT_EQ(cache->make_mask(5, std::nullopt).kind, lm::AttentionMask::Kind::kCausal);
  feed(20);
  EXPECT_EQ(cache->make_mask(5, std::nullopt).kind, lm::AttentionMask::Kind::kCausal);
  EXPECT_EQ(cache->make_mask(1, std::nullopt).kind, lm::AttentionMask::Kind::kNone);
  feed(70);
  for (int step = 0; step < 5; ++step) feed(1);
  for (int64_t n : {1, 3, 9}) {
    for (std::optional<int64_t> window :
         {std::optional<int64_t>{}, std::optional<int64_t>{16}, std::optional<int64_t>{60}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " window " + (window ? std::to_string(*window) : "none"));
      const lm::AttentionMask mask = cache->make_mask(n, window);
      const int64_t first = total;
      const lm::KeysValues got = feed(n);
      if (n == 1 && !window) {
        EXPECT_EQ(mask.kind, lm::AttentionMask::Kind::kNone);
        continue;
      }
      ASSERT_EQ(mask.kind, lm::AttentionMask::Kind::kExplicit);
      ASSERT_EQ(mask.explicit_mask.shape(), (lm::Shape{1, 1, n, got.keys.dim(2)}));
      // Brute force from head 0's returned rows: positions recovered from their contents.
      const std::vector<int64_t> pos = returned_positions(fed, got, 0, !cache->policy().merges());
      ASSERT_EQ(static_cast<int64_t>(pos.size()), got.keys.dim(2));
      for (int64_t i = 0; i < n; ++i) {
        for (std::size_t j = 0; j < pos.size(); ++j) {
          const int64_t q = first + i;
          const bool want = pos[j] <= q && (!window || q - pos[j] < *window);
          EXPECT_EQ(mask.explicit_mask.get({0, 0, i, static_cast<int64_t>(j)}) != 0.0f, want)
              << "query " << q << " key position " << pos[j];
        }
      }
    }
  }
}

// A chunk of tokens leaves the same stored rows as the same tokens fed one by one (per-token
// policies; snapkv's prefill vote and nestedkv's anchors score a whole call by design), with the
// key-as-query proxy.
TEST_P(EvictionInvariants, MultiTokenCallStoresWhatSingleStepsStore) {
  auto chunked = make_eviction_cache(small_budget(GetParam(), kBudget, kDim));
  if (!chunked->policy().per_token()) GTEST_SKIP() << GetParam() << " scores a whole call at once";
  auto stepped = make_eviction_cache(small_budget(GetParam(), kBudget, kDim));
  const lm::Tensor k = test_support::random_kv(1, kHeads, 90, kDim, 41),
                   v = test_support::random_kv(1, kHeads, 90, kDim, 42);
  chunked->update_and_fetch(test_support::token_rows(k, 0, 40), test_support::token_rows(v, 0, 40));
  chunked->update_and_fetch(test_support::token_rows(k, 40, 90), test_support::token_rows(v, 40, 90));
  for (int64_t t = 0; t < 90; ++t) {
    stepped->update_and_fetch(test_support::token_rows(k, t, t + 1), test_support::token_rows(v, t, t + 1));
  }
  ASSERT_EQ(chunked->rows().rows(), stepped->rows().rows());
  for (int64_t h = 0; h < kHeads; ++h) {
    const int32_t* a = chunked->rows().positions(0, h);
    const int32_t* b = stepped->rows().positions(0, h);
    const int64_t n = chunked->rows().rows();
    EXPECT_EQ(std::vector<int32_t>(a, a + n), std::vector<int32_t>(b, b + n)) << "head " << h;
  }
  const lm::Tensor k2 = test_support::random_kv(1, kHeads, 1, kDim, 43),
                   v2 = test_support::random_kv(1, kHeads, 1, kDim, 44);
  EXPECT_EQ(chunked->update_and_fetch(k2, v2).keys.to_f32(), stepped->update_and_fetch(k2, v2).keys.to_f32());
}

INSTANTIATE_TEST_SUITE_P(Methods, EvictionInvariants, testing::ValuesIn(eviction_test::eviction_methods()),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace veloxquant
