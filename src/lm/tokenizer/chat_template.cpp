#include "lm/tokenizer/chat_template.h"

#include "base/error.h"

namespace lm {

namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";

// Jinja string literals in templates write newlines either as real newlines or as "\n".
std::string unescape_jinja_literal(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      const char c = text[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;  // \' \" \\ keep the character
    } else {
      out += text[i];
    }
  }
  return out;
}

// Finds a default system message written as one literal: '<|im_start|>system\nTEXT<|im_end|>'.
// A literal that stops before <|im_end|> (e.g. '<|im_start|>system\n' + message['content'])
// is the ordinary system turn, not a default.
std::optional<std::string> find_default_system(std::string_view jinja) {
  const std::string marker = std::string(kImStart) + "system";
  for (size_t at = jinja.find(marker); at != std::string_view::npos; at = jinja.find(marker, at + 1)) {
    if (at == 0) continue;
    const char quote = jinja[at - 1];
    if (quote != '\'' && quote != '"') continue;
    size_t body = at + marker.size();
    if (jinja.substr(body, 1) == "\n") {
      body += 1;
    } else if (jinja.substr(body, 2) == "\\n") {
      body += 2;
    } else {
      continue;
    }
    // The literal's end: the first unescaped closing quote.
    size_t end = body;
    while (end < jinja.size() && jinja[end] != quote) end += jinja[end] == '\\' ? 2 : 1;
    if (end >= jinja.size()) continue;
    const std::string_view literal = jinja.substr(body, end - body);
    const size_t close = literal.find(kImEnd);
    if (close == std::string_view::npos) continue;
    return unescape_jinja_literal(literal.substr(0, close));
  }
  return std::nullopt;
}

std::string template_excerpt(const std::string& jinja) {
  std::string excerpt = jinja.substr(0, 80);
  for (char& c : excerpt) {
    if (c == '\n') c = ' ';
  }
  return jinja.size() > 80 ? excerpt + "..." : excerpt;
}

}  // namespace

ChatTemplate parse_chat_template(const std::string& jinja) {
  if (jinja.empty()) throw base::Unsupported("this model has no chat template (tokenizer.chat_template is empty)");
  if (jinja.find(kImStart) != std::string::npos && jinja.find(kImEnd) != std::string::npos) {
    ChatTemplate t;
    t.format = ChatFormat::kChatML;
    // Only a default that the template adds when the first message is not a system one.
    if (jinja.find("!= 'system'") != std::string::npos || jinja.find("!= \"system\"") != std::string::npos ||
        jinja.find("== 'system'") != std::string::npos || jinja.find("== \"system\"") != std::string::npos) {
      t.default_system = find_default_system(jinja);
    }
    return t;
  }
  throw base::Unsupported("chat template not recognised (supported: ChatML); template begins: \"" +
                          template_excerpt(jinja) + "\"");
}

std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  std::string out;
  auto turn = [&](std::string_view role, std::string_view content) {
    out.append(kImStart).append(role).append("\n").append(content).append(kImEnd).append("\n");
  };
  switch (chat_template.format) {
    case ChatFormat::kChatML:
      if (!messages.empty() && messages.front().role != "system" && chat_template.default_system) {
        turn("system", *chat_template.default_system);
      }
      for (const ChatMessage& m : messages) turn(m.role, m.content);
      if (add_generation_prompt) out.append(kImStart).append("assistant\n");
      break;
  }
  return out;
}

std::string render_chat_template(const std::string& jinja, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) {
  return render_chat(parse_chat_template(jinja), messages, add_generation_prompt);
}

}  // namespace lm
