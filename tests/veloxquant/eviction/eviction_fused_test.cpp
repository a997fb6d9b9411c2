// An eviction cache attended through the shared driver (fused_attention) keeps exactly the rows
// the update_and_fetch path keeps when the host hands both the same real queries — the decode
// step's scores come from the driver's attention weights instead of a second scoring pass — and
// its output equals attention over the rows update_and_fetch returns, masked by their true
// positions. Prefill chunks past the budget, then decode steps past it many times over.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "lm/kernels/attention.h"
#include "support/kv_test_data.h"
#include "veloxquant/eviction/eviction_test_config.h"

namespace veloxquant {
namespace {

using eviction_test::make_eviction_cache;
using eviction_test::small_budget;

constexpr int64_t kHeads = 2, kQueryHeads = 6, kDim = 32, kBudget = 32;

struct FusedCase {
  std::string method, storage;
};

class EvictionFused : public testing::TestWithParam<FusedCase> {};

std::vector<int32_t> kept_positions(const eviction::EvictionCache& cache) {
  std::vector<int32_t> all;
  for (int64_t h = 0; h < kHeads; ++h) {
    const int32_t* p = cache.rows().positions(0, h);
    all.insert(all.end(), p, p + cache.rows().rows());
  }
  return all;
}

TEST_P(EvictionFused, KeepsTheSameRowsAndAttendsAlike) {
  KVCacheConfig config = small_budget(GetParam().method, kBudget, kDim);
  config.eviction.eviction_storage = GetParam().storage;  // dtype rows, or rows stored as codes (composition)
  config.turboquant_rvq.rvq_value_bits = 4;
  auto fused = make_eviction_cache(config);
  auto plain = make_eviction_cache(config);
  ASSERT_TRUE(fused->supports_fused_attention());
  uint64_t seed = 500;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  std::vector<int64_t> calls = {24, 24};  // two prefill chunks, the second past the budget
  for (int i = 0; i < 120; ++i) calls.push_back(1);
  for (const int64_t n : calls) {
    const lm::Tensor k = test_support::random_kv(1, kHeads, n, kDim, seed++, lm::DType::F32);
    const lm::Tensor v = test_support::random_kv(1, kHeads, n, kDim, seed++, lm::DType::F32);
    const lm::Tensor q = test_support::random_kv(1, kQueryHeads, n, kDim, seed++, lm::DType::F32);
    // The plain path as the host runs it without fused attention: queries, mask, fetch, attend.
    if (plain->wants_queries()) plain->observe_queries(q);
    const lm::AttentionMask mask = plain->make_mask(n, std::nullopt);
    const lm::KeysValues kv = plain->update_and_fetch(k, v);
    lm::Tensor want;
    lm::kernels::attention_reference(q, kv.keys, kv.values, mask, std::nullopt, scale, want);
    if (fused->wants_queries()) fused->observe_queries(q);
    lm::Tensor out({1, kQueryHeads, n, kDim}, lm::DType::F32);
    fused->fused_attention({&q, &k, &v, scale, std::nullopt}, out);
    ASSERT_EQ(fused->offset(), plain->offset());
    ASSERT_EQ(kept_positions(*fused), kept_positions(*plain)) << "after the call of " << n << " at " << fused->offset();
    const std::vector<float> got = out.to_f32(), ref = want.to_f32();
    float worst = 0.0f;
    for (std::size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(got[i] - ref[i]));
    // The plain path's mask speaks for every head with head 0's positions (eviction_mask.h);
    // at one query without a window there is no mask, so decode steps compare exactly.
    if (n == 1) {
      EXPECT_LT(worst, 2e-4f) << "at offset " << fused->offset();
    }
  }
  EXPECT_EQ(fused->rows().rows(), kBudget);
  EXPECT_EQ(fused->nbytes(), plain->nbytes());
}

std::vector<FusedCase> cases() {
  std::vector<FusedCase> out;
  for (const std::string& m : eviction_test::eviction_methods()) {
    for (const char* storage : {"dtype", "turboquant_rvq", "kivi"}) out.push_back({m, storage});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Methods, EvictionFused, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<FusedCase>& info) {
                           return info.param.method + "_" + info.param.storage;
                         });

}  // namespace
}  // namespace veloxquant
