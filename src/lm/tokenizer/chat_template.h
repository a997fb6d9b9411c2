#pragma once
// Chat templates. GGUF files carry a Jinja template (tokenizer.chat_template); rather than
// embed a Jinja interpreter we recognise the template families we support from their text and
// render them natively. Today: ChatML (<|im_start|>role\ncontent<|im_end|>\n), including the
// variant that inserts a default system message when the conversation does not start with
// one (SmolLM2, Qwen2).
#include <optional>
#include <string>
#include <vector>

#include "lm/tokenizer/tokenizer.h"

namespace lm {

enum class ChatFormat { kChatML };

struct ChatTemplate {
  ChatFormat format = ChatFormat::kChatML;
  // Inserted as the first message when the conversation does not start with a system one.
  std::optional<std::string> default_system;
};

// Recognises a template's family from its text. Throws base::Unsupported (naming the start
// of the template) for a family this build cannot render, and for an empty template.
ChatTemplate parse_chat_template(const std::string& jinja);

// Renders messages; add_generation_prompt appends the header of the assistant's turn.
std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

// parse_chat_template + render_chat.
std::string render_chat_template(const std::string& jinja, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt);

}  // namespace lm
