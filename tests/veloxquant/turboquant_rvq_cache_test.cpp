// turboquant_rvq serving cache (spec §2.2): byte accounting ceil(2db/8)+2 and the README's 7.5x,
// output bit-exact with the quantizer called directly, growth in 256-token steps, fused
// attention equal to attention over the dequantized keys, bf16 norms above 65504, quantized
// values, meta_state layout.
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "support/allocation_counter.h"
#include "support/kv_test_data.h"
#include "support/reference_attention.h"
#include "veloxquant/quant/turboquant_rvq.h"
#include "lm/cache/full_kv_cache.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

TEST(TurboQuantRvqCache, ByteAccountingOfTheOriginal) {
  // b = 1, d = 128: 34 bytes per key vector against 256 of fp16 = 7.53x (README "7.5x").
  TurboQuantRvqCache cache(128, 1, 42);
  cache.update_and_fetch(test_support::random_kv(1, 8, 16, 128, 1), test_support::random_kv(1, 8, 16, 128, 2));
  EXPECT_EQ(cache.compressed_key_bytes(), 8 * 16 * 34);
  EXPECT_EQ(cache.fp16_key_bytes(), 8 * 16 * 128 * 2);
  const double ratio = double(cache.fp16_key_bytes()) / cache.compressed_key_bytes();
  EXPECT_GT(ratio, 7.0);
  EXPECT_LT(ratio, 8.0);
  EXPECT_NEAR(ratio, 7.53, 0.01);
  EXPECT_EQ(cache.assigned_bits(), 1);
}

TEST(TurboQuantRvqCache, NbytesIsTheLayoutAfterGrowth) {
  // 310 tokens: one 256-row allocation, then growth to 256 + 256 rows (spec §9: "310 tokens").
  const int64_t h = 2, d = 64, bits = 2;
  const auto before = test_support::allocation_snapshot();
  auto cache = std::make_unique<TurboQuantRvqCache>(d, bits, 42);
  cache->update_and_fetch(test_support::random_kv(1, h, 200, d, 3), test_support::random_kv(1, h, 200, d, 4));
  cache->update_and_fetch(test_support::random_kv(1, h, 110, d, 5), test_support::random_kv(1, h, 110, d, 6));
  EXPECT_EQ(cache->offset(), 310);
  const auto after = test_support::allocation_snapshot();
  const std::size_t rows = 200 + 256;  // growth keeps offset rows then appends ceil(110/256) steps
  const std::size_t per_row = 2 * (d * bits / 8) + 2 /*bf16 norm*/ + d * 2 /*f16 values*/;
  EXPECT_EQ(cache->nbytes(), h * rows * per_row);
  EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), cache->nbytes());
  // Packed keys: less than half of what the same keys take in fp16 (spec §9).
  EXPECT_LT(h * rows * (2 * (d * bits / 8) + 2), h * rows * d * 2 / 2);
}

TEST(TurboQuantRvqCache, OutputIsBitExactWithTheQuantizer) {
  const int d = 32, bits = 3;
  TurboQuantRvqCache cache(d, bits, 1234);
  const lm::Tensor k = test_support::random_kv(1, 2, 40, d, 7, lm::DType::F32);
  const lm::Tensor v = test_support::random_kv(1, 2, 40, d, 8, lm::DType::F32);
  const lm::KeysValues got = cache.update_and_fetch(k, v);
  quant::TurboQuantRvq quantizer(d, bits, 1234);
  const std::vector<float> kf = k.to_f32();
  std::vector<uint8_t> codes(quantizer.code_bytes() * 80);
  std::vector<float> want(kf.size());
  quantizer.encode(kf.data(), 80, codes.data());
  quantizer.decode(codes.data(), 80, want.data());
  EXPECT_EQ(got.keys.to_f32(), want);
  EXPECT_EQ(got.values.to_f32(), v.to_f32());  // values kept in the input dtype
}

TEST(TurboQuantRvqCache, NormsAbove65504StayFinite) {
  // bf16 keys whose norms (~2e5) overflow f16: the bf16 norm keeps them finite (issue #747).
  TurboQuantRvqCache cache(64, 4, 42);
  std::vector<float> big = test_support::random_kv(1, 1, 8, 64, 5, lm::DType::F32).to_f32();
  for (float& x : big) x *= 10000.0f;
  const lm::Tensor k = lm::Tensor::from_f32(big, {1, 1, 8, 64}, lm::DType::BF16);
  const std::vector<float> want = k.to_f32();
  const lm::KeysValues got = cache.update_and_fetch(k, k);
  EXPECT_EQ(got.keys.dtype(), lm::DType::BF16);
  const std::vector<float> g = got.keys.to_f32();
  for (int t = 0; t < 8; ++t) {
    double err = 0, norm = 0;
    for (int c = 0; c < 64; ++c) {
      ASSERT_TRUE(std::isfinite(g[t * 64 + c]));
      err += std::pow(g[t * 64 + c] - want[t * 64 + c], 2);
      norm += std::pow(want[t * 64 + c], 2);
    }
    EXPECT_GT(std::sqrt(norm), 65504.0);
    // 4+4-bit RVQ at d = 64: relative error far below 10% (bf16 norm rounding is 0.4%).
    EXPECT_LT(std::sqrt(err / norm), 0.1) << t;
  }
}

void check_fused(int64_t prefill, int64_t n, std::optional<int64_t> window, int value_bits) {
  const int64_t hkv = 2, hq = 6, d = 32;
  TurboQuantRvqCache fused(d, 4, 9, value_bits), plain(d, 4, 9, value_bits);
  // f32 so update_and_fetch's dequantized keys are not rounded to f16 (the fused path scores in f32).
  const lm::DType f32 = lm::DType::F32;
  const lm::Tensor k0 = test_support::random_kv(1, hkv, prefill, d, 11, f32),
                   v0 = test_support::random_kv(1, hkv, prefill, d, 12, f32);
  fused.update_and_fetch(k0, v0);
  plain.update_and_fetch(k0, v0);
  const lm::Tensor k = test_support::random_kv(1, hkv, n, d, 13, f32),
                   v = test_support::random_kv(1, hkv, n, d, 14, f32);
  const lm::Tensor q = test_support::random_kv(1, hq, n, d, 15, lm::DType::F32);
  lm::Tensor out({1, hq, n, d}, lm::DType::F32);
  lm::FusedAttentionRequest request{&q, &k, &v, 1.0f / std::sqrt(float(d)), window};
  ASSERT_TRUE(fused.supports_fused_attention());
  fused.fused_attention(request, out);
  EXPECT_EQ(fused.offset(), prefill + n);
  const lm::KeysValues kv = plain.update_and_fetch(k, v);
  const std::vector<float> want =
      test_support::reference_attention(kv, q.to_f32(), hq, n, prefill, request.scale, window);
  const std::vector<float> got = out.to_f32();
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4f) << i;
}

TEST(TurboQuantRvqCache, FusedAttentionEqualsAttentionOverDequantizedKeys) {
  check_fused(300, 1, std::nullopt, 0);  // decode step over > one 256-row block
  check_fused(0, 20, std::nullopt, 0);   // prefill: causal inside the chunk
  check_fused(40, 5, 16, 0);             // sliding window
  check_fused(70, 3, std::nullopt, 4);   // quantized values
}

TEST(TurboQuantRvqCache, QuantizedValuesShrinkAndStayClose) {
  TurboQuantRvqCache plain(64, 2, 42), packed(64, 2, 42, 4);
  const lm::Tensor k = test_support::random_kv(1, 2, 100, 64, 21), v = test_support::random_kv(1, 2, 100, 64, 22);
  plain.update_and_fetch(k, v);
  const std::vector<float> got = packed.update_and_fetch(k, v).values.to_f32();
  const std::vector<float> want = v.to_f32();
  // 4-bit group affine over [-4, 4): half a step is 8/15/2 (plus f16 rounding of the params).
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_LE(std::fabs(got[i] - want[i]), 8.0f / 15.0f / 2.0f + 0.01f);
  // Per row: 64 f16 values = 128 bytes -> 8 words (32 bytes) + 2 groups x 4 bytes of params.
  EXPECT_EQ(plain.nbytes() - packed.nbytes(), std::size_t{2} * 256 * (128 - 32 - 8));
  EXPECT_THROW(TurboQuantRvqCache(64, 2, 42, 1), QuantizerConfigError);
  EXPECT_THROW(TurboQuantRvqCache(64, 9, 42), QuantizerConfigError);
}

TEST(TurboQuantRvqCache, MetaStateIsHeadDimBitsSeedOffset) {
  TurboQuantRvqCache cache(32, 2, 77);
  cache.update_and_fetch(test_support::random_kv(1, 1, 5, 32, 1), test_support::random_kv(1, 1, 5, 32, 2));
  const std::vector<std::string> meta = cache.meta_state();
  ASSERT_GE(meta.size(), 4u);
  EXPECT_EQ(meta[0], "32");
  EXPECT_EQ(meta[1], "2");
  EXPECT_EQ(meta[2], "77");
  EXPECT_EQ(meta[3], "5");
  EXPECT_EQ(cache.state().size(), 4u);  // (packed1, packed2, norms, values)
  EXPECT_EQ(cache.state()[0].dim(2), 5);
  TurboQuantRvqCache restored(8, 1, 0);
  EXPECT_THROW(restored.from_state(cache.state(), {"32", "2"}), base::FormatError);
  restored.from_state(cache.state(), {meta[0], meta[1], meta[2], meta[3]});  // the original's 4-tuple
  EXPECT_EQ(restored.offset(), 5);
  EXPECT_EQ(restored.meta_state()[2], "77");
}

TEST(TurboQuantRvqCache, QuantizedValuesRoundTripThroughState) {
  TurboQuantRvqCache cache(32, 3, 5, 6), restored(8, 1, 0);
  cache.update_and_fetch(test_support::random_kv(1, 2, 70, 32, 31), test_support::random_kv(1, 2, 70, 48, 32));
  ASSERT_EQ(cache.state().size(), 5u);  // (packed1, packed2, norms, value codes, value params)
  restored.from_state(cache.state(), cache.meta_state());
  EXPECT_EQ(restored.value_bits(), 6);
  EXPECT_EQ(restored.nbytes(), std::size_t{2} * 70 * (2 * 12 + 2 + 4 * 10 + 2 * 2 * 2));  // exact, no slack
  const lm::Tensor k = test_support::random_kv(1, 2, 3, 32, 33), v = test_support::random_kv(1, 2, 3, 48, 34);
  const lm::KeysValues a = cache.update_and_fetch(k, v), b = restored.update_and_fetch(k, v);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(a.values.to_f32(), b.values.to_f32());
  std::vector<std::string> bad = cache.meta_state();
  bad[5] = "40";  // value_dim whose word count (8) disagrees with the stored codes (10)
  EXPECT_THROW(restored.from_state(cache.state(), bad), base::FormatError);
}

TEST(TurboQuantRvqCache, ForModelSeedsEachLayerWithSeedPlusRawIndex) {
  class TwoKinds : public lm::Model {
   public:
    TwoKinds() {
      config_.head_dim = 16;
      layers_.resize(4);
      layers_[1].is_attention = false;
    }
    const lm::ModelConfig& config() const override { return config_; }
    const std::vector<lm::LayerInfo>& layers() const override { return layers_; }
    lm::CacheList native_make_cache() const override {
      lm::CacheList c;
      for (int i = 0; i < 4; ++i) c.push_back(std::make_shared<lm::FullKVCache>());
      return c;
    }
    void forward(const std::vector<int32_t>&, lm::CacheList&, std::vector<float>&, std::vector<float>*) const override {
    }

   private:
    lm::ModelConfig config_;
    std::vector<lm::LayerInfo> layers_;
  } model;
  KVCacheConfig c;
  c.seed = 100;
  const lm::CacheList caches = KVCacheBuilder::for_model(model, c);
  EXPECT_EQ(caches[0]->meta_state()[2], "100");
  EXPECT_EQ(caches[2]->meta_state()[2], "102");  // raw layer index 2, attention index 1
  EXPECT_EQ(caches[3]->meta_state()[2], "103");
  EXPECT_EQ(caches[1]->type_name(), "FullKVCache");
}

}  // namespace
}  // namespace veloxquant
