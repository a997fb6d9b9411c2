// Broken model files must produce a typed error naming the problem — never a crash, hang or
// read past the mapping. Truncations are taken at every byte of the header region and at
// many points in the data; targeted corruptions hit each validation rule once.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "base/error.h"
#include "gguf_test_writer.h"
#include "lm/gguf/gguf_file.h"
#include "lm/llama2c/llama2c_reader.h"
#include "lm/load.h"

namespace {

namespace fs = std::filesystem;

const std::string kStoriesDir = std::string(VQ_SHARED_DIR) + "/models/stories260K/";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CorruptFiles : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& bytes) {
    std::string path = (fs::temp_directory_path() / ("vq_corrupt_" + std::to_string(::getpid()) + "_" + name)).string();
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const auto& p : paths_) fs::remove(p);
  }
  std::vector<std::string> paths_;
};

// The exception's message must contain every fragment.
template <class E, class F>
void expect_error(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (const auto& frag : fragments) EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

TEST_F(CorruptFiles, TruncatedGgufAtEveryHeaderByte) {
  const std::string full = read_all(kStoriesDir + "stories260K.gguf");
  ASSERT_EQ(full.size(), 1185376u);
  const auto f = lm::gguf::GgufFile::open(kStoriesDir + "stories260K.gguf");
  const std::size_t header_end = f->data_offset();
  const std::string path = write("cut.gguf", full);
  // Every byte of the fixed header and first metadata entries, every 7th byte through the
  // rest of the header (token strings), every byte around the start of the data, then every
  // 997th byte of the data section.
  const auto step = [&](std::size_t cut) -> std::size_t {
    if (cut < 512 || (cut + 64 > header_end && cut < header_end + 64)) return 1;
    return cut < header_end ? 7 : 997;
  };
  std::vector<std::size_t> cuts;
  for (std::size_t cut = 1; cut < full.size(); cut += step(cut)) cuts.push_back(cut);
  // Longest first, so each cut is one truncate() of the same file instead of a rewrite.
  for (auto it = cuts.rbegin(); it != cuts.rend(); ++it) {
    const std::size_t cut = *it;
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(cut)), 0);
    try {
      (void)lm::gguf::GgufFile::open(path);
      ADD_FAILURE() << "cut at " << cut << " was accepted";
    } catch (const base::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

TEST_F(CorruptFiles, TruncationIsNamedAsSuch) {
  const std::string full = read_all(kStoriesDir + "stories260K.gguf");
  expect_error<base::FormatError>([&] { lm::gguf::GgufFile::open(write("t1.gguf", full.substr(0, 100))); },
                                  {"truncated"});
  expect_error<base::FormatError>([&] { lm::load(write("t2.gguf", full.substr(0, full.size() - 1))); },
                                  {"tensor '", "past the end"});
}

TEST_F(CorruptFiles, BadMagicAndEmptyFile) {
  std::string bytes = read_all(kStoriesDir + "stories260K.gguf");
  bytes[0] = 'X';
  expect_error<base::FormatError>([&] { lm::gguf::GgufFile::open(write("magic.gguf", bytes)); }, {"bad magic", "XGUF"});
  // lm::load sees neither GGUF magic nor a plausible llama2.c header.
  expect_error<base::FormatError>([&] { lm::load(write("magic2.gguf", bytes)); }, {"neither GGUF"});
  expect_error<base::FormatError>([&] { lm::load(write("empty.bin", "")); }, {"empty"});
  expect_error<base::FormatError>([&] { lm::load(write("text.txt", "hello, this is not a model at all")); },
                                  {"neither GGUF"});
}

TEST_F(CorruptFiles, UnsupportedVersionsAndTypes) {
  for (uint32_t version : {1u, 4u, 0xffffffffu}) {
    gguf_test::Writer w(version);
    expect_error<base::Unsupported>([&] { lm::gguf::GgufFile::open(write("v.gguf", w.bytes())); },
                                    {"version " + std::to_string(version)});
  }
  gguf_test::Writer unknown;
  unknown.tensor("weird", {32}, 99, std::string(64, '\0'));
  expect_error<base::Unsupported>([&] { lm::gguf::GgufFile::open(write("type.gguf", unknown.bytes())); },
                                  {"weird", "99"});
}

TEST_F(CorruptFiles, TensorOffsetPastEndAndMisaligned) {
  gguf_test::Writer past;
  past.tensor_f32("a", {4}, {1, 2, 3, 4});
  past.tensor("b", {4}, 0, std::string(16, '\0'), 4096);
  expect_error<base::FormatError>([&] { lm::gguf::GgufFile::open(write("past.gguf", past.bytes())); },
                                  {"'b'", "past the end"});
  gguf_test::Writer odd;
  odd.tensor("c", {4}, 0, std::string(32, '\0'), 4);
  expect_error<base::FormatError>([&] { lm::gguf::GgufFile::open(write("odd.gguf", odd.bytes())); },
                                  {"'c'", "not aligned"});
}

TEST_F(CorruptFiles, BadShapesAndCounts) {
  gguf_test::Writer zero;
  zero.tensor("z", {0, 4}, 0, "");
  expect_error<base::FormatError>([&] { lm::gguf::GgufFile::open(write("zero.gguf", zero.bytes())); },
                                  {"'z'", "dimension"});
  gguf_test::Writer five;
  five.tensor("f", {1, 1, 1, 1, 1}, 0, std::string(4, '\0'));
  expect_error<base::FormatError>([&] { lm::gguf::GgufFile::open(write("five.gguf", five.bytes())); },
                                  {"'f'", "5 dimensions"});
  gguf_test::Writer partial;
  partial.tensor("p", {20}, 8, std::string(34, '\0'));  // 20 is not a multiple of Q8_0's 32
  expect_error<base::FormatError>([&] { lm::gguf::GgufFile::open(write("partial.gguf", partial.bytes())); },
                                  {"'p'", "block size 32"});
  gguf_test::Writer huge;
  huge.tensor("h", {1ull << 40, 1ull << 30}, 0, "");
  expect_error<base::FormatError>([&] { lm::gguf::GgufFile::open(write("huge.gguf", huge.bytes())); }, {"'h'"});
  // A header claiming 2^40 metadata entries in a 24-byte file.
  std::string counts = gguf_test::Writer::pod(uint32_t{0x46554747}) + gguf_test::Writer::pod(uint32_t{3}) +
                       gguf_test::Writer::pod(uint64_t{0}) + gguf_test::Writer::pod(uint64_t{1} << 40);
  expect_error<base::FormatError>([&] { lm::gguf::GgufFile::open(write("counts.gguf", counts)); }, {"metadata count"});
  // A string whose length runs past the end.
  gguf_test::Writer longstr;
  longstr.kv_raw("s", 8, gguf_test::Writer::pod(uint64_t{1} << 50));
  expect_error<base::FormatError>([&] { lm::gguf::GgufFile::open(write("str.gguf", longstr.bytes())); }, {"truncated"});
  gguf_test::Writer badtype;
  badtype.kv_raw("k", 77, "");
  expect_error<base::FormatError>([&] { lm::gguf::GgufFile::open(write("kvtype.gguf", badtype.bytes())); },
                                  {"value type 77"});
}

// A model whose metadata and tensors disagree: the loader names the tensor and both shapes.
// stories260K.gguf rewritten with one u32 metadata value replaced (or added).
std::string stories_with_u32(const std::string& override_key, uint32_t override_value) {
  const auto stories = lm::gguf::GgufFile::open(kStoriesDir + "stories260K.gguf");
  gguf_test::Writer w;
  bool overridden = false;
  for (const auto& [key, value] : stories->metadata()) {
    if (key == override_key) {
      w.kv_u32(key, override_value);
      overridden = true;
    } else if (value.type == lm::gguf::ValueType::U32) {
      w.kv_u32(key, static_cast<uint32_t>(value.integer));
    } else if (value.type == lm::gguf::ValueType::F32) {
      w.kv_f32(key, static_cast<float>(value.number));
    } else if (value.type == lm::gguf::ValueType::STRING) {
      w.kv_str(key, value.text);
    } else if (value.is_array() && value.array_type == lm::gguf::ValueType::STRING) {
      w.kv_str_array(key, value.strings);
    } else if (value.is_array() && value.array_type == lm::gguf::ValueType::F32) {
      w.kv_f32_array(key, std::vector<float>(value.numbers.begin(), value.numbers.end()));
    } else if (value.is_array()) {
      w.kv_i32_array(key, std::vector<int32_t>(value.integers.begin(), value.integers.end()));
    }
  }
  if (!overridden) w.kv_u32(override_key, override_value);
  for (const auto& t : stories->tensors()) {
    std::vector<uint64_t> ne(t.ne.begin(), t.ne.end());
    w.tensor(t.name, ne, static_cast<uint32_t>(t.type),
             std::string(reinterpret_cast<const char*>(stories->tensor_data(t)), t.nbytes));
  }
  return w.bytes();
}

TEST_F(CorruptFiles, WrongDimsForTheArchitecture) {
  const std::string path =
      write("dims.gguf", stories_with_u32("llama.feed_forward_length", 173));  // the tensors say 172
  expect_error<base::FormatError>([&] { lm::load(path); }, {path, "blk.0.ffn_gate.weight", "172", "173"});
}

TEST_F(CorruptFiles, RopeDimensionPastTheHeadOrOddIsRefused) {
  // stories260K: dim 64, 8 heads -> head size 8. Before, 10 was clamped to 8 without a word.
  for (uint32_t rope_dim : {10u, 3u}) {
    const std::string path = write("rope.gguf", stories_with_u32("llama.rope.dimension_count", rope_dim));
    expect_error<base::FormatError>([&] { lm::load(path); },
                                    {path, "rope.dimension_count " + std::to_string(rope_dim), "head size 8"});
  }
  EXPECT_NO_THROW(lm::load(write("rope.gguf", stories_with_u32("llama.rope.dimension_count", 8))));
}

TEST_F(CorruptFiles, ContextLongerThanTheModelsIsRefused) {
  const std::string path = kStoriesDir + "stories260K.gguf";
  const int64_t trained = lm::load(path).model->config().context_length;
  ASSERT_GT(trained, 0);
  lm::LoadOptions longer;
  longer.context_length = trained + 1;
  expect_error<base::InvalidArgument>([&] { lm::load(path, longer); }, {"ctx " + std::to_string(trained + 1),
                                                                        "context length " + std::to_string(trained)});
  lm::LoadOptions shorter;
  shorter.context_length = trained / 2;
  EXPECT_EQ(lm::load(path, shorter).model->config().context_length, trained / 2);
}

TEST_F(CorruptFiles, TensorsWithOverlappingDataAreRefused) {
  gguf_test::Writer w;
  w.kv_str("general.architecture", "llama");
  w.tensor_f32("a", {16}, std::vector<float>(16, 1.0f));  // data bytes [0, 64)
  w.tensor_f32("b", {16}, std::vector<float>(16, 2.0f));  // [64, 128)
  w.tensor_at("c", {16}, 0, 32);                          // [32, 96): inside a and b
  const std::string path = write("overlap.gguf", w.bytes());
  expect_error<base::FormatError>([&] { lm::gguf::GgufFile::open(path); }, {path, "'a'", "'c'", "overlap"});
  gguf_test::Writer ok;
  ok.kv_str("general.architecture", "llama");
  ok.tensor_f32("a", {16}, std::vector<float>(16, 1.0f));
  ok.tensor_f32("b", {16}, std::vector<float>(16, 2.0f));
  EXPECT_NO_THROW(lm::gguf::GgufFile::open(write("apart.gguf", ok.bytes())));
}

TEST_F(CorruptFiles, UnsupportedArchitecture) {
  gguf_test::Writer w;
  w.kv_str("general.architecture", "mamba");
  expect_error<base::Unsupported>([&] { lm::load(write("arch.gguf", w.bytes())); }, {"mamba"});
}

TEST_F(CorruptFiles, Llama2cTruncatedAndInconsistent) {
  const std::string full = read_all(kStoriesDir + "stories260K.bin");
  ASSERT_EQ(full.size(), 1056540u);
  for (std::size_t cut : {std::size_t{3}, std::size_t{27}, std::size_t{28}, std::size_t{1000}, full.size() - 4}) {
    const std::string path = write("cut.bin", full.substr(0, cut));
    EXPECT_THROW(lm::read_llama2c_checkpoint(path), base::FormatError) << cut;
  }
  expect_error<base::FormatError>([&] { lm::read_llama2c_checkpoint(write("cut2.bin", full.substr(0, 1000))); },
                                  {"truncated", "1056540"});
  // Header says dim 65 (not divisible by 8 heads).
  std::string bad = full;
  const int32_t dim = 65;
  std::memcpy(bad.data(), &dim, 4);
  expect_error<base::FormatError>([&] { lm::read_llama2c_checkpoint(write("dim.bin", bad)); }, {"dim=65"});
  // Extra bytes: the header's implied size no longer matches.
  expect_error<base::FormatError>([&] { lm::read_llama2c_checkpoint(write("long.bin", full + std::string(8, '\0'))); },
                                  {"1056548"});
  // The int8 export (magic ak42) is recognised and refused.
  expect_error<base::Unsupported>([&] { lm::load(kStoriesDir + "stories260K_q8.bin"); }, {"version 2", "ak42"});
}

TEST_F(CorruptFiles, Llama2cMissingTokenizer) {
  const std::string full = read_all(kStoriesDir + "stories260K.bin");
  const std::string path = write("lonely.bin", full);
  // /tmp has no tokenizer.bin / tok512.bin next to the copy.
  if (fs::exists(fs::path(path).parent_path() / "tok512.bin") ||
      fs::exists(fs::path(path).parent_path() / "tokenizer.bin")) {
    GTEST_SKIP() << "a tokenizer file happens to sit in the temp directory";
  }
  expect_error<base::FormatError>([&] { lm::load(path); }, {"tokenizer"});
  lm::LoadOptions with;
  with.tokenizer_path = kStoriesDir + "tok512.bin";
  EXPECT_NO_THROW(lm::load(path, with));
}

}  // namespace
