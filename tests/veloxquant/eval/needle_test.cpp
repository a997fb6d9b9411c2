// Needle-in-a-haystack pieces on stories260K's tokenizer and model: the prompt holds the
// needle where asked and fits its budget, answers are matched exactly, the greedy decode used
// for answers equals the host's own greedy generate(), and identical caches answer alike.
#include "veloxquant/eval/needle.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "lm/generate.h"
#include "lm/load.h"
#include "veloxquant/eval/needle_report.h"
#include "veloxquant/eval/text_source.h"

namespace veloxquant::eval {
namespace {

const std::string kModel = std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
const std::string kFiller = std::string(VQ_SHARED_DIR) + "/data/tinystories_valid_head794k.txt";

class NeedleStories : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    loaded_ = new lm::LoadedModel(lm::load(kModel));
    filler_ = new std::string(read_text_file(kFiller).substr(0, 20000));
  }
  static void TearDownTestSuite() {
    delete loaded_;
    delete filler_;
  }
  static lm::LoadedModel* loaded_;
  static std::string* filler_;
};
lm::LoadedModel* NeedleStories::loaded_ = nullptr;
std::string* NeedleStories::filler_ = nullptr;

TEST(NeedleAnswer, ExactDigitsOnly) {
  EXPECT_TRUE(needle_answer_matches(" 48213.", "48213"));
  EXPECT_TRUE(needle_answer_matches("48213", "48213"));
  EXPECT_TRUE(needle_answer_matches("\n 48213 and", "48213"));
  EXPECT_FALSE(needle_answer_matches(" 482130", "48213"));  // a longer number is wrong
  EXPECT_FALSE(needle_answer_matches(" 4821", "48213"));
  EXPECT_FALSE(needle_answer_matches(" the number 48213", "48213"));
  EXPECT_FALSE(needle_answer_matches("", "48213"));
}

TEST_F(NeedleStories, PromptFitsAndPlacesTheNeedle) {
  const lm::Tokenizer& tok = *loaded_->tokenizer;
  for (double depth : {0.0, 0.5, 1.0}) {
    const NeedlePrompt p = build_needle_prompt(tok, *filler_, depth, "48213", 300);
    EXPECT_LE(p.tokens.size(), 300u);
    EXPECT_GE(p.tokens.size(), 270u);  // the haystack fills the budget
    EXPECT_NEAR(p.actual_depth, depth, 0.1) << "depth " << depth;
    const std::string text = tok.decode(p.tokens);
    const auto needle = text.find("The secret number is 48213.");
    ASSERT_NE(needle, std::string::npos) << text;
    EXPECT_NEAR(static_cast<double>(needle) / static_cast<double>(text.size()), depth, 0.15);
    const std::string question = "What is the secret number? The secret number is";
    ASSERT_GE(text.size(), question.size());
    EXPECT_EQ(text.substr(text.size() - question.size()), question);
  }
  EXPECT_THROW(build_needle_prompt(tok, *filler_, 1.5, "1", 300), base::InvalidArgument);
  EXPECT_THROW(build_needle_prompt(tok, *filler_, 0.5, "1", 10), base::InvalidArgument);
  EXPECT_THROW(build_needle_prompt(tok, "", 0.5, "1", 300), base::InvalidArgument);
}

TEST_F(NeedleStories, GreedyDecodeEqualsHostGenerate) {
  const lm::Model& model = *loaded_->model;
  const lm::Tokenizer& tok = *loaded_->tokenizer;
  const NeedlePrompt p = build_needle_prompt(tok, *filler_, 0.25, "31415", 200);
  const auto ours = greedy_continue(
      model, tok, p.tokens, [&model] { return model.native_make_cache(); }, 12, 64);
  std::vector<int32_t> host;
  lm::GenerateOptions options;
  options.max_tokens = 12;
  options.temperature = 0.0f;
  lm::stream_generate(model, tok, p.tokens, options, [&host](const lm::GenerationChunk& c) {
    if (c.token >= 0) host.push_back(c.token);
    return true;
  });
  EXPECT_EQ(ours, host);
}

TEST_F(NeedleStories, IdenticalCachesAnswerAlikeAndCellsAreComplete) {
  const lm::Model& model = *loaded_->model;
  NeedleOptions options;
  options.prompt_tokens = 160;
  options.depths = {0.0, 1.0};
  options.trials = 2;
  options.max_new_tokens = 4;
  auto native = [&model] { return model.native_make_cache(); };
  const auto cells = run_needle(model, *loaded_->tokenizer, *filler_, {{"a", native}, {"b", native}}, options);
  ASSERT_EQ(cells.size(), 4u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(cells[i].trials, 2);
    EXPECT_EQ(cells[i].answers, cells[i + 2].answers);
    EXPECT_EQ(cells[i].correct, cells[i + 2].correct);
  }
  const std::string table = needle_markdown_table(cells);
  EXPECT_NE(table.find("| a |"), std::string::npos);
  EXPECT_NE(table.find("depth 100%"), std::string::npos);
  options.prompt_tokens = 600;  // stories260K's context is 512
  EXPECT_THROW(run_needle(model, *loaded_->tokenizer, *filler_, {{"a", native}}, options), base::InvalidArgument);
}

}  // namespace
}  // namespace veloxquant::eval
