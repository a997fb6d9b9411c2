// The tiny Lfm2ForCausalLM of tools/reference/hf/make_lfm2.py — a hybrid of gated
// short-convolution layers (0 and 2) and GQA attention layers (1 and 3), vocabulary 512 —
// against transformers' float32 logits and greedy tokens; and the hybrid's promise to
// KVCacheBuilder::for_model (spec §4.2 step 3): under every registered method, the conv layers
// keep their native lm::ConvStateCache and the model still computes.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <set>

#include "base/error.h"
#include "hf_fixture.h"
#include "lm/cache/conv_state_cache.h"
#include "lm/cache/full_kv_cache.h"
#include "lm/cache/kv_type_caches.h"
#include "lm/cache/prompt_cache_file.h"
#include "veloxquant/errors.h"
#include "veloxquant/registry/method_registry.h"

namespace {

// Measured: max |dlogit| 1.9e-5 (one forward, chunked prefill and token by token alike), mean
// 2.6e-6, on logits of std 2.8; transformers' own float32-vs-float64 spread on this model is
// 1.6e-5. Bounds: 1e-4 max (6x transformers' rounding spread, 160x below the smallest
// top-1/top-2 gap of the passage, 0.016), 1e-5 mean. The conv taps read in reverse order give
// max |dlogit| 16 and top-1 0/64 (checked).
// Compressed caches (on the 2 attention layers), top-1 agreement with lm's native caches over the
// 80 positions, measured: turboquant_rvq 4-bit 77/80, kivi 4-bit 79/80, h2o (budget 48) 75/80;
// floors a few tokens lower. Production settings (hf_fixture.h's defaults, 0.2 and 62/64),
// measured: f16 KV 0.0026, q8_0 KV 0.064 max |dlogit|, both 64/64 (the conv states are f32
// whatever the KV type).
constexpr hf_fixture::Tolerance kTolerance{1e-4, 1e-5, 0.92, 0.93, 0.85};

HF_FAMILY_TESTS(HfLfm2, "lfm2", kTolerance)

constexpr bool kConvLayer[] = {true, false, true, false};

TEST_F(HfLfm2, ConfigAndLayersAreTheFixtures) {
  const lm::ModelConfig& c = model_->model->config();
  EXPECT_EQ(c.architecture, "lfm2");
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.dim, 128);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);  // of the attention layers; the file's array has 0 on conv layers
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.hidden_dim, 192);
  const auto& layers = model_->model->layers();
  ASSERT_EQ(layers.size(), 4u);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    EXPECT_EQ(layers[l].is_attention, !kConvLayer[l]) << l;
    EXPECT_EQ(layers[l].kind, kConvLayer[l] ? "shortconv" : "attention") << l;
  }
  // Native caches, for the float types and llama.cpp's block types alike: the conv state on conv
  // layers (L-1 = 2 rows of 128 channels, whatever the KV type), a KV cache on the others.
  for (const lm::KVCacheType type : {lm::KVCacheType::F16, lm::KVCacheType::F32, lm::KVCacheType::Q8_0}) {
    const lm::CacheList caches = lm::make_kv_type_caches(*model_->model, type);
    ASSERT_EQ(caches.size(), 4u);
    for (std::size_t l = 0; l < caches.size(); ++l) {
      const auto* state = dynamic_cast<const lm::ConvStateCache*>(caches[l].get());
      EXPECT_EQ(state != nullptr, kConvLayer[l]) << l << " " << caches[l]->type_name();
      if (state) {
        EXPECT_EQ(state->channels(), 128);
        EXPECT_EQ(state->kernel_size(), 3);
        EXPECT_EQ(state->nbytes(), 2u * 128u * 4u);
      }
    }
  }
}

// Every token through its own forward: the decode path, where each conv layer's output depends
// on the two inputs its state carried over from earlier calls.
TEST_F(HfLfm2, TokenByTokenDecodeMatchesTransformersLogits) {
  const lm::Model& model = *model_->model;
  lm::CacheList caches = model.native_make_cache();
  std::vector<float> all, last;
  for (int32_t token : fx_->tokens) {
    model.forward({token}, caches, last);
    all.insert(all.end(), last.begin(), last.end());
  }
  const auto d = hf_fixture::compare(all, fx_->logits, fx_->vocab);
  hf_fixture::report("lfm2 token by token vs transformers", d);
  EXPECT_LE(d.max_abs, kTolerance.max_abs);
  EXPECT_LE(d.mean_abs(), kTolerance.mean_abs);
  EXPECT_EQ(d.top1_same, d.positions);
  EXPECT_EQ(caches[0]->offset(), static_cast<int64_t>(fx_->tokens.size()));
}

// A prompt cache saved half way (conv states and KV rows in one file) continues exactly as the
// caches that never left memory, and a clone made half way does too.
TEST_F(HfLfm2, SavedAndClonedCachesContinueIdentically) {
  const lm::Model& model = *model_->model;
  const std::vector<int32_t> head(fx_->tokens.begin(), fx_->tokens.begin() + 40);
  const std::vector<int32_t> tail(fx_->tokens.begin() + 40, fx_->tokens.end());
  lm::CacheList caches = model.native_make_cache();
  std::vector<float> last, all;
  model.forward(head, caches, last);
  lm::CacheList cloned;
  for (const auto& c : caches) cloned.push_back(c->clone());
  const auto path = std::filesystem::temp_directory_path() / "hf_lfm2_test.vqpc";
  lm::save_prompt_cache(path.string(), lm::PromptCache{caches, head});
  lm::CacheList loaded = lm::load_prompt_cache(path.string()).cache.caches;
  std::filesystem::remove(path);
  ASSERT_EQ(loaded[0]->type_name(), "ConvStateCache");

  std::vector<float> want;
  model.forward(tail, caches, last, &want);
  for (lm::CacheList* other : {&cloned, &loaded}) {
    model.forward(tail, *other, last, &all);
    EXPECT_EQ(all, want);
  }
}

// A list built for another model (or a hook that ignores non-attention layers) is refused by
// name, not run: a KV cache where the conv state belongs, and the other way round.
TEST_F(HfLfm2, WrongCacheKindsAreClearErrors) {
  const lm::Model& model = *model_->model;
  std::vector<float> last;
  lm::CacheList kv_on_conv = model.native_make_cache();
  kv_on_conv[2] = std::make_shared<lm::FullKVCache>();
  try {
    model.forward({1, 2, 3}, kv_on_conv, last);
    FAIL() << "a FullKVCache served a conv layer";
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ConvStateCache"), std::string::npos) << e.what();
  }
  lm::CacheList state_on_attention = model.native_make_cache();
  state_on_attention[1] = std::make_shared<lm::ConvStateCache>(128, 3);
  EXPECT_THROW(model.forward({1, 2, 3}, state_on_attention, last), base::InvalidArgument);
}

bool is_conv_state(const lm::KVCache& cache) { return dynamic_cast<const lm::ConvStateCache*>(&cache) != nullptr; }

// Spec §4.2 step 3 on a real architecture: whatever the method — per-layer quantizers, eviction,
// cross-layer coordinators (xquant, minicache, xkv, squeeze, pyramidkv, cachegen, chunkkv…) —
// for_model gives the conv layers their ConvStateCache and the attention layers the method's
// cache, and the model runs: a 24-token prefill then 8 single-token steps with finite logits.
// Layer 0 comes first, so its state depends on no method at all: it must end bit-identical to
// the native run's. Methods that refuse this model must say why (QuantizerConfigError); the
// three of the done-when must not refuse.
TEST_F(HfLfm2, ConvLayersKeepTheirStateUnderEveryMethod) {
  const lm::Model& model = *model_->model;
  const std::vector<int32_t> prefill(fx_->tokens.begin(), fx_->tokens.begin() + 24);
  const std::vector<int32_t> decode(fx_->tokens.begin() + 24, fx_->tokens.begin() + 32);
  const auto run = [&](lm::CacheList& caches) {
    std::vector<float> last, logits;
    model.forward(prefill, caches, last, &logits);
    for (int32_t t : decode) {
      model.forward({t}, caches, last);
      logits.insert(logits.end(), last.begin(), last.end());
    }
    return logits;
  };
  lm::CacheList native = model.native_make_cache();
  run(native);
  const auto& native_state = dynamic_cast<const lm::ConvStateCache&>(*native[0]).history();

  const std::set<std::string> must_run = {"turboquant_rvq", "kivi", "h2o"};
  int checked = 0, refused = 0, standalone = 0;
  for (const veloxquant::MethodDescriptor& method : veloxquant::method_registry()) {
    veloxquant::KVCacheConfig config;
    config.method = method.name;
    lm::CacheList caches;
    try {
      caches = veloxquant::KVCacheBuilder::for_model(model, config);
    } catch (const veloxquant::QuantizerConfigError& e) {
      EXPECT_FALSE(must_run.count(method.name)) << method.name << " refused: " << e.what();
      EXPECT_NE(std::string(e.what()).size(), 0u) << method.name;
      (veloxquant::is_standalone_method(method.name) ? standalone : refused) += 1;
      std::cout << "[hf] lfm2 " << method.name << " refused: " << e.what() << std::endl;
      continue;
    }
    ASSERT_EQ(caches.size(), 4u) << method.name;
    for (std::size_t l = 0; l < caches.size(); ++l) {
      ASSERT_TRUE(caches[l]) << method.name << " layer " << l;
      EXPECT_EQ(is_conv_state(*caches[l]), kConvLayer[l])
          << method.name << " layer " << l << ": " << caches[l]->type_name();
    }
    std::vector<float> logits;
    try {
      logits = run(caches);
    } catch (const std::exception& e) {
      ADD_FAILURE() << method.name << " built caches for lfm2 but the forward failed: " << e.what();
      continue;
    }
    bool finite = true;
    for (float v : logits) finite = finite && std::isfinite(v);
    EXPECT_TRUE(finite) << method.name;
    EXPECT_EQ(caches[0]->offset(), 32) << method.name;
    EXPECT_EQ(dynamic_cast<const lm::ConvStateCache&>(*caches[0]).history(), native_state) << method.name;
    EXPECT_EQ(caches[2]->offset(), 32) << method.name;
    ++checked;
  }
  std::cout << "[hf] lfm2 methods: " << checked << " ran with the conv states in place, " << refused
            << " refused the model, " << standalone << " standalone (refused by design)" << std::endl;
  EXPECT_EQ(standalone, static_cast<int>(veloxquant::STANDALONE_METHODS.size()));
  EXPECT_GE(checked, 3);
}

}  // namespace
