#include "lm/tokenizer/tokenizer.h"

#include "base/error.h"

namespace lm {

std::string Tokenizer::decode(const std::vector<int32_t>& tokens) const {
  std::string out;
  int32_t previous = bos_id().value_or(-1);
  for (int32_t token : tokens) {
    out += decode_token(previous, token);
    previous = token;
  }
  return out;
}

std::string Tokenizer::apply_chat_template(const std::vector<ChatMessage>&) const {
  throw base::Unsupported("this model has no chat template");
}

std::string Tokenizer::apply_custom_chat_template(const std::vector<ChatMessage>&, const std::string&) const {
  throw base::Unsupported("this tokenizer has no vocabulary to give a chat template its BOS/EOS tokens");
}

}  // namespace lm
