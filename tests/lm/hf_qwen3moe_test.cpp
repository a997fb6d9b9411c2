// The tiny Qwen3MoeForCausalLM of tools/reference/hf/make_qwen3moe.py (2 layers, each a sparse
// MoE block of 8 SwiGLU experts with top-2 renormalised routing; 4 query heads sharing 2 KV
// heads, Qwen3's q/k norms; vocabulary 512) against transformers' float32 logits and greedy
// tokens. Layer 0's experts are stored F16 and layer 1's Q8_0 (3-D GGUF tensors), so the
// per-expert slicing is checked on a float and on a block type through a whole forward.
#include <gtest/gtest.h>

#include "hf_fixture.h"
#include "lm/arch/llama_model.h"
#include "lm/arch/moe_ffn.h"

namespace {

// Measured: max |dlogit| 4.5e-6 (one forward) / 4.8e-6 (chunked), mean 7.2e-7, on logits
// of std 2.95; transformers' own float32-vs-float64 spread on this model is 5.1e-6. The smallest
// top-1/top-2 gap of the passage is 0.024 and the smallest gap between a token's 2nd and 3rd
// router probability 1.7e-3, so neither the argmax nor any expert choice is near a tie.
// Bounds: 1e-4 max (20x transformers' spread, 240x below the top-1 gap), 1e-5 mean. A wrong
// expert (stride, routing order, missing renormalisation) moves logits by O(1).
// Compressed caches, top-1 agreement with lm's native caches over the 80 positions, measured:
// turboquant_rvq 4-bit 80/80, kivi 4-bit 79/80, h2o (budget 48) 73/80; floors a few tokens lower.
constexpr hf_fixture::Tolerance kTolerance{1e-4, 1e-5, 0.95, 0.93, 0.85};

HF_FAMILY_TESTS(HfQwen3Moe, "qwen3moe", kTolerance)

TEST_F(HfQwen3Moe, ConfigAndExpertsAreTheFixtures) {
  const lm::ModelConfig& c = model_->model->config();
  EXPECT_EQ(c.architecture, "qwen3moe");
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  // MoE layers still attend: each keeps an attention cache, and for_model compresses it.
  for (const lm::LayerInfo& layer : model_->model->layers()) {
    EXPECT_TRUE(layer.is_attention);
    EXPECT_FALSE(layer.sliding_window.has_value());
  }
  const auto* llama = dynamic_cast<const lm::LlamaModel*>(model_->model.get());
  ASSERT_NE(llama, nullptr);
  const lm::GgmlType types[] = {lm::GgmlType::F16, lm::GgmlType::Q8_0};
  for (int l = 0; l < 2; ++l) {
    const auto& moe = llama->weights().layers[l].moe;
    ASSERT_NE(moe, nullptr) << "layer " << l;
    EXPECT_EQ(moe->experts.size(), 8u);
    EXPECT_EQ(moe->n_used, 2);
    EXPECT_TRUE(moe->normalize);
    EXPECT_EQ(moe->router.rows, 8);
    for (const lm::MoeExpert& e : moe->experts) {
      EXPECT_EQ(e.gate.type, types[l]);
      EXPECT_EQ(e.gate.rows, 32);
      EXPECT_EQ(e.down.rows, 64);
      EXPECT_EQ(e.down.cols, 32);
    }
  }
}

// The host's default settings (16-bit activations on the decode matmuls of quantized weights,
// f16 KV cache): what a user runs. Top-1 at every position, and the greedy tokens.
TEST_F(HfQwen3Moe, DefaultSettingsKeepTop1AndGreedy) {
  lm::LoadOptions options;
  options.threads = 2;
  const lm::LoadedModel m = lm::load(fx_->gguf.string(), options);
  const auto d = hf_fixture::compare(hf_fixture::forward_chunked(*m.model, fx_->tokens), fx_->logits, fx_->vocab);
  hf_fixture::report("qwen3moe default settings, chunked, vs transformers", d);
  EXPECT_EQ(d.top1_same, d.positions);
  EXPECT_LE(d.max_abs, 0.02);  // f16 KV and 16-bit activations; measured 2.4e-3
  const auto eos = m.tokenizer->eos_id();
  EXPECT_EQ(hf_fixture::lm_greedy(m, fx_->tokens, static_cast<int>(fx_->greedy.size())),
            hf_fixture::expected_greedy(*fx_, eos ? *eos : -1));
}

// The second fixture: what transformers' Qwen3MoeConfig allows beyond llama.cpp's qwen3moe graph
// (which renormalises always and wants experts in every layer): norm_topk_prob=False (the GGUF
// says expert_weights_norm=false; the k softmax probabilities weigh the experts as they are) and
// layer 0 dense (mlp_only_layers=[0]: ffn_gate/ffn_up/ffn_down of intermediate_size 128).
// Measured: max |dlogit| 4.8e-6, mean 7.2e-7; transformers' float32-vs-float64 spread 4.5e-6;
// smallest top-1 gap 0.021, smallest 2nd-vs-3rd router probability gap 3.7e-4. Compressed caches:
// turboquant_rvq 4-bit 80/80, kivi 4-bit 77/80, h2o 76/80. Same bounds as above.
HF_FAMILY_TESTS(HfQwen3MoeDenseUnnormalised, "qwen3moe_dense0_unnorm", kTolerance)

TEST_F(HfQwen3MoeDenseUnnormalised, LayerZeroIsDenseAndRoutingUnnormalised) {
  const auto* llama = dynamic_cast<const lm::LlamaModel*>(model_->model.get());
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->config().hidden_dim, 128);
  const auto& layers = llama->weights().layers;
  EXPECT_EQ(layers[0].moe, nullptr);
  EXPECT_EQ(layers[0].w_gate.rows, 128);
  ASSERT_NE(layers[1].moe, nullptr);
  EXPECT_FALSE(layers[1].moe->normalize);
  EXPECT_EQ(layers[1].moe->experts[0].gate.type, lm::GgmlType::F16);
  for (const lm::LayerInfo& layer : llama->layers()) EXPECT_TRUE(layer.is_attention);
}

}  // namespace
