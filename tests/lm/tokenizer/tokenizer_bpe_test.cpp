// Byte-level BPE on SmolLM2-135M-Instruct's vocabulary: ids must equal llama.cpp's
// (llama-cpp-python fixtures, tools/make_tokenizer_fixtures.py) for the file's own
// pre-tokenizer ("smollm") and for the others we implement (the fixture tool rewrote
// tokenizer.ggml.pre in vocabulary-only copies of the file), over English, numbers,
// punctuation, whitespace runs, contractions, many scripts, emoji, special tokens, code and a
// chunk of tinyshakespeare.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "lm/gguf/gguf_file.h"
#include "lm/load.h"
#include "lm/tokenizer/tokenizer.h"
#include "lm/tokenizer/tokenizer_vocab.h"

namespace {

const std::string kSmolLM2 = std::string(VQ_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

class SmolLM2Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kSmolLM2)) return;
    vocab_ = new lm::TokenizerVocab(lm::read_gguf_vocab(*lm::gguf::GgufFile::open(kSmolLM2)));
    std::ifstream in(std::string(VQ_SOURCE_DIR) + "/tests/fixtures/tokenizer/smollm2_encode.json");
    fixture_ = new nlohmann::json(nlohmann::json::parse(in));
  }
  static void TearDownTestSuite() {
    delete vocab_;
    delete fixture_;
    vocab_ = nullptr;
    fixture_ = nullptr;
  }
  void SetUp() override {
    if (!vocab_) GTEST_SKIP() << "SmolLM2 GGUF not found at " << kSmolLM2 << " (run scripts/fetch_models.sh)";
  }
  static std::shared_ptr<lm::Tokenizer> make(const std::string& pre) {
    lm::TokenizerVocab v = *vocab_;
    v.pre = pre;
    return lm::make_tokenizer(std::move(v));
  }
  static std::shared_ptr<lm::Tokenizer> tokenizer() { return lm::make_tokenizer(*vocab_); }

  static inline lm::TokenizerVocab* vocab_ = nullptr;
  static inline nlohmann::json* fixture_ = nullptr;
};

TEST_F(SmolLM2Tokenizer, FileDescribesASmolLMByteLevelBpe) {
  EXPECT_EQ(vocab_->model, "gpt2");
  EXPECT_EQ(vocab_->pre, "smollm");
  EXPECT_EQ(vocab_->tokens.size(), 49152u);
  EXPECT_EQ(vocab_->merges.size(), 48900u);
}

TEST_F(SmolLM2Tokenizer, EncodesAsLlamaCppForEveryPreTokenizer) {
  const auto& variants = (*fixture_)["pre_tokenizers"];
  ASSERT_EQ(variants.size(), 5u);
  for (const auto& [pre, cases] : variants.items()) {
    const auto tok = make(pre);
    ASSERT_GE(cases.size(), 20u);
    size_t total = 0;
    for (const auto& c : cases) {
      const std::string text = c["text"];
      const auto expected = c["ids"].get<std::vector<int32_t>>();
      total += expected.size();
      EXPECT_EQ(tok->encode(text, false), expected) << "pre=" << pre << " text: " << text;
    }
    EXPECT_GT(total, 1000u) << "the tinyshakespeare chunk alone is ~1000 tokens";
  }
}

TEST_F(SmolLM2Tokenizer, LoadedModelCarriesTheSameTokenizer) {
  // The path the CLI takes: lm::load builds the tokenizer from the file's metadata.
  const auto loaded = lm::load(kSmolLM2);
  ASSERT_TRUE(loaded.tokenizer);
  for (const auto& c : (*fixture_)["pre_tokenizers"]["smollm"]) {
    EXPECT_EQ(loaded.tokenizer->encode(c["text"].get<std::string>(), false), c["ids"].get<std::vector<int32_t>>());
  }
  EXPECT_EQ(loaded.tokenizer->apply_chat_template({{"user", "Hi"}}),
            tokenizer()->apply_chat_template({{"user", "Hi"}}));
}

TEST_F(SmolLM2Tokenizer, KnownIds) {
  // Values read off llama.cpp by hand: "Hello world" is two tokens; digits are split one by
  // one and the double space before them stays one token (it ends a piece).
  const auto tok = tokenizer();
  EXPECT_EQ(tok->encode("Hello world", true), (std::vector<int32_t>{19556, 905}))
      << "add_bos_token is false in this file, so no BOS even when asked";
  EXPECT_EQ(tok->encode("a  12345 b", false), (std::vector<int32_t>{81, 256, 33, 34, 35, 36, 37, 278}));
  EXPECT_EQ(tok->encode("<|im_start|>user\nhi<|im_end|>", false), (std::vector<int32_t>{1, 4093, 198, 6004, 2}));
}

TEST_F(SmolLM2Tokenizer, RoundTrips) {
  const auto tok = tokenizer();
  for (const auto& c : (*fixture_)["pre_tokenizers"]["smollm"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tok->decode(tok->encode(text, false)), text) << text;
  }
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

TEST_F(SmolLM2Tokenizer, InvalidUtf8BecomesReplacementCharacters) {
  // As llama.cpp: every byte outside valid UTF-8 is encoded as U+FFFD.
  const auto tok = tokenizer();
  ASSERT_EQ((*fixture_)["invalid_utf8"].size(), 3u);
  for (const auto& c : (*fixture_)["invalid_utf8"]) {
    const std::string bytes = from_hex(c["hex"]);
    EXPECT_EQ(tok->encode(bytes, false), c["ids"].get<std::vector<int32_t>>()) << c["hex"];
  }
  EXPECT_EQ(tok->decode(tok->encode("a\xff", false)), "a\xEF\xBF\xBD");
}

TEST_F(SmolLM2Tokenizer, WholeTinyShakespeareRoundTrips) {
  std::ifstream in(std::string(VQ_SHARED_DIR) + "/data/tinyshakespeare.txt");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(text.size(), 1000000u);
  const auto tok = tokenizer();
  const auto ids = tok->encode(text, false);
  // About 3.3 bytes per token for English with a 49k vocabulary; far off means broken merges.
  EXPECT_GT(ids.size(), text.size() / 5);
  EXPECT_LT(ids.size(), text.size() / 2);
  EXPECT_EQ(tok->decode(ids), text);
}

TEST_F(SmolLM2Tokenizer, DecodesPiecesToBytes) {
  const auto tok = tokenizer();
  EXPECT_EQ(tok->decode_token(-1, 905), " world");  // stored as "Ġworld"
  EXPECT_EQ(tok->decode_token(-1, 198), "\n");      // stored as "Ċ"
  EXPECT_EQ(tok->decode_token(-1, 1), "<|im_start|>");
  // An emoji split across tokens decodes to its raw UTF-8 bytes, one part per token.
  const auto ids = tok->encode("😀", false);
  ASSERT_GE(ids.size(), 2u);
  std::string joined;
  for (int32_t id : ids) joined += tok->decode_token(-1, id);
  EXPECT_EQ(joined, "\xF0\x9F\x98\x80");
  EXPECT_THROW(tok->decode_token(-1, 49152), base::InvalidArgument);
}

TEST_F(SmolLM2Tokenizer, SpecialIdsAndStops) {
  const auto tok = tokenizer();
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->token_text(2), "<|im_end|>");
  const auto stops = tok->stop_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), 2), stops.end()) << "<|im_end|> ends a turn";
  EXPECT_NE(std::find(stops.begin(), stops.end(), 0), stops.end()) << "<|endoftext|> ends a turn";
  EXPECT_EQ(std::find(stops.begin(), stops.end(), 1), stops.end()) << "<|im_start|> does not";
}

TEST_F(SmolLM2Tokenizer, LongerSpecialWinsAndPartialSpecialIsText) {
  // "<|im_start" without "|>" is ordinary text; specials are matched whole, even glued.
  const auto tok = tokenizer();
  const auto ids = tok->encode("<|im_start|><|im_end|><|im_start", false);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  for (size_t i = 2; i < ids.size(); ++i) EXPECT_GT(ids[i], 16) << "no special in the tail";
}

TEST_F(SmolLM2Tokenizer, ChatTemplateIsChatML) {
  const auto tok = tokenizer();
  const std::string prompt = tok->apply_chat_template({{"user", "Hi"}});
  EXPECT_EQ(prompt,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const auto ids = tok->encode(prompt, false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 3) << "three <|im_start|> tokens";
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2) << "two <|im_end|> tokens";
}

TEST_F(SmolLM2Tokenizer, UnknownPreTokenizerIsUnsupported) {
  try {
    make("no-such-pre");
    FAIL() << "accepted";
  } catch (const base::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-pre'"), std::string::npos) << e.what();
  }
}

TEST_F(SmolLM2Tokenizer, MalformedMergeIsAFormatError) {
  lm::TokenizerVocab v = *vocab_;
  v.merges[7] = "nospace";
  EXPECT_THROW(lm::make_tokenizer(std::move(v)), base::FormatError);
}

}  // namespace
