// MiniCacheCache (spec §4.3): a merge layer against merge_token per vector, the primary and a
// cache alone lossless, for_model wiring and roles, validation.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "support/fake_model.h"
#include "support/kv_test_data.h"
#include "veloxquant/cross_layer/minicache_cache.h"
#include "veloxquant/cross_layer/slerp_merge.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

KVCacheConfig minicache_config(double start_frac) {
  KVCacheConfig c;
  c.method = "minicache";
  c.minicache.minicache_start_frac = start_frac;
  return c;
}

TEST(MiniCacheCache, MergeLayerStoresMergedVectorsPrimaryStaysLossless) {
  test_support::FakeModel model;  // 2 attention layers, head_dim 4
  const lm::CacheList caches = KVCacheBuilder::for_model(model, minicache_config(0.0));
  auto primary = std::dynamic_pointer_cast<MiniCacheCache>(caches[0]);
  auto merge = std::dynamic_pointer_cast<MiniCacheCache>(caches[1]);
  ASSERT_TRUE(primary && merge);
  EXPECT_TRUE(primary->is_primary());
  EXPECT_EQ(primary->role().n_readers, 1);
  EXPECT_FALSE(merge->is_primary());
  // Correlated layers: the merge layer's vectors are the primary's plus noise, so both merged
  // and retained tokens occur.
  const lm::Tensor p = test_support::random_kv(1, 1, 64, 4, 1, lm::DType::F32);
  const lm::Tensor noise = test_support::random_kv(1, 1, 64, 4, 2, lm::DType::F32);
  std::vector<float> mv = p.to_f32();
  const std::vector<float> nv = noise.to_f32();
  for (std::size_t i = 0; i < mv.size(); ++i) mv[i] += 0.3f * nv[i];
  const lm::Tensor m = lm::Tensor::from_f32(mv, p.shape(), lm::DType::F32);
  EXPECT_EQ(primary->update_and_fetch(p, p).keys.to_f32(), p.to_f32());
  const std::vector<float> got = merge->update_and_fetch(m, m).keys.to_f32();
  const std::vector<float> pv = p.to_f32();
  int retained = 0;
  for (int64_t t = 0; t < 64; ++t) {
    float want[4];
    retained += cross_layer::merge_token(pv.data() + t * 4, mv.data() + t * 4, 4, 0.9f, 0.5f, want);
    for (int d = 0; d < 4; ++d) EXPECT_EQ(got[t * 4 + d], want[d]) << "token " << t;
  }
  EXPECT_GT(retained, 0);
  EXPECT_LT(retained, 64);
  EXPECT_EQ(merge->retained_vectors(), 2 * retained);  // keys and values alike here
  EXPECT_EQ(merge->merged_vectors(), 2 * (64 - retained));
  // Rows in the input dtype, as lm::FullKVCache: 256 rows x 4 x f32 x (K, V).
  EXPECT_EQ(merge->nbytes(), 256u * 4 * 4 * 2);
  EXPECT_EQ(primary->nbytes(), merge->nbytes());
}

TEST(MiniCacheCache, DefaultStartLeavesTwoLayersAlone) {
  test_support::FakeModel model;  // start = int(2 * 0.5) = 1: layer 0 alone, layer 1 a primary with no partner
  const lm::CacheList caches = KVCacheBuilder::for_model(model, minicache_config(0.5));
  for (const auto& c : caches) {
    auto mc = std::dynamic_pointer_cast<MiniCacheCache>(c);
    ASSERT_TRUE(mc);
    EXPECT_TRUE(mc->is_primary());
    EXPECT_EQ(mc->role().n_readers, 0);
    const lm::Tensor kv = test_support::random_kv(1, 1, 5, 4, 3, lm::DType::F16);
    EXPECT_EQ(c->update_and_fetch(kv, kv).keys.to_f32(), kv.to_f32());
  }
}

TEST(MiniCacheCache, ValidationAsTheOriginal) {
  const auto expect_error_naming = [](auto edit, const std::string& field) {
    KVCacheConfig c;
    c.method = "minicache";
    c.head_dim = 32;
    edit(c);
    try {
      KVCacheBuilder(c).build();
      FAIL() << field;
    } catch (const QuantizerConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_error_naming([](KVCacheConfig& c) { c.minicache.minicache_group_size = 1; }, "minicache_group_size");
  expect_error_naming([](KVCacheConfig& c) { c.minicache.minicache_start_frac = 1.5; }, "minicache_start_frac");
  expect_error_naming([](KVCacheConfig& c) { c.minicache.minicache_slerp_t = -0.1; }, "minicache_slerp_t");
  expect_error_naming([](KVCacheConfig& c) { c.minicache.minicache_max_ctx = 0; }, "minicache_max_ctx");
}

}  // namespace
}  // namespace veloxquant
