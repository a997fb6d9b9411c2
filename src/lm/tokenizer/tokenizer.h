#pragma once
// lm::Tokenizer — text <-> token ids. Implementations: SentencePiece-style (GGUF "llama",
// llama2.c tokenizer files) and byte-level BPE (GGUF "gpt2").
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lm {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes text. add_bos prepends the BOS token when the vocabulary has one. SentencePiece
  // tokenizers add the dummy-prefix space as llama2.c / llama.cpp do.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
  // Decodes one token as it should be printed after `previous` (SentencePiece strips the
  // leading space after BOS; byte tokens are raw bytes and may be partial UTF-8).
  virtual std::string decode_token(int32_t previous, int32_t token) const = 0;
  std::string decode(const std::vector<int32_t>& tokens) const;

  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // Tokens that end a turn besides EOS (e.g. <|im_end|>).
  virtual std::vector<int32_t> stop_ids() const { return {}; }
  virtual std::string token_text(int32_t token) const = 0;

  // Applies the model's chat template (from GGUF metadata) with the generation prompt added,
  // ready for encode(text, true): a BOS the template writes is left to encode. Throws
  // base::Unsupported when the model has no template or one this build cannot interpret, or
  // when the template refuses the conversation (raise_exception); base::FormatError when the
  // template is malformed.
  virtual std::string apply_chat_template(const std::vector<ChatMessage>& messages) const;
  // The same with `jinja` in place of the model's template (for a file that carries none).
  virtual std::string apply_custom_chat_template(const std::vector<ChatMessage>& messages,
                                                 const std::string& jinja) const;
};

}  // namespace lm
