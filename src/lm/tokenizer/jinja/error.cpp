#include "lm/tokenizer/jinja/error.h"

namespace lm::jinja {

std::string where(const Position& at) {
  return "line " + std::to_string(at.line) + ", column " + std::to_string(at.column);
}

TemplateRaised::TemplateRaised(std::string message)
    : base::Unsupported("the chat template refused the conversation: " + message), message_(std::move(message)) {}

void syntax_error(const Position& at, const std::string& what) {
  throw base::FormatError("chat template, " + where(at) + ": " + what);
}

void unsupported(const Position& at, const std::string& what) {
  throw base::Unsupported("chat template, " + where(at) + ": " + what + " is not supported by this interpreter");
}

}  // namespace lm::jinja
