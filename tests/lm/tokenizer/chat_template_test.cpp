// Chat templates rendered by our Jinja interpreter must equal, byte for byte, what
// transformers' apply_chat_template renders from the same template text (fixtures:
// tools/reference/make_chat_template_fixtures.py) - on the templates of SmolLM2, Gemma 2/3,
// Llama 3/3.1/3.2, Mistral, Phi-3/3.5/4, Qwen 2.5/3, Zephyr, DeepSeek and Granite, over
// conversations with and without a system message, multi-turn, non-ASCII and quoting, with
// and without the generation prompt. Where the template raises (raise_exception, or an
// undefined value used), we must throw the matching error instead.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include <algorithm>
#include <filesystem>

#include "chat_template_fixtures.h"
#include "base/error.h"
#include "lm/gguf/gguf_file.h"
#include "lm/load.h"
#include "lm/tokenizer/chat_template.h"
#include "lm/tokenizer/jinja/error.h"
#include "lm/tokenizer/tokenizer_vocab.h"

namespace {

using chat_template_fixtures::fixed_now;
using chat_template_fixtures::kFixtures;
using chat_template_fixtures::read_file;

nlohmann::json load_fixture() {
  std::ifstream in(kFixtures + "chat_templates.json");
  return nlohmann::json::parse(in);
}

std::vector<lm::ChatMessage> messages_of(const nlohmann::json& c) {
  std::vector<lm::ChatMessage> messages;
  for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
  return messages;
}

TEST(ChatTemplate, MatchesTransformersOnRealTemplates) {
  const auto fixture = load_fixture();
  ASSERT_EQ(fixture["templates"].size(), 20u);
  ASSERT_EQ(fixture["cases"].size(), 280u);
  std::map<std::string, lm::ChatTemplate> templates;
  for (const auto& [name, t] : fixture["templates"].items()) {
    templates.emplace(name, lm::ChatTemplate(read_file(kFixtures + t["file"].get<std::string>())));
  }
  int rendered = 0, raised = 0, failed = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string name = c["template"];
    const auto& t = fixture["templates"][name];
    lm::ChatTemplateOptions options;
    options.add_generation_prompt = c["add_generation_prompt"];
    options.bos_token = t["bos_token"];
    options.eos_token = t["eos_token"];
    options.now = fixed_now;
    const auto messages = messages_of(c);
    const std::string label = name + " with " + std::to_string(messages.size()) +
                              " messages, add_generation_prompt=" + (options.add_generation_prompt ? "true" : "false");
    if (c.contains("expected")) {
      try {
        EXPECT_EQ(templates.at(name).render(messages, options), c["expected"].get<std::string>()) << label;
        ++rendered;
      } catch (const std::exception& e) {
        ADD_FAILURE() << label << ": " << e.what();
      }
    } else if (c.contains("raises")) {
      try {
        templates.at(name).render(messages, options);
        ADD_FAILURE() << label << ": rendered, but transformers raised " << c["raises"];
      } catch (const lm::jinja::TemplateRaised& e) {
        EXPECT_EQ(e.message(), c["raises"].get<std::string>()) << label;
        EXPECT_NE(std::string(e.what()).find(c["raises"].get<std::string>()), std::string::npos) << e.what();
        ++raised;
      }
    } else {
      try {
        templates.at(name).render(messages, options);
        ADD_FAILURE() << label << ": rendered, but Jinja2 failed with " << c["error"];
      } catch (const base::FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("chat template, line "), std::string::npos) << e.what();
        ++failed;
      }
    }
  }
  EXPECT_EQ(rendered, 230);
  EXPECT_EQ(raised, 30);
  EXPECT_EQ(failed, 20);
}

TEST(ChatTemplate, RenderChatTemplateKeepsItsSignature) {
  // SmolLM2's template through the two-argument form the callers used before.
  const std::string smol = read_file(kFixtures + "chat_templates/smollm2.jinja");
  EXPECT_EQ(lm::render_chat_template(smol, {{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, EmptyTemplateIsUnsupported) {
  EXPECT_THROW(lm::ChatTemplate(""), base::Unsupported);
  EXPECT_THROW(lm::render_chat_template("", {{"user", "x"}}, true), base::Unsupported);
}

TEST(ChatTemplate, VocabularyDropsTheBosTheTemplateWrites) {
  // Gemma writes {{ bos_token }}; encode(prompt, true) adds BOS itself, so the prompt handed to
  // it must not start with one.
  lm::TokenizerVocab vocab;
  vocab.tokens = {"<pad>", "<eos>", "<bos>"};
  vocab.bos_id = 2;
  vocab.eos_id = 1;
  vocab.add_bos = true;
  vocab.chat_template = read_file(kFixtures + "chat_templates/gemma3.jinja");
  EXPECT_EQ(lm::apply_vocab_chat_template(vocab, {{"user", "Hi"}}),
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  vocab.add_bos = false;
  EXPECT_EQ(lm::apply_vocab_chat_template(vocab, {{"user", "Hi"}}),
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplate, RaiseExceptionNamesTheTemplatesMessage) {
  const std::string gemma2 = read_file(kFixtures + "chat_templates/gemma2.jinja");
  try {
    lm::render_chat_template(gemma2, {{"system", "s"}, {"user", "u"}}, true);
    FAIL() << "gemma2 accepted a system message";
  } catch (const base::Unsupported& e) {
    EXPECT_EQ(std::string(e.what()), "the chat template refused the conversation: System role not supported");
  }
}

TEST(ChatTemplate, GemmaFileWithTheGemma3Template) {
  // models/gemma-3-270m-q4_k_m.gguf carries no template; `generate --chat-template` gives it
  // Gemma 3's. The prompt must leave BOS to encode() and keep the turn markers special.
  const std::string path = std::string(VQ_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (scripts/fetch_models.sh fetches it)";
  const auto file = lm::gguf::GgufFile::open(path);
  const auto tok = lm::make_tokenizer(lm::read_gguf_vocab(*file));
  EXPECT_THROW(tok->apply_chat_template({{"user", "Hi"}}), base::Unsupported);
  const std::string prompt =
      tok->apply_custom_chat_template({{"user", "Hi"}}, read_file(kFixtures + "chat_templates/gemma3.jinja"));
  EXPECT_EQ(prompt, "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  const auto ids = tok->encode(prompt, true);
  ASSERT_TRUE(tok->bos_id().has_value());
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], *tok->bos_id());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok->bos_id()), 1) << "one BOS";
  const auto start_of_turn = tok->encode("<start_of_turn>", false);
  ASSERT_EQ(start_of_turn.size(), 1u) << "<start_of_turn> is one special token";
  EXPECT_EQ(std::count(ids.begin(), ids.end(), start_of_turn[0]), 2);
  EXPECT_EQ(ids[1], start_of_turn[0]);
}

}  // namespace
