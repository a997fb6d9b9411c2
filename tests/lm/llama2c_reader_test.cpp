// The llama2.c version-0 reader: the header of stories260K.bin (numbers from the README), its
// tensors against the same tensors in the GGUF that llama.cpp's converter made from it, and
// the unshared-classifier variant (negative vocab_size) built from it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "lm/gguf/gguf_file.h"
#include "lm/llama2c/llama2c_reader.h"
#include "lm/load.h"

namespace {

namespace fs = std::filesystem;
const std::string kDir = std::string(VQ_SHARED_DIR) + "/models/stories260K/";

std::vector<float> row_of(const lm::WeightMatrix& w, int64_t r) {
  std::vector<float> v(static_cast<std::size_t>(w.cols));
  w.dequantize_row_to(r, v.data());
  return v;
}

TEST(Llama2cReader, Stories260KHeader) {
  const lm::Llama2cCheckpoint ck = lm::read_llama2c_checkpoint(kDir + "stories260K.bin");
  EXPECT_TRUE(ck.shared_classifier);
  EXPECT_EQ(ck.config.dim, 64);
  EXPECT_EQ(ck.config.hidden_dim, 172);
  EXPECT_EQ(ck.config.n_layers, 5);
  EXPECT_EQ(ck.config.n_heads, 8);
  EXPECT_EQ(ck.config.n_kv_heads, 4);
  EXPECT_EQ(ck.config.vocab_size, 512);
  EXPECT_EQ(ck.config.context_length, 512);
  EXPECT_EQ(ck.config.head_dim, 8);
  EXPECT_FLOAT_EQ(ck.config.rope_theta, 10000.0f);
  EXPECT_TRUE(lm::looks_like_llama2c(kDir + "stories260K.bin"));
  EXPECT_FALSE(lm::looks_like_llama2c(kDir + "stories260K.gguf"));
  EXPECT_FALSE(lm::looks_like_llama2c(kDir + "README.md"));
}

TEST(Llama2cReader, TensorsMatchTheConvertedGguf) {
  const lm::Llama2cCheckpoint ck = lm::read_llama2c_checkpoint(kDir + "stories260K.bin");
  const auto gguf = lm::gguf::GgufFile::open(kDir + "stories260K.gguf");
  const auto same_matrix = [&](const lm::WeightMatrix& a, const std::string& name) {
    const lm::WeightMatrix b = gguf->weight(name);
    ASSERT_EQ(a.rows, b.rows) << name;
    ASSERT_EQ(a.cols, b.cols) << name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << name;
  };
  const auto same_vector = [&](const std::vector<float>& a, const std::string& name) {
    const lm::WeightMatrix b = gguf->weight(name);
    EXPECT_EQ(a, row_of(b, 0)) << name;
  };
  same_matrix(ck.weights.token_embedding, "token_embd.weight");
  same_matrix(ck.weights.output, "output.weight");
  same_vector(ck.weights.output_norm, "output_norm.weight");
  for (int l = 0; l < 5; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const lm::LlamaLayerWeights& w = ck.weights.layers[l];
    same_vector(w.attn_norm, p + "attn_norm.weight");
    same_vector(w.ffn_norm, p + "ffn_norm.weight");
    same_matrix(w.wq, p + "attn_q.weight");
    same_matrix(w.wk, p + "attn_k.weight");
    same_matrix(w.wv, p + "attn_v.weight");
    same_matrix(w.wo, p + "attn_output.weight");
    same_matrix(w.w_gate, p + "ffn_gate.weight");
    same_matrix(w.w_up, p + "ffn_up.weight");
    same_matrix(w.w_down, p + "ffn_down.weight");
  }
}

TEST(Llama2cReader, WeightsStayInTheMapping) {
  const lm::Llama2cCheckpoint ck = lm::read_llama2c_checkpoint(kDir + "stories260K.bin");
  // The embedding starts right after the 28-byte header; wq of layer 0 after the embedding
  // and the 5 rms_att vectors — views into the file, at the byte offsets the layout implies.
  const std::byte* base = ck.weights.token_embedding.data - 28;
  EXPECT_EQ(ck.weights.layers[0].wq.data - base, 28 + (512 * 64 + 5 * 64) * 4);
  EXPECT_EQ(ck.weights.output.data, ck.weights.token_embedding.data);  // shared classifier
}

TEST(Llama2cReader, UnsharedClassifier) {
  // Build the unshared variant: vocab_size negated, a wcls appended equal to 2x the
  // embedding. Logits must be exactly twice the shared model's (scaling by 2 is exact).
  std::ifstream in(kDir + "stories260K.bin", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  int32_t vocab;
  std::memcpy(&vocab, bytes.data() + 20, 4);
  ASSERT_EQ(vocab, 512);
  vocab = -vocab;
  std::memcpy(bytes.data() + 20, &vocab, 4);
  std::vector<float> wcls(std::size_t{512} * 64);
  std::memcpy(wcls.data(), bytes.data() + 28, wcls.size() * 4);
  for (float& v : wcls) v *= 2.0f;
  bytes.append(reinterpret_cast<const char*>(wcls.data()), wcls.size() * 4);
  const std::string path =
      (fs::temp_directory_path() / ("vq_unshared_" + std::to_string(::getpid()) + ".bin")).string();
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));

  const lm::Llama2cCheckpoint ck = lm::read_llama2c_checkpoint(path);
  EXPECT_FALSE(ck.shared_classifier);
  EXPECT_EQ(ck.config.vocab_size, 512);
  EXPECT_NE(ck.weights.output.data, ck.weights.token_embedding.data);

  lm::LoadOptions options;
  options.tokenizer_path = kDir + "tok512.bin";
  const auto unshared = lm::load(path, options);
  const auto shared = lm::load(kDir + "stories260K.bin");
  lm::CacheList c1 = lm::make_prompt_cache(*unshared.model), c2 = lm::make_prompt_cache(*shared.model);
  std::vector<float> a, b;
  unshared.model->forward({1, 403, 407}, c1, a);
  shared.model->forward({1, 403, 407}, c2, b);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], 2.0f * b[i]) << i;
  fs::remove(path);
}

}  // namespace
