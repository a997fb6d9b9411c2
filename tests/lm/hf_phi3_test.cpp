// The tiny Phi3ForCausalLM of tools/reference/hf/make_phi3.py (a `phi3` GGUF with llama.cpp's
// fused blk.N.attn_qkv and gate+up blk.N.ffn_up tensors, NeoX RoPE on 16 of each head's 32
// dimensions, a 24-token sliding window on the 64-token passage; 4 query heads sharing 2 KV
// heads) against transformers' float32 logits and greedy tokens.
#include <gtest/gtest.h>

#include <cstdint>

#include "hf_fixture.h"

namespace {

// Measured: max |dlogit| 7.2e-6 (one forward) / 6.7e-6 (chunked), mean 1.1e-6, on logits of std 3;
// transformers' own float32-vs-float64 spread 7.1e-6. Same bounds and reasons as llama (the
// smallest top-1/top-2 gap of the passage is 0.007, still 70x the bound). A wrong split of the
// fused tensors, gate and up swapped, or the partial rotation on the wrong dimensions move
// logits by O(1); without the window 20 of the 40 later top-1 choices change (window_effect).
// Compressed caches, top-1 agreement with lm's native caches over the 80 positions, measured:
// turboquant_rvq 4-bit 79/80, kivi 4-bit 75/80, h2o (budget 48) 67/80 (windowed layers: see
// hf_mistral_test.cpp for why h2o is low there).
constexpr hf_fixture::Tolerance kTolerance{1e-4, 1e-5, 0.95, 0.90, 0.72};

HF_FAMILY_TESTS(HfPhi3, "phi3", kTolerance)

TEST_F(HfPhi3, ConfigIsTheFixtures) {
  const lm::ModelConfig& c = model_->model->config();
  EXPECT_EQ(c.architecture, "phi3");
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.hidden_dim, 256);
  for (const lm::LayerInfo& layer : model_->model->layers()) {
    ASSERT_TRUE(layer.sliding_window.has_value());
    EXPECT_EQ(*layer.sliding_window, 24);
  }
}

// A fused tensor whose rows do not add up is refused with its name, not read past its end: the
// same file with phi3.feed_forward_length 200 instead of 256 (ffn_up's 512 rows are then not
// 2 x 200); and a window that does not fit an int32 is refused with its key.
TEST(HfPhi3Files, WrongFusedSizesAndWindowsAreRefused) {
  const auto fx = hf_fixture::Fixture::open("phi3");
  const uint32_t ffn = 200, window = 0xffffffffu;
  hf_fixture::expect_format_error(hf_fixture::with_metadata_value(fx, "phi3.feed_forward_length", &ffn, "ffn"),
                                  "blk.0.ffn_up.weight");
  hf_fixture::expect_format_error(hf_fixture::with_metadata_value(fx, "phi3.attention.sliding_window", &window, "swa"),
                                  "phi3.attention.sliding_window");
}

}  // namespace
