#pragma once
// Chat templates. GGUF files carry the model's Jinja template (tokenizer.chat_template), the
// one Hugging Face transformers renders in apply_chat_template; we interpret it with our own
// Jinja subset (lm/tokenizer/jinja/) under the same settings (trim_blocks, lstrip_blocks,
// transformers' tojson, raise_exception and strftime_now), so a prompt equals transformers'
// byte for byte (tests/lm/tokenizer/chat_template_test.cpp checks this on real templates).
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lm/tokenizer/jinja/template.h"
#include "lm/tokenizer/tokenizer.h"

namespace lm {

struct TokenizerVocab;

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  std::string bos_token;  // the texts of the vocabulary's BOS / EOS tokens, as transformers passes them
  std::string eos_token;
  std::function<std::time_t()> now;  // the clock strftime_now reads; empty: the system clock
};

class ChatTemplate {
 public:
  // Parses the template. Throws base::Unsupported for an empty template or a construct the
  // interpreter lacks, base::FormatError for a malformed one (both name line and column).
  explicit ChatTemplate(const std::string& jinja);

  // Renders messages (as the list of {role, content} dicts `messages`, with tools and
  // documents none). Throws jinja::TemplateRaised (a base::Unsupported) when the template
  // calls raise_exception, base::FormatError for an evaluation error.
  std::string render(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options) const;

 private:
  jinja::Template template_;
};

std::string render_chat_template(const std::string& jinja, const std::vector<ChatMessage>& messages,
                                 const ChatTemplateOptions& options);
std::string render_chat_template(const std::string& jinja, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt);

// What Tokenizer::apply_chat_template returns for a vocabulary: its template rendered with the
// generation prompt and its BOS/EOS texts. When encode(text, true) will add BOS itself and
// the template already wrote it (Gemma, Llama 3, Mistral do), the written one is dropped, as
// llama.cpp does, so that the prompt does not start with two BOS tokens. `template_override`,
// when given, replaces the vocabulary's template.
std::string apply_vocab_chat_template(const TokenizerVocab& vocab, const std::vector<ChatMessage>& messages,
                                      const std::string* template_override = nullptr);

}  // namespace lm
