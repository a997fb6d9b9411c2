// The tiny Gemma3ForCausalLM of tools/reference/hf/make_gemma3.py (a `gemma3` GGUF: six layers,
// five local with a 16-token window then one global, RoPE base 10^4 / 10^6; per-head Q/K
// RMSNorm; 4 query heads of 32 sharing one KV head; sandwich norms; embeddings x sqrt(hidden);
// tied head) against transformers' float32 logits and greedy tokens. Without the window
// transformers' logits move by up to 32 and 45 of 64 top-1 choices change (window_effect).
// tests/lm/reference_agreement_gemma3_test.cpp checks the real Gemma 3 270M against llama.cpp
// and a float64 forward; this one checks the architecture against transformers.
#include <gtest/gtest.h>

#include "hf_fixture.h"

namespace {

// Measured: max |dlogit| 4.7e-5 (one forward) / 4.9e-5 (chunked), mean 5.0e-6, on logits of std 6.0;
// transformers' own float32-vs-float64 spread 4.6e-5. Bounds: 4e-4 max (9x that spread, 130x
// below the passage's smallest top-1/top-2 gap, 0.053), 4e-5 mean.
// Compressed caches, top-1 agreement with lm's native caches over the 80 positions, measured:
// turboquant_rvq 4-bit 78/80, kivi 4-bit 76/80, h2o (budget 48) 62/80 (windowed layers: see
// hf_mistral_test.cpp).
constexpr hf_fixture::Tolerance kTolerance{4e-4, 4e-5, 0.90, 0.90, 0.70};

HF_FAMILY_TESTS(HfGemma3, "gemma3", kTolerance)

TEST_F(HfGemma3, FiveLocalLayersThenAGlobalOne) {
  const lm::ModelConfig& c = model_->model->config();
  EXPECT_EQ(c.architecture, "gemma3");
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 32);
  const auto& layers = model_->model->layers();
  ASSERT_EQ(layers.size(), 6u);
  for (int l = 0; l < 5; ++l) {
    ASSERT_TRUE(layers[l].sliding_window.has_value()) << l;
    EXPECT_EQ(*layers[l].sliding_window, 16) << l;
  }
  EXPECT_FALSE(layers[5].sliding_window.has_value());
}

}  // namespace
