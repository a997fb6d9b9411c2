// KVCacheBuilder::for_model and patch_model_kv_cache on a spy model (spec §4.2, §5.1): the
// refusals happen before the model is read, non-attention layers keep the model's native caches
// (from native_make_cache(), never the hook), head_dim and bits are resolved per layer, seeds are
// seed + raw layer index, and the hook builds a fresh list per call.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>

#include "lm/cache/full_kv_cache.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

// A model that records every read. Layer kinds and head_dims are chosen per test.
class SpyModel : public lm::Model {
 public:
  explicit SpyModel(std::vector<lm::LayerInfo> layers, int model_head_dim = 16) : layers_(std::move(layers)) {
    config_.architecture = "spy";
    config_.n_layers = static_cast<int>(layers_.size());
    config_.head_dim = model_head_dim;
    config_.n_heads = 2;
    config_.n_kv_heads = 1;
    config_.dim = 2 * model_head_dim;
  }
  const lm::ModelConfig& config() const override {
    ++reads;
    return config_;
  }
  const std::vector<lm::LayerInfo>& layers() const override {
    ++reads;
    return layers_;
  }
  lm::CacheList native_make_cache() const override {
    ++native_calls;
    lm::CacheList caches;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      auto cache = std::make_shared<lm::FullKVCache>(lm::DType::F32);
      native_objects.insert(cache.get());
      caches.push_back(cache);
    }
    return caches;
  }
  void forward(const std::vector<int32_t>&, lm::CacheList&, std::vector<float>&, std::vector<float>*) const override {}

  mutable int reads = 0;
  mutable int native_calls = 0;
  mutable std::set<const lm::KVCache*> native_objects;

 private:
  lm::ModelConfig config_;
  std::vector<lm::LayerInfo> layers_;
};

lm::LayerInfo attention(int head_dim = 0) {
  lm::LayerInfo l;
  l.head_dim = head_dim;
  return l;
}
lm::LayerInfo recurrent() {
  lm::LayerInfo l;
  l.is_attention = false;
  l.kind = "recurrent";
  return l;
}

KVCacheConfig kivi_config() {
  KVCacheConfig c;
  c.method = "kivi";
  return c;
}

TEST(ForModel, StandaloneMethodsAreRefusedBeforeTheModelIsRead) {
  for (std::string_view method : STANDALONE_METHODS) {
    SpyModel model({attention(), attention()});
    KVCacheConfig c;
    c.method = std::string(method);
    c.bit_width_inlier = std::vector<int>{2, 2, 2};  // also wrong-length: standalone wins (spec §9)
    try {
      KVCacheBuilder::for_model(model, c);
      FAIL() << method << " was not refused";
    } catch (const QuantizerConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(method) + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("standalone"), std::string::npos) << e.what();
    }
    EXPECT_EQ(model.reads, 0) << method;
    EXPECT_EQ(model.native_calls, 0) << method;
  }
}

TEST(ForModel, OneCachePerLayerNativeForNonAttentionLayers) {
  SpyModel model({attention(), recurrent(), attention(8), recurrent()});
  const lm::CacheList caches = KVCacheBuilder::for_model(model, kivi_config());
  ASSERT_EQ(caches.size(), 4u);
  EXPECT_EQ(model.native_calls, 1);
  EXPECT_TRUE(model.native_objects.count(caches[1].get()));
  EXPECT_TRUE(model.native_objects.count(caches[3].get()));
  EXPECT_EQ(caches[1]->type_name(), "FullKVCache");
  EXPECT_EQ(caches[0]->type_name(), "KiviCache");
  EXPECT_EQ(caches[2]->type_name(), "KiviCache");
}

TEST(ForModel, NeverCallsTheInstanceHook) {
  SpyModel model({attention(), recurrent()});
  int hook_calls = 0;
  model.make_cache = [&] {
    ++hook_calls;
    return lm::CacheList{};
  };
  EXPECT_EQ(KVCacheBuilder::for_model(model, kivi_config()).size(), 2u);
  EXPECT_EQ(hook_calls, 0);
  EXPECT_EQ(model.native_calls, 1);
}

TEST(ForModel, PureAttentionModelsNeverBuildNativeCaches) {
  SpyModel model({attention(), attention()});
  KVCacheBuilder::for_model(model, kivi_config());
  EXPECT_EQ(model.native_calls, 0);
}

TEST(ForModel, BitListNeedsOneEntryPerAttentionLayer) {
  SpyModel model({attention(), recurrent(), attention()});
  KVCacheConfig c = kivi_config();
  c.bit_width_inlier = std::vector<int>{2, 3, 4};  // 3 entries, 2 attention layers
  try {
    KVCacheBuilder::for_model(model, c);
    FAIL() << "wrong-length list accepted";
  } catch (const QuantizerConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("3 entries"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("2 attention layers"), std::string::npos) << e.what();
  }
  EXPECT_EQ(model.native_calls, 0);
  c.bit_width_inlier = std::vector<int>{3, 4};
  const lm::CacheList caches = KVCacheBuilder::for_model(model, c);
  EXPECT_EQ(std::dynamic_pointer_cast<KiviCache>(caches[0])->bits(), 3);
  EXPECT_EQ(std::dynamic_pointer_cast<KiviCache>(caches[2])->bits(), 4);
}

TEST(ForModel, HeadDimFromLayerElseModel) {
  SpyModel model({attention(8), attention()}, /*model_head_dim=*/16);
  const lm::CacheList caches = KVCacheBuilder::for_model(model, kivi_config());
  // KIVI records its head_dim in meta_state()[0].
  const std::vector<std::string> meta0 = caches[0]->meta_state();
  const std::vector<std::string> meta1 = caches[1]->meta_state();
  EXPECT_EQ(meta0.at(0), "8");
  EXPECT_EQ(meta1.at(0), "16");
}

TEST(ForModel, BadLayerConfigThrowsTypedError) {
  SpyModel model({attention()});
  KVCacheConfig c = kivi_config();
  c.kivi.residual_length = -1;
  EXPECT_THROW(KVCacheBuilder::for_model(model, c), QuantizerConfigError);
  c = kivi_config();
  c.method = "no_such_method";
  EXPECT_THROW(KVCacheBuilder::for_model(model, c), QuantizerConfigError);
}

TEST(PatchModel, StandaloneLeavesMakeCacheUntouched) {
  SpyModel model({attention()});
  KVCacheConfig c;
  c.method = "qjl";
  EXPECT_THROW(integration::patch_model_kv_cache(model, c), QuantizerConfigError);
  EXPECT_FALSE(static_cast<bool>(model.make_cache));
  EXPECT_EQ(model.reads, 0);
}

TEST(PatchModel, WrongLengthListLeavesMakeCacheUntouched) {
  SpyModel model({attention(), attention()});
  KVCacheConfig c = kivi_config();
  c.bit_width_inlier = std::vector<int>{2};
  EXPECT_THROW(integration::patch_model_kv_cache(model, c), QuantizerConfigError);
  EXPECT_FALSE(static_cast<bool>(model.make_cache));
}

TEST(PatchModel, HookBuildsAFreshListPerCall) {
  SpyModel model({attention(), recurrent(), attention()});
  const lm::CacheList first = integration::patch_model_kv_cache(model, kivi_config());
  ASSERT_TRUE(static_cast<bool>(model.make_cache));
  const lm::CacheList second = lm::make_prompt_cache(model);
  const lm::CacheList third = lm::make_prompt_cache(model);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(second.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_NE(first[i].get(), second[i].get()) << i;
    EXPECT_NE(second[i].get(), third[i].get()) << i;
  }
  EXPECT_EQ(second[0]->type_name(), "KiviCache");
  EXPECT_EQ(second[1]->type_name(), "FullKVCache");
  integration::unpatch_model_kv_cache(model);
  EXPECT_FALSE(static_cast<bool>(model.make_cache));
}

TEST(Builder, FluentSettersAndBuild) {
  KVCacheBuilder builder;
  builder.with_method("kivi").with_head_dim(64).with_bit_width(4).with_seed(7).with_option("residual_length=0");
  EXPECT_EQ(builder.config().method, "kivi");
  EXPECT_EQ(builder.config().head_dim, 64);
  EXPECT_EQ(builder.config().seed, 7);
  EXPECT_EQ(builder.config().kivi.residual_length, 0);
  const BuiltCache cache = builder.build();
  EXPECT_FALSE(cache.is_standalone());
  EXPECT_EQ(cache.serving()->type_name(), "KiviCache");
  EXPECT_THROW(cache.standalone(), QuantizerConfigError);
  // build() runs the power-of-two rule first.
  EXPECT_THROW(KVCacheBuilder().with_method("kivi").with_head_dim(96).build(), QuantizerConfigError);
  const BuiltCache spectral = KVCacheBuilder().with_method("spectral").with_head_dim(16).build();
  EXPECT_TRUE(spectral.is_standalone());
  EXPECT_EQ(spectral.standalone()->method(), "spectral");
}

}  // namespace
}  // namespace veloxquant

namespace veloxquant {
namespace {

// turboquant_block's key_bits / value_bits as per-attention-layer lists (per_layer_lists.h):
// parsed from --set, resolved by for_model per attention layer, and refused with the option's
// name when a list has the wrong length, an entry out of range, or is given to a single cache.
KVCacheConfig block_config() {
  KVCacheConfig c;
  c.method = "turboquant_block";
  c.bit_width_inlier = 3;
  return c;
}

std::string config_error(const std::function<void()>& run) {
  try {
    run();
  } catch (const QuantizerConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(PerLayerLists, KeyAndValueBitsResolvePerAttentionLayer) {
  SpyModel model({attention(), recurrent(), attention(), attention()});
  KVCacheConfig c = block_config();
  apply_field_assignment(c, "key_bits=5,3,4");
  apply_field_assignment(c, "value_bits=[2, 0, 3]");  // 0 follows bit_width_inlier (3)
  ASSERT_TRUE(c.turboquant_block.key_bits.is_list());
  const lm::CacheList caches = KVCacheBuilder::for_model(model, c);
  const std::vector<std::pair<int, int>> want = {{5, 2}, {3, 3}, {4, 3}};
  std::size_t attention_index = 0;
  for (std::size_t i = 0; i < caches.size(); ++i) {
    if (i == 1) {
      EXPECT_EQ(caches[i]->type_name(), "FullKVCache");
      continue;
    }
    auto block = std::dynamic_pointer_cast<TurboQuantBlockCache>(caches[i]);
    ASSERT_TRUE(block) << i;
    EXPECT_EQ(block->key_bits(), want[attention_index].first) << i;
    EXPECT_EQ(block->value_bits(), want[attention_index].second) << i;
    ++attention_index;
  }
  validate_per_layer_config(c);  // every layer valid without a model
}

TEST(PerLayerLists, WrongLengthNamesTheOption) {
  SpyModel model({attention(), attention()});
  KVCacheConfig c = block_config();
  c.turboquant_block.key_bits = std::vector<int>{3, 4, 5};
  const std::string e = config_error([&] { KVCacheBuilder::for_model(model, c); });
  EXPECT_NE(e.find("key_bits list [3, 4, 5] has 3 entries but the model has 2 attention layers"), std::string::npos)
      << e;
  c.turboquant_block.key_bits = std::vector<int>{3, 4};
  c.turboquant_block.value_bits = std::vector<int>{3};
  const std::string v = config_error([&] { KVCacheBuilder::for_model(model, c); });
  EXPECT_NE(v.find("value_bits list [3] has 1 entries but the model has 2"), std::string::npos) << v;
  // Without a model: lists of different lengths are named together.
  const std::string both = config_error([&] { validate_per_layer_config(c); });
  EXPECT_NE(both.find("key_bits has 2 per-layer entries but value_bits has 1"), std::string::npos) << both;
}

TEST(PerLayerLists, EntriesOutOfRangeNameTheOption) {
  KVCacheConfig c = block_config();
  const std::string high = config_error([&] { apply_field_assignment(c, "key_bits=3,9,3"); });
  EXPECT_NE(high.find("key_bits must lie in [0, 8], got 9"), std::string::npos) << high;
  const std::string low = config_error([&] { apply_field_assignment(c, "value_bits=3,-1"); });
  EXPECT_NE(low.find("value_bits must lie in [0, 8], got -1"), std::string::npos) << low;
  const std::string text = config_error([&] { apply_field_assignment(c, "key_bits=3,x"); });
  EXPECT_NE(text.find("field 'key_bits' expects an integer, got 'x'"), std::string::npos) << text;
  // Set directly (bypassing --set parsing): validation still names option and layer.
  c.turboquant_block.key_bits = std::vector<int>{3, 12};
  const std::string direct = config_error([&] { validate_per_layer_config(c); });
  EXPECT_NE(direct.find("key_bits must lie in [0, 8], got 12"), std::string::npos) << direct;
  EXPECT_NE(direct.find("(attention layer 1)"), std::string::npos) << direct;
  SpyModel model({attention(), attention()});
  EXPECT_NE(config_error([&] { KVCacheBuilder::for_model(model, c); }).find("key_bits must lie in [0, 8], got 12"),
            std::string::npos);
}

TEST(PerLayerLists, ASingleCacheTakesOneInt) {
  KVCacheConfig c = block_config();
  c.head_dim = 64;
  c.turboquant_block.value_bits = std::vector<int>{3, 4};
  const std::string e = config_error([&] { KVCacheBuilder(c).build(); });
  EXPECT_NE(e.find("value_bits [3, 4] is list-form"), std::string::npos) << e;
}

TEST(PerLayerLists, ListsWithZeroEntriesReadTheBitWidth) {
  const MethodDescriptor& method = require_method("turboquant_block");
  KVCacheConfig c = block_config();
  c.turboquant_block.key_bits = std::vector<int>{3, 4};
  c.turboquant_block.value_bits = std::vector<int>{3, 3};
  EXPECT_FALSE(method.reads_bit_width(c));
  c.turboquant_block.value_bits = std::vector<int>{3, 0};
  EXPECT_TRUE(method.reads_bit_width(c));
}

}  // namespace
}  // namespace veloxquant
