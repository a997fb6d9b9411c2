// The Idefics3 / SmolVLM path (SigLIP tower + pixel-shuffle connector + llama) against
// transformers' Idefics3ForConditionalGeneration (tools/reference/hf/make_smolvlm.py:
// tests/fixtures/reference/hf/smolvlm_tiny.*). Same discipline as llava_reference_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string_view>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lm/vlm/vision_language_model.h"
#include "lm/vlm/vlm_generate.h"

namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(VQ_SOURCE_DIR) / "tests/fixtures/reference/hf";

nlohmann::json meta() {
  std::ifstream in(kDir / "smolvlm_tiny.json");
  return nlohmann::json::parse(in);
}

lm::LoadedVisionLanguageModel load_reference() {
  lm::LoadOptions options;
  options.kv_type = lm::KVCacheType::F32;
  options.i16_activations = false;
  options.threads = 1;
  return lm::load_vision_language_model((kDir / "smolvlm_tiny.gguf").string(),
                                        (kDir / "smolvlm_tiny.mmproj.gguf").string(), options);
}

// transformers' pixel_shuffle spelled out step by step on index arithmetic: view
// [H, W, E] -> [H, W/s, E*s], permute (1, 0, 2), reshape [W/s, H/s, E*s*s], permute (1, 0, 2),
// reshape [H*W/s^2, E*s*s]. Each step materialised, as torch's .reshape of a permuted tensor does.
std::vector<float> shuffle_like_torch(const std::vector<float>& x, int side, int e, int s) {
  const int h = side, w = side;
  // a[h][w2][e2] = x viewed as [H, W/s, E*s] (contiguous view, same memory).
  // b = a.permute(1, 0, 2): b[w2][h][e2] = a[h][w2][e2], materialised.
  std::vector<float> b(x.size());
  for (int hi = 0; hi < h; ++hi)
    for (int w2 = 0; w2 < w / s; ++w2)
      for (int e2 = 0; e2 < e * s; ++e2)
        b[(static_cast<std::size_t>(w2) * h + hi) * e * s + e2] =
            x[(static_cast<std::size_t>(hi) * (w / s) + w2) * e * s + e2];
  // c = b viewed as [W/s, H/s, E*s*s]; d = c.permute(1, 0, 2): d[h2][w2][e4] = c[w2][h2][e4].
  std::vector<float> d(x.size());
  const int e4n = e * s * s;
  for (int w2 = 0; w2 < w / s; ++w2)
    for (int h2 = 0; h2 < h / s; ++h2)
      for (int e4 = 0; e4 < e4n; ++e4)
        d[(static_cast<std::size_t>(h2) * (w / s) + w2) * e4n + e4] =
            b[(static_cast<std::size_t>(w2) * (h / s) + h2) * e4n + e4];
  return d;  // [H/s * W/s, E*s*s]
}

TEST(SmolVlmReference, PixelShuffleEqualsTransformersSteps) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  for (const auto& [side, e, s] :
       {std::tuple{4, 3, 2}, std::tuple{6, 5, 3}, std::tuple{8, 2, 2}, std::tuple{8, 4, 4}}) {
    std::vector<float> x(static_cast<std::size_t>(side) * side * e);
    for (float& v : x) v = g(rng);
    EXPECT_EQ(lm::pixel_shuffle(x, side, e, s), shuffle_like_torch(x, side, e, s)) << side << " " << e << " " << s;
  }
}

TEST(SmolVlmReference, LogitsAndGreedyMatchTransformers) {
  const nlohmann::json m = meta();
  auto loaded = load_reference();
  EXPECT_EQ(loaded.model->projector().kind(), "idefics3");
  EXPECT_EQ(loaded.model->tokens_per_image(), m.at("n_image_tokens").get<int64_t>());
  const lm::VlmPrompt prompt =
      lm::build_vlm_prompt(*loaded.model, *loaded.tokenizer, m.at("prompt"),
                           {lm::load_image((kDir / m.at("image").get<std::string>()).string())});
  const auto expected_ids = m.at("tokens").get<std::vector<int32_t>>();
  ASSERT_EQ(prompt.tokens.size(), expected_ids.size());
  for (std::size_t t = 0; t < expected_ids.size(); ++t) {
    if (expected_ids[t] != m.at("image_token_id").get<int32_t>()) {
      EXPECT_EQ(prompt.tokens[t], expected_ids[t]) << t;
    }
  }

  const int64_t dim = loaded.model->config().dim, n = static_cast<int64_t>(prompt.tokens.size());
  std::vector<float> emb(static_cast<std::size_t>(n * dim));
  loaded.model->embed_tokens(prompt.tokens, emb.data());
  for (int64_t t = 0; t < n; ++t) {
    if (prompt.image_row[t] >= 0) std::copy_n(&prompt.image_rows[prompt.image_row[t] * dim], dim, &emb[t * dim]);
  }
  lm::CacheList caches = loaded.model->native_make_cache();
  std::vector<float> last, all;
  loaded.model->forward_embeddings(emb.data(), n, caches, last, &all);

  std::vector<float> reference(all.size());
  std::ifstream lin(kDir / m.at("logits_file").get<std::string>(), std::ios::binary);
  lin.read(reinterpret_cast<char*>(reference.data()), static_cast<std::streamsize>(reference.size() * sizeof(float)));
  ASSERT_EQ(lin.gcount(), static_cast<std::streamsize>(reference.size() * sizeof(float)));
  double max_abs = 0.0;
  for (std::size_t i = 0; i < all.size(); ++i)
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(all[i] - reference[i])));
  std::cout << "[smolvlm] max |lm - transformers| = " << max_abs
            << " (transformers f32 vs f64: " << m.at("f32_vs_f64").at("max_abs").get<double>()
            << "; another image moves logits by " << m.at("inverted_image_max_logit_change").get<double>() << ")\n";
  // Stated tolerance as for LLaVA: 1e-4 absolute, against logits that another image moves by ~18.
  EXPECT_LT(max_abs, 1e-4);

  const auto greedy = m.at("greedy").get<std::vector<int32_t>>();
  lm::GenerateOptions options;
  options.max_tokens = static_cast<int>(greedy.size());
  std::vector<int32_t> got;
  lm::stream_generate(*loaded.model, *loaded.tokenizer, prompt, options, [&](const lm::GenerationChunk& c) {
    if (c.token >= 0) got.push_back(c.token);
    return true;
  });
  EXPECT_EQ(got, greedy);
}

TEST(SmolVlmReference, ImagesOfOtherSizesAreFittedAndPadded) {
  auto loaded = load_reference();
  // 64x16: scaled to 32x8, centred in black rows; the model takes it (16 image rows).
  lm::RgbImage wide{64, 16, std::vector<uint8_t>(std::size_t{64} * 16 * 3, 200)};
  const lm::RgbImage fitted = lm::resize_to_fit_and_pad(wide, 32);
  EXPECT_EQ(fitted.width, 32);
  EXPECT_EQ(fitted.height, 32);
  EXPECT_EQ(fitted.at(16, 0, 0), 0);     // padding
  EXPECT_EQ(fitted.at(16, 15, 0), 200);  // the image, centred (rows 12..19)
  EXPECT_EQ(fitted.at(16, 31, 0), 0);
  EXPECT_EQ(loaded.model->embed_image(wide).size(), static_cast<std::size_t>(16 * loaded.model->config().dim));
}

// A vocabulary where SmolVLM's image tokens are single special tokens (ids 7 and 8), or not.
class WrapTokenizer : public lm::Tokenizer {
 public:
  explicit WrapTokenizer(bool has_tokens) : has_(has_tokens) {}
  std::vector<int32_t> encode(std::string_view text, bool) const override {
    if (has_ && text == "<fake_token_around_image>") return {7};
    if (has_ && text == "<global-img>") return {8};
    return std::vector<int32_t>(text.size(), 1);  // one token per byte otherwise
  }
  std::string decode_token(int32_t, int32_t) const override { return ""; }
  int32_t vocab_size() const override { return 16; }
  std::optional<int32_t> bos_id() const override { return std::nullopt; }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  std::string token_text(int32_t token) const override {
    return token == 7 ? "<fake_token_around_image>" : token == 8 ? "<global-img>" : "x";
  }

 private:
  bool has_;
};

TEST(SmolVlmReference, ImagesAreWrappedInTheFamilysTokensWhenTheVocabularyHasThem) {
  const lm::ImageWrapping with = lm::image_wrapping("idefics3", WrapTokenizer(true));
  EXPECT_EQ(with.before, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(with.after, (std::vector<int32_t>{7}));
  EXPECT_TRUE(lm::image_wrapping("idefics3", WrapTokenizer(false)).before.empty());  // stories260K's case
  EXPECT_TRUE(lm::image_wrapping("mlp", WrapTokenizer(true)).before.empty());        // LLaVA: none
}

}  // namespace
