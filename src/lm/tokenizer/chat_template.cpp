#include "lm/tokenizer/chat_template.h"

#include "base/error.h"
#include "lm/tokenizer/jinja/builtins.h"
#include "lm/tokenizer/tokenizer_vocab.h"

namespace lm {

namespace {

jinja::Template parse_nonempty(const std::string& jinja) {
  if (jinja.empty()) throw base::Unsupported("this model has no chat template (tokenizer.chat_template is empty)");
  return jinja::Template(jinja);
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& jinja) : template_(parse_nonempty(jinja)) {}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options) const {
  std::vector<jinja::Value> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    list.push_back(
        jinja::Value::dict({{"role", jinja::Value::string(m.role)}, {"content", jinja::Value::string(m.content)}}));
  }
  // What transformers' render_jinja_template passes: messages, tools, documents,
  // add_generation_prompt and the tokenizer's special tokens, over the environment's globals.
  std::vector<std::pair<std::string, jinja::Value>> variables = jinja::make_globals(options.now);
  variables.emplace_back("messages", jinja::Value::list(std::move(list)));
  variables.emplace_back("tools", jinja::Value::none());
  variables.emplace_back("documents", jinja::Value::none());
  variables.emplace_back("add_generation_prompt", jinja::Value::boolean(options.add_generation_prompt));
  variables.emplace_back("bos_token", jinja::Value::string(options.bos_token));
  variables.emplace_back("eos_token", jinja::Value::string(options.eos_token));
  return template_.render(std::move(variables));
}

std::string render_chat_template(const std::string& jinja, const std::vector<ChatMessage>& messages,
                                 const ChatTemplateOptions& options) {
  return ChatTemplate(jinja).render(messages, options);
}

std::string render_chat_template(const std::string& jinja, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) {
  ChatTemplateOptions options;
  options.add_generation_prompt = add_generation_prompt;
  return render_chat_template(jinja, messages, options);
}

std::string apply_vocab_chat_template(const TokenizerVocab& vocab, const std::vector<ChatMessage>& messages,
                                      const std::string* template_override) {
  auto token_text = [&](const std::optional<int32_t>& id) {
    return id && *id >= 0 && static_cast<size_t>(*id) < vocab.tokens.size() ? vocab.tokens[static_cast<size_t>(*id)]
                                                                            : std::string();
  };
  ChatTemplateOptions options;
  options.bos_token = token_text(vocab.bos_id);
  options.eos_token = token_text(vocab.eos_id);
  std::string prompt =
      render_chat_template(template_override ? *template_override : vocab.chat_template, messages, options);
  if (vocab.add_bos && vocab.bos_id && !options.bos_token.empty() && prompt.rfind(options.bos_token, 0) == 0) {
    prompt.erase(0, options.bos_token.size());
  }
  return prompt;
}

}  // namespace lm
