// patch_vlm_kv_cache (spec §5.2) and KVCacheBuilder::for_model on a vision-language wrapper
// (§4.2 steps 2 and 4): first on small stand-in models whose every read is visible, then on
// the transformers-verified LLaVA fixture (tests/fixtures/reference/hf/llava_tiny.*),
// generating from its image twice with fresh compressed caches.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "lm/cache/full_kv_cache.h"
#include "lm/vlm/vision_language_model.h"
#include "lm/vlm/vlm_generate.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

// A text model: attention, a recurrent block (native cache), attention.
class TextModel : public lm::Model {
 public:
  TextModel() {
    config_.architecture = "text";
    config_.n_layers = 3;
    config_.head_dim = 16;
    config_.n_heads = 2;
    config_.n_kv_heads = 1;
    config_.dim = 32;
    layers_.resize(3);
    layers_[1].is_attention = false;
    layers_[1].kind = "recurrent";
  }
  const lm::ModelConfig& config() const override { return config_; }
  const std::vector<lm::LayerInfo>& layers() const override { return layers_; }
  lm::CacheList native_make_cache() const override {
    ++native_calls;
    lm::CacheList caches;
    for (std::size_t i = 0; i < layers_.size(); ++i)
      caches.push_back(std::make_shared<lm::FullKVCache>(lm::DType::F32));
    return caches;
  }
  void forward(const std::vector<int32_t>&, lm::CacheList&, std::vector<float>&, std::vector<float>*) const override {}
  mutable int native_calls = 0;
  lm::ModelConfig config_;
  std::vector<lm::LayerInfo> layers_;
};

// A vision-language wrapper as LLaVA's: no layers of its own, no sizes in its config (only the
// text config has them), the text model behind language_model(). `own_layers` makes it a
// Qwen2-VL-like wrapper that exposes decoder layers at the top (head_dim left to the config).
class Wrapper : public lm::Model {
 public:
  explicit Wrapper(int own_layers = 0) {
    config_.architecture = "wrapper";
    layers_.resize(static_cast<std::size_t>(own_layers));
    for (auto& l : layers_) l.head_dim = 0;
  }
  const lm::ModelConfig& config() const override { return config_; }
  const std::vector<lm::LayerInfo>& layers() const override { return layers_; }
  lm::CacheList native_make_cache() const override { return text.native_make_cache(); }
  void forward(const std::vector<int32_t>&, lm::CacheList&, std::vector<float>&, std::vector<float>*) const override {}
  const lm::Model* language_model() const override { return &text; }
  lm::Model* language_model() override { return &text; }
  TextModel text;
  lm::ModelConfig config_;
  std::vector<lm::LayerInfo> layers_;
};

KVCacheConfig config_for(const std::string& method) {
  KVCacheConfig c;
  c.method = method;
  return c;
}

// What patch_vlm_kv_cache logs while `call` runs.
template <class Call>
std::string logged(Call&& call) {
  base::set_log_level(base::LogLevel::kInfo);
  testing::internal::CaptureStderr();
  try {
    call();
  } catch (...) {
    testing::internal::GetCapturedStderr();
    throw;
  }
  return testing::internal::GetCapturedStderr();
}

TEST(PatchVlm, TextModelIsRefusedWithAPointerToPatchModel) {
  TextModel text;
  try {
    integration::patch_vlm_kv_cache(text, config_for("kivi"));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("patch_model_kv_cache"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no language model"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(static_cast<bool>(text.make_cache));
}

TEST(PatchVlm, EvictionMethodsWarnThatImageTokensMayBeEvicted) {
  // The original's list (spec §5.2); every one registered here must warn.
  const std::vector<std::string> eviction = {"snapkv", "streaming_llm", "h2o",     "tova",  "pyramidkv", "chunkkv",
                                             "cam",    "keyformer",     "morphkv", "kvzip", "squeeze",   "qfilters"};
  int checked = 0;
  for (const std::string& method : eviction) {
    if (!find_method(method)) continue;
    ++checked;
    EXPECT_TRUE(integration::method_evicts_tokens(method)) << method;
    Wrapper vlm;
    const std::string log = logged([&] { integration::patch_vlm_kv_cache(vlm, config_for(method)); });
    EXPECT_NE(log.find("image tokens in the prompt prefix may be evicted"), std::string::npos) << method << ": " << log;
    EXPECT_NE(log.find("pure quantizers"), std::string::npos) << method << ": " << log;
  }
  EXPECT_EQ(checked, 12);
  for (const std::string method : {"turboquant_rvq", "kivi", "turboquant_block"}) {
    EXPECT_FALSE(integration::method_evicts_tokens(method)) << method;
    Wrapper vlm;
    const std::string log = logged([&] { integration::patch_vlm_kv_cache(vlm, config_for(method)); });
    EXPECT_EQ(log.find("evict"), std::string::npos) << method << ": " << log;
  }
}

TEST(PatchVlm, StandaloneMethodIsRefusedBeforeAnythingChanges) {
  Wrapper vlm;
  for (const std::string method : {"qjl", "turboquant_prod", "polar"}) {
    EXPECT_THROW(integration::patch_vlm_kv_cache(vlm, config_for(method)), QuantizerConfigError) << method;
    EXPECT_FALSE(static_cast<bool>(vlm.make_cache));
    EXPECT_FALSE(static_cast<bool>(vlm.text.make_cache));
  }
  // A wrong-length bit list: refused by the eager build too.
  KVCacheConfig c = config_for("kivi");
  c.bit_width_inlier = std::vector<int>{2, 4, 4};  // 2 attention layers
  EXPECT_THROW(integration::patch_vlm_kv_cache(vlm, c), QuantizerConfigError);
  EXPECT_FALSE(static_cast<bool>(vlm.text.make_cache));
}

TEST(PatchVlm, HookOnTheLanguageModelOnlyFreshPerCallAndFirstListReturned) {
  Wrapper vlm;
  std::string log;
  lm::CacheList first;
  log = logged([&] { first = integration::patch_vlm_kv_cache(vlm, config_for("kivi")); });
  EXPECT_NE(log.find("Wired 3 layer cache(s) with 'kivi' on the language model (fresh per call)"), std::string::npos)
      << log;
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0]->type_name(), "KiviCache");
  EXPECT_EQ(first[1]->type_name(), "FullKVCache");  // the recurrent slot keeps its native cache
  EXPECT_EQ(first[2]->type_name(), "KiviCache");
  EXPECT_FALSE(static_cast<bool>(vlm.make_cache)) << "the wrapper's own hook is left alone";
  ASSERT_TRUE(static_cast<bool>(vlm.text.make_cache));
  const lm::CacheList second = lm::make_prompt_cache(vlm.text);
  const lm::CacheList third = lm::make_prompt_cache(vlm.text);
  ASSERT_EQ(second.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_NE(first[i].get(), second[i].get()) << i;
    EXPECT_NE(second[i].get(), third[i].get()) << i;
  }
  EXPECT_EQ(second[2]->type_name(), "KiviCache");
  integration::unpatch_vlm_kv_cache(vlm);
  EXPECT_FALSE(static_cast<bool>(vlm.text.make_cache));
  EXPECT_EQ(lm::make_prompt_cache(vlm.text)[0]->type_name(), "FullKVCache");
}

TEST(ForModelOnAWrapper, FindsTheLanguageModelsLayersAndArguments) {
  Wrapper vlm;
  const lm::CacheList caches = KVCacheBuilder::for_model(vlm, config_for("kivi"));
  ASSERT_EQ(caches.size(), 3u);  // the language model's layers (step 2)
  EXPECT_EQ(caches[0]->type_name(), "KiviCache");
  EXPECT_EQ(caches[1]->type_name(), "FullKVCache");
  EXPECT_EQ(vlm.text.native_calls, 1);  // the recurrent slot, from the language model's own factory
  // A bit-width list is counted over the language model's attention layers.
  KVCacheConfig c = config_for("kivi");
  c.bit_width_inlier = std::vector<int>{2, 4};
  EXPECT_EQ(KVCacheBuilder::for_model(vlm, c).size(), 3u);
}

TEST(ForModelOnAWrapper, AWrapperWithLayersButNoSizesTakesTheLanguageModelsArguments) {
  // Step 4: the wrapper exposes two attention layers (head_dim unset) and a config without
  // sizes; head_dim comes from the language model's config (16).
  Wrapper vlm(2);
  const lm::CacheList caches = KVCacheBuilder::for_model(vlm, config_for("turboquant_rvq"));
  ASSERT_EQ(caches.size(), 2u);
  // A cache made for head_dim 16 takes [1, 1, 1, 16] rows.
  lm::Tensor k({1, 1, 1, 16}, lm::DType::F16), v({1, 1, 1, 16}, lm::DType::F16);
  EXPECT_NO_THROW(caches[0]->update_and_fetch(k, v));
  lm::Tensor wrong({1, 1, 1, 32}, lm::DType::F16);
  EXPECT_ANY_THROW(caches[1]->update_and_fetch(wrong, wrong));
}

// --- the LLaVA fixture: a real VisionLanguageModel ------------------------------------------

namespace fs = std::filesystem;
const fs::path kHf = fs::path(VQ_SOURCE_DIR) / "tests/fixtures/reference/hf";

TEST(PatchVlmOnLlava, GeneratesFromAnImageTwiceWithFreshCompressedCaches) {
  std::ifstream in(kHf / "llava_tiny.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  lm::LoadOptions options;
  options.threads = 1;
  auto loaded = lm::load_vision_language_model((kHf / "llava_tiny.gguf").string(),
                                               (kHf / "llava_tiny.mmproj.gguf").string(), options);
  lm::VisionLanguageModel& vlm = *loaded.model;
  const lm::RgbImage image = lm::load_image((kHf / "llava_tiny.png").string());
  const lm::VlmPrompt prompt = lm::build_vlm_prompt(vlm, *loaded.tokenizer, meta.at("prompt"), {image});

  KVCacheConfig config = config_for("turboquant_rvq");
  config.bit_width_inlier = 8;
  const lm::CacheList first = integration::patch_vlm_kv_cache(vlm, config);
  EXPECT_EQ(first.size(), 2u);

  std::vector<std::vector<int32_t>> answers;
  std::vector<std::shared_ptr<lm::KVCache>> seen;  // held, so no address is reused by the next run
  std::set<std::string> types;
  for (int run = 0; run < 2; ++run) {
    lm::GenerateOptions gen;
    gen.max_tokens = 6;
    gen.on_prompt_processed = [&](const lm::PromptCache& state) {
      for (const auto& cache : state.caches) {
        seen.push_back(cache);
        types.insert(cache->type_name());
        EXPECT_EQ(cache->offset(), static_cast<int64_t>(prompt.tokens.size()));  // image rows + text, fresh
      }
    };
    std::vector<int32_t> tokens;
    const lm::GenerationStats stats =
        lm::stream_generate(vlm, *loaded.tokenizer, prompt, gen, [&](const lm::GenerationChunk& c) {
          if (c.token >= 0) tokens.push_back(c.token);
          return true;
        });
    EXPECT_GT(stats.kv_bytes_resident, 0u);
    answers.push_back(tokens);
  }
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(std::set<std::shared_ptr<lm::KVCache>>(seen.begin(), seen.end()).size(), 4u)
      << "each generation gets fresh caches";
  for (const auto& cache : seen) {
    for (const auto& f : first) EXPECT_NE(cache.get(), f.get());
  }
  EXPECT_EQ(types, std::set<std::string>{first[0]->type_name()});
  EXPECT_NE(first[0]->type_name(), "FullKVCache");
  EXPECT_EQ(answers[0], answers[1]);
  EXPECT_EQ(answers[0].size(), 6u);
}

// KL of the language model's next-token distribution over an image prompt, compressed cache
// against the native one (eval-style, every position after the image), on the fixture model.
double image_prompt_kl(lm::VisionLanguageModel& vlm, const lm::VlmPrompt& prompt, const KVCacheConfig& config) {
  const int64_t dim = vlm.config().dim, n = static_cast<int64_t>(prompt.tokens.size());
  std::vector<float> emb(static_cast<std::size_t>(n * dim));
  vlm.embed_tokens(prompt.tokens, emb.data());
  for (int64_t t = 0; t < n; ++t) {
    if (prompt.image_row[t] >= 0) std::copy_n(&prompt.image_rows[prompt.image_row[t] * dim], dim, &emb[t * dim]);
  }
  // Token by token, so every position reads the cache (prefill would attend within the chunk).
  const auto run = [&](lm::CacheList caches) {
    std::vector<float> all, last;
    for (int64_t t = 0; t < n; ++t) {
      vlm.forward_embeddings(&emb[t * dim], 1, caches, last);
      all.insert(all.end(), last.begin(), last.end());
    }
    return all;
  };
  const std::vector<float> native = run(vlm.language_model()->native_make_cache());
  const std::vector<float> compressed = run(KVCacheBuilder::for_model(vlm, config));
  const int64_t vocab = vlm.config().vocab_size;
  double kl = 0.0;
  int64_t counted = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (prompt.image_row[t] >= 0) continue;  // positions of the text that follows the image
    const auto log_softmax = [&](const std::vector<float>& v) {
      std::vector<double> out(v.begin() + t * vocab, v.begin() + (t + 1) * vocab);
      const double m = *std::max_element(out.begin(), out.end());
      double s = 0.0;
      for (double x : out) s += std::exp(x - m);
      for (double& x : out) x = x - m - std::log(s);
      return out;
    };
    const auto p = log_softmax(native), q = log_softmax(compressed);
    for (int64_t i = 0; i < vocab; ++i) kl += std::exp(p[i]) * (p[i] - q[i]);
    ++counted;
  }
  return kl / static_cast<double>(counted);
}

TEST(PatchVlmOnLlava, CompressedLanguageModelCacheStaysCloseOnAnImagePrompt) {
  std::ifstream in(kHf / "llava_tiny.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  lm::LoadOptions options;
  options.threads = 1;
  auto loaded = lm::load_vision_language_model((kHf / "llava_tiny.gguf").string(),
                                               (kHf / "llava_tiny.mmproj.gguf").string(), options);
  const lm::VlmPrompt prompt = lm::build_vlm_prompt(*loaded.model, *loaded.tokenizer, meta.at("prompt"),
                                                    {lm::load_image((kHf / "llava_tiny.png").string())});
  KVCacheConfig q8 = config_for("turboquant_rvq"), q2 = config_for("turboquant_rvq");
  q8.bit_width_inlier = 8;
  q2.bit_width_inlier = 2;
  const double kl8 = image_prompt_kl(*loaded.model, prompt, q8);
  const double kl2 = image_prompt_kl(*loaded.model, prompt, q2);
  std::cout << "[llava image prompt] KL vs native cache: turboquant_rvq 8 bits " << kl8 << ", 2 bits " << kl2 << "\n";
  EXPECT_LT(kl8, 1e-3);
  EXPECT_GT(kl2, kl8);  // fewer bits, further from the native cache: the measurement can tell
}

}  // namespace
}  // namespace veloxquant
