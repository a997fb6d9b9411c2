// The tiny Phi3ForCausalLM of tools/reference/hf/make_phi3.py (a `phi3` GGUF with llama.cpp's
// fused blk.N.attn_qkv and gate+up blk.N.ffn_up tensors, NeoX RoPE on 16 of each head's 32
// dimensions, a 24-token sliding window on the 64-token passage; 4 query heads sharing 2 KV
// heads) against transformers' float32 logits and greedy tokens.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "base/error.h"
#include "hf_fixture.h"
#include "lm/gguf/gguf_file.h"

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

// A fused tensor whose rows do not add up is refused with its name, not read past its end.
TEST(HfPhi3Files, WrongFusedSizesAreRefused) {
  const auto fx = hf_fixture::Fixture::open("phi3");
  // The same file with phi3.feed_forward_length claiming 200 instead of 256: ffn_up's 512 rows
  // are then not 2 x 200.
  std::ifstream in(fx.gguf, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "phi3.feed_forward_length";
  const std::size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  // key, then u32 value type, then the u32 value.
  uint32_t value = 0;
  std::memcpy(&value, bytes.data() + at + key.size() + 4, 4);
  ASSERT_EQ(value, 256u);
  value = 200;
  std::memcpy(bytes.data() + at + key.size() + 4, &value, 4);
  const auto path = std::filesystem::path(VQ_BINARY_DIR) / ("hf_phi3_bad_ffn_" + std::to_string(::getpid()) + ".gguf");
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  try {
    lm::load(path.string());
    ADD_FAILURE() << "loaded a phi3 file whose ffn_up does not hold gate + up";
  } catch (const base::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_up.weight"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
