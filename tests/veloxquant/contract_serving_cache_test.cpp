// The serving-cache contract (lm/cache/cache.h, spec §2.1), run over every servable method the
// registry lists — a new method is covered by adding its registry row. Each property is
// checked for f16, bf16 and f32 inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/allocation_counter.h"
#include "support/kv_test_data.h"
#include "support/reference_attention.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

struct ContractCase {
  std::string method;
  lm::DType dtype;
};

std::string case_name(const testing::TestParamInfo<ContractCase>& info) {
  return info.param.method + "_" + std::string(lm::dtype_name(info.param.dtype));
}

std::vector<ContractCase> all_cases() {
  std::vector<ContractCase> cases;
  for (const std::string& method : servable_method_names()) {
    for (lm::DType dtype : {lm::DType::F16, lm::DType::BF16, lm::DType::F32}) cases.push_back({method, dtype});
  }
  return cases;
}

constexpr int64_t kBatch = 1, kHeads = 2, kDim = 32;

class ServingContract : public testing::TestWithParam<ContractCase> {
 protected:
  std::shared_ptr<lm::KVCache> make() const {
    KVCacheConfig c;
    c.method = GetParam().method;
    c.head_dim = kDim;
    c.bit_width_inlier = 4;
    if (c.method == "svdq") {
      // svdq does not read bit_width_inlier: its 4-bit form is a flat schedule over every latent
      // channel (the default drops 3 of 8 channel groups, which isotropic test data cannot afford).
      c.options<SvdqOptions>().svdq_bit_schedule = "4,4,4,4,4,4,4,4";
      c.options<SvdqOptions>().svdq_rank = static_cast<int>(kDim);
    }
    // The same for xkv (full-rank latent codes at 4 bits) and amc (every token in the f16 tier:
    // its rank d/3 and d/16 tiers cannot hold isotropic rows; amc_cache_test pins those).
    if (c.method == "xkv") c.options<XkvOptions>().xkv_rank = static_cast<int>(kDim);
    if (c.method == "amc") c.options<AmcOptions>().amc_k_high = 1.0, c.options<AmcOptions>().amc_k_mid = 0.0;
    // a2ats does not read bit_width_inlier either: its 4-bit form is 8-bit codes over 2-wide sub-vectors.
    if (c.method == "a2ats") c.options<A2atsOptions>().a2ats_sub_dim = 2;
    // anchorkv neither: its 4-bit form is a 4-bit residual on every compressed token (theta 1).
    if (c.method == "anchorkv") {
      c.options<AnchorKvOptions>().anchorkv_residual_bits = 4;
      c.options<AnchorKvOptions>().anchorkv_theta = 1.0;
    }
    // The product-VQ methods do not read bit_width_inlier: their 4-bit forms are 2-dim sub-vectors
    // with 256 codewords (defaults are 0.5-3 bits per coordinate).
    if (c.method == "vecinfer") {
      c.options<VecInferOptions>() = {
          .key_sub_dim = 2, .value_sub_dim = 2, .key_codebook_bits = 8, .value_codebook_bits = 8};
    }
    if (c.method == "comm_vq") c.options<CommVqOptions>().comm_vq_n_codebooks = static_cast<int>(kDim / 2);
    if (c.method == "palu") {  // likewise: every latent component at 4 bits (isotropic data has no low rank)
      c.options<PaluOptions>().palu_rank = static_cast<int>(kDim);
      c.options<PaluOptions>().palu_hi_fraction = 1.0;
    }
    if (c.method == "kvtc") {  // and every principal component at 4 bits, none dropped
      c.options<KvtcOptions>().kvtc_bit_choices = "4";
      c.options<KvtcOptions>().kvtc_bit_budget = static_cast<int>(4 * kHeads * kDim);
    }
    return KVCacheBuilder(c).build().serving();
  }
  lm::Tensor keys(int64_t s, uint64_t seed) const {
    return test_support::random_kv(kBatch, kHeads, s, kDim, seed, GetParam().dtype);
  }
  // Reasonable reconstruction: at 4 bits every method stays within 25% of the data's range
  // (values in [-4, 4)) per element — a loose sanity bound; method tests pin the exact numbers.
  static void expect_close(const lm::Tensor& got, const std::vector<float>& want, float tol) {
    const std::vector<float> g = got.to_f32();
    ASSERT_EQ(g.size(), want.size());
    double worst = 0.0;
    for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, double(std::fabs(g[i] - want[i])));
    EXPECT_LE(worst, tol);
  }
};

TEST_P(ServingContract, ShapesDtypeOffsetAndStateAfterEveryChunk) {
  auto cache = make();
  EXPECT_TRUE(cache->empty());
  EXPECT_EQ(cache->offset(), 0);
  EXPECT_NO_THROW(cache->state());  // readable before the first update
  std::vector<lm::Tensor> fed_k, fed_v;
  int64_t total = 0;
  uint64_t seed = 7;
  for (int64_t chunk : {37, 64, 1, 1, 200, 1}) {  // chunked prefill, then decode steps; crosses 256
    fed_k.push_back(keys(chunk, seed++));
    fed_v.push_back(keys(chunk, seed++));
    const lm::KeysValues got = cache->update_and_fetch(fed_k.back(), fed_v.back());
    total += chunk;
    EXPECT_EQ(cache->offset(), total);
    EXPECT_FALSE(cache->empty());
    EXPECT_EQ(got.keys.shape(), (lm::Shape{kBatch, kHeads, total, kDim}));
    EXPECT_EQ(got.values.shape(), (lm::Shape{kBatch, kHeads, total, kDim}));
    EXPECT_EQ(got.keys.dtype(), GetParam().dtype);
    EXPECT_EQ(got.values.dtype(), GetParam().dtype);
    // mlx_lm evaluates state after every prefill chunk (issue #83): it must never fail.
    const std::vector<lm::Tensor> state = cache->state();
    EXPECT_FALSE(state.empty());
    expect_close(got.keys, test_support::concat_tokens_f32(fed_k), 2.0f);
    expect_close(got.values, test_support::concat_tokens_f32(fed_v), 2.0f);
  }
}

TEST_P(ServingContract, StateRoundTripThenMoreUpdates) {
  auto cache = make();
  cache->update_and_fetch(keys(150, 1), keys(150, 2));
  cache->update_and_fetch(keys(1, 3), keys(1, 4));
  auto restored = make();
  restored->from_state(cache->state(), cache->meta_state());
  EXPECT_EQ(restored->offset(), cache->offset());
  for (uint64_t step = 0; step < 3; ++step) {
    const lm::Tensor k = keys(step == 0 ? 20 : 1, 10 + step), v = keys(step == 0 ? 20 : 1, 20 + step);
    const lm::KeysValues a = cache->update_and_fetch(k, v);
    const lm::KeysValues b = restored->update_and_fetch(k, v);
    EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
    EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  }
  EXPECT_EQ(restored->offset(), 151 + 22);
}

TEST_P(ServingContract, TrimEqualsFeedingOnlyTheKeptTokens) {
  auto cache = make();
  ASSERT_EQ(cache->is_trimmable(), require_method(GetParam().method).capabilities.trimmable);
  if (!cache->is_trimmable()) {
    // Eviction caches (spec §2.1 issue #152): a trim cannot bring evicted rows back, so it
    // removes nothing and leaves the cache as it was.
    const lm::KeysValues before = cache->update_and_fetch(keys(30, 31), keys(30, 32));
    EXPECT_EQ(cache->trim(7), 0);
    EXPECT_EQ(cache->offset(), 30);
    auto fresh = make();
    fresh->update_and_fetch(keys(30, 31), keys(30, 32));
    const lm::Tensor k2 = keys(1, 40), v2 = keys(1, 50);
    EXPECT_EQ(cache->update_and_fetch(k2, v2).keys.to_f32(), fresh->update_and_fetch(k2, v2).keys.to_f32());
    return;
  }
  const lm::Tensor k = keys(300, 31), v = keys(300, 32);
  cache->update_and_fetch(k, v);
  EXPECT_EQ(cache->trim(7), 7);
  EXPECT_EQ(cache->offset(), 293);
  auto fresh = make();
  fresh->update_and_fetch(test_support::token_rows(k, 0, 293), test_support::token_rows(v, 0, 293));
  for (uint64_t step = 0; step < 3; ++step) {
    const lm::Tensor k2 = keys(1, 40 + step), v2 = keys(1, 50 + step);
    const lm::KeysValues a = cache->update_and_fetch(k2, v2);
    const lm::KeysValues b = fresh->update_and_fetch(k2, v2);
    EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32()) << "step " << step;
    EXPECT_EQ(a.values.to_f32(), b.values.to_f32()) << "step " << step;
  }
  EXPECT_EQ(cache->trim(10'000), 296);
  EXPECT_EQ(cache->offset(), 0);
}

TEST_P(ServingContract, CloneIsIndependent) {
  auto cache = make();
  if (!cache->is_trimmable()) {  // the same property without trim: two clones stay equal while the original moves on
    cache->update_and_fetch(keys(40, 61), keys(40, 62));
    auto copy = cache->clone();
    auto twin = cache->clone();
    cache->update_and_fetch(keys(5, 65), keys(5, 66));  // mutate the original
    const lm::KeysValues a = copy->update_and_fetch(keys(1, 63), keys(1, 64));
    const lm::KeysValues b = twin->update_and_fetch(keys(1, 63), keys(1, 64));
    EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
    EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
    EXPECT_EQ(copy->offset(), 41);
    EXPECT_EQ(cache->offset(), 45);
    return;
  }
  cache->update_and_fetch(keys(40, 61), keys(40, 62));
  auto copy = cache->clone();
  const std::vector<float> before = copy->update_and_fetch(keys(1, 63), keys(1, 64)).keys.to_f32();
  copy->trim(1);
  cache->update_and_fetch(keys(5, 65), keys(5, 66));  // mutate the original
  cache->trim(3);
  EXPECT_EQ(copy->offset(), 40);
  const std::vector<float> after = copy->update_and_fetch(keys(1, 63), keys(1, 64)).keys.to_f32();
  EXPECT_EQ(before, after);
  EXPECT_EQ(cache->offset(), 42);
}

TEST_P(ServingContract, NbytesIsWhatIsAllocated) {
  const auto before = test_support::allocation_snapshot();
  auto cache = make();
  for (int64_t chunk : {100, 1, 300, 1}) {
    cache->update_and_fetch(keys(chunk, static_cast<uint64_t>(chunk)), keys(chunk, static_cast<uint64_t>(chunk) + 1));
  }
  const auto after = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  EXPECT_GT(cache->nbytes(), 0u);
  const auto copy = cache->clone();
  const auto after_clone = test_support::allocation_snapshot();
  EXPECT_EQ(static_cast<std::size_t>(after_clone.aligned_live_bytes - after.aligned_live_bytes), copy->nbytes());
}

TEST_P(ServingContract, FusedAttentionEqualsAttentionOverFetchedRows) {
  const MethodDescriptor& method = require_method(GetParam().method);
  auto fused = make();
  auto plain = make();
  EXPECT_EQ(fused->supports_fused_attention(), method.capabilities.fused_attention);
  if (!method.capabilities.fused_attention) GTEST_SKIP() << GetParam().method << " declares no fused attention";
  const int64_t hq = 2 * kHeads;
  int64_t first = 0;
  uint64_t seed = 90;
  // A prefill (crosses KIVI's frontier; RVQ attends over one dequantized copy), a short
  // multi-query chunk and decode steps (RVQ scores from the codes).
  for (int64_t n : {170, 5, 1, 1}) {
    const lm::Tensor k = keys(n, seed++), v = keys(n, seed++);
    const lm::Tensor q = test_support::random_kv(kBatch, hq, n, kDim, seed++, lm::DType::F32);
    lm::Tensor out({kBatch, hq, n, kDim}, lm::DType::F32);
    const float scale = 1.0f / std::sqrt(float(kDim));
    fused->fused_attention({&q, &k, &v, scale, std::nullopt}, out);
    const std::vector<float> want =
        test_support::reference_attention(plain->update_and_fetch(k, v), q.to_f32(), hq, n, first, scale);
    EXPECT_EQ(fused->offset(), plain->offset());
    // f32 inputs: the same numbers up to summation order, and for KIVI-family keys (scored as
    // integer dot products, attention/integer_key_scores.h) up to the query's rounding to 16
    // bits: at most half a step (2^-16 of the largest folded element) per term, ~5e-4 on these
    // outputs of magnitude ~13; block-level keys (attention/block_level_key_scores.h) round both
    // the query and the levels, each to 2^-15.5 of its largest element, ~1.3e-3 here. f16/bf16: the reference reads
    // keys rounded to the input dtype (relative 2^-11 / 2^-8), the fused path scores in f32; with |q|, |k| ~ 13 here a
    // score moves by up to ~0.03 (f16) / ~0.25 (bf16) before the scale.
    const float tol = GetParam().dtype == lm::DType::F32 ? 2e-3f : GetParam().dtype == lm::DType::F16 ? 3e-2f : 1e-1f;
    const std::vector<float> got = out.to_f32();
    if (method.capabilities.sparse_attention && first > 0) {
      // Sparse attention over stored rows (rocketkv) is checked against its own brute force in
      // the method's tests; here only the first call, with nothing stored, must agree.
      for (const float x : got) ASSERT_TRUE(std::isfinite(x)) << "chunk of " << n;
      first += n;
      continue;
    }
    float worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    EXPECT_LE(worst, tol) << "chunk of " << n;
    first += n;
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, ServingContract, testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace veloxquant
