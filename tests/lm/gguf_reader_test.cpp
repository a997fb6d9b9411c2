// The GGUF reader on files written from the specification by the test's own writer (every
// metadata value type, arrays, nesting, custom alignment, v2 and v3) and on the real
// stories260K.gguf, whose header the README documents.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "base/error.h"
#include "gguf_test_writer.h"
#include "lm/gguf/gguf_file.h"

namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("vq_gguf_reader_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(GgufReader, ReadsEveryMetadataType) {
  gguf_test::Writer w;
  w.kv_u8("a.u8", 200);
  w.kv_i8("a.i8", -100);
  w.kv_u16("a.u16", 60000);
  w.kv_i16("a.i16", -30000);
  w.kv_u32("a.u32", 4000000000u);
  w.kv_i32("a.i32", -2000000000);
  w.kv_f32("a.f32", 0.25f);
  w.kv_bool("a.bool", true);
  w.kv_str("a.str", "héllo");
  w.kv_u64("a.u64", 1ull << 40);
  w.kv_i64("a.i64", -(1ll << 40));
  w.kv_f64("a.f64", 1e-300);
  w.kv_str_array("a.strs", {"x", "", "yz"});
  w.kv_f32_array("a.f32s", {1.5f, -2.0f});
  w.kv_i32_array("a.i32s", {-1, 7});
  w.kv_nested("a.nested");
  const std::string path = temp_path("types.gguf");
  w.write(path);

  const auto f = lm::gguf::GgufFile::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata().size(), 16u);
  EXPECT_EQ(*f->get_int("a.u8"), 200);
  EXPECT_EQ(*f->get_int("a.i8"), -100);
  EXPECT_EQ(*f->get_int("a.u16"), 60000);
  EXPECT_EQ(*f->get_int("a.i16"), -30000);
  EXPECT_EQ(*f->get_int("a.u32"), 4000000000ll);
  EXPECT_EQ(*f->get_int("a.i32"), -2000000000ll);
  EXPECT_EQ(*f->get_float("a.f32"), 0.25);
  EXPECT_EQ(*f->get_bool("a.bool"), true);
  EXPECT_EQ(*f->get_string("a.str"), "héllo");
  EXPECT_EQ(*f->get_int("a.u64"), 1ll << 40);
  EXPECT_EQ(*f->get_int("a.i64"), -(1ll << 40));
  EXPECT_EQ(*f->get_float("a.f64"), 1e-300);
  EXPECT_EQ(f->find("a.u32")->type, lm::gguf::ValueType::U32);
  const auto* strs = f->find("a.strs");
  ASSERT_TRUE(strs && strs->is_array());
  EXPECT_EQ(strs->strings, (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(f->find("a.f32s")->numbers, (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(f->find("a.i32s")->integers, (std::vector<int64_t>{-1, 7}));
  const auto* nested = f->find("a.nested");
  ASSERT_EQ(nested->array_size(), 2u);
  EXPECT_EQ(nested->arrays[1].integers, (std::vector<int64_t>{7, 9}));
  EXPECT_FALSE(f->get_int("absent").has_value());
  EXPECT_THROW(f->get_int("a.str"), base::FormatError);
  EXPECT_THROW(f->get_string("a.u8"), base::FormatError);
  EXPECT_THROW(f->require_int("absent"), base::FormatError);
  fs::remove(path);
}

TEST(GgufReader, TensorsHonourAlignmentAndVersion2) {
  for (uint64_t alignment : {32u, 64u, 256u}) {
    gguf_test::Writer w(2, alignment);
    w.kv_u32("general.alignment", static_cast<uint32_t>(alignment));
    w.tensor_f32("first", {3}, {1.0f, 2.0f, 3.0f});
    w.tensor_f32("second", {2, 2}, {4.0f, 5.0f, 6.0f, 7.0f});
    const std::string path = temp_path("align.gguf");
    w.write(path);
    const auto f = lm::gguf::GgufFile::open(path);
    EXPECT_EQ(f->version(), 2u);
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    ASSERT_EQ(f->tensors().size(), 2u);
    const auto& second = f->tensor("second");
    EXPECT_EQ(second.offset, alignment);  // 12 bytes of "first", padded to one alignment unit
    EXPECT_EQ(second.nbytes, 16u);
    EXPECT_EQ(second.ne, (std::vector<int64_t>{2, 2}));
    const float* data = reinterpret_cast<const float*>(f->tensor_data(second));
    EXPECT_EQ(data[0], 4.0f);
    EXPECT_EQ(data[3], 7.0f);
    const lm::WeightMatrix m = f->weight("second");
    EXPECT_EQ(m.rows, 2);
    EXPECT_EQ(m.cols, 2);
    EXPECT_EQ(reinterpret_cast<const float*>(m.row(1))[0], 6.0f);
    EXPECT_EQ(f->find_tensor("third"), nullptr);
    EXPECT_THROW(f->tensor("third"), base::FormatError);
    fs::remove(path);
  }
}

TEST(GgufReader, QuantizedTensorSizes) {
  // Two rows of 256 Q4_K elements = 2 blocks of 144 bytes; Q6_K 210; Q8_0 34 per 32.
  gguf_test::Writer w;
  w.tensor("q4k", {256, 2}, 12, std::string(288, '\0'));
  w.tensor("q6k", {256, 1}, 14, std::string(210, '\0'));
  w.tensor("q80", {64, 3}, 8, std::string(204, '\0'));
  w.tensor("q5k", {256, 1}, 13, std::string(176, '\0'));
  w.tensor("iq2", {256, 1}, 16, std::string(66, '\0'));  // readable, not computable
  const std::string path = temp_path("quant.gguf");
  w.write(path);
  const auto f = lm::gguf::GgufFile::open(path);
  EXPECT_EQ(f->tensor("q4k").nbytes, 288u);
  EXPECT_EQ(f->tensor("q6k").nbytes, 210u);
  EXPECT_EQ(f->tensor("q80").nbytes, 204u);
  EXPECT_EQ(f->weight("q80").row_bytes, 68u);
  EXPECT_EQ(f->tensor("q5k").type, lm::GgmlType::Q5_K);
  EXPECT_EQ(f->weight("q5k").row_bytes, 176u);
  EXPECT_EQ(f->tensor("iq2").type, lm::GgmlType::IQ2_XXS);
  EXPECT_EQ(f->tensor("iq2").nbytes, 66u);
  try {
    (void)f->weight("iq2");
    FAIL() << "IQ2_XXS weight view should be refused";
  } catch (const base::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("IQ2_XXS"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("iq2"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

TEST(GgufReader, Stories260KHeader) {
  const std::string path = std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
  EXPECT_TRUE(lm::gguf::GgufFile::has_magic(path));
  const auto f = lm::gguf::GgufFile::open(path);
  // Numbers from the README: GGUF v3, all F32, 48 tensors, context patched to 512.
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->metadata().size(), 19u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_int("llama.context_length"), 512);
  EXPECT_EQ(*f->get_int("llama.embedding_length"), 64);
  EXPECT_EQ(*f->get_int("llama.feed_forward_length"), 172);
  EXPECT_EQ(*f->get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(*f->get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(*f->get_int("llama.block_count"), 5);
  EXPECT_EQ(*f->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->array_size(), 512u);
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->strings[1], "<s>");
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->strings[3], "<0x00>");
  for (const auto& t : f->tensors()) EXPECT_EQ(t.type, lm::GgmlType::F32) << t.name;
  const auto& emb = f->tensor("token_embd.weight");
  EXPECT_EQ(emb.ne, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb.nbytes, 64u * 512u * 4u);
  EXPECT_EQ(f->tensor("blk.4.ffn_down.weight").ne, (std::vector<int64_t>{172, 64}));
  // Total tensor bytes = the README's 264,128 floats minus the 2*512*4 freq_cis values run.c
  // keeps and GGUF drops, plus the separate output.weight (512*64).
  std::size_t total = 0;
  for (const auto& t : f->tensors()) total += t.nbytes;
  EXPECT_EQ(total, (264128u - 4096u + 32768u) * 4u);
}

}  // namespace
