// decode(encode(text)) == text for random valid UTF-8 drawn from a pool that stresses the
// tokenizers: ASCII words and digits, whitespace of every kind, Latin/Greek/CJK letters,
// combining marks, emoji with joiners, and fragments of special tokens (whole ones too).
// Both tokenizers must reproduce the text byte for byte; the seed is fixed.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "lm/gguf/gguf_file.h"
#include "lm/load.h"
#include "lm/tokenizer/tokenizer.h"
#include "lm/tokenizer/tokenizer_vocab.h"

namespace {

const std::vector<std::string> kPool = {"a",
                                        "Z",
                                        "the",
                                        " ",
                                        "  ",
                                        "\t",
                                        "\n",
                                        "\r\n",
                                        "\xC2\xA0",
                                        "\xE3\x80\x80",
                                        "0",
                                        "42",
                                        "'s",
                                        "'LL",
                                        "!",
                                        "...",
                                        "$",
                                        "_",
                                        "\xC3\xA9",
                                        "e\xCC\x81",
                                        "\xCE\xA9",
                                        "\xE6\x97\xA5",
                                        "\xED\x95\x9C",
                                        "\xF0\x9F\x98\x80",
                                        "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
                                        "\xC2\xBD",
                                        "<",
                                        "|",
                                        ">",
                                        "<s>",
                                        "</s>",
                                        "<unk>",
                                        "<|im_start|>",
                                        "<|im_end|>",
                                        "<|im_",
                                        "<0x41>"};
// SentencePiece writes spaces as U+2581 "▁", so a literal "▁" in the text comes back as a space
// (as in every SentencePiece implementation); only byte-level BPE gets this one.
const std::string kSpaceMarker = "\xE2\x96\x81";

std::string random_text(std::mt19937& rng, bool with_space_marker) {
  std::uniform_int_distribution<size_t> pick(0, kPool.size() - 1);
  std::uniform_int_distribution<int> length(0, 24);
  std::string text;
  for (int i = length(rng); i > 0; --i) {
    text += kPool[pick(rng)];
    if (with_space_marker && i % 7 == 0) text += kSpaceMarker;
  }
  return text;
}

void expect_round_trips(const lm::Tokenizer& tok, uint32_t seed, bool with_space_marker) {
  std::mt19937 rng(seed);
  for (int i = 0; i < 400; ++i) {
    const std::string text = random_text(rng, with_space_marker);
    const auto ids = tok.encode(text, false);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << id;
    ASSERT_EQ(tok.decode(ids), text) << "case " << i;
  }
}

TEST(TokenizerRoundTrip, SentencePieceStories260K) {
  const auto tok = lm::make_tokenizer(
      lm::read_llama2c_tokenizer(std::string(VQ_SHARED_DIR) + "/models/stories260K/tok512.bin", 512));
  expect_round_trips(*tok, 1234, /*with_space_marker=*/false);
}

TEST(TokenizerRoundTrip, ByteLevelBpeSmolLM2AllPreTokenizers) {
  const std::string path = std::string(VQ_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "SmolLM2 GGUF not found at " << path;
  const lm::TokenizerVocab vocab = lm::read_gguf_vocab(*lm::gguf::GgufFile::open(path));
  for (const char* pre : {"smollm", "gpt-2", "default", "llama-bpe", "qwen2"}) {
    lm::TokenizerVocab v = vocab;
    v.pre = pre;
    SCOPED_TRACE(pre);
    expect_round_trips(*lm::make_tokenizer(std::move(v)), 99, /*with_space_marker=*/true);
  }
}

}  // namespace
