// lm::BlockKVCache (the host's cache in llama.cpp's q8_0 / q5_0 / q4_0 blocks): exact resident
// bytes per token, fused attention over the blocks equal to attention over the dequantized
// rows, trim / state / clone semantics as FullKVCache's, and clear errors.
#include "lm/cache/block_kv_cache.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>

#include "base/error.h"
#include "lm/kernels/attention.h"
#include "lm/cache/kv_type_caches.h"
#include "support/fake_model.h"
#include "support/kv_test_data.h"

namespace {

using lm::BlockKVCache;
using lm::DType;
using lm::KVCacheType;
using lm::Tensor;
using test_support::random_kv;

constexpr KVCacheType kBlockTypes[] = {KVCacheType::Q8_0, KVCacheType::Q5_0, KVCacheType::Q4_0};

// SmolLM2-135M: 30 layers x 3 kv heads x head_dim 64, keys and values. 2048 tokens fill the
// 256-token growth steps exactly, so nbytes() / tokens is the format's size per token.
TEST(BlockKVCache, BytesPerTokenAreLlamaCppsOnSmolLM2Geometry) {
  const std::pair<KVCacheType, std::size_t> expected[] = {
      {KVCacheType::Q8_0, 12240}, {KVCacheType::Q5_0, 7920}, {KVCacheType::Q4_0, 6480}};
  for (const auto& [type, per_token] : expected) {
    std::size_t total = 0;
    for (int layer = 0; layer < 30; ++layer) {
      BlockKVCache cache(type);
      for (int chunk = 0; chunk < 4; ++chunk) {
        cache.update_and_fetch(random_kv(1, 3, 512, 64, layer * 10 + chunk, DType::F32),
                               random_kv(1, 3, 512, 64, 999 + chunk, DType::F32));
      }
      total += cache.nbytes();
    }
    EXPECT_EQ(total, per_token * 2048) << lm::kv_cache_type_name(type);
  }
}

// Fused attention (prefill chunk, then decode steps, GQA 6 query heads on 2 kv heads) against
// the reference attention over what update_and_fetch returns: the dequantized blocks (turned
// back from the rotated basis when the rows are rotated).
TEST(BlockKVCache, FusedAttentionEqualsAttentionOverDequantizedRows) {
  constexpr int64_t kHq = 6, kHkv = 2, kD = 64;
  for (const bool rotate : {true, false})
    for (KVCacheType type : kBlockTypes) {
      BlockKVCache fused(type, nullptr, rotate), plain(type, nullptr, rotate);
      uint64_t seed = 100;
      for (int64_t n : {37, 1, 1, 5, 1}) {
        const Tensor q = random_kv(1, kHq, n, kD, seed++, DType::F32);
        const Tensor k = random_kv(1, kHkv, n, kD, seed++, DType::F32);
        const Tensor v = random_kv(1, kHkv, n, kD, seed++, DType::F32);
        lm::FusedAttentionRequest request;
        request.queries = &q;
        request.keys = &k;
        request.values = &v;
        request.scale = 0.125f;
        Tensor got;
        fused.fused_attention(request, got);
        const lm::KeysValues kv = plain.update_and_fetch(k, v);
        Tensor want;
        lm::kernels::attention_reference(q, kv.keys, kv.values, lm::default_attention_mask(n, std::nullopt),
                                         std::nullopt, 0.125f, want);
        ASSERT_EQ(got.shape(), want.shape());
        const std::vector<float> a = got.to_f32(), b = want.to_f32();
        for (std::size_t i = 0; i < a.size(); ++i) {
          ASSERT_NEAR(a[i], b[i], 2e-5f * (1.0f + std::fabs(b[i])))
              << lm::kv_cache_type_name(type) << " n " << n << " rotate " << rotate;
        }
      }
      EXPECT_EQ(fused.rotated(), rotate);
    }
}

// Rotated rows are llama.cpp's: the blocks hold quantize(H x), H the 64-point Sylvester
// Hadamard matrix / 8 written out here from its definition H[i][j] = (-1)^popcount(i & j).
TEST(BlockKVCache, RotatedRowsAreBlocksOfTheHadamardTransform) {
  const Tensor k = random_kv(1, 1, 1, 128, 21, DType::F32), v = random_kv(1, 1, 1, 128, 22, DType::F32);
  BlockKVCache cache(KVCacheType::Q8_0);
  cache.update_and_fetch(k, v);
  ASSERT_TRUE(cache.rotated());
  const std::vector<float> x = k.to_f32();
  std::vector<float> hx(128, 0.0f);
  for (int block = 0; block < 2; ++block) {
    for (int i = 0; i < 64; ++i) {
      double sum = 0.0;
      for (int j = 0; j < 64; ++j)
        sum += (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) * x[block * 64 + j];
      hx[block * 64 + i] = static_cast<float>(sum / 8.0);
    }
  }
  std::vector<float> stored(128), expected(128);
  lm::dequantize_kv_row(KVCacheType::Q8_0, cache.key_blocks().data<uint8_t>(), stored.data(), 128);
  std::vector<uint8_t> blocks(lm::kv_row_bytes(KVCacheType::Q8_0, 128));
  lm::quantize_kv_row(KVCacheType::Q8_0, hx.data(), blocks.data(), 128);
  lm::dequantize_kv_row(KVCacheType::Q8_0, blocks.data(), expected.data(), 128);
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(stored[i], expected[i], 1e-6f * 8.0f) << i;
  // A head dim that is not a multiple of 64 stores plain rows, as llama.cpp does.
  BlockKVCache narrow(KVCacheType::Q8_0);
  narrow.update_and_fetch(random_kv(1, 1, 1, 32, 1, DType::F32), random_kv(1, 1, 1, 32, 2, DType::F32));
  EXPECT_FALSE(narrow.rotated());
}

// The same driver reads block rows and float rows: over the dequantized rows as f32 it gives
// the same numbers (the tile loader widens to exactly those values).
TEST(BlockKVCache, AttentionBlocksMatchesHostAttentionOnDequantizedF32) {
  BlockKVCache cache(KVCacheType::Q4_0, nullptr, /*rotate=*/false);
  const lm::KeysValues kv =
      cache.update_and_fetch(random_kv(1, 2, 700, 64, 1, DType::F32), random_kv(1, 2, 700, 64, 2, DType::F32));
  const Tensor q = random_kv(1, 4, 1, 64, 3, DType::F32);
  Tensor a, b;
  lm::kernels::attention(q, kv.keys, kv.values, lm::AttentionMask::none(), std::nullopt, 0.125f, a, nullptr);
  const lm::kernels::BlockRows keys{&cache.key_blocks(), KVCacheType::Q4_0, 700, 64};
  const lm::kernels::BlockRows values{&cache.value_blocks(), KVCacheType::Q4_0, 700, 64};
  lm::kernels::attention_blocks(q, keys, values, lm::AttentionMask::none(), std::nullopt, 0.125f, b, nullptr);
  EXPECT_EQ(a.to_f32(), b.to_f32());
}

TEST(BlockKVCache, TrimStateAndCloneBehaveAsIfFedOnlyTheKeptRows) {
  BlockKVCache cache(KVCacheType::Q5_0), fresh(KVCacheType::Q5_0);
  const Tensor k1 = random_kv(1, 2, 10, 64, 1, DType::F32), v1 = random_kv(1, 2, 10, 64, 2, DType::F32);
  const Tensor k2 = random_kv(1, 2, 4, 64, 3, DType::F32), v2 = random_kv(1, 2, 4, 64, 4, DType::F32);
  const Tensor k3 = random_kv(1, 2, 3, 64, 5, DType::F32), v3 = random_kv(1, 2, 3, 64, 6, DType::F32);
  cache.update_and_fetch(k1, v1);
  cache.update_and_fetch(k2, v2);
  EXPECT_EQ(cache.trim(4), 4);
  const auto got = cache.update_and_fetch(k3, v3);
  fresh.update_and_fetch(k1, v1);
  const auto want = fresh.update_and_fetch(k3, v3);
  EXPECT_EQ(cache.offset(), 13);
  EXPECT_EQ(got.keys.to_f32(), want.keys.to_f32());
  EXPECT_EQ(got.values.to_f32(), want.values.to_f32());

  BlockKVCache restored(KVCacheType::Q8_0, nullptr, false);  // type and rotation come from the meta
  restored.from_state(cache.state(), cache.meta_state());
  EXPECT_EQ(restored.kv_type(), KVCacheType::Q5_0);
  EXPECT_TRUE(restored.rotated());
  EXPECT_EQ(restored.offset(), 13);
  const auto copy = cache.clone();
  const Tensor k4 = random_kv(1, 2, 1, 64, 7, DType::F32), v4 = random_kv(1, 2, 1, 64, 8, DType::F32);
  const auto a = restored.update_and_fetch(k4, v4);
  const auto b = copy->update_and_fetch(k4, v4);
  EXPECT_EQ(a.keys.to_f32(), b.keys.to_f32());
  EXPECT_EQ(cache.offset(), 13);  // the clone is independent
  EXPECT_EQ(a.keys.dtype(), DType::F32);
  EXPECT_EQ(cache.update_and_fetch(random_kv(1, 2, 1, 64, 9), random_kv(1, 2, 1, 64, 10)).keys.dtype(), DType::F16);
}

TEST(BlockKVCache, RefusesFloatTypesBadHeadDimsAndShapeChangesClearly) {
  // Braces: with parentheses clang reads the statement as a declaration of `KVCacheType::F16`
  // (and refuses it), so nothing would be constructed there.
  EXPECT_THROW(BlockKVCache{KVCacheType::F16}, base::InvalidArgument);
  BlockKVCache cache(KVCacheType::Q4_0);
  try {
    cache.update_and_fetch(random_kv(1, 2, 3, 48, 1), random_kv(1, 2, 3, 48, 2));
    FAIL() << "accepted head dim 48";
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 32, got 48"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(cache.empty());
  cache.update_and_fetch(random_kv(1, 2, 3, 64, 1), random_kv(1, 2, 3, 64, 2));
  EXPECT_THROW(cache.update_and_fetch(random_kv(1, 3, 1, 64, 1), random_kv(1, 3, 1, 64, 2)), base::InvalidArgument);
  EXPECT_THROW(cache.trim(-1), base::InvalidArgument);
  BlockKVCache other(KVCacheType::Q4_0);
  EXPECT_THROW(other.from_state(cache.state(), {"q4_0", "32", "64", "plain"}), base::FormatError);
  EXPECT_THROW(other.from_state(cache.state(), {"f16", "64", "64", "plain"}), base::FormatError);
  EXPECT_THROW(other.from_state(cache.state(), {"q4_0", "64", "64", "twisted"}), base::FormatError);
  EXPECT_THROW(other.from_state(cache.state(), {"q4_0", "64", "64"}), base::FormatError);
}

TEST(KVTypeCaches, BuildsBlockCachesForFullLayersAndF16RotatingOnesForSlidingLayers) {
  test_support::FakeModel model(64, /*sliding_window=*/8);
  // The toy model's head dim is 4: block types refuse it, naming the rule.
  EXPECT_THROW(lm::make_kv_type_caches(model, KVCacheType::Q8_0), base::InvalidArgument);
  const lm::CacheList f32 = lm::make_kv_type_caches(model, KVCacheType::F32);
  ASSERT_EQ(f32.size(), model.layers().size());
  EXPECT_EQ(f32[0]->type_name(), "FullKVCache");
  EXPECT_EQ(f32[1]->type_name(), "RotatingKVCache");
}

}  // namespace
