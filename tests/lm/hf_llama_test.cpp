// The tiny LlamaForCausalLM of tools/reference/hf/make_llama.py (GQA: 4 query heads sharing 2 KV
// heads, 2 layers, vocabulary 512) against transformers' float32 logits and greedy tokens.
#include <gtest/gtest.h>

#include "hf_fixture.h"

namespace {

// Measured: max |dlogit| 6.7e-6 (one forward) / 7.2e-6 (chunked), mean 1.1e-6, on logits of
// std 3; transformers' own float32-vs-float64 spread on this model is 6.6e-6. Bounds: 1e-4 max
// (15x transformers' rounding spread, 140x below the smallest top-1/top-2 gap of the passage,
// 0.014), 1e-5 mean. A wrong RoPE pairing or GQA mapping moves logits by O(1).
// Compressed caches, top-1 agreement with lm's native caches over the 80 positions, measured:
// turboquant_rvq 4-bit 80/80, kivi 4-bit 78/80, h2o (budget 48) 73/80; floors a few tokens lower.
constexpr hf_fixture::Tolerance kTolerance{1e-4, 1e-5, 0.95, 0.93, 0.85};

HF_FAMILY_TESTS(HfLlama, "llama", kTolerance)

TEST_F(HfLlama, ConfigIsTheFixtures) {
  const lm::ModelConfig& c = model_->model->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.dim, 128);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.hidden_dim, 256);
  for (const lm::LayerInfo& layer : model_->model->layers()) EXPECT_FALSE(layer.sliding_window.has_value());
}

}  // namespace
