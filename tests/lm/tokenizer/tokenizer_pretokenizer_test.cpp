// The hand-written pre-tokenizer regexes and the Unicode tables under them. Expected splits
// follow from the regexes' definitions (alternatives tried in order, greedy, \s+(?!\S)
// backing off one whitespace); category expectations are the Unicode Character Database's.
#include <gtest/gtest.h>

#include "base/error.h"
#include "lm/tokenizer/tokenizer_pretokenizer.h"
#include "lm/unicode/unicode_category.h"
#include "lm/unicode/utf8.h"

namespace {

using Words = std::vector<std::string>;

Words split(const char* pre, std::string_view text) {
  Words out;
  for (auto w : lm::PreTokenizer(pre).split(text)) out.emplace_back(w);
  return out;
}

TEST(UnicodeCategory, MatchesTheCharacterDatabase) {
  using lm::unicode::Category;
  using lm::unicode::category;
  EXPECT_EQ(category('a'), Category::kLetter);
  EXPECT_EQ(category(0x00E9), Category::kLetter);       // é
  EXPECT_EQ(category(0x65E5), Category::kLetter);       // 日
  EXPECT_EQ(category(0x0663), Category::kNumber);       // ARABIC-INDIC DIGIT THREE
  EXPECT_EQ(category(0x00BD), Category::kNumber);       // ½ (No)
  EXPECT_EQ(category(0x216B), Category::kNumber);       // Ⅻ (Nl)
  EXPECT_EQ(category(0x2014), Category::kPunctuation);  // — EM DASH
  EXPECT_EQ(category('_'), Category::kPunctuation);     // Pc
  EXPECT_EQ(category('$'), Category::kSymbol);          // Sc
  EXPECT_EQ(category(0x1F600), Category::kSymbol);      // 😀
  EXPECT_EQ(category(0x0301), Category::kMark);         // COMBINING ACUTE ACCENT
  EXPECT_EQ(category(0x00A0), Category::kSeparator);    // NBSP
  EXPECT_EQ(category(0x200D), Category::kOther);        // ZERO WIDTH JOINER (Cf)
  EXPECT_EQ(category(0xE000), Category::kOther);        // private use
  EXPECT_EQ(category(0x0378), Category::kUnassigned);
  EXPECT_EQ(category(0x10FFFF), Category::kUnassigned);
  EXPECT_EQ(category(0x110000), Category::kUnassigned);
  EXPECT_TRUE(lm::unicode::is_whitespace(0x3000));
  EXPECT_TRUE(lm::unicode::is_whitespace(0x85));
  EXPECT_FALSE(lm::unicode::is_whitespace(0x200B));  // ZERO WIDTH SPACE is not White_Space
}

TEST(Utf8, DecodesAndFlagsInvalidBytes) {
  const auto cps = lm::unicode::decode_utf8("a\xC3\xA9\xF0\x9F\x98\x80\xFF\xE6\x97");
  ASSERT_EQ(cps.size(), 6u);
  EXPECT_EQ(cps[1].value, 0xE9u);
  EXPECT_EQ(cps[2].value, 0x1F600u);
  EXPECT_EQ(cps[2].offset, 3u);
  EXPECT_EQ(cps[3].value, lm::unicode::kInvalidByte);
  EXPECT_EQ(cps[4].value, lm::unicode::kInvalidByte);  // truncated sequence: each byte alone
  EXPECT_EQ(lm::unicode::decode_utf8("\xC0\xAF")[0].value, lm::unicode::kInvalidByte);      // overlong
  EXPECT_EQ(lm::unicode::decode_utf8("\xED\xA0\x80")[0].value, lm::unicode::kInvalidByte);  // surrogate
}

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(split("gpt-2", "I'm here, they'll see"), (Words{"I", "'m", " here", ",", " they", "'ll", " see"}));
  // The whitespace run gives its last space to the next word; a run at the end stays whole.
  EXPECT_EQ(split("gpt-2", "a   b  "), (Words{"a", "  ", " b", "  "}));
  EXPECT_EQ(split("gpt-2", "x\n\ny"), (Words{"x", "\n", "\n", "y"}));
  EXPECT_EQ(split("gpt-2", "abc123 456!?"), (Words{"abc", "123", " 456", "!?"}));
  EXPECT_EQ(split("gpt-2", "café 😀😀"), (Words{"café", " 😀😀"}));
  EXPECT_TRUE(split("gpt-2", "").empty());
}

TEST(PreTokenizer, SmolLMIsolatesEveryDigitFirst) {
  // \p{N} splits first, so the gpt2 regex sees "a  " as a piece of its own: the space run ends
  // that piece and stays whole.
  EXPECT_EQ(split("smollm", "a  12 b"), (Words{"a", "  ", "1", "2", " b"}));
  EXPECT_EQ(split("smollm", "x½y"), (Words{"x", "½", "y"}));
}

TEST(PreTokenizer, Llama3AndQwen2) {
  EXPECT_EQ(split("llama-bpe", "12345"), (Words{"123", "45"}));
  EXPECT_EQ(split("qwen2", "12345"), (Words{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("llama-bpe", "HE'S ok"), (Words{"HE", "'S", " ok"}));    // contractions ignore case
  EXPECT_EQ(split("llama-bpe", "a \n\n b"), (Words{"a", " \n\n", " b"}));  // \s*[\r\n]+
  EXPECT_EQ(split("llama-bpe", "(hello"), (Words{"(hello"}));              // one leading non-letter joins the word
}

TEST(PreTokenizer, Default) {
  // Punctuation runs first, then gpt2, then digit runs, then ASCII digit triples.
  EXPECT_EQ(split("default", "hi!! 12345"), (Words{"hi", "!!", " ", "123", "45"}));
}

TEST(PreTokenizer, WordsCoverTheText) {
  const std::string text = "Mixed: ½ café\t\t 😀 <tag> it's 2024\r\n";
  for (const auto& name : lm::PreTokenizer::supported_names()) {
    std::string joined;
    for (const auto& w : split(name.c_str(), text)) {
      EXPECT_FALSE(w.empty()) << name;
      joined += w;
    }
    EXPECT_EQ(joined, text) << name;
  }
}

TEST(PreTokenizer, UnknownNameIsUnsupported) {
  try {
    const lm::PreTokenizer unknown("bogus");
    FAIL();
  } catch (const base::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("'bogus'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("smollm"), std::string::npos) << "lists what is supported";
  }
}

}  // namespace
