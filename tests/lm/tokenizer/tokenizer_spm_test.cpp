// SentencePiece-style tokenizer on stories260K: the llama2.c tokenizer file and the GGUF
// vocabulary must both encode exactly as llama.cpp does (fixtures made by
// tools/make_tokenizer_fixtures.py with llama-cpp-python), which for plain text is also what
// llama2.c run.c's encode yields (dummy prefix, best-score merges, byte fallback).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "lm/gguf/gguf_file.h"
#include "lm/load.h"
#include "lm/tokenizer/tokenizer.h"
#include "lm/tokenizer/tokenizer_vocab.h"

namespace {

const std::string kShared = VQ_SHARED_DIR;
const std::string kTokBin = kShared + "/models/stories260K/tok512.bin";
const std::string kGguf = kShared + "/models/stories260K/stories260K.gguf";

nlohmann::json load_fixture() {
  std::ifstream in(std::string(VQ_SOURCE_DIR) + "/tests/fixtures/tokenizer/stories260K_encode.json");
  return nlohmann::json::parse(in);
}

std::string read_reference_story() {
  // The README's reference output, between the ``` fence after "## Reference output".
  std::ifstream in(kShared + "/models/stories260K/README.md");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t section = all.find("## Reference output");
  const size_t open = all.find("```\n", section) + 4;
  const size_t close = all.find("\n```", open);
  return all.substr(open, close - open);
}

std::shared_ptr<lm::Tokenizer> from_llama2c() { return lm::make_tokenizer(lm::read_llama2c_tokenizer(kTokBin, 512)); }
std::shared_ptr<lm::Tokenizer> from_gguf() {
  return lm::make_tokenizer(lm::read_gguf_vocab(*lm::gguf::GgufFile::open(kGguf)));
}

class Stories260KTokenizer : public ::testing::TestWithParam<const char*> {
 protected:
  std::shared_ptr<lm::Tokenizer> tokenizer() const {
    return std::string(GetParam()) == "tok512.bin" ? from_llama2c() : from_gguf();
  }
};

TEST_P(Stories260KTokenizer, EncodesAsLlamaCpp) {
  const auto tok = tokenizer();
  const auto fixture = load_fixture();
  ASSERT_GE(fixture["cases"].size(), 10u);
  size_t checked_against_llama2c = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"];
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(text, c["add_bos"].get<bool>()), expected) << "text: " << text;
    // The fixture tool also ran a Python transcription of llama2.c's encode() on the plain
    // texts and refused to write the fixture unless it gave the same ids.
    if (c.value("agrees_with_llama2c_encode", false)) ++checked_against_llama2c;
  }
  EXPECT_GE(checked_against_llama2c, 10u);
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

TEST_P(Stories260KTokenizer, InvalidUtf8FallsBackToBytesAsLlamaCpp) {
  const auto tok = tokenizer();
  const auto fixture = load_fixture();
  ASSERT_EQ(fixture["invalid_utf8"].size(), 3u);
  for (const auto& c : fixture["invalid_utf8"]) {
    const std::string bytes = from_hex(c["hex"]);
    EXPECT_EQ(tok->encode(bytes, true), c["ids"].get<std::vector<int32_t>>()) << c["hex"];
    EXPECT_EQ(tok->decode(tok->encode(bytes, false)), bytes) << "byte tokens keep the bytes";
  }
}

TEST_P(Stories260KTokenizer, KnownPromptEncoding) {
  // llama2.c run.c -i "Once upon a time" starts from BOS, the dummy-prefix "▁Once" and the
  // pieces the merges make; 1 is BOS and every id is a real piece of tok512.
  const auto tok = tokenizer();
  const auto ids = tok->encode("Once upon a time", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(tok->token_text(ids[1]).rfind("\xE2\x96\x81", 0), 0u) << "first piece carries the dummy-prefix space";
  EXPECT_EQ(tok->encode("", true), std::vector<int32_t>{1});
  EXPECT_TRUE(tok->encode("", false).empty());
}

TEST_P(Stories260KTokenizer, ReferenceStoryRoundTrips) {
  const auto tok = tokenizer();
  const std::string story = read_reference_story();
  ASSERT_EQ(story.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u);
  ASSERT_EQ(story.substr(story.size() - 7), " so she");
  const auto ids = tok->encode(story, true);
  std::string decoded;
  int32_t previous = ids.front();
  for (size_t i = 1; i < ids.size(); ++i) {
    decoded += tok->decode_token(previous, ids[i]);
    previous = ids[i];
  }
  EXPECT_EQ(decoded, story);
  EXPECT_EQ(tok->decode(tok->encode(story, false)), story);
}

TEST_P(Stories260KTokenizer, RoundTripsVariedText) {
  const auto tok = tokenizer();
  for (const std::string text : {"Hello world", "  spaces  around ", "tabs\tand\nnew\n\nlines", "naïve café — 日本語 😀",
                                 "stray bytes at the end \xff\xfe", "<s> literal"}) {
    EXPECT_EQ(tok->decode(tok->encode(text, false)), text) << text;
  }
}

TEST_P(Stories260KTokenizer, TinyStoriesTextRoundTrips) {
  std::ifstream in(kShared + "/data/tinystories_valid_head794k.txt");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.resize(200000);
  while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();  // whole chars
  if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xC0) text.pop_back();
  const auto tok = tokenizer();
  const auto ids = tok->encode(text, false);
  EXPECT_LT(ids.size(), text.size() / 2) << "512 pieces still compress English text";
  EXPECT_EQ(tok->decode(ids), text);
}

TEST(SentencePieceWords, CuttingAtSpacesChangesNothing) {
  // The tokenizer cuts text before each "▁" when no piece holds "▁" past a leading run. A piece
  // that can never be formed ("\x01▁\x01": "\x01" is no piece) but holds an inner "▁" turns
  // the cut off; the ids must not change.
  lm::TokenizerVocab vocab = lm::read_llama2c_tokenizer(kTokBin, 512);
  const auto cut = lm::make_tokenizer(vocab);
  vocab.tokens.push_back("\x01\xE2\x96\x81\x01");
  vocab.scores.push_back(-1e9f);
  vocab.token_types.push_back(lm::TokenType::kNormal);
  const auto whole = lm::make_tokenizer(vocab);
  std::ifstream in(kShared + "/data/tinyshakespeare.txt");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.resize(100000);
  for (const std::string& t : {text, std::string("  a  b\xF0 c \xE2\x96\x81 d\xF0"), std::string("   ")}) {
    const auto expected = whole->encode(t, true);
    EXPECT_EQ(cut->encode(t, true), expected);
  }
}

TEST_P(Stories260KTokenizer, ByteFallbackAndDecodeRules) {
  const auto tok = tokenizer();
  // 日 (E6 97 A5) is not a piece of this 512-token vocabulary: three byte tokens <0xE6> … ,
  // ids 3 + byte (ids 3..258 are <0x00>..<0xFF>).
  const auto ids = tok->encode("日", false);
  ASSERT_EQ(ids.size(), 4u);  // dummy-prefix "▁" + 3 bytes
  EXPECT_EQ(ids[1], 3 + 0xE6);
  EXPECT_EQ(ids[2], 3 + 0x97);
  EXPECT_EQ(ids[3], 3 + 0xA5);
  EXPECT_EQ(tok->decode_token(ids[0], ids[1]), "\xE6");
  EXPECT_EQ(tok->decode_token(1, 3 + 0x0A), "\n");
  // The leading space of a piece is dropped right after BOS only.
  const int32_t once = tok->encode("Once", false).at(0);
  EXPECT_EQ(tok->decode_token(1, once), "Once");
  EXPECT_EQ(tok->decode_token(once, once), " Once");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->vocab_size(), 512);
  const auto stops = tok->stop_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), 2), stops.end());
  EXPECT_THROW(tok->decode_token(1, 512), base::InvalidArgument);
  EXPECT_THROW(tok->decode_token(1, -1), base::InvalidArgument);
}

TEST_P(Stories260KTokenizer, HasNoChatTemplate) {
  EXPECT_THROW(tokenizer()->apply_chat_template({{"user", "hi"}}), base::Unsupported);
}

INSTANTIATE_TEST_SUITE_P(BothFiles, Stories260KTokenizer, ::testing::Values("tok512.bin", "stories260K.gguf"));

TEST(Llama2cTokenizerFile, MatchesTheGgufVocabulary) {
  // The GGUF was converted from tok512.bin by llama.cpp; after undoing the exporter's
  // "▁"->" " and "\n<s>\n" mappings the two vocabularies must agree piece for piece.
  const auto bin = lm::read_llama2c_tokenizer(kTokBin, 512);
  const auto gguf = lm::read_gguf_vocab(*lm::gguf::GgufFile::open(kGguf));
  ASSERT_EQ(bin.tokens.size(), gguf.tokens.size());
  for (size_t i = 0; i < bin.tokens.size(); ++i) {
    EXPECT_EQ(bin.tokens[i], gguf.tokens[i]) << "token " << i;
    EXPECT_EQ(bin.scores[i], gguf.scores[i]) << "token " << i;
    EXPECT_EQ(bin.token_types[i], gguf.token_types[i]) << "token " << i;
  }
}

TEST(Llama2cTokenizerFile, RejectsBadInput) {
  EXPECT_THROW(lm::read_llama2c_tokenizer(kTokBin, 0), base::InvalidArgument);
  EXPECT_THROW(lm::read_llama2c_tokenizer("/nonexistent/tok.bin", 512), base::FormatError);
  // Asking for more tokens than the file holds is a truncated file.
  EXPECT_THROW(lm::read_llama2c_tokenizer(kTokBin, 513), base::FormatError);
  const auto dir = std::filesystem::temp_directory_path() / "vq_tokenizer_spm_test";
  std::filesystem::create_directories(dir);
  const auto truncated = (dir / "truncated.bin").string();
  {
    std::ifstream in(kTokBin, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(truncated, std::ios::binary).write(bytes.data(), 100);
  }
  try {
    lm::read_llama2c_tokenizer(truncated, 512);
    FAIL() << "truncated file accepted";
  } catch (const base::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  const auto garbage = (dir / "garbage.bin").string();
  {
    const int32_t header = -5;
    std::ofstream(garbage, std::ios::binary).write(reinterpret_cast<const char*>(&header), 4);
  }
  EXPECT_THROW(lm::read_llama2c_tokenizer(garbage, 512), base::FormatError);
  std::filesystem::remove_all(dir);
}

TEST(MakeTokenizer, RejectsUnknownModelsAndBrokenVocabularies) {
  lm::TokenizerVocab vocab = lm::read_llama2c_tokenizer(kTokBin, 512);
  lm::TokenizerVocab t5 = vocab;
  t5.model = "t5";
  try {
    lm::make_tokenizer(t5);
    FAIL() << "t5 accepted";
  } catch (const base::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("'t5'"), std::string::npos) << e.what();
  }
  lm::TokenizerVocab short_scores = vocab;
  short_scores.scores.pop_back();
  EXPECT_THROW(lm::make_tokenizer(short_scores), base::FormatError);
  lm::TokenizerVocab bad_bos = vocab;
  bad_bos.bos_id = 512;
  EXPECT_THROW(lm::make_tokenizer(bad_bos), base::FormatError);
  lm::TokenizerVocab empty;
  EXPECT_THROW(lm::make_tokenizer(empty), base::FormatError);
}

}  // namespace
