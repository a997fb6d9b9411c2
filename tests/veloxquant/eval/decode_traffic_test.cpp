// Bytes a decode step reads and the rate: the arithmetic on hand-checkable numbers, the
// embedding rule (one row, or all of it when it is also the classifier), and stories260K's
// real file in both formats against its parameter count worked out by hand.
#include "veloxquant/eval/decode_traffic.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "lm/load.h"

namespace veloxquant::eval {
namespace {

TEST(DecodeTraffic, BytesPerSecondAndShareOfTheProbe) {
  // 1000 weight bytes + 500 KV bytes in 1 ms: 1.5 MB/s; a 3 MB/s probe: half of it.
  const DecodeTraffic t = decode_traffic(1000, 500, 0.001, 3e6);
  EXPECT_EQ(t.weight_bytes, 1000u);
  EXPECT_EQ(t.kv_bytes, 500u);
  EXPECT_DOUBLE_EQ(t.seconds_per_token, 0.001);
  EXPECT_DOUBLE_EQ(t.bytes_per_s, 1.5e6);
  EXPECT_DOUBLE_EQ(t.probe_share, 0.5);
  EXPECT_EQ(decode_traffic(1000, 500, 0.0, 3e6).bytes_per_s, 0.0);    // nothing timed
  EXPECT_EQ(decode_traffic(1000, 500, 0.001, 0.0).probe_share, 0.0);  // no probe
}

TEST(DecodeTraffic, EmbeddingIsOneRowUnlessItIsTheClassifier) {
  // A 10-row embedding of 400 bytes: the lookup reads 40.
  std::vector<WeightTensorSize> untied = {{"token_embd.weight", 400, 10},
                                          {"output.weight", 400, 10},
                                          {"blk.0.attn_q.weight", 64, 4},
                                          {"output_norm.weight", 16, 1}};
  EXPECT_EQ(decode_weight_bytes(untied), 40u + 400 + 64 + 16);
  std::vector<WeightTensorSize> tied = {{"token_embd.weight", 400, 10}, {"blk.0.attn_q.weight", 64, 4}};
  EXPECT_EQ(decode_weight_bytes(tied), 400u + 64);
  try {
    decode_weight_bytes({{"blk.0.attn_q.weight", 64, 4}});
    ADD_FAILURE() << "accepted a model without an embedding";
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("token_embd.weight"), std::string::npos) << e.what();
  }
}

TEST(DecodeTraffic, Stories260KReadsItsParametersOncePerToken) {
  const std::string dir = std::string(VQ_SHARED_DIR) + "/models/stories260K/";
  if (!std::filesystem::exists(dir + "stories260K.gguf")) GTEST_SKIP() << "stories260K missing";
  // dim 64, hidden 172, 5 layers, 8 heads of 8 (4 KV heads), vocab 512, all f32. Per layer:
  // q and o 64x64 each, k and v 64x32 each, gate/up/down 64x172 each, two norms of 64:
  // 8192 + 4096 + 33024 + 128 = 45440 floats; 5 layers = 227200; + final norm 64
  // + classifier 512x64 = 32768 + one embedding row of 64 = 260096 floats = 1040384 bytes.
  constexpr std::size_t kExpected = std::size_t{260096} * 4;
  const auto gguf = lm::load(dir + "stories260K.gguf");
  EXPECT_EQ(decode_weight_bytes_of_file(dir + "stories260K.gguf", gguf.model->config()), kExpected);
  // The llama2.c checkpoint (shared classifier, f32) reads the same bytes.
  lm::LoadOptions options;
  options.tokenizer_path = dir + "tok512.bin";
  const auto bin = lm::load(dir + "stories260K.bin", options);
  EXPECT_EQ(decode_weight_bytes_of_file(dir + "stories260K.bin", bin.model->config()), kExpected);
}

}  // namespace
}  // namespace veloxquant::eval
