// Chat templates rendered natively must equal what Jinja2 renders from the template text
// (fixtures: tools/make_tokenizer_fixtures.py), for SmolLM2's template (ChatML with a default
// system message) and for plain ChatML.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "lm/tokenizer/chat_template.h"

namespace {

nlohmann::json load_fixture() {
  std::ifstream in(std::string(VQ_SOURCE_DIR) + "/tests/fixtures/tokenizer/chat_template.json");
  return nlohmann::json::parse(in);
}

TEST(ChatTemplate, MatchesJinja2) {
  const auto fixture = load_fixture();
  ASSERT_EQ(fixture["cases"].size(), 16u);
  for (const auto& c : fixture["cases"]) {
    const std::string jinja = fixture["templates"][c["template"].get<std::string>()];
    std::vector<lm::ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    EXPECT_EQ(lm::render_chat_template(jinja, messages, c["add_generation_prompt"]), c["expected"].get<std::string>())
        << c["template"] << " with " << messages.size() << " messages";
  }
}

TEST(ChatTemplate, FindsSmolLM2DefaultSystemMessage) {
  const auto fixture = load_fixture();
  const auto t = lm::parse_chat_template(fixture["templates"]["smollm2"]);
  EXPECT_EQ(t.format, lm::ChatFormat::kChatML);
  ASSERT_TRUE(t.default_system.has_value());
  EXPECT_EQ(*t.default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_FALSE(lm::parse_chat_template(fixture["templates"]["plain_chatml"]).default_system.has_value());
}

TEST(ChatTemplate, EscapedNewlinesInLiterals) {
  // Some templates spell the newline as "\n" inside the literal rather than a real newline.
  const std::string jinja =
      "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nBe brief.\\nVery.<|im_end|>\\n' }}{% endif %}"
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>\\n'}}{% endfor %}";
  const auto t = lm::parse_chat_template(jinja);
  ASSERT_TRUE(t.default_system.has_value());
  EXPECT_EQ(*t.default_system, "Be brief.\nVery.");
  EXPECT_EQ(lm::render_chat(t, {{"user", "x"}}, false),
            "<|im_start|>system\nBe brief.\nVery.<|im_end|>\n<|im_start|>user\nx<|im_end|>\n");
}

TEST(ChatTemplate, UnknownTemplatesAreUnsupported) {
  const std::string llama2 = "{% for message in messages %}{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"
                             "{% endfor %}";
  try {
    lm::parse_chat_template(llama2);
    FAIL() << "llama-2 template accepted";
  } catch (const base::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("[INST]"), std::string::npos) << "names the template: " << e.what();
  }
  EXPECT_THROW(lm::parse_chat_template(""), base::Unsupported);
}

}  // namespace
